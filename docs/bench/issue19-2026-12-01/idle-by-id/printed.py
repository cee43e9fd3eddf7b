# Prints one line per run of a directory of scripts/ab-latency.sh reports (as the script does):
#   python3 printed.py DIR
import json, os, sys
d = sys.argv[1]
for name in sorted(os.listdir(d)):
    p = os.path.join(d, name, "results.json")
    if os.path.exists(p):
        o = json.load(open(p))["latency"]; c = o["commit_to_consumer"]
        k = " ".join("%s=%d/%d" % (x["kind"], x["claims"], x["empty"]) for x in o.get("claim_kinds", []) if x["claims"])
        print(name, "p50 %.2f p90 %.2f p99 %.2f tx %.2f cpm %.2f xpm %s sent %d recv %d left %d dup %d" % (c["p50_ms"], c["p90_ms"], c["p99_ms"], o["transaction"]["p50_ms"], o["claims_per_msg"], o.get("db_xacts_per_msg"), o["sent"], o["received"], o["left_behind"], o["duplicates"]))
        print("   kinds", k)
    elif name.startswith("sqlxmq") and name.endswith(".json"):
        s = json.load(open(os.path.join(d, name))); c = s["commit_to_job"]
        print(name, "p50 %.2f p90 %.2f p99 %.2f tx %.2f" % (c["p50_ms"], c["p90_ms"], c["p99_ms"], s["transaction"]["p50_ms"]))
