use super::*;
use outbox_core::text::line_col;

const GOOD: &str = r#"
[relay]
batch_size = 200
lease = "20s"

[[stores]]
name = "shop"
url = "sqlite:shop.db"

[destinations.hook]
retry = { max_attempts = 5, initial = "500ms" }
transport = { type = "http", url = "http://127.0.0.1:9/hook", secret = "0123456789abcdef0123" }

[[routes]]
topic = "order.*"
destinations = ["hook"]
"#;

fn parse(text: &str) -> anyhow::Result<Config> {
    Config::parse(text, std::iter::empty(), "outbox.toml")
}

fn parse_env(text: &str, vars: &[(&str, &str)]) -> anyhow::Result<Config> {
    let vars = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
    Config::parse(text, vars.into_iter(), "outbox.toml")
}

fn err(text: &str) -> String {
    format!("{:#}", parse(text).unwrap_err())
}

/// The good file with a `[section]` holding `lines`.
fn with_section(section: &str, lines: &str) -> String {
    format!("{GOOD}\n[{section}]\n{lines}\n")
}

/// Each of `cases` (`lines` in a `[section]` of the good file, and what the error names) is
/// refused, naming all it must; the errors.
fn refused_in(section: &str, cases: &[(&str, &[&str])]) -> Vec<String> {
    let refused = |&(lines, wants): &(&str, &[&str])| {
        let e = err(&with_section(section, lines));
        for want in wants {
            assert!(e.contains(want), "{lines}: want {want:?} in: {e}");
        }
        e
    };
    cases.iter().map(refused).collect()
}

#[test]
fn a_good_file_parses_with_defaults() {
    let c = parse(GOOD).unwrap();
    assert_eq!(c.relay.batch_size, 200);
    assert_eq!(c.relay.lease, Duration::from_secs(20));
    assert_eq!(c.relay.idle_interval, Duration::from_secs(1));
    assert_eq!(c.relay.active_scan_interval, Duration::from_millis(50));
    assert_eq!(c.relay_config("main").active_scan_interval, Duration::from_millis(50));
    assert_eq!(c.destinations["hook"].retry.max_attempts, 5);
    assert_eq!(c.destinations["hook"].retry.initial, Duration::from_millis(500));
    assert_eq!(c.retention.finished_after, Duration::from_secs(7 * 86_400));
    assert_eq!(c.relay_config("shop").unrouted_grace, Duration::from_secs(600));
    let now = parse(&GOOD.replace("lease = \"20s\"", "lease = \"20s\"\nunrouted_grace = \"0s\"")).unwrap();
    assert_eq!(now.relay_config("shop").unrouted_grace, Duration::ZERO);
}

#[test]
fn locked_claims_need_a_connection_per_batch_in_flight() {
    let pg = GOOD.replace("sqlite:shop.db", "postgres://relay@db/shop");
    let small = pg.replace("lease = \"20s\"", "lease = \"20s\"\nmax_in_flight_batches = 6");
    let e = parse(&small).unwrap_err().to_string();
    assert!(
        e.contains("stores[0].max_connections (4)") && e.contains("max_in_flight_batches + 1 (7)"),
        "{e}"
    );
    // Leases, or SQLite (always leases), need no such headroom.
    let leases = small.replace("lease = \"20s\"", "lease = \"20s\"\nlock_claims = false");
    assert!(!parse(&leases).unwrap().relay.lock_claims);
    let sqlite = GOOD.replace("lease = \"20s\"", "lease = \"20s\"\nmax_in_flight_batches = 6");
    assert!(parse(&sqlite).unwrap().relay.lock_claims);
}

#[test]
fn unknown_keys_are_errors_with_the_line() {
    let bad = GOOD.replace("batch_size = 200", "batch_size = 200\nbatchsize = 1");
    let e = err(&bad);
    assert!(e.starts_with("outbox.toml:4:1: relay.batchsize: unknown field `batchsize`"), "{e}");
}

#[test]
fn type_errors_name_the_line_and_key() {
    let bad = GOOD.replace("lease = \"20s\"", "lease = \"soon\"");
    let e = err(&bad);
    assert!(e.contains("invalid duration") && e.starts_with("outbox.toml:4:9: relay.lease:"), "{e}");
}

