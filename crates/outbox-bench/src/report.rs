//! Writing a [`Report`]: `results.json`, `report.md` (tables) and SVG charts drawn with
//! plotters, plus a plain-text table for the terminal.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::{Error, Report, Summary};

/// Writes `results.json`, `report.md`, `throughput.svg` and `latency.svg` (the charts that have
/// data) into `dir`, creating it. Returns the files written.
pub fn write(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let json = dir.join("results.json");
    let text = serde_json::to_string_pretty(report).map_err(|e| Error::Io(std::io::Error::other(e)))?;
    std::fs::write(&json, text)?;
    files.push(json);
    let mut charts = Vec::new();
    for (name, file, title, bars) in [
        ("Throughput", "throughput.svg", "Throughput, msgs/s (higher is better)", throughput_bars(report)),
        ("Latency", "latency.svg", "Latency, ms (lower is better)", latency_bars(report)),
    ] {
        if !bars.is_empty() {
            let p = dir.join(file);
            bar_chart(&p, title, &bars)?;
            charts.push((name, file));
            files.push(p);
        }
    }
    let md = dir.join("report.md");
    std::fs::write(&md, markdown(report, &charts))?;
    files.push(md);
    Ok(files)
}

fn throughput_bars(r: &Report) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    if let Some(raw) = &r.raw {
        v.push(("raw DB claim+mark".to_owned(), raw.db_rows_per_s));
        if let Some(b) = raw.broker_msgs_per_s {
            v.push((format!("raw {} publish", r.config.transport.name()), b));
        }
        if let Some(t) = raw.together_per_s {
            v.push(("raw, both at once".to_owned(), t));
        }
    }
    if let Some(d) = &r.drain {
        v.push(("drain".to_owned(), d.msgs_per_s));
    }
    if let Some(s) = &r.scale {
        for d in &s.drains {
            v.push((format!("drain, {} relay(s)", d.relays), d.msgs_per_s));
        }
    }
    v
}

fn latency_bars(r: &Report) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    if let Some(l) = &r.latency {
        let b = &l.commit_to_confirmed;
        v.extend([("commit→confirmed p50".to_owned(), b.p50_ms), ("p99".to_owned(), b.p99_ms)]);
        let s = &l.commit_to_consumer;
        v.extend([
            ("commit→consumer p50".to_owned(), s.p50_ms),
            ("p90".to_owned(), s.p90_ms),
            ("p99".to_owned(), s.p99_ms),
        ]);
    }
    if let Some(s) = &r.scale {
        for c in &s.claims {
            v.push((format!("claim p50, {} sent rows", human(c.sent_rows as f64)), c.claim.p50_ms));
        }
    }
    v
}

fn chart_err(e: impl std::fmt::Display) -> Error {
    Error::Chart(e.to_string())
}

/// A horizontal bar chart, one labelled bar per entry.
fn bar_chart(path: &Path, title: &str, bars: &[(String, f64)]) -> Result<(), Error> {
    let height = 80 + 40 * bars.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(chart_err)?;
    let max = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max).max(1e-9) * 1.35;
    let n = bars.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(10)
        .build_cartesian_2d(0.0..max, 0.0..n)
        .map_err(chart_err)?;
    chart.configure_mesh().disable_y_mesh().disable_y_axis().x_labels(6).draw().map_err(chart_err)?;
    let palette = [RGBColor(52, 101, 164), RGBColor(78, 154, 6), RGBColor(204, 0, 0), RGBColor(117, 80, 123)];
    for (i, (label, value)) in bars.iter().enumerate() {
        let y0 = n - i as f64 - 0.85;
        let y1 = n - i as f64 - 0.15;
        let color = palette[i % palette.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new([(0.0, y0), (*value, y1)], color.filled())))
            .map_err(chart_err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!("{label}: {}", human(*value)),
                (value + max * 0.01, (y0 + y1) / 2.0 + 0.2),
                ("sans-serif", 14).into_font(),
            )))
            .map_err(chart_err)?;
    }
    root.present().map_err(chart_err)?;
    Ok(())
}

