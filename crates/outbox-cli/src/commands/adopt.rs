//! `outbox adopt`: installs, prints, checks or removes the bridges of the `[[adopt]]` sections
//! (docs/adopt.md), each in the database of the store it names.

use anyhow::{bail, Context};
use outbox_adopt::{Bridge, Db};
use outbox_store::{redact_url, AnyOutbox};

use crate::cli::AdoptArgs;
use crate::config::{Config, StoreConfig};

/// One bridge of the configuration with the store whose database holds its legacy table.
pub(crate) struct Adoption<'a> {
    pub(crate) bridge: Bridge,
    pub(crate) store: &'a StoreConfig,
}

/// The bridges of `config` (every one, or the one named), each with its store. The mappings
/// were checked when the configuration loaded.
pub(crate) fn adoptions<'a>(config: &'a Config, only: Option<&str>) -> anyhow::Result<Vec<Adoption<'a>>> {
    let mut out = Vec::new();
    for (i, section) in config.adopt.iter().enumerate() {
        if only.is_some_and(|n| n != section.name) {
            continue;
        }
        let bridge = section.check().with_context(|| format!("adopt[{i}]"))?;
        let store = match &section.store {
            Some(name) => config.stores.iter().find(|s| s.name.get_ref() == name).with_context(|| {
                format!("adopt.{}.store: no [[stores]] entry is named {name:?}", bridge.name)
            })?,
            None if config.stores.len() == 1 => &config.stores[0],
            None => bail!(
                "adopt.{}.store: the relay has several stores; name the one that holds the table",
                bridge.name
            ),
        };
        out.push(Adoption { bridge, store });
    }
    if let Some(name) = only {
        if out.is_empty() {
            bail!("--bridge {name:?}: no [[adopt]] section has that name");
        }
    }
    if out.is_empty() {
        bail!("the configuration has no [[adopt]] section (docs/adopt.md shows one)");
    }
    Ok(out)
}

/// Connects to `store` and runs `f` with its pool as an adopt [`Db`].
pub(crate) async fn with_db<T>(
    store: &StoreConfig,
    f: impl for<'p> AsyncFnOnce(Db<'p>, &'p outbox_store::Tables) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let shown = super::ops::clean(&redact_url(store.url.get_ref()), 1000);
    let tables = store.tables()?;
    let outbox = AnyOutbox::connect_with_tables(store.url.get_ref(), 2, tables.clone())
        .await
        .with_context(|| format!("store {}: connecting to {shown}", store.name.get_ref()))?;
    match &outbox {
        AnyOutbox::Postgres(o) => f(Db::Postgres(o.pool()), &tables).await,
        AnyOutbox::MySql(o) => f(Db::MySql(o.pool()), &tables).await,
        _ => bail!(
            "store {}: adopt supports PostgreSQL and MySQL/MariaDB (a legacy table in SQLite can be read by the \
             application itself)",
            store.name.get_ref()
        ),
    }
}

