//! Bearer tokens: a read token (every `GET` but the probes) and an admin token (also every
//! action). Without tokens, which only a loopback listener allows, everything is open to the
//! machine's own users. Tokens are compared in constant time and never logged.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;
use super::AdminState;

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    Read,
    Admin,
}

/// The configured tokens.
#[derive(Clone)]
pub(crate) struct Tokens {
    pub(crate) read: String,
    pub(crate) admin: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens { read: <redacted>, admin: <redacted> }")
    }
}

impl Tokens {
    /// The role of a presented token, if any.
    fn role(&self, presented: &[u8]) -> Option<Role> {
        // Both comparisons always run: the time taken says nothing about which matched.
        let admin = constant_time_eq(presented, self.admin.as_bytes());
        let read = constant_time_eq(presented, self.read.as_bytes());
        if admin {
            Some(Role::Admin)
        } else if read {
            Some(Role::Read)
        } else {
            None
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The role a request needs: probes none, reads `Read`, anything else `Admin`.
fn needed(method: &Method, path: &str) -> Option<Role> {
    match path {
        // The probes, and the dashboard's static files (no data; the page asks for a token).
        "/healthz" | "/readyz" | "/" | "/ui/" | "/ui/app.js" | "/ui/app.css" => None,
        _ if method == Method::GET || method == Method::HEAD => Some(Role::Read),
        _ => Some(Role::Admin),
    }
}

/// Refuses a request without the token its route needs: 401 without a valid token, 403 for the
/// read token on an action.
pub(crate) async fn require(State(state): State<AdminState>, req: Request, next: Next) -> Response {
    let Some(tokens) = state.tokens.as_ref() else { return next.run(req).await };
    let Some(need) = needed(req.method(), req.uri().path()) else { return next.run(req).await };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .map(<[u8]>::trim_ascii);
    let Some(presented) = presented else {
        return Problem::new(
            StatusCode::UNAUTHORIZED,
            "a bearer token is required (Authorization: Bearer ...)",
        )
        .into_response();
    };
    match tokens.role(presented) {
        None => Problem::new(StatusCode::UNAUTHORIZED, "the bearer token is not valid").into_response(),
        Some(role) if role < need => {
            Problem::new(StatusCode::FORBIDDEN, "this action needs the admin token; the read token was given")
                .into_response()
        }
        Some(_) => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_by_token_and_route() {
        let t = Tokens { read: "r".repeat(20), admin: "a".repeat(20) };
        assert_eq!(t.role("a".repeat(20).as_bytes()), Some(Role::Admin));
        assert_eq!(t.role("r".repeat(20).as_bytes()), Some(Role::Read));
        assert_eq!(t.role(b"r"), None);
        assert_eq!(t.role(b""), None);
        assert_eq!(needed(&Method::GET, "/healthz"), None);
        assert_eq!(needed(&Method::GET, "/metrics"), Some(Role::Read));
        assert_eq!(needed(&Method::POST, "/api/v1/stores/a/messages/1/retry"), Some(Role::Admin));
        assert!(!format!("{t:?}").contains("rrrr"));
    }
}
