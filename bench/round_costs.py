"""Where a generation's time goes, per speculation configuration: one session at a time.

For each configuration (named as in `specdec bench --configs`: bench/systems.py), the same Spec-Bench prompts (the same seeds) are generated, `--repeats`
times, interleaved so that drift of the machine falls on all alike, and the generation
statistics are summed (drafter.proto, GenerationStats): milliseconds per generated token, and per
round the drafted nodes, the drafting milliseconds, the verifier's (`verify_seconds`: queueing,
the target pass, acceptance), the network's (round trip minus the verifier's), what is left
(the drafter's bookkeeping between rounds), the KB of q sent and the share of rounds that sent a
hybrid session's copy draft; and per draft position, the share of rounds that drafted it and of
those the share that accepted it. At temperature 0 every configuration generates the same text;
at temperature > 0 each its own sample, so per-token figures compare different texts.

    flock /tmp/specdec-cpu.lock python -m bench.round_costs --temperature 1 --rows mt_bench --per-row 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.prompts import QUESTIONS_FILE, bench_dir, load_questions, select
from bench.systems import parse_config
from specdec.client import Client, GenerationStats
from specdec.launcher import LocalCluster

CONFIGS = "onnx-quantized-k4,onnx-quantized-k6,onnx-quantized-k6-auto,defaults"
FIELDS = (
    "generated_tokens", "total_seconds", "rounds", "drafted_tokens", "draft_seconds", "verify_seconds", "network_seconds", "q_bytes",
    "copied_rounds",
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--rows", default="mt_bench", help="Spec-Bench tasks, comma-separated")
    p.add_argument("--per-row", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--configs", default=CONFIGS, help="comma-separated configuration names, as for `specdec bench`")
    return p.parse_args(argv)


def row(name: str, totals: dict[str, float]) -> str:
    rounds = max(1.0, totals["rounds"])
    other = totals["total_seconds"] - totals["draft_seconds"] - totals["verify_seconds"] - totals["network_seconds"]
    per_round = [totals["drafted_tokens"] / rounds] + [1000 * totals[k] / rounds for k in ("draft_seconds", "verify_seconds", "network_seconds")]
    return (
        f"| {name} | {1000 * totals['total_seconds'] / max(1.0, totals['generated_tokens']):.1f} | {int(totals['generated_tokens'])} "
        f"| {int(totals['rounds'])} | " + " | ".join(f"{v:.1f}" for v in per_round)
        + f" | {1000 * other / rounds:.1f} | {totals['q_bytes'] / rounds / 1000:.1f} | {totals['copied_rounds'] / rounds:.2f} |"
    )


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    try:
        configs = [parse_config(name) for name in args.configs.split(",")]
    except ValueError as error:
        raise SystemExit(str(error)) from error
    prompts = select(load_questions(bench_dir() / QUESTIONS_FILE), args.rows.split(","), args.per_row)
    totals = {config.name: dict.fromkeys(FIELDS, 0.0) for config in configs}
    positions = {config.name: {"drafted": Counter(), "accepted": Counter()} for config in configs}
    with tempfile.TemporaryDirectory() as logs, LocalCluster(Path(logs), verifier_args=["--prefix-cache-tokens=0"]) as cluster:
        with Client(cluster.address) as client:
            client.generate(messages=prompts[0].messages, max_new_tokens=8, temperature=args.temperature, seed=1)  # warm-up
            for _ in range(args.repeats):
                for config in configs:
                    for i, prompt in enumerate(prompts):
                        stats: GenerationStats = client.generate(
                            messages=prompt.messages, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            seed=100 + i, **config.request_fields(),
                        ).stats
                        for key in FIELDS:
                            totals[config.name][key] += getattr(stats, key)
                        for key in ("drafted", "accepted"):
                            positions[config.name][key].update(dict(enumerate(getattr(stats, f"{key}_by_position"), 1)))
    print(f"{len(prompts)} prompts ({args.rows}) x {args.repeats}, temperature {args.temperature}, {args.max_new_tokens} new tokens at most\n")
    print("| config | ms per token | tokens | rounds | drafted per round | drafting ms per round | verifier ms per round "
          "| network ms per round | other ms per round | q KB per round | copied rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for config in configs:
        print(row(config.name, totals[config.name]))
    depth = max((max(p["drafted"], default=0) for p in positions.values()), default=0)
    print("\nPer draft position: the share of rounds that drafted it, and the share of those that accepted it\n")
    print("| config | " + " | ".join(f"position {j}" for j in range(1, depth + 1)) + " |")
    print("|---|" + "---|" * depth)
    for config in configs:
        drafted, accepted, rounds = positions[config.name]["drafted"], positions[config.name]["accepted"], max(1.0, totals[config.name]["rounds"])
        cells = (f"{drafted[j] / rounds:.2f} / {accepted[j] / max(1, drafted[j]):.2f}" for j in range(1, depth + 1))
        print(f"| {config.name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
