"""One line per run of a directory of `outbox bench --scenario latency` reports (a subdirectory
with results.json per run) and sqlxmq harness reports (sqlxmq-N.json): python3 printed.py DIR"""
import json, os, sys

d = sys.argv[1]
for name in sorted(os.listdir(d)):
    p = os.path.join(d, name)
    if os.path.isfile(os.path.join(p, "results.json")):
        o = json.load(open(os.path.join(p, "results.json")))["latency"]
        c = o["commit_to_consumer"]
        print(name, "p50 %.2f p90 %.2f p99 %.2f tx %.2f claim %.2f cpm %.2f xpm %s sent %d recv %d left %d dup %d" % (
            c["p50_ms"], c["p90_ms"], c["p99_ms"], o["transaction"]["p50_ms"], o["claim_ms_mean"] or 0,
            o["claims_per_msg"], o.get("db_xacts_per_msg"), o["sent"], o["received"], o["left_behind"], o["duplicates"]))
        k = " ".join("%s=%d/%d" % (x["kind"], x["claims"], x["empty"]) for x in o.get("claim_kinds", []) if x["claims"])
        if k:
            print("   kinds", k)
    elif name.startswith("sqlxmq-") and name.endswith(".json"):
        s = json.load(open(p))
        e = s["commit_to_job"]
        print(name, "p50 %.2f p90 %.2f p99 %.2f tx %.2f sent %d recv %d left %d dup %d" % (
            e["p50_ms"], e["p90_ms"], e["p99_ms"], s["transaction"]["p50_ms"], s["sent"], s["received"], s["left_behind"], s["duplicates"]))
