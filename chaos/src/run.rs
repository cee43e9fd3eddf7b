//! The orchestrator: sets up one combo (database + broker), starts writers, relays (through
//! fault proxies to the broker and to the database) and consumers as separate processes,
//! injects faults on a seeded random schedule, stops the load, waits for the drain, and runs the
//! checker.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::check::{Report, Snapshot};
use crate::combo::{self, Broker, Combo, Names, Servers};
use crate::own::{self, OwnServer};
use crate::procs::{Proc, Stopped};
use crate::proxy::{FaultProxy, Mode};
pub(crate) use crate::setup::outbox_bin;
use crate::setup::{
    daemon_owner, drain_state, relay_toml, transport_toml, Crowded, CROWDED, IDLE_STORES, STORE,
};
use crate::tally::{LaneCounts, LaneTally};

/// How long and how hard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Profile {
    /// About a minute of load per combo: CI.
    Short,
    /// 30 minutes of load per combo, more server crashes.
    Long,
}

/// Options of `outbox-chaos run`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunArgs {
    /// `short` (CI) or `long`.
    #[arg(long, value_enum, default_value = "short")]
    pub(crate) profile: Profile,
    /// Combos to run, one after the other: pg-nats, pg-rabbitmq, mariadb-redis (and pg-redis,
    /// mariadb-nats, mariadb-rabbitmq). Defaults to the first three.
    #[arg(long, value_delimiter = ',', default_value = "pg-nats,pg-rabbitmq,mariadb-redis")]
    pub(crate) combo: Vec<String>,
    /// Seconds of load per combo (overrides the profile's).
    #[arg(long)]
    pub(crate) duration: Option<u64>,
    /// Seed of the fault schedule (random when not given; printed either way).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Crash and restart the run's own database server, and its own broker (NATS, Redis),
    /// this many times each during the load (short profile 1, long 3). RabbitMQ stays the
    /// machine's; its outages are the proxy's.
    #[arg(long)]
    pub(crate) server_restarts: Option<u32>,
    /// Use the machine's shared servers instead of servers of the run's own (no server
    /// crashes then: the shared servers are never restarted).
    #[arg(long)]
    pub(crate) shared_servers: bool,
    /// The `outbox` binary (default: `cargo build -p outbox-cli` and use target/debug/outbox).
    #[arg(long, env = "OUTBOX_BIN")]
    pub(crate) outbox_bin: Option<PathBuf>,
    /// Keep the database, broker objects and logs even when every guarantee held.
    #[arg(long)]
    pub(crate) keep: bool,
}

/// Counts of what was done to the system.
#[derive(Debug, Default, Clone)]
pub(crate) struct Chaos {
    /// Relays SIGKILLed.
    pub(crate) relay_sigkills: u32,
    /// Relays stopped with SIGTERM mid-run (each one must exit 0).
    pub(crate) relay_sigterms: u32,
    /// Graceful stops that did not exit 0 in time.
    pub(crate) bad_graceful_stops: u32,
    /// Broker outages.
    pub(crate) broker: Outages,
    /// Database outages.
    pub(crate) db: Outages,
    /// Crashes and restarts of the run's own database server.
    pub(crate) db_restarts: u32,
    /// Crashes and restarts of the run's own broker.
    pub(crate) broker_restarts: u32,
    /// The longest a crashed server took to take connections again.
    pub(crate) longest_restart: Duration,
    /// Consumers SIGKILLed and restarted.
    pub(crate) consumer_kills: u32,
    /// Relay exits the harness did not cause (start-up refused during an outage).
    pub(crate) relay_exits: u32,
    /// Of those, the exits of a daemon that had started relaying (its log said [`RELAYING`]
    /// since its start): not a refusal at start.
    pub(crate) relay_exits_relaying: u32,
    /// Relay log lines that show a panic (the daemons' and the writers', whose relay runs in
    /// their process).
    pub(crate) relay_panics: u32,
    /// SIGKILLs of the writer that runs a relay in its own process (`RELAY_WRITER`).
    pub(crate) relay_writer_sigkills: u32,
    /// Messages still in the table that the relay in the writer's process settled as sent
    /// (`updated_by`): none means the path it stands for was not exercised, and the run fails.
    pub(crate) relay_writer_sent: i64,
    /// The same for each `outbox relay` daemon, by index: a daemon that sent nothing never
    /// ran its part (refused at every start, say), and the run fails.
    pub(crate) daemon_sent: Vec<i64>,
    /// When, after the load stopped, the drain first found nothing left to publish (no
    /// `pending` or `sending` row): the relays' part of the drain time, the rest being the
    /// consumers catching up. `None` when that never happened within the drain's timeout.
    pub(crate) nothing_left_after: Option<Duration>,
    /// The crowded daemon's lane ([`CROWDED`]), counted by [`LaneTally`].
    pub(crate) crowded_lane: LaneCounts,
    /// What its lane must have done; `None`: not judged.
    pub(crate) crowded_lane_runs: Option<LaneRuns>,
    /// Whether its budget must have reused a parked share (the long profile: in a minute of
    /// faults it may not).
    pub(crate) crowded_parks_judged: bool,
}

