"""Per-token latency through the OpenAI gateway (`specdec serve openai` over a LocalCluster),
speculation on (the drafter's defaults) and off, greedy, concurrency 1: 4 Spec-Bench prompts, two
rounds, the modes alternated, 64 tokens. What bench/openai_load.py measures with AIPerf, for a
host without it. Run from the repository root: python bench/results/gateway_itl_probe.py"""

import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from openai import OpenAI  # noqa: E402

from bench.openai_load import per_token_seconds, wait_healthy  # noqa: E402
from bench.prompts import QUESTIONS_FILE, bench_dir, load_questions, select  # noqa: E402
from specdec.launcher import LocalCluster, Service  # noqa: E402

MODES = {"on": {}, "off": {"speculation": {"num_draft_tokens": 0}}}


def timed(client: OpenAI, model: str, messages: list, extra: dict) -> tuple[float, float, int]:
    """(ms a token after the first, ms to the first token, tokens) of one streamed answer."""
    started = time.perf_counter()
    first = last = None
    tokens = 0
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=64, temperature=0, stream=True,
                                                stream_options={"include_usage": True}, extra_body=extra):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
    return 1000 * per_token_seconds(first, last, tokens), 1000 * (first - started), tokens


prompts = select(load_questions(bench_dir() / QUESTIONS_FILE), ["mt_bench", "translation", "qa", "math_reasoning"], 1)
with tempfile.TemporaryDirectory() as logs, LocalCluster(Path(logs)) as cluster:
    gateway = Service("openai", ["--drafter", cluster.address], Path(logs) / "gateway.log")
    try:
        base = f"http://127.0.0.1:{gateway.port}"
        wait_healthy(base)
        model = json.loads(urllib.request.urlopen(f"{base}/v1/models").read())["data"][0]["id"]
        client = OpenAI(base_url=f"{base}/v1", api_key="probe", max_retries=0)
        results: dict[str, list[tuple[float, float, int]]] = {mode: [] for mode in MODES}
        for round_ in range(2):
            for prompt in prompts:
                for mode in (("on", "off") if round_ % 2 == 0 else ("off", "on")):
                    results[mode].append(timed(client, model, prompt.messages, MODES[mode]))
        for mode, runs in results.items():
            print(mode, "ITL ms median", round(statistics.median(r[0] for r in runs), 1),
                  "TTFT ms median", round(statistics.median(r[1] for r in runs)), "tokens", [r[2] for r in runs])
    finally:
        gateway.stop()
