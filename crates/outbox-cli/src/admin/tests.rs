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
    AdminState::new(stores, dests, tokens)
}

/// Sends one request; returns the status, the content type and the body.
async fn call(
    state: &AdminState,
    method: Method,
    uri: &str,
    token: Option<&str>,
) -> (StatusCode, String, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let resp = router(state.clone()).oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = resp.status();
    let ctype =
        resp.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, ctype, String::from_utf8(body.to_vec()).unwrap())
}

async fn json(state: &AdminState, method: Method, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
    let (status, _, body) = call(state, method, uri, token).await;
    (status, serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: not JSON ({e}): {body}")))
}

/// 5 messages: ids[1] and ids[3] failed by hand.
async fn seed(outbox: &AnyOutbox) -> Vec<i64> {
    let mut ids = Vec::new();
    for i in 0..5 {
        let msg = NewMessage::new("order.paid", format!("{{\"n\":{i}}}"));
        let id = match outbox {
            AnyOutbox::Postgres(o) => o.enqueue(&msg).await,
            AnyOutbox::MySql(o) => o.enqueue(&msg).await,
            _ => unreachable!("PostgreSQL and MariaDB only"),
        };
        ids.push(id.unwrap().id.0);
    }
    let fail = format!("UPDATE outbox_message SET status = 'failed' WHERE id IN ({}, {})", ids[1], ids[3]);
    let done = match outbox {
        AnyOutbox::Postgres(o) => sqlx::query(&fail).execute(o.pool()).await.map(|r| r.rows_affected()),
        AnyOutbox::MySql(o) => sqlx::query(&fail).execute(o.pool()).await.map(|r| r.rows_affected()),
        _ => unreachable!("PostgreSQL and MariaDB only"),
    };
    assert_eq!(done.unwrap(), 2);
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

    // Readiness follows the destination.
    let (code, _) = json(&s, Method::GET, "/readyz", None).await;
    assert_eq!(code, StatusCode::OK);
    t.set_down(true);
    let (code, p) = json(&s, Method::GET, "/readyz", None).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(p["detail"], "not ready: destination broker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    let db = outbox_testkit::fresh_pg().await;
    let outbox = AnyOutbox::Postgres(Outbox::new(db.pool.clone()));
    outbox.migrate().await.unwrap();
    the_api_searches_pages_shows_and_acts(outbox).await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb() {
    let db = outbox_testkit::fresh_mysql().await;
    let outbox = AnyOutbox::MySql(Outbox::new(db.pool.clone()));
    outbox.migrate().await.unwrap();
    the_api_searches_pages_shows_and_acts(outbox).await;
    db.drop_db().await;
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
