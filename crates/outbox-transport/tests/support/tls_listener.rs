//! A real TLS server endpoint of the test's own (tokio-rustls, the ring provider) on
//! 127.0.0.1: it presents a certificate of the test PKI (`outbox_testkit::tls::Pki`), may
//! require a client certificate signed by the test CA, and records each handshake's result.
//! The HTTP tests serve axum over it ([`TlsListener`] is an `axum::serve::Listener`); the Kafka
//! tests only need the handshake.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use outbox_testkit::tls::Pki;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Whether the server asks the client for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientAuth {
    /// Never asks.
    None,
    /// Requires one signed by the test CA.
    Required,
}

/// Every handshake's result, in order: `Ok(client certificate's presence)` or the server's error.
pub(crate) type Handshakes = Arc<Mutex<Vec<Result<bool, String>>>>;

/// A TLS listener on 127.0.0.1 presenting `cert` (`server`, `expired`).
pub(crate) struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    handshakes: Handshakes,
}

impl TlsListener {
    pub(crate) async fn bind(pki: &Pki, cert: &str, auth: ClientAuth) -> TlsListener {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(pki.path(&format!("{cert}.pem")))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_file(pki.path(&format!("{cert}.key"))).unwrap();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Required => {
                let mut roots = RootCertStore::empty();
                for ca in CertificateDer::pem_file_iter(pki.path("ca.pem")).unwrap() {
                    roots.add(ca.unwrap()).unwrap();
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build().unwrap();
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        TlsListener { tcp, acceptor: TlsAcceptor::from(Arc::new(config)), handshakes: Handshakes::default() }
    }

    pub(crate) fn port(&self) -> u16 {
        self.tcp.local_addr().unwrap().port()
    }

    /// The handshakes' results, shared (still readable once the listener moved into a server).
    pub(crate) fn handshakes(&self) -> Handshakes {
        self.handshakes.clone()
    }

    /// Accepts connections and completes their handshakes, then holds each connection open
    /// without answering (a broker that says nothing) until the task is dropped.
    pub(crate) fn hold(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (stream, _) = axum::serve::Listener::accept(&mut self).await;
                held.push(stream);
            }
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    /// The next connection whose handshake succeeded (failed ones are recorded and skipped).
    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else { continue };
            match self.acceptor.accept(tcp).await {
                Ok(tls) => {
                    let with_cert = tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                    self.handshakes.lock().unwrap().push(Ok(with_cert));
                    return (tls, addr);
                }
                Err(e) => self.handshakes.lock().unwrap().push(Err(e.to_string())),
            }
        }
    }

    fn local_addr(&self) -> tokio::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