#[test]
fn a_route_to_an_unknown_destination_names_it_and_its_line() {
    let bad = GOOD.replace(r#"destinations = ["hook"]"#, r#"destinations = ["hook", "kafka"]"#);
    let e = err(&bad);
    assert!(e.contains("outbox.toml:16: routes[0].destinations[1]"), "{e}");
    assert!(e.contains("unknown destination \"kafka\""), "{e}");
}

#[test]
fn bad_patterns_and_urls_are_named() {
    let e = err(&GOOD.replace("order.*", "order.#.x"));
    assert!(e.contains("outbox.toml:15: routes[0].topic"), "{e}");
    let e = err(&GOOD.replace("sqlite:shop.db", "oracle://u:pw@h/x"));
    assert!(e.contains("outbox.toml:8: stores[0].url") && !e.contains("pw@"), "{e}");
    let e = err(&GOOD.replace("sqlite:shop.db", "host=db password=hunter2"));
    assert!(e.contains("stores[0].url: not a URL") && !e.contains("hunter2"), "{e}");
    // Found by `override_values_never_echo`: a bare value ending in `=` was echoed partly
    // masked (`SEKRIT=kEY=***`), so the scrubbing of the override's whole value missed it.
    let vars = vec![("OUTBOX__STORES__0__URL".to_owned(), "SEKRIT=kEY==".to_owned())];
    let e = format!("{:#}", Config::parse(GOOD, vars.into_iter(), "outbox.toml").unwrap_err());
    assert!(e.contains("OUTBOX__STORES__0__URL") && e.contains("not a URL"), "{e}");
    assert!(!e.contains("SEKRIT") && !e.contains("kEY"), "{e}");
    let e = err(&GOOD.replace("[[stores]]\nname = \"shop\"\nurl = \"sqlite:shop.db\"\n", "stores = []\n"));
    assert!(e.contains("stores"), "{e}");
}

/// Finding 11: every value the relay would refuse, or misbehave on, is refused here, naming
/// the key and its line.
#[test]
fn values_the_relay_cannot_run_with_are_refused_by_key_and_line() {
    let relay = |line: &str| GOOD.replace("lease = \"20s\"", &format!("lease = \"20s\"\n{line}"));
    let cases: Vec<(String, &str)> = vec![
        (relay("idle_interval = \"0s\""), "outbox.toml:5: relay.idle_interval"),
        (relay("idle_interval = \"2h\""), "outbox.toml:5: relay.idle_interval"),
        (relay("active_scan_interval = \"0s\""), "outbox.toml:5: relay.active_scan_interval"),
        (relay("active_scan_interval = \"2h\""), "outbox.toml:5: relay.active_scan_interval"),
        (relay("max_in_flight_batches = 0"), "outbox.toml:5: relay.max_in_flight_batches"),
        (relay("max_run = 0"), "outbox.toml:5: relay.max_run"),
        (relay("max_run = 100000"), "outbox.toml:5: relay.max_run"),
        (relay("owner = \"\""), "outbox.toml:5: relay.owner"),
        (relay("owner = \"a\\u001b[31m\""), "outbox.toml:5: relay.owner"),
        (relay(&format!("owner = \"{}\"", "o".repeat(200))), "outbox.toml:5: relay.owner"),
        (relay("shutdown_timeout = \"2h\""), "outbox.toml:5: relay.shutdown_timeout"),
        (relay("unrouted_grace = \"8d\""), "outbox.toml:5: relay.unrouted_grace"),
        (relay("publish_timeout = \"0s\""), "outbox.toml:5: relay.publish_timeout"),
        (GOOD.replace("lease = \"20s\"", "lease = \"100000000d\""), "outbox.toml:4: relay.lease"),
        (GOOD.replace("lease = \"20s\"", "lease = \"0s\""), "outbox.toml:4: relay.lease"),
        (GOOD.replace("batch_size = 200", "batch_size = 0"), "outbox.toml:3: relay.batch_size"),
        (GOOD.replace("name = \"shop\"", "name = \"\""), "outbox.toml:7: stores[0].name"),
        (GOOD.replace("name = \"shop\"", "name = \"sh\\rop\""), "outbox.toml:7: stores[0].name"),
        (GOOD.replace("name = \"shop\"", &format!("name = \"{}\"", "s".repeat(130))), "stores[0].name"),
        (
            GOOD.replace("[destinations.hook]", "[destinations.\"\"]").replace("[\"hook\"]", "[\"\"]"),
            "destinations.\"\"",
        ),
        (
            GOOD.replace("[destinations.hook]", &format!("[destinations.{}]", "d".repeat(129)))
                .replace("[\"hook\"]", &format!("[\"{}\"]", "d".repeat(129))),
            "destinations.ddd",
        ),
        (
            GOOD.replace("[destinations.hook]", "[destinations.\"a\\u0007b\"]")
                .replace("[\"hook\"]", "[\"a\\u0007b\"]"),
            "control characters",
        ),
        (
            GOOD.replace("[destinations.hook]", "[destinations.hook]\nmax_payload_bytes = 0"),
            "outbox.toml:11: destinations.hook.max_payload_bytes",
        ),
        (
            GOOD.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"0s\" }"),
            "outbox.toml:11: destinations.hook.ack.timeout",
        ),
        (with_section("retention", "interval = \"0s\""), "outbox.toml:19: retention.interval"),
        (with_section("retention", "batch = 1000000000"), "outbox.toml:19: retention.batch"),
        (with_section("retention", "batch = 0"), "outbox.toml:19: retention.batch"),
        (
            with_section("retention", "finished_after = \"100000d\""),
            "outbox.toml:19: retention.finished_after",
        ),
        (with_section("ack", "token_ttl = \"0s\""), "outbox.toml:19: ack.token_ttl"),
        (GOOD.replace("topic = \"order.*\"", "topic = \"order.\\u001b\""), "outbox.toml:15: routes[0].topic"),
        (GOOD.replace("max_attempts = 5,", "max_attempts = 0,"), "outbox.toml:11: destinations.hook.retry"),
    ];
    for (text, want) in cases {
        let e = err(&text);
        assert!(e.contains(want), "want {want:?} in: {e}");
        assert!(!e.contains('\u{1b}') && !e.contains('\r') && !e.contains('\u{7}'), "{e}");
    }
    // A token TTL shorter than the ACK timeout.
    let ack = GOOD.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"2h\" }");
    let e = err(&format!("{ack}\n[ack]\nsecret = \"0123456789abcdef\"\ntoken_ttl = \"1h\"\n"));
    assert!(e.contains("outbox.toml:21: ack.token_ttl") && e.contains("ack.timeout"), "{e}");
    assert!(!e.contains("0123456789abcdef"), "{e}");
}

