//! Redaction of secrets in what we print.
//!
//! Everything that prints a database or broker URL (logs, errors, `outbox check`, `outbox
//! status`) passes it through [`redact_url`] first. The rules err on the side of hiding too
//! much: a URL that is only half valid (an unencoded `/`, `@` or `?` in a password) is still
//! redacted, at the cost of sometimes hiding a host name too.

use crate::text::run_start;

/// `url` with every secret replaced by `***`, for logs, errors and `outbox check` output:
///
/// - the password in the user info (`postgres://u:***@h/db`), also when the password holds an
///   unencoded `/`, `?`, `#` or `@` (the user info ends at the **last** `@` before the path);
/// - a user info without a password where it is a token (`nats://***@h`, `tls://***@h`,
///   `redis://***@h`, `https://***@h`, any unknown scheme): only PostgreSQL, MySQL/MariaDB and
///   AMQP URLs keep a bare user name (`postgres://app@h/db`), as their clients read it as one;
/// - the values of query and fragment parameters whose names carry secrets (`password`,
///   `sslpassword`, `pass`, `pwd`, `token`, `auth_token`, `secret`, `api_key`, `key`,
///   `signature`, ... compared case-insensitively, `-` and `_` ignored);
/// - a string that is not a `scheme://` URL (a libpq `host=h password=x` string, a
///   `sqlite:app.db?password=x` path) has the values of such `name=value` pairs redacted.
pub fn redact_url(url: &str) -> String {
    let Some(scheme) = scheme_of(url) else {
        return redact_pairs(url);
    };
    let rest = &url[scheme.len() + 3..];
    // The authority ends at the first `/`, `?` or `#` after the last `@` (a password may hold
    // any of them unencoded), or, without an `@`, at the first of them. A URL whose authority
    // is empty (`sqlite:///tmp/a@b.db`) has no user info, whatever its path holds.
    let at = if rest.starts_with(['/', '?', '#']) { None } else { rest.rfind('@') };
    // A `@` in a query value (`?password=a@b`) also looks like the end of a user info, and a
    // password may hold an unencoded `?` or `#`: when the user info so found holds either,
    // nothing tells which it is, so nothing after the scheme is shown.
    if at.is_some_and(|a| rest[..a].contains(['?', '#'])) {
        return format!("{scheme}://***");
    }
    let from = at.map_or(0, |a| a + 1);
    let authority_end = rest[from..].find(['/', '?', '#']).map_or(rest.len(), |i| from + i);
    let mut out = String::with_capacity(url.len() + 4);
    out.push_str(&url[..scheme.len() + 3]);
    if let Some(at) = at {
        let userinfo = &rest[..at];
        match userinfo.split_once(':') {
            Some((user, _)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            None if keeps_user_name(scheme) => out.push_str(userinfo),
            None => out.push_str("***"),
        }
        out.push('@');
        out.push_str(&rest[at + 1..authority_end]);
    } else {
        out.push_str(&rest[..authority_end]);
    }
    let tail = &rest[authority_end..];
    let (before_fragment, fragment) = match tail.find('#') {
        Some(i) => (&tail[..i], Some(&tail[i + 1..])),
        None => (tail, None),
    };
    match before_fragment.find('?') {
        Some(q) => {
            out.push_str(&before_fragment[..=q]);
            out.push_str(&redact_pairs(&before_fragment[q + 1..]));
        }
        None => out.push_str(before_fragment),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(&redact_pairs(fragment));
    }
    out
}

/// The scheme of `s` when `s` starts with `scheme://` (RFC 3986 scheme characters).
fn scheme_of(s: &str) -> Option<&str> {
    let end = s.find("://")?;
    let scheme = &s[..end];
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic() && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
        .then_some(scheme)
}

/// Schemes whose clients read a user info without `:` as a user name (not a secret).
fn keeps_user_name(scheme: &str) -> bool {
    ["postgres", "postgresql", "mysql", "mariadb", "amqp", "amqps"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(scheme))
}

/// True when a parameter of this name carries a secret.
fn is_secret_name(name: &str) -> bool {
    let n: String = percent_decoded(name)
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    const PARTS: [&str; 11] = [
        "pass",
        "pwd",
        "secret",
        "token",
        "apikey",
        "accesskey",
        "privatekey",
        "credential",
        "auth",
        "signature",
        "session",
    ];
    PARTS.iter().any(|p| n.contains(p)) || matches!(n.as_str(), "key" | "sig" | "jwt" | "nkey" | "seed")
}

/// `name` with `%XX` escapes of ASCII characters decoded (anything else is kept as written).
fn percent_decoded(name: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }
    let b = name.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                let v = h * 16 + l;
                if v.is_ascii() {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` with the value of every `name=value` pair whose name carries a secret replaced by
/// `***`. Pairs are separated by `&`, `;`, white space or quotes; a value in quotes is redacted
/// up to its closing quote.
fn redact_pairs(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(rel) = s[search..].find('=') {
        let eq = search + rel;
        let name_start = run_start(s, eq, |c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '%'));
        let name = &s[name_start..eq];
        let value_start = eq + 1;
        if name.is_empty() || !is_secret_name(name) {
            search = value_start;
            continue;
        }
        let value = &s[value_start..];
        let value_len = match value.chars().next() {
            Some(q @ ('\'' | '"')) => value[1..].find(q).map_or(value.len(), |i| i + 2),
            _ => value
                .find(|c: char| c.is_whitespace() || matches!(c, '&' | ';' | '"' | '\'' | '`'))
                .unwrap_or(value.len()),
        };
        out.push_str(&s[copied..value_start]);
        if value_len > 0 {
            out.push_str("***");
        }
        copied = value_start + value_len;
        search = copied;
    }
    out.push_str(&s[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    /// Each `(url, shown)`: `redact_url(url)` is `shown`.
    #[track_caller]
    fn redacts(cases: &[(&str, &str)]) {
        for &(url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    /// Each URL holds nothing to redact: it is shown as it is.
    #[track_caller]
    fn kept(urls: &[&str]) {
        for &url in urls {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn passwords_in_the_user_info() {
        redacts(&[
            ("postgres://u:secret@h:5432/db", "postgres://u:***@h:5432/db"),
            ("amqp://guest:guest@127.0.0.1:5672/%2f", "amqp://guest:***@127.0.0.1:5672/%2f"),
            ("postgres://u:p%40ss@h/db?x=1", "postgres://u:***@h/db?x=1"),
            ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
            ("nats://user:pa55@h:4222", "nats://user:***@h:4222"),
            ("postgres://u:pw@[::1]:5432/db", "postgres://u:***@[::1]:5432/db"),
            ("postgres://u:pw@h1:5432,h2:5432/db", "postgres://u:***@h1:5432,h2:5432/db"),
            ("POSTGRES://u:pw@h/db", "POSTGRES://u:***@h/db"),
            ("postgres://u:@h/db", "postgres://u:***@h/db"),
        ]);
    }

    #[test]
    fn passwords_with_unencoded_delimiters() {
        redacts(&[
            // The user info ends at the last `@`: a `/`, `?`, `#` or `@` before it is the password's.
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            ("mysql://root:a/b/c@127.0.0.1:3306/shop", "mysql://root:***@127.0.0.1:3306/shop"),
            // A `?` or `#` before it may as well start a query holding an `@`: nothing is shown.
            ("postgres://u:pa?ss@h/db", "postgres://***"),
            ("postgres://u:pa#ss@h/db", "postgres://***"),
            ("postgres://app@h:5432/db?a=&password=SX@SX&x=1", "postgres://***"),
        ]);
        // Without an `@`, the authority ends at the first `/`.
        kept(&["postgres://h:5432/db/x"]);
        // An `@` in the query makes the rule hide too much, never too little.
        let r = redact_url("postgres://u:hunter2@h/db?application_name=a@b");
        assert!(!r.contains("hunter2"), "{r}");
    }

    #[test]
    fn tokens_as_user_info() {
        redacts(&[
            ("nats://s3cr3tT0ken@h:4222", "nats://***@h:4222"),
            ("tls://s3cr3tT0ken@h:4222", "tls://***@h:4222"),
            ("NATS://s3cr3tT0ken@h:4222", "NATS://***@h:4222"),
            ("https://ghp_abc@github.com/x", "https://***@github.com/x"),
            ("redis://tok@h", "redis://***@h"),
            ("nats://tok@h?x=1", "nats://***@h?x=1"),
        ]);
        // Plain user names stay where the client reads them as user names.
        kept(&[
            "postgres://app@h/db",
            "postgresql://app@h/db",
            "mysql://root@h/db",
            "mariadb://root@h/db",
            "amqp://guest@h/%2f",
        ]);
    }

    #[test]
    fn secret_query_and_fragment_parameters() {
        redacts(&[
            ("postgres://u@h/db?password=X", "postgres://u@h/db?password=***"),
            (
                "postgres://u@h/db?sslmode=require&PassWord=X&application_name=relay",
                "postgres://u@h/db?sslmode=require&PassWord=***&application_name=relay",
            ),
            ("https://h/cb#access_token=abc&x=1", "https://h/cb#access_token=***&x=1"),
            ("postgres://u:pw@h/db?password=X#token=Y", "postgres://u:***@h/db?password=***#token=***"),
            ("postgres://h/db?password=", "postgres://h/db?password="),
        ]);
        for name in [
            "password",
            "pass",
            "pwd",
            "token",
            "secret",
            "sslpassword",
            "auth_token",
            "api_key",
            "api-key",
            "apiKey",
            "access_token",
            "client_secret",
            "key",
            "sig",
            "pass%77ord",
        ] {
            let url = format!("nats://h:4222/?{name}=hunter2&x=1");
            assert_eq!(redact_url(&url), format!("nats://h:4222/?{name}=***&x=1"), "{name}");
        }
        kept(&[
            "postgres://h/db?sslmode=require&application_name=relay&sslkey=/etc/k.pem",
            "postgres://h/db?password",
        ]);
    }

    #[test]
    fn strings_that_are_not_scheme_urls() {
        kept(&[
            "sqlite://x.db",
            "sqlite:app.db",
            "sqlite::memory:",
            "sqlite:///tmp/a@b.db",
            "nats://127.0.0.1:4222",
            "plain text",
            "",
            "://x",
        ]);
        redacts(&[
            ("sqlite:app.db?password=x&mode=rwc", "sqlite:app.db?password=***&mode=rwc"),
            ("host=db user=app password=hunter2 dbname=shop", "host=db user=app password=*** dbname=shop"),
            ("host=db password='hun ter2' dbname=shop", "host=db password=*** dbname=shop"),
            ("Server=db;Pwd=hunter2;Database=x", "Server=db;Pwd=***;Database=x"),
            ("a=b=password=c", "a=b=password=***"),
        ]);
    }

    mod prop {
        use proptest::prelude::*;

        use super::super::redact_url;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Whatever a password holds (unencoded delimiters included), it never survives.
            #[test]
            fn a_password_never_survives(
                scheme in prop_oneof![Just("postgres"), Just("mysql"), Just("nats"), Just("amqp"), Just("redis"), Just("https")],
                user in "[a-z]{0,8}",
                password in "PW[A-Za-z0-9/?#@:%!&=;]{1,20}",
                host in "[a-z0-9.]{1,12}(:[0-9]{1,5})?",
                path in "(/[a-z0-9]{0,8}){0,2}",
                query in "(\\?[a-z_]{1,8}=[a-z0-9]{0,8}(&[a-z_]{1,8}=[a-z0-9]{0,8}){0,2})?",
            ) {
                let url = format!("{scheme}://{user}:{password}@{host}{path}{query}");
                let shown = redact_url(&url);
                prop_assert!(!shown.contains(&password), "{url} -> {shown}");
                prop_assert!(!shown.contains("PW"), "{url} -> {shown}");
            }

            /// The same for a secret query parameter, and for a token as user info.
            #[test]
            fn a_secret_parameter_or_token_never_survives(
                name in prop_oneof![Just("password"), Just("PASSWORD"), Just("sslpassword"), Just("token"), Just("auth_token"), Just("api-key"), Just("Secret")],
                secret in "SX[A-Za-z0-9:/@%!]{1,20}",
                other in "[a-z]{1,6}=[a-z0-9]{0,6}",
            ) {
                let url = format!("postgres://app@h:5432/db?{other}&{name}={secret}&x=1");
                let shown = redact_url(&url);
                prop_assert!(!shown.contains("SX"), "{url} -> {shown}");
                // A token is the whole user info (with a `:` it is `user:password`).
                let token = secret.replace(':', "");
                let url = format!("nats://{token}@h:4222");
                let shown = redact_url(&url);
                prop_assert!(!shown.contains("SX"), "{url} -> {shown}");
            }
        }
    }
}
