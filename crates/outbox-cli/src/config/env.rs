//! `OUTBOX__<path>` environment overrides: `OUTBOX__STORES__0__URL=postgres://...` sets
//! `stores[0].url`; `OUTBOX__DESTINATIONS__ORDERS__SECRET=...` sets `destinations.orders.secret`.
//! Path segments are separated by `__`, matched case-insensitively against existing keys (with
//! `-` in a key matching `_`); a number selects an array element. Secrets belong here, not in
//! the file.
//!
//! A value takes the type of the value it replaces in the file (`OUTBOX__RELAY__BATCH_SIZE=50`
//! over `batch_size = 200` is an integer; `OUTBOX__ACK__SECRET=1234567890123456789` over a
//! string is a string). A key the file does not set is a string when its name says it is one
//! (secrets, URLs, names, addresses); otherwise a value that reads as an integer, float or
//! boolean is tried as one first, then as a string (see [`Override::guessed`]). Errors name the
//! variable and never echo its value.

use anyhow::bail;
use toml::{Table, Value};

const PREFIX: &str = "OUTBOX__";

/// One applied override.
#[derive(Debug, Clone)]
pub(crate) struct Override {
    /// The environment variable.
    pub(crate) var: String,
    /// The key it set, as errors name keys (`stores[0].url`).
    pub(crate) key: String,
    /// Its value, as given (for scrubbing it out of error messages).
    pub(crate) raw: String,
    /// The key is not in the file and its value was typed by its look (`50` as an integer).
    pub(crate) guessed: bool,
}

/// Applies every `OUTBOX__*` variable to `root`. With `guess_scalars` false, values whose
/// type had to be guessed stay strings. Returns what was applied.
pub(super) fn apply_overrides(
    root: &mut Table,
    vars: impl Iterator<Item = (String, String)>,
    guess_scalars: bool,
) -> anyhow::Result<Vec<Override>> {
    let mut vars: Vec<(String, String)> = vars.filter(|(k, _)| k.starts_with(PREFIX)).collect();
    vars.sort();
    let mut applied = Vec::with_capacity(vars.len());
    for (name, raw) in vars {
        let shown = outbox_core::text::printable(&name, 200).into_owned();
        let path: Vec<String> = name[PREFIX.len()..].split("__").map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            bail!("environment variable {shown}: empty path segment");
        }
        let mut key = String::new();
        let guessed = set(root, &path, &raw, guess_scalars, &mut key).map_err(|e| {
            if key.is_empty() {
                anyhow::anyhow!("environment variable {shown}: {e}")
            } else {
                anyhow::anyhow!("environment variable {shown} ({key}): {e}")
            }
        })?;
        applied.push(Override { var: shown, key, raw, guessed });
    }
    Ok(applied)
}

/// Key names whose values are always strings, whatever they look like.
fn is_string_key(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace('-', "_");
    const EXACT: [&str; 18] = [
        "url",
        "urls",
        "name",
        "owner",
        "listen",
        "host",
        "hosts",
        "user",
        "username",
        "subject",
        "stream",
        "exchange",
        "queue",
        "topic",
        "group",
        "type",
        "path",
        "client_id",
    ];
    const PARTS: [&str; 8] = ["secret", "pass", "pwd", "token", "key", "auth", "credential", "url"];
    EXACT.contains(&n.as_str()) || PARTS.iter().any(|p| n.contains(p))
}

/// `raw` typed by its look: integer, boolean, float, or `None` for a string.
fn guess(raw: &str) -> Option<Value> {
    if let Ok(i) = raw.parse::<i64>() {
        return Some(Value::Integer(i));
    }
    if let Ok(b) = raw.parse::<bool>() {
        return Some(Value::Boolean(b));
    }
    if raw.contains('.') && !raw.contains(':') {
        if let Ok(f) = raw.parse::<f64>() {
            return Some(Value::Float(f));
        }
    }
    None
}

/// The value to store over `existing` (the file's value at that key, if any); `Ok((value,
/// guessed))`. Errors never echo `raw`.
fn typed(
    existing: Option<&Value>,
    leaf: &str,
    raw: &str,
    guess_scalars: bool,
) -> Result<(Value, bool), String> {
    let expected = |what: &str| format!("expects {what} (like the file's value), got something else");
    match existing {
        Some(Value::String(_)) => Ok((Value::String(raw.to_owned()), false)),
        Some(Value::Integer(_)) => {
            raw.trim().parse::<i64>().map(|i| (Value::Integer(i), false)).map_err(|_| expected("an integer"))
        }
        Some(Value::Float(_)) => {
            raw.trim().parse::<f64>().map(|f| (Value::Float(f), false)).map_err(|_| expected("a number"))
        }
        Some(Value::Boolean(_)) => match raw.trim().to_ascii_lowercase().as_str() {
            "true" => Ok((Value::Boolean(true), false)),
            "false" => Ok((Value::Boolean(false), false)),
            _ => Err(expected("true or false")),
        },
        Some(Value::Table(_)) => {
            Err("names a table: set one of its keys instead (add __<KEY> to the variable's name)".into())
        }
        Some(Value::Array(_)) => {
            Err("names an array: set one of its elements instead (add __<INDEX> to the variable's name)"
                .into())
        }
        Some(Value::Datetime(_)) => Ok((Value::String(raw.to_owned()), false)),
        None if is_string_key(leaf) => Ok((Value::String(raw.to_owned()), false)),
        None => match guess(raw) {
            Some(v) if guess_scalars => Ok((v, true)),
            Some(_) => Ok((Value::String(raw.to_owned()), true)),
            None => Ok((Value::String(raw.to_owned()), false)),
        },
    }
}

