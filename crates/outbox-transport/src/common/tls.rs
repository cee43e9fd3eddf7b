//! The TLS files a destination names (`tls_ca_file`, `tls_cert_file`, `tls_key_file`), read and
//! checked once at connect, and the rustls client configuration built from them.
//!
//! Every broker turns TLS on the way its users know (`tls://`, `rediss://`, `mqtts://`,
//! `amqps://`, `https://`); these three keys add what a private deployment needs: the CA that
//! signed the broker's certificate (trusted besides the system's trust store) and a client
//! certificate for brokers that authenticate clients by certificate. A file that cannot be read
//! or holds no PEM certificate (or key) is a configuration error naming the key and the file.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::common::config::Rules;
use crate::Result;

/// The largest TLS file read (a CA bundle is far smaller).
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The TLS material of one destination: PEM text as read (for clients that parse it themselves)
/// and the parsed certificates and key.
pub(crate) struct TlsMaterial {
    /// The CA file's PEM text, when one was given.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// The CA file's certificates (empty without one).
    pub(crate) ca: Vec<CertificateDer<'static>>,
    /// The client certificate chain and key, PEM, when given.
    pub(crate) client_pem: Option<(Vec<u8>, Vec<u8>)>,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
}

impl TlsMaterial {
    /// Reads and checks the three files; `None` when none is named. A certificate without its
    /// key (or the reverse), or a key that does not fit its certificate, is refused.
    pub(crate) fn load(
        rules: Rules,
        ca_file: Option<&str>,
        cert_file: Option<&str>,
        key_file: Option<&str>,
    ) -> Result<Option<TlsMaterial>> {
        if ca_file.is_none() && cert_file.is_none() && key_file.is_none() {
            return Ok(None);
        }
        let (ca_pem, ca) = match ca_file {
            Some(path) => {
                let pem = read(rules, "tls_ca_file", path)?;
                let certs = certificates(rules, "tls_ca_file", path, &pem)?;
                (Some(pem), certs)
            }
            None => (None, Vec::new()),
        };
        let (client_pem, client) = match (cert_file, key_file) {
            (Some(cert), Some(key)) => {
                let cert_pem = read(rules, "tls_cert_file", cert)?;
                let chain = certificates(rules, "tls_cert_file", cert, &cert_pem)?;
                let key_pem = read(rules, "tls_key_file", key)?;
                let parsed = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
                    rules.invalid("tls_key_file", format!("{} holds no PEM private key: {e}", shown(key)))
                })?;
                (Some((cert_pem, key_pem)), Some((chain, parsed)))
            }
            (None, None) => (None, None),
            (Some(_), None) => return Err(rules.invalid("tls_key_file", "must be set with tls_cert_file")),
            (None, Some(_)) => return Err(rules.invalid("tls_cert_file", "must be set with tls_key_file")),
        };
        let material = TlsMaterial { ca_pem, ca, client_pem, client };
        if material.client.is_some() {
            // A key that does not fit its certificate shows only when a configuration is built.
            material.client_config(rules)?;
        }
        Ok(Some(material))
    }

    /// The TLS of a destination whose URL asks for TLS (`tls`) or not: the files (see
    /// [`load`](Self::load)), the system's store alone for a TLS URL without files, `None` for a plain URL. Files
    /// with a plain URL are refused, naming the first key set and the scheme that `scheme` says
    /// to use (e.g. `"an mqtts://"`); `shown` is the URL as it may be printed.
    pub(crate) fn for_url(
        rules: Rules,
        tls: bool,
        [ca, cert, key]: [Option<&str>; 3],
        scheme: &str,
        shown: &str,
    ) -> Result<Option<TlsMaterial>> {
        match (tls, TlsMaterial::load(rules, ca, cert, key)?) {
            (true, files) => Ok(Some(files.unwrap_or_else(TlsMaterial::none))),
            (false, None) => Ok(None),
            (false, Some(_)) => {
                let key = match (ca, cert) {
                    (Some(_), _) => "tls_ca_file",
                    (None, Some(_)) => "tls_cert_file",
                    (None, None) => "tls_key_file",
                };
                Err(rules.invalid(key, format!("needs {scheme} URL for TLS ({shown:?} is not one); use it")))
            }
        }
    }

    /// No files named: [`client_config`](Self::client_config) then trusts the system's store
    /// only, without a client certificate (for a TLS URL that names no file).
    pub(crate) fn none() -> TlsMaterial {
        TlsMaterial { ca_pem: None, ca: Vec::new(), client_pem: None, client: None }
    }

    /// A rustls client configuration (ring provider, TLS 1.2 and 1.3): the system's trust store
    /// plus the CA file, and the client certificate when given.
    pub(crate) fn client_config(&self, rules: Rules) -> Result<Arc<ClientConfig>> {
        let mut roots = system_roots();
        for cert in &self.ca {
            roots
                .add(cert.clone())
                .map_err(|e| rules.invalid("tls_ca_file", format!("unusable CA certificate: {e}")))?;
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| rules.invalid("tls_ca_file", format!("TLS set-up: {e}")))?
            .with_root_certificates(roots);
        let config = match &self.client {
            Some((chain, key)) => {
                builder.with_client_auth_cert(chain.clone(), key.clone_key()).map_err(|e| {
                    rules.invalid("tls_key_file", format!("the key does not fit tls_cert_file: {e}"))
                })?
            }
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }
}

