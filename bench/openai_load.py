"""AIPerf against the OpenAI-compatible gateway: concurrency 1 and 8, speculation on and off, and
what the gateway adds to per-token latency at concurrency 1 against `specdec.Client`.

The load tool is AIPerf (NVIDIA's OpenAI-API benchmark, genai-perf's successor, the tool of
SPEED-Bench): it installs without torch or any GPU package, so it lives in its own virtualenv
and this script runs its CLI (`--aiperf`, default `aiperf` on PATH):

    python -m venv /opt/aiperf && /opt/aiperf/bin/pip install aiperf

Steps, all in one run on one machine:
1. A verifier and a drafter on loopback (specdec.launcher.LocalCluster; `--verifier-arg` /
   `--drafter-arg` pass flags on), and `specdec serve openai` in front of the drafter.
2. The Spec-Bench prompts (`--rows`, `--per-row`) become an AIPerf single_turn JSONL file.
3. For each concurrency (`--concurrency`, default 1 8) and mode (on: the drafter's defaults;
   off: `"speculation": {"num_draft_tokens": 0}`), in alternating order: `aiperf profile
   --endpoint-type chat --streaming`, greedy, `--max-tokens` new tokens at most, token counts
   from the server's usage; its summary (TTFT, inter-token latency, request latency, output
   token throughput) is read from its `profile_export_aiperf.json`.
4. The gateway's overhead: at concurrency 1 the same prompts, greedy, alternately through the
   gateway (the `openai` package, streaming) and straight to the drafter (`specdec.Client`,
   streaming), `--overhead-rounds` times. Per request, per-token latency = (last - first token
   time) / (tokens - 1); the ratio of the two medians (gateway / direct) is reported, with the
   median of the per-prompt ratios beside it.

Writes `report.md`, `report.json` and AIPerf's artifacts under bench/results/openai_load-<stamp>/.

    python -m bench.openai_load --aiperf /opt/aiperf/bin/aiperf --per-row 4 --max-tokens 128
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import machine
from bench.prompts import QUESTIONS_FILE, TASKS, Prompt, bench_dir, load_questions, select
from specdec.client import Client
from specdec.launcher import LocalCluster, Service
from specdec.model_files import tokenizer_dir

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {"on": {}, "off": {"speculation": {"num_draft_tokens": 0}}}
METRICS = ("time_to_first_token", "inter_token_latency", "request_latency", "output_token_throughput", "output_sequence_length")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--aiperf", default="aiperf", help="the aiperf executable")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--rows", nargs="+", default=list(TASKS), help="Spec-Bench tasks or categories")
    p.add_argument("--per-row", type=int, default=4, help="prompts per row")
    p.add_argument("--max-tokens", type=int, default=128, help="new tokens per request at most")
    p.add_argument("--requests-per-client", type=int, default=4, help="AIPerf requests = this x concurrency (at least the prompts)")
    p.add_argument("--overhead-rounds", type=int, default=2, help="passes over the prompts for the gateway-vs-client comparison")
    p.add_argument("--drafter", default="", help="a running drafter's HOST:PORT (default: start a verifier and a drafter)")
    p.add_argument("--verifier-arg", action="append", default=[], help="extra verifier flag (repeatable)")
    p.add_argument("--drafter-arg", action="append", default=[], help="extra drafter flag (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="results folder (default bench/results/openai_load-<stamp>)")
    return p.parse_args(argv)


def write_dataset(prompts: Sequence[Prompt], path: Path) -> None:
    path.write_text("".join(json.dumps({"type": "single_turn", "text": p.text}) + "\n" for p in prompts))


def wait_healthy(base_url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the gateway at {base_url} is not healthy after {timeout:.0f} s")


def run_aiperf(args: argparse.Namespace, base_url: str, model: str, dataset: Path, prompts: int, concurrency: int,
               mode: str, out: Path) -> dict[str, Any]:
    """One AIPerf run; its summary metrics by tag (avg, p50, p99, unit)."""
    extra = {"temperature": 0, **MODES[mode]}
    command = [
        args.aiperf, "profile", "--model", model, "--url", base_url, "--endpoint-type", "chat", "--streaming",
        "--concurrency", str(concurrency), "--request-count", str(max(prompts, args.requests_per_client * concurrency)),
        "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
        "--extra-inputs", json.dumps({**extra, "max_completion_tokens": args.max_tokens}),
        "--tokenizer", str(tokenizer_dir("default")), "--use-server-token-count",
        "--output-artifact-dir", str(out), "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics",
    ]
    print(f"$ {' '.join(command)}", flush=True)
    # A local tokenizer folder: AIPerf's offline mode (HF_HUB_OFFLINE) would look it up as a hub id.
    run = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    (out / "aiperf.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(f"aiperf failed ({run.returncode}); see {out / 'aiperf.log'}:\n{(run.stdout + run.stderr)[-2000:]}")
    export = json.loads(next(out.rglob("profile_export_aiperf.json")).read_text())
    records = export.get("records", export)
    return {tag: records.get(tag) for tag in METRICS}


def aiperf_version(executable: str) -> str:
    """The aiperf package's version in the virtualenv that holds `executable`."""
    python = Path(executable).with_name("python")
    try:
        done = subprocess.run([str(python), "-c", "from importlib.metadata import version; print(version('aiperf'))"],
                              capture_output=True, text=True, timeout=60)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def per_token_seconds(first: float | None, last: float | None, tokens: int) -> float | None:
    return None if first is None or last is None or tokens < 2 else (last - first) / (tokens - 1)


