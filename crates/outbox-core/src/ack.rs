//! ACK tokens: an HMAC-SHA256 bound to one delivery (store, message id, destination) with an
//! expiry, so a consumer can confirm that delivery and nothing else. Token format:
//! `<expires unix seconds>.<hex HMAC-SHA256(secret, "<store>.<message id>.<destination>.<expires>")>`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::message::MessageId;

type HmacSha256 = Hmac<Sha256>;

/// Why a token was refused. The HTTP layer logs it and answers a generic 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AckTokenError {
    /// Not `<digits>.<64 hex>`.
    #[error("malformed ACK token")]
    Malformed,
    /// Its expiry has passed.
    #[error("expired ACK token")]
    Expired,
    /// The HMAC does not match this delivery (forged, or for another delivery).
    #[error("ACK token does not match this delivery")]
    Invalid,
}

fn mac(secret: &[u8], store: &str, id: MessageId, destination: &str, expires: i64) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC-SHA256 takes keys of any length"),
    };
    mac.update(format!("{store}.{id}.{destination}.{expires}").as_bytes());
    mac
}

/// The token for one delivery, valid until `expires_unix`.
pub fn sign(secret: &[u8], store: &str, id: MessageId, destination: &str, expires_unix: i64) -> String {
    let tag = mac(secret, store, id, destination, expires_unix).finalize().into_bytes();
    format!("{expires_unix}.{}", hex::encode(tag))
}

/// Checks `token` for this delivery at `now_unix` (constant-time comparison).
pub fn verify(
    secret: &[u8],
    token: &str,
    store: &str,
    id: MessageId,
    destination: &str,
    now_unix: i64,
) -> Result<(), AckTokenError> {
    let (expires, tag) = token.trim().split_once('.').ok_or(AckTokenError::Malformed)?;
    if expires.is_empty() || expires.len() > 12 || !expires.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AckTokenError::Malformed);
    }
    let expires: i64 = expires.parse().map_err(|_| AckTokenError::Malformed)?;
    let tag = hex::decode(tag).map_err(|_| AckTokenError::Malformed)?;
    if tag.len() != 32 {
        return Err(AckTokenError::Malformed);
    }
    mac(secret, store, id, destination, expires).verify_slice(&tag).map_err(|_| AckTokenError::Invalid)?;
    if now_unix > expires {
        return Err(AckTokenError::Expired);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &[u8] = b"an-ack-secret-of-some-length";

    #[test]
    fn a_token_confirms_its_delivery_only() {
        let t = sign(S, "shop", MessageId(42), "crm", 1_000);
        assert_eq!(verify(S, &t, "shop", MessageId(42), "crm", 999), Ok(()));
        assert_eq!(verify(S, &t, "shop", MessageId(43), "crm", 999), Err(AckTokenError::Invalid));
        assert_eq!(verify(S, &t, "shop", MessageId(42), "erp", 999), Err(AckTokenError::Invalid));
        assert_eq!(verify(S, &t, "eu", MessageId(42), "crm", 999), Err(AckTokenError::Invalid));
        assert_eq!(
            verify(b"other-secret", &t, "shop", MessageId(42), "crm", 999),
            Err(AckTokenError::Invalid)
        );
        assert_eq!(verify(S, &t, "shop", MessageId(42), "crm", 1_001), Err(AckTokenError::Expired));
    }

    #[test]
    fn tampering_is_detected() {
        let t = sign(S, "shop", MessageId(1), "crm", 1_000);
        let later = t.replacen("1000.", "9999.", 1);
        assert_eq!(verify(S, &later, "shop", MessageId(1), "crm", 0), Err(AckTokenError::Invalid));
        for bad in ["", "x", "1000", "1000.zz", "abc.00", "1000.00"] {
            assert_eq!(
                verify(S, bad, "shop", MessageId(1), "crm", 0),
                Err(AckTokenError::Malformed),
                "{bad}"
            );
        }
    }
}
