use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use outbox_core::ack::sign;
use outbox_store::{Claims, DeliveryWrite, NewMessage, Outbox, Settlement, Status};
use tower::ServiceExt;

use super::*;

const SECRET: &[u8] = b"endpoint-test-secret-0123456789";

async fn setup() -> (Router, MessageId, std::path::PathBuf) {
    let path =
        std::env::temp_dir().join(format!("outbox-ack-endpoint-{}-{}.db", std::process::id(), rand_u32()));
    let url = format!("sqlite:{}", path.display());
    let any = AnyOutbox::connect(&url, 2).await.unwrap();
    any.migrate().await.unwrap();
    let AnyOutbox::Sqlite(outbox) = any.clone() else { panic!("sqlite") };
    let id = outbox.enqueue(&NewMessage::new("order.paid", "x")).await.unwrap().id;
    awaiting_ack(&outbox, id).await;
    let stores = HashMap::from([("shop".to_owned(), any)]);
    (
        router(AckState::new(stores, Arc::from(SECRET.to_vec().into_boxed_slice()), &AckLimits::default())),
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
    assert_eq!(post(&app, &format!("/v1/ack/eu/{id}/crm"), Some(&good), "").await.0, StatusCode::NOT_FOUND);
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
    let get = app.clone().oneshot(Request::builder().uri(&uri).body(Body::empty()).unwrap()).await.unwrap();
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
