//! Property tests of header decoding (`decode_headers`, which reads the `headers` column a
//! foreign application may have written): it never panics, accepts exactly the JSON objects,
//! round-trips every string map, and keeps non-string values as their JSON text.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;

use outbox_core::decode_headers;
use proptest::prelude::*;

fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| serde_json::json!(n)),
        // Floats that print exactly (serde_json's default parser may change the last digit of others).
        (-100_000i32..100_000).prop_map(|n| serde_json::json!(f64::from(n) / 8.0)),
        ".{0,20}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(".{0,12}", inner, 0..8)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_text_never_panics_and_only_objects_pass(text in ".{0,200}") {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(&text);
        match decode_headers(&text) {
            Ok(_) => prop_assert!(matches!(parsed, Ok(serde_json::Value::Object(_)))),
            Err(e) => {
                prop_assert!(!matches!(parsed, Ok(serde_json::Value::Object(_))), "{text:?}: {e}");
                prop_assert!(e.contains("JSON object") || e.contains("not valid JSON"), "{e}");
            }
        }
    }

    #[test]
    fn arbitrary_bytes_as_lossy_text_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode_headers(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn string_maps_round_trip(map in prop::collection::btree_map(".{0,30}", ".{0,60}", 0..40)) {
        let text = serde_json::to_string(&map).unwrap();
        prop_assert_eq!(decode_headers(&text).unwrap(), map);
    }

    #[test]
    fn any_json_value_decodes_iff_it_is_an_object(v in json()) {
        let text = v.to_string();
        match (&v, decode_headers(&text)) {
            (serde_json::Value::Object(map), Ok(headers)) => {
                prop_assert_eq!(headers.len(), map.len());
                for (k, value) in map {
                    let expected = match value {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    prop_assert_eq!(&headers[k], &expected);
                }
            }
            (serde_json::Value::Object(_), Err(e)) => prop_assert!(false, "object refused: {e}"),
            (_, Ok(h)) => prop_assert!(false, "non-object accepted: {text} -> {h:?}"),
            (_, Err(_)) => {}
        }
    }

    #[test]
    fn truncated_objects_are_refused_not_misread(map in prop::collection::btree_map("[a-z]{1,8}", "[a-z]{0,8}", 1..10), cut in 1usize..40) {
        let text = serde_json::to_string(&map).unwrap();
        let cut = cut.min(text.len() - 1);
        prop_assert!(decode_headers(&text[..cut]).is_err());
        let _: BTreeMap<String, String> = decode_headers(&text).unwrap();
    }
}
