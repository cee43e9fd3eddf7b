//! A TCP proxy a test controls, to cut a client off its server without restarting the server:
//! [`TcpProxy::cut`] drops every open connection and refuses new ones (the broker looks down),
//! [`TcpProxy::restore`] lets connections through again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
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
                // Subscribed before `up` is read: a cut from here on ends this connection.
                let mut cut = gen2.subscribe();
                let born = *cut.borrow_and_update();
                if !up2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let (up_gen, down_gen) = (cut.clone(), cut.clone());
                    tokio::select! {
                        _ = pump(cr, sw, up_gen, born) => {}
                        _ = pump(sr, cw, down_gen, born) => {}
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
        self.generation.send_replace(n);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either closes or the proxy is cut. Each chunk read is checked
/// against the generation the connection was born in before it is forwarded: bytes a client
/// writes after [`TcpProxy::cut`] returned never reach the server, even when the copy task has
/// not yet been woken by the cut (tokio's `io::copy` would forward them in that window).
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, generation: watch::Receiver<u64>, born: u64) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if *generation.borrow() != born || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::TcpProxy;

    /// Reads what `s` receives until it closes.
    async fn everything_sent(mut s: TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got).await;
        got
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_written_after_a_cut_never_reach_the_server_and_new_connections_are_refused() {
        for round in 0..50 {
            let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let target = server.local_addr().unwrap().to_string();
            let proxy = TcpProxy::start(&target).await;
            let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
            // The proxy has passed this connection on before the cut (else it is simply refused).
            let (accepted, _) =
                tokio::time::timeout(Duration::from_secs(30), server.accept()).await.unwrap().unwrap();
            let received = tokio::spawn(everything_sent(accepted));
            client.write_all(b"before").await.unwrap();
            proxy.cut();
            // The write may succeed locally: what matters is that the server never sees it.
            let _ = client.write_all(b"after").await;
            let got = tokio::time::timeout(Duration::from_secs(30), received).await.unwrap().unwrap();
            assert!(b"before".starts_with(&got), "round {round}: the server got {got:?}");

            // While cut, a new connection is closed without reaching the server.
            let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
            let mut buf = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(30), late.read(&mut buf)).await.unwrap();
            assert!(matches!(n, Ok(0) | Err(_)), "round {round}: {n:?}");
        }
    }
}