/// `12345.6` → `12,346`; small values keep two decimals.
pub(crate) fn human(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x.abs() < 100.0 {
        return format!("{x:.2}");
    }
    let s = format!("{:.0}", x);
    let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

fn pct(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{:.0}%", r * 100.0))
}

fn summary_row(name: &str, s: &Summary) -> String {
    format!(
        "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
        s.count, s.p50_ms, s.p90_ms, s.p99_ms, s.max_ms, s.mean_ms
    )
}

/// The Markdown report (also what the command prints, minus the chart links).
pub fn markdown(r: &Report, charts: &[(&str, &str)]) -> String {
    let mut md = String::new();
    let c = &r.config;
    let _ = writeln!(
        md,
        "# outbox bench: {} + {}{}\n",
        r.store_kind,
        c.transport.name(),
        if c.label.is_empty() { String::new() } else { format!(" ({})", c.label) }
    );
    let m = &r.machine;
    let _ = writeln!(
        md,
        "Started {} and took {:.0} s. Machine: {} CPUs ({}), {:.1} GiB, Linux {}, load average {:.2} at start. \
         Database: {}.\n",
        r.started_at, r.duration_s, m.cpus, m.cpu_model, m.memory_gib, m.kernel, m.load_average, m.database_version
    );
    let _ = writeln!(
        md,
        "Backlog n = {} on {} keys, batch size {}, {} batches in flight, runs of up to {} messages per key, {}, the drain's consumer reading {}, offered load {} msg/s for {} s.\n",
        c.n,
        c.keys,
        c.batch_size,
        c.in_flight,
        c.max_run,
        if c.lock_claims {
            "claimed rows locked through the publish (where the store can)"
        } else {
            "leases"
        },
        if c.consume_during_drain || c.transport == crate::TransportKind::Null {
            "during the drain"
        } else {
            "once the relays have stopped"
        },
        c.rate,
        c.latency_duration.as_secs()
    );
    if let Some(raw) = &r.raw {
        md.push_str("## Raw limits\n\n| limit | rate |\n| --- | ---: |\n");
        let _ = writeln!(
            md,
            "| database: batched claim-and-mark SQL, rows/s | {} ({:.1} µs of server CPU per row) |",
            human(raw.db_rows_per_s),
            raw.db_server_cpu_us_per_row
        );
        let _ = writeln!(
            md,
            "| broker: pipelined confirmed publish ({}), msgs/s | {} |",
            c.transport.name(),
            match (raw.broker_msgs_per_s, raw.broker_server_cpu_us_per_msg) {
                (Some(rate), Some(cpu)) => format!("{} ({cpu:.1} µs of server CPU per message)", human(rate)),
                (Some(rate), None) => human(rate),
                (None, _) => "no limit (null)".into(),
            }
        );
        let _ = writeln!(md, "| **min(raw DB, raw broker)** | **{}** |", human(raw.limit_per_s));
        let _ = writeln!(
            md,
            "| both loops at once, sharing the machine | {} |\n",
            raw.together_per_s.map_or("-".into(), human)
        );
    }
    let drain_head =
        "| relays | n | seconds | msgs/s | ratio to limit | ratio to both at once | claims | CPU s | DB server µs/msg | broker µs/msg | peak RSS MiB | duplicates |\n\
                      | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    let drain_row = |d: &crate::DrainResult| {
        format!(
            "| {} | {} | {:.2} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} |\n",
            d.relays,
            d.n,
            d.seconds,
            human(d.msgs_per_s),
            pct(d.ratio_to_limit),
            pct(d.ratio_to_together),
            d.claims,
            d.cpu_s,
            d.db_server_cpu_us_per_msg,
            d.broker_server_cpu_us_per_msg,
            d.peak_rss_mib,
            d.duplicates
        )
    };
    if let Some(d) = &r.drain {
        md.push_str("## Drain\n\n");
        md.push_str(drain_head);
        md.push_str(&drain_row(d));
        md.push('\n');
    }
    let lat_head = "| measure | count | p50 ms | p90 ms | p99 ms | max ms | mean ms |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
    if let Some(l) = &r.latency {
        let _ = writeln!(
            md,
            "## Latency\n\nOffered {} msg/s (open loop), achieved {:.0}/s; {} sent, {} received, {} left behind, \
             {} duplicates; fast-path share {:.1}%; {:.2} relay claims and {} database transactions per message; \
             a claim took {:.2} ms and a settlement {:.2} ms on average; database server CPU {} µs per message; \
             peak RSS {:.0} MiB.\n",
            l.offered_per_s,
            l.achieved_per_s,
            l.sent,
            l.received,
            l.left_behind,
            l.duplicates,
            l.fast_path_share * 100.0,
            l.claims_per_msg,
            l.db_xacts_per_msg.map_or("-".into(), |x| format!("{x:.2}")),
            l.claim_ms_mean,
            l.settle_ms_mean,
            l.db_server_cpu_us_per_msg.map_or("-".into(), |x| format!("{x:.0}")),
            l.peak_rss_mib
        );
        md.push_str(lat_head);
        md.push_str(&summary_row("commit returned → broker confirmed", &l.commit_to_confirmed));
        md.push_str(&summary_row("commit returned → consumer received", &l.commit_to_consumer));
        md.push_str(&summary_row("scheduled start → consumer received", &l.scheduled_to_consumer));
        md.push_str(&summary_row("business transaction", &l.transaction));
        md.push('\n');
        if l.writer_apart {
            md.push_str(
                "The load was written through a pool of its own, as by another process: the relay was not told of its commits.\n\n",
            );
        }
        if let Some(n) = l.relay_pool {
            let _ = writeln!(
                md,
                "The relay had a pool of its own of {n} connections and a budget of {} batches in flight, \
                 as `outbox relay` has.\n",
                outbox_relay::Budget::DEFAULT_SIZE
            );
        }
        if let Some(b) = &l.backlog {
            let _ = writeln!(
                md,
                "Beside a backlog of {} messages on {} hot keys of their own, written before the relay started: \
                 {} of them not yet sent when the load's last transaction committed; {} claims by id by the \
                 relay's lane, beside its claim loop, and {} looks of the lane for new messages; {} messages \
                 the lane named and left to the claim loop; {} messages claimed as runs continued across batches.\n",
                human(b.messages as f64),
                b.keys,
                b.unsent_when_load_ended,
                b.claims_beside,
                b.lane_looks,
                b.lane_left,
                b.runs_continued
            );
        }
        if !l.claim_kinds.is_empty() {
            let sent = l.sent.max(1) as f64;
            md.push_str(
                "The relay's claims by why they ran (`ClaimKind`):\n\n\
                 | kind | claims | per message | found nothing |\n| --- | ---: | ---: | ---: |\n",
            );
            for k in &l.claim_kinds {
                let _ = writeln!(
                    md,
                    "| {} | {} | {:.2} | {} |",
                    k.kind,
                    k.claims,
                    k.claims as f64 / sent,
                    k.empty
                );
            }
            let _ =
                writeln!(md, "\nIds signalled and left to a window's claim: {}.", l.ids_left_to_the_window);
            let _ = writeln!(
                md,
                "Wake-ups that started no claim (their messages already in the relay's batches): {}.\n",
                l.wake_ups_held
            );
        }
    }
    if let Some(e) = &r.enqueue {
        md.push_str(
            "## Enqueue overhead\n\n| clients | tx/s without | tx/s with | ratio | tx/s raw INSERT | with / raw INSERT | \
             p50 without | p50 with | added p50 ms | p99 without | p99 with | added p99 ms |\n\
             | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for row in &e.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {:+.2} | {:.2} | {:.2} | {:+.2} |",
                row.clients,
                human(row.rate_without),
                human(row.rate_with),
                row.ratio,
                human(row.rate_raw_insert),
                row.ratio_to_raw_insert,
                row.without.p50_ms,
                row.with.p50_ms,
                row.added_p50_ms,
                row.without.p99_ms,
                row.with.p99_ms,
                row.added_p99_ms
            );
        }
        md.push('\n');
    }
    if let Some(s) = &r.scale {
        md.push_str("## Scale\n\n");
        if !s.drains.is_empty() {
            md.push_str(drain_head);
            for d in &s.drains {
                md.push_str(&drain_row(d));
            }
            md.push('\n');
        }
        if !s.claims.is_empty() {
            md.push_str(
                "| sent rows in table | generated in s | claims | claim p50 ms | p99 ms | max ms |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n",
            );
            for c in &s.claims {
                let _ = writeln!(
                    md,
                    "| {} | {:.1} | {} | {:.2} | {:.2} | {:.2} |",
                    human(c.sent_rows as f64),
                    c.generate_s,
                    c.claim.count,
                    c.claim.p50_ms,
                    c.claim.p99_ms,
                    c.claim.max_ms
                );
            }
            md.push('\n');
        }
    }
    if let Some(i) = &r.idle {
        let _ = writeln!(
            md,
            "## Idle\n\n| seconds | CPU s | CPU % of a core | server queries/s | relay claims/s |\n| ---: | ---: | ---: | ---: | ---: |\n\
             | {:.1} | {:.3} | {:.2} | {} | {:.2} |\n",
            i.seconds,
            i.cpu_s,
            i.cpu_percent,
            i.server_queries_per_s.map_or("-".into(), |q| format!("{q:.2}")),
            i.claims_per_s
        );
    }
    if let Some(s) = &r.stores {
        let opt = |x: Option<f64>| x.map_or("-".into(), |q| format!("{q:.2}"));
        let _ = writeln!(
            md,
            "## One relay over many stores\n\n{} PostgreSQL and {} MySQL/MariaDB stores, a budget of {} batches in flight.\n\n\
             | idle | value |\n| --- | ---: |\n\
             | connections held on PostgreSQL / MariaDB | {} / {} |\n\
             | PostgreSQL transactions/s (all stores) | {} |\n\
             | MariaDB statements/s (server-wide) | {} |\n\
             | relay claims/s (all stores) | {:.2} |\n\
             | connections opened meanwhile (all stores) | {} |\n\
             | CPU % of a core | {:.2} |\n",
            s.postgres_stores,
            s.mysql_stores,
            s.budget,
            s.idle_pg_connections,
            s.idle_mysql_connections,
            opt(s.idle_pg_xacts_per_s),
            opt(s.idle_mysql_queries_per_s),
            s.idle_claims_per_s,
            s.idle_connections_opened,
            s.idle_cpu_percent,
        );
        let _ = writeln!(
            md,
            "| fair drain | value |\n| --- | ---: |\n\
             | backlog | {} stores × {} |\n\
             | drained in | {:.1} s ({} msg/s; first store done at {:.1} s) |\n\
             | peak connections on PostgreSQL / MariaDB | {} / {} |\n\
             | peak RSS | {:.1} MiB |\n",
            s.big_stores,
            human(s.backlog_per_store as f64),
            s.drain_seconds,
            human(s.drain_msgs_per_s),
            s.big_store_done_s.0,
            s.peak_pg_connections,
            s.peak_mysql_connections,
            s.peak_rss_mib,
        );
        let _ = writeln!(
            md,
            "Budget during the drain: {} turns, {:.1} ms mean wait for one, {} parked shares taken back by their stores (a turn and a connection saved each), {} given back for a store that found none free, {} connections opened by the stores' pools; the trickling stores made {:.2} claims per message, {:.1} ms per claim, {:.1} ms per settlement (means), and {:.1} / {:.1} looks per store and second while idle (PostgreSQL / MySQL-MariaDB stores).\n",
            s.drain_budget_turns,
            s.drain_budget_wait_ms,
            s.drain_budget_reused,
            s.drain_budget_evicted,
            s.drain_connections_opened,
            s.trickle_claims_per_message,
            s.trickle_claim_ms,
            s.trickle_settle_ms,
            s.trickle_looks_per_store_s.0,
            s.trickle_looks_per_store_s.1
        );
        md.push_str(
            "| trickling stores meanwhile, commit → broker-confirmed | n | p50 ms | p90 ms | p99 ms | max ms | mean ms |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        md.push_str(&summary_row("every message of the other stores", &s.trickle_latency));
        md.push_str(&summary_row("PostgreSQL stores (woken by NOTIFY)", &s.trickle_latency_pg));
        md.push_str(&summary_row("MySQL/MariaDB stores (found by the scan)", &s.trickle_latency_mysql));
        md.push('\n');
    }
    for (name, file) in charts {
        let _ = writeln!(md, "![{name}]({file})\n");
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_numbers() {
        assert_eq!(human(12_345.6), "12,346");
        assert_eq!(human(1_000_000.0), "1,000,000");
        assert_eq!(human(1.23456), "1.23");
        assert_eq!(human(-1234.0), "-1,234");
    }
}
