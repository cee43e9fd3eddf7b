//! `outbox check`: validate a configuration file and print what it resolves to.

use std::path::Path;

use outbox_store::redact_url;
use serde::Serialize;

use crate::config::Config;

#[derive(Debug, Serialize)]
struct Resolved {
    stores: Vec<(String, String)>,
    destinations: Vec<(String, String)>,
    routes: Vec<(String, Vec<String>)>,
}

pub(crate) async fn run(config_path: &Path, json: bool) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let resolved = Resolved {
        stores: config
            .stores
            .iter()
            .map(|s| (s.name.get_ref().clone(), redact_url(s.url.get_ref())))
            .collect(),
        destinations: config
            .destinations
            .iter()
            .map(|(n, d)| (n.clone(), d.transport.kind().to_owned()))
            .collect(),
        routes: config
            .routes
            .iter()
            .map(|r| {
                (r.topic.get_ref().clone(), r.destinations.iter().map(|d| d.get_ref().clone()).collect())
            })
            .collect(),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&resolved)?);
        return Ok(());
    }
    println!("{}: OK", config_path.display());
    println!("stores:");
    for (n, u) in &resolved.stores {
        println!("  {n:<16} {u}");
    }
    println!("destinations:");
    for (n, k) in &resolved.destinations {
        println!("  {n:<16} {k}");
    }
    println!("routes:");
    for (t, ds) in &resolved.routes {
        println!("  {t:<24} -> {}", ds.join(", "));
    }
    if resolved.routes.is_empty() {
        println!("  (none: every message would fail with \"no route\")");
    }
    Ok(())
}
