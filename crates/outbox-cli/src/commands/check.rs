//! `outbox check`: validate a configuration file and print what it resolves to.
//!
//! It loads the file exactly as `outbox relay` does ([`Config::load`]: the same environment
//! overrides, the same validation), so a file `check` accepts is one the relay starts with,
//! short of connecting. URLs are printed redacted, names escaped.

use std::path::Path;

use outbox_store::redact_url;
use serde::Serialize;

use super::ops::{clean, to_json_pretty};
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
        println!("{}", to_json_pretty(&resolved)?);
        return Ok(());
    }
    println!("{}: OK", clean(&config_path.display().to_string(), 500));
    println!("stores:");
    for (n, u) in &resolved.stores {
        println!("  {:<16} {}", clean(n, 200), clean(u, 1000));
    }
    println!("destinations:");
    for (n, k) in &resolved.destinations {
        println!("  {:<16} {k}", clean(n, 200));
    }
    println!("routes:");
    for (t, ds) in &resolved.routes {
        let ds: Vec<String> = ds.iter().map(|d| clean(d, 200)).collect();
        println!("  {:<24} -> {}", clean(t, 300), ds.join(", "));
    }
    if resolved.routes.is_empty() {
        println!("  (none: every message would fail with \"no route\")");
    }
    Ok(())
}
