//! What the operations subcommands (`status`, `list`, `show`, `retry`, `cancel`, `purge`) share:
//! opening the database with a schema check, argument parsers (times, durations), readable
//! tables and progress on a terminal.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use indicatif::{ProgressBar, ProgressStyle};
use outbox_store::{redact_url, AnyOutbox, Error};

use crate::cli::DatabaseArgs;

/// Connects (a pool of 2) and checks that the outbox schema is exactly at this build's version,
/// so an unmigrated database gets a clear message instead of an SQL error. Returns the outbox
/// and the URL as it may be shown (password redacted).
pub(crate) async fn open(db: &DatabaseArgs) -> anyhow::Result<(AnyOutbox, String)> {
    let shown = clean(&redact_url(&db.database_url), 1000);
    if let Some(path) = sqlite_path(&db.database_url) {
        // Connecting would create an empty file; a typo in the path deserves a better answer.
        if !path.exists() {
            bail!(
                "{shown}: the database file {} does not exist; create the outbox tables with \
                 `outbox migrate --database-url {shown}` first",
                path.display()
            );
        }
    }
    let tables = db.names.tables()?;
    let outbox = AnyOutbox::connect_with_tables(&db.database_url, 2, tables).await?;
    match outbox.check_schema().await {
        Ok(()) => Ok((outbox, shown)),
        Err(Error::SchemaNotMigrated { found, required }) => bail!(
            "{shown}: the outbox tables are not migrated (schema version {found}, this build needs \
             {required}); run `outbox migrate --database-url {shown}` first"
        ),
        Err(e) => Err(anyhow::Error::new(e).context(format!("checking the outbox schema in {shown}"))),
    }
}

/// The file a `sqlite:` URL names, if it names one.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let lower = url.get(..7)?.to_ascii_lowercase();
    if lower != "sqlite:" {
        return None;
    }
    let rest = &url[7..];
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or_default();
    if path.is_empty() || path == ":memory:" || path.starts_with("file:") {
        return None;
    }
    Some(PathBuf::from(path))
}

/// Who the change is recorded for (`updated_by`): `outbox-cli:<login>`.
pub(crate) fn default_actor() -> String {
    let user =
        std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).unwrap_or_else(|_| "unknown".into());
    let mut actor = format!("outbox-cli:{user}");
    actor.truncate(128);
    actor
}

/// Parses a duration: a number and a unit (`ms`, `s`, `m`, `h`, `d`, `w`), or several (`1h30m`);
/// `0` alone is zero.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    const HINT: &str = "expected a number and a unit (ms, s, m, h, d, w), e.g. 30s, 15m, 1h30m, 7d";
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() {
        return Err(format!("empty duration: {HINT}"));
    }
    let mut total_ms: u64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{s:?} is not a duration: {HINT}"));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| format!("{s:?}: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let per_ms: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            "" => return Err(format!("{s:?} has no unit: {HINT}")),
            other => return Err(format!("{s:?}: unknown unit {other:?}: {HINT}")),
        };
        rest = &rest[unit_len..];
        total_ms = n
            .checked_mul(per_ms)
            .and_then(|v| total_ms.checked_add(v))
            .ok_or_else(|| format!("{s:?} is too long"))?;
    }
    Ok(Duration::from_millis(total_ms))
}

/// Parses a point in time: RFC 3339 (`2024-05-01T12:00:00Z`), a UTC date (`2024-05-01`), or a
/// duration ago (`30m`, `7d`), by this machine's clock.
pub(crate) fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    let t = s.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.with_timezone(&Utc));
    }
    if let Ok(day) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        if let Some(midnight) = day.and_hms_opt(0, 0, 0) {
            return Ok(midnight.and_utc());
        }
    }
    let ago = parse_duration(t).map_err(|_| {
        format!(
            "{s:?} is neither a time (RFC 3339 like 2024-05-01T12:00:00Z, or a date like 2024-05-01) \
             nor a duration ago (like 30m, 1h, 7d)"
        )
    })?;
    let ago = chrono::Duration::from_std(ago).map_err(|_| format!("{s:?} is too long ago"))?;
    Utc::now().checked_sub_signed(ago).ok_or_else(|| format!("{s:?} is too long ago"))
}