fn matches(key: &str, segment: &str) -> bool {
    key.replace('-', "_").eq_ignore_ascii_case(segment)
}

/// Appends `segment` to a key path as errors spell it.
pub(crate) fn push_key(path: &mut String, segment: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    if !segment.is_empty() && segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        path.push_str(segment);
    } else {
        let escaped = outbox_core::text::printable(segment, 64).replace('"', "\\\"");
        path.push_str(&format!("\"{escaped}\""));
    }
}

/// Appends `[index]` to a key path.
pub(crate) fn push_index(path: &mut String, index: usize) {
    path.push_str(&format!("[{index}]"));
}

fn set(
    table: &mut Table,
    path: &[String],
    raw: &str,
    guess: bool,
    key_path: &mut String,
) -> Result<bool, String> {
    let (head, rest) = path.split_first().ok_or("empty path")?;
    let key = table.keys().find(|k| matches(k, head)).cloned().unwrap_or_else(|| head.to_ascii_lowercase());
    push_key(key_path, &key);
    if rest.is_empty() {
        let (value, guessed) = typed(table.get(&key), &key, raw, guess)?;
        table.insert(key, value);
        return Ok(guessed);
    }
    let entry = table.entry(key).or_insert_with(|| Value::Table(Table::new()));
    set_in(entry, rest, raw, guess, key_path)
}

fn set_in(
    node: &mut Value,
    path: &[String],
    raw: &str,
    guess: bool,
    key_path: &mut String,
) -> Result<bool, String> {
    match node {
        Value::Table(t) => set(t, path, raw, guess, key_path),
        Value::Array(items) => {
            let (head, rest) = path.split_first().ok_or("empty path")?;
            let shown = outbox_core::text::printable(head, 40);
            let i: usize = head.parse().map_err(|_| format!("{shown:?} is not an array index"))?;
            let len = items.len();
            let item =
                items.get_mut(i).ok_or(format!("index {i} is out of range (the array has {len} items)"))?;
            push_index(key_path, i);
            if rest.is_empty() {
                let (value, guessed) = typed(Some(item), "", raw, guess)?;
                *item = value;
                Ok(guessed)
            } else {
                set_in(item, rest, raw, guess, key_path)
            }
        }
        _ => Err("is not a table".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(file: &str, vars: &[(&str, &str)]) -> anyhow::Result<(Table, Vec<Override>)> {
        let mut t: Table = toml::from_str(file).unwrap();
        let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        let o = apply_overrides(&mut t, vars, true)?;
        Ok((t, o))
    }

    #[test]
    fn values_take_the_type_of_what_they_replace() {
        let file = "[relay]\nbatch_size = 200\nlock_claims = true\nowner = \"x\"\n[ack]\nsecret = \"s\"\n";
        let (t, o) = apply(
            file,
            &[
                ("OUTBOX__RELAY__BATCH_SIZE", "50"),
                ("OUTBOX__RELAY__LOCK_CLAIMS", "FALSE"),
                ("OUTBOX__RELAY__OWNER", "12345"),
                ("OUTBOX__ACK__SECRET", "1234567890123456789"),
            ],
        )
        .unwrap();
        assert_eq!(t["relay"]["batch_size"], Value::Integer(50));
        assert_eq!(t["relay"]["lock_claims"], Value::Boolean(false));
        assert_eq!(t["relay"]["owner"], Value::String("12345".into()));
        assert_eq!(t["ack"]["secret"], Value::String("1234567890123456789".into()));
        assert!(o.iter().all(|o| !o.guessed));
        assert_eq!(o[0].key, "ack.secret");
    }

    #[test]
    fn keys_absent_from_the_file_are_strings_when_named_like_strings() {
        let (t, o) = apply(
            "[relay]\n",
            &[
                ("OUTBOX__ACK__SECRET", "1234567890123456789"),
                ("OUTBOX__DESTINATIONS__A__TRANSPORT__API_KEY", "42"),
                ("OUTBOX__RELAY__BATCH_SIZE", "7"),
            ],
        )
        .unwrap();
        assert_eq!(t["ack"]["secret"], Value::String("1234567890123456789".into()));
        assert_eq!(t["destinations"]["a"]["transport"]["api_key"], Value::String("42".into()));
        assert_eq!(t["relay"]["batch_size"], Value::Integer(7));
        assert!(o.iter().find(|o| o.key == "relay.batch_size").unwrap().guessed);
        let mut t: Table = toml::from_str("[relay]\n").unwrap();
        apply_overrides(
            &mut t,
            [("OUTBOX__RELAY__BATCH_SIZE".to_owned(), "7".to_owned())].into_iter(),
            false,
        )
        .unwrap();
        assert_eq!(t["relay"]["batch_size"], Value::String("7".into()));
    }

    #[test]
    fn errors_name_the_variable_and_never_the_value() {
        let file = "[relay]\nbatch_size = 200\n[[stores]]\nurl = \"x\"\n";
        for (var, value) in [
            ("OUTBOX__RELAY__BATCH_SIZE", "hunter2-secret"),
            ("OUTBOX__RELAY", "hunter2-secret"),
            ("OUTBOX__STORES__5__URL", "hunter2-secret"),
            ("OUTBOX__STORES__X__URL", "hunter2-secret"),
            ("OUTBOX__STORES__0__URL__X", "hunter2-secret"),
        ] {
            let e = format!("{:#}", apply(file, &[(var, value)]).unwrap_err());
            assert!(e.contains(var), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }
}
