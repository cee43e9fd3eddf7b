#!/usr/bin/env bash
# The shared PostgreSQL (A, `shared-*`, never restarted or reconfigured) against a fresh cluster of
# our own (B, `own-*`, scripts/own-postgres.sh's settings: the shared server's buffers and WAL size,
# plus pg_stat_statements and autovacuum on), same binary, same host, alternating: is the shared
# server's slower drain at 10^6 (0.73 against 0.83 of 2·10^4 on an AMD host) the server's or the
# host's? OUT=<absolute dir> ROUNDS=<n> BIN=<release outbox>.
here=$(cd "$(dirname "$0")/../../../.." && pwd)
A=shared A_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' B=own exec "$here/scripts/own-postgres-ab.sh"
