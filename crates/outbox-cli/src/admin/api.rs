//! The handlers of `/healthz`, `/readyz` and `/api/v1`.

use axum::body::Bytes;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use outbox_core::text::printable;
use outbox_core::{MessageId, Status};
use outbox_store::{
    BulkAction, ListFilter, MessageAdmin, MessageEdit, Selection, MAX_FAILURE_GROUPS, MAX_LIST_LIMIT,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use super::problem::{Part, Problem};
use super::AdminState;

/// Longest text filter accepted, in bytes.
const MAX_FILTER_LEN: usize = 512;
/// Failed messages a grouping reads unless asked otherwise.
const DEFAULT_SCAN: usize = 10_000;
/// Who an action is recorded as (`updated_by`).
const ACTOR: &str = "admin-api";

pub(super) async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 when every store answers and every destination reports healthy within the probe
/// timeout; 503 naming what is not ready (the reasons are logged, not returned: they may name
/// hosts).
pub(super) async fn readyz(State(state): State<AdminState>) -> Response {
    let mut not_ready = Vec::new();
    for s in state.stores.iter() {
        match tokio::time::timeout(state.probe_timeout, s.outbox.check_schema()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(store = %s.name, error = %printable(&e.to_string(), 300), "Not ready");
                not_ready.push(format!("store {}", s.name));
            }
            Err(_) => not_ready.push(format!("store {} (no answer in {:?})", s.name, state.probe_timeout)),
        }
    }
    for d in state.destinations.iter() {
        match tokio::time::timeout(state.probe_timeout, d.transport.health()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(destination = %d.name, error = %printable(&e, 300), "Not ready");
                not_ready.push(format!("destination {}", d.name));
            }
            Err(_) => {
                not_ready.push(format!("destination {} (no answer in {:?})", d.name, state.probe_timeout))
            }
        }
    }
    if not_ready.is_empty() {
        Json(json!({ "status": "ready" })).into_response()
    } else {
        Problem::new(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}", not_ready.join(", ")))
            .into_response()
    }
}

/// Counts per store (live from the database).
pub(super) async fn stats(State(state): State<AdminState>) -> Result<Response, Problem> {
    let mut out = Vec::with_capacity(state.stores.len());
    for s in state.stores.iter() {
        out.push(json!({ "store": s.name, "stats": s.outbox.stats().await? }));
    }
    Ok(Json(json!({ "stores": out })).into_response())
}

/// Every relay on the stores this listener serves: those of other processes and machines from
/// `outbox_relay` (each relay refreshes its row every few seconds; one silent for 6 beats is
/// `lost`), this process's own with their live counters.
pub(super) async fn relays(State(state): State<AdminState>) -> Result<Json<serde_json::Value>, Problem> {
    use outbox_relay::RelayStats as S;
    let lost_after = i64::try_from((outbox_relay::BEAT_INTERVAL * 6).as_millis()).unwrap_or(i64::MAX);
    let mut relays = Vec::new();
    for s in state.stores.iter() {
        let mut rows = s.outbox.relays().await?;
        // This process's relay: live counters, and its row's host and start when written.
        let st = &s.stats;
        let row = rows.iter().position(|r| r.beat.owner == s.owner).map(|i| rows.remove(i));
        let last_claim = i64::try_from(S::get(&st.last_claim_ms))
            .ok()
            .filter(|ms| *ms > 0)
            .and_then(DateTime::<Utc>::from_timestamp_millis);
        relays.push(json!({
            "owner": s.owner,
            "store": s.name,
            "local": true,
            "state": if st.idle.load(std::sync::atomic::Ordering::Relaxed) { "idle" } else { "busy" },
            "host": row.as_ref().map(|r| r.beat.host.clone()),
            "pid": std::process::id(),
            "version": env!("CARGO_PKG_VERSION"),
            "started_at": row.as_ref().map(|r| r.beat.started_at),
            "seen_at": row.as_ref().map(|r| r.seen_at),
            "silent_ms": row.as_ref().map(|r| r.silent_ms),
            "last_claim_at": last_claim,
            "claimed": S::get(&st.claimed),
            "delivered": S::get(&st.delivered),
            "retried": S::get(&st.retried),
            "failed": S::get(&st.failed),
            "store_errors": S::get(&st.store_errors),
        }));
        for r in rows {
            let state = if r.silent_ms > lost_after { "lost" } else { r.beat.state.as_str() };
            relays.push(json!({
                "owner": r.beat.owner,
                "store": s.name,
                "local": false,
                "state": state,
                "host": r.beat.host,
                "pid": r.beat.pid,
                "version": r.beat.version,
                "started_at": r.beat.started_at,
                "seen_at": r.seen_at,
                "silent_ms": r.silent_ms,
                "last_claim_at": r.beat.last_claim_at,
                "claimed": r.beat.claimed,
                "delivered": r.beat.delivered,
                "retried": null,
                "failed": r.beat.failed,
                "store_errors": null,
            }));
        }
    }
    Ok(Json(json!({ "relays": relays })))
}

