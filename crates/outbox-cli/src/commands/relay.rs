//! `outbox relay`: the daemon. One relay engine per configured store, sharing the destinations.

use anyhow::Context;
use outbox_relay::{Destination, Relay, Route};
use outbox_store::{redact_url, AnyOutbox};
use tokio_util::sync::CancellationToken;

use crate::config::Config;

/// What the daemon logs once its log is set up: a stop from then on (and since
/// [`StopSignals::listen`], before it) is graceful. The chaos suite asks a graceful stop only of
/// a daemon that said so since its start.
pub(crate) const LISTENING: &str = "SIGTERM or SIGINT stops the relay gracefully";

/// Connects every store and destination (failing fast with a clear message when one is
/// unreachable), then runs until SIGTERM or SIGINT (listened for since `signals` were).
pub(crate) async fn run(config: Config, signals: StopSignals) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    spawn_signal_handler(stop.clone(), signals);
    tracing::info!("{LISTENING}");
    let relays = match start(&config, &stop).await {
        Ok(relays) => relays,
        // A stop asked for while starting (SIGTERM during a connect, a migration, a check): the
        // step it cut short or that failed meanwhile is not the relay's failure, and nothing
        // was claimed yet, so the stop is graceful. (Found by the chaos suite: a relay given
        // SIGTERM while its broker's connect was timing out exited 1.)
        Err(e) if stop.is_cancelled() => {
            tracing::info!(error = %format!("{e:#}"), "Stopped while starting: nothing was claimed");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    for r in relays {
        r.await.context("a relay task panicked")?;
    }
    tracing::info!("All relays stopped");
    Ok(())
}

/// Connects every store and destination and starts a relay per store, with the ACK and admin
/// listeners: the tasks to wait for. Relays started before a stop see it at once.
async fn start(
    config: &Config,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut destinations = Vec::new();
    for (name, d) in &config.destinations {
        let kind = d.transport.kind();
        let transport = d
            .transport
            .clone()
            .build()
            .await
            .with_context(|| format!("destination {name:?} ({kind}) is not usable at start"))?;
        let mut dest =
            Destination::new(name.clone(), transport).retry(d.retry.clone()).breaker(d.breaker.clone());
        if let Some(n) = d.max_payload_bytes {
            dest = dest.max_payload_bytes(n);
        }
        tracing::info!(destination = %name, kind, "Destination ready");
        destinations.push(dest);
    }
    let routes: Vec<Route> = config
        .routes
        .iter()
        .map(|r| Route::new(r.topic.get_ref().clone(), r.destinations.iter().map(|d| d.get_ref().clone())))
        .collect();

    let ack_secret: Option<std::sync::Arc<[u8]>> =
        config.ack.secret.as_ref().map(|s| std::sync::Arc::from(s.as_bytes().to_vec().into_boxed_slice()));
    let mut ack_stores = std::collections::HashMap::new();
    let mut admin_stores = Vec::new();
    let mut relays = Vec::new();
    // Batches in flight across all stores: bounds the pooled connections of a relay over many
    // databases, and hands the shares to the stores in turn.
    let budget = outbox_relay::Budget::new(config.relay.total_in_flight_batches);
    // Started once every store is connected and checked: none runs alone before the others
    // have joined the budget.
    let mut engines = Vec::new();
    // Each store's line once the whole start-up is over (a later store unreachable at start
    // refuses the start, and no store was relaying then).
    let mut relaying = Vec::new();
    for s in &config.stores {
        let name = s.name.get_ref();
        let shown = redact_url(s.url.get_ref());
        let outbox = AnyOutbox::connect(s.url.get_ref(), s.max_connections)
            .await
            .with_context(|| format!("store {name:?} ({shown}) is unreachable at start"))?
            .with_tables(s.tables()?)
            .with_context(|| format!("store {name:?}"))?;
        if s.migrate {
            let r = outbox.migrate().await.with_context(|| format!("migrating store {name:?}"))?;
            tracing::info!(store = %name, from = r.from, to = r.to, "Schema migrated");
        } else {
            outbox.check_schema().await.with_context(|| format!("store {name:?} ({shown})"))?;
        }
        match outbox.autovacuum_on().await {
            Ok(Some(false)) => tracing::warn!(
                store = %name,
                "autovacuum is off on this PostgreSQL server: the outbox table's dead rows and \
                 statistics are left to you; without a regular VACUUM (ANALYZE) of it, the table \
                 bloats and claims slow down (docs/schema.md, \"PostgreSQL maintenance\")"
            ),
            Ok(_) => {}
            Err(e) => tracing::debug!(store = %name, error = %e, "cannot read the autovacuum setting"),
        }
        let mut builder = Relay::builder(&outbox).config(config.relay_config(name)).budget(budget.clone());
        for d in &destinations {
            let mut d = d.clone();
            if let (Some(ack), Some(secret)) =
                (config.destinations.get(&d.name).and_then(|c| c.ack.as_ref()), &ack_secret)
            {
                let mut a = outbox_relay::AckConfig::new(ack.timeout, secret.to_vec(), name.clone());
                a.token_ttl = config.ack.token_ttl;
                d = d.ack(a);
            }
            builder = builder.destination(d);
        }
        ack_stores.insert(name.clone(), outbox.clone());
        for r in &routes {
            builder = builder.route(r.clone());
        }
        if let Some(dest) = &config.alerts.destination {
            if let Some(d) = destinations.iter().find(|d| d.name == *dest) {
                let alert = outbox_relay::TransportAlert::spawn(
                    name.clone(),
                    dest.clone(),
                    d.transport.clone(),
                    config.alerts.window,
                );
                builder = builder.alert(std::sync::Arc::new(alert));
            }
        }
        let relay = builder.build().with_context(|| format!("relay for store {name:?}"))?;
        tracing::info!(store = %name, url = %shown, owner = relay.owner(), "Store ready");
        relaying.push((name.clone(), shown, relay.owner().to_owned()));
        admin_stores.push(crate::admin::StoreHandle {
            name: name.clone(),
            outbox: outbox.clone(),
            owner: relay.owner().to_owned(),
            stats: relay.stats(),
        });
        engines.push(relay);
        let bridges: Vec<_> = super::adopt::adoptions(config, None)
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a.store.name == s.name)
            .map(|a| a.bridge)
            .collect();
        if !bridges.is_empty() {
            let watch = super::adopt::watch(outbox.clone(), s.tables()?, name.clone(), bridges, stop.clone());
            relays.push(tokio::spawn(watch));
        }
        if !config.retention.finished_after.is_zero() {
            relays.push(tokio::spawn(config.retention.retention().run(outbox, name.clone(), stop.clone())));
        }
    }
    for relay in engines {
        relays.push(tokio::spawn(relay.run(stop.clone())));
    }
    if let (true, Some(secret)) = (config.destinations.values().any(|d| d.ack.is_some()), ack_secret) {
        let listener = tokio::net::TcpListener::bind(&config.ack.listen)
            .await
            .with_context(|| format!("cannot listen for ACKs on {}", config.ack.listen))?;
        tracing::info!(listen = %config.ack.listen, "ACK endpoint ready");
        let limits = crate::ack_server::AckLimits::of(&config.ack);
        let state = crate::ack_server::AckState::new(ack_stores, secret, &limits);
        relays.push(tokio::spawn(crate::ack_server::serve(listener, state, limits, stop.clone())));
    }
    if let Some(admin) = &config.admin {
        let listener = tokio::net::TcpListener::bind(&admin.listen)
            .await
            .with_context(|| format!("cannot listen for the admin API on {}", admin.listen))?;
        let tokens = match (&admin.read_token, &admin.admin_token) {
            (Some(read), Some(token)) => {
                Some(crate::admin::Tokens { read: read.clone(), admin: token.clone() })
            }
            _ => None,
        };
        let dests = destinations
            .iter()
            .map(|d| crate::admin::DestinationHandle { name: d.name.clone(), transport: d.transport.clone() })
            .collect();
        let state = crate::admin::AdminState::new(admin_stores, dests, tokens)
            .allow_resend(admin.allow_resend)
            .budget(budget.clone());
        relays.push(tokio::spawn(state.clone().sample_backlog(admin.backlog_interval, stop.clone())));
        let limits =
            crate::ack_server::AckLimits { max_connections: admin.max_connections, ..Default::default() };
        let log =
            std::sync::Arc::new(crate::ack_server::EndpointLog::new(std::time::Duration::from_secs(10)));
        tracing::info!(listen = %admin.listen, authenticated = state.authenticated(), "Admin listener ready");
        relays.push(tokio::spawn(crate::ack_server::serve_app(
            listener,
            crate::admin::router(state),
            log,
            limits,
            stop.clone(),
        )));
    }
    for (name, shown, owner) in relaying {
        tracing::info!(store = %name, url = %shown, owner, "Relaying");
    }
    Ok(relays)
}

