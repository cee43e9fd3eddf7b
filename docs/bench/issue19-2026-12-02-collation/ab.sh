#!/usr/bin/env bash
# The open-key index and the claim's key comparisons in the C collation (B, `c-*`), against
# C.UTF-8 (A, `utf-*`, the shared server's): two clusters of our own that differ only in initdb's
# locale. OUT=<absolute dir> ROUNDS=<n> BIN=<release outbox> (the runs here were made with a
# copy of this script's body before it moved into scripts/own-postgres-ab.sh).
here=$(cd "$(dirname "$0")/../../.." && pwd)
A=utf B=c B_INITDB=--locale=C exec "$here/scripts/own-postgres-ab.sh"
