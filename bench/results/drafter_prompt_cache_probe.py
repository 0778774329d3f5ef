"""Probe: the model drafters' prompt cache (`--onnx-prompt-cache-tokens`), off (0) against on
(1024, the default), two clusters side by side (a verifier and a drafter each), used in turns,
never at once. Requests repeat one chat prompt (46 tokens) at temperature 0.8 with the drafter
named on the command line (`onnx-quantized`, the int8 copy of the target, drafting one token as
the exactness tests' requests do, or `hybrid`, the default, with its own draft lengths) and read
only their first streamed round: (a) one at a time, the first round's latency, median ms of 30;
(b) 200 requests 20 at a time, wall seconds; (c) whole generations of up to 64 new tokens (a story: EOS is late) one at a
time, median seconds of 8. Three turns each.

    flock -x /tmp/specdec-cpu.lock python bench/results/drafter_prompt_cache_probe.py onnx-quantized
"""
import asyncio, statistics, sys, tempfile, time
from pathlib import Path
from specdec.client import AsyncClient
from specdec.launcher import LocalCluster
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer

tokenizer = Tokenizer(tokenizer_dir("default"))
DRAFTER = sys.argv[1]
DRAFT_TOKENS = {"onnx-quantized": {"num_draft_tokens": 1, "draft_policy": "fixed"}, "hybrid": {}}[DRAFTER]
PROMPT = tokenizer.encode_chat([{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a message in a bottle."}])


async def whole(address: str, seeds: range) -> list[float]:
    seconds: list[float] = []
    async with AsyncClient(address) as client:
        for seed in seeds:
            started = time.perf_counter()
            await client.generate(token_ids=PROMPT, max_new_tokens=64, temperature=0.8, seed=seed, drafter=DRAFTER, **DRAFT_TOKENS)
            seconds.append(time.perf_counter() - started)
    return seconds


async def first_rounds(address: str, seeds: range, concurrency: int) -> list[float]:
    latencies: list[float] = []
    pending = iter(seeds)
    async with AsyncClient(address) as client:
        async def worker() -> None:
            for seed in pending:
                started = time.perf_counter()
                stream = client.stream(token_ids=PROMPT, max_new_tokens=2, temperature=0.8, seed=seed, drafter=DRAFTER, acceptance="lenient:1", **DRAFT_TOKENS)
                await anext(stream)
                await stream.aclose()
                latencies.append(time.perf_counter() - started)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


with tempfile.TemporaryDirectory() as logs:
    clusters = {
        tokens: LocalCluster(Path(logs) / tokens, verifier_args=["--tune-pass-sizes", "false", "--max-sessions", "32"],
                             drafter_args=["--onnx-prompt-cache-tokens", tokens]).__enter__()
        for tokens in ("0", "1024")
    }
    print(f"prompt {len(PROMPT)} tokens, drafter {DRAFTER}")
    for cluster in clusters.values():
        asyncio.run(first_rounds(cluster.address, range(10_000, 10_020), 4))  # warm
    for turn in range(3):
        order = ("0", "1024") if turn % 2 == 0 else ("1024", "0")
        for tokens in order:
            address = clusters[tokens].address
            alone = asyncio.run(first_rounds(address, range(turn * 1000, turn * 1000 + 30), 1))
            started = time.perf_counter()
            asyncio.run(first_rounds(address, range(turn * 1000 + 100, turn * 1000 + 300), 20))
            wall = time.perf_counter() - started
            generations = asyncio.run(whole(address, range(turn * 1000 + 500, turn * 1000 + 508)))
            print(f"turn {turn} cache {tokens:>4}: one at a time, first round median {1000 * statistics.median(alone):.1f} ms; "
                  f"200 requests 20 at a time {wall:.1f} s; 64 new tokens median {statistics.median(generations):.2f} s", flush=True)
    for cluster in clusters.values():
        cluster.__exit__(None, None, None)
