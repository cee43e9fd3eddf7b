#!/usr/bin/env bash
# Autovacuum on (A, `on-*`, PostgreSQL's default) against off (B, `off-*`, the shared test
# server's setting): two clusters of our own that differ only in that. OUT=<absolute dir>
# ROUNDS=<n> BIN=<release outbox> (the runs here were made with a copy of this script's body
# before it moved into scripts/own-postgres-ab.sh).
here=$(cd "$(dirname "$0")/../../.." && pwd)
A=on B=off B_ARGS='-c autovacuum=off' exec "$here/scripts/own-postgres-ab.sh"
