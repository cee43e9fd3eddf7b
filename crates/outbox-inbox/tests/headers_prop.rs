//! Property tests of the transport header helpers: whatever a broker hands the consumer
//! (arbitrary MQTT payloads, arbitrary Redis stream entries), reading it never panics, and
//! an accepted message always has a non-blank id.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;

use outbox_inbox::{from_mqtt_envelope, from_redis_stream};
use proptest::prelude::*;

fn redis_value() -> impl Strategy<Value = redis::Value> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40).prop_map(redis::Value::BulkString),
        ".{0,20}".prop_map(redis::Value::SimpleString),
        any::<i64>().prop_map(redis::Value::Int),
        Just(redis::Value::Nil),
        Just(redis::Value::Okay),
        prop::collection::vec(any::<i64>().prop_map(redis::Value::Int), 0..3).prop_map(redis::Value::Array),
    ]
}

fn field() -> impl Strategy<Value = String> {
    prop_oneof![Just("id".to_owned()), Just("payload".to_owned()), "h:.{0,10}", ".{0,10}"]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_mqtt_payloads_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(m) = from_mqtt_envelope(&bytes) {
            prop_assert!(!m.id.trim().is_empty());
        }
    }

    #[test]
    fn mqtt_envelope_like_json_never_panics(
        id in prop_oneof![Just("null".to_owned()), Just("\"\"".to_owned()), Just("\" \"".to_owned()),
                          any::<i64>().prop_map(|n| n.to_string()), "\"[a-z0-9]{0,6}\"".prop_map(|s| s),
                          Just("[1]".to_owned()), Just("{}".to_owned())],
        headers in prop_oneof![Just("{}".to_owned()), Just("[]".to_owned()), Just("{\"a\":1}".to_owned()),
                               Just("{\"outbox-message-id\":\"7\"}".to_owned()), Just("null".to_owned())],
        payload in prop_oneof![Just("\"x\"".to_owned()), Just("1".to_owned()), Just("null".to_owned())],
    ) {
        let text = format!("{{\"id\":{id},\"headers\":{headers},\"payload\":{payload}}}");
        if let Ok(m) = from_mqtt_envelope(text.as_bytes()) {
            prop_assert!(!m.id.trim().is_empty(), "{text}");
        }
    }

    #[test]
    fn arbitrary_redis_entries_never_panic(map in prop::collection::hash_map(field(), redis_value(), 0..8)) {
        let entry = redis::streams::StreamId { id: "1-1".into(), map: map.into_iter().collect::<HashMap<_, _>>() };
        if let Ok(m) = from_redis_stream(&entry) {
            prop_assert!(!m.id.trim().is_empty());
            prop_assert!(entry.map.contains_key("payload"));
        }
    }
}
