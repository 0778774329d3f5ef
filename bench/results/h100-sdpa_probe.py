"""Per-round cost of the verifier on cuda: cuDNN attention allowed vs not, fresh vs seen key lengths; generate() likewise."""
import statistics, time, torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile
import verifier_svc.target_model as tm
from specdec.sampling_params import SamplingParams
from specdec.tokenizer import Tokenizer
from verifier_svc.model_loader import load_model, model_dir
from verifier_svc.session import Limits, RoundInput, Session

folder = model_dir("default"); tok = Tokenizer(folder)
LIMITS = Limits(32, 16, 2048)
FIX = list(tm.CUDA_ATTENTION_BACKENDS)
ALL = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
text = tok.encode("Tell me a long story about a dragon, a knight and a small village by the sea. " * 80)
print("cudnn_sdp_enabled", torch.backends.cuda.cudnn_sdp_enabled(), "flash", torch.backends.cuda.flash_sdp_enabled())

def rounds(target, ids, n=40):
    s = Session(target, ids, SamplingParams(temperature=0.0), 0, LIMITS)
    s.verify(RoundInput.point_masses([]))
    times = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); s.verify(RoundInput.point_masses([])); times.append(time.perf_counter() - t)
    return f"median {statistics.median(times) * 1e3:.1f} ms mean {statistics.mean(times) * 1e3:.1f} ms"

def kernels(target, ids):
    s = Session(target, ids, SamplingParams(temperature=0.0), 0, LIMITS)
    s.verify(RoundInput.point_masses([]))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        s.verify(RoundInput.point_masses([]))
    rows = [e for e in prof.key_averages() if any(w in e.key.lower() for w in ("attention", "cudnn", "fmha", "sdpa", "flash"))]
    return "; ".join(f"{e.key[:70]} x{e.count} cpu {e.cpu_time_total / 1e3:.1f} ms" for e in rows[:8])

length = 150
for dtype in (torch.bfloat16, torch.float32):
    target = tm.TargetModel(load_model(folder, "cuda", dtype), "x")
    rounds(target, text[:50], 5)  # warm-up
    for label, backends in (("cuDNN allowed", ALL), ("no cuDNN (the fix)", FIX)):
        tm.CUDA_ATTENTION_BACKENDS = backends
        ids = text[:length]; length += 100
        print(f"{dtype} {label}: k=0 rounds at fresh key lengths {rounds(target, ids)}; same lengths again {rounds(target, ids)}", flush=True)
        print("   kernels:", kernels(target, text[:length + 1000]), flush=True); length += 5
    for label, backends in (("cuDNN allowed", ALL), ("no cuDNN", FIX)):
        ids = torch.tensor([text[:length]], device="cuda"); length += 100
        with sdpa_kernel(backends), torch.inference_mode():
            out = []
            for _ in range(2):
                torch.cuda.synchronize(); t = time.perf_counter()
                target.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=48, min_new_tokens=48)
                torch.cuda.synchronize(); out.append((time.perf_counter() - t) / 48 * 1e3)
        print(f"{dtype} generate() {label}: {out[0]:.1f} ms/token fresh lengths, {out[1]:.1f} again", flush=True)
tm.CUDA_ATTENTION_BACKENDS = FIX