#[test]
fn environment_overrides_replace_values() {
    let vars = [
        ("OUTBOX__STORES__0__URL", "postgres://app:secret@db/shop"),
        ("OUTBOX__RELAY__BATCH_SIZE", "50"),
        ("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__SECRET", "another-secret-0123456"),
        ("UNRELATED", "x"),
    ];
    let c = parse_env(GOOD, &vars).unwrap();
    assert_eq!(c.stores[0].url.get_ref(), "postgres://app:secret@db/shop");
    assert_eq!(c.relay.batch_size, 50);
    // A key the file does not set: typed by its look.
    let c = parse_env(GOOD, &[("OUTBOX__RELAY__MAX_IN_FLIGHT_BATCHES", "3")]).unwrap();
    assert_eq!(c.relay.max_in_flight_batches, 3);
    let c = parse_env(GOOD, &[("OUTBOX__RETENTION__INTERVAL", "30000")]).unwrap();
    assert_eq!(c.retention.interval, Duration::from_secs(30));
}

#[test]
fn an_all_digit_secret_stays_a_string() {
    let ack = GOOD.replace("[destinations.hook]", "[destinations.hook]\nack = { timeout = \"30s\" }");
    let c = parse_env(&ack, &[("OUTBOX__ACK__SECRET", "1234567890123456789")]).unwrap();
    assert_eq!(c.ack.secret.as_deref(), Some("1234567890123456789"));
    // Also over a string in the file, and for a transport secret.
    let file = format!("{ack}\n[ack]\nsecret = \"0123456789abcdef\"\n");
    let c = parse_env(&file, &[("OUTBOX__ACK__SECRET", "98765432109876543210")]).unwrap();
    assert_eq!(c.ack.secret.as_deref(), Some("98765432109876543210"));
    parse_env(GOOD, &[("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__SECRET", "12345678901234567890")]).unwrap();
}

