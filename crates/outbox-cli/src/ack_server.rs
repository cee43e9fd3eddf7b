//! The ACK endpoint of ACK mode: `POST /v1/ack/{store}/{message_id}/{destination}` with the
//! delivery's token in the `Outbox-Ack-Token` header (or a JSON body `{"token": "..."}`).
//!
//! Answers: 200 `{"status":"acked","message_done":bool}` or `{"status":"already_acked"}`;
//! 400 malformed request; 403 token refused (the reason is logged, not returned); 404 unknown
//! store or delivery; 409 the delivery is not awaiting an ACK; 413 body over 4 KiB; 500 store
//! error; 408 when the body does not arrive within 10 s. A declared `Content-Length` over the
//! limit is refused before any body is read. Bound to loopback by default; every ACK needs a
//! valid token whatever the address.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use outbox_core::MessageId;
use outbox_relay::{acknowledge, AckError};
use outbox_store::{AckOutcome, AnyOutbox};
use serde_json::json;

/// Largest ACK request body (a JSON `{"token": "..."}`).
const MAX_BODY: usize = 4096;
/// Longest time a client may take to send the body.
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the endpoint needs: the stores by name and the token secret.
#[derive(Clone)]
pub(crate) struct AckState {
    pub(crate) stores: Arc<HashMap<String, AnyOutbox>>,
    pub(crate) secret: Arc<[u8]>,
}

