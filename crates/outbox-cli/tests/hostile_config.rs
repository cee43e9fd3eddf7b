//! `outbox check` (and the relay's start-up) against configurations a careless or hostile hand
//! wrote: values the relay cannot run with, files that are not configuration files, secrets in
//! URLs, environment overrides and broken lines, and verbose logging of client libraries. Every
//! error names the key and where it came from; no secret is ever printed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use outbox_testkit::process::{NatsServer, RelayConfig, RelayProcess};

fn temp_dir(name: &str) -> PathBuf {
    outbox_testkit::fs::temp_dir(&format!("outbox-hostile-{name}"))
}

/// `outbox` without the caller's OUTBOX_* variables.
fn outbox_cmd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOX") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// `outbox` with a clean environment (no OUTBOX_* or RUST_LOG from the caller) plus `env`.
fn outbox_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = outbox_cmd();
    cmd.args(args).env_remove("RUST_LOG").envs(env.iter().copied());
    run_with_deadline(cmd, Duration::from_secs(60))
}

/// Runs `cmd` to completion, killing it (and failing) past `deadline`.
fn run_with_deadline(mut cmd: Command, deadline: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run outbox");
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(deadline) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &id.to_string()]).status();
            panic!("outbox did not finish within {deadline:?}");
        }
    }
}

fn check(path: &Path, env: &[(&str, &str)]) -> Output {
    outbox_env(&["check", "--config", path.to_str().unwrap()], env)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `check` fails; returns stderr.
fn check_fails(path: &Path, env: &[(&str, &str)]) -> String {
    let out = check(path, env);
    assert!(!out.status.success(), "check should fail:\n{}", text(&out));
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8(out.stderr).unwrap()
}

/// 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle:?} not in\n{text}")) + 1
}

const BASE: &str = r#"[relay]
batch_size = 100
lease = "30s"

[[stores]]
name = "shop"
url = "sqlite:/tmp/outbox-hostile-never-opened.db"

[destinations.hook]
transport = { type = "http", url = "http://127.0.0.1:9/hook", secret = "0123456789abcdef0123" }

[[routes]]
topic = "order.*"
destinations = ["hook"]
"#;

