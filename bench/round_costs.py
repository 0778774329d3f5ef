"""Where a generation's time goes, per speculation configuration: one session at a time.

For each configuration (named as in `specdec bench --configs`: bench/systems.py), the same Spec-Bench prompts (the same seeds) are generated, `--repeats`
times, interleaved so that drift of the machine falls on all alike, and the generation
statistics are summed (drafter.proto, GenerationStats): milliseconds per generated token, and per
round the drafted nodes, the drafting milliseconds, the verifier's (`verify_seconds`: queueing,
the target pass, acceptance), the network's (round trip minus the verifier's), what is left
(the drafter's bookkeeping between rounds), the KB of q sent, the share of rounds that sent a
hybrid session's copy draft, the first round's milliseconds (the prompt's prefill) per prompt and
the milliseconds after it per generated token; the drafter each session ran (a busy drafter
process serves `defaults` with copies); and per draft position, the share of rounds that drafted it and of
those the share that accepted it. Every configuration generates the same text for a prompt, at
temperature 0 and, seeded under the exact rule, at temperature > 0 too (the exponential race:
docs/concepts/exactness.md); a lossy rule (`@RULE`) samples its own.

`--drafter-args` (repeatable) runs each configuration once more per given drafter service
setting (e.g. `--drafter-args=--onnx-prompt-window=128`): one more drafter process each, all
beside the same verifier, taking turns prompt by prompt with the default drafter (each one
first in turn).

`--split-cores` runs each configuration once more on a second cluster whose verifier is pinned
to the first CPU and whose drafter to the last (`--cpus`; docs/design/overlap-off-on-shared-cores.md),
as separate pods would have cores of their own; its rows are named "(a core each)", and
it takes turns with the others in the same way.

    flock /tmp/specdec-cpu.lock python -m bench.round_costs --temperature 1 --rows mt_bench --per-row 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from bench.prompts import add_prompts_flag, load_bench_questions, select
from bench.systems import parse_config
from specdec.client import Client, GenerationStats
from specdec.launcher import LocalCluster, Service

SPLIT = "(a core each)"
CONFIGS = "onnx-quantized-k4,onnx-quantized-k6,onnx-quantized-k6-auto,defaults"
FIELDS = (
    "generated_tokens", "total_seconds", "rounds", "drafted_tokens", "draft_seconds", "verify_seconds", "network_seconds", "q_bytes",
    "copied_rounds", "time_to_first_token_seconds",
)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--rows", default="mt_bench", help="Spec-Bench tasks, comma-separated")
    p.add_argument("--per-row", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--configs", default=CONFIGS, help="comma-separated configuration names, as for `specdec bench`")
    p.add_argument(
        "--drafter-args", action="append", default=[],
        help="arguments of one more drafter process (space-separated), whose rows are named by them; repeatable",
    )
    p.add_argument("--split-cores", action="store_true", help="also on a cluster with the verifier on the first CPU and the drafter on the last")
    add_prompts_flag(p)
    return p.parse_args(argv)


def row_name(config: str, variant: str) -> str:
    """A result row's name: the configuration, then the drafter process's arguments if any."""
    return f"{config} {variant}".strip()


def row(name: str, totals: dict[str, float], prompts: int) -> str:
    rounds = max(1.0, totals["rounds"])
    first = totals["time_to_first_token_seconds"]
    other = totals["total_seconds"] - totals["draft_seconds"] - totals["verify_seconds"] - totals["network_seconds"]
    per_round = [totals["drafted_tokens"] / rounds] + [1000 * totals[k] / rounds for k in ("draft_seconds", "verify_seconds", "network_seconds")]
    return (
        f"| {name} | {1000 * totals['total_seconds'] / max(1.0, totals['generated_tokens']):.1f} | {int(totals['generated_tokens'])} "
        f"| {int(totals['rounds'])} | " + " | ".join(f"{v:.1f}" for v in per_round)
        + f" | {1000 * other / rounds:.1f} | {totals['q_bytes'] / rounds / 1000:.1f} | {totals['copied_rounds'] / rounds:.2f} "
        f"| {1000 * first / max(1, prompts):.0f} | {1000 * (totals['total_seconds'] - first) / max(1.0, totals['generated_tokens']):.1f} |"
    )


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    try:
        configs = [parse_config(name) for name in args.configs.split(",")]
    except ValueError as error:
        raise SystemExit(str(error)) from error
    prompts = select(load_bench_questions(args.prompts), args.rows.split(","), args.per_row)
    variants = ["", *args.drafter_args, *([SPLIT] if args.split_cores else [])]
    names = [row_name(config.name, variant) for config in configs for variant in variants]
    totals = {name: dict.fromkeys(FIELDS, 0.0) for name in names}
    positions = {name: {"drafted": Counter(), "accepted": Counter()} for name in names}
    drafters = {name: Counter() for name in names}  # the drafter each session ran (a busy process falls back to copy)
    with tempfile.TemporaryDirectory() as logs, LocalCluster(Path(logs), verifier_args=["--prefix-cache-tokens=0"]) as cluster, ExitStack() as stack:
        clients = {"": stack.enter_context(Client(cluster.address))}
        for i, variant in enumerate(args.drafter_args):
            service = Service("drafter", ["--verifier", cluster.verifier.address, *variant.split()], Path(logs) / f"drafter{i}.log")
            stack.callback(service.stop)
            service.wait_serving(600)
            clients[variant] = stack.enter_context(Client(service.address))
        if args.split_cores:
            cpus = sorted(os.sched_getaffinity(0))
            split = stack.enter_context(LocalCluster(
                Path(logs) / "split", verifier_args=["--prefix-cache-tokens=0", f"--cpus={cpus[0]}"], drafter_args=[f"--cpus={cpus[-1]}"],
            ))
            clients[SPLIT] = stack.enter_context(Client(split.address))
        for client in clients.values():  # warm-up
            client.generate(messages=prompts[0].messages, max_new_tokens=8, temperature=args.temperature, seed=1)
        for _ in range(args.repeats):
            for config in configs:
                for i, prompt in enumerate(prompts):
                    for variant in variants[i % len(variants):] + variants[: i % len(variants)]:  # each goes first in turn
                        stats: GenerationStats = clients[variant].generate(
                            messages=prompt.messages, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                            seed=100 + i, **config.request_fields(),
                        ).stats
                        name = row_name(config.name, variant)
                        drafters[name][stats.drafter] += 1
                        for key in FIELDS:
                            totals[name][key] += getattr(stats, key)
                        for key in ("drafted", "accepted"):
                            positions[name][key].update(dict(enumerate(getattr(stats, f"{key}_by_position"), 1)))
    print(f"{len(prompts)} prompts ({args.rows}) x {args.repeats}, temperature {args.temperature}, {args.max_new_tokens} new tokens at most\n")
    print("| config | ms per token | tokens | rounds | drafted per round | drafting ms per round | verifier ms per round "
          "| network ms per round | other ms per round | q KB per round | copied rounds | first round ms per prompt | later ms per token |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        print(row(name, totals[name], len(prompts) * args.repeats))
    print("\nSessions per drafter: " + "; ".join(f"{name}: {dict(drafters[name])}" for name in names))
    depth = max((max(p["drafted"], default=0) for p in positions.values()), default=0)
    print("\nPer draft position: the share of rounds that drafted it, and the share of those that accepted it\n")
    print("| config | " + " | ".join(f"position {j}" for j in range(1, depth + 1)) + " |")
    print("|---|" + "---|" * depth)
    for name in names:
        drafted, accepted, rounds = positions[name]["drafted"], positions[name]["accepted"], max(1.0, totals[name]["rounds"])
        cells = (f"{drafted[j] / rounds:.2f} / {accepted[j] / max(1, drafted[j]):.2f}" for j in range(1, depth + 1))
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
