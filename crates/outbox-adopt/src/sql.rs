//! The SQL a bridge installs, written once for PostgreSQL and MySQL/MariaDB.
//!
//! Four pieces, each one trigger on the database's own write path (so each happens in the
//! transaction that caused it, or not at all):
//!
//! - **refuse** (BEFORE INSERT on the legacy table, only with a `failed` status value): a row
//!   inserted as pending that cannot be a message (no topic; a control character or an
//!   over-long key, tag or business key) is stored with the legacy failed value and a reason,
//!   instead of failing the legacy application's INSERT.
//! - **capture** (AFTER INSERT on the legacy table): a row inserted with the pending value
//!   becomes an `outbox_message` row, linked to it in `outbox_adopt_link`.
//! - **write_back** (AFTER UPDATE on `outbox_message`): the message's status, attempts, times
//!   and last error are written to the linked legacy row, translated to the legacy values.
//! - **guard** (AFTER UPDATE on the legacy table): a change to those legacy columns by anyone
//!   but the write-back (a legacy scanner or sender still running, which would double-send)
//!   is counted in `outbox_adopt_bridge`; `outbox adopt --check` and the relay report it.
//!
//! Legacy names are checked identifiers, always quoted; the outbox's own names come from
//! [`Tables`] (prefix and schema); constants are checked literals.

use outbox_store::{Dialect, Tables};

use crate::spec::{Bridge, Ident, Literal, TopicSource};

/// What the database says about the legacy table, read before any SQL is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyColumns {
    /// Character length of the reason column (`None`: unbounded text, or no reason column).
    pub reason_len: Option<u32>,
}

/// Longest `last_error` the outbox keeps; a reason column is never written more.
const MAX_REASON: u32 = 2000;

/// The four outbox statuses written back, with their legacy value when the mapping gives one.
const STATUSES: [&str; 6] = ["pending", "sending", "sent", "acked", "failed", "cancelled"];

pub(crate) struct Sql<'a> {
    pub(crate) b: &'a Bridge,
    pub(crate) d: Dialect,
    pub(crate) t: &'a Tables,
    pub(crate) cols: &'a LegacyColumns,
}

