//! The SQL contract for other languages (docs/sql-contract.md), proven by its examples: the
//! Python (psycopg 3, PyMySQL) and Java (JDBC) programs in `examples/` run as child processes
//! against a fresh, migrated database, and every message they report committed is read back
//! through the Rust side and checked field by field.
//!
//! Needs python3 with psycopg and PyMySQL, a JDK and the Debian JDBC driver jars; a missing
//! piece fails the test with a hint to run `scripts/install-foreign-deps.sh`, never skips it.
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use outbox_store::{MessageId, Outbox, OutboxDatabase, Status};
use outbox_testkit::{fresh_mysql, fresh_pg, TestDb};
use serde_json::json;
use sqlx::Pool;

const INSTALL_HINT: &str =
    "run scripts/install-foreign-deps.sh to install the foreign-language example dependencies";
const TOPIC: &str = "shop.order.created";
const PG_JAR: &str = "/usr/share/java/postgresql.jar";
const MARIADB_JAR: &str = "/usr/share/java/mariadb-java-client.jar";
/// Orders each example creates: odd ones minimal (1, 3, 5), even ones full (2, 4).
const ORDERS: usize = 5;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// What an example printed.
#[derive(Debug, Default)]
struct Report {
    /// `committed <id> order=<n> variant=minimal|full`
    committed: Vec<Committed>,
    /// `duplicate <id> order=<n>`: (id, order)
    duplicates: Vec<(i64, i64)>,
    /// `rolled-back order=<n>`
    rolled_back: Vec<i64>,
}

#[derive(Debug)]
struct Committed {
    id: i64,
    order: i64,
    full: bool,
}

fn parse_report(stdout: &str) -> Report {
    let mut report = Report::default();
    for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or_default();
        let mut id = None;
        let mut fields = HashMap::new();
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => {
                    fields.insert(k, v);
                }
                None => id = Some(w.parse::<i64>().unwrap_or_else(|_| panic!("bad id in {line:?}"))),
            }
        }
        let order = fields
            .get("order")
            .map(|o| o.parse::<i64>().unwrap_or_else(|_| panic!("bad order in {line:?}")))
            .unwrap_or_else(|| panic!("no order= in {line:?}"));
        match verb {
            "committed" => report.committed.push(Committed {
                id: id.unwrap_or_else(|| panic!("no id in {line:?}")),
                order,
                full: match fields.get("variant") {
                    Some(&"full") => true,
                    Some(&"minimal") => false,
                    other => panic!("bad variant {other:?} in {line:?}"),
                },
            }),
            "duplicate" => report.duplicates.push((id.unwrap_or_else(|| panic!("no id in {line:?}")), order)),
            "rolled-back" => report.rolled_back.push(order),
            _ => panic!("unexpected output line {line:?}"),
        }
    }
    report
}

/// Runs a command to completion; a failure shows its stderr.
fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {shown}: {e}; {INSTALL_HINT}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{shown} failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn require_python_modules() {
    let ok = Command::new("python3")
        .args(["-c", "import psycopg, pymysql"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ok, "python3 with psycopg and PyMySQL is not available; {INSTALL_HINT}");
}

fn require_java(jar: &str) {
    for tool in ["javac", "java"] {
        let ok = Command::new(tool).arg("-version").output().map(|o| o.status.success()).unwrap_or(false);
        assert!(ok, "`{tool}` is not available; {INSTALL_HINT}");
    }
    assert!(Path::new(jar).is_file(), "the JDBC driver {jar} is missing; {INSTALL_HINT}");
}

fn run_python(script: &str, url: &str) -> Report {
    let path = examples_dir().join("python").join(script);
    parse_report(&run(Command::new("python3").arg(path).arg(url).arg(ORDERS.to_string())))
}

/// A directory under cargo's per-test-target temp dir, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run_java(class: &str, jar: &str, jdbc_url: &str) -> Report {
    let dir = TempDir(Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "foreign-{class}-{}-{}",
        std::process::id(),
        rand_suffix()
    )));
    std::fs::create_dir_all(&dir.0).expect("create class dir");
    let source = examples_dir().join("java").join(format!("{class}.java"));
    run(Command::new("javac").arg("-Xlint:all").arg("-Werror").arg("-d").arg(&dir.0).arg(source));
    let classpath = format!("{}:{jar}", dir.0.display());
    parse_report(&run(Command::new("java")
        .arg("-cp")
        .arg(classpath)
        .arg(class)
        .arg(jdbc_url)
        .arg(ORDERS.to_string())))
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// `scheme://user[:password]@host[:port]/db` -> (user, password, host:port, db).
fn split_url(url: &str) -> (String, Option<String>, String, String) {
    let rest = url.split_once("://").expect("URL has a scheme").1;
    let rest = rest.split('?').next().unwrap_or_default();
    let (auth, rest) = rest.rsplit_once('@').expect("URL names a user");
    let (host, db) = rest.split_once('/').expect("URL names a database");
    let (user, password) = match auth.split_once(':') {
        Some((u, p)) => (u.to_owned(), Some(p.to_owned())),
        None => (auth.to_owned(), None),
    };
    (user, password, host.to_owned(), db.to_owned())
}