#[test]
fn override_errors_name_the_variable_and_hide_the_value() {
    let cases = [
        ("OUTBOX__RELAY__BATCH_SIZE", "hunter2hunter2", "relay.batch_size"),
        ("OUTBOX__RELAY__BATCH_SIZE", "0", "relay.batch_size"),
        ("OUTBOX__RELAY__IDLE_INTERVAL", "0s", "relay.idle_interval"),
        ("OUTBOX__RELAY__ACTIVE_SCAN_INTERVAL", "hunter2hunter2", "relay.active_scan_interval"),
        ("OUTBOX__RELAY__LEASE", "hunter2hunter2", "relay.lease"),
        ("OUTBOX__RELAY__MAX_IN_FLIGHT_BATCHES", "hunter2hunter2", "relay.max_in_flight_batches"),
        ("OUTBOX__RELAY__BATCHSIZE", "hunter2hunter2", "relay.batchsize"),
        ("OUTBOX__ACK__TOKEN_TTL", "hunter2hunter2", "ack.token_ttl"),
        ("OUTBOX__STORES__0__URL", "oracle://u:hunter2hunter2@h/db", "stores[0].url"),
        ("OUTBOX__STORES__0__MAX_CONNECTIONS", "hunter2hunter2", "stores[0].max_connections"),
    ];
    for (var, value, key) in cases {
        let e = format!("{:#}", parse_env(GOOD, &[(var, value)]).unwrap_err());
        assert!(e.contains(&format!("environment variable {var} ({key})")), "{var}: {e}");
        assert!(!e.contains("hunter2"), "{var}: {e}");
    }
}

