//! How what rumqttc reports maps onto [`Outcome`]s (the table is in the module documentation
//! of [`crate::mqtt`]).

use std::time::Duration;

use outbox_core::Outcome;
use rumqttc::{ClientError, ConnectReturnCode, ConnectionError, StateError};

/// What a message awaiting its PUBACK is told when the connection fails: nearly always
/// `Unavailable` (the broker or the network is down; MQTT 3.1.1 has no per-message refusal).
pub(crate) fn connection_error(e: &ConnectionError) -> Outcome {
    match e {
        ConnectionError::MqttState(StateError::Deserialization(rumqttc::Error::OutgoingPacketTooLarge {
            pkt_size,
            max,
        })) => oversized(*pkt_size, *max),
        other => Outcome::unavailable(format!("MQTT connection lost before the PUBACK: {}", describe(other))),
    }
}

/// A readable reason for a connection failure (no secrets: rumqttc's errors hold none).
pub(crate) fn describe(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ConnectionRefused(code) => {
            format!("the broker refused the connection: {}", refusal(*code))
        }
        ConnectionError::NetworkTimeout => "no CONNACK before the connect timeout".into(),
        // The whole chain: a TLS failure's cause may be in a source.
        other => outbox_core::tls::chain(other),
    }
}

fn refusal(code: ConnectReturnCode) -> &'static str {
    match code {
        ConnectReturnCode::Success => "success",
        ConnectReturnCode::RefusedProtocolVersion => {
            "unsupported protocol version (the broker needs MQTT 3.1.1)"
        }
        ConnectReturnCode::BadClientId => "client identifier rejected",
        ConnectReturnCode::ServiceUnavailable => "service unavailable",
        ConnectReturnCode::BadUserNamePassword => "bad user name or password",
        ConnectReturnCode::NotAuthorized => "not authorized",
    }
}

/// The request could not be handed to the event loop (its queue is full, or it stopped).
pub(crate) fn client_error(e: &ClientError) -> Outcome {
    match e {
        ClientError::TryRequest(_) => {
            Outcome::unavailable("the MQTT client's request queue is full or closed; try again later")
        }
        ClientError::Request(_) => Outcome::unavailable("the MQTT client's event loop has stopped"),
    }
}

/// Not connected: the event loop is reconnecting.
pub(crate) fn not_connected(address: &str, last_error: Option<&str>) -> Outcome {
    Outcome::unavailable(not_connected_reason(address, last_error))
}

/// Why nothing can be published now (also what `health` answers).
pub(crate) fn not_connected_reason(address: &str, last_error: Option<&str>) -> String {
    match last_error {
        Some(e) => format!("not connected to the MQTT broker at {address}: {e}"),
        None => format!("not connected to the MQTT broker at {address}"),
    }
}

/// No PUBACK within the time limit.
pub(crate) fn no_puback(timeout: Duration, topic: &str) -> Outcome {
    Outcome::unavailable(format!(
        "no PUBACK for the publish to {} within {timeout:?}",
        crate::validate::quote(topic)
    ))
}

/// The PUBLISH packet would exceed the configured limit.
pub(crate) fn oversized(size: usize, limit: usize) -> Outcome {
    Outcome::permanent(format!(
        "MQTT packet would be {size} bytes, larger than the max_packet_bytes of {limit} bytes"
    ))
}

/// The envelope's topic does not make a valid MQTT topic: refused before sending (a broker
/// closes the connection on it, which would look like an outage).
pub(crate) fn invalid_topic(message_topic: &str, mqtt_topic: &str, why: &str) -> Outcome {
    use crate::validate::{quote, refuse};
    if message_topic == mqtt_topic {
        refuse(format!("topic {} is not a valid MQTT topic: it {why}", quote(mqtt_topic)))
    } else {
        refuse(format!(
            "topic {} makes the MQTT topic {}, which {why}",
            quote(message_topic),
            quote(mqtt_topic)
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use outbox_core::FailureKind;

    use super::*;
    use crate::common::testing::kind;

    #[test]
    fn connection_errors() {
        let io = ConnectionError::Io(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
        assert_eq!(kind(&connection_error(&io)), FailureKind::Unavailable);
        assert_eq!(kind(&connection_error(&ConnectionError::NetworkTimeout)), FailureKind::Unavailable);
        let aborted = ConnectionError::MqttState(StateError::ConnectionAborted);
        assert_eq!(kind(&connection_error(&aborted)), FailureKind::Unavailable);
        let refused = ConnectionError::ConnectionRefused(ConnectReturnCode::NotAuthorized);
        assert_eq!(kind(&connection_error(&refused)), FailureKind::Unavailable);
        assert!(describe(&refused).contains("not authorized"));
        let big =
            ConnectionError::MqttState(StateError::Deserialization(rumqttc::Error::OutgoingPacketTooLarge {
                pkt_size: 20,
                max: 10,
            }));
        assert_eq!(kind(&connection_error(&big)), FailureKind::Permanent);
    }

    #[test]
    fn client_and_local_errors() {
        let req = || rumqttc::Request::PingReq(rumqttc::PingReq);
        assert_eq!(kind(&client_error(&ClientError::TryRequest(req()))), FailureKind::Unavailable);
        assert_eq!(kind(&client_error(&ClientError::Request(req()))), FailureKind::Unavailable);
        assert_eq!(kind(&not_connected("mqtt://h", Some("refused"))), FailureKind::Unavailable);
        assert_eq!(kind(&no_puback(Duration::from_secs(1), "a/b")), FailureKind::Unavailable);
        assert_eq!(kind(&oversized(20, 10)), FailureKind::Permanent);
        assert!(format!("{:?}", oversized(20, 10)).contains("max_packet_bytes of 10 bytes"));
        let o = invalid_topic("sec.a\nb", "sec/a\nb", "contains the control character U+000A");
        assert_eq!(kind(&o), FailureKind::Permanent);
        let Outcome::Failed { reason, .. } = &o else { unreachable!() };
        assert!(reason.starts_with("topic \"sec.a\\nb\" makes the MQTT topic \"sec/a\\nb\""), "{reason}");
        assert!(!reason.contains('\n'));
    }
}
