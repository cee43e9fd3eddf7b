//! Redis Streams transport (feature `redis`, client: `redis` with a `ConnectionManager`).
//!
//! **Delivery guarantee.** A message counts as delivered when Redis answered its `XADD` with the
//! new entry's id: it is in the stream, as durable as the server's persistence settings make it
//! (AOF with `appendfsync always`/`everysec`, or replication, is the operator's choice).
//! At-least-once: when a connection breaks after Redis applied an `XADD` but before its reply
//! arrived, the relay publishes the message again and the stream holds it twice; consumers
//! deduplicate on the `id` field (the inbox does). Redis Streams have no broker-side dedupe.
//!
//! **Mapping.** `XADD <stream> [MAXLEN ~ <maxlen>] * payload <body> id <message id>
//! h:<name> <value> ...`:
//! - stream key: [`RedisConfig::stream`], a fixed key or a template where `{topic}` is replaced
//!   by the envelope's topic (default: the topic itself);
//! - field `payload`: the body, unchanged; field `id`: the outbox message id (decimal);
//! - every envelope header (`outbox-message-id`, `outbox-biz-type`, `outbox-biz-key`,
//!   `outbox-topic`, `outbox-key`, `outbox-attempt`, `outbox-created-at`, `traceparent` and the
//!   application's own) as its own field, named with [`RedisConfig::header_prefix`] (`h:`)
//!   before the header name;
//! - the entry id is left to Redis (`*`), so entries of one stream are ordered by arrival.
//!
//! **Batches** are one pipelined round trip (non-transactional: each `XADD` succeeds or fails on
//! its own and gets its own outcome). Messages with the same key keep their order (one
//! connection); one that could not be sent holds back later ones with its key.
//!
//! **Limits.** Payloads over `max_payload_bytes` (8 MiB by default, at most Redis's
//! `proto-max-bulk-len` of 512 MiB, beyond which the server closes the connection) fail
//! permanently without being sent. Keys and field names are binary-safe (a topic with a line
//! break is a valid key) but bounded to 4096 bytes. Each `publish` call is bounded by `timeout`. Redis Cluster redirections are
//! not followed (point the transport at a standalone server, a primary behind Sentinel's
//! address, or a cluster proxy).
//!
//! **TLS.** A `rediss://` URL connects with TLS (rustls). The server's certificate is verified
//! against the system's trust store plus `tls_ca_file`, and must be valid for the URL's host name
//! (the `#insecure` fragment, which would skip that, is refused); `tls_cert_file`/`tls_key_file`
//! present a client certificate (`tls-auth-clients yes` or `optional`). The files with a
//! `redis://` URL are a configuration error saying to use `rediss://`.
//!
//! ```toml
//! url = "rediss://:secret@redis.internal:6380/0"
//! tls_ca_file = "/etc/outbox/redis-ca.pem"
//! tls_cert_file = "/etc/outbox/relay.pem"
//! tls_key_file = "/etc/outbox/relay.key"
//! ```
//!
//! A failed handshake is a connect error naming the server and why: `not signed by a CA this
//! client trusts`, `not valid for the host name in the URL`, `expired`, `the server refused this
//! client's certificate`, or `requires a client certificate and none was given`. A file that
//! cannot be read or holds no PEM certificate or key, or a key that does not fit its certificate,
//! is a configuration error naming the key (`outbox check` reports it). The redis client builds
//! its rustls configuration with the process's default crypto provider: when the process has
//! none, connecting installs ring's (the provider this crate uses everywhere).
//!
//! **Outages.** The `ConnectionManager` reconnects when a command finds the connection broken;
//! while Redis is unreachable `publish` answers `Unavailable` within the timeout, and the first
//! publish after the server is back succeeds or triggers the reconnection the next one uses.
//!
//! **Classification.**
//!
//! | what happened | kind |
//! | --- | --- |
//! | reply with the entry id | delivered |
//! | connection refused / reset / closed, no reply within the timeout | unavailable |
//! | `LOADING`, `READONLY` (a replica after failover), `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN`, `OOM`, `MISCONF`, `BUSY`, `NOAUTH`/`WRONGPASS`, too many clients | unavailable (the server refuses every write for now: not the message's fault, costs no attempt) |
//! | `WRONGTYPE` (the key exists and is not a stream) | permanent |
//! | `NOPERM` (an ACL forbids this key), `MOVED`/`ASK`/`CROSSSLOT` (cluster) | permanent |
//! | payload or a header value over `max_payload_bytes`, stream key (as built from the template) empty or over 4096 bytes, field name over 4096 bytes (checked before sending) | permanent |
//! | any other error reply (`ERR ...`), an unexpected reply | retryable |

mod config;
mod outcome;
mod transport;

pub use config::RedisConfig;
pub use transport::RedisTransport;