/// The search filters of `GET /api/v1/stores/{store}/messages`, also the `filter` of a bulk
/// action.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    status: Option<Status>,
    topic: Option<String>,
    key: Option<String>,
    biz_type: Option<String>,
    biz_key: Option<String>,
    /// Text the last error contains.
    error: Option<String>,
    created_after: Option<DateTime<Utc>>,
    created_before: Option<DateTime<Utc>>,
    /// Keyset cursor: the `next_after_id` of the previous page.
    after_id: Option<i64>,
    limit: Option<usize>,
}

impl ListQuery {
    /// The store's filter, every text bounded.
    fn into_filter(self) -> Result<ListFilter, Problem> {
        let limit = self.limit.unwrap_or(100);
        if limit == 0 || limit > MAX_LIST_LIMIT {
            return Err(Problem::bad_request(format!("limit {limit} is out of range 1..={MAX_LIST_LIMIT}")));
        }
        Ok(ListFilter {
            status: self.status,
            topic: bounded("topic", self.topic)?,
            key: bounded("key", self.key)?,
            biz_type: bounded("biz_type", self.biz_type)?,
            biz_key: bounded("biz_key", self.biz_key)?,
            error: bounded("error", self.error)?,
            created_after: self.created_after,
            created_before: self.created_before,
            after_id: self.after_id.map(MessageId),
            limit,
        })
    }
}

fn bounded(name: &str, v: Option<String>) -> Result<Option<String>, Problem> {
    match v {
        Some(s) if s.len() > MAX_FILTER_LEN => {
            Err(Problem::bad_request(format!("{name} is {} bytes, longer than {MAX_FILTER_LEN}", s.len())))
        }
        v => Ok(v),
    }
}

/// One page of messages in id order, and the cursor of the next page (`null` on the last).
pub(super) async fn list(
    State(state): State<AdminState>,
    Part(Path(store)): Part<Path<String>>,
    Part(Query(q)): Part<Query<ListQuery>>,
) -> Result<Response, Problem> {
    let s = state.store(&store)?;
    let filter = q.into_filter()?;
    let page = s.outbox.list(&filter).await?;
    let next = if page.len() == filter.limit { page.last().map(|m| m.id.0) } else { None };
    Ok(Json(json!({ "messages": page, "next_after_id": next })).into_response())
}

/// Throughput and backlog over the last hour: one point per backlog sample.
pub(super) async fn history(
    State(state): State<AdminState>,
    Part(Path(store)): Part<Path<String>>,
) -> Result<Response, Problem> {
    let s = state.store(&store)?;
    Ok(Json(json!({ "store": s.name, "points": state.metrics.history.points(&s.name) })).into_response())
}

/// The parameters of `GET /api/v1/stores/{store}/failures`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FailuresQuery {
    /// How many of the most recently failed messages to read (default 10,000).
    scan: Option<usize>,
    /// How many groups to return, the largest first (default 100, at most 1,000).
    limit: Option<usize>,
}

