//! The daemon's ACK endpoint against hostile clients, over real sockets (`outbox relay` as a
//! process, SQLite, a local webhook receiver; no external server):
//! - hundreds of connections that send half a request head and stall (slowloris), beyond
//!   `ack.max_connections`, under a file-descriptor limit smaller than their number: a real ACK
//!   still gets its answer at once, every stalled connection is closed, and the ones within
//!   the limit not before `ack.header_timeout`;
//! - connections busy with a request whose body never ends fill the limit: a new connection
//!   is answered 503 at once (never queued), the slow ones 408 after `ack.request_timeout`;
//! - CR/LF/ESC in a request (percent-encoded, and raw where the parser lets them through to a
//!   4xx) never reach the log raw, and 1,000 refused ACKs write a handful of log lines that
//!   count them all.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use outbox_testkit::fs::temp_dir;
use outbox_testkit::net::{free_port, read_response, request};
use outbox_testkit::process::{RelayConfig, RelayProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const SECRET: &str = "hostile-test-secret-0123456789";
/// The daemon's file-descriptor limit: fewer than the stalled connections the tests open.
const FD_LIMIT: u32 = 256;

/// The `[ack]` bounds of one daemon.
struct Limits {
    max_connections: usize,
    header_timeout: &'static str,
    request_timeout: &'static str,
}

/// The daemon: one SQLite store, one webhook destination that requires ACKs.
struct Daemon {
    relay: RelayProcess,
    db_url: String,
    port: u16,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.relay.child.kill();
        if !std::thread::panicking() {
            if let Some(dir) = self.relay.log.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

impl Daemon {
    /// Starts `outbox relay` under `ulimit -n FD_LIMIT` and waits until the ACK endpoint serves.
    async fn start(name: &str, hook_port: u16, limits: Limits) -> Daemon {
        let dir = temp_dir(&format!("outbox-ack-hostile-{name}"));
        let db_url = format!("sqlite:{}", dir.join("shop.db").display());
        let port = free_port();
        let transport = format!(
            r#"type = "http"
               url = "http://127.0.0.1:{hook_port}/hook"
               unsigned = true"#
        );
        let ack = format!(
            r#"[ack]
               listen = "127.0.0.1:{port}"
               secret = "{SECRET}"
               max_connections = {}
               header_timeout = "{}"
               request_timeout = "{}""#,
            limits.max_connections, limits.header_timeout, limits.request_timeout
        );
        let config = RelayConfig::new("idle_interval = \"100ms\"\nshutdown_timeout = \"5s\"", &db_url)
            .migrate()
            .destination("hook", "ack = { timeout = \"5m\" }", &transport)
            .route("#", &["hook"])
            .section(&ack)
            .write(&dir.join("outbox.toml"));
        let log = dir.join("relay.log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_outbox"))
            .args(["relay", "--config", config.to_str().unwrap()])
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG");
        let mut relay = RelayProcess::spawn(cmd, &log);
        relay.wait_for_log("ACK endpoint serving", Duration::from_secs(60));
        Daemon { relay, db_url, port }
    }

    fn log_text(&self) -> String {
        self.relay.log_text()
    }

    fn assert_alive(&mut self) {
        self.relay.assert_alive("the hostile clients");
    }

    /// Open file descriptors of the daemon (Linux).
    fn open_fds(&self) -> Option<usize> {
        std::fs::read_dir(format!("/proc/{}/fd", self.relay.child.id())).ok().map(|d| d.count())
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(("127.0.0.1", self.port)).await.unwrap()
    }
}

/// Sends `bytes` on a new connection and reads the answer, within `within`.
async fn exchange(d: &Daemon, bytes: &[u8], within: Duration) -> Option<(u16, String)> {
    tokio::time::timeout(within, outbox_testkit::net::exchange(d.port, bytes))
        .await
        .expect("no answer in time")
}

/// Waits until the server closes `s` (EOF or reset); the bytes it sent before.
async fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A webhook receiver: answers 200 to every request and hands over its headers.
async fn webhook_receiver() -> (u16, tokio::sync::mpsc::UnboundedReceiver<Vec<(String, String)>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).into_owned();
                let headers: Vec<(String, String)> = head
                    .lines()
                    .skip(1)
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                    .collect();
                let _ =
                    s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                let _ = tx.send(headers);
            });
        }
    });
    (port, rx)
}

