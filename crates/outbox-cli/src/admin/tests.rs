//! The admin router end to end on real databases (PostgreSQL, MariaDB), without a socket.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use outbox_relay::testing::TestTransport;
use outbox_relay::RelayStats;
use outbox_store::{AnyOutbox, NewMessage, Outbox, Status};
use serde_json::Value;
use tower::ServiceExt;

use super::{router, AdminState, DestinationHandle, StoreHandle, Tokens};

const READ: &str = "read-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

fn state(outbox: AnyOutbox, transport: &TestTransport, tokens: bool) -> AdminState {
    let stores = vec![StoreHandle {
        name: "main".into(),
        outbox,
        owner: "relay-main".into(),
        stats: Arc::new(RelayStats::default()),
    }];
    let dests = vec![DestinationHandle { name: "broker".into(), transport: Arc::new(transport.clone()) }];
    let tokens = tokens.then(|| Tokens { read: READ.into(), admin: ADMIN.into() });
    AdminState::new(stores, dests, tokens).budget(outbox_relay::Budget::new(4))
}

/// Sends one request; returns the status, the content type and the body.
async fn call(
    state: &AdminState,
    method: Method,
    uri: &str,
    token: Option<&str>,
) -> (StatusCode, String, String) {
    send(state, method, uri, token, None).await
}

/// Sends one request with an optional JSON body.
async fn send(
    state: &AdminState,
    method: Method,
    uri: &str,
    token: Option<&str>,
    json_body: Option<&str>,
) -> (StatusCode, String, String) {
    let mut req = Request::builder().method(method.clone()).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match json_body {
        Some(b) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(b.to_owned())
        }
        None => Body::empty(),
    };
    let resp = router(state.clone()).oneshot(req.body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let ctype =
        resp.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    let body = String::from_utf8(body.to_vec()).unwrap();
    conforms(&method, uri, status, &ctype, &body);
    (status, ctype, body)
}

/// docs/openapi.json, which every answer in these tests must conform to.
static CONTRACT: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    serde_json::from_str(include_str!("../../../../docs/openapi.json")).expect("docs/openapi.json is JSON")
});

/// Whether the concrete `path` fits the document's `template` (`{x}` fits any one segment).
fn fits(template: &str, path: &str) -> bool {
    let (t, p): (Vec<_>, Vec<_>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t == p || (t.starts_with('{') && t.ends_with('}')))
}

/// Checks one answer against docs/openapi.json: the operation, the status and the media type
/// are documented, and a JSON body validates against the documented schema.
fn conforms(method: &Method, uri: &str, status: StatusCode, ctype: &str, body: &str) {
    let path = uri.split('?').next().unwrap();
    let paths = CONTRACT["paths"].as_object().unwrap();
    let Some((_, item)) = paths.iter().find(|(template, _)| fits(template, path)) else {
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path} is not in docs/openapi.json");
        return;
    };
    let op = &item[method.as_str().to_ascii_lowercase()];
    if op.is_null() {
        assert!(
            matches!(status.as_u16(), 404 | 405),
            "{method} {path} is not in docs/openapi.json: {status}"
        );
        return;
    }
    let response = &op["responses"][status.as_str()];
    assert!(!response.is_null(), "{method} {path}: {status} is not documented in docs/openapi.json");
    if response.get("content").is_none() {
        return; // documented without a body (the redirect)
    }
    let media = ctype.split(';').next().unwrap_or("").trim();
    let schema = &response["content"][media]["schema"];
    assert!(!schema.is_null(), "{method} {path}: {status} {media} is not documented in docs/openapi.json");
    if schema["type"] == "string" {
        return;
    }
    let instance: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{method} {uri}: not JSON ({e})"));
    let mut root = schema.clone();
    root["components"] = CONTRACT["components"].clone();
    let validator = jsonschema::validator_for(&root).expect("the documented schema compiles");
    let errors: Vec<String> =
        validator.iter_errors(&instance).map(|e| format!("{e} at {}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{method} {uri} {status}: breaks docs/openapi.json: {errors:?}\n{body}");
}

/// Every route is documented and every documented operation is served (not the fallback).
async fn the_document_and_the_routes_agree(s: &AdminState) {
    let mut documented: Vec<&str> =
        CONTRACT["paths"].as_object().unwrap().keys().map(String::as_str).collect();
    let mut served: Vec<&str> = super::routes().into_iter().map(|(p, _)| p).collect();
    documented.sort_unstable();
    served.sort_unstable();
    assert_eq!(documented, served, "docs/openapi.json and the router list different paths");
    for (template, item) in CONTRACT["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let mut uri = template.clone();
            for p in op["parameters"].as_array().into_iter().flatten().filter(|p| p["in"] == "path") {
                let name = p["name"].as_str().unwrap();
                // The last value of an enum (resume, cancel): harmless on this store.
                let value = match p["schema"]["enum"].as_array() {
                    Some(values) => values.last().unwrap().as_str().unwrap().to_owned(),
                    None => match name {
                        "store" => "main".to_owned(),
                        "name" => "broker".to_owned(),
                        _ => "1".to_owned(),
                    },
                };
                uri = uri.replace(&format!("{{{name}}}"), &value);
            }
            let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let (code, _, body) = send(s, method.clone(), &uri, Some(ADMIN), None).await;
            assert!(
                code != StatusCode::METHOD_NOT_ALLOWED && !body.contains("no such endpoint"),
                "{method} {uri}: {code} {body}"
            );
        }
    }
}

