#!/usr/bin/env bash
# This session's runs, in order (release builds: before = 007d413, after = the lane's first look
# reading back). Each given as a path to its `outbox` binary.
set -u
B=${BEFORE:?} A=${AFTER:?}
D=$(dirname "$0")
P=../issue19-2026-12-06e
Q=../issue19-2026-12-07
export ROUNDS=2
DB='mysql://root@127.0.0.1:3306/test' OUT=$D/apart-mariadb bash $D/$P/apart.sh before:$B after:$A
OUT=$D/apart-pg bash $D/$P/apart.sh before:$B after:$A
ROUNDS=1 POOLS=4 DB='mysql://root@127.0.0.1:3306/test' OUT=$D/pool4-mariadb bash $D/$Q/pool.sh before:$B after:$A
ROUNDS=3 OUT=$D/drain10 bash $D/$Q/drain10.sh before:$B after:$A
ROUNDS=3 OUT=$D/drain10r bash $D/$Q/drain10.sh after:$A before:$B
ROUNDS=2 DB='mysql://root@127.0.0.1:3306/test' OUT=$D/drain10-mariadb bash $D/$Q/drain10.sh before:$B after:$A
ROUNDS=2 DB='mysql://root@127.0.0.1:3306/test' OUT=$D/drain10r-mariadb bash $D/$Q/drain10.sh after:$A before:$B
