//! Loopback ports, and raw HTTP/1.1 over a plain TCP connection (for endpoints a test must
//! reach with bytes no HTTP client would send).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A free TCP port on 127.0.0.1 (free when this returns).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something accepts connections on `port`; panics after `within`.
pub fn wait_port(port: u16, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
        .is_err()
    {
        assert!(Instant::now() < deadline, "{what} did not listen on port {port} within {within:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An HTTP/1.1 request: the request line, `Host`, `headers` in order, `Content-Length`, `body`.
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (n, v) in headers {
        r.push_str(&format!("{n}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = r.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Reads one HTTP response (head and `Content-Length` body) from `s`: `(status, body)`, or
/// `None` when the connection closed before a whole head.
pub async fn read_response(s: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some((status, String::from_utf8_lossy(&buf[head_end..]).into_owned()))
}

/// Sends `bytes` on a new connection to `127.0.0.1:<port>` and reads the answer (see
/// [`read_response`]). The caller bounds the wait.
pub async fn exchange(port: u16, bytes: &[u8]) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let _ = s.write_all(bytes).await;
    read_response(&mut s).await
}