def through_gateway(base_url: str, model: str, prompt: Prompt, max_tokens: int) -> float | None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0)
    first = last = None
    tokens = 0
    for chunk in client.chat.completions.create(model=model, messages=prompt.messages, max_tokens=max_tokens,  # type: ignore[call-overload]
                                                temperature=0, stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
    return per_token_seconds(first, last, tokens)


def direct(address: str, prompt: Prompt, max_tokens: int) -> float | None:
    first = last = None
    tokens = 0
    with Client(address) as client:
        for chunk in client.stream(messages=prompt.messages, max_new_tokens=max_tokens, temperature=0):
            tokens += len(chunk.token_ids)
            if chunk.text:
                last = time.perf_counter()
                first = first or last
    return per_token_seconds(first, last, tokens)


def overhead(base_url: str, address: str, model: str, prompts: Sequence[Prompt], max_tokens: int, rounds: int) -> dict[str, Any]:
    """Per-token latency through the gateway and straight to the drafter, alternating per prompt."""
    gateway: list[float] = []
    ours: list[float] = []
    ratios: list[float] = []
    for round_ in range(rounds):
        for i, prompt in enumerate(prompts):
            order = ("gateway", "direct") if (i + round_) % 2 == 0 else ("direct", "gateway")
            got = {k: through_gateway(base_url, model, prompt, max_tokens) if k == "gateway" else direct(address, prompt, max_tokens)
                   for k in order}
            if got["gateway"] and got["direct"]:
                gateway.append(got["gateway"])
                ours.append(got["direct"])
                ratios.append(got["gateway"] / got["direct"])
    if not ratios:
        return {"pairs": 0}
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {
        "pairs": len(ratios),
        "gateway_ms_per_token_p50": 1000 * statistics.median(gateway),
        "client_ms_per_token_p50": 1000 * statistics.median(ours),
        "ratio_of_medians": statistics.median(gateway) / statistics.median(ours),
        "median_ratio": statistics.median(ratios),
        "ratio_quartiles": [quartiles[0], quartiles[2]],
    }


def report(results: dict[str, Any]) -> str:
    lines = [f"# AIPerf against the OpenAI gateway ({results['started']})", "", f"command: `{results['command']}`", "",
             f"machine: `{json.dumps(results['machine'])}`", "", f"AIPerf {results['aiperf_version']}", "",
             f"prompts: {results['prompts']} Spec-Bench prompts ({', '.join(results['rows'])}), greedy, at most "
             f"{results['max_tokens']} new tokens", "",
             "| concurrency | speculation | TTFT p50 (ms) | ITL p50 (ms) | request p50 (s) | output tok/s | output tokens avg |",
             "|---|---|---|---|---|---|---|"]
    for run in results["runs"]:
        m = run["metrics"]

        def stat(tag: str, key: str = "p50", scale: float = 1.0) -> str:
            value = (m.get(tag) or {}).get(key)
            return "-" if value is None else f"{value * scale:.1f}"

        lines.append(f"| {run['concurrency']} | {run['mode']} | {stat('time_to_first_token')} | {stat('inter_token_latency')} | "
                     f"{stat('request_latency', scale=1e-3)} | {stat('output_token_throughput', 'avg')} | "
                     f"{stat('output_sequence_length', 'avg')} |")
    o = results["overhead"]
    if o.get("pairs"):
        low, high = o["ratio_quartiles"]
        lines += ["", f"Gateway vs `specdec.Client` at concurrency 1, speculation on ({o['pairs']} request pairs, alternating): "
                  f"per-token latency p50 {o['gateway_ms_per_token_p50']:.2f} ms vs {o['client_ms_per_token_p50']:.2f} ms, "
                  f"ratio of medians {o['ratio_of_medians']:.3f} (gateway overhead {100 * (o['ratio_of_medians'] - 1):+.1f}%), "
                  f"median of per-pair ratios {o['median_ratio']:.3f} (quartiles {low:.3f}, {high:.3f})."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = datetime.now(timezone.utc)
    out = args.out or RESULTS / f"openai_load-{started:%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    prompts = select(load_questions(bench_dir() / QUESTIONS_FILE), args.rows, args.per_row)
    dataset = out / "prompts.jsonl"
    write_dataset(prompts, dataset)
    with contextlib.ExitStack() as stack:
        address = args.drafter or stack.enter_context(LocalCluster(out / "logs", args.verifier_arg, args.drafter_arg)).address
        gateway = Service("openai", ["--drafter", address], out / "logs" / "gateway.log")
        try:
            base_url = f"http://127.0.0.1:{gateway.port}"
            wait_healthy(base_url)
            with urllib.request.urlopen(f"{base_url}/v1/models", timeout=10) as response:
                model = json.loads(response.read())["data"][0]["id"]
            runs = []
            for i, concurrency in enumerate(args.concurrency):
                for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
                    folder = out / f"c{concurrency}-{mode}"
                    folder.mkdir(exist_ok=True)
                    metrics = run_aiperf(args, base_url, model, dataset, len(prompts), concurrency, mode, folder)
                    runs.append({"concurrency": concurrency, "mode": mode, "metrics": metrics})
            extra = overhead(base_url, address, model, prompts, args.max_tokens, args.overhead_rounds)
        finally:
            gateway.stop()
    results = {"started": started.isoformat(timespec="seconds"), "command": " ".join(["python -m bench.openai_load", *(argv or sys.argv[1:])]),
               "aiperf_version": aiperf_version(args.aiperf), "machine": machine.describe(), "rows": args.rows,
               "prompts": len(prompts), "max_tokens": args.max_tokens, "runs": runs, "overhead": extra}
    (out / "report.json").write_text(json.dumps(results, indent=2))
    text = report(results)
    (out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