/// The router (tested without a server through `tower::ServiceExt::oneshot`).
pub(crate) fn router(state: AckState) -> Router {
    Router::new()
        .route("/v1/ack/{store}/{message_id}/{destination}", post(ack))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

fn error(code: StatusCode, message: &str) -> Response {
    (code, Json(json!({ "error": message }))).into_response()
}

async fn ack(
    State(state): State<AckState>,
    Path((store, message_id, destination)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // A huge declared length is refused at once, not after waiting for a body that never comes.
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
    if declared.is_some_and(|v| v.trim().parse::<u64>().map_or(true, |n| n > MAX_BODY as u64)) {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "body over 4 KiB");
    }
    let body = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(b)) => b,
        Ok(Err(_)) => return error(StatusCode::PAYLOAD_TOO_LARGE, "body over 4 KiB"),
        Err(_) => return error(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time"),
    };
    let Ok(id) = message_id.parse::<i64>() else {
        return error(StatusCode::BAD_REQUEST, "message id must be an integer");
    };
    let token = match headers.get("outbox-ack-token") {
        Some(v) => match v.to_str() {
            Ok(t) => t.to_owned(),
            Err(_) => return error(StatusCode::BAD_REQUEST, "Outbox-Ack-Token is not valid text"),
        },
        None if body.is_empty() => return error(StatusCode::BAD_REQUEST, "missing Outbox-Ack-Token header"),
        None => match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) => match v.get("token").and_then(|t| t.as_str()) {
                Some(t) => t.to_owned(),
                None => return error(StatusCode::BAD_REQUEST, "body must be {\"token\": \"...\"}"),
            },
            Err(_) => return error(StatusCode::BAD_REQUEST, "body must be JSON {\"token\": \"...\"}"),
        },
    };
    let Some(outbox) = state.stores.get(&store) else {
        return error(StatusCode::NOT_FOUND, "unknown store");
    };
    match acknowledge(outbox, &state.secret, &store, MessageId(id), &destination, &token).await {
        Ok(AckOutcome::Acked { message_done }) => {
            (StatusCode::OK, Json(json!({ "status": "acked", "message_done": message_done }))).into_response()
        }
        Ok(AckOutcome::AlreadyAcked) => {
            (StatusCode::OK, Json(json!({ "status": "already_acked" }))).into_response()
        }
        Ok(AckOutcome::NotAwaiting { status }) => {
            error(StatusCode::CONFLICT, &format!("the delivery is {status}, not awaiting an ACK"))
        }
        Ok(AckOutcome::Unknown) => error(StatusCode::NOT_FOUND, "unknown delivery"),
        Err(AckError::Token(reason)) => {
            tracing::warn!(store = %store, message_id = id, destination = %destination, %reason, "ACK refused");
            error(StatusCode::FORBIDDEN, "ACK refused")
        }
        Err(e) => {
            tracing::error!(error = %e, "ACK could not be recorded");
            error(StatusCode::INTERNAL_SERVER_ERROR, "ACK could not be recorded; retry")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::Request;
    use outbox_core::ack::sign;
    use outbox_store::{DeliveryWrite, NewMessage, Outbox, RelayStore, Settlement, Status};
    use tower::ServiceExt;

    use super::*;

    const SECRET: &[u8] = b"endpoint-test-secret-0123456789";

    async fn setup() -> (Router, MessageId, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "outbox-ack-endpoint-{}-{}.db",
            std::process::id(),
            rand_u32()
        ));
        let url = format!("sqlite:{}", path.display());
        let any = AnyOutbox::connect(&url, 2).await.unwrap();
        any.migrate().await.unwrap();
        let AnyOutbox::Sqlite(outbox) = any.clone() else { panic!("sqlite") };
        let id = outbox.enqueue(&NewMessage::new("order.paid", "x")).await.unwrap().id;
        awaiting_ack(&outbox, id).await;
        let stores = HashMap::from([("shop".to_owned(), any)]);
        (
            router(AckState {
                stores: Arc::new(stores),
                secret: Arc::from(SECRET.to_vec().into_boxed_slice()),
            }),
            id,
            path,
        )
    }

    fn rand_u32() -> u32 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
    }

    async fn awaiting_ack(outbox: &Outbox<sqlx::Sqlite>, id: MessageId) {
        let claimed = outbox.claim("r1", 10, Duration::from_secs(30)).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let s = Settlement {
            sent: vec![id],
            messages: vec![],
            deliveries: vec![DeliveryWrite {
                message_id: id,
                destination: "crm".into(),
                status: Status::Sent,
                attempts: 0,
                retry_in: Duration::ZERO,
                last_error: None,
                attempted: true,
                ack_timeout: Some(Duration::from_secs(60)),
            }],
        };
        outbox.settle("r1", &s).await.unwrap();
    }

    async fn post(app: &Router, uri: &str, token: Option<&str>, body: &str) -> (StatusCode, String) {
        let mut req = Request::builder().method("POST").uri(uri);
        if let Some(t) = token {
            req = req.header("outbox-ack-token", t);
        }
        let resp = app.clone().oneshot(req.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn the_ack_endpoint_confirms_once_and_refuses_everything_else() {
        let (app, id, path) = setup().await;
        let exp = 4_000_000_000; // 2096
        let good = sign(SECRET, "shop", id, "crm", exp);
        let uri = format!("/v1/ack/shop/{id}/crm");

        let forged = sign(b"wrong-secret-wrong-secret", "shop", id, "crm", exp);
        assert_eq!(post(&app, &uri, Some(&forged), "").await.0, StatusCode::FORBIDDEN);
        let (code, body) = post(&app, &uri, Some("not-a-token"), "").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert!(!body.contains("malformed"), "the reason is logged, not returned: {body}");
        assert_eq!(post(&app, &uri, None, "").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(post(&app, &uri, None, "\u{0}\u{1}garbage").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(post(&app, "/v1/ack/shop/abc/crm", Some(&good), "").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(
            post(&app, &format!("/v1/ack/eu/{id}/crm"), Some(&good), "").await.0,
            StatusCode::NOT_FOUND
        );
        let other = sign(SECRET, "shop", id, "erp", exp);
        assert_eq!(
            post(&app, &format!("/v1/ack/shop/{id}/erp"), Some(&other), "").await.0,
            StatusCode::NOT_FOUND
        );
        let huge = "x".repeat(100_000);
        assert_eq!(post(&app, &uri, None, &huge).await.0, StatusCode::PAYLOAD_TOO_LARGE);
        // A declared length over the limit is refused without waiting for the body.
        let lying = Request::builder()
            .method("POST")
            .uri(&uri)
            .header("content-length", "100000000000")
            .body(Body::from("{"))
            .unwrap();
        let resp =
            tokio::time::timeout(Duration::from_secs(5), app.clone().oneshot(lying)).await.unwrap().unwrap();
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let get =
            app.clone().oneshot(Request::builder().uri(&uri).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);

        let (code, body) = post(&app, &uri, None, &format!(r#"{{"token":"{good}"}}"#)).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert!(body.contains("\"acked\"") && body.contains("\"message_done\":true"), "{body}");
        let (code, body) = post(&app, &uri, Some(&good), "").await;
        assert_eq!((code, body.contains("already_acked")), (StatusCode::OK, true), "{body}");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
