#!/usr/bin/env bash
# The shared PostgreSQL twice, alternating: each drain after the raw limits measured in the same
# bench run (A, `raw-drain-*`, `--scenario raw,drain`, as the depth and targets runs measure), and
# alone (B, `drain-*`): does measuring the raw limits first slow the deep drain after it?
# OUT=<absolute dir> ROUNDS=<n> BIN=<release outbox>.
here=$(cd "$(dirname "$0")/../../../.." && pwd)
PG='postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
A=raw-drain A_URL=$PG A_SCENARIO=raw,drain B=drain B_URL=$PG exec "$here/scripts/own-postgres-ab.sh"
