//! The inbox's automatic ACK: the request it sends to the relay's ACK endpoint, against a real
//! local HTTP server (the endpoint itself is tested in outbox-cli's ack_server tests).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use outbox_core::header;
use outbox_inbox::{AckClient, AckClientError, AckSent, InboxMessage};

type Seen = Arc<Mutex<Vec<(String, String, String, String)>>>;

async fn endpoint(
    State(seen): State<Seen>,
    Path((store, id, dest)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> StatusCode {
    let token = headers.get("outbox-ack-token").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    seen.lock().unwrap().push((store, id, dest, token.clone()));
    if token == "refuse-me" {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::OK
    }
}

async fn server() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().route("/v1/ack/{store}/{id}/{dest}", post(endpoint)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn message(token: &str) -> InboxMessage {
    let mut m = InboxMessage::new("shop:42", b"x".to_vec());
    m.headers.insert(header::MESSAGE_ID.into(), "42".into());
    m.headers.insert(header::ACK_TOKEN.into(), token.into());
    m.headers.insert(header::ACK_DESTINATION.into(), "crm eu".into());
    m.headers.insert(header::ACK_STORE.into(), "shop".into());
    m
}

#[tokio::test]
async fn acks_the_delivery_the_message_names() {
    let (url, seen) = server().await;
    let client = AckClient::new(format!("{url}/"));
    assert_eq!(client.ack(&message("t0k3n")).await.unwrap(), AckSent::Acked);
    let got = seen.lock().unwrap().clone();
    assert_eq!(got, vec![("shop".into(), "42".into(), "crm eu".into(), "t0k3n".into())]);

    let refused = client.ack(&message("refuse-me")).await.unwrap_err();
    assert!(matches!(refused, AckClientError::Rejected { status: 403 }), "{refused:?}");

    let plain = InboxMessage::new("7", b"x".to_vec());
    assert_eq!(client.ack(&plain).await.unwrap(), AckSent::NotRequired, "no token, nothing to confirm");

    let down = AckClient::new("http://127.0.0.1:1");
    assert!(matches!(down.ack(&message("t")).await.unwrap_err(), AckClientError::Unavailable(_)));
}