/// Watches the daemon's open descriptors until they fall below `bound` or `deadline` passes;
/// returns the last count and when it was read, or `None` where `/proc` cannot tell.
async fn settled_fds(d: &Daemon, bound: usize, deadline: Instant) -> Option<(usize, Instant)> {
    loop {
        let fds = d.open_fds()?;
        let now = Instant::now();
        if fds < bound || now >= deadline {
            return Some((fds, now));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Opens `n` connections that each send half a request head and stall.
async fn stalled(d: &Daemon, n: usize) -> Vec<(TcpStream, Instant)> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = d.connect().await;
        s.write_all(b"POST /v1/ack/shop/1/hook HTTP/1.1\r\nHost: 127.0.0.1\r\nOutbox-Ack-To").await.unwrap();
        out.push((s, Instant::now()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_beyond_the_limit_neither_starve_a_real_ack_nor_outlive_the_header_timeout() {
    let (hook_port, mut hooks) = webhook_receiver().await;
    // The header timeout is long enough that the descriptors the daemon holds can be watched
    // settling before the first stalled connection reaches it.
    let limits = Limits { max_connections: 64, header_timeout: "6s", request_timeout: "8s" };
    let header_timeout = Duration::from_secs(6);
    let before_timeout = header_timeout - Duration::from_millis(100);
    let mut d = Daemon::start("slowloris", hook_port, limits).await;

    // A real delivery that awaits its ACK: its token comes with the webhook.
    let pool = sqlx::SqlitePool::connect(&d.db_url).await.unwrap();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO outbox_message (topic, payload) VALUES ('order.paid', '{}') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let headers = tokio::time::timeout(Duration::from_secs(60), hooks.recv()).await.unwrap().unwrap();
    let token = headers.iter().find(|(n, _)| n.ends_with("ack-token")).map(|(_, v)| v.clone()).unwrap();

    // 300 stalled connections: more than the limit (64) and than the daemon's descriptors (256).
    let started = Instant::now();
    let mut slow = stalled(&d, 300).await;
    let opened_in = started.elapsed();
    // The oldest stalled connections are closed to make room as new ones come; on busy cores
    // those closes may still be under way when the last one is opened, so the daemon's
    // descriptors are watched until they settle, before any stalled connection could have
    // been closed by the header timeout instead.
    let fds = settled_fds(&d, 64 + 64, started + before_timeout - Duration::from_millis(500))
        .await
        .map(|(fds, at)| (fds, at - started));

    // The real ACK gets its answer at once.
    let asked = Instant::now();
    let answer = exchange(
        &d,
        &request("POST", &format!("/v1/ack/shop/{id}/hook"), &[("Outbox-Ack-Token", &token)], b""),
        Duration::from_secs(30),
    )
    .await;
    let answered_in = asked.elapsed();
    let (status, body) = answer.expect("the ACK was not answered");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"acked\""), "{body}");
    let acked: String = sqlx::query_scalar("SELECT status FROM outbox_delivery WHERE message_id = ?1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(acked, "acked");

    // Every stalled connection is closed by the server: the oldest ones at once to make room,
    // the last 64 after the header timeout, none later than a generous deadline.
    let mut closed_after = Vec::with_capacity(slow.len());
    tokio::time::timeout(Duration::from_secs(60), async {
        for (s, opened) in &mut slow {
            until_closed(s).await;
            closed_after.push(opened.elapsed());
        }
    })
    .await
    .expect("some stalled connections were never closed");
    let at_timeout = closed_after.iter().filter(|d| **d >= before_timeout).count();
    assert!(at_timeout <= 64, "{at_timeout} connections outlived the room of 64");
    d.assert_alive();

    // Within the limit, a stalled connection is closed by the header timeout, not before.
    let few = stalled(&d, 10).await;
    for (mut s, opened) in few {
        tokio::time::timeout(Duration::from_secs(30), until_closed(&mut s)).await.expect("not closed");
        let after = opened.elapsed();
        assert!(after >= before_timeout, "closed after {after:?}, before the header timeout");
    }
    d.assert_alive();
    eprintln!(
        "300 stalled connections opened in {opened_in:?}; daemon fds and when they settled: {fds:?} (limit {FD_LIMIT}); \
         real ACK answered in {answered_in:?}; stalled closed at the header timeout: {at_timeout}, \
         earlier to make room: {}; last closed after {:?}",
        300 - at_timeout,
        closed_after.iter().max().unwrap()
    );
    if let Some((fds, at)) = fds {
        // 300 stalled connections against a limit of 64: the daemon holds the limit and its own
        // descriptors (pools, runtime, listener), never one per stalled client.
        assert!(fds < 64 + 64, "the daemon still held {fds} descriptors {at:?} after the stalled ones began");
    }

    // SIGTERM with stalled connections open: the daemon still stops, in bounded time.
    let _held = stalled(&d, 20).await;
    let stopping = Instant::now();
    let status = d.relay.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status}: {}", d.log_text());
    eprintln!("stopped by SIGTERM with 20 stalled connections open in {:?}", stopping.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_connection_is_busy_a_new_one_is_answered_503_at_once_and_slow_bodies_408() {
    let limits = Limits { max_connections: 16, header_timeout: "2s", request_timeout: "4s" };
    let mut d = Daemon::start("busy", free_port(), limits).await;
    // 16 requests whose body never ends. `Expect: 100-continue` makes the server say when it
    // starts reading the body: from then on the connection is busy with a request.
    let head = "POST /v1/ack/shop/1/hook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\
                Expect: 100-continue\r\n\r\n";
    let mut busy = Vec::new();
    for _ in 0..16 {
        let mut s = d.connect().await;
        s.write_all(head.as_bytes()).await.unwrap();
        let interim = tokio::time::timeout(Duration::from_secs(30), read_response(&mut s)).await.unwrap();
        assert_eq!(interim.map(|r| r.0), Some(100));
        let started = Instant::now();
        s.write_all(b"{\"tok").await.unwrap();
        busy.push((s, started));
    }
    // A new connection: answered 503 at once, and closed; nothing queues.
    let probe = Instant::now();
    let mut s = d.connect().await;
    let got = tokio::time::timeout(Duration::from_secs(30), until_closed(&mut s)).await.unwrap();
    let refused_in = probe.elapsed();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503") && got.contains("too many connections"), "{got:?}");
    assert!(refused_in < Duration::from_secs(1), "the 503 took {refused_in:?}");
    // The slow bodies: 408 when the request timeout has passed, not before.
    let mut answered_after = Duration::ZERO;
    for (s, started) in &mut busy {
        let answer = tokio::time::timeout(Duration::from_secs(30), read_response(s)).await.unwrap();
        let (status, body) = answer.expect("a slow body got no answer");
        assert_eq!(status, 408, "{body}");
        answered_after = started.elapsed();
        assert!(answered_after >= Duration::from_millis(3900), "408 after {answered_after:?}");
    }
    // The slots are free again.
    let answer =
        exchange(&d, &request("POST", "/v1/ack/shop/abc/hook", &[], b""), Duration::from_secs(30)).await;
    assert_eq!(answer.map(|a| a.0), Some(400));
    d.assert_alive();
    eprintln!("503 at the limit answered in {refused_in:?}; the last slow body answered 408 after {answered_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bytes_never_reach_the_log_raw_and_a_flood_of_refusals_writes_a_few_lines() {
    let mut d = Daemon::start(
        "log",
        free_port(),
        Limits { max_connections: 64, header_timeout: "5s", request_timeout: "5s" },
    )
    .await;
    let token = [("Outbox-Ack-Token", "not-a-token")];
    // Percent-encoded CR, LF and ESC: decoded into the path segments the handler sees.
    let forged = "%0D%0A2030-01-01T00:00:00Z%20ERROR%20forged%1B%5B31m";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("encoded, unknown store", request("POST", &format!("/v1/ack/shop{forged}/1/hook"), &token, b"")),
        ("encoded, bad token", request("POST", &format!("/v1/ack/shop/1/hook{forged}"), &token, b"")),
        ("encoded, bad id", request("POST", &format!("/v1/ack/shop/1{forged}/hook"), &token, b"")),
        ("raw CR in the path", b"POST /v1/ack/shop\r/1/hook HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        (
            "raw LF in the path",
            b"POST /v1/ack/shop\n2030 ERROR forged/1/hook HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("raw ESC in the path", b"POST /v1/ack/shop\x1b[31m/1/hook HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        (
            "raw ESC in the token",
            b"POST /v1/ack/shop/1/hook HTTP/1.1\r\nHost: x\r\nOutbox-Ack-Token: a\x1b[2Jb\r\n\r\n".to_vec(),
        ),
    ];
    for (what, bytes) in &cases {
        let answer = exchange(&d, bytes, Duration::from_secs(30)).await;
        let status = answer.as_ref().map(|a| a.0);
        assert!(status.is_some_and(|s| (400..500).contains(&s)), "{what}: {answer:?}");
    }
    d.assert_alive();

    // 1,000 refused ACKs over 4 kept-alive connections.
    let started = Instant::now();
    let mut clients = Vec::new();
    for c in 0..4 {
        let port = d.port;
        clients.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            for i in 0..250 {
                let path = match (c + i) % 3 {
                    0 => format!("/v1/ack/shop/{i}/hook%0Aforged"),
                    1 => format!("/v1/ack/eu{forged}/{i}/hook"),
                    _ => "/v1/ack/shop/x%1B/hook".to_owned(),
                };
                s.write_all(&request("POST", &path, &[("Outbox-Ack-Token", "1.ab")], b"")).await.unwrap();
                let (status, _) = read_response(&mut s).await.expect("closed");
                assert!((400..500).contains(&status), "{status}");
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    let flood_in = started.elapsed();

    // Every refusal is counted in the summary lines, which are few.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (lines, counted) = loop {
        let text = d.log_text();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("ACK requests refused")).collect();
        let counted: u64 = lines
            .iter()
            .filter_map(|l| l.split("count=").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        if counted >= 1000 + cases.len() as u64 {
            break (lines.len(), counted);
        }
        d.assert_alive();
        assert!(Instant::now() < deadline, "only {counted} refusals counted: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let text = d.log_text();
    assert!(lines < 20, "{lines} refusal lines: {text}");
    assert!(text.lines().count() < 40, "{text}");

    // No raw CR, LF-forged line or ESC from any request; the hostile text shown escaped.
    let raw = std::fs::read(&d.relay.log).unwrap();
    assert!(!raw.contains(&b'\r') && !raw.contains(&0x1b), "{text:?}");
    for line in text.lines() {
        assert!(!line.starts_with("2030") && !line.starts_with("forged"), "forged line: {line:?}\n{text}");
    }
    assert!(text.contains("shop\\r\\n2030-01-01T00:00:00Z ERROR forged\\u{1b}[31m"), "{text}");
    eprintln!(
        "1,000 refusals in {flood_in:?}; {counted} counted in {lines} log lines; log:\n{}",
        text.lines().filter(|l| l.contains("ACK")).collect::<Vec<_>>().join("\n")
    );
}
