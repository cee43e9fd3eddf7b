#!/usr/bin/env bash
# The shared server's max_wal_size (A, `1gb-*`: 1 GB, so a drain of 10^6 runs with checkpoints
# back to back, each one making the next write to every page log a full-page image) against
# 8 GB (B, `8gb-*`: no checkpoint forced by WAL volume during such a drain): two clusters of our
# own that differ only in that, drains alone. OUT=<absolute dir> ROUNDS=<n> BIN=<release outbox>.
here=$(cd "$(dirname "$0")/../../../.." && pwd)
A=1gb B=8gb B_ARGS='-c max_wal_size=8GB' exec "$here/scripts/own-postgres-ab.sh"
