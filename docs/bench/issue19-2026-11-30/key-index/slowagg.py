import re,sys,collections
txt=open(sys.argv[1],errors='replace').read()
entries=re.split(r'\n(?=# User@Host)',txt)
agg=collections.defaultdict(lambda:[0,0.0,0])
for e in entries:
    m=re.search(r'Query_time: ([\d.]+).*?Rows_examined: (\d+)',e,re.S)
    if not m: continue
    lines=[l for l in e.split('\n') if l and not l.startswith('#') and not l.startswith('SET timestamp') and not l.startswith('use ')]
    q=' '.join(lines)
    q=re.sub(r'\b\d+\b','N',q); q=re.sub(r"'[^']*'","S",q); q=re.sub(r'(N, ?)+N','N..',q); q=re.sub(r'(\(SELECT id, N AS head.*?\)( UNION ALL )?)+','RUNS ',q)
    q=re.sub(r'\s+',' ',q)[:150]
    a=agg[q]; a[0]+=1; a[1]+=float(m.group(1)); a[2]+=int(m.group(2))
tot=sum(a[1] for a in agg.values())
print(f"total {tot:.1f} s")
for q,a in sorted(agg.items(),key=lambda x:-x[1][1])[:16]:
    print(f"{a[1]:7.2f} s {100*a[1]/tot:5.1f}% n={a[0]:6d} avg={1000*a[1]/a[0]:7.2f} ms ex/call={a[2]//a[0]:8d}  {q}")
