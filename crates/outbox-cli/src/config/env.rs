//! `OUTBOX__<path>` environment overrides: `OUTBOX__STORES__0__URL=postgres://...` sets
//! `stores[0].url`; `OUTBOX__DESTINATIONS__ORDERS__SECRET=...` sets `destinations.orders.secret`.
//! Path segments are separated by `__`, matched case-insensitively against existing keys (with
//! `-` in a key matching `_`); a number selects an array element. Values that parse as a TOML
//! integer, float or boolean keep that type; everything else is a string. Secrets belong here,
//! not in the file.

use anyhow::bail;
use toml::{Table, Value};

const PREFIX: &str = "OUTBOX__";

/// Applies every `OUTBOX__*` variable to `root`. Returns whether anything was applied.
pub(super) fn apply_overrides(
    root: &mut Table,
    vars: impl Iterator<Item = (String, String)>,
) -> anyhow::Result<bool> {
    let mut any = false;
    let mut vars: Vec<(String, String)> = vars.filter(|(k, _)| k.starts_with(PREFIX)).collect();
    vars.sort();
    for (name, raw) in vars {
        let path: Vec<String> = name[PREFIX.len()..].split("__").map(str::to_owned).collect();
        if path.iter().any(String::is_empty) {
            bail!("environment variable {name}: empty path segment");
        }
        set(root, &path, scalar(&raw)).map_err(|e| anyhow::anyhow!("environment variable {name}: {e}"))?;
        any = true;
    }
    Ok(any)
}

fn scalar(raw: &str) -> Value {
    if let Ok(i) = raw.parse::<i64>() {
        return Value::Integer(i);
    }
    if let Ok(b) = raw.parse::<bool>() {
        return Value::Boolean(b);
    }
    if raw.contains('.') {
        if let Ok(f) = raw.parse::<f64>() {
            if !raw.contains(':') {
                return Value::Float(f);
            }
        }
    }
    Value::String(raw.to_owned())
}

fn matches(key: &str, segment: &str) -> bool {
    key.replace('-', "_").eq_ignore_ascii_case(segment)
}

fn set(table: &mut Table, path: &[String], value: Value) -> Result<(), String> {
    let (head, rest) = path.split_first().ok_or("empty path")?;
    let key = table.keys().find(|k| matches(k, head)).cloned().unwrap_or_else(|| head.to_ascii_lowercase());
    if rest.is_empty() {
        table.insert(key, value);
        return Ok(());
    }
    let entry = table.entry(key.clone()).or_insert_with(|| Value::Table(Table::new()));
    set_in(entry, rest, value).map_err(|e| format!("{key}: {e}"))
}

fn set_in(node: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    match node {
        Value::Table(t) => set(t, path, value),
        Value::Array(items) => {
            let (head, rest) = path.split_first().ok_or("empty path")?;
            let i: usize = head.parse().map_err(|_| format!("{head:?} is not an array index"))?;
            let len = items.len();
            let item =
                items.get_mut(i).ok_or(format!("index {i} is out of range (the array has {len} items)"))?;
            if rest.is_empty() {
                *item = value;
                Ok(())
            } else {
                set_in(item, rest, value)
            }
        }
        _ => Err(format!("{:?} is not a table", path.first())),
    }
}
