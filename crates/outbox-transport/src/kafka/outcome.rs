//! How librdkafka's errors map onto [`Outcome`]s (the table is in the module documentation of
//! [`crate::kafka`]).

use outbox_core::Outcome;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};

use crate::validate::quote;

/// Whether `e` means the idempotent producer's identity is no longer accepted (fenced, unknown
/// to a restarted broker, out of sequence): only a new producer can publish again.
pub(crate) fn needs_rebuild(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::Fatal
                | C::ProducerFenced
                | C::InvalidProducerEpoch
                | C::OutOfOrderSequenceNumber
                | C::UnknownProducerId
                | C::InvalidProducerIdMapping
        )
    )
}

/// The outcome of a failed produce (at enqueue into the producer or in the delivery report).
pub(crate) fn produce_error(e: &KafkaError, topic: &str) -> Outcome {
    let topic = &quote(topic);
    let reason = format!("produce to Kafka topic {topic} failed: {e}");
    let Some(code) = e.rdkafka_error_code() else {
        return Outcome::retryable(reason);
    };
    if needs_rebuild(e) {
        // Not the message's fault: the producer is replaced and the message sent again.
        return Outcome::unavailable(format!("{reason} (the producer is rebuilt)"));
    }
    match code {
        // The same message will never fit or never be accepted.
        C::MessageSizeTooLarge | C::InvalidMessageSize => {
            Outcome::permanent(format!("{reason} (the message is larger than the broker or topic allows)"))
        }
        C::UnknownTopicOrPartition | C::UnknownTopic | C::InvalidTopic | C::UnknownPartition => {
            Outcome::permanent(format!(
                "{reason} (the topic does not exist and the cluster does not create it)"
            ))
        }
        // About this message (its record, its headers, its request).
        C::TopicAuthorizationFailed
        | C::InvalidRecord
        | C::PolicyViolation
        | C::InvalidRequiredAcks
        | C::BadMessage
        | C::InvalidArgument => Outcome::permanent(reason),
        // The cluster, or the partition's leader, cannot take writes right now: not the
        // message's fault, costs no attempt.
        C::MessageTimedOut
        | C::AllBrokersDown
        | C::BrokerTransportFailure
        | C::NetworkException
        | C::RequestTimedOut
        | C::BrokerNotAvailable
        | C::LeaderNotAvailable
        | C::NotLeaderForPartition
        | C::ReplicaNotAvailable
        | C::NotEnoughReplicas
        | C::NotEnoughReplicasAfterAppend
        | C::NotCoordinator
        | C::CoordinatorNotAvailable
        | C::Resolve
        | C::PurgeQueue
        | C::PurgeInflight
        | C::BrokerDestroy
        | C::KafkaStorageError
        | C::ClusterAuthorizationFailed
        | C::SaslAuthenticationFailed
        | C::Authentication
        | C::SSL => Outcome::unavailable(reason),
        // The producer's local queue is full: others are still in flight.
        C::QueueFull => Outcome::unavailable(format!("{reason} (the producer's queue is full)")),
        _ => Outcome::retryable(reason),
    }
}

/// The producer was dropped (rebuilt) before it reported the delivery.
pub(crate) fn cancelled(topic: &str) -> Outcome {
    Outcome::unavailable(format!(
        "the Kafka producer was rebuilt before reporting the delivery to {}; it will be published again",
        quote(topic)
    ))
}

/// No delivery report within the transport's timeout.
pub(crate) fn deadline(timeout: std::time::Duration, topic: &str) -> Outcome {
    Outcome::unavailable(format!(
        "no delivery report from Kafka for topic {} within {timeout:?}",
        quote(topic)
    ))
}

/// The message is over the configured limit.
pub(crate) fn oversized(size: usize, limit: usize) -> Outcome {
    Outcome::permanent(format!(
        "message is {size} bytes (key, value and headers), larger than the Kafka transport's \
         max_message_bytes of {limit} bytes"
    ))
}

/// The topic does not exist on the cluster.
pub(crate) fn unknown_topic(topic: &str, brokers: &str) -> Outcome {
    Outcome::permanent(format!(
        "Kafka topic {} does not exist on {brokers} and the cluster does not create it \
         (create the topic, or route this outbox topic elsewhere; then `outbox retry` the message)",
        quote(topic)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::testing::kind;
    use outbox_core::FailureKind;

    #[test]
    fn classification() {
        for (expected, codes) in [
            (
                FailureKind::Permanent,
                &[
                    C::MessageSizeTooLarge,
                    C::UnknownTopicOrPartition,
                    C::TopicAuthorizationFailed,
                    C::BadMessage,
                    C::InvalidArgument,
                ][..],
            ),
            (
                FailureKind::Unavailable,
                &[
                    C::MessageTimedOut,
                    C::AllBrokersDown,
                    C::NotEnoughReplicas,
                    C::QueueFull,
                    C::Fatal,
                    C::ProducerFenced,
                    C::UnknownProducerId,
                ],
            ),
            (FailureKind::Retryable, &[C::InvalidMessage]),
        ] {
            for &c in codes {
                let o = produce_error(&KafkaError::MessageProduction(c), "t");
                assert_eq!(kind(&o), expected, "{c:?}");
            }
        }
        assert!(needs_rebuild(&KafkaError::MessageProduction(C::OutOfOrderSequenceNumber)));
        assert!(!needs_rebuild(&KafkaError::MessageProduction(C::MessageTimedOut)));
        let long = produce_error(&KafkaError::MessageProduction(C::MessageTimedOut), &"t".repeat(10_000));
        assert!(format!("{long:?}").len() < 400, "the topic is quoted bounded");
        assert_eq!(kind(&oversized(10, 5)), FailureKind::Permanent);
        assert_eq!(kind(&unknown_topic("t", "b:1")), FailureKind::Permanent);
        assert_eq!(kind(&cancelled("t")), FailureKind::Unavailable);
        assert_eq!(kind(&deadline(std::time::Duration::from_secs(1), "t")), FailureKind::Unavailable);
    }
}
