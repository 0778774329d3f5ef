"""This checkout's defaults against another checkout's, on Spec-Bench prompts, in one run.

    python -m bench.checkout_ab --other ../previous --per-category 6 --temperature 0
    python -m bench.checkout_ab --other . --other-verifier-arg=--cpu-compiled-passes=true
    python -m bench.checkout_ab --other . --verifier-arg=--dtype=bfloat16 --other-verifier-arg=--cpu-float32-copies=false
    python -m bench.checkout_ab --other ../previous --drafter-arg=--onnx-quantized-dir=/tmp/new --other-drafter-arg=--onnx-quantized-dir=/tmp/old

For a change that must keep behaviour where it was measured to win (a redesign of the drafter or
the verifier's pricing): two service pairs run side by side, one from this checkout and one from
`--other` (specdec.launcher.LocalCluster's `checkout`; `.` is this one, to compare a verifier
setting given to the other's verifier by `--other-verifier-arg`; `--verifier-arg` goes to both;
`--drafter-arg` and `--other-drafter-arg` go to this and the other checkout's drafter, e.g. each
its own build of a model drafter where the two build different graphs). Each prompt runs
`baseline` (this checkout, k = 0), `defaults` (this checkout) and `other-defaults`, in alternating
order, like `specdec bench`. The table has each system's speedup over the one baseline; below it,
per task, the median over prompts of defaults' tok/s over other-defaults' on the same prompt, with
a bootstrap 90% interval (bench/report.py, paired_ratio). At T = 0 every output must equal the
baseline's (bench/spec_bench.py, problems). Writes checkout_ab-<timestamp>.md and .json to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from bench.machine import describe, git_commit
from bench.prompts import TASKS, add_prompts_flag, load_bench_questions, select
from bench.report import OVERALL, markdown_table, paired_ratio, summarize
from bench.spec_bench import problems, run
from bench.systems import BASELINE, SERVER_DEFAULTS, SpecdecSystem, parse_config
from specdec.client import Client
from specdec.launcher import LocalCluster

OTHER = "other-defaults"
VERIFIER_ARGS = ["--prefix-cache-tokens", "0"]  # as `specdec bench`: no system gets another's prefill free


def ratio_table(records: Sequence, rows: Sequence[str]) -> str:
    """Per row: median over prompts of tok/s(defaults) / tok/s(other-defaults), 90% interval."""
    lines = ["| task | defaults / other-defaults (median) | 90% interval |", "|---|---|---|"]
    for row in [*rows, OVERALL]:
        found = paired_ratio(records, row, SERVER_DEFAULTS, OTHER)
        if found:
            median, low, high = found
            lines.append(f"| {row} | {median:.3f} | {low:.3f}-{high:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--other", type=Path, required=True, help="the other checkout's folder (its protos generated)")
    p.add_argument("--per-category", type=int, default=6, metavar="N")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verifier-arg", action="append", default=[], metavar="ARG", help="an argument for both verifiers (repeatable), e.g. --verifier-arg=--dtype=bfloat16")
    p.add_argument("--other-verifier-arg", action="append", default=[], metavar="ARG", help="an argument for the other checkout's verifier only (repeatable), e.g. --other-verifier-arg=--cpu-compiled-passes=true")
    p.add_argument("--drafter-arg", action="append", default=[], metavar="ARG", help="an argument for this checkout's drafter (repeatable)")
    p.add_argument("--other-drafter-arg", action="append", default=[], metavar="ARG", help="an argument for the other checkout's drafter (repeatable)")
    add_prompts_flag(p)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(list(argv))
    if not (args.other / "specdec" / "v1").is_dir():
        p.error(f"--other {args.other}: no specdec/v1 there (run specdec/protogen.py in it)")
    rows = list(TASKS)
    prompts = select(load_bench_questions(args.prompts), rows, args.per_category)
    started = datetime.now(timezone.utc)
    machine = describe()
    logs = Path(tempfile.mkdtemp(prefix="specdec-ab-"))
    with (
        LocalCluster(logs / "this", verifier_args=[*VERIFIER_ARGS, *args.verifier_arg], drafter_args=args.drafter_arg) as this,
        LocalCluster(
            logs / "other", verifier_args=[*VERIFIER_ARGS, *args.verifier_arg, *args.other_verifier_arg], drafter_args=args.other_drafter_arg,
            checkout=args.other,
        ) as other,
        Client(this.address) as this_client,
        Client(other.address) as other_client,
    ):
        systems = [
            SpecdecSystem(this_client, parse_config(BASELINE)),
            SpecdecSystem(this_client, parse_config(SERVER_DEFAULTS)),
            SpecdecSystem(other_client, dataclasses.replace(parse_config(SERVER_DEFAULTS), name=OTHER)),
        ]
        print(f"{len(prompts)} prompts x {len(systems)} systems; logs in {logs}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        records = run(systems, prompts, args.max_new_tokens, args.temperature, args.seed)
        elapsed = time.perf_counter() - t0
    names = [s.name for s in systems]
    greedy = args.temperature == 0.0
    warnings, failed = problems(records, {SERVER_DEFAULTS, OTHER})
    stamp = started.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    report = (
        f"# This checkout ({machine['git_commit']}) against {args.other} ({git_commit(args.other)})"
        f"{' with ' + ' '.join(args.other_verifier_arg + args.other_drafter_arg) if args.other_verifier_arg or args.other_drafter_arg else ''}\n\n"
        f"`python -m bench.checkout_ab {' '.join(argv)}`, {started:%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s; "
        f"{len(prompts)} prompts, {args.max_new_tokens} new tokens, temperature {args.temperature}; "
        f"load average {machine.get('load_average')} at start.\n\n"
        f"{markdown_table(summarize(records, rows, names, greedy))}\n\n{ratio_table(records, rows)}\n\n"
        f"Failed generations: {sum(r.error is not None for r in records)}.\n"
        + "".join(f"Warning: {w}\n" for w in warnings)
    )
    (args.out / f"checkout_ab-{stamp}.md").write_text(report)
    (args.out / f"checkout_ab-{stamp}.json").write_text(
        json.dumps({"argv": list(argv), "machine": machine, "records": [dataclasses.asdict(r) for r in records]}, indent=1)
    )
    print(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