/// The system's trust store (what `update-ca-certificates` installs); a store that cannot be
/// read counts as empty (the CA file may be all a private deployment needs).
pub(crate) fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    roots
}

fn shown(path: &str) -> String {
    format!("{:?}", outbox_core::text::printable(path, 200))
}

fn read(rules: Rules, key: &'static str, path: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)
        .map_err(|e| rules.invalid(key, format!("cannot read {}: {e}", shown(path))))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| rules.invalid(key, format!("cannot read {}: {e}", shown(path))))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(rules.invalid(key, format!("{} is larger than 1 MiB", shown(path))));
    }
    Ok(bytes)
}

fn certificates(
    rules: Rules,
    key: &'static str,
    path: &str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| rules.invalid(key, format!("{} is not valid PEM: {e}", shown(path))))?;
    if certs.is_empty() {
        return Err(rules.invalid(key, format!("{} holds no PEM certificate", shown(path))));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules("test");

    fn file(name: &str, text: &str) -> String {
        let dir = std::env::temp_dir().join(format!("outbox-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    }

    fn err(ca: Option<&str>, cert: Option<&str>, key: Option<&str>) -> String {
        match TlsMaterial::load(RULES, ca, cert, key) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn nothing_named_is_no_tls_material() {
        assert!(TlsMaterial::load(RULES, None, None, None).unwrap().is_none());
    }

    #[test]
    fn bad_files_are_refused_naming_the_key() {
        let e = err(Some("/nonexistent/ca.pem"), None, None);
        assert!(e.contains("tls_ca_file") && e.contains("cannot read \"/nonexistent/ca.pem\""), "{e}");
        let e = err(Some(&file("empty.pem", "not a certificate\n")), None, None);
        assert!(e.contains("tls_ca_file") && e.contains("holds no PEM certificate"), "{e}");
        let e = err(None, Some(&file("c.pem", "x")), None);
        assert!(e.contains("tls_key_file") && e.contains("must be set with tls_cert_file"), "{e}");
        let e = err(None, None, Some(&file("k.pem", "x")));
        assert!(e.contains("tls_cert_file"), "{e}");
        let big = "A".repeat((MAX_FILE_BYTES + 10) as usize);
        let e = err(Some(&file("big.pem", &big)), None, None);
        assert!(e.contains("larger than 1 MiB"), "{e}");
        let e = err(Some(&file("ctl\u{1b}[31m.pem", "x")), None, None);
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