async fn json(state: &AdminState, method: Method, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
    let (status, _, body) = call(state, method, uri, token).await;
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: not JSON ({e}): {body}")))
}

/// Enqueues one message of `topic`; returns its id.
async fn enqueue(outbox: &AnyOutbox, topic: &str, i: usize) -> i64 {
    let msg = NewMessage::new(topic, format!("{{\"n\":{i}}}"));
    let id = match outbox {
        AnyOutbox::Postgres(o) => o.enqueue(&msg).await,
        AnyOutbox::MySql(o) => o.enqueue(&msg).await,
        _ => unreachable!("PostgreSQL and MariaDB only"),
    };
    id.unwrap().id.0
}

/// Runs one statement; returns the rows it changed.
async fn exec(outbox: &AnyOutbox, sql: &str) -> u64 {
    let done = match outbox {
        AnyOutbox::Postgres(o) => sqlx::query(sql).execute(o.pool()).await.map(|r| r.rows_affected()),
        AnyOutbox::MySql(o) => sqlx::query(sql).execute(o.pool()).await.map(|r| r.rows_affected()),
        _ => unreachable!("PostgreSQL and MariaDB only"),
    };
    done.unwrap()
}

/// Marks message `id` failed with `error`, as the relay would.
async fn fail(outbox: &AnyOutbox, id: i64, error: &str) {
    let sql = format!("UPDATE outbox_message SET status = 'failed', last_error = '{error}' WHERE id = {id}");
    assert_eq!(exec(outbox, &sql).await, 1);
}

/// 5 messages: ids[1] and ids[3] failed by hand.
async fn seed(outbox: &AnyOutbox) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(enqueue(outbox, "order.paid", i).await);
    }
    for id in [ids[1], ids[3]] {
        fail(outbox, id, "[broker] refused").await;
    }
    ids
}