/// The test database's sqlx URL as a JDBC URL for `subprotocol` (`postgresql`, `mariadb`).
fn jdbc_url(sqlx_url: &str, subprotocol: &str) -> String {
    let (user, password, host, db) = split_url(sqlx_url);
    let mut jdbc = format!("jdbc:{subprotocol}://{host}/{db}?user={user}");
    if let Some(p) = password {
        jdbc.push_str(&format!("&password={p}"));
    }
    jdbc
}

/// What the database holds after an example ran.
struct Tables {
    /// shop_order: id -> amount_cents
    orders: BTreeMap<i64, i64>,
    /// COUNT(*) FROM outbox_message
    messages: i64,
}

const ORDERS_SQL: &str = "SELECT id, amount_cents FROM shop_order ORDER BY id";
const COUNT_SQL: &str = "SELECT COUNT(*) FROM outbox_message";

/// Reads [`Tables`]: the same SQL on every server.
trait ReadTables {
    async fn tables(&self) -> Tables;
}

impl<DB: sqlx::Database> ReadTables for Pool<DB>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'r> (i64, i64): sqlx::FromRow<'r, DB::Row>,
    i64: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    async fn tables(&self) -> Tables {
        let orders: Vec<(i64, i64)> =
            sqlx::query_as(ORDERS_SQL).fetch_all(self).await.expect("read shop_order");
        let messages: i64 =
            sqlx::query_scalar(COUNT_SQL).fetch_one(self).await.expect("count outbox_message");
        Tables { orders: orders.into_iter().collect(), messages }
    }
}

/// Runs an example (`run`, given the database's URL) on `db`, migrated, and checks what it
/// wrote (see [`verify`]); then drops the database.
async fn check_example<DB: OutboxDatabase>(
    db: TestDb<DB>,
    run: impl FnOnce(&str) -> Report,
    source: &str,
    created_by: &str,
) where
    Pool<DB>: ReadTables,
{
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.expect("migrate");
    let report = run(&db.url);
    verify(&outbox, &report, &db.pool.tables().await, source, created_by).await;
    db.drop_db().await;
}

