"""Run: flock -x /tmp/specdec-cpu.lock env OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python bench/results/shared_price_probe.py

Feed the shared curve passes like a loaded verifier's, then compare its marginal row price
with a measured one."""
import time, torch, random, statistics
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.model_loader import load_model, model_dir
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain
from verifier_svc.batched_pass_timing import time_batched_passes
from verifier_svc.pass_price import PassPriceModel
target = TargetModel(load_model(model_dir("default"), "cpu", torch.float32), "default")
target.backend.weight_first, target.backend.linear_min_rows = False, 1
rng = random.Random(0)
seeds = time_batched_passes(target)
model = PassPriceModel(); model.seed([0.026 + 0.0014 * r for r in range(9)], 128, seeds)
S = 16
prompts = [[rng.randrange(1000, 20000) for _ in range(rng.randrange(256, 1000))] for _ in range(S)]
caches = [target.new_cache() for _ in prompts]
for c, p in zip(caches, prompts): target.score(c, p, chain([]))
def timed(drafts):
    inputs = [PassInput(c, [5000], chain([6000 + j for j in range(n)])) for c, n in zip(caches, drafts)]
    t = time.perf_counter(); score_batch(target, inputs); t = time.perf_counter() - t
    for c, p in zip(caches, prompts): c.truncate(len(p))
    return t
slots = sum(map(len, prompts))
for i in range(120):  # passes of 16 rounds, a few drafting (copies: bursty)
    drafts = [rng.choice([0, 0, 0, 0, 0, 1, 3, 6]) for _ in range(S)]
    t = timed(drafts)
    model.observe(S + sum(drafts), slots, t, rounds=S)
a, m, c, k = model.shared_terms()
print("terms ms: a %.2f m %.3f c %.2f k/1000 %.3f" % (a*1e3, m*1e3, c*1e3, k*1e6))
for R in (16, 24, 32):
    print("model marginal at", R, "rows: %.2f ms" % (model.shared_row_seconds(R, slots) * 1e3))
# measured: 16 plain vs one session with 8 nodes (24 rows) vs 16 rows more
base, plus8, plus16 = [], [], []
for _ in range(7):
    base.append(timed([0] * S)); plus8.append(timed([8] + [0] * (S - 1))); plus16.append(timed([8, 8] + [0] * (S - 2)))
b, p8, p16 = (statistics.median(x) * 1e3 for x in (base, plus8, plus16))
print("measured: 16 rows %.1f ms, 24 rows %.1f (%.2f ms a row), 32 rows %.1f (%.2f ms a row)" % (b, p8, (p8 - b) / 8, p16, (p16 - b) / 16))
print("price at S=16:", model.price(600, 16))
