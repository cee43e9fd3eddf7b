//! A TCP proxy a test controls, to cut a client off its server without restarting the server:
//! [`TcpProxy::cut`] drops every open connection and refuses new ones (the broker looks down),
//! [`TcpProxy::restore`] lets connections through again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A running proxy from `127.0.0.1:<port>` to a target address.
pub struct TcpProxy {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    counter: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Starts a proxy to `target` (e.g. `127.0.0.1:4222`) on a free local port.
    pub async fn start(target: &str) -> TcpProxy {
        Self::start_on(0, target).await
    }

    /// Starts a proxy to `target` on `127.0.0.1:<port>` (0: a free port), for a server that
    /// must advertise the proxy's address to its clients (Kafka).
    pub async fn start_on(port: u16, target: &str) -> TcpProxy {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let counter = Arc::new(AtomicU64::new(0));
        let target = target.to_owned();
        let (up2, gen2) = (up.clone(), generation.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let mut cut = gen2.subscribe();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else { return };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut cr, &mut sw) => {}
                        _ = tokio::io::copy(&mut sr, &mut cw) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        TcpProxy { addr, up, generation, counter, task }
    }

    /// `127.0.0.1:<port>` to give the client instead of the server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops every open connection and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = self.generation.send(n);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
