set -u
O=/tmp/q/out; mkdir -p $O
echo "== $(date -u +%H:%M:%S) latency beside sqlxmq"
BIN=/tmp/bins/outbox-new PEER=/tmp/bins/peer-sqlxmq OUT=$O/latency ROUNDS=3 RATES="500 1000" bash /work/main/docs/bench/issue19-2026-12-03-latency/run.sh
echo "== $(date -u +%H:%M:%S) one-trip A/B"
OLD=/tmp/bins/outbox-old NEW=/tmp/bins/outbox-new OUT=$O/one-trip ROUNDS=3 RATES="500 1000" N=100000 bash /work/main/docs/bench/issue19-2026-12-03-one-trip/ab.sh
echo "== $(date -u +%H:%M:%S) targets"
B=/tmp/bins/outbox-new OUT=$O/targets bash /work/main/docs/bench/issue19-2026-11-30/final-ebb6e3c/targets.sh
echo "== $(date -u +%H:%M:%S) done"
