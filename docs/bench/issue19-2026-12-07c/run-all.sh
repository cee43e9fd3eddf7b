#!/usr/bin/env bash
# This session's runs, in order: a 500 msg/s load written by another process beside 300,000
# messages on 10 hot keys, the relay set up as `outbox relay` sets up its relays (a pool of its
# own, `--relay-pool`, and the daemon's budget of 16 batches in flight, which `--relay-pool` now
# brings), with the daemon's default pool (4) and a pool of 6. Release builds, alternating:
# before = the lane closed under any budget (as `outbox relay`'s relays had it), after = the lane
# under a budget that is not crowded. Each given as a path to its `outbox` binary.
set -u
B=${BEFORE:?} A=${AFTER:?}
D=$(dirname "$0")
Q=../issue19-2026-12-07
export ROUNDS=${ROUNDS:-2} POOLS=${POOLS:-4 6}
DB='mysql://root@127.0.0.1:3306/test' OUT=$D/daemon-mariadb bash $D/$Q/pool.sh before:$B after:$A
OUT=$D/daemon-pg bash $D/$Q/pool.sh before:$B after:$A
