"""`specdec bench-lossy`: the exact acceptance rule against the opt-in lossy ones (issue 7).

Per Spec-Bench task: acceptance rate, mean acceptance length and tokens/s ratio to the baseline
(the same services without speculation) for exact, lenient l in {0.5, 0.3, 0.1} and mentored
D in {0.01, 0.1, 0.5}, sampled at temperature 1; next to quality signals: the mean per-token
log-likelihood of the outputs under the target (bench/output_quality.py) and, on the
math_reasoning (GSM8K) questions, how often the final numeric answer equals the exact rule's
(same prompt, same seed) and the reference. The greedy lenient variant runs at temperature 0 on
a smaller subset. Services start and prompts alternate as in `specdec bench` (bench/spec_bench.py).
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

from bench.machine import describe
from bench.output_quality import TargetScorer, final_number, reference_answer
from bench.prompts import TASKS, Prompt, add_prompts_flag, load_bench_questions, select
from bench.report import OVERALL, Record, summarize
from bench.spec_bench import run
from bench.systems import BASELINE, Decoding, Output, SpecdecSystem, System, parse_config
from specdec.client import Client
from specdec.launcher import LocalCluster

SAMPLED_RULES = ("exact", "lenient:0.5", "lenient:0.3", "lenient:0.1", "mentored:0.01", "mentored:0.1", "mentored:0.5")
GREEDY_RULES = ("exact", "lenient:0.5", "lenient:0.3", "lenient:0.1")
MATH = "math_reasoning"


class Recorded:
    """A system that keeps its outputs, by prompt text, for the quality measures afterwards."""

    def __init__(self, system: System) -> None:
        self.system, self.name = system, system.name
        self.outputs: dict[str, Output] = {}

    def generate(self, messages: list[dict[str, str]], decoding: Decoding) -> Output:
        out = self.system.generate(messages, decoding)
        self.outputs[messages[0]["content"]] = out
        return out


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specdec bench-lossy", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-category", type=int, default=2, help="prompts per task other than math_reasoning (default 2)")
    p.add_argument("--math-prompts", type=int, default=3, help="math_reasoning (GSM8K) prompts (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=40, help="new tokens per prompt (default 40)")
    p.add_argument("--math-max-new-tokens", type=int, default=128, help="new tokens per math prompt, room for an answer (default 128)")
    p.add_argument("--greedy-per-category", type=int, default=1, help="prompts per task at temperature 0 (0 skips; default 1)")
    p.add_argument("--config", default="copy-k4", help="drafter configuration, as in specdec bench (default copy-k4)")
    p.add_argument("--seed", type=int, default=0, help="prompt i is sampled with seed + i by every rule")
    add_prompts_flag(p)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    return p.parse_args(list(argv))


def _systems(client: Client, config: str, rules: Sequence[str]) -> list[Recorded]:
    base = parse_config(config)
    return [Recorded(SpecdecSystem(client, parse_config(BASELINE)))] + [
        Recorded(SpecdecSystem(client, dataclasses.replace(base, name=rule, acceptance=rule))) for rule in rules
    ]


def _part(client: Client, rules: Sequence[str], groups: Sequence[tuple[list[Prompt], int]], temperature: float,
          args: argparse.Namespace) -> tuple[list[Record], list[Recorded]]:
    """Every rule (and the baseline) on every prompt group, each with its own token budget."""
    systems = _systems(client, args.config, rules)
    records: list[Record] = []
    for prompts, max_new_tokens in groups:
        if prompts:
            records += run(systems, prompts, max_new_tokens, temperature, args.seed)
    return records, systems


def _log_likelihoods(scorer: TargetScorer, systems: Sequence[Recorded], prompts: Sequence[Prompt]) -> dict[tuple[str, int], tuple[float, int]]:
    """(system, question) -> (mean log-likelihood per output token, output tokens)."""
    out = {}
    for prompt in prompts:
        ids = scorer.prompt_ids(prompt.messages)
        for system in systems:
            generated = system.outputs.get(prompt.text)
            if generated is not None and generated.token_ids:
                out[(system.name, prompt.question_id)] = (scorer.mean_log_likelihood(ids, generated.token_ids), len(generated.token_ids))
    return out


def _table(records: Sequence[Record], rows: Sequence[str], names: Sequence[str], greedy: bool,
           ll: dict[tuple[str, int], tuple[float, int]]) -> str:
    header = ("| task | rule | prompts | tok/s (median) | speedup vs baseline | acceptance rate | mean acceptance length "
              "| log-likelihood / token |" + (" outputs differing from exact |" if greedy else ""))
    lines = [header, "|" + "---|" * (9 if greedy else 8)]
    exact_ids = {r.question_id: r.text for r in records if r.system == "exact"}
    for s in summarize(records, rows, names, greedy=False):
        chosen = [r for r in records if r.system == s.system and (s.row == OVERALL or r.row == s.row) and r.error is None]
        scored = [ll[(s.system, r.question_id)] for r in chosen if (s.system, r.question_id) in ll]
        tokens = sum(n for _, n in scored)
        mean_ll = sum(v * n for v, n in scored) / tokens if tokens else None
        cells = [f"**{s.row}**" if s.row == OVERALL else s.row, s.system, str(s.prompts),
                 _fmt(s.tokens_per_second, ".1f"), "1.00x" if s.system == BASELINE else _fmt(s.speedup, ".2f", "x"),
                 _fmt(s.acceptance_rate, ".2f"), _fmt(s.mean_acceptance_length, ".2f"), _fmt(mean_ll, ".3f")]
        if greedy:
            cells.append(str(sum(r.text != exact_ids.get(r.question_id) for r in chosen)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def _gsm8k(records: Sequence[Record], questions: dict[int, dict], names: Sequence[str]) -> tuple[str, list[dict]]:
    """Per rule: math prompts whose final number equals the exact rule's, and the reference.
    An output cut at the token budget (not finished by EOS) counts with its last number."""
    math = [r for r in records if r.row == MATH and r.error is None]
    exact = {r.question_id: final_number(r.text or "") for r in math if r.system == "exact"}
    rows = []
    lines = ["| rule | math prompts | finished (EOS) | answer found | same final answer as exact | equal to the reference |",
             "|---|---|---|---|---|---|"]
    for name in names:
        mine = [r for r in math if r.system == name]
        answers = {r.question_id: final_number(r.text or "") for r in mine}
        finished = sum(r.finish_reason == "eos" for r in mine)
        same = sum(answers[q] is not None and answers[q] == exact.get(q) for q in answers)
        right = sum(answers[q] is not None and answers[q] == reference_answer(questions[q]) for q in answers)
        found = sum(a is not None for a in answers.values())
        rows.append({"rule": name, "prompts": len(mine), "finished": finished, "found": found, "same_as_exact": same,
                     "correct": right, "answers": answers})
        lines.append(f"| {name} | {len(mine)} | {finished} | {found} | {same}/{len(mine)} | {right}/{len(mine)} |")
    return "\n".join(lines), rows


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    questions = load_bench_questions(args.prompts)
    by_id = {q["question_id"]: q for q in questions}
    others = [t for t in TASKS if t != MATH]
    sampled_groups = [(select(questions, others, args.per_category), args.max_new_tokens),
                      (select(questions, [MATH], args.math_prompts), args.math_max_new_tokens)]
    greedy_groups = [(select(questions, others, args.greedy_per_category), args.max_new_tokens),
                     (select(questions, [MATH], args.greedy_per_category), args.math_max_new_tokens)] if args.greedy_per_category else []
    started = datetime.now(timezone.utc)
    machine = describe()
    log_dir = Path(tempfile.mkdtemp(prefix="specdec-bench-lossy-"))
    print(f"service logs in {log_dir}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with LocalCluster(log_dir) as cluster, Client(cluster.address) as client:
        sampled, sampled_systems = _part(client, SAMPLED_RULES, sampled_groups, 1.0, args)
        greedy, greedy_systems = _part(client, GREEDY_RULES, greedy_groups, 0.0, args) if greedy_groups else ([], [])
    generation_seconds = time.perf_counter() - t0
    machine["load_average_end"] = describe()["load_average"]

    scorer = TargetScorer()  # after the services stopped: scoring never competes with timing
    all_prompts = [p for prompts, _ in sampled_groups + greedy_groups for p in prompts]
    ll_sampled = _log_likelihoods(scorer, sampled_systems, all_prompts)
    ll_greedy = _log_likelihoods(scorer, greedy_systems, all_prompts)

    rows = [*others, MATH]
    sampled_names, greedy_names = [BASELINE, *SAMPLED_RULES], [BASELINE, *GREEDY_RULES]
    gsm8k_text, gsm8k_rows = _gsm8k(sampled, by_id, sampled_names)
    text = (f"# Lossy acceptance, {started:%Y-%m-%d %H:%M} UTC\n\n"
            f"{machine['cpu_model']}, {machine['usable_cpus']} CPUs, torch {machine['torch']}, commit "
            f"{str(machine['git_commit'])[:12]}; drafter {args.config}; generation took {generation_seconds:.0f} s; "
            f"load average at the end {machine['load_average_end']}\n\n"
            f"## Temperature 1 ({args.per_category} prompts per task, {args.max_new_tokens} new tokens; "
            f"{args.math_prompts} math_reasoning prompts, {args.math_max_new_tokens} new tokens)\n\n"
            f"{_table(sampled, rows, sampled_names, False, ll_sampled)}\n\n"
            f"### GSM8K (math_reasoning) final answers, temperature 1, same seed per prompt\n\n{gsm8k_text}\n\n"
            "baseline is the exact rule without speculation: another exact sample, so its agreement with "
            "`exact` is the agreement that sampling noise alone leaves.\n")
    greedy_gsm8k: list[dict] = []
    if greedy:
        greedy_text, greedy_gsm8k = _gsm8k(greedy, by_id, greedy_names)
        text += (f"\n## Temperature 0, greedy lenience ({args.greedy_per_category} prompt(s) per task)\n\n"
                 f"{_table(greedy, rows, greedy_names, True, ll_greedy)}\n\n### GSM8K final answers, temperature 0\n\n{greedy_text}\n")
    text += ("\ntok/s: new tokens / wall seconds of one generate call; speedup: median over prompts of the ratio to "
             "the baseline on the same prompt; acceptance rate and mean acceptance length pooled (vLLM's definitions); "
             "log-likelihood / token: under the target at temperature 1, pooled over output tokens.\n")
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    (args.out / f"lossy_bench-{stamp}.md").write_text(text, encoding="utf-8")
    payload = {
        "run": {**{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "argv": list(argv),
                "started": started.isoformat(), "generation_seconds": generation_seconds},
        "machine": machine,
        "gsm8k": {"temperature_1": gsm8k_rows, "temperature_0": greedy_gsm8k},
        "log_likelihood": {"temperature_1": {f"{s}/{q}": v for (s, q), v in ll_sampled.items()},
                           "temperature_0": {f"{s}/{q}": v for (s, q), v in ll_greedy.items()}},
        "records": {"temperature_1": [dataclasses.asdict(r) for r in sampled], "temperature_0": [dataclasses.asdict(r) for r in greedy]},
    }
    (args.out / f"lossy_bench-{stamp}.json").write_text(json.dumps(payload, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {args.out}/lossy_bench-{stamp}.md and .json", file=sys.stderr)
    return 1 if any(r.error for r in [*sampled, *greedy]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
