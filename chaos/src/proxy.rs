//! A TCP proxy the harness controls, between the relays and a server (the broker or the
//! database), with the faults a network can produce:
//!
//! - [`Mode::Cut`]: every open connection is dropped and new ones are refused (the server looks
//!   down, as in a restart);
//! - [`Mode::Blackhole`]: connections stay open but no byte moves in either direction, and new
//!   connections are accepted but not forwarded (a partition); when it heals, buffered bytes flow
//!   again, as on a real network;
//! - a delay added to every chunk forwarded in either direction (a slow link).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forward everything.
    Up,
    /// Drop every connection and refuse new ones.
    Cut,
    /// Hold every byte (and every new connection) until the mode changes.
    Blackhole,
}

#[derive(Debug, Clone, Copy)]
struct State {
    mode: Mode,
    delay: Duration,
    /// Bumped by every cut: connections of an older generation close.
    generation: u64,
}

/// A running proxy from `127.0.0.1:<port>` to a target.
pub(crate) struct FaultProxy {
    addr: SocketAddr,
    state: watch::Sender<State>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `target` (`host:port`) on a free local port.
    pub(crate) async fn start(target: &str) -> anyhow::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding a proxy port")?;
        let addr = listener.local_addr()?;
        let (state, _) = watch::channel(State { mode: Mode::Up, delay: Duration::ZERO, generation: 0 });
        let target = target.to_owned();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let now = *st.borrow();
                if now.mode == Mode::Cut {
                    drop(client);
                    continue;
                }
                let rx = st.subscribe();
                tokio::spawn(connection(client, target.clone(), rx, now.generation));
            }
        });
        Ok(FaultProxy { addr, state, task })
    }

    /// The port clients connect to.
    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Changes the mode; [`Mode::Cut`] also drops every open connection.
    pub(crate) fn set_mode(&self, mode: Mode) {
        self.state.send_modify(|s| {
            if mode == Mode::Cut {
                s.generation += 1;
            }
            s.mode = mode;
        });
    }

    /// Sets the delay added to every forwarded chunk.
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.state.send_modify(|s| s.delay = delay);
    }

    /// Forward everything again, without delay.
    pub(crate) fn heal(&self) {
        self.state.send_modify(|s| {
            s.mode = Mode::Up;
            s.delay = Duration::ZERO;
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Close every connection still open.
        self.state.send_modify(|s| s.generation += 1);
    }
}

/// Waits until traffic may move; `false` when the connection must close (a cut).
async fn gate(st: &mut watch::Receiver<State>, generation: u64) -> bool {
    loop {
        let s = *st.borrow_and_update();
        if s.generation != generation {
            return false;
        }
        if s.mode != Mode::Blackhole {
            if !s.delay.is_zero() {
                tokio::time::sleep(s.delay).await;
            }
            return true;
        }
        if st.changed().await.is_err() {
            return false;
        }
    }
}

async fn cut(mut st: watch::Receiver<State>, generation: u64) {
    loop {
        if st.borrow_and_update().generation != generation {
            return;
        }
        if st.changed().await.is_err() {
            return;
        }
    }
}

async fn connection(client: TcpStream, target: String, mut st: watch::Receiver<State>, generation: u64) {
    if !gate(&mut st, generation).await {
        return;
    }
    let server = tokio::select! {
        s = TcpStream::connect(&target) => match s { Ok(s) => s, Err(_) => return },
        _ = cut(st.clone(), generation) => return,
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pump(cr, sw, st.clone(), generation));
    let down = tokio::spawn(pump(sr, cw, st, generation));
    let _ = tokio::join!(up, down);
}

async fn pump(mut r: OwnedReadHalf, mut w: OwnedWriteHalf, mut st: watch::Receiver<State>, generation: u64) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = tokio::select! {
            r = r.read(&mut buf) => match r { Ok(0) | Err(_) => break, Ok(n) => n },
            _ = cut(st.clone(), generation) => return,
        };
        if !gate(&mut st, generation).await {
            return;
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}