/// Checks the example's report against the tables and every message through `Outbox::get`.
/// `source` is the `source` header the full variant sets, `created_by` its `created_by`.
async fn verify<DB: OutboxDatabase>(
    outbox: &Outbox<DB>,
    report: &Report,
    tables: &Tables,
    source: &str,
    created_by: &str,
) {
    let r = report;
    assert_eq!(r.committed.len(), ORDERS, "one committed message per order: {r:?}");
    let order_ids: Vec<i64> = r.committed.iter().map(|c| c.order).collect();
    assert_eq!(order_ids, (1..=ORDERS as i64).collect::<Vec<_>>(), "orders 1..=N in order: {r:?}");
    assert!(r.committed.windows(2).all(|w| w[0].id < w[1].id), "ids ascend in commit order: {r:?}");
    assert_eq!(
        r.committed.iter().filter(|c| c.full).count(),
        ORDERS / 2,
        "even orders use the full insert: {r:?}"
    );

    // The rolled-back transaction left neither its business row nor its message.
    assert_eq!(r.rolled_back, vec![ORDERS as i64 + 1], "one rolled-back order: {r:?}");
    assert_eq!(
        tables.orders.keys().copied().collect::<Vec<_>>(),
        order_ids,
        "shop_order holds the committed orders only"
    );
    assert_eq!(
        tables.messages,
        r.committed.len() as i64,
        "outbox_message holds exactly the committed messages"
    );

    // The retried enqueue of a full order returned the first message, inserting nothing.
    let first_full = r.committed.iter().find(|c| c.full).expect("a full order");
    assert_eq!(
        r.duplicates,
        vec![(first_full.id, first_full.order)],
        "the retry returns the existing id: {r:?}"
    );

    let now = chrono::Utc::now();
    for c in &r.committed {
        let m = outbox
            .get(MessageId(c.id))
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("message {} reported committed is not in outbox_message", c.id));
        let amount = tables.orders[&c.order];
        assert_eq!(amount, 1000 + c.order, "business row of order {}", c.order);
        assert_eq!(m.id, MessageId(c.id));
        assert_eq!(m.topic, TOPIC);
        let payload: serde_json::Value = serde_json::from_str(&m.payload).expect("payload is JSON");
        assert_eq!(
            payload,
            json!({"order_id": c.order, "amount_cents": amount}),
            "payload of message {}",
            c.id
        );
        assert_eq!(m.status, Status::Pending);
        assert_eq!(m.attempts, 0);
        assert_eq!(m.max_attempts, None);
        assert_eq!(m.tag, None);
        assert_eq!((m.last_attempt_at, m.last_error.as_deref()), (None, None));
        assert_eq!((m.lease_owner.as_deref(), m.lease_until), (None, None));
        // Defaults are the database's UTC clock: due now, not hours off.
        let skew = (m.next_attempt_at - now).num_seconds().abs();
        assert!(skew < 300, "next_attempt_at {} is {skew}s away from now {now}", m.next_attempt_at);
        assert!((m.created_at - now).num_seconds().abs() < 300, "created_at {} vs now {now}", m.created_at);
        if c.full {
            let order = c.order.to_string();
            assert_eq!(m.key.as_deref(), Some(format!("order-{order}").as_str()));
            assert_eq!((m.biz_type.as_deref(), m.biz_key.as_deref()), (Some("order"), Some(order.as_str())));
            let expected: BTreeMap<String, String> =
                [("source".to_owned(), source.to_owned()), ("trace-id".to_owned(), format!("trace-{order}"))]
                    .into();
            assert_eq!(m.headers, expected, "headers of message {}", c.id);
            assert_eq!(m.created_by.as_deref(), Some(created_by));
        } else {
            assert_eq!(m.key, None);
            assert_eq!((m.biz_type, m.biz_key), (None, None));
            assert!(m.headers.is_empty(), "minimal insert gets the '{{}}' default: {:?}", m.headers);
            assert_eq!(m.created_by, None);
        }
    }
}

// Each checks what it needs before creating a database that a failure would leave behind.

#[tokio::test]
async fn python_postgres() {
    require_python_modules();
    let run = |url: &str| run_python("enqueue_postgres.py", url);
    check_example(fresh_pg().await, run, "python", "enqueue_postgres.py").await;
}

#[tokio::test]
async fn python_mysql() {
    require_python_modules();
    let run = |url: &str| run_python("enqueue_mysql.py", url);
    check_example(fresh_mysql().await, run, "python", "enqueue_mysql.py").await;
}

#[tokio::test]
async fn java_postgres() {
    require_java(PG_JAR);
    let run = |url: &str| run_java("EnqueuePostgres", PG_JAR, &jdbc_url(url, "postgresql"));
    check_example(fresh_pg().await, run, "java", "EnqueuePostgres.java").await;
}

#[tokio::test]
async fn java_mysql() {
    require_java(MARIADB_JAR);
    let run = |url: &str| run_java("EnqueueMysql", MARIADB_JAR, &jdbc_url(url, "mariadb"));
    check_example(fresh_mysql().await, run, "java", "EnqueueMysql.java").await;
}

#[test]
fn converts_sqlx_urls_to_jdbc() {
    assert_eq!(
        jdbc_url("postgres://postgres@127.0.0.1:5432/outbox_t_1", "postgresql"),
        "jdbc:postgresql://127.0.0.1:5432/outbox_t_1?user=postgres"
    );
    assert_eq!(
        jdbc_url("mysql://root:pw@127.0.0.1:3306/outbox_t_2?ssl-mode=disabled", "mariadb"),
        "jdbc:mariadb://127.0.0.1:3306/outbox_t_2?user=root&password=pw"
    );
}

#[test]
fn parses_example_output() {
    let r = parse_report("committed 7 order=1 variant=minimal\ncommitted 9 order=2 variant=full\nduplicate 9 order=2\nrolled-back order=3\n");
    assert_eq!(r.committed.len(), 2);
    assert!(!r.committed[0].full && r.committed[1].full);
    assert_eq!((r.committed[1].id, r.committed[1].order), (9, 2));
    assert_eq!(r.duplicates, vec![(9, 2)]);
    assert_eq!(r.rolled_back, vec![3]);
}
