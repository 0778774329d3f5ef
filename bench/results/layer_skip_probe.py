"""Probe (2026-11-29): would the target with some layers skipped draft for it (a drafter that
costs less per step than the int8 copy and needs no training)? Teacher-forced argmax agreement
with the full float32 model over its own greedy continuations (6 chat prompts, 64 tokens each)
when the listed layers (of 30) are skipped.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/layer_skip_probe.py
Output: bench/results/layer_skip_probe-20261129.txt (docs/design/int8-drafter.md)."""
import torch
from transformers import AutoModelForCausalLM

from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.model_loader import model_dir

PROMPTS = [
    "Write a short story about a lighthouse keeper.", "Explain how a refrigerator works.",
    "What is the capital of Australia and why was it chosen?", "Translate to French: The weather is nice today and we will go to the beach.",
    "Solve: If a train travels 60 miles in 1.5 hours, what is its speed?", "Give three tips for staying focused while studying.",
]
SKIPS = [set(), {28}, {26, 27}, {20, 22, 24, 26}, set(range(22, 28)), {4, 8, 12, 16, 20, 24}, set(range(14, 22)), set(range(1, 29, 3))]

torch.set_num_threads(2)
model = AutoModelForCausalLM.from_pretrained(str(model_dir("default")), dtype=torch.float32).eval()
tokenizer = Tokenizer(tokenizer_dir("default"))
layers = model.model.layers
with torch.inference_mode():
    runs = []
    for prompt in PROMPTS:
        ids = tokenizer.encode_chat([{"role": "user", "content": prompt}])
        runs.append((len(ids), model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False)))
    for skip in SKIPS:
        model.model.layers = torch.nn.ModuleList(layer for i, layer in enumerate(layers) if i not in skip)
        agree = total = 0
        for prompt_length, out in runs:
            predicted = model(out, use_cache=False).logits[0, prompt_length - 1 : -1].argmax(-1)
            agree += int((predicted == out[0, prompt_length:]).sum())
            total += out.shape[1] - prompt_length
        print(f"layers skipped {sorted(skip) or 'none'}: argmax agreement {agree / total:.3f} over {total} tokens")
    model.model.layers = layers
