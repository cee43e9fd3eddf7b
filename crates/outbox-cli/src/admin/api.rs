//! The handlers of `/healthz`, `/readyz` and `/api/v1`.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use outbox_core::text::printable;
use outbox_core::{MessageId, Status};
use outbox_store::{ListFilter, MessageAdmin, MAX_LIST_LIMIT};
use serde::Deserialize;
use serde_json::json;

use super::problem::Problem;
use super::AdminState;

/// Longest text filter accepted, in bytes.
const MAX_FILTER_LEN: usize = 512;
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

/// The relays of this process: owner, store and their counters.
pub(super) async fn relays(State(state): State<AdminState>) -> Json<serde_json::Value> {
    use outbox_relay::RelayStats as S;
    let relays: Vec<_> = state
        .stores
        .iter()
        .map(|s| {
            let st = &s.stats;
            json!({
                "owner": s.owner,
                "store": s.name,
                "claimed": S::get(&st.claimed),
                "delivered": S::get(&st.delivered),
                "retried": S::get(&st.retried),
                "failed": S::get(&st.failed),
                "store_errors": S::get(&st.store_errors),
            })
        })
        .collect();
    Json(json!({ "relays": relays }))
}

/// The search filters of `GET /api/v1/stores/{store}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    status: Option<Status>,
    topic: Option<String>,
    key: Option<String>,
    biz_type: Option<String>,
    biz_key: Option<String>,
    /// Keyset cursor: the `next_after_id` of the previous page.
    after_id: Option<i64>,
    limit: Option<usize>,
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
    store: Result<Path<String>, PathRejection>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, Problem> {
    let Path(store) = store.map_err(|e| Problem::bad_request(e.body_text()))?;
    let Query(q) = query.map_err(|e| Problem::bad_request(e.body_text()))?;
    let s = state.store(&store)?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(Problem::bad_request(format!("limit {limit} is out of range 1..={MAX_LIST_LIMIT}")));
    }
    let filter = ListFilter {
        status: q.status,
        topic: bounded("topic", q.topic)?,
        key: bounded("key", q.key)?,
        biz_type: bounded("biz_type", q.biz_type)?,
        biz_key: bounded("biz_key", q.biz_key)?,
        after_id: q.after_id.map(MessageId),
        limit,
        ..ListFilter::default()
    };
    let page = s.outbox.list(&filter).await?;
    let next = if page.len() == limit { page.last().map(|m| m.id.0) } else { None };
    Ok(Json(json!({ "messages": page, "next_after_id": next })).into_response())
}

fn message_path(p: Result<Path<(String, String)>, PathRejection>) -> Result<(String, MessageId), Problem> {
    let Path((store, id)) = p.map_err(|e| Problem::bad_request(e.body_text()))?;
    let id: i64 = id
        .parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| Problem::bad_request(format!("message id {id:?} is not a positive integer")))?;
    Ok((store, MessageId(id)))
}

/// One message with its deliveries.
pub(super) async fn show(
    State(state): State<AdminState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, Problem> {
    let (store, id) = message_path(p)?;
    Ok(Json(state.store(&store)?.outbox.show(id).await?).into_response())
}

/// Re-drives one failed or cancelled message.
pub(super) async fn retry(
    State(state): State<AdminState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, Problem> {
    act(&state, p, Action::Retry).await
}

/// Cancels one pending or failed message.
pub(super) async fn cancel(
    State(state): State<AdminState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, Problem> {
    act(&state, p, Action::Cancel).await
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Cancel,
}

async fn act(
    state: &AdminState,
    p: Result<Path<(String, String)>, PathRejection>,
    action: Action,
) -> Result<Response, Problem> {
    let (store, id) = message_path(p)?;
    let outbox = &state.store(&store)?.outbox;
    let m = match action {
        Action::Retry => outbox.retry(id, ACTOR).await?,
        Action::Cancel => outbox.cancel(id, ACTOR).await?,
    };
    tracing::info!(store = %printable(&store, 64), message_id = id.0, ?action, "Admin API action");
    Ok(Json(m).into_response())
}

pub(super) async fn not_found() -> Problem {
    Problem::not_found("no such endpoint; see docs/admin-api.md")
}