/// What the crowded daemon's lane must have done in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaneRuns {
    /// Looked at least once: MySQL/MariaDB, the long profile (a hot key's batches in flight,
    /// which open the lane, come with the outages of half an hour for certain).
    Looked,
    /// May have looked: MySQL/MariaDB, the short profile (in a minute, the crowded daemon may
    /// never hold a hot key's batches: its count is printed, not judged).
    MayLook,
    /// Never looked nor claimed: PostgreSQL.
    Never,
}

/// The writer (index into the writers, a `lib` one) that also runs a relay in its own process,
/// under this owner: the library's path, where claims by id take what the process just
/// committed. It takes its turn in the relays' SIGKILLs.
const RELAY_WRITER: (usize, &str) = (0, "chaos-w0");

/// What the proxies did to the connections to one server (the broker, or the database).
#[derive(Debug, Default, Clone)]
pub(crate) struct Outages {
    /// Connections dropped and refused.
    pub(crate) cuts: u32,
    /// Black-holed.
    pub(crate) blackholes: u32,
    /// Slowed down.
    pub(crate) delays: u32,
}

pub(crate) const RELAYS: usize = 3;

/// What `outbox relay` logs, for each store, once its whole start-up is over
/// (`commands/relay.rs`): a daemon that exits after it was relaying did not refuse its start.
const RELAYING: &str = "Relaying";
/// What `outbox relay` logs once its log is set up (`commands/relay.rs`, `LISTENING`): it has
/// listened for SIGTERM since before it read its configuration. A graceful stop is asked only
/// of a daemon that said so since its start: before it listens (the first instants of a process,
/// long ones for a niced process on a loaded machine) SIGTERM's default action ends any program.
const LISTENING: &str = "SIGTERM or SIGINT stops the relay gracefully";
const KEYS: u32 = 24;

/// The server whose connections a fault strikes.
#[derive(Debug, Clone, Copy)]
enum Target {
    Broker,
    Db,
}

/// What a fault does to them.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Cut,
    Blackhole,
    Delay,
}

/// Runs one combo; returns the report, what was done, and whether it passed.
pub(crate) async fn run_combo(
    combo: Combo,
    profile: Profile,
    args: &RunArgs,
    outbox: &Path,
    seed: u64,
) -> anyhow::Result<(Report, Chaos, Duration, bool)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let run = format!("{}{}", std::process::id(), rng.gen_range(1000..9999));
    let names = Names { run: run.clone() };
    let load = Duration::from_secs(args.duration.unwrap_or(match profile {
        Profile::Short => 45,
        Profile::Long => 1800,
    }));
    let restarts = if args.shared_servers {
        0
    } else {
        args.server_restarts.unwrap_or(match profile {
            Profile::Short => 1,
            Profile::Long => 3,
        })
    };
    let dir = std::env::temp_dir().join(format!("outbox-chaos-{combo}-{run}"));
    std::fs::create_dir_all(&dir)?;
    println!("== {combo}: run {run}, seed {seed}, {load:?} of load, logs in {}", dir.display());
    let mut own = OwnServers::start(combo, &dir, !args.shared_servers).await?;
    let outcome =
        run_load(combo, profile, args, outbox, &mut rng, &names, &dir, load, &mut own, restarts).await;
    Servers::shared();
    let (report, chaos, drain_time, passed) = outcome?;
    drop(own);
    if passed && !args.keep {
        std::fs::remove_dir_all(&dir).ok();
    } else {
        println!("   kept for inspection: database {}, logs {}", names.database(), dir.display());
    }
    Ok((report, chaos, drain_time, passed))
}