/// Finding 11: each value the relay refuses at start, or would misbehave on, is refused by
/// `check`, naming the key and its line.
#[test]
fn check_refuses_what_the_relay_cannot_run_with_naming_key_and_line() {
    let dir = temp_dir("values");
    let long = "x".repeat(200);
    let in_relay = |line: &str| BASE.replace("lease = \"30s\"", &format!("lease = \"30s\"\n{line}"));
    let rename_hook = |name: &str| {
        BASE.replace("[destinations.hook]", &format!("[destinations.{name}]"))
            .replace("[\"hook\"]", &format!("[{name}]"))
    };
    let cases: Vec<(&str, String, &str, &str)> = vec![
        // (what, file, key, text on the key's line)
        ("idle_interval 0s", in_relay("idle_interval = \"0s\""), "relay.idle_interval", "idle_interval"),
        (
            "no batch in flight",
            in_relay("max_in_flight_batches = 0"),
            "relay.max_in_flight_batches",
            "max_in_flight",
        ),
        ("empty owner", in_relay("owner = \"\""), "relay.owner", "owner ="),
        ("long owner", in_relay(&format!("owner = \"{long}\"")), "relay.owner", "owner ="),
        ("owner with ESC", in_relay("owner = \"r\\u001b[2J\""), "relay.owner", "owner ="),
        ("lease of 10^8 days", BASE.replace("\"30s\"", "\"100000000d\""), "relay.lease", "lease ="),
        ("empty destination name", rename_hook("\"\""), "destinations.\"\"", "[destinations."),
        ("long destination name", rename_hook(&format!("\"{long}\"")), "destinations.xxxx", "[destinations."),
        ("destination name with CR", rename_hook("\"a\\rb\""), "destinations.\"a\\rb\"", "[destinations."),
        (
            "max_payload_bytes 0",
            BASE.replace("[destinations.hook]", "[destinations.hook]\nmax_payload_bytes = 0"),
            "destinations.hook.max_payload_bytes",
            "max_payload_bytes",
        ),
        (
            "retention.interval 0s",
            format!("{BASE}\n[retention]\ninterval = \"0s\"\n"),
            "retention.interval",
            "interval =",
        ),
        (
            "retention.batch 10^9",
            format!("{BASE}\n[retention]\nbatch = 1000000000\n"),
            "retention.batch",
            "batch = 1",
        ),
        ("ack.token_ttl 0s", format!("{BASE}\n[ack]\ntoken_ttl = \"0s\"\n"), "ack.token_ttl", "token_ttl"),
        (
            "token_ttl shorter than the ACK timeout",
            format!(
                "{}\n[ack]\nsecret = \"0123456789abcdef\"\ntoken_ttl = \"1m\"\n",
                BASE.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"5m\" }")
            ),
            "ack.token_ttl",
            "token_ttl",
        ),
    ];
    for (i, (what, file, key, on_line)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("case{i}.toml"));
        std::fs::write(&path, &file).unwrap();
        let err = check_fails(&path, &[]);
        let line = line_of(&file, on_line);
        let at = format!("{}:{line}: {key}", path.display());
        assert!(err.contains(&at), "{what}: want {at:?} in:\n{err}");
        assert!(!err.bytes().any(|b| b < 0x20 && b != b'\n'), "{what}: raw control byte in:\n{err:?}");
        assert_eq!(err.lines().count(), 1, "{what}: one line, no source excerpt:\n{err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn check_refuses_files_that_are_not_configuration_files_quickly() {
    let started = Instant::now();
    let err = check_fails(Path::new("/dev/zero"), &[]);
    assert!(err.contains("/dev/zero: not a regular file"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());

    let dir = temp_dir("files");
    let big = dir.join("big.toml");
    let mut text = BASE.to_owned();
    while text.len() <= 1024 * 1024 {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&big, &text).unwrap();
    let err = check_fails(&big, &[]);
    assert!(err.contains("larger than 1024 KiB"), "{err}");

    let err = check_fails(&dir, &[]);
    assert!(err.contains("not a regular file"), "{err}");

    let binary = dir.join("binary.toml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x01]).unwrap();
    let err = check_fails(&binary, &[]);
    assert!(err.contains("not UTF-8"), "{err}");

    // A FIFO: opening it would block until a writer comes; it is refused before.
    let fifo = dir.join("fifo.toml");
    if Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let err = check_fails(&fifo, &[]);
        assert!(err.contains("not a regular file"), "{err}");
    }
    let err = check_fails(&dir.join("missing.toml"), &[]);
    assert!(err.contains("cannot read the configuration file"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_all_digit_secret_from_the_environment_is_a_string() {
    let dir = temp_dir("digits");
    let path = dir.join("outbox.toml");
    std::fs::write(
        &path,
        BASE.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"30s\" }"),
    )
    .unwrap();
    // Without the secret the file is refused, naming the key and the variable to set.
    let err = check_fails(&path, &[]);
    assert!(err.contains("ack.secret") && err.contains("OUTBOX__ACK__SECRET"), "{err}");
    let secret = "1234567890123456789";
    let out = check(&path, &[("OUTBOX__ACK__SECRET", secret)]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(secret), "{}", text(&out));
    // Also over a string in the file, and for a transport's secret.
    std::fs::write(
        &path,
        format!(
            "{}\n[ack]\nsecret = \"from-the-file-0123456\"\n",
            BASE.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"30s\" }")
        ),
    )
    .unwrap();
    let out = check(
        &path,
        &[
            ("OUTBOX__ACK__SECRET", secret),
            ("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__SECRET", "98765432109876543210"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_bad_environment_override_names_the_variable_not_its_value() {
    let dir = temp_dir("env");
    let path = dir.join("outbox.toml");
    std::fs::write(&path, BASE).unwrap();
    let secret = "hunter2-hunter2";
    for (var, key) in [
        ("OUTBOX__RELAY__BATCH_SIZE", "relay.batch_size"),
        ("OUTBOX__RELAY__IDLE_INTERVAL", "relay.idle_interval"),
        ("OUTBOX__RELAY__MAX_IN_FLIGHT_BATCHES", "relay.max_in_flight_batches"),
        ("OUTBOX__RETENTION__BATCH", "retention.batch"),
        ("OUTBOX__STORES__0__MAX_CONNECTIONS", "stores[0].max_connections"),
    ] {
        let err = check_fails(&path, &[(var, secret)]);
        assert!(err.contains(&format!("environment variable {var} ({key})")), "{var}: {err}");
        assert!(!err.contains("hunter2"), "{var}: {err}");
    }
    // A valid value that the relay cannot run with: named the same way.
    let err = check_fails(&path, &[("OUTBOX__RELAY__IDLE_INTERVAL", "0s")]);
    assert!(err.contains("environment variable OUTBOX__RELAY__IDLE_INTERVAL (relay.idle_interval)"), "{err}");
    let err = check_fails(&path, &[("OUTBOX__STORES__0__URL", "oracle://app:hunter2@db/x")]);
    assert!(err.contains("environment variable OUTBOX__STORES__0__URL (stores[0].url)"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_syntax_error_on_a_secret_line_does_not_print_the_secret() {
    let dir = temp_dir("syntax");
    let path = dir.join("outbox.toml");
    for (i, bad) in [
        // An unterminated string, a bare word, a stray quote, a wrong type.
        "secret = \"hunter2-secret-0123",
        "secret = hunter2-secret-0123",
        "secret = \"hunter2-secret-0123\"\"",
        "secret = 123456789012345678901234567890",
    ]
    .into_iter()
    .enumerate()
    {
        let file = format!("{BASE}\n[ack]\n{bad}\n");
        std::fs::write(&path, &file).unwrap();
        let err = check_fails(&path, &[]);
        let line = line_of(&file, bad);
        assert!(err.contains(&format!("{}:{line}:", path.display())), "case {i}: {err}");
        assert!(
            !err.contains("hunter2") && !err.contains("123456789012345678901234567890"),
            "case {i}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "case {i}: no source excerpt:\n{err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn check_prints_urls_without_their_secrets() {
    let dir = temp_dir("urls");
    let path = dir.join("outbox.toml");
    for url in [
        "postgres://app@db/shop?password=hunter2",
        "postgres://app@db/shop?sslmode=require&PASSWORD=hunter2",
        "postgres://app:hunter2@db/shop",
        "postgres://app:hun/ter2@db/shop",
        "mysql://root@db/shop?auth_token=hunter2",
    ] {
        std::fs::write(&path, BASE.replace("sqlite:/tmp/outbox-hostile-never-opened.db", url)).unwrap();
        for json in [false, true] {
            let mut args = vec!["check", "--config", path.to_str().unwrap()];
            if json {
                args.push("--json");
            }
            let out = outbox_env(&args, &[]);
            assert!(out.status.success(), "{url}: {}", text(&out));
            let all = text(&out);
            assert!(!all.contains("hunter2") && !all.contains("ter2"), "{url}: {all}");
            assert!(all.contains("***"), "{url}: {all}");
        }
        // The same URL from the environment.
        std::fs::write(&path, BASE).unwrap();
        let out = check(&path, &[("OUTBOX__STORES__0__URL", url)]);
        assert!(out.status.success(), "{url}: {}", text(&out));
        assert!(!text(&out).contains("hunter2"), "{url}: {}", text(&out));
    }
    std::fs::remove_dir_all(dir).ok();
}

/// sqlx warns about an unknown URL parameter with its value; at any log level the value stays
/// out of the output, and the connection error names the URL redacted.
#[test]
fn verbose_logs_of_the_database_driver_print_no_secret() {
    // Each run waits out the pool's connect timeout: run them side by side.
    let runs: Vec<_> = ["debug", "trace", "warn"]
        .into_iter()
        .map(|level| {
            std::thread::spawn(move || {
                let url = "postgres://app:pw-hunter2@127.0.0.1:1/db?auth_token=hunter2&sslmode=disable";
                (level, outbox_env(&["status", "--database-url", url], &[("RUST_LOG", level)]))
            })
        })
        .collect();
    for run in runs {
        let (level, out) = run.join().unwrap();
        assert!(!out.status.success());
        let all = text(&out);
        assert!(!all.contains("hunter2"), "RUST_LOG={level}: {all}");
        assert!(all.contains("auth_token=***"), "RUST_LOG={level}: {all}");
    }
}

/// Finding 7(a): at `RUST_LOG=trace` the NATS client logs the server address as a `Url` debug
/// dump, password included, and its `CONNECT` options; the relay's log caps client libraries
/// at info, so no credential appears, while the relay's own verbose lines do. Even when
/// `RUST_LOG` names the client explicitly, passwords in debug dumps are redacted.
#[test]
fn rust_log_trace_does_not_print_the_nats_password_or_token() {
    // No authentication on the server: it accepts the connection whatever the URL carries, so
    // the client goes through its whole connect (and its logging of it).
    let server = match NatsServer::start(false, &[]) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("nats-server not installed ({e}): skipped");
            return;
        }
    };
    let port = server.port();
    let dir = temp_dir("nats");
    for (userinfo, rust_log) in [
        ("relay:natspw-hunter2", "trace"),
        ("natstoken-hunter2", "trace"),
        ("relay:natspw-hunter2", "debug"),
        ("relay:natspw-hunter2", "trace,async_nats=trace"),
    ] {
        let db = dir.join(format!("shop-{}.db", rust_log.len() + userinfo.len()));
        let transport = format!("type = \"nats\"\nurl = \"nats://{userinfo}@127.0.0.1:{port}\"");
        let path = RelayConfig::new("idle_interval = \"200ms\"", &format!("sqlite:{}", db.display()))
            .migrate()
            .destination("bus", "", &transport)
            .route("#", &["bus"])
            .write(&dir.join("outbox.toml"));
        let log = relay_log_until_running(&path, rust_log);
        assert!(log.contains("Destination ready"), "{log}");
        if rust_log.contains("async_nats=") {
            // Asked for by name: the client's debug lines are there, among them the one that
            // dumps the server address with its password, redacted.
            assert!(log.contains("attempting connection") && log.contains("CONNECT"), "{log}");
            assert!(log.contains("password: Some(\"***\")"), "{log}");
        } else {
            assert!(!log.contains("attempting connection"), "RUST_LOG={rust_log}: not capped:\n{log}");
        }
        assert!(!log.contains("hunter2"), "RUST_LOG={rust_log}: a NATS credential in the log:\n{log}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Runs `outbox relay` with `RUST_LOG=rust_log` until it logs `Relaying` (every destination
/// connected), stops it, and returns its whole log (kept next to `config`).
fn relay_log_until_running(config: &Path, rust_log: &str) -> String {
    let mut cmd = outbox_cmd();
    cmd.args(["relay", "--config", config.to_str().unwrap()]).env("RUST_LOG", rust_log);
    let mut relay = RelayProcess::spawn(cmd, &config.with_extension("log"));
    relay.wait_for_log("Relaying", Duration::from_secs(60));
    relay.child.kill();
    relay.log_text()
}