impl Sql<'_> {
    fn pg(&self) -> bool {
        self.d == Dialect::Postgres
    }

    /// A legacy identifier, quoted.
    pub(crate) fn q(&self, i: &Ident) -> String {
        if self.pg() {
            format!("\"{}\"", i.as_str())
        } else {
            format!("`{}`", i.as_str())
        }
    }

    /// The legacy table, qualified when the mapping names its schema.
    pub(crate) fn legacy(&self) -> String {
        match &self.b.schema {
            Some(s) => format!("{}.{}", self.q(s), self.q(&self.b.table)),
            None => self.q(&self.b.table),
        }
    }

    /// One of the outbox's tables (or a PostgreSQL function, or a MySQL trigger: all are
    /// qualified with the outbox's schema).
    pub(crate) fn obj(&self, canonical: &str) -> String {
        self.t.table(self.d, canonical)
    }

    /// The bridge's own object `role` (`capture`, `write_back`, ...), qualified.
    pub(crate) fn own(&self, role: &str) -> String {
        self.obj(&format!("outbox_adopt_{}_{role}", self.b.name))
    }

    /// The same, unqualified (a PostgreSQL trigger lives in its table's schema).
    pub(crate) fn own_name(&self, role: &str) -> String {
        self.t.name(&format!("outbox_adopt_{}_{role}", self.b.name)).into_owned()
    }

    fn lit(l: &Literal) -> String {
        match l {
            Literal::Int(n) => n.to_string(),
            // Checked: letters, digits and `_-.` only, so quoting needs no escaping.
            Literal::Text(s) => format!("'{s}'"),
        }
    }

    pub(crate) fn bridge_lit(&self) -> String {
        format!("'{}'", self.b.name)
    }

    fn text(&self, e: &str) -> String {
        if self.pg() {
            format!("CAST({e} AS TEXT)")
        } else {
            format!("CAST({e} AS CHAR)")
        }
    }

    fn col(&self, row: &str, c: &Ident) -> String {
        format!("{row}.{}", self.q(c))
    }

    /// A text column, trimmed, blank as NULL.
    fn clean(&self, row: &str, c: Option<&Ident>) -> String {
        match c {
            Some(c) => format!("NULLIF(TRIM({}), '')", self.text(&self.col(row, c))),
            None => "NULL".into(),
        }
    }

    fn topic(&self, row: &str) -> String {
        match &self.b.topic {
            TopicSource::Constant(t) => format!("'{t}'"),
            TopicSource::Column(c) => self.clean(row, Some(c)),
        }
    }

    /// At most `max` characters with no control character (or NULL, unless `required`).
    fn fits(&self, e: &str, max: u32, required: bool) -> String {
        let text = if self.pg() {
            format!("char_length({e}) <= {max} AND {}({e})", self.obj("outbox_text_ok"))
        } else {
            format!("CHAR_LENGTH({e}) <= {max} AND {e} NOT REGEXP '[[:cntrl:]]'")
        };
        if required {
            format!("({e} IS NOT NULL AND {text})")
        } else {
            format!("({e} IS NULL OR ({text}))")
        }
    }

    /// True when the legacy row `row` can be a message (the outbox's own rules).
    pub(crate) fn valid(&self, row: &str) -> String {
        let topic = self.topic(row);
        let mut parts = match &self.b.topic {
            TopicSource::Constant(_) => Vec::new(),
            TopicSource::Column(_) => vec![self.fits(&topic, 255, true)],
        };
        parts.push(self.fits(&self.clean(row, self.b.key.as_ref()), 255, false));
        parts.push(self.fits(&self.clean(row, self.b.tag.as_ref()), 128, false));
        if let Some((t, k)) = &self.b.biz {
            let (t, k) = (self.clean(row, Some(t)), self.clean(row, Some(k)));
            parts.push(format!("(({t}) IS NULL) = (({k}) IS NULL)"));
            parts.push(self.fits(&t, 64, false));
            parts.push(self.fits(&k, 255, false));
        }
        if parts.is_empty() {
            return "TRUE".into();
        }
        format!("({})", parts.join(" AND "))
    }

    /// `row`'s status is the pending value (always true without a status column).
    pub(crate) fn is_pending(&self, row: &str) -> String {
        match &self.b.status {
            Some(s) => format!("{} = {}", self.col(row, &s.column), Self::lit(&s.pending)),
            None => "TRUE".into(),
        }
    }

    /// The reason stored for a row that cannot be a message.
    fn refusal(&self) -> String {
        format!(
            "'adopt {}: this row cannot be a message: no topic, or a control character or an over-long \
             value in the topic, key, tag or business key (docs/adopt.md)'",
            self.b.name
        )
    }

    /// The legacy row's next attempt time as the outbox's (UTC on MySQL), never in the past.
    fn first_attempt(&self, row: &str) -> Option<String> {
        let c = self.b.next_attempt.as_ref().filter(|_| self.b.delay_from_next_attempt)?;
        let v = self.col(row, c);
        Some(if self.pg() {
            format!("LEAST(GREATEST(COALESCE(CAST({v} AS TIMESTAMPTZ), now()), now()), TIMESTAMPTZ '9999-12-30 00:00:00+00')")
        } else {
            format!(
                "LEAST(GREATEST(COALESCE({v} - INTERVAL TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) SECOND, \
                 UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6)), TIMESTAMP '9999-12-30 00:00:00')"
            )
        })
    }

    /// `INSERT INTO outbox_message (...)` columns and the values for legacy row `row`, where
    /// `ok` is a boolean expression: the row can be a message.
    pub(crate) fn message_values(&self, row: &str, ok: &str) -> (String, String) {
        let when_ok = |e: String| format!("CASE WHEN {ok} THEN {e} END");
        let biz = self.b.biz.as_ref();
        let mut cols =
            vec!["topic", "payload", "msg_key", "tag", "biz_type", "biz_key", "status", "last_error"];
        let mut vals = vec![
            format!("CASE WHEN {ok} THEN {} ELSE '(invalid)' END", self.topic(row)),
            format!("COALESCE({}, '')", self.text(&self.col(row, &self.b.payload))),
            when_ok(self.clean(row, self.b.key.as_ref())),
            when_ok(self.clean(row, self.b.tag.as_ref())),
            when_ok(self.clean(row, biz.map(|b| &b.0))),
            when_ok(self.clean(row, biz.map(|b| &b.1))),
            format!("CASE WHEN {ok} THEN 'pending' ELSE 'failed' END"),
            format!("CASE WHEN {ok} THEN NULL ELSE {} END", self.refusal()),
        ];
        if let Some(first) = self.first_attempt(row) {
            cols.push("next_attempt_at");
            vals.push(first);
        }
        (cols.join(", "), vals.join(",\n            "))
    }

    /// `CASE <status> WHEN 'pending' THEN <legacy value> ... END` (NULL for an unmapped status).
    fn legacy_status(&self, status: &str) -> Option<String> {
        let map = self.b.status.as_ref()?;
        let arms: Vec<String> = STATUSES
            .iter()
            .filter_map(|s| map.value_of(s).map(|v| format!("WHEN '{s}' THEN {}", Self::lit(v))))
            .collect();
        Some(format!("CASE {status} {} END", arms.join(" ")))
    }

    /// An outbox time as the legacy column holds it (local time on MySQL, whose DATETIME has
    /// no zone; PostgreSQL converts timestamptz by the session's zone itself).
    fn legacy_time(&self, e: &str) -> String {
        if self.pg() {
            e.to_owned()
        } else {
            format!("{e} + INTERVAL TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW()) SECOND")
        }
    }

    /// The SET list of the write-back, over legacy alias `l`.
    fn write_back_set(&self) -> String {
        let mut set = Vec::new();
        let target = |c: &Ident| if self.pg() { self.q(c) } else { format!("l.{}", self.q(c)) };
        if let (Some(map), Some(case)) = (&self.b.status, self.legacy_status("NEW.status")) {
            set.push(format!("{} = COALESCE({case}, l.{})", target(&map.column), self.q(&map.column)));
        }
        if let Some(c) = &self.b.attempts {
            set.push(format!("{} = NEW.attempts", target(c)));
        }
        if let Some(c) = &self.b.next_attempt {
            set.push(format!("{} = {}", target(c), self.legacy_time("NEW.next_attempt_at")));
        }
        if let Some(c) = &self.b.last_attempt {
            set.push(format!("{} = {}", target(c), self.legacy_time("NEW.last_attempt_at")));
        }
        if let Some(c) = &self.b.reason {
            let len = self.cols.reason_len.unwrap_or(MAX_REASON).min(MAX_REASON);
            set.push(format!("{} = LEFT(NEW.last_error, {len})", target(c)));
        }
        set.join(", ")
    }

    /// When a message update is worth writing back: its legacy status, attempts or error
    /// changed (a claim that keeps the legacy value writes nothing).
    fn write_back_when(&self) -> String {
        let distinct = |a: &str, b: &str| {
            if self.pg() {
                format!("{a} IS DISTINCT FROM {b}")
            } else {
                format!("NOT ({a} <=> {b})")
            }
        };
        let mut any =
            vec![distinct("OLD.attempts", "NEW.attempts"), distinct("OLD.last_error", "NEW.last_error")];
        if let (Some(old), Some(new)) = (self.legacy_status("OLD.status"), self.legacy_status("NEW.status")) {
            any.insert(0, distinct(&old, &new));
        }
        format!("({})", any.join(" OR "))
    }

    /// When a legacy update touched a column the bridge owns.
    fn guard_when(&self) -> Option<String> {
        let cols = self.b.written_columns();
        if cols.is_empty() {
            return None;
        }
        let any: Vec<String> = cols
            .iter()
            .map(|c| {
                let (o, n) = (self.col("OLD", c), self.col("NEW", c));
                if self.pg() {
                    format!("{o} IS DISTINCT FROM {n}")
                } else {
                    format!("NOT ({o} <=> {n})")
                }
            })
            .collect();
        Some(format!("({})", any.join(" OR ")))
    }

    /// The tables every bridge shares (created once, kept while a bridge is installed).
    pub(crate) fn shared_tables(&self) -> Vec<String> {
        let (bridge, link, message) =
            (self.obj("outbox_adopt_bridge"), self.obj("outbox_adopt_link"), self.obj("outbox_message"));
        if self.pg() {
            vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {bridge} (\n    bridge VARCHAR(32) PRIMARY KEY,\n    \
                     legacy_table VARCHAR(200) NOT NULL,\n    definition TEXT NOT NULL,\n    \
                     installed_at TIMESTAMPTZ NOT NULL DEFAULT now(),\n    taken_over BIGINT NOT NULL DEFAULT 0,\n    \
                     foreign_writes BIGINT NOT NULL DEFAULT 0,\n    last_foreign_write_at TIMESTAMPTZ\n)"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {link} (\n    bridge VARCHAR(32) NOT NULL,\n    \
                     legacy_id BIGINT NOT NULL,\n    \
                     message_id BIGINT NOT NULL UNIQUE REFERENCES {message} (id) ON DELETE CASCADE,\n    \
                     PRIMARY KEY (bridge, legacy_id)\n)"
                ),
            ]
        } else {
            vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {bridge} (\n    bridge VARCHAR(32) NOT NULL PRIMARY KEY,\n    \
                     legacy_table VARCHAR(200) NOT NULL,\n    definition LONGTEXT NOT NULL,\n    \
                     installed_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),\n    \
                     taken_over BIGINT NOT NULL DEFAULT 0,\n    foreign_writes BIGINT NOT NULL DEFAULT 0,\n    \
                     last_foreign_write_at DATETIME(6) NULL\n) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {link} (\n    bridge VARCHAR(32) NOT NULL,\n    \
                     legacy_id BIGINT NOT NULL,\n    message_id BIGINT NOT NULL,\n    \
                     PRIMARY KEY (bridge, legacy_id),\n    UNIQUE KEY {} (message_id),\n    \
                     CONSTRAINT {} FOREIGN KEY (message_id) REFERENCES {message} (id) ON DELETE CASCADE\n\
                     ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin",
                    self.t.name("outbox_adopt_link_message_uq"),
                    self.t.name("outbox_adopt_link_message_fk"),
                ),
            ]
        }
    }

    /// The bridge's triggers (and PostgreSQL functions), each statement on its own: the
    /// definition `--check` compares.
    pub(crate) fn triggers(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(set) = self.refuse_set(if self.pg() { ":=" } else { "=" }) {
            out.extend(self.refuse(&set));
        }
        if self.pg() {
            self.pg_triggers(&mut out);
        } else {
            self.mysql_triggers(&mut out);
        }
        out
    }

    /// The refuse trigger (BEFORE INSERT on the legacy table) setting `set`.
    fn refuse(&self, set: &[String]) -> Vec<String> {
        let (pending, valid) = (self.is_pending("NEW"), self.valid("NEW"));
        if self.pg() {
            vec![
                format!(
                    "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $outbox$\nBEGIN\n    \
                     IF {pending} AND NOT {valid} THEN\n        {};\n    END IF;\n    RETURN NEW;\nEND\n$outbox$",
                    self.own("refuse"),
                    set.join(";\n        "),
                ),
                format!(
                    "CREATE TRIGGER {} BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()",
                    self.own_name("refuse"),
                    self.legacy(),
                    self.own("refuse")
                ),
            ]
        } else {
            vec![format!(
                "CREATE TRIGGER {} BEFORE INSERT ON {} FOR EACH ROW\nBEGIN\n    IF {pending} AND NOT {valid} THEN\n        \
                 SET {};\n    END IF;\nEND",
                self.own("refuse"),
                self.legacy(),
                set.join(", "),
            )]
        }
    }

    fn link_insert(&self, legacy_id: &str, message_id: &str) -> String {
        format!(
            "INSERT INTO {} (bridge, legacy_id, message_id) VALUES ({}, {legacy_id}, {message_id})",
            self.obj("outbox_adopt_link"),
            self.bridge_lit()
        )
    }

    fn capture_when(&self) -> String {
        match self.b.status.as_ref().and_then(|s| s.failed.as_ref().map(|f| (s, f))) {
            // The refuse trigger turned an unusable pending row into a failed one: capture it
            // too, as a failed message, so the outbox shows it.
            Some((s, f)) => format!(
                "({} OR ({} = {} AND NOT {}))",
                self.is_pending("NEW"),
                self.col("NEW", &s.column),
                Self::lit(f),
                self.valid("NEW")
            ),
            None => format!("({})", self.is_pending("NEW")),
        }
    }

    /// `SET`s of the refuse trigger: the failed value and the reason.
    fn refuse_set(&self, op: &str) -> Option<Vec<String>> {
        let s = self.b.status.as_ref()?;
        let failed = s.failed.as_ref()?;
        let mut set = vec![format!("{} {op} {}", self.col("NEW", &s.column), Self::lit(failed))];
        if let Some(r) = &self.b.reason {
            let len = self.cols.reason_len.unwrap_or(MAX_REASON).min(MAX_REASON);
            set.push(format!("{} {op} LEFT({}, {len})", self.col("NEW", r), self.refusal()));
        }
        Some(set)
    }

    fn pg_triggers(&self, out: &mut Vec<String>) {
        let (legacy, message) = (self.legacy(), self.obj("outbox_message"));
        let (cols, vals) = self.message_values("NEW", "ok");
        out.push(format!(
            "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $outbox$\nDECLARE\n    \
             ok BOOLEAN := {};\n    mid BIGINT;\nBEGIN\n    INSERT INTO {message} ({cols})\n    VALUES ({vals})\n    \
             RETURNING id INTO mid;\n    {};\n    RETURN NULL;\nEND\n$outbox$",
            self.own("capture"),
            self.valid("NEW"),
            self.link_insert(&self.col("NEW", &self.b.id), "mid"),
        ));
        out.push(format!(
            "CREATE TRIGGER {} AFTER INSERT ON {legacy} FOR EACH ROW WHEN {} EXECUTE FUNCTION {}()",
            self.own_name("capture"),
            self.capture_when(),
            self.own("capture")
        ));
        let set = self.write_back_set();
        if !set.is_empty() {
            out.push(format!(
                "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $outbox$\nBEGIN\n    \
                 UPDATE {legacy} AS l SET {set}\n    FROM {} AS a\n    \
                 WHERE a.bridge = {} AND a.message_id = NEW.id AND l.{} = a.legacy_id;\n    RETURN NULL;\nEND\n$outbox$",
                self.own("write_back"),
                self.obj("outbox_adopt_link"),
                self.bridge_lit(),
                self.q(&self.b.id),
            ));
            out.push(format!(
                "CREATE TRIGGER {} AFTER UPDATE ON {message} FOR EACH ROW WHEN {} EXECUTE FUNCTION {}()",
                self.own_name("write_back"),
                self.write_back_when(),
                self.own("write_back")
            ));
        }
        if let Some(when) = self.guard_when() {
            // Depth 1: the legacy table was updated by a statement of its own, not by the
            // write-back (which runs inside the trigger on outbox_message, at depth 2).
            out.push(format!(
                "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $outbox$\nBEGIN\n    \
                 IF pg_trigger_depth() = 1 THEN\n        UPDATE {} SET foreign_writes = foreign_writes + 1, \
                 last_foreign_write_at = now() WHERE bridge = {};\n    END IF;\n    RETURN NULL;\nEND\n$outbox$",
                self.own("guard"),
                self.obj("outbox_adopt_bridge"),
                self.bridge_lit(),
            ));
            out.push(format!(
                "CREATE TRIGGER {} AFTER UPDATE ON {legacy} FOR EACH ROW WHEN {when} EXECUTE FUNCTION {}()",
                self.own_name("guard"),
                self.own("guard")
            ));
        }
    }

    fn mysql_triggers(&self, out: &mut Vec<String>) {
        let (legacy, message) = (self.legacy(), self.obj("outbox_message"));
        let (cols, vals) = self.message_values("NEW", "ok");
        // LAST_INSERT_ID() inside a trigger is restored when the trigger ends: the legacy
        // application's own LAST_INSERT_ID() / getGeneratedKeys still see its row's id.
        out.push(format!(
            "CREATE TRIGGER {} AFTER INSERT ON {legacy} FOR EACH ROW\nBEGIN\n    DECLARE ok BOOLEAN DEFAULT FALSE;\n    \
             IF {} THEN\n        SET ok = {};\n        INSERT INTO {message} ({cols})\n        VALUES ({vals});\n        \
             {};\n    END IF;\nEND",
            self.own("capture"),
            self.capture_when(),
            self.valid("NEW"),
            self.link_insert(&self.col("NEW", &self.b.id), "LAST_INSERT_ID()"),
        ));
        let set = self.write_back_set();
        if !set.is_empty() {
            out.push(format!(
                "CREATE TRIGGER {} AFTER UPDATE ON {message} FOR EACH ROW\nBEGIN\n    IF {} THEN\n        \
                 SET @outbox_adopt_write_back = 1;\n        UPDATE {legacy} AS l JOIN {} AS a ON l.{} = a.legacy_id\n        \
                 SET {set}\n        WHERE a.bridge = {} AND a.message_id = NEW.id;\n        \
                 SET @outbox_adopt_write_back = NULL;\n    END IF;\nEND",
                self.own("write_back"),
                self.write_back_when(),
                self.obj("outbox_adopt_link"),
                self.q(&self.b.id),
                self.bridge_lit(),
            ));
        }
        if let Some(when) = self.guard_when() {
            out.push(format!(
                "CREATE TRIGGER {} AFTER UPDATE ON {legacy} FOR EACH ROW\nBEGIN\n    \
                 IF @outbox_adopt_write_back IS NULL AND {when} THEN\n        UPDATE {} SET foreign_writes = \
                 foreign_writes + 1, last_foreign_write_at = UTC_TIMESTAMP(6) WHERE bridge = {};\n    END IF;\nEND",
                self.own("guard"),
                self.obj("outbox_adopt_bridge"),
                self.bridge_lit(),
            ));
        }
    }

    /// The names of the bridge's triggers (installed or not) and the table each is on.
    pub(crate) fn trigger_names(&self) -> Vec<String> {
        ["refuse", "capture", "write_back", "guard"].iter().map(|r| self.own_name(r)).collect()
    }

    /// Drops every object of the bridge (whatever an earlier mapping installed).
    pub(crate) fn drops(&self) -> Vec<String> {
        let mut out = Vec::new();
        for role in ["refuse", "capture", "write_back", "guard"] {
            if self.pg() {
                let on = if role == "write_back" { self.obj("outbox_message") } else { self.legacy() };
                out.push(format!("DROP TRIGGER IF EXISTS {} ON {on}", self.own_name(role)));
                out.push(format!("DROP FUNCTION IF EXISTS {}()", self.own(role)));
            } else {
                out.push(format!("DROP TRIGGER IF EXISTS {}", self.own(role)));
            }
        }
        out
    }

    /// Legacy rows pending when the bridge is installed and not yet taken over, oldest first.
    pub(crate) fn untaken(&self, limit: u32) -> String {
        format!(
            "SELECT l.{id} FROM {} AS l WHERE {} AND NOT EXISTS (SELECT 1 FROM {} AS a WHERE a.bridge = {} \
             AND a.legacy_id = l.{id}) ORDER BY l.{id} LIMIT {limit}",
            self.legacy(),
            self.is_pending("l"),
            self.obj("outbox_adopt_link"),
            self.bridge_lit(),
            id = self.q(&self.b.id),
        )
    }

    /// The message of legacy row `?`/`$1` (take-over), with the same rules as the trigger.
    pub(crate) fn take_over(&self) -> String {
        let ok = self.valid("l");
        let (cols, vals) = self.message_values("l", &ok);
        let p = if self.pg() { "$1" } else { "?" };
        let returning = if self.pg() { " RETURNING id" } else { "" };
        format!(
            "INSERT INTO {} ({cols})\nSELECT {vals}\nFROM {} AS l WHERE l.{} = {p}{returning}",
            self.obj("outbox_message"),
            self.legacy(),
            self.q(&self.b.id)
        )
    }

    /// Links legacy row `$1`/`?` to message `$2`/`?`.
    pub(crate) fn link(&self) -> String {
        if self.pg() {
            self.link_insert("$1", "$2")
        } else {
            self.link_insert("?", "?")
        }
    }
}
