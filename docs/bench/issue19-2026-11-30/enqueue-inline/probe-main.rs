use outbox_core::NewMessage;
use outbox_store::{Outbox, OutboxConnection};
use sqlx::MySql;
use std::time::Instant;

const UPDATE: &str = "UPDATE probe_account SET balance = balance + 1 WHERE id = ?";
const RAW: &str = "INSERT INTO outbox_message (topic, msg_key, payload) VALUES (?, ?, ?)";
const FULL: &str = "INSERT INTO outbox_message \
    (biz_type, biz_key, topic, msg_key, tag, headers, payload, max_attempts, next_attempt_at, created_by, updated_by) \
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, UTC_TIMESTAMP(6) + INTERVAL COALESCE(?, 0) MICROSECOND), ?, ?)";

fn msg(i: u64) -> NewMessage {
    let payload = format!(
        "{{\"seq\":{i},\"account\":\"acct-{:06}\",\"amount\":{},\"currency\":\"EUR\",\"note\":\"{}\"}}",
        i % 1000,
        i * 7 % 10000,
        "x".repeat(120)
    );
    NewMessage::new("bench.events", payload).key(format!("key-{}", i % 1000))
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Raw,       // pool.begin, UPDATE, 3-col INSERT, commit
    Library,   // outbox.begin (task), UPDATE, tx.enqueue, tx.commit
    NoTask,    // pool.begin, UPDATE, enqueue (library) on the sqlx tx, commit
    FullSql,   // pool.begin, UPDATE, full INSERT bound by hand, commit
    RawTask,   // outbox.begin (task), UPDATE, 3-col INSERT, commit
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = std::env::var("URL").unwrap_or("mysql://root@127.0.0.1:3306/enqprobe".into());
    let n: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2000);
    let rounds: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    {
        let admin = sqlx::MySqlPool::connect("mysql://root@127.0.0.1:3306/test").await.unwrap();
        sqlx::query("DROP DATABASE IF EXISTS enqprobe").execute(&admin).await.unwrap();
        sqlx::query("CREATE DATABASE enqprobe").execute(&admin).await.unwrap();
    }
    let pool = sqlx::pool::PoolOptions::<MySql>::new().max_connections(4).connect(&url).await.unwrap();
    let outbox = Outbox::new(pool.clone());
    outbox.migrate().await.unwrap();
    sqlx::query("CREATE TABLE probe_account (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)").execute(&pool).await.unwrap();
    sqlx::query("INSERT INTO probe_account SELECT seq, 0 FROM seq_1_to_1000").execute(&pool).await.unwrap();
    let spawned = std::env::var("SPAWN").is_ok();
    let work = async move {
    let modes = [Mode::Raw, Mode::Library, Mode::NoTask, Mode::FullSql, Mode::RawTask];
    let mut totals = vec![0.0f64; modes.len()];
    let mut seq = 0u64;
    if std::env::var("INTERLEAVE").is_ok() {
        let mut sums = vec![0.0f64; modes.len()];
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
        for k in 0..(n as usize * modes.len() * rounds) {
            let mi = k % modes.len();
            let mode = modes[mi];
            seq += 1;
            let account = (rand::random::<u64>() % 1000 + 1) as i64;
            let m = msg(seq);
            let t0 = Instant::now();
            match mode {
                Mode::Raw => {
                    let mut tx = pool.begin().await.unwrap();
                    sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                    sqlx::query(RAW).bind(&m.topic).bind(m.key.as_deref()).bind(&m.payload).execute(&mut *tx).await.unwrap();
                    tx.commit().await.unwrap();
                }
                Mode::FullSql => {
                    let mut tx = pool.begin().await.unwrap();
                    sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                    sqlx::query(FULL)
                        .bind(None::<&str>).bind(None::<&str>).bind(&m.topic).bind(m.key.as_deref())
                        .bind(None::<&str>).bind(m.headers_json()).bind(&m.payload).bind(None::<i32>)
                        .bind(None::<chrono::DateTime<chrono::Utc>>).bind(None::<i64>).bind(None::<&str>).bind(None::<&str>)
                        .execute(&mut *tx).await.unwrap();
                    tx.commit().await.unwrap();
                }
                Mode::NoTask => {
                    let mut tx = pool.begin().await.unwrap();
                    sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                    (*tx).enqueue(&m).await.unwrap();
                    tx.commit().await.unwrap();
                }
                Mode::Library => {
                    let mut tx = outbox.begin().await.unwrap();
                    sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                    tx.enqueue(&m).await.unwrap();
                    tx.commit().await.unwrap();
                }
                Mode::RawTask => {
                    let mut tx = outbox.begin().await.unwrap();
                    sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                    sqlx::query(RAW).bind(&m.topic).bind(m.key.as_deref()).bind(&m.payload).execute(&mut *tx).await.unwrap();
                    tx.commit().await.unwrap();
                }
            }
            let us = t0.elapsed().as_secs_f64() * 1e6;
            sums[mi] += us;
            lat[mi].push(us);
        }
        for (i, m) in modes.iter().enumerate() {
            lat[i].sort_by(|a, b| a.partial_cmp(b).unwrap());
            let med = lat[i][lat[i].len() / 2];
            println!("{m:?}: mean {:.1} us, median {:.1} us, mean ratio to Raw {:.3}", sums[i] / lat[i].len() as f64, med, sums[0] / sums[i]);
        }
        return;
    }
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 { (0..modes.len()).collect() } else { (0..modes.len()).rev().collect() };
        for &mi in &order {
            let mode = modes[mi];
            let t0 = Instant::now();
            for _ in 0..n {
                seq += 1;
                let account = (rand::random::<u64>() % 1000 + 1) as i64;
                let m = msg(seq);
                match mode {
                    Mode::Raw | Mode::FullSql | Mode::NoTask => {
                        let mut tx = pool.begin().await.unwrap();
                        sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                        match mode {
                            Mode::Raw => {
                                sqlx::query(RAW).bind(&m.topic).bind(m.key.as_deref()).bind(&m.payload).execute(&mut *tx).await.unwrap();
                            }
                            Mode::FullSql => {
                                sqlx::query(FULL)
                                    .bind(None::<&str>).bind(None::<&str>).bind(&m.topic).bind(m.key.as_deref())
                                    .bind(None::<&str>).bind(m.headers_json()).bind(&m.payload).bind(None::<i32>)
                                    .bind(None::<chrono::DateTime<chrono::Utc>>).bind(None::<i64>).bind(None::<&str>).bind(None::<&str>)
                                    .execute(&mut *tx).await.unwrap();
                            }
                            _ => {
                                (&mut *tx).enqueue(&m).await.unwrap();
                            }
                        }
                        tx.commit().await.unwrap();
                    }
                    Mode::Library => {
                        let mut tx = outbox.begin().await.unwrap();
                        sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                        tx.enqueue(&m).await.unwrap();
                        tx.commit().await.unwrap();
                    }
                    Mode::RawTask => {
                        let mut tx = outbox.begin().await.unwrap();
                        sqlx::query(UPDATE).bind(account).execute(&mut *tx).await.unwrap();
                        sqlx::query(RAW).bind(&m.topic).bind(m.key.as_deref()).bind(&m.payload).execute(&mut *tx).await.unwrap();
                        tx.commit().await.unwrap();
                    }
                }
            }
            let us = t0.elapsed().as_secs_f64() * 1e6 / n as f64;
            totals[mi] += us;
            eprintln!("round {round} {mode:?}: {us:.1} us/tx");
        }
    }
    for (i, m) in modes.iter().enumerate() {
        println!("{m:?}: mean {:.1} us/tx, ratio to Raw {:.3}", totals[i] / rounds as f64, totals[0] / totals[i]);
    }
    };
    if spawned { tokio::spawn(work).await.unwrap(); } else { work.await; }
}
