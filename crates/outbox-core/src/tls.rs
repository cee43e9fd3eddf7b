//! Why a TLS connection failed, in the words an operator acts on.
//!
//! Each client crate reports a failed handshake its own way (rustls's `invalid peer certificate:
//! UnknownIssuer`, OpenSSL's `certificate verify failed`, a server's `received fatal alert`), often
//! deep in an error's chain. [`explain`] reads an error's whole chain and names the cause: an
//! unknown CA, a wrong host name, an expired certificate, a client certificate the server
//! refused or did not get, a server that does not speak TLS on that port. Stores and
//! transports append it to their connect errors, which already name the store or destination.

use std::error::Error as StdError;

/// The error and its sources, joined with `": "`, each rendered once (crates that wrap an error
/// often repeat its text in their own message).
pub fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let text = e.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = e.source();
    }
    out
}

/// What a TLS failure in `text` (an error chain, see [`chain`]) means and what to do about it, or
/// `None` when the text shows no TLS failure.
pub fn explain(text: &str) -> Option<&'static str> {
    let t = text.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| t.contains(n));
    Some(
        if has(&[
            "unknownissuer",
            "unable to get local issuer",
            "self-signed certificate",
            "self signed certificate",
        ]) {
            "TLS: the server's certificate is not signed by a CA this client trusts \
         (give the CA that signed it: sslrootcert / ssl-ca / ca_file, or install it in the system trust store)"
        } else if has(&[
            "notvalidforname",
            "not valid for name",
            "hostname mismatch",
            "host name mismatch",
            "ip address mismatch",
        ]) {
            "TLS: the server's certificate is not valid for the host name in the URL \
         (connect by a name the certificate lists, or fix the certificate's subjectAltName)"
        } else if has(&[
            "certificate expired",
            "invalid peer certificate: expired",
            "certificate has expired",
        ]) {
            "TLS: the server's certificate has expired (renew it on the server)"
        } else if has(&["not valid yet", "notvalidyet", "certificate is not yet valid"]) {
            "TLS: the server's certificate is not valid yet (check the clocks of both machines)"
        } else if has(&[
            "alert: unknownca",
            "alert: badcertificate",
            "alert: certificateunknown",
            "alert unknown ca",
            "alert bad certificate",
            "alert: decrypterror",
        ]) {
            "TLS: the server refused this client's certificate (it is not signed by a CA the server trusts, \
         or does not match the user)"
        } else if has(&[
            "alert: certificaterequired",
            "alert certificate required",
            "peer did not return a certificate",
            "certificate required",
            "requires a valid client certificate",
        ]) {
            "TLS: the server requires a client certificate and none was given (sslcert/sslkey, ssl-cert/ssl-key, \
         or the destination's client certificate options)"
        } else if has(&[
            "received corrupt message of type invalidcontenttype",
            "wrong version number",
            "invalidcontenttype",
            "packet length too long",
        ]) {
            "TLS: the server did not answer with TLS on this port (is TLS enabled there, or is this the plain port?)"
        } else if has(&[
            "invalid peer certificate",
            "certificate verify failed",
            "handshake failure",
            "alert: handshakefailure",
            "ssl handshake",
            "tls handshake",
        ]) {
            "TLS: the handshake with the server failed (see the cause above)"
        } else {
            return None;
        },
    )
}

/// `message`, with the TLS explanation of `err`'s chain appended when there is one.
pub fn with_explanation(message: String, err: &(dyn StdError + 'static)) -> String {
    match explain(&chain(err)) {
        Some(why) if !message.contains(why) => format!("{message} ({why})"),
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustls_causes_are_named() {
        let cases = [
            ("invalid peer certificate: UnknownIssuer", "not signed by a CA this client trusts"),
            (
                "invalid peer certificate: certificate not valid for name \"127.0.0.1\"; certificate is only valid for DnsName(\"localhost\")",
                "not valid for the host name",
            ),
            (
                "invalid peer certificate: certificate expired: verification time 1795000000 (UNIX), but certificate is not valid after 1577836800 (217163200 seconds ago)",
                "has expired",
            ),
            ("invalid peer certificate: Expired", "has expired"),
            ("received fatal alert: UnknownCA", "refused this client's certificate"),
            ("received fatal alert: CertificateRequired", "requires a client certificate"),
            ("received corrupt message of type InvalidContentType", "did not answer with TLS"),
            ("received fatal alert: HandshakeFailure", "handshake with the server failed"),
        ];
        for (text, want) in cases {
            let got = explain(&format!("error communicating with database: {text}")).unwrap_or("none");
            assert!(got.contains(want), "{text} -> {got}");
        }
    }

    #[test]
    fn openssl_causes_are_named() {
        let cases = [
            ("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: unable to get local issuer certificate", "not signed by a CA"),
            ("ssl/tls alert certificate expired; certificate has expired", "has expired"),
            ("SSL handshake failed: hostname mismatch", "not valid for the host name"),
            ("error:0A00010B:SSL routines::wrong version number", "did not answer with TLS"),
        ];
        for (text, want) in cases {
            let got = explain(text).unwrap_or("none");
            assert!(got.contains(want), "{text} -> {got}");
        }
    }

    #[test]
    fn other_errors_are_not_tls() {
        for text in [
            "Connection refused (os error 111)",
            "password authentication failed for user \"x\"",
            "timed out",
        ] {
            assert_eq!(explain(text), None, "{text}");
        }
    }

    #[test]
    fn a_chain_is_rendered_once_per_distinct_cause() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl StdError for E {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "connect failed: UnknownIssuer",
            Some(Box::new(E("UnknownIssuer", Some(Box::new(E("io", None)))))),
        );
        assert_eq!(chain(&e), "connect failed: UnknownIssuer: io");
        let m = with_explanation("cannot connect to stores[0]".into(), &e);
        assert!(
            m.starts_with("cannot connect to stores[0] (TLS: the server's certificate is not signed"),
            "{m}"
        );
    }
}
