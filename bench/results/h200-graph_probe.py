import time, torch, shutil
from pathlib import Path
from torch.nn.attention import SDPBackend
from transformers import AutoConfig, AutoModelForCausalLM
import verifier_svc.backends.cuda as cb
from verifier_svc.model_loader import load_model
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import chain
src = Path(".gpu3/smol"); torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(src)), dtype=torch.bfloat16).save_pretrained("/tmp/smol")
for f in src.iterdir():
    if f.name != "config.json": shutil.copy2(f, "/tmp/smol/" + f.name)
m = load_model(Path("/tmp/smol"), "cuda", torch.bfloat16)
def tm(f, n=30):
    torch.cuda.synchronize(); s = time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return round((time.perf_counter() - s) / n * 1000, 3)
for backends, ctx in (([SDPBackend.MATH], 4096), ([SDPBackend.EFFICIENT_ATTENTION], 512), ([SDPBackend.MATH], 512), ([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH], 4096)):
    cb.CUDA_ATTENTION_BACKENDS = backends; cb.GRAPH_CONTEXT = ctx
    t = TargetModel(m, "d")
    c = t.new_cache(); t.score(c, list(range(1000, 1256)), chain([]))
    def full():
        t.score(c, [5], chain([])); c.truncate(256)
    def full8():
        t.score(c, [5], chain(list(range(7)))); c.truncate(256)
    s1 = tm(full); s8 = tm(full8)
    r = t.backend.lone_pass(c, 256, 1)
    print([b.name for b in backends], ctx, "score1 ms", s1, "score8 ms", s8, "replay1 ms", tm(lambda: r.graph.replay()), flush=True)
    del t, c, r
