//! The dashboard: three static files compiled into the binary (`ui/`), served without a token
//! (they hold no data; the page asks for one and calls `/api/v1` with it). A strict Content
//! Security Policy allows only this origin's script and style, so data shown by the page can
//! never run as code; the script writes every value as text.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};

const INDEX: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub(super) async fn root() -> Redirect {
    Redirect::to("/ui/")
}

pub(super) async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

pub(super) async fn script() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

pub(super) async fn style() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}