/// The run's own servers for a combo (see `own`): its database server, and its broker when
/// the suite runs one of that kind. None with `--shared-servers`.
struct OwnServers {
    db: Option<OwnServer>,
    broker: Option<OwnServer>,
}

impl OwnServers {
    async fn start(combo: Combo, dir: &Path, own: bool) -> anyhow::Result<OwnServers> {
        if !own {
            return Ok(OwnServers { db: None, broker: None });
        }
        let db = OwnServer::start(own::Kind::of_dialect(combo.dialect), dir)
            .await
            .context("starting the run's own database server")?;
        let broker = match own::Kind::of_broker(combo.broker) {
            Some(kind) => Some(OwnServer::start(kind, dir).await.context("starting the run's own broker")?),
            None => None,
        };
        println!(
            "   own servers: database at {}{}",
            db.addr(),
            broker.as_ref().map(|b| format!(", broker at {}", b.addr())).unwrap_or_default()
        );
        Servers::own(
            db.admin_url().map(|url| (combo.dialect, url)),
            broker.as_ref().map(|b| (combo.broker, b.addr())),
        );
        Ok(OwnServers { db: Some(db), broker })
    }
}

/// The load, the faults, the drain and the checks of one combo.
#[allow(clippy::too_many_arguments)]
async fn run_load(
    combo: Combo,
    profile: Profile,
    args: &RunArgs,
    outbox: &Path,
    rng: &mut StdRng,
    names: &Names,
    dir: &Path,
    load: Duration,
    own: &mut OwnServers,
    restarts: u32,
) -> anyhow::Result<(Report, Chaos, Duration, bool)> {
    let run = names.run.clone();
    let drain_timeout = match profile {
        Profile::Short => Duration::from_secs(240),
        Profile::Long => Duration::from_secs(1200),
    };

    let db_url = combo::create_database(combo.dialect, names, KEYS).await.context("creating the database")?;
    combo::setup_broker(combo.broker, names).await.context("setting up the broker")?;

    let (db_host, _) = combo::rewrite_url(&Servers::admin(combo.dialect), None, "x")?;
    let db_proxy = FaultProxy::start(&db_host).await?;
    let broker_proxy = FaultProxy::start(&Servers::broker_addr(combo.broker)).await?;
    let proxied_db =
        combo::rewrite_url(&db_url, Some(&format!("127.0.0.1:{}", db_proxy.port())), &names.database())?.1;
    let proxied_broker = Servers::broker_url(combo.broker, &format!("127.0.0.1:{}", broker_proxy.port()));
    let direct_broker = Servers::broker_url(combo.broker, &Servers::broker_addr(combo.broker));

    let mut idle_urls = Vec::new();
    for n in 0..IDLE_STORES {
        let proxy = format!("127.0.0.1:{}", db_proxy.port());
        idle_urls.push(combo::rewrite_url(&db_url, Some(&proxy), &names.idle_database(n))?.1);
    }
    let crowded = Crowded { idle_urls, admin_port: crate::own::free_port()? };

    let me = std::env::current_exe()?;
    let mut relays = Vec::new();
    for i in 0..RELAYS {
        let cfg = dir.join(format!("relay-{i}.toml"));
        let toml =
            relay_toml(combo, names, &proxied_db, &proxied_broker, i, (i == CROWDED).then_some(&crowded));
        std::fs::write(&cfg, toml)?;
        // A configuration `outbox relay` refuses would look like a relay refused at start during
        // an outage, at every start, for the whole run: refuse the run instead.
        let check = std::process::Command::new(outbox).arg("check").arg("--config").arg(&cfg).output()?;
        if !check.status.success() {
            anyhow::bail!(
                "outbox check refused relay-{i}'s configuration ({}): {}",
                cfg.display(),
                String::from_utf8_lossy(&check.stderr).trim()
            );
        }
        let args = vec!["relay".into(), "--config".into(), cfg.display().to_string()];
        relays.push(
            Proc::new(format!("relay-{i}"), outbox.to_path_buf(), args, dir.join(format!("relay-{i}.log")))
                .ready_when_logged(RELAYING),
        );
    }
    let rate = match profile {
        Profile::Short => 20,
        Profile::Long => 20,
    };
    let writer_transport = dir.join("writer-relay-transport.toml");
    std::fs::write(&writer_transport, transport_toml(combo, names, &proxied_broker))?;
    let mut writers = Vec::new();
    for (i, mode) in ["lib", "lib", "sql", "sql"].iter().enumerate() {
        let name = format!("w{i}-{mode}");
        let mut a = vec![
            "writer".into(),
            "--db-url".into(),
            db_url.clone(),
            "--mode".into(),
            (*mode).into(),
            "--topic".into(),
            names.topic(),
            "--keys".into(),
            KEYS.to_string(),
            "--rate".into(),
            rate.to_string(),
            "--name".into(),
            name.clone(),
        ];
        if i == RELAY_WRITER.0 {
            a.extend([
                "--relay-owner".into(),
                RELAY_WRITER.1.into(),
                "--relay-transport".into(),
                writer_transport.display().to_string(),
            ]);
        }
        writers.push(Proc::new(name.clone(), me.clone(), a, dir.join(format!("{name}.log"))));
    }
    let mut consumers = Vec::new();
    for group in ["raw", "inbox"] {
        let a = vec![
            "consumer".into(),
            "--db-url".into(),
            db_url.clone(),
            "--broker-url".into(),
            direct_broker.clone(),
            "--broker".into(),
            combo.broker.name().into(),
            "--group".into(),
            group.into(),
            "--run".into(),
            run.clone(),
        ];
        consumers.push(Proc::new(
            format!("consumer-{group}"),
            me.clone(),
            a,
            dir.join(format!("consumer-{group}.log")),
        ));
    }
    for p in consumers.iter_mut().chain(relays.iter_mut()).chain(writers.iter_mut()) {
        p.start()?;
    }
    let tally = LaneTally::start(crowded.admin_port, STORE);

    let mut chaos = Chaos::default();
    let started = Instant::now();
    let end = started + load;
    let mut next_kill = started + Duration::from_millis(rng.gen_range(500..2000));
    let mut next_fault = started + Duration::from_millis(rng.gen_range(1000..4000));
    let mut next_consumer_kill = started + Duration::from_millis(rng.gen_range(3000..10000));
    let graceful_every = match profile {
        Profile::Short => load / 3,
        Profile::Long => Duration::from_secs(120),
    };
    let mut next_graceful = started + graceful_every;
    // The own servers crash in turn, evenly spread over the load: the database, then the
    // broker, `restarts` times each.
    let crashes: Vec<Target> = (0..restarts)
        .flat_map(|_| [own.db.as_ref().map(|_| Target::Db), own.broker.as_ref().map(|_| Target::Broker)])
        .flatten()
        .collect();
    let crash_every = load / (u32::try_from(crashes.len()).unwrap_or(u32::MAX).saturating_add(1));
    let mut crashes = crashes.into_iter();
    let mut next_crash = started + crash_every;
    let mut fault_end: Option<Instant> = None;
    let mut last_print = started;

    while Instant::now() < end {
        let now = Instant::now();
        for p in relays.iter_mut() {
            p.supervise(Duration::from_millis(300))?;
        }
        for p in writers.iter_mut().chain(consumers.iter_mut()) {
            p.supervise(Duration::from_millis(300))?;
        }
        if now >= next_kill {
            // One of the daemons, or the writer whose process runs a relay.
            let i = rng.gen_range(0..=relays.len());
            let (p, count) = match relays.get_mut(i) {
                Some(r) => (r, &mut chaos.relay_sigkills),
                None => (&mut writers[RELAY_WRITER.0], &mut chaos.relay_writer_sigkills),
            };
            if p.running() {
                p.sigkill().await;
                *count += 1;
            }
            p.restart_at = Some(Instant::now() + Duration::from_millis(rng.gen_range(0..1500)));
            let gap = match profile {
                Profile::Short => rng.gen_range(800..2500),
                Profile::Long => rng.gen_range(400..1600),
            };
            next_kill = Instant::now() + Duration::from_millis(gap);
        }
        if now >= next_consumer_kill {
            let i = rng.gen_range(0..consumers.len());
            if consumers[i].running() {
                consumers[i].sigkill().await;
                chaos.consumer_kills += 1;
            }
            consumers[i].restart_at = Some(Instant::now() + Duration::from_millis(rng.gen_range(0..2000)));
            next_consumer_kill = Instant::now() + Duration::from_millis(rng.gen_range(4000..12000));
        }
        if let Some(t) = fault_end {
            if now >= t {
                db_proxy.heal();
                broker_proxy.heal();
                fault_end = None;
                next_fault = Instant::now() + Duration::from_millis(rng.gen_range(1000..4000));
            }
        } else if now >= next_fault {
            let (target, fault) = match rng.gen_range(0..10) {
                0..=2 => (Target::Broker, Fault::Cut),
                3..=4 => (Target::Broker, Fault::Blackhole),
                5 => (Target::Broker, Fault::Delay),
                6..=7 => (Target::Db, Fault::Cut),
                8 => (Target::Db, Fault::Blackhole),
                _ => (Target::Db, Fault::Delay),
            };
            let length = Duration::from_millis(rng.gen_range(500..6000));
            let (proxy, outages, max_delay_ms) = match target {
                Target::Broker => (&broker_proxy, &mut chaos.broker, 400),
                Target::Db => (&db_proxy, &mut chaos.db, 300),
            };
            match fault {
                Fault::Cut => {
                    proxy.set_mode(Mode::Cut);
                    outages.cuts += 1;
                }
                Fault::Blackhole => {
                    proxy.set_mode(Mode::Blackhole);
                    outages.blackholes += 1;
                }
                Fault::Delay => {
                    proxy.set_delay(Duration::from_millis(rng.gen_range(20..max_delay_ms)));
                    outages.delays += 1;
                }
            }
            fault_end = Some(Instant::now() + length);
        }
        if now >= next_graceful {
            // A graceful stop is judged on a healthy network: heal the current fault first.
            db_proxy.heal();
            broker_proxy.heal();
            fault_end = None;
            let up: Vec<usize> = (0..relays.len())
                .filter(|&i| {
                    relays[i].up_for(Duration::from_secs(1)) && relays[i].logged_since_start(LISTENING)
                })
                .collect();
            let i = if up.is_empty() { 0 } else { up[rng.gen_range(0..up.len())] };
            if up.is_empty() {
                next_graceful = Instant::now() + Duration::from_secs(1);
            } else {
                chaos.relay_sigterms += 1;
                match relays[i].sigterm(Duration::from_secs(30)).await {
                    Stopped::Exited(s) if s.success() => {}
                    Stopped::NotRunning => chaos.relay_sigterms -= 1,
                    other => {
                        chaos.bad_graceful_stops += 1;
                        eprintln!("   {} did not stop gracefully: {other:?}", relays[i].name);
                    }
                }
                relays[i].restart_at = Some(Instant::now() + Duration::from_millis(500));
                next_graceful = Instant::now() + graceful_every;
            }
        }
        if now >= next_crash {
            if let Some(target) = crashes.next() {
                let (server, count) = match target {
                    Target::Db => (own.db.as_mut(), &mut chaos.db_restarts),
                    Target::Broker => (own.broker.as_mut(), &mut chaos.broker_restarts),
                };
                if let Some(server) = server {
                    let down =
                        server.crash_and_restart().await.context("crashing and restarting a server")?;
                    println!("   crashed and restarted the own {target:?} server: down {down:.1?}");
                    *count += 1;
                    chaos.longest_restart = chaos.longest_restart.max(down);
                }
            }
            next_crash = Instant::now() + crash_every;
        }
        if now.duration_since(last_print) >= Duration::from_secs(60) {
            last_print = now;
            println!(
                "   {:>5}s: {} SIGKILLs, {} broker outages, {} db outages, {} consumer kills",
                started.elapsed().as_secs(),
                chaos.relay_sigkills,
                chaos.broker.cuts + chaos.broker.blackholes,
                chaos.db.cuts + chaos.db.blackholes,
                chaos.consumer_kills
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Stop the load, heal everything, let the relays drain and the consumers catch up.
    for w in writers.iter_mut() {
        w.sigkill().await;
    }
    db_proxy.heal();
    broker_proxy.heal();
    let drain_started = Instant::now();
    let mut drained = false;
    let mut last = (0, 0, 0, 0);
    while drain_started.elapsed() < drain_timeout {
        for p in relays.iter_mut().chain(consumers.iter_mut()) {
            p.keep_up(Duration::from_millis(300))?;
        }
        match drain_state(&db_url).await {
            Ok(s) => {
                last = s;
                let (open, sent, raw, eff) = s;
                if open == 0 && chaos.nothing_left_after.is_none() {
                    chaos.nothing_left_after = Some(drain_started.elapsed());
                }
                if open == 0 && raw >= sent && eff >= sent {
                    drained = true;
                    break;
                }
            }
            Err(e) => eprintln!("   drain check: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain_time = drain_started.elapsed();
    if !drained {
        eprintln!(
            "   not drained after {drain_timeout:?}: open {}, sent {}, raw {}, inbox {}",
            last.0, last.1, last.2, last.3
        );
    }
    // Every relay stops gracefully now; each must exit 0.
    for r in relays.iter_mut() {
        // Judge a graceful stop only once the relay's start-up is over.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(r.up_for(Duration::from_secs(1)) && r.logged_since_start(LISTENING))
            && Instant::now() < deadline
        {
            r.keep_up(Duration::from_millis(300))?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if r.running() {
            match r.sigterm(Duration::from_secs(30)).await {
                Stopped::Exited(s) if s.success() => {}
                Stopped::NotRunning => {}
                other => {
                    chaos.bad_graceful_stops += 1;
                    eprintln!("   {} did not stop gracefully at the end: {other:?}", r.name);
                }
            }
        }
    }
    // The relays' last settles may have sent a few more: let the consumers catch up (bounded).
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        for c in consumers.iter_mut() {
            c.keep_up(Duration::from_millis(300))?;
        }
        if let Ok((_, sent, raw, eff)) = drain_state(&db_url).await {
            if raw >= sent && eff >= sent {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for c in consumers.iter_mut() {
        c.sigkill().await;
    }
    chaos.crowded_lane = tally.stop().await;
    chaos.crowded_lane_runs = Some(match (combo.dialect, profile) {
        (combo::Dialect::My, Profile::Long) => LaneRuns::Looked,
        (combo::Dialect::My, Profile::Short) => LaneRuns::MayLook,
        (combo::Dialect::Pg, _) => LaneRuns::Never,
    });
    chaos.crowded_parks_judged = profile == Profile::Long;
    for r in &relays {
        chaos.relay_exits += r.exits;
        chaos.relay_exits_relaying += r.exits_when_ready;
    }
    for p in relays.iter().chain(&writers) {
        let text = std::fs::read_to_string(p.log()).unwrap_or_default();
        chaos.relay_panics += text.lines().filter(|l| l.contains("panicked")).count() as u32;
    }

    chaos.relay_writer_sent =
        sent_by(&db_url, RELAY_WRITER.1).await.context("counting what the writer's relay sent")?;
    for i in 0..RELAYS {
        let owner = daemon_owner(i);
        let n = sent_by(&db_url, &owner).await.with_context(|| format!("counting what {owner} sent"))?;
        chaos.daemon_sent.push(n);
    }
    let snapshot = Snapshot::load(&db_url).await.context("reading the results")?;
    let report = Report::of(&snapshot, combo.broker != Broker::Rabbit);
    let passed = drained && report.violations().is_empty() && chaos.failures().is_empty();
    // What the run made on a shared server goes when it passed: its stream, queues or key on the
    // broker when the broker is the machine's (RabbitMQ always is), its database when the database
    // is. The run's own servers go with their data directories.
    if passed && !args.keep {
        if own.broker.is_none() {
            combo::teardown_broker(combo.broker, names).await.ok();
        }
        if own.db.is_none() {
            combo::drop_database(combo.dialect, names).await.ok();
        }
    }
    Ok((report, chaos, drain_time, passed))
}

/// The messages in the table that the relay under `owner` settled as sent.
async fn sent_by(url: &str, owner: &str) -> anyhow::Result<i64> {
    let db = crate::db::Db::connect(url).await?;
    let q =
        db.sql("SELECT COUNT(*) FROM outbox_message WHERE status IN ('sent', 'acked') AND updated_by = ?");
    let n: i64 = crate::db::on_pool!(&db, pool => sqlx::query_scalar(&q).bind(owner).fetch_one(pool).await?);
    db.close().await;
    Ok(n)
}

/// Prints one combo's screen.
pub(crate) fn print_summary(combo: Combo, load: Duration, seed: u64, r: &Report, c: &Chaos, drain: Duration) {
    let relays = match c.nothing_left_after {
        Some(t) => format!("nothing left to publish after {:.1}s", t.as_secs_f64()),
        None => "the relays never emptied the table".to_owned(),
    };
    println!(
        "-- {combo} (seed {seed}, load {}s, drained in {:.1}s: {relays}, the rest the consumers catching up)",
        load.as_secs(),
        drain.as_secs_f64()
    );
    println!(
        "  faults: {} relay SIGKILLs, {} relay SIGTERMs ({} not graceful); relay exits: {} start-ups refused, {} while relaying",
        c.relay_sigkills,
        c.relay_sigterms,
        c.bad_graceful_stops,
        c.relay_exits - c.relay_exits_relaying,
        c.relay_exits_relaying
    );
    println!(
        "          broker: {} cuts, {} black-holes, {} slowdowns, {} server crashes; database: {} cuts, {} black-holes, {} slowdowns, {} server crashes",
        c.broker.cuts, c.broker.blackholes, c.broker.delays, c.broker_restarts, c.db.cuts, c.db.blackholes, c.db.delays, c.db_restarts
    );
    if c.db_restarts + c.broker_restarts > 0 {
        println!("          longest time a crashed server took to come back: {:.1?}", c.longest_restart);
    }
    println!(
        "          the writer that runs a relay in its process: {} SIGKILLs, {} messages its relay sent",
        c.relay_writer_sigkills, c.relay_writer_sent
    );
    let sent: Vec<String> = c.daemon_sent.iter().enumerate().map(|(i, n)| format!("r{i} {n}")).collect();
    println!("          messages each daemon sent: {}", sent.join(", "));
    println!(
        "          r{CROWDED} over {} stores with a crowded budget: its lane looked {} times and claimed {} times; its budget took {} turns and its stores took back a parked share {} times (at least; counters read {} times)",
        1 + IDLE_STORES,
        c.crowded_lane.looks,
        c.crowded_lane.claims,
        c.crowded_lane.turns,
        c.crowded_lane.reused,
        c.crowded_lane.reads
    );
    println!("          {} consumer SIGKILLs; relay panics in logs: {}", c.consumer_kills, c.relay_panics);
    print!("{}", r.table());
    let mut failed = r.violations();
    failed.extend(c.failures());
    if failed.is_empty() {
        println!("  PASS");
    } else {
        println!("  FAIL: {}", failed.join("; "));
    }
}

impl Chaos {
    /// What failed beside the guarantees: graceful stops, panics, daemons that exited on their
    /// own after their start, and relays whose part never ran (empty when none).
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.bad_graceful_stops > 0 {
            out.push(format!("{} graceful stops did not exit 0 in time", self.bad_graceful_stops));
        }
        if self.relay_panics > 0 {
            out.push(format!("{} relay log lines show a panic", self.relay_panics));
        }
        if self.relay_exits_relaying > 0 {
            out.push(format!(
                "{} times a relay daemon exited on its own after it had started relaying (see relay-*.log)",
                self.relay_exits_relaying
            ));
        }
        if self.relay_writer_sent == 0 {
            out.push("the relay in the writer's process sent nothing".to_owned());
        }
        for (i, n) in self.daemon_sent.iter().enumerate() {
            if *n == 0 {
                out.push(format!("relay-{i} sent nothing (see relay-{i}.log: refused at every start?)"));
            }
        }
        match self.crowded_lane_runs {
            Some(_) if self.crowded_lane.reads == 0 => out.push(format!(
                "relay-{CROWDED}'s admin listener never answered: its lane was not counted (see relay-{CROWDED}.log)"
            )),
            Some(LaneRuns::Looked) if self.crowded_lane.looks == 0 => out.push(format!(
                "relay-{CROWDED}'s lane never looked under its crowded budget: the path was not exercised"
            )),
            Some(LaneRuns::Never) if self.crowded_lane.looks + self.crowded_lane.claims > 0 => out.push(format!(
                "relay-{CROWDED}'s lane ran under a crowded budget on PostgreSQL ({} looks, {} claims), where it must not",
                self.crowded_lane.looks, self.crowded_lane.claims
            )),
            _ => {}
        }
        if self.crowded_parks_judged && self.crowded_lane.reads > 0 && self.crowded_lane.reused == 0 {
            out.push(format!(
                "relay-{CROWDED}'s stores never took back a parked share of its crowded budget: the path was not exercised"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon that exited on its own while relaying fails the run; start-ups refused during
    /// outages do not.
    #[test]
    fn a_daemon_exit_while_relaying_fails_the_run_and_refused_start_ups_do_not() {
        let ran = Chaos { relay_writer_sent: 1, daemon_sent: vec![1; RELAYS], ..Chaos::default() };
        let refused = Chaos { relay_exits: 40, ..ran.clone() };
        assert!(refused.failures().is_empty(), "{:?}", refused.failures());
        let exited = Chaos { relay_exits: 41, relay_exits_relaying: 1, ..ran };
        let failed = exited.failures();
        assert!(failed.len() == 1 && failed[0].contains("exited on its own"), "{failed:?}");
    }

    /// The crowded daemon's lane: on MariaDB a long run where it never looked fails (the path
    /// was not exercised); on PostgreSQL any run where it ran fails; a run whose counters were
    /// never read fails.
    #[test]
    fn the_crowded_lane_is_judged_by_the_store() {
        let ran = Chaos { relay_writer_sent: 1, daemon_sent: vec![1; RELAYS], ..Chaos::default() };
        let looked = LaneCounts { looks: 3, claims: 0, reads: 9, ..LaneCounts::default() };
        let quiet = LaneCounts { reads: 9, ..LaneCounts::default() };
        let my =
            |lane| Chaos { crowded_lane: lane, crowded_lane_runs: Some(LaneRuns::Looked), ..ran.clone() };
        let my_short =
            |lane| Chaos { crowded_lane: lane, crowded_lane_runs: Some(LaneRuns::MayLook), ..ran.clone() };
        let pg = |lane| Chaos { crowded_lane: lane, crowded_lane_runs: Some(LaneRuns::Never), ..ran.clone() };
        assert!(my(looked).failures().is_empty());
        assert!(my(quiet).failures()[0].contains("never looked"));
        assert!(my_short(quiet).failures().is_empty(), "the short profile does not judge the looks");
        assert!(my_short(LaneCounts::default()).failures()[0].contains("never answered"));
        assert!(pg(quiet).failures().is_empty());
        // Never read: no judgement can be made, and that fails too.
        assert!(pg(LaneCounts::default()).failures()[0].contains("never answered"));
        assert!(pg(looked).failures()[0].contains("on PostgreSQL"));
    }

    /// The crowded daemon's parked shares: a long run whose stores never took one back fails
    /// (the path was not exercised); the short profile does not judge it.
    #[test]
    fn parked_shares_are_judged_in_the_long_profile() {
        let ran = Chaos {
            relay_writer_sent: 1,
            daemon_sent: vec![1; RELAYS],
            crowded_lane_runs: Some(LaneRuns::Never),
            ..Chaos::default()
        };
        let parked = LaneCounts { turns: 40, reused: 7, reads: 9, ..LaneCounts::default() };
        let never = LaneCounts { turns: 40, reused: 0, reads: 9, ..LaneCounts::default() };
        let long = |lane| Chaos { crowded_lane: lane, crowded_parks_judged: true, ..ran.clone() };
        let short = |lane| Chaos { crowded_lane: lane, ..ran.clone() };
        assert!(long(parked).failures().is_empty(), "{:?}", long(parked).failures());
        assert!(long(never).failures()[0].contains("parked share"));
        assert!(short(never).failures().is_empty());
    }
}