async fn the_api_searches_pages_shows_and_acts(outbox: AnyOutbox) {
    let t = TestTransport::new();
    let s = state(outbox.clone(), &t, true);
    let ids = seed(&outbox).await;

    // Search by status, and keyset pages of 2 over the 5 messages.
    let (code, page) = json(&s, Method::GET, "/api/v1/stores/main/messages?status=failed", Some(READ)).await;
    assert_eq!(code, StatusCode::OK);
    let failed: Vec<i64> =
        page["messages"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(failed, vec![ids[1], ids[3]]);
    let mut seen = Vec::new();
    let mut uri = "/api/v1/stores/main/messages?limit=2".to_owned();
    loop {
        let (code, page) = json(&s, Method::GET, &uri, Some(READ)).await;
        assert_eq!(code, StatusCode::OK, "{page}");
        seen.extend(page["messages"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()));
        match page["next_after_id"].as_i64() {
            Some(after) => uri = format!("/api/v1/stores/main/messages?limit=2&after_id={after}"),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every message once, in id order");

    // One message, then the actions and the refusals of the wrong status.
    let (code, detail) =
        json(&s, Method::GET, &format!("/api/v1/stores/main/messages/{}", ids[1]), Some(READ)).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(detail["message"]["status"], "failed");
    let (code, m) =
        json(&s, Method::POST, &format!("/api/v1/stores/main/messages/{}/retry", ids[1]), Some(ADMIN)).await;
    assert_eq!((code, m["status"].as_str()), (StatusCode::OK, Some("pending")));
    assert_eq!(m["updated_by"], "admin-api");
    let (code, m) =
        json(&s, Method::POST, &format!("/api/v1/stores/main/messages/{}/cancel", ids[0]), Some(ADMIN)).await;
    assert_eq!((code, m["status"].as_str()), (StatusCode::OK, Some("cancelled")));
    let (code, p) =
        json(&s, Method::POST, &format!("/api/v1/stores/main/messages/{}/retry", ids[2]), Some(ADMIN)).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(p["detail"].as_str().unwrap().contains("pending"), "{p}");
    let shown = outbox_store::MessageAdmin::show(&outbox, outbox_store::MessageId(ids[0])).await.unwrap();
    assert_eq!(shown.message.status, Status::Cancelled);

    // Stats and relays.
    let (code, stats) = json(&s, Method::GET, "/api/v1/stats", Some(READ)).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(stats["stores"][0]["stats"]["failed"], 1);
    let (_, relays) = json(&s, Method::GET, "/api/v1/relays", Some(READ)).await;
    assert_eq!(relays["relays"][0]["owner"], "relay-main");

    // Metrics: the backlog gauges agree with the database once sampled.
    s.metrics.sample(&s.stores).await;
    let (code, ctype, text) = call(&s, Method::GET, "/metrics", Some(READ)).await;
    assert_eq!(code, StatusCode::OK);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let value = |series: &str| -> f64 {
        let line =
            text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let stats = outbox_store::MessageAdmin::stats(&outbox).await.unwrap();
    for status in [Status::Pending, Status::Failed, Status::Cancelled] {
        let series = format!("outbox_messages{{store=\"main\",status=\"{}\"}}", status.as_str());
        assert_eq!(value(&series), stats.count(status) as f64, "{series}");
    }
    assert_eq!(value("outbox_messages_claimed_total{store=\"main\"}"), 0.0);
    assert_eq!(value("outbox_messages_runs_continued_total{store=\"main\"}"), 0.0);
    assert_eq!(value("outbox_claims_beside_total{store=\"main\"}"), 0.0);
    assert_eq!(value("outbox_lane_looks_total{store=\"main\"}"), 0.0);
    assert_eq!(value("outbox_lane_left_total{store=\"main\"}"), 0.0);
    // The budget the relays share: its size, nothing taken or parked, no turn yet.
    assert_eq!(value("outbox_budget_shares "), 4.0);
    assert_eq!(value("outbox_budget_shares_taken{state=\"in_use\"}"), 0.0);
    assert_eq!(value("outbox_budget_shares_taken{state=\"parked\"}"), 0.0);
    for series in [
        "outbox_budget_turns_total",
        "outbox_budget_parked_reused_total",
        "outbox_budget_parked_given_back_total",
    ] {
        assert_eq!(value(series), 0.0, "{series}");
    }
    // The claims by kind: every kind has its series from the start (no relay ran here).
    for kind in outbox_relay::ClaimKind::ALL {
        for name in ["outbox_claims_by_kind_total", "outbox_empty_claims_total"] {
            let series = format!("{name}{{store=\"main\",kind=\"{}\"}}", kind.name());
            assert_eq!(value(&series), 0.0, "{series}");
        }
    }
    let (code, history) = json(&s, Method::GET, "/api/v1/stores/main/history", Some(READ)).await;
    assert_eq!(code, StatusCode::OK);
    let points = history["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "one point per sample: {history}");
    assert_eq!(points[0]["pending"], stats.count(Status::Pending) + stats.count(Status::Sending));
    assert!(points[0]["delivered_per_sec"].is_null(), "no rate from a single point");

    // Readiness follows the destination.
    let (code, _) = json(&s, Method::GET, "/readyz", None).await;
    assert_eq!(code, StatusCode::OK);
    t.set_down(true);
    let (code, p) = json(&s, Method::GET, "/readyz", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(p["detail"], "not ready: destination broker");
    t.set_down(false);
    the_document_and_the_routes_agree(&s).await;
}

async fn bulk(s: &AdminState, action: &str, body: &str) -> (StatusCode, Value) {
    let uri = format!("/api/v1/stores/main/bulk/{action}");
    let (code, _, text) = send(s, Method::POST, &uri, Some(ADMIN), Some(body)).await;
    (code, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{body}: not JSON ({e}): {text}")))
}

async fn statuses(outbox: &AnyOutbox, ids: &[i64]) -> Vec<Status> {
    let mut out = Vec::new();
    for id in ids {
        out.push(outbox.get(outbox_store::MessageId(*id)).await.unwrap().unwrap().status);
    }
    out
}

/// Failed messages grouped by cause (ids and numbers normalised away), then retried or
/// cancelled by group, by filter and by ids, each with a dry run that counts and changes
/// nothing; bad bodies are 400s.
async fn failures_are_grouped_and_acted_on_in_bulk(outbox: AnyOutbox) {
    let s = state(outbox.clone(), &TestTransport::new(), true);
    let mut timeouts = Vec::new();
    for i in 0..3 {
        let id = enqueue(&outbox, "order.paid", i).await;
        fail(
            &outbox,
            id,
            &format!("[broker] publish of message {} timed out after {} ms", 20_000 + i, 5_000 + i),
        )
        .await;
        timeouts.push(id);
    }
    let mut rejected = Vec::new();
    for i in 0..2 {
        let id = enqueue(&outbox, "order.paid", i).await;
        fail(&outbox, id, "[broker] HTTP 400: schema mismatch").await;
        rejected.push(id);
    }
    let stock = enqueue(&outbox, "stock", 0).await;
    fail(&outbox, stock, "[broker] publish of message 30001 timed out after 5999 ms").await;
    let pending = [enqueue(&outbox, "order.paid", 9).await, enqueue(&outbox, "stock", 9).await];

    let (code, report) = json(&s, Method::GET, "/api/v1/stores/main/failures", Some(READ)).await;
    assert_eq!(code, StatusCode::OK, "{report}");
    assert_eq!((report["groups_total"].as_u64(), report["scanned"].as_u64()), (Some(3), Some(6)), "{report}");
    assert_eq!(report["truncated"], false);
    let top = &report["groups"][0];
    assert_eq!(top["count"], 3, "{report}");
    assert_eq!((top["topic"].as_str(), top["destination"].as_str()), (Some("order.paid"), Some("broker")));
    assert_eq!(top["cause"], "publish of message # timed out after # ms");
    let mut examples: Vec<i64> =
        top["example_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    examples.sort_unstable();
    assert_eq!(examples, timeouts);
    let group = top["id"].as_str().unwrap().to_owned();
    let (_, small) = json(&s, Method::GET, "/api/v1/stores/main/failures?scan=2&limit=1", Some(READ)).await;
    assert_eq!((small["scanned"].as_u64(), small["truncated"].as_bool()), (Some(2), Some(true)), "{small}");
    assert_eq!(small["groups"].as_array().unwrap().len(), 1);

    // A group: the dry run counts and changes nothing, then the retry moves exactly it.
    let body = format!("{{\"group\": \"{group}\", \"dry_run\": true}}");
    let (code, r) = bulk(&s, "retry", &body).await;
    assert_eq!(
        (code, r["count"].as_u64(), r["dry_run"].as_bool()),
        (StatusCode::OK, Some(3), Some(true)),
        "{r}"
    );
    assert_eq!(statuses(&outbox, &timeouts).await, vec![Status::Failed; 3]);
    let (code, r) = bulk(&s, "retry", &format!("{{\"group\": \"{group}\"}}")).await;
    assert_eq!((code, r["count"].as_u64()), (StatusCode::OK, Some(3)), "{r}");
    assert_eq!(statuses(&outbox, &timeouts).await, vec![Status::Pending; 3]);
    assert_eq!(statuses(&outbox, &rejected).await, vec![Status::Failed; 2], "another group is untouched");
    assert_eq!(statuses(&outbox, &[stock]).await, vec![Status::Failed], "another topic is another group");

    // A filter: cancel moves pending and failed messages of the topic.
    let (_, r) = bulk(&s, "cancel", r#"{"filter": {"topic": "stock"}, "dry_run": true}"#).await;
    assert_eq!(r["count"], 2, "{r}");
    let (_, r) = bulk(&s, "cancel", r#"{"filter": {"topic": "stock", "status": "failed"}}"#).await;
    assert_eq!(r["count"], 1, "{r}");
    assert_eq!(statuses(&outbox, &[stock, pending[1]]).await, vec![Status::Cancelled, Status::Pending]);
    let (_, r) = bulk(&s, "retry", r#"{"filter": {"error": "HTTP 400"}}"#).await;
    assert_eq!(r["count"], 2, "{r}");
    assert_eq!(statuses(&outbox, &rejected).await, vec![Status::Pending; 2]);

    // Ids: only those in a status the action moves from are counted and moved.
    let body = format!("{{\"ids\": [{}, {}, {stock}]}}", pending[0], pending[1]);
    let (_, r) = bulk(&s, "cancel", &body.replace('}', ", \"dry_run\": true}")).await;
    assert_eq!(r["count"], 2, "the cancelled one is not counted: {r}");
    let (_, r) = bulk(&s, "cancel", &body).await;
    assert_eq!(r["count"], 2, "{r}");
    assert_eq!(statuses(&outbox, &pending).await, vec![Status::Cancelled; 2]);

    let (code, _, _) = send(&s, Method::POST, "/api/v1/stores/main/bulk/retry", Some(READ), Some("{}")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let garbage = [
        ("retry", "", StatusCode::BAD_REQUEST),
        ("retry", "{", StatusCode::BAD_REQUEST),
        ("retry", "{}", StatusCode::BAD_REQUEST),
        ("retry", r#"{"ids": [1], "group": "0123456789abcdef"}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"group": "not-a-group"}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"ids": []}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"ids": [0]}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"ids": [1], "scan": 5}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"filter": {"limit": 5}}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"filter": {"status": "sent"}}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"filter": {}, "bogus": 1}"#, StatusCode::BAD_REQUEST),
        ("retry", r#"{"group": "0123456789abcdef", "scan": 0}"#, StatusCode::BAD_REQUEST),
        ("explode", r#"{"ids": [1]}"#, StatusCode::NOT_FOUND),
    ];
    for (action, body, want) in garbage {
        let (code, p) = bulk(&s, action, body).await;
        assert_eq!(code, want, "{action} {body}: {p}");
        assert!(!p["detail"].as_str().unwrap_or("").is_empty(), "{p}");
    }
    for uri in ["/api/v1/stores/main/failures?limit=0", "/api/v1/stores/main/failures?scan=100000000"] {
        let (code, _) = json(&s, Method::GET, uri, Some(READ)).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{uri}");
    }
    destinations_pause_and_resume(&s, &outbox).await;
    edit_and_resend(&s, &outbox).await;
}

/// Edit-and-resend: off unless configured, admin token only; the copy is a new pending message
/// with the edit, the header naming the original and the business key; the original is
/// cancelled, points at the copy, and cannot be resent twice.
async fn edit_and_resend(closed: &AdminState, outbox: &AnyOutbox) {
    let msg = NewMessage::new("order.paid", "{\"v\":1}").biz("order", "77").key("k77");
    let id = match outbox {
        AnyOutbox::Postgres(o) => o.enqueue(&msg).await,
        AnyOutbox::MySql(o) => o.enqueue(&msg).await,
        _ => unreachable!("PostgreSQL and MariaDB only"),
    }
    .unwrap()
    .id
    .0;
    fail(outbox, id, "[broker] schema mismatch").await;
    let uri = format!("/api/v1/stores/main/messages/{id}/resend");
    let edit = r#"{"payload": "{\"v\":2}", "headers": {"fixed-by": "ops"}}"#;
    let (code, _, _) = send(closed, Method::POST, &uri, Some(ADMIN), Some(edit)).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "off unless configured");
    let open = closed.clone().allow_resend(true);
    let (code, _, _) = send(&open, Method::POST, &uri, Some(READ), Some(edit)).await;
    assert_eq!(code, StatusCode::FORBIDDEN, "admin token only");
    let (code, _, _) = send(&open, Method::POST, &uri, Some(ADMIN), Some(r#"{"bogus": 1}"#)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    let (code, _, body) = send(&open, Method::POST, &uri, Some(ADMIN), Some(edit)).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    let (original, copy) = (&r["original"], &r["copy"]);
    let copy_id = copy["id"].as_i64().unwrap();
    assert_ne!(copy_id, id);
    assert_eq!((original["status"].as_str(), copy["status"].as_str()), (Some("cancelled"), Some("pending")));
    assert!(
        original["last_error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("resent as message {copy_id} by admin-api")),
        "{original}"
    );
    assert_eq!(
        (copy["payload"].as_str(), copy["topic"].as_str(), copy["key"].as_str()),
        (Some("{\"v\":2}"), Some("order.paid"), Some("k77"))
    );
    assert_eq!(copy["headers"]["outbox-resent-from"], id.to_string());
    assert_eq!(copy["headers"]["fixed-by"], "ops");
    assert_eq!(
        (copy["biz_type"].as_str(), copy["biz_key"].as_str()),
        (Some("order"), Some("77")),
        "the business key moved"
    );
    assert!(original["biz_key"].is_null());
    let (code, _, body) = send(&open, Method::POST, &uri, Some(ADMIN), Some(edit)).await;
    assert_eq!(code, StatusCode::CONFLICT, "resent once only: {body}");
    assert!(body.contains("only failed messages"), "{body}");
}

/// A destination paused through the API is paused for every relay on the store (the row the
/// relays read), with who and why; resumed likewise; repeated calls change nothing.
async fn destinations_pause_and_resume(s: &AdminState, outbox: &AnyOutbox) {
    use outbox_store::Pauses;
    let act = |action: &'static str, body: Option<&'static str>| async move {
        let uri = format!("/api/v1/stores/main/destinations/broker/{action}");
        let (code, _, text) = send(s, Method::POST, &uri, Some(ADMIN), body).await;
        (code, serde_json::from_str::<Value>(&text).unwrap())
    };
    let (code, list) = json(s, Method::GET, "/api/v1/stores/main/destinations", Some(READ)).await;
    assert_eq!((code, &list["destinations"][0]["paused"]), (StatusCode::OK, &Value::Bool(false)), "{list}");
    let (code, r) = act("pause", Some(r#"{"reason": "broker maintenance"}"#)).await;
    assert_eq!((code, r["changed"].as_bool()), (StatusCode::OK, Some(true)), "{r}");
    let (_, r) = act("pause", None).await;
    assert_eq!(r["changed"], false, "already paused: {r}");
    assert_eq!(outbox.paused_destinations().await.unwrap(), vec!["broker".to_owned()]);
    let (_, list) = json(s, Method::GET, "/api/v1/stores/main/destinations", Some(READ)).await;
    let d = &list["destinations"][0];
    assert_eq!(
        (d["paused"].as_bool(), d["pause"]["reason"].as_str()),
        (Some(true), Some("broker maintenance"))
    );
    assert_eq!(d["pause"]["paused_by"], "admin-api");
    let (_, r) = act("resume", None).await;
    assert_eq!(r["changed"], true, "{r}");
    let (_, r) = act("resume", None).await;
    assert_eq!(r["changed"], false, "{r}");
    assert!(outbox.paused_destinations().await.unwrap().is_empty());

    let long = format!(r#"{{"reason": "{}"}}"#, "r".repeat(600));
    let garbage = [
        ("/api/v1/stores/main/destinations/nope/pause", None, StatusCode::NOT_FOUND),
        ("/api/v1/stores/main/destinations/broker/explode", None, StatusCode::NOT_FOUND),
        ("/api/v1/stores/main/destinations/broker/pause", Some("{oops"), StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/destinations/broker/pause", Some(r#"{"why": 1}"#), StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/destinations/broker/pause", Some(long.as_str()), StatusCode::BAD_REQUEST),
    ];
    for (uri, body, want) in garbage {
        let (code, _, text) = send(s, Method::POST, uri, Some(ADMIN), body).await;
        assert_eq!(code, want, "{uri} {body:?}: {text}");
    }
    let (code, _, _) =
        send(s, Method::POST, "/api/v1/stores/main/destinations/broker/pause", Some(READ), None).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    assert!(outbox.paused_destinations().await.unwrap().is_empty(), "nothing paused by the refused calls");
}

/// 401 without or with a wrong token (problem+json, `WWW-Authenticate: Bearer`), 403 for the
/// read token on an action; the probes are open; garbage is a 4xx problem, never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_garbage() {
    let db = outbox_testkit::fresh_pg().await;
    let outbox = AnyOutbox::Postgres(Outbox::new(db.pool.clone()));
    outbox.migrate().await.unwrap();
    let s = state(outbox, &TestTransport::new(), true);
    let (code, ctype, _) = call(&s, Method::GET, "/api/v1/stats", None).await;
    assert_eq!((code, ctype.as_str()), (StatusCode::UNAUTHORIZED, "application/problem+json"));
    let (code, _, _) = call(&s, Method::GET, "/metrics", Some("nope-nope-nope-nope")).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, _, _) = call(&s, Method::POST, "/api/v1/stores/main/messages/1/retry", Some(READ)).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (code, _, body) = call(&s, Method::GET, "/healthz", None).await;
    assert_eq!((code, body.as_str()), (StatusCode::OK, "ok\n"));
    // The dashboard's files need no token and carry a strict CSP; they hold no data.
    for (uri, ctype) in
        [("/ui/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")]
    {
        let resp = router(s.clone()).oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{uri}");
        let h = resp.headers();
        assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with(ctype), "{uri}");
        assert!(h[header::CONTENT_SECURITY_POLICY].to_str().unwrap().contains("script-src 'self'"), "{uri}");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
    let (code, _, _) = call(&s, Method::GET, "/", None).await;
    assert_eq!(code, StatusCode::SEE_OTHER);

    let garbage = [
        ("/api/v1/stores/main/messages/abc", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages/-1", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages/99999999999999999999999", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages/12345", StatusCode::NOT_FOUND),
        ("/api/v1/stores/nope/messages", StatusCode::NOT_FOUND),
        ("/api/v1/stores/main/messages?limit=0", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages?limit=100000", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages?status=lost", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages?bogus=1", StatusCode::BAD_REQUEST),
        ("/api/v1/stores/main/messages?after_id=x", StatusCode::BAD_REQUEST),
        ("/api/v1/nothing/here", StatusCode::NOT_FOUND),
    ];
    for (uri, want) in garbage {
        let (code, ctype, body) = call(&s, Method::GET, uri, Some(READ)).await;
        assert_eq!(code, want, "{uri}: {body}");
        assert_eq!(ctype, "application/problem+json", "{uri}");
        let p: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(p["status"], want.as_u16());
        assert!(!p["detail"].as_str().unwrap().is_empty());
    }
    let long = format!("/api/v1/stores/main/messages?topic={}", "t".repeat(600));
    let (code, _, body) = call(&s, Method::GET, &long, Some(READ)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("longer than 512"), "{body}");
    db.drop_db().await;
}

/// Messages [`a_hundred_thousand_messages_are_searched_and_paged`] writes.
const MANY: usize = 100_000;
/// `created_at` of the messages: this instant plus a distinct whole second each.
const MANY_FROM: &str = "2024-01-01T00:00:00Z";

/// `MANY_FROM` plus `secs` seconds, as a literal of the dialect's SQL.
fn sql_instant(outbox: &AnyOutbox, secs: u32) -> String {
    match outbox {
        AnyOutbox::Postgres(_) => {
            format!("(timestamptz '2024-01-01 00:00:00+00' + interval '{secs} seconds')")
        }
        AnyOutbox::MySql(_) => format!("TIMESTAMPADD(SECOND, {secs}, '2024-01-01 00:00:00')"),
        _ => unreachable!("PostgreSQL and MariaDB only"),
    }
}

/// `MANY_FROM` plus `secs` seconds, as the API's RFC 3339 (`Z`: nothing to escape in a query).
fn api_instant(secs: u32) -> String {
    let from: chrono::DateTime<chrono::Utc> = MANY_FROM.parse().unwrap();
    (from + chrono::Duration::seconds(secs.into())).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `v` escaped for a query string (every byte but the unreserved ones as `%XX`).
fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Writes `MANY` messages in one set-based statement. Message `i` (1-based, not its id) is of
/// topic `i % 5`, keyed `k<i % 50>` when `i % 3 = 0`, has a business key when `i % 10` is 0
/// (`order`) or 5 (`invoice`), and by `i % 11` is failed (0; four errors by `i % 4`, two of
/// them telling `%` and `_` from any character), sent (1), cancelled with an error (2) or
/// pending. `created_at` is `MANY_FROM` plus `7919 i mod MANY` seconds: every second of the
/// range once, in an order unrelated to the ids. Messages need no delivery rows to be searched.
async fn insert_many(outbox: &AnyOutbox) {
    let series = match outbox {
        AnyOutbox::Postgres(_) => "generate_series(1, 100000) AS g(i)".to_owned(),
        // A cross join of digits: any MySQL or MariaDB (a recursive CTE stops at
        // max_recursive_iterations, 1000 on MariaDB by default; the SEQUENCE engine is MariaDB's).
        AnyOutbox::MySql(_) => {
            let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                UNION ALL SELECT 8 UNION ALL SELECT 9)";
            format!(
                "(SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 1 AS i \
                 FROM {digits} a CROSS JOIN {digits} b CROSS JOIN {digits} c \
                 CROSS JOIN {digits} e CROSS JOIN {digits} f) AS g"
            )
        }
        _ => unreachable!("PostgreSQL and MariaDB only"),
    };
    let at = match outbox {
        AnyOutbox::Postgres(_) => {
            "(timestamptz '2024-01-01 00:00:00+00' + (i * 7919 % 100000) * interval '1 second')"
        }
        _ => "TIMESTAMPADD(SECOND, i * 7919 % 100000, '2024-01-01 00:00:00')",
    };
    let sql = format!(
        "INSERT INTO outbox_message \
             (topic, msg_key, biz_type, biz_key, payload, status, last_error, created_at, updated_at) \
         SELECT \
             CASE i % 5 WHEN 0 THEN 'order.paid' WHEN 1 THEN 'order.shipped' WHEN 2 THEN 'stock' \
                 WHEN 3 THEN 'billing' ELSE 'audit' END, \
             CASE WHEN i % 3 = 0 THEN concat('k', i % 50) END, \
             CASE i % 10 WHEN 0 THEN 'order' WHEN 5 THEN 'invoice' END, \
             CASE i % 10 WHEN 0 THEN concat('o', i) WHEN 5 THEN concat('inv', i) END, \
             concat('{{\"n\":', i, '}}'), \
             CASE i % 11 WHEN 0 THEN 'failed' WHEN 1 THEN 'sent' WHEN 2 THEN 'cancelled' ELSE 'pending' END, \
             CASE WHEN i % 11 = 2 THEN '[broker] HTTP 400: schema mismatch' \
                 WHEN i % 11 <> 0 THEN NULL \
                 WHEN i % 4 = 0 THEN concat('[broker] publish of message ', i, ' timed out after 5000 ms') \
                 WHEN i % 4 = 1 THEN '[broker] HTTP 400: schema mismatch' \
                 WHEN i % 4 = 2 THEN '[broker] quota at 100% for tenant_7' \
                 ELSE '[broker] quota at 1000 for tenant07' END, \
             {at}, {at} \
         FROM {series}"
    );
    assert_eq!(exec(outbox, &sql).await, MANY as u64);
    let analyze = match outbox {
        AnyOutbox::Postgres(_) => "ANALYZE outbox_message",
        _ => "ANALYZE TABLE outbox_message",
    };
    match outbox {
        AnyOutbox::Postgres(o) => sqlx::query(analyze).execute(o.pool()).await.map(drop),
        AnyOutbox::MySql(o) => sqlx::query(analyze).fetch_all(o.pool()).await.map(drop),
        _ => unreachable!("PostgreSQL and MariaDB only"),
    }
    .unwrap();
}

/// The ids of the messages meeting `condition` (SQL), in id order: what a search must find.
async fn ids_where(outbox: &AnyOutbox, condition: &str) -> Vec<i64> {
    let sql = format!("SELECT id FROM outbox_message WHERE {condition} ORDER BY id");
    let ids = match outbox {
        AnyOutbox::Postgres(o) => sqlx::query_scalar(&sql).fetch_all(o.pool()).await,
        AnyOutbox::MySql(o) => sqlx::query_scalar(&sql).fetch_all(o.pool()).await,
        _ => unreachable!("PostgreSQL and MariaDB only"),
    };
    ids.unwrap()
}

/// Follows a search's `next_after_id` from the first page until it is `null`; returns the ids
/// of every page in order and the number of pages. Every page but the last is full and names
/// its own last id as the cursor.
async fn every_page(s: &AdminState, query: &str, limit: usize) -> (Vec<i64>, usize) {
    let mut ids: Vec<i64> = Vec::new();
    let mut after: Option<i64> = None;
    for pages in 1.. {
        let mut uri = format!("/api/v1/stores/main/messages?limit={limit}");
        if !query.is_empty() {
            uri = format!("{uri}&{query}");
        }
        if let Some(a) = after {
            uri = format!("{uri}&after_id={a}");
        }
        let (code, page) = json(s, Method::GET, &uri, Some(READ)).await;
        assert_eq!(code, StatusCode::OK, "{uri}: {page}");
        let got: Vec<i64> =
            page["messages"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect();
        assert!(got.len() <= limit, "{uri}: {} messages", got.len());
        if let (Some(a), Some(first)) = (after, got.first()) {
            assert!(*first > a, "{uri}: the page starts at {first}, not after {a}");
        }
        ids.extend(&got);
        match page["next_after_id"].as_i64() {
            Some(next) => {
                assert_eq!(got.len(), limit, "{uri}: a page short of the limit has no next page");
                assert_eq!(Some(&next), got.last(), "{uri}: the cursor is the page's last id");
                after = Some(next);
            }
            None => {
                assert!(page["next_after_id"].is_null(), "{uri}: {}", page["next_after_id"]);
                return (ids, pages);
            }
        }
        assert!(pages <= MANY / limit + 1, "{uri}: more pages than the table can fill");
    }
    unreachable!()
}

/// 100,000 messages written straight into the table: every one paged through once, in id
/// order, at the largest page; filtered searches over many pages find exactly what the same
/// condition finds in SQL (escaped `%` and `_` in the error text, the created range inclusive
/// at its start and exclusive at its end); a page near the end is answered like the first.
async fn a_hundred_thousand_messages_are_searched_and_paged(outbox: AnyOutbox) {
    let s = state(outbox.clone(), &TestTransport::new(), true);
    insert_many(&outbox).await;
    let all = ids_where(&outbox, "TRUE").await;
    assert_eq!(all.len(), MANY);

    // Everything, at the largest page the API allows; one more is refused.
    let max = outbox_store::MAX_LIST_LIMIT;
    let (seen, pages) = every_page(&s, "", max).await;
    assert_eq!(seen.len(), MANY, "{pages} pages");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "every id once, in increasing order");
    assert_eq!(seen, all);
    assert!((MANY / max..=MANY / max + 1).contains(&pages), "{pages} pages");
    let (code, _) =
        json(&s, Method::GET, &format!("/api/v1/stores/main/messages?limit={}", max + 1), Some(READ)).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);

    // Filtered searches, each over many pages, against the same condition in SQL.
    let (from, to) = (20_000, 30_000);
    let range = format!("created_after={}&created_before={}", api_instant(from), api_instant(to));
    let in_range =
        format!("created_at >= {} AND created_at < {}", sql_instant(&outbox, from), sql_instant(&outbox, to));
    let searches = [
        (
            "topic=order.paid&status=failed".to_owned(),
            "topic = 'order.paid' AND status = 'failed'".to_owned(),
            100,
        ),
        (
            format!("error={}", query_value("100% for tenant_7")),
            "last_error = '[broker] quota at 100% for tenant_7'".to_owned(),
            100,
        ),
        (
            format!("error={}", query_value("HTTP 400")),
            "last_error = '[broker] HTTP 400: schema mismatch'".to_owned(),
            max,
        ),
        (
            format!("status=failed&error={}", query_value("timed out")),
            "status = 'failed' AND last_error LIKE '%timed out%'".to_owned(),
            100,
        ),
        (range.clone(), in_range.clone(), max),
        (
            format!("{range}&status=pending&topic=stock"),
            format!("{in_range} AND status = 'pending' AND topic = 'stock'"),
            50,
        ),
        ("key=k7".to_owned(), "msg_key = 'k7'".to_owned(), 50),
        ("biz_type=order".to_owned(), "biz_type = 'order'".to_owned(), max),
        (
            "biz_type=invoice&biz_key=inv15".to_owned(),
            "biz_type = 'invoice' AND biz_key = 'inv15'".to_owned(),
            100,
        ),
    ];
    for (query, condition, limit) in &searches {
        let want = ids_where(&outbox, condition).await;
        assert!(!want.is_empty(), "{condition} matches nothing");
        let (got, pages) = every_page(&s, query, *limit).await;
        assert_eq!(got.len(), want.len(), "{query}: {pages} pages");
        assert_eq!(got, want, "{query}");
        let fewest = want.len().div_ceil(*limit);
        assert!((fewest..=want.len() / limit + 1).contains(&pages), "{query}: {pages} pages");
    }
    // What the searches above stand for: many pages each, the bounds and the escapes honoured.
    assert_eq!(ids_where(&outbox, &in_range).await.len(), 10_000, "one message per second");
    let lookalikes = ids_where(&outbox, "last_error = '[broker] quota at 1000 for tenant07'").await;
    assert!(!lookalikes.is_empty(), "`%` and `_` taken as wildcards would find these too");

    // A page near the end, without and with filters, is answered like the first.
    let after = all[MANY - 50];
    let uri = format!("/api/v1/stores/main/messages?limit={max}&after_id={after}");
    let (code, page) = json(&s, Method::GET, &uri, Some(READ)).await;
    assert_eq!(code, StatusCode::OK, "{page}");
    let got: Vec<i64> =
        page["messages"].as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(got, all[MANY - 49..], "the 49 last messages");
    assert!(page["next_after_id"].is_null(), "{}", page["next_after_id"]);
    let failed = ids_where(&outbox, "status = 'failed'").await;
    let uri =
        format!("/api/v1/stores/main/messages?status=failed&limit=2&after_id={}", failed[failed.len() - 4]);
    let (code, page) = json(&s, Method::GET, &uri, Some(READ)).await;
    assert_eq!(code, StatusCode::OK, "{page}");
    assert_eq!(page["messages"][0]["id"].as_i64(), Some(failed[failed.len() - 3]));
    assert_eq!(page["next_after_id"].as_i64(), Some(failed[failed.len() - 2]));
    let (code, detail) =
        json(&s, Method::GET, &format!("/api/v1/stores/main/messages/{}", all[MANY - 1]), Some(READ)).await;
    assert_eq!((code, detail["message"]["id"].as_i64()), (StatusCode::OK, Some(all[MANY - 1])));
}

/// One test per row: the scenario runs on a migrated outbox in a fresh database of that server
/// (`outbox_testkit::fresh_pg` / `fresh_mysql`), dropped after.
macro_rules! on_fresh_databases {
    ($($test:ident: $fresh:ident, $dialect:ident => $scenario:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let db = outbox_testkit::$fresh().await;
            let outbox = AnyOutbox::$dialect(Outbox::new(db.pool.clone()));
            outbox.migrate().await.unwrap();
            $scenario(outbox).await;
            db.drop_db().await;
        }
    )*};
}

on_fresh_databases! {
    postgres: fresh_pg, Postgres => the_api_searches_pages_shows_and_acts;
    mariadb: fresh_mysql, MySql => the_api_searches_pages_shows_and_acts;
    failure_groups_on_postgres: fresh_pg, Postgres => failures_are_grouped_and_acted_on_in_bulk;
    failure_groups_on_mariadb: fresh_mysql, MySql => failures_are_grouped_and_acted_on_in_bulk;
    a_hundred_thousand_on_postgres: fresh_pg, Postgres => a_hundred_thousand_messages_are_searched_and_paged;
    a_hundred_thousand_on_mariadb: fresh_mysql, MySql => a_hundred_thousand_messages_are_searched_and_paged;
}
