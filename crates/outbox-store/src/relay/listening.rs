//! A store's push channel ([`Wakeups::listen`](super::Wakeups::listen)) and the [`Keeper`]:
//! the listening connection doing an idle relay's few statements, so that an idle store holds
//! one connection (the one it must hold to be woken) and nothing from its pool.
//!
//! Why: one relay serving many databases (tenants, shards) spends most of its stores' time
//! idle. On PostgreSQL each store keeps a `LISTEN` connection anyway; if its idle scan, idle
//! flag and presence beat also went through the pool, every idle store would keep a second
//! connection warm: 64 databases would need 128 connections before any work, more than a
//! default server allows. Through the keeper they need 64, and the pools open connections only
//! while their store has work (and close them after the pool's idle timeout).

use std::time::Duration;

use outbox_core::{Error, MessageId, Result};
use tokio::sync::{mpsc, oneshot};

use super::{Newer, RelayBeat};

/// The push channel of a store while a relay listens: the task forwarding wake-ups, and the
/// keeper when the listening connection can also run statements.
#[derive(Debug)]
pub struct Listening {
    task: tokio::task::JoinHandle<()>,
    keeper: Option<Keeper>,
    pushes: bool,
}

impl Listening {
    /// A push channel run by `task`, with its keeper if it has one.
    pub fn new(task: tokio::task::JoinHandle<()>, keeper: Option<Keeper>) -> Listening {
        Listening { task, keeper, pushes: true }
    }

    /// The same, for a store that has no push channel: only the keeper.
    #[must_use]
    pub fn without_push(mut self) -> Listening {
        self.pushes = false;
        self
    }

    /// Whether writers' commits wake the relay through it (PostgreSQL `NOTIFY`).
    pub fn pushes(&self) -> bool {
        self.pushes
    }

    /// The keeper, where the listening connection runs an idle relay's statements.
    pub fn keeper(&self) -> Option<&Keeper> {
        self.keeper.as_ref()
    }

    /// Stops listening (the connection closes).
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// A statement for the listening connection, and where its answer goes.
#[derive(Debug)]
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) enum Job {
    /// Refresh `owner`'s idle row (it expires after `ttl`) and answer whether any message may
    /// be due (a claim should run).
    IdleTick { owner: String, ttl: Duration, reply: oneshot::Sender<Result<bool>> },
    /// Answer whether any message may be due, writing nothing.
    Peek { reply: oneshot::Sender<Result<bool>> },
    /// Write the relay's presence row.
    Beat { beat: Box<RelayBeat>, reply: oneshot::Sender<Result<()>> },
    /// How long the oldest due pending message has waited (the relay's overdue watch).
    Overdue { reply: oneshot::Sender<Result<Option<Duration>>> },
    /// The destinations an operator paused.
    Pauses { reply: oneshot::Sender<Result<Vec<String>>> },
    /// Write `owner`'s idle row (expiring after `ttl`) or, when not `idle`, remove it.
    SetIdle { owner: String, idle: bool, ttl: Duration, reply: oneshot::Sender<Result<()>> },
    /// [`Claims::newer_than`](super::Claims::newer_than): a look at what was committed since
    /// `after`. Run by the dialect's listening task itself (its statements are the dialect's
    /// own), not by [`serve`].
    Look {
        after: Option<MessageId>,
        again: Vec<MessageId>,
        limit: usize,
        reply: oneshot::Sender<Result<Newer>>,
    },
}

/// The paused destinations' names (the same on every dialect; a table of a few rows).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) const PAUSED: &str =
    "SELECT destination FROM outbox_destination_pause ORDER BY destination LIMIT 1000";

/// A look's answer, taken from its job by [`Job::take_look_answer`]: where it goes, and the end
/// [`serve`] answers on instead.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) type LookAnswer = (oneshot::Sender<Result<bool>>, oneshot::Receiver<Result<bool>>);