pub(crate) async fn run(args: AdoptArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let mut failed = false;
    for a in adoptions(&config, args.bridge.as_deref())? {
        let name = a.bridge.name.clone();
        let store = a.store.name.get_ref().clone();
        let bridge = &a.bridge;
        if args.print {
            let script = with_db(a.store, async |db, tables| {
                let cols = outbox_adopt::inspect(db, bridge).await?;
                Ok(outbox_adopt::script(bridge, db.dialect(), tables, &cols))
            })
            .await?;
            print!("{script}");
        } else if args.check {
            let report =
                with_db(a.store, async |db, tables| Ok(outbox_adopt::check(db, tables, bridge).await?))
                    .await?;
            let mut lines: Vec<String> = report.problems.clone();
            if report.foreign_writes > 0 {
                lines.push(format!(
                    "the legacy table's status/retry columns were changed {} times by something other than the \
                     relay (last at {}): a legacy scanner or sender still runs and double-sends; switch it off \
                     (docs/adopt.md)",
                    report.foreign_writes,
                    report.last_foreign_write_at.as_deref().unwrap_or("unknown")
                ));
            }
            if lines.is_empty() {
                lines.push("installed as configured; no foreign writes".into());
            }
            let json = serde_json::json!({
                "bridge": name, "store": store, "ok": report.ok(), "problems": report.problems,
                "foreign_writes": report.foreign_writes,
                "last_foreign_write_at": report.last_foreign_write_at, "taken_over": report.taken_over,
            });
            emit(args.json, &json, &name, &store, &lines);
            failed |= !report.ok();
        } else if args.remove {
            with_db(a.store, async |db, tables| Ok(outbox_adopt::remove(db, tables, bridge).await?)).await?;
            let line = "removed; the legacy table and the messages are untouched".to_owned();
            emit(
                args.json,
                &serde_json::json!({"bridge": name, "store": store, "removed": true}),
                &name,
                &store,
                &[line],
            );
        } else {
            let report =
                with_db(a.store, async |db, tables| Ok(outbox_adopt::install(db, tables, bridge).await?))
                    .await?;
            let line = format!(
                "installed ({}); took over {} pending legacy rows",
                report.triggers.join(", "),
                report.taken_over
            );
            let json = serde_json::json!({"bridge": name, "store": store, "taken_over": report.taken_over, "triggers": report.triggers});
            emit(args.json, &json, &name, &store, &[line]);
        }
    }
    if failed {
        bail!("a bridge is not as configured, or its legacy table is written by someone else");
    }
    Ok(())
}

/// One bridge's result: a JSON object, or a line per finding.
fn emit(json: bool, value: &serde_json::Value, name: &str, store: &str, lines: &[String]) {
    if json {
        println!("{value}");
    } else {
        for l in lines {
            println!("adopt {name} (store {store}): {l}");
        }
    }
}

/// How often the relay re-reads each bridge's record.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// The relay's watch over the bridges of one store: at start and every 30 s it checks each
/// bridge as `outbox adopt --check` does. Writes to the legacy table by anything but the relay
/// (a legacy scanner or sender still running, which double-sends) are logged as a warning each
/// time their count grows, and exported as `outbox_adopt_foreign_writes{bridge}`; a bridge not
/// installed as configured is logged when that changes. Never stops the relay.
pub(crate) async fn watch(
    outbox: AnyOutbox,
    tables: outbox_store::Tables,
    store: String,
    bridges: Vec<Bridge>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut seen: Vec<(i64, Vec<String>)> = vec![(0, Vec::new()); bridges.len()];
    loop {
        for (bridge, (writes, problems)) in bridges.iter().zip(seen.iter_mut()) {
            let report = match &outbox {
                AnyOutbox::Postgres(o) => outbox_adopt::check(Db::Postgres(o.pool()), &tables, bridge).await,
                AnyOutbox::MySql(o) => outbox_adopt::check(Db::MySql(o.pool()), &tables, bridge).await,
                _ => return,
            };
            let (now_writes, now_problems) = match report {
                Ok(r) => {
                    metrics::gauge!("outbox_adopt_foreign_writes", "store" => store.clone(), "bridge" => bridge.name.clone())
                        .set(r.foreign_writes as f64);
                    if r.foreign_writes > *writes {
                        tracing::warn!(
                            store = %store,
                            bridge = %bridge.name,
                            foreign_writes = r.foreign_writes,
                            last_at = r.last_foreign_write_at.as_deref().unwrap_or("unknown"),
                            "The legacy table's status/retry columns were written by something other than the \
                             relay: a legacy scanner or sender still runs and double-sends; switch it off \
                             (docs/adopt.md)"
                        );
                    }
                    (r.foreign_writes, r.problems)
                }
                Err(e) => (*writes, vec![super::ops::clean(&e.to_string(), 500)]),
            };
            if now_problems != *problems && !now_problems.is_empty() {
                tracing::warn!(store = %store, bridge = %bridge.name, problems = ?now_problems, "Bridge not as configured");
            }
            (*writes, *problems) = (now_writes, now_problems);
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(WATCH_EVERY) => {}
        }
    }
}
