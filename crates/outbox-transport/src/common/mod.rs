//! What the brokers' modules share, written once, so that each `<broker>/` folder keeps only
//! what is its own: the rules the configurations check ([`config`]), how a transport that
//! fails to connect says so ([`connect`]), what every transport checks on each envelope before
//! the wire and how every reason is written ([`validate`]), the bookkeeping of one `publish`
//! call ([`batch`]), and, for the unit tests, how outcomes and configuration errors are
//! inspected (`testing`), and the TLS files a destination names ([`tls`]).

pub(crate) mod batch;
pub(crate) mod config;
pub(crate) mod connect;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod tls;
pub(crate) mod validate;