impl Job {
    /// For a look (an idle tick or a peek): the job answering on a new channel, and its
    /// caller's reply with that channel's receiver, so the listening task can act on the
    /// answer before passing it on. Any other job is returned as it is.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn take_look_answer(self) -> (Job, Option<LookAnswer>) {
        match self {
            Job::IdleTick { owner, ttl, reply } => {
                let (tx, rx) = oneshot::channel();
                (Job::IdleTick { owner, ttl, reply: tx }, Some((reply, rx)))
            }
            Job::Peek { reply } => {
                let (tx, rx) = oneshot::channel();
                (Job::Peek { reply: tx }, Some((reply, rx)))
            }
            other => (other, None),
        }
    }

    /// Answers the job with `e` (its statement could not run).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn fail(self, e: Error) {
        match self {
            Job::IdleTick { reply, .. } | Job::Peek { reply } => {
                let _ = reply.send(Err(e));
            }
            Job::Beat { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Job::Overdue { reply } => {
                let _ = reply.send(Err(e));
            }
            Job::Pauses { reply } => {
                let _ = reply.send(Err(e));
            }
            Job::SetIdle { reply, .. } => {
                let _ = reply.send(Err(e));
            }
            Job::Look { reply, .. } => {
                let _ = reply.send(Err(e));
            }
        }
    }
}

/// A dialect's statements for the keeper's jobs, rendered for the store's names.
#[derive(Debug)]
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) struct KeeperSql {
    /// Answers (an `int8`, 0 or 1) whether a claim could take something, binding nothing and
    /// writing nothing (a look).
    pub(crate) peek: String,
    /// Where the dialect has one: a single statement that writes the idle row (binding `owner`
    /// and the ttl in ms) and answers as `peek` does. Without it the tick runs `idle_on`, then
    /// `peek`.
    pub(crate) tick: Option<String>,
    /// The dialect's `BEAT`.
    pub(crate) beat: String,
    /// Removes the rows of relays silent for a day (after each beat, as the pool's beat does).
    pub(crate) sweep: String,
    /// The dialect's `OVERDUE_MS`.
    pub(crate) overdue: String,
    /// [`PAUSED`], rendered.
    pub(crate) paused: String,
    /// Writes the idle row (`owner`, ttl in ms).
    pub(crate) idle_on: String,
    /// Removes the idle row (`owner`).
    pub(crate) idle_off: String,
}

/// Runs `job` on `conn` (the keeper's connection) and sends its answer back; returns whether
/// it succeeded (a failed statement may have left the connection unusable).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) async fn serve<DB, C>(conn: &mut C, job: Job, sql: &KeeperSql) -> bool
where
    DB: crate::admin::AdminSql,
    C: Send,
    for<'c> &'c mut C: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    String: sqlx::Type<DB> + for<'e> sqlx::Encode<'e, DB> + for<'r> sqlx::Decode<'r, DB>,
    i64: sqlx::Type<DB> + for<'e> sqlx::Encode<'e, DB> + for<'r> sqlx::Decode<'r, DB>,
    Option<i64>: for<'r> sqlx::Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    use crate::error::db;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    match job {
        Job::IdleTick { owner, ttl, reply } => {
            let due = async {
                let answer = match &sql.tick {
                    Some(tick) => sqlx::query_scalar::<DB, i64>(tick).bind(owner).bind(ms(ttl)),
                    None => {
                        sqlx::query::<DB>(&sql.idle_on).bind(owner).bind(ms(ttl)).execute(&mut *conn).await?;
                        sqlx::query_scalar::<DB, i64>(&sql.peek)
                    }
                };
                answer.fetch_one(&mut *conn).await.map(|n| n != 0)
            };
            let due = due.await.map_err(db);
            let ok = due.is_ok();
            let _ = reply.send(due);
            ok
        }
        Job::Peek { reply } => {
            let due = sqlx::query_scalar::<DB, i64>(&sql.peek)
                .fetch_one(&mut *conn)
                .await
                .map(|n| n != 0)
                .map_err(db);
            let ok = due.is_ok();
            let _ = reply.send(due);
            ok
        }
        Job::Beat { beat, reply } => {
            let done = match crate::admin::beat_query::<DB>(&sql.beat, &beat) {
                Ok(q) => async {
                    q.execute(&mut *conn).await?;
                    sqlx::query::<DB>(&sql.sweep).execute(&mut *conn).await.map(|_| ())
                }
                .await
                .map_err(db),
                Err(e) => Err(e),
            };
            let ok = done.is_ok();
            let _ = reply.send(done);
            ok
        }
        Job::Overdue { reply } => {
            let late = sqlx::query_scalar::<DB, Option<i64>>(&sql.overdue)
                .fetch_one(&mut *conn)
                .await
                .map(|ms| ms.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
                .map_err(db);
            let ok = late.is_ok();
            let _ = reply.send(late);
            ok
        }
        Job::Pauses { reply } => {
            let names = sqlx::query_scalar::<DB, String>(&sql.paused).fetch_all(&mut *conn).await.map_err(db);
            let ok = names.is_ok();
            let _ = reply.send(names);
            ok
        }
        Job::SetIdle { owner, idle, ttl, reply } => {
            let q = if idle {
                sqlx::query::<DB>(&sql.idle_on).bind(owner).bind(ms(ttl))
            } else {
                sqlx::query::<DB>(&sql.idle_off).bind(owner)
            };
            let done = q.execute(&mut *conn).await.map(|_| ()).map_err(db);
            let ok = done.is_ok();
            let _ = reply.send(done);
            ok
        }
        // The dialects' listening tasks take their looks before they come here; a look that
        // reaches this answers that it could not run (the caller's lane leaves its messages to
        // the claim loop).
        Job::Look { reply, .. } => {
            let _ = reply.send(Err(Error::Database("this connection does not run looks".into())));
            true
        }
    }
}