/// Failed messages grouped by cause, the largest group first.
pub(super) async fn failures(
    State(state): State<AdminState>,
    Part(Path(store)): Part<Path<String>>,
    Part(Query(q)): Part<Query<FailuresQuery>>,
) -> Result<Response, Problem> {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_FAILURE_GROUPS {
        return Err(Problem::bad_request(format!("limit {limit} is out of range 1..={MAX_FAILURE_GROUPS}")));
    }
    let mut report = state.store(&store)?.outbox.failure_groups(q.scan.unwrap_or(DEFAULT_SCAN)).await?;
    let total = report.groups.len();
    report.groups.truncate(limit);
    Ok(Json(json!({
        "groups": report.groups,
        "groups_total": total,
        "scanned": report.scanned,
        "truncated": report.truncated,
        "ungrouped": report.ungrouped,
        "unreadable": report.unreadable,
    }))
    .into_response())
}

/// The body of `POST /api/v1/stores/{store}/bulk/{retry|cancel}`: exactly one of `filter`,
/// `ids` and `group`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BulkBody {
    /// Every message matching these search filters (`limit` does not apply).
    filter: Option<ListQuery>,
    /// These messages.
    ids: Option<Vec<i64>>,
    /// The messages of this failure group (its `id` in `GET .../failures`).
    group: Option<String>,
    /// With `group`: how many of the most recently failed messages to search (default 10,000).
    scan: Option<usize>,
    /// Count what the action would move, change nothing.
    #[serde(default)]
    dry_run: bool,
}

impl BulkBody {
    fn into_selection(self) -> Result<(Selection, bool), Problem> {
        let selection = match (self.filter, self.ids, self.group) {
            (Some(f), None, None) => {
                if f.limit.is_some() {
                    return Err(Problem::bad_request("filter.limit does not apply to a bulk action"));
                }
                Selection::Filter(f.into_filter()?)
            }
            (None, Some(ids), None) => Selection::Ids(ids.into_iter().map(MessageId).collect()),
            (None, None, Some(group)) => {
                if group.len() != 16 || !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(Problem::bad_request(format!(
                        "group {:?} is not a group id (16 hexadecimal characters)",
                        printable(&group, 64)
                    )));
                }
                Selection::Group { id: group.to_ascii_lowercase(), scan: self.scan.unwrap_or(DEFAULT_SCAN) }
            }
            _ => return Err(Problem::bad_request("give exactly one of filter, ids and group")),
        };
        if self.scan.is_some() && !matches!(selection, Selection::Group { .. }) {
            return Err(Problem::bad_request("scan applies to a group only"));
        }
        Ok((selection, self.dry_run))
    }
}

/// Retries (re-drives failed) or cancels (pending and failed) many messages at once.
pub(super) async fn bulk(
    State(state): State<AdminState>,
    Part(Path((store, action))): Part<Path<(String, String)>>,
    body: Result<Json<BulkBody>, JsonRejection>,
) -> Result<Response, Problem> {
    let action = match action.as_str() {
        "retry" => BulkAction::Retry,
        "cancel" => BulkAction::Cancel,
        _ => return Err(Problem::not_found("no such bulk action: retry or cancel")),
    };
    let Json(body) = body?;
    let (selection, dry_run) = body.into_selection()?;
    let outbox = &state.store(&store)?.outbox;
    let count = outbox.bulk(action, &selection, ACTOR, dry_run, None).await?;
    if !dry_run {
        tracing::info!(store = %printable(&store, 64), action = action.name(), count, "Admin API bulk action");
    }
    Ok(Json(json!({ "action": action, "dry_run": dry_run, "count": count })).into_response())
}

/// The `{store}` and `{id}` of a message's path.
type MessagePath = Part<Path<(String, String)>>;

/// The store and message of a `.../messages/{id}` path.
fn message_path(Part(Path((store, id))): MessagePath) -> Result<(String, MessageId), Problem> {
    let id: i64 = id
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| Problem::bad_request(format!("message id {id:?} is not a positive integer")))?;
    Ok((store, MessageId(id)))
}

/// One message with its deliveries.
pub(super) async fn show(State(state): State<AdminState>, p: MessagePath) -> Result<Response, Problem> {
    let (store, id) = message_path(p)?;
    Ok(Json(state.store(&store)?.outbox.show(id).await?).into_response())
}

