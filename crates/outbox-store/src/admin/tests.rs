use std::time::Duration;

use outbox_core::{Error, MessageId, Status};

use super::*;

#[test]
fn limits_are_checked() {
    assert!(ListFilter::default().validate().is_ok());
    for limit in [0, MAX_LIST_LIMIT + 1] {
        let err = ListFilter { limit, ..ListFilter::default() }.validate().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "limit", .. }), "{err}");
        assert!(err.to_string().contains("1 to 1000"), "{err}");
    }
    assert!(check_batch(0).is_err() && check_batch(MAX_BATCH + 1).is_err());
    assert_eq!(check_batch(500).unwrap(), 500);
    assert!(check_actor("").is_err() && check_actor(&"x".repeat(129)).is_err());
    assert!(check_age(MAX_PURGE_AGE + Duration::from_secs(1)).is_err());
    assert_eq!(check_age(Duration::from_millis(1500)).unwrap(), 1_500_000);
    let f = ListFilter { status: Some(Status::Sent), ..ListFilter::default() };
    assert!(bulk_statuses(BulkAction::Retry, &f).is_err());
    let e = bulk_statuses(BulkAction::Cancel, &f).unwrap_err().to_string();
    assert!(e.contains("pending or failed messages only, not sent"), "{e}");
    let f = ListFilter { status: Some(Status::Pending), ..ListFilter::default() };
    assert_eq!(bulk_statuses(BulkAction::Cancel, &f).unwrap(), vec![Status::Pending]);
    assert_eq!(bulk_statuses(BulkAction::Retry, &ListFilter::default()).unwrap(), vec![Status::Failed]);
    assert!(check_ids(&[]).is_err() && check_ids(&[MessageId(0)]).is_err());
    assert!(check_ids(&vec![MessageId(1); MAX_BATCH + 1]).is_err());
    assert!(check_scan(0).is_err() && check_scan(MAX_FAILURE_SCAN + 1).is_err());
}

#[test]
fn stats_fill_every_status_and_serialize_the_age_in_seconds() {
    let s = Stats::from_counts(vec![(Status::Failed, 2), (Status::Sent, 5)], vec![], vec![], Some(1500));
    assert_eq!(s.by_status.len(), Status::ALL.len());
    assert_eq!((s.total, s.failed, s.count(Status::Pending)), (7, 2, 0));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["oldest_pending_age_secs"], 1.5);
    let back: Stats = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
}
