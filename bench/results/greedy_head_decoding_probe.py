"""Probe (2026-11-29): greedy one-token passes of the default model with the int8-bounded head
(TargetModel.score(..., argmax_only=True): onnxruntime's step without its head, then
verifier_svc/greedy_head.py) against the same passes through the step's float32 head, in one
verifier process as `specdec serve verifier` makes it (GOMP_SPINCOUNT=10000 via specdec.cli),
in turns of blocks of 16 tokens on two caches that decode the same greedy path from the same
prompt. Two contexts: a chat prompt, and the ids 1000-1255 that `bench.engine` decodes after
(flatter distributions: more candidates). Prints ms a token, median of the blocks' medians, each
mode's, and whether the two decoded the same tokens.

    PYTHONPATH=. flock -x /tmp/specdec-cpu.lock python bench/results/greedy_head_decoding_probe.py
Output: bench/results/greedy_head_decoding_probe-20261129.txt (docs/design/greedy-head.md)."""
import statistics
import time

import specdec.cli  # noqa: F401 - the served process's thread settings, before torch
import torch

from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from verifier_svc.server import load_target
from verifier_svc.settings import VerifierSettings
from verifier_svc.token_tree import chain

BLOCKS, TOKENS = 12, 16
target, _ = load_target(VerifierSettings(model="default", tune_pass_sizes=False))
print(target.backend.engine())
chat = Tokenizer(tokenizer_dir("default")).encode_chat(
    [{"role": "user", "content": "Explain how a lighthouse works, what its keeper did each day, and why most lighthouses are automated now."}]
)
for name, prompt in (("chat prompt", chat), ("ids 1000-1255", [1000 + i for i in range(256)])):
    caches = {True: target.new_cache(), False: target.new_cache()}
    tokens = {}
    for mode, cache in caches.items():
        tokens[mode] = [int(target.score(cache, prompt, chain([]), argmax_only=mode)[0].argmax())]
    times = {True: [], False: []}
    for block in range(BLOCKS):
        for mode in ((True, False) if block % 2 == 0 else (False, True)):
            per_token = []
            for _ in range(TOKENS):
                began = time.perf_counter()
                logits = target.score(caches[mode], tokens[mode][-1:], chain([]), argmax_only=mode)
                tokens[mode].append(int(logits[0].argmax()))
                per_token.append(time.perf_counter() - began)
            times[mode].append(statistics.median(per_token))
    greedy, full = (1e3 * statistics.median(times[mode]) for mode in (True, False))
    same = tokens[True] == tokens[False]
    print(f"{name} ({len(prompt)} tokens): int8-bounded head {greedy:.2f} ms a token, float32 head {full:.2f}, ratio {full / greedy:.3f}; the same {len(tokens[True])} tokens: {same}")
