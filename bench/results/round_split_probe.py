"""Where a round's time goes, issue-41 tree vs main, translation prompts at T=1, alternating."""
import os, sys, time, tempfile
from pathlib import Path
sys.path.insert(0, os.getcwd())  # from a checkout: python bench/results/round_split_probe.py translation OTHER_CHECKOUT
from specdec.launcher import LocalCluster
from specdec.client import Client
from bench.prompts import load_bench_questions, select

def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

rows = sys.argv[1].split(",") if len(sys.argv) > 1 else ["translation"]
prompts = select(load_bench_questions(), rows, 6)
trees = {"41": Path.cwd(), "main": Path(sys.argv[2])}
logs = Path(tempfile.mkdtemp(prefix="split-"))
ports = {"41": 19411, "main": 19412}
clusters = {k: LocalCluster(logs / k, verifier_args=[f"--metrics-port={ports[k]}"], checkout=v) for k, v in trees.items()}
import urllib.request, re
def metrics(k):
    text = urllib.request.urlopen(f"http://127.0.0.1:{ports[k]}/metrics").read().decode()
    out = {}
    for name in ("specdec_verifier_queue_wait_seconds_sum", "specdec_verifier_pass_seconds_sum", "specdec_verifier_pass_seconds_count", "specdec_verifier_pass_tokens_total"):
        m = re.search("^" + name + r"(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out
clients = {k: Client(c.address) for k, c in clusters.items()}
for k in trees:
    clients[k].generate(messages=[{"role": "user", "content": "Hi"}], max_new_tokens=8, temperature=1.0, seed=0)
tot = {k: dict(wall=0, tok=0, rounds=0, draft=0, verify=0, net=0, dcpu=0, vcpu=0) for k in trees}
order = list(trees)
m0 = {k: metrics(k) for k in trees}
for rep in range(2):
    for i, p in enumerate(prompts):
        for k in (order if (i + rep) % 2 == 0 else order[::-1]):
            c = clusters[k]
            d0, v0 = cpu(c.drafter.process.pid), cpu(c.verifier.process.pid)
            s = time.perf_counter()
            r = clients[k].generate(messages=p.messages, max_new_tokens=128, temperature=1.0, seed=100 * rep + i)
            w = time.perf_counter() - s
            t = tot[k]; st = r.stats
            t["wall"] += w; t["tok"] += len(r.token_ids); t["rounds"] += st.rounds; t["draft"] += st.draft_seconds
            t["verify"] += st.verify_seconds; t["net"] += st.network_seconds
            t["dcpu"] += cpu(c.drafter.process.pid) - d0; t["vcpu"] += cpu(c.verifier.process.pid) - v0
m1 = {k: metrics(k) for k in trees}
for k, t in tot.items():
    dm = {n: m1[k][n] - m0[k][n] for n in m1[k]}
    print(k, "verifier: passes", dm["specdec_verifier_pass_seconds_count"], "pass ms", 1000 * dm["specdec_verifier_pass_seconds_sum"] / max(1, dm["specdec_verifier_pass_seconds_count"]), "queue wait ms/round", 1000 * dm["specdec_verifier_queue_wait_seconds_sum"] / max(1, t["rounds"]), "tokens/pass", dm["specdec_verifier_pass_tokens_total"] / max(1, dm["specdec_verifier_pass_seconds_count"]))
    R = t["rounds"]
    rest = t["wall"] - t["draft"] - t["verify"] - t["net"]
    print(f"{k:5s} ms/tok {1000*t['wall']/t['tok']:.1f} rounds {R} per round ms: wall {1000*t['wall']/R:.1f} draft {1000*t['draft']/R:.1f} verify {1000*t['verify']/R:.1f} net {1000*t['net']/R:.1f} rest {1000*rest/R:.1f} | cpu ms/round drafter {1000*t['dcpu']/R:.1f} verifier {1000*t['vcpu']/R:.1f}")
for c in clusters.values(): c.stop()