/// A time for people: `2024-05-01T12:00:00Z`.
pub(crate) fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A duration for people: `850ms`, `42s`, `3m 12s`, `2h 5m`, `4d 3h`.
pub(crate) fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `text` (a value from the database) on one line, cut to `max` characters: control
/// characters escaped (`\n`, `\u{1b}`), so a row cannot move the cursor, recolour the
/// terminal or forge a line of the output.
pub(crate) fn short(text: &str, max: usize) -> String {
    let escaped = outbox_core::text::printable(text, max);
    if escaped.chars().count() <= max {
        return escaped.into_owned();
    }
    let mut cut: String = escaped.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `text` (a value from the database) for a terminal: control characters escaped, cut after
/// `max` characters with a note of what was left out.
pub(crate) fn clean(text: &str, max: usize) -> String {
    outbox_core::text::printable(text, max).into_owned()
}

/// `value` as JSON for stdout. serde_json escapes the C0 control characters; this also escapes
/// DEL, the C1 controls and the Unicode line separators and bidirectional overrides, which JSON
/// allows raw in strings but which act on a terminal (`outbox show 42 --json` read by a person).
/// Outside strings JSON is ASCII, so every such character is inside a string, where `\uXXXX`
/// means the same character.
pub(crate) fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    Ok(terminal_safe(serde_json::to_string(value)?))
}

/// [`to_json`], indented.
pub(crate) fn to_json_pretty<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
    Ok(terminal_safe(serde_json::to_string_pretty(value)?))
}

fn terminal_safe(json: String) -> String {
    if !json.chars().any(acts_on_terminals) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if acts_on_terminals(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn acts_on_terminals(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// `-` for nothing.
pub(crate) fn or_dash(v: Option<&str>) -> String {
    v.map_or_else(|| "-".to_owned(), str::to_owned)
}

/// A plain text table: left-aligned columns separated by two spaces.
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn render(&self, indent: &str) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::from(indent);
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A spinner with a running count on stderr, only when stderr is a terminal and the output is
/// not JSON (scripts and logs get no control characters).
pub(crate) fn progress(json: bool, what: &'static str) -> Option<ProgressBar> {
    if json || !std::io::stderr().is_terminal() {
        return None;
    }
    let style = ProgressStyle::with_template("{spinner} {msg}: {human_pos} ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let bar = ProgressBar::new_spinner().with_style(style).with_message(what);
    bar.enable_steady_tick(Duration::from_millis(120));
    Some(bar)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn json_output_escapes_what_acts_on_terminals() {
        let v = serde_json::json!({ "t": "a\u{1b}[2J\u{7f}\u{9b}31m\u{202e}b\r\n" });
        let out = to_json(&v).unwrap();
        assert!(!out.chars().any(|c| c.is_control() || acts_on_terminals(c)), "{out}");
        let back: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "10", "h", "5 parsecs", "1y", "-1h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times() {
        let at = parse_time("2024-05-01T12:00:00+02:00").unwrap();
        assert_eq!(time(at), "2024-05-01T10:00:00Z");
        assert_eq!(time(parse_time("2024-05-01").unwrap()), "2024-05-01T00:00:00Z");
        let hour_ago = parse_time("1h").unwrap();
        assert!((Utc::now() - hour_ago - chrono::Duration::hours(1)).num_seconds().abs() < 5);
        let err = parse_time("yesterday").unwrap_err();
        assert!(err.contains("RFC 3339") && err.contains("30m"), "{err}");
    }

    #[test]
    fn sqlite_paths() {
        assert_eq!(sqlite_path("sqlite:app.db"), Some(PathBuf::from("app.db")));
        assert_eq!(sqlite_path("sqlite:///tmp/a.db?mode=rwc"), Some(PathBuf::from("/tmp/a.db")));
        assert_eq!(sqlite_path("sqlite::memory:"), None);
        assert_eq!(sqlite_path("postgres://h/db"), None);
    }

    #[test]
    fn tables_and_ages() {
        let mut t = Table::new(&["ID", "TOPIC"]);
        t.row(vec!["1".into(), "order.paid".into()]);
        t.row(vec!["1000".into(), "x".into()]);
        assert_eq!(t.render(""), "ID    TOPIC\n1     order.paid\n1000  x\n");
        assert_eq!(age(Duration::from_secs(3725)), "1h 2m");
        assert_eq!(age(Duration::from_millis(20)), "20ms");
        assert_eq!(short("a\nb", 10), "a\\nb");
        assert_eq!(short("\u{1b}[31mred", 40), "\\u{1b}[31mred");
        assert_eq!(short(&"x".repeat(100), 10).chars().count(), 10);
        assert_eq!(clean("a\rb", 10), "a\\rb");
        assert_eq!(short("abcdef", 4), "abc…");
    }
}