/// Runs an idle relay's statements on the store's listening connection (see the module).
/// Cheap to clone; when the listening task has stopped, every call fails and the caller falls
/// back to its pool.
#[derive(Debug, Clone)]
pub struct Keeper {
    jobs: mpsc::Sender<Job>,
}

/// Statements waiting for the listening connection at most (an idle relay has at most two
/// outstanding: its tick and its beat).
const QUEUE: usize = 8;

impl Keeper {
    /// A keeper, and the receiving end its listening task serves.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn channel() -> (Keeper, mpsc::Receiver<Job>) {
        let (jobs, rx) = mpsc::channel(QUEUE);
        (Keeper { jobs }, rx)
    }

    /// Refreshes `owner`'s idle row (writers push a wake-up while it lives; it expires after
    /// `ttl`) and answers whether a message may be due now: a pending one past its time or a
    /// lease that expired. `true` means "claim": it may be a message another relay holds or one
    /// behind an older message of its key, which the claim then does not take. On PostgreSQL,
    /// the notifications read with the answer wake the relay before it arrives, so the claim
    /// that follows spends them (see [`CommitSignal::claiming`](crate::CommitSignal::claiming)).
    pub async fn idle_tick(&self, owner: &str, ttl: Duration) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::IdleTick { owner: owner.to_owned(), ttl, reply }, answer).await
    }

    /// Answers whether a message may be due now, as [`Keeper::idle_tick`] does, without
    /// refreshing the idle row: one read. For the quicker looks of a relay on a store without
    /// push (its idle row still lives from the last tick).
    pub async fn peek(&self) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Peek { reply }, answer).await
    }

    /// Writes the relay's presence row.
    pub async fn beat(&self, beat: &RelayBeat) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Beat { beat: Box::new(beat.clone()), reply }, answer).await
    }

    /// How long the oldest due pending message has waited (`None`: none is due).
    pub async fn overdue(&self) -> Result<Option<Duration>> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Overdue { reply }, answer).await
    }

    /// The destinations an operator paused (`outbox_destination_pause`).
    pub async fn paused_destinations(&self) -> Result<Vec<String>> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Pauses { reply }, answer).await
    }

    /// Writes `owner`'s idle row (writers push a wake-up while it lives; it expires after
    /// `ttl`) or, when not `idle`, removes it: [`Wakeups::set_idle`](super::Wakeups::set_idle)
    /// on the listening connection.
    pub async fn set_idle(&self, owner: &str, idle: bool, ttl: Duration) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::SetIdle { owner: owner.to_owned(), idle, ttl, reply }, answer).await
    }

    /// [`Claims::newer_than`](super::Claims::newer_than) on the listening connection: a look at
    /// what any process committed since `after` (with the ids of `again` read again), at most
    /// `limit` messages. For the lane of a relay whose pool keeps no connection between its
    /// turns (a crowded budget of batches in flight): its looks open none.
    pub async fn newer_than(
        &self,
        after: Option<MessageId>,
        again: &[MessageId],
        limit: usize,
    ) -> Result<Newer> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Look { after, again: again.to_vec(), limit, reply }, answer).await
    }

    async fn send<T>(&self, job: Job, answer: oneshot::Receiver<Result<T>>) -> Result<T> {
        let gone = || Error::Database("the listening connection is gone".into());
        self.jobs.send(job).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}