/// Re-drives one failed or cancelled message.
pub(super) async fn retry(State(state): State<AdminState>, p: MessagePath) -> Result<Response, Problem> {
    act(&state, p, Action::Retry).await
}

/// Cancels one pending or failed message.
pub(super) async fn cancel(State(state): State<AdminState>, p: MessagePath) -> Result<Response, Problem> {
    act(&state, p, Action::Cancel).await
}

/// Edit-and-resend: a copy with the body's changes (`topic`, `payload`, `key`, `tag`,
/// `headers`; all optional), the original cancelled and pointing at it. Refused (403) unless
/// `[admin] allow_resend = true`.
pub(super) async fn resend(
    State(state): State<AdminState>,
    p: MessagePath,
    body: Bytes,
) -> Result<Response, Problem> {
    let (store, id) = message_path(p)?;
    if !state.resend {
        return Err(Problem::new(
            StatusCode::FORBIDDEN,
            "edit-and-resend is disabled; set [admin] allow_resend = true to enable it",
        ));
    }
    let edit: MessageEdit = optional_body(&body)?;
    let resent = state.store(&store)?.outbox.resend(id, &edit, ACTOR).await?;
    tracing::info!(
        store = %printable(&store, 64), message_id = id.0, copy_id = resent.copy.id.0,
        "Admin API: message resent as a copy"
    );
    Ok(Json(resent).into_response())
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Cancel,
}

async fn act(state: &AdminState, p: MessagePath, action: Action) -> Result<Response, Problem> {
    let (store, id) = message_path(p)?;
    let outbox = &state.store(&store)?.outbox;
    let m = match action {
        Action::Retry => outbox.retry(id, ACTOR).await?,
        Action::Cancel => outbox.cancel(id, ACTOR).await?,
    };
    tracing::info!(store = %printable(&store, 64), message_id = id.0, ?action, "Admin API action");
    Ok(Json(m).into_response())
}

/// The destinations this relay publishes to, and which of them are paused on a store.
pub(super) async fn destinations(
    State(state): State<AdminState>,
    Part(Path(store)): Part<Path<String>>,
) -> Result<Response, Problem> {
    let pauses = state.store(&store)?.outbox.pauses().await?;
    let list: Vec<_> = state
        .destinations
        .iter()
        .map(|d| {
            let pause = pauses.iter().find(|p| p.destination == d.name);
            json!({ "name": d.name, "paused": pause.is_some(), "pause": pause })
        })
        .collect();
    // Paused names no destination here has (another relay's, or a typo made by hand).
    let others: Vec<_> =
        pauses.iter().filter(|p| !state.destinations.iter().any(|d| d.name == p.destination)).collect();
    Ok(Json(json!({ "destinations": list, "other_pauses": others })).into_response())
}

/// The optional body of a pause.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    reason: Option<String>,
}

/// Pauses or resumes a destination for every relay on the store.
pub(super) async fn pause(
    State(state): State<AdminState>,
    Part(Path((store, destination, action))): Part<Path<(String, String, String)>>,
    body: Bytes,
) -> Result<Response, Problem> {
    let outbox = &state.store(&store)?.outbox;
    if !state.destinations.iter().any(|d| d.name == destination) {
        return Err(Problem::not_found(format!("no destination named {:?}", printable(&destination, 128))));
    }
    let changed = match action.as_str() {
        "pause" => {
            let body: PauseBody = optional_body(&body)?;
            outbox.pause(&destination, ACTOR, body.reason.as_deref()).await?
        }
        "resume" => outbox.resume(&destination, ACTOR).await?,
        _ => return Err(Problem::not_found("no such destination action: pause or resume")),
    };
    let paused = action == "pause";
    tracing::info!(store = %printable(&store, 64), destination = %destination, paused, changed, "Admin API: destination");
    Ok(Json(json!({ "destination": destination, "paused": paused, "changed": changed })).into_response())
}

/// A JSON body that may be left out: empty (or only white space) is `T::default()`.
fn optional_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, Problem> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| Problem::bad_request(format!("body: {e}")))
}

pub(super) async fn not_found() -> Problem {
    Problem::not_found("no such endpoint; see docs/admin-api.md")
}