/// SIGTERM and SIGINT, listened for from [`StopSignals::listen`] on: a signal that arrives
/// after it (even before the stop is waited for) is seen, never the signal's default action.
pub(crate) struct StopSignals {
    #[cfg(unix)]
    term: std::io::Result<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: std::io::Result<tokio::signal::unix::Signal>,
}

impl StopSignals {
    /// Listens for both (within a Tokio runtime: `main` calls it first thing, the runtime
    /// entered). A parent may have started the process with them blocked (a signal mask
    /// survives `exec`, and a signal sent meanwhile stays pending): each one listened for is
    /// unblocked on this thread once its handler is in place, so a pending one is seen now and
    /// none is held back later. One that cannot be listened for keeps its default.
    pub(crate) fn listen() -> StopSignals {
        #[cfg(unix)]
        {
            use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
            use tokio::signal::unix::{signal, SignalKind};
            let term = signal(SignalKind::terminate());
            let int = signal(SignalKind::interrupt());
            let mut listened = SigSet::empty();
            if term.is_ok() {
                listened.add(Signal::SIGTERM);
            }
            if int.is_ok() {
                listened.add(Signal::SIGINT);
            }
            // Failing leaves the mask as the parent set it (nothing to report it to yet: the
            // log is not set up).
            let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&listened), None);
            StopSignals { term, int }
        }
        #[cfg(not(unix))]
        StopSignals {}
    }
}

fn spawn_signal_handler(stop: CancellationToken, signals: StopSignals) {
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut int = {
            let StopSignals { term, int } = signals;
            let mut int = match int {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "Cannot listen for SIGINT");
                    None
                }
            };
            match term {
                Ok(mut term) => tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                    _ = interrupted(&mut int) => tracing::info!("SIGINT: shutting down"),
                },
                Err(e) => {
                    tracing::warn!(error = %e, "Cannot listen for SIGTERM; only SIGINT stops the relay");
                    interrupted(&mut int).await;
                    tracing::info!("SIGINT: shutting down");
                }
            }
            int
        };
        #[cfg(not(unix))]
        {
            let _ = signals;
            let _ = tokio::signal::ctrl_c().await;
        }
        stop.cancel();
        // A second SIGINT while draining: leave at once (leases expire on their own).
        #[cfg(unix)]
        interrupted(&mut int).await;
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        std::process::exit(130);
    });
}

/// The next SIGINT (Tokio's own listener where [`StopSignals::listen`] could not listen).
#[cfg(unix)]
async fn interrupted(int: &mut Option<tokio::signal::unix::Signal>) {
    match int {
        Some(s) => {
            s.recv().await;
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
