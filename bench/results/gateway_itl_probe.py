"""Per-token latency through the OpenAI gateway (specdec serve openai over a LocalCluster), speculation on (the drafter's defaults) and off, greedy, concurrency 1, 4 Spec-Bench prompts x 2 rounds alternated, 64 tokens. Run: python bench/results/gateway_itl_probe.py"""
import sys, tempfile, time, json, urllib.request, statistics
sys.path.insert(0, "/work/main")
from pathlib import Path
from openai import OpenAI
from specdec.launcher import LocalCluster, Service
from bench.openai_load import wait_healthy
from bench.prompts import QUESTIONS_FILE, bench_dir, load_questions, select
prompts = select(load_questions(bench_dir() / QUESTIONS_FILE), ["mt_bench", "translation", "qa", "math_reasoning"], 1)
with tempfile.TemporaryDirectory() as logs:
    with LocalCluster(Path(logs)) as c:
        gw = Service("openai", ["--drafter", c.address], Path(logs) / "gateway.log")
        try:
            base = f"http://127.0.0.1:{gw.port}"; wait_healthy(base)
            model = json.loads(urllib.request.urlopen(f"{base}/v1/models").read())["data"][0]["id"]
            client = OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
            res = {"on": [], "off": []}
            for r in range(2):
                for p in prompts:
                    for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                        extra = {} if mode == "on" else {"speculation": {"num_draft_tokens": 0}}
                        t0 = time.perf_counter(); first = last = None; n = 0
                        for ch in client.chat.completions.create(model=model, messages=p.messages, max_tokens=64, temperature=0, stream=True,
                                                                  stream_options={"include_usage": True}, extra_body=extra):
                            if ch.usage is not None: n = ch.usage.completion_tokens
                            elif ch.choices and ch.choices[0].delta.content:
                                last = time.perf_counter(); first = first or last
                        res[mode].append(((last - first) / (n - 1) * 1000, (first - t0) * 1000, n))
            for mode, v in res.items():
                print(mode, "ITL ms median", round(statistics.median(x[0] for x in v), 1), "TTFT ms median", round(statistics.median(x[1] for x in v)), "tokens", [x[2] for x in v])
        finally:
            gw.stop()
