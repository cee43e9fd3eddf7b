#!/usr/bin/env bash
# This session's runs, in order (release builds: before = 3267f92 with the bench's --relay-pool
# and the lane_left counter, built 00:13 UTC; after = 3546b38).
set -u
B=${BEFORE:?} A=${AFTER:?}
D=$(dirname "$0")
P=../issue19-2026-12-06e
export ROUNDS=2
DB='mysql://root@127.0.0.1:3306/test' OUT=$D/apart-mariadb bash $D/$P/apart.sh before:$B after:$A
OUT=$D/apart-pg bash $D/$P/apart.sh before:$B after:$A
ROUNDS=1 POOLS=4 DB='mysql://root@127.0.0.1:3306/test' OUT=$D/pool4-mariadb bash $D/pool.sh before:$B after:$A
ROUNDS=1 POOLS=4 OUT=$D/pool4-pg bash $D/pool.sh before:$B after:$A
OUT=$D/drain10 bash $D/drain10.sh before:$B after:$A
