#!/usr/bin/env bash
# The whole test suite, from a fresh machine: starts the servers the tests need (PostgreSQL,
# MariaDB, Redis, RabbitMQ, NATS JetStream, Mosquitto), installs the Kafka and RocketMQ brokers the
# transport tests start (scripts/brokers.sh), installs what
# the foreign-language examples need, checks formatting and lints, and runs every test against
# the real servers; then runs the MySQL tests of the store, relay, inbox, admin API and adopt suites a
# second time against a real MySQL 9.7 server of its own (scripts/mysql.sh). `.ci/run` runs
# exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds are cached outside the clone so CI and later runs reuse them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/outbox-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# No incremental compilation: CI builds a clean clone, whose crates cargo compiles anew whatever
# the cache holds (their fingerprints include the clone's path), so the incremental state is only
# extra work and disk. A developer's own `cargo` runs keep it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Every stage prints the minutes and seconds since the start, so a slow CI run says where its time
# went.
stage() { printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# A cold build of everything this runs (clippy, each transport alone, ~50 test binaries) left
# 4.8 GB under CARGO_TARGET_DIR (2026-11-28, no debug info for dependencies, line tables for
# ours, no incremental state; full debug info had needed about 35 GB). Say so up front rather
# than deep inside a link step when there is not twice that.
mkdir -p "$CARGO_TARGET_DIR"
free_gb=$(df -Pk "$CARGO_TARGET_DIR" | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${free_gb:-0}" -lt 10 ]; then
  echo "== warning: ${free_gb} GB free under $CARGO_TARGET_DIR; a cold build needs about 5 GB, and the brokers' install 1.2 GB more (~/.cache/outbox/brokers)" >&2
fi

bash scripts/services.sh postgres mysql redis rabbitmq nats mqtt
bash scripts/install-foreign-deps.sh
# MySQL (Debian sid's mysql-server-core, unpacked under ~/.cache/outbox/mysql, not installed
# into the system; scripts/mysql.sh says why): about 10 s on a fresh machine, nothing when cached.
bash scripts/mysql.sh install
# Kafka and RocketMQ brokers for the transport tests (installed once, cached outside the clone).
# On a fresh machine the RocketMQ install is a long `cargo install`: it runs in the background
# beside the lints and the test build (both have long serial tails on 2 cores) and is waited for
# just before the tests run. When the brokers are cached this returns in about a second.
brokers_log="${TMPDIR:-/tmp}/outbox-brokers-install.$$.log"
bash scripts/brokers.sh >"$brokers_log" 2>&1 &
brokers_pid=$!

# Drop test databases a crashed earlier run may have left behind.
psql -h 127.0.0.1 -U postgres -d postgres -Atqc \
  "SELECT datname FROM pg_database WHERE datname LIKE 'outbox\_t\_%'" |
  while read -r db; do [ -n "$db" ] && psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)"; done
mariadb -h 127.0.0.1 -uroot -N -e "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'outbox\\_t\\_%'" |
  while read -r db; do [ -n "$db" ] && mariadb -h 127.0.0.1 -uroot -e "DROP DATABASE IF EXISTS \`$db\`"; done

stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Each transport builds alone, without a warning. Only `outbox-transport` has code per transport
# (the CLI's only feature gates are `bench` and `otel`, the facade's are re-exports), so it is the
# crate checked once per transport; the CLI and the facade are checked once each in their
# smallest build. Each of these builds resolves the dependencies' features anew (tokio, serde,
# syn, rustls, cc... differ without the other transports), so each one re-checks its whole
# dependency tree: a check of the CLI and of the facade per transport took 24 of a cold run's
# minutes (2026-11-28); this loop and the two
# builds after it took 12 on the next cold run.
for f in nats rabbitmq redis mqtt http kafka rocketmq; do
  stage "cargo clippy: outbox-transport with only the $f transport"
  cargo clippy --quiet -p outbox-transport --no-default-features --features "$f" -- -D warnings
done
stage "cargo clippy: the smallest daemon (outbox-cli with only nats) and facade (postgres, relay, nats)"
cargo clippy --quiet -p outbox-cli --no-default-features --features nats -- -D warnings
cargo clippy --quiet -p outbox --no-default-features --features "postgres,relay,nats" -- -D warnings
# The relay engine and the store build alone, on each database alone (the relay's features choose
# the store's dialects), without a warning; the store also with none.
for db in postgres mysql sqlite; do
  stage "cargo clippy: outbox-relay and outbox-store with only $db"
  cargo clippy --quiet -p outbox-relay --no-default-features --features "$db" -- -D warnings
done
cargo clippy --quiet -p outbox-store --no-default-features -- -D warnings
stage "cargo test: build"
# Builds every test binary, and with them the `outbox` and `outbox-chaos` binaries the CLI and
# chaos tests run (target/debug), all with one feature resolution: the steps below run these
# binaries and compile nothing more (a `cargo run -p` or `cargo build -p` of one package resolves
# features for that package alone and would rebuild much of the dependency tree).
cargo test --workspace --no-run --quiet
# The MySQL run and the chaos suite need neither Kafka nor RocketMQ: they run before the wait, so
# that on a fresh machine they overlap the end of the RocketMQ install.
# The same MySQL tests again (every test named mysql or mariadb in outbox-store, outbox-relay,
# outbox-inbox, outbox-cli and outbox-adopt), against MySQL instead of the shared MariaDB, from the binaries
# built above.
stage "MySQL: the store, relay, inbox, admin API and adopt suites against MySQL"
trap 'bash scripts/mysql.sh stop || true' EXIT
bash scripts/mysql.sh test
bash scripts/mysql.sh stop
trap - EXIT
stage "chaos suite, short profile (pg-nats, pg-rabbitmq, mariadb-redis; docs/guarantees.md)"
OUTBOX_BIN="$CARGO_TARGET_DIR/debug/outbox" "$CARGO_TARGET_DIR/debug/outbox-chaos" run --profile short
stage "brokers"
wait "$brokers_pid" || true
cat "$brokers_log"
rm -f "$brokers_log"
# Only exports the installed brokers' paths now (or retries an install that failed above).
source scripts/brokers.sh
stage "cargo test"
cargo test --workspace --no-fail-fast
stage "done"