#[test]
fn parse_errors_never_print_the_source_line() {
    // A syntax error on the line of a secret: the position, not the line.
    let bad = GOOD.replace("secret = \"0123456789abcdef0123\" }", "secret = \"hunter2-0123456789abcdef }");
    let e = err(&bad);
    assert!(e.starts_with("outbox.toml:12:"), "{e}");
    assert!(e.contains("destinations.hook.transport"), "{e}");
    assert!(!e.contains("hunter2") && !e.contains('|'), "{e}");
    let bad = with_section("ack", "secret = hunter2-secret-value");
    let e = err(&bad);
    assert!(e.starts_with("outbox.toml:19:10: ack.secret:"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    // A type error on a secret: the key, not the value.
    let bad = with_section("ack", "secret = 12345678901234567890123");
    let e = err(&bad);
    assert!(!e.contains("12345678901234567890123"), "{e}");
    let bad = with_section("ack", "secret = 1234567890123456789");
    let e = err(&bad);
    assert!(e.contains("outbox.toml:19:10: ack.secret") && !e.contains("1234567890123456789"), "{e}");
    let bad = GOOD.replace("batch_size = 200", "batch_size = \"hunter2-secret\"");
    let e = err(&bad);
    assert!(e.contains("relay.batch_size") && !e.contains("hunter2"), "{e}");
}

#[test]
fn keys_are_located() {
    let located = locate::locate(GOOD);
    let line = |key: &str| located.iter().find(|(k, _)| k == key).map(|(_, s)| line_col(GOOD, s.start).0);
    assert_eq!(line("relay.lease"), Some(4));
    assert_eq!(line("stores[0].url"), Some(8));
    assert_eq!(line("destinations.hook.retry.max_attempts"), Some(11));
    assert_eq!(line("destinations.hook.transport.secret"), Some(12));
    assert_eq!(line("routes[0].destinations[0]"), Some(16));
    assert!(locate::locate("not toml [").is_empty());
}

mod prop {
    //! Property tests of the parser: whatever the file or the environment holds, parsing
    //! never panics, every error names the file (or the environment variable), and what
    //! parses is valid.
    use proptest::prelude::*;

    use super::super::validate::MAX_LEASE;
    use super::super::*;
    use super::GOOD;

    fn check_parsed(r: anyhow::Result<Config>) -> Result<(), TestCaseError> {
        match r {
            Ok(c) => {
                prop_assert!(!c.stores.is_empty());
                prop_assert!(c.relay.batch_size >= 1 && c.relay.batch_size <= 10_000);
                prop_assert!(c.relay.publish_timeout < c.relay.lease);
                prop_assert!(c.relay.lease <= MAX_LEASE && !c.relay.idle_interval.is_zero());
                prop_assert!(c.relay.max_in_flight_batches >= 1);
                prop_assert!(c.retention.batch >= 1 && !c.retention.interval.is_zero());
                for r in &c.routes {
                    for d in &r.destinations {
                        prop_assert!(c.destinations.contains_key(d.get_ref()));
                    }
                }
            }
            // Errors name the file, or the environment variable that caused them, and hold
            // no control character.
            Err(e) => {
                let e = format!("{e:#}");
                prop_assert!(e.contains("outbox.toml") || e.contains("environment variable OUTBOX__"), "{e}");
                prop_assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn arbitrary_text_never_panics(text in ".{0,400}") {
            check_parsed(Config::parse(&text, std::iter::empty(), "outbox.toml"))?;
        }

        #[test]
        fn a_good_file_with_one_line_replaced_never_panics(
            line in 0usize..20,
            replacement in prop_oneof![
                ".{0,60}",
                "[a-z_]{1,12} = (\"[a-z0-9.#*]{0,10}\"|-?[0-9]{1,12}|true|\\[\\]|\\{\\})",
                Just("[[stores]]".to_owned()),
                Just("[destinations.hook.transport]".to_owned()),
                Just("lease = \"1ms\"".to_owned()),
                Just("batch_size = 0".to_owned()),
                Just("topic = \"\"".to_owned()),
            ],
        ) {
            let mut lines: Vec<&str> = GOOD.lines().collect();
            let i = line.min(lines.len() - 1);
            lines[i] = &replacement;
            let text = lines.join("\n");
            check_parsed(Config::parse(&text, std::iter::empty(), "outbox.toml"))?;
        }

        #[test]
        fn arbitrary_environment_overrides_never_panic(
            key in prop_oneof![
                "OUTBOX__[A-Z_]{1,20}",
                "OUTBOX__(RELAY|STORES|DESTINATIONS|ROUTES)__[A-Z0-9_]{0,12}(__[A-Z0-9_]{0,12}){0,3}",
                Just("OUTBOX__".to_owned()),
                Just("OUTBOX____".to_owned()),
                Just("OUTBOX__STORES__99__URL".to_owned()),
            ],
            value in ".{0,40}",
        ) {
            let vars = vec![(key, value)];
            check_parsed(Config::parse(GOOD, vars.into_iter(), "outbox.toml"))?;
        }

        /// A secret-looking value given for a real key never appears in the error.
        #[test]
        fn override_values_never_echo(
            key in prop_oneof![
                Just("OUTBOX__RELAY__BATCH_SIZE"),
                Just("OUTBOX__RELAY__LEASE"),
                Just("OUTBOX__RELAY__LOCK_CLAIMS"),
                Just("OUTBOX__STORES__0__URL"),
                Just("OUTBOX__STORES__0__MAX_CONNECTIONS"),
                Just("OUTBOX__ACK__TOKEN_TTL"),
                Just("OUTBOX__RETENTION__BATCH"),
                Just("OUTBOX__DESTINATIONS__HOOK__RETRY__MAX_ATTEMPTS"),
                Just("OUTBOX__DESTINATIONS__HOOK__TRANSPORT__URL"),
            ],
            value in prop_oneof![
                "SEKRIT[a-zA-Z0-9@?=]{0,20}",
                "oracle://u:SEKRIT[a-zA-Z0-9:/@?=]{0,20}@h/db",
                "nats://SEKRIT[a-zA-Z0-9]{0,20}@h:4222",
            ],
        ) {
            let vars = vec![(key.to_owned(), value)];
            if let Err(e) = Config::parse(GOOD, vars.into_iter(), "outbox.toml") {
                let e = format!("{e:#}");
                prop_assert!(!e.contains("SEKRIT"), "{e}");
                prop_assert!(e.contains(key), "{e}");
            }
        }
    }
}

#[test]
fn ack_endpoint_limits_have_defaults_and_bounds() {
    let c = parse(GOOD).unwrap();
    assert_eq!(
        (c.ack.max_connections, c.ack.header_timeout, c.ack.request_timeout),
        (256, Duration::from_secs(5), Duration::from_secs(10))
    );
    let c = parse(&with_section("ack", "max_connections = 64\nheader_timeout = \"2s\"")).unwrap();
    assert_eq!((c.ack.max_connections, c.ack.header_timeout), (64, Duration::from_secs(2)));
    refused_in(
        "ack",
        &[
            ("max_connections = 0", &["outbox.toml:19: ack.max_connections"]),
            ("max_connections = 1000000", &["outbox.toml:19: ack.max_connections"]),
            ("header_timeout = \"0s\"", &["outbox.toml:19: ack.header_timeout"]),
            ("request_timeout = \"1h\"", &["outbox.toml:19: ack.request_timeout"]),
        ],
    );
}

/// `[admin]`: off unless present; off loopback both tokens are required, and they must be
/// long, distinct and never echoed back in the error.
#[test]
fn the_admin_listener_needs_tokens_off_loopback() {
    assert!(parse(GOOD).unwrap().admin.is_none());
    let on = parse(&with_section("admin", "")).unwrap();
    assert_eq!(on.admin.unwrap().listen, "127.0.0.1:8098");
    let e = err(&with_section("admin", "listen = \"0.0.0.0:8098\""));
    assert!(e.contains("admin.listen") && e.contains("not a loopback address"), "{e}");
    let e = err(&with_section("admin", "read_token = \"short\"\nadmin_token = \"0123456789abcdefXYZ\""));
    assert!(e.contains("admin.read_token") && !e.contains("short\""), "{e}");
    let same = "0123456789abcdefXYZ";
    let e = err(&with_section("admin", &format!("read_token = \"{same}\"\nadmin_token = \"{same}\"")));
    assert!(e.contains("must differ"), "{e}");
    let ok = parse(&format!(
        "{GOOD}\n[admin]\nlisten = \"0.0.0.0:8098\"\nread_token = \"r123456789abcdefXYZ\"\nadmin_token = \"a123456789abcdefXYZ\"\n"
    ));
    assert!(ok.is_ok(), "{ok:?}");
    let e = err(&with_section("admin", "listen = \"not an address\""));
    assert!(e.contains("admin.listen"), "{e}");
}

#[test]
fn debug_output_never_shows_a_token_or_secret() {
    let file = format!(
        "{GOOD}\n[admin]\nread_token = \"r123456789abcdefXYZ\"\nadmin_token = \"a123456789abcdefXYZ\"\n\
         [ack]\nsecret = \"s123456789abcdefXYZ\"\n"
    );
    let c = parse(&file).unwrap();
    let shown = format!("{:?} {:?}", c.admin, c.ack);
    for secret in ["r123456789abcdefXYZ", "a123456789abcdefXYZ", "s123456789abcdefXYZ"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(
        shown.contains("read_token: Some(<redacted>)") && shown.contains("secret: Some(<redacted>)"),
        "{shown}"
    );
}

#[test]
fn alerts_name_a_destination_and_a_bounded_window() {
    let c = parse(&with_section("alerts", "destination = \"hook\"\nwindow = \"10m\"")).unwrap();
    assert_eq!((c.alerts.destination.as_deref(), c.alerts.window), (Some("hook"), Duration::from_secs(600)));
    refused_in(
        "alerts",
        &[
            ("destination = \"nope\"", &["alerts.destination", "not a [destinations.*] name"]),
            ("destination = \"hook\"\nwindow = \"0s\"", &["alerts.window"]),
        ],
    );
}

#[test]
fn alert_thresholds_default_turn_off_and_are_bounded() {
    refused_in(
        "alerts",
        &[
            ("overdue_after = \"5s\"", &["alerts.overdue_after", "between 10s and 7d"]),
            ("circuit_open_after = \"30d\"", &["alerts.circuit_open_after"]),
        ],
    );
    let c = parse(GOOD).unwrap();
    let r = c.relay_config("shop");
    assert_eq!(
        (r.alert_circuit_open_after, r.alert_overdue_after),
        (Some(Duration::from_secs(300)), Some(Duration::from_secs(900)))
    );
    let c = parse(&with_section("alerts", "circuit_open_after = \"0s\"\noverdue_after = \"1h\"")).unwrap();
    let r = c.relay_config("shop");
    assert_eq!((r.alert_circuit_open_after, r.alert_overdue_after), (None, Some(Duration::from_secs(3600))));
}

#[test]
fn telemetry_is_checked() {
    let c =
        parse(&with_section("telemetry", "otlp_endpoint = \"https://collector:4318/v1/traces\"")).unwrap();
    assert_eq!(c.telemetry.service_name, "outbox-relay");
    let errors = refused_in(
        "telemetry",
        &[
            ("otlp_endpoint = \"ftp://x\"", &["telemetry.otlp_endpoint"]),
            ("otlp_endpoint = \"http://user:pw@collector:4318\"", &["telemetry.otlp_endpoint"]),
            ("sample_ratio = 1.5", &["telemetry.sample_ratio"]),
            ("service_name = \"\"", &["telemetry.service_name"]),
        ],
    );
    for e in errors {
        assert!(!e.contains("pw@"), "no credential echoed: {e}");
    }
}

#[test]
fn store_schema_and_table_prefix_are_checked_at_load() {
    let pg = GOOD.replace("sqlite:shop.db", "postgres://relay@db/shop").replace(
        "url = \"postgres://relay@db/shop\"",
        "url = \"postgres://relay@db/shop\"\nschema = \"billing\"\ntable_prefix = \"app_\"",
    );
    let c = parse(&pg.replace("lease = \"20s\"", "lease = \"20s\"\nlock_claims = false")).unwrap();
    let t = c.stores[0].tables().unwrap();
    assert_eq!((t.schema(), t.prefix()), (Some("billing"), "app_"));
    // Defaults: the connection's schema, prefix outbox_.
    assert!(parse(GOOD).unwrap().stores[0].tables().unwrap().is_canonical());
    for (bad, key) in [
        ("schema = \"billing\"", "schema = \"x; drop table t\""),
        ("schema = \"billing\"", "schema = \"Billing\""),
        ("schema = \"billing\"", "schema = \"\""),
        ("table_prefix = \"app_\"", "table_prefix = \"App_\""),
        ("table_prefix = \"app_\"", "table_prefix = \"\u{e9}_\""),
        ("table_prefix = \"app_\"", "table_prefix = \"a_prefix_longer_than_twenty_four_\""),
    ] {
        let text = pg.replace(bad, key).replace("lease = \"20s\"", "lease = \"20s\"\nlock_claims = false");
        let e = err(&text);
        let field = if key.starts_with("schema") { "stores[0].schema" } else { "stores[0].table_prefix" };
        assert!(e.contains(field) && e.contains("store \"shop\"") && e.contains("must match"), "{e}");
    }
    // SQLite has no schemas.
    let e = err(&GOOD.replace("url = \"sqlite:shop.db\"", "url = \"sqlite:shop.db\"\nschema = \"s\""));
    assert!(e.contains("stores[0].schema") && e.contains("SQLite has no schemas"), "{e}");
    assert!(parse(
        &GOOD.replace("url = \"sqlite:shop.db\"", "url = \"sqlite:shop.db\"\ntable_prefix = \"x_\"")
    )
    .is_ok());
}
