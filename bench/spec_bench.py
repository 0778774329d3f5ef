"""`specdec bench`: Spec-Bench prompts through specdec's configurations (and optionally
transformers' own generate()), measured in one run, written as a Markdown table and JSON.

Each prompt runs every system once, in alternating order (A, B, C on one prompt; C, B, A on the
next) so slow drift of a shared machine hits all systems alike. Speedups pair each system with
the specdec baseline (k = 0, the same services without speculation) on the same prompt.
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

import grpc

from bench.machine import describe, verifier_info
from bench.prompts import TASKS, Prompt, add_prompts_flag, load_bench_questions, select
from bench.report import Record, Summary, decode_table, make_record, markdown_table, policy_table, summarize
from bench.plots import acceptance_plot, speedup_plot
from bench.systems import (
    DEFAULT_CONFIGS, TRANSFORMERS_REFERENCE, Decoding, Output, SpecdecConfig, SpecdecSystem, System, parse_config, parse_configs,
)
from specdec.client import Client
from specdec.launcher import LocalCluster

QUICK = {"per_category": 2, "max_new_tokens": 64}
DTYPES = ("float32", "bfloat16", "float16")
QUANTIZATIONS = ("none", "int8")  # the verifier's --quantization (verifier_svc/int8_weights.py)
DEFAULTS = {"per_category": 10, "max_new_tokens": 128}
WARM_UP_MESSAGES = [{"role": "user", "content": "Say hello."}]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="specdec bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK['per_category']} prompts per task, {QUICK['max_new_tokens']} new tokens (a few minutes)")
    p.add_argument("--per-category", type=int, default=None, metavar="N",
                   help=f"prompts per task or category (default {DEFAULTS['per_category']}; Spec-Bench's own: 80)")
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                   help=f"new tokens per prompt at most (default {DEFAULTS['max_new_tokens']}; Spec-Bench's own: 1024)")
    p.add_argument("--categories", default=",".join(TASKS), metavar="A,B",
                   help="report rows: Spec-Bench tasks (mt_bench, translation, summarization, qa, math_reasoning, rag) "
                        "or single MT-bench categories (writing, coding, ...); default: the six tasks")
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), metavar="A,B",
                   help="specdec configurations: baseline (k=0, always run), DRAFTER-kN (chains) or DRAFTER-kN-tM "
                        "(trees of M nodes), e.g. copy-k8, ngram-k4, copy-k4-t12; a suffix -POLICY (auto, leviathan, "
                        "specdec++, copy-confidence, fixed) and -overlap, e.g. copy-k8-auto-overlap")
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the peers on the same model (default: on): transformers' generate() plain (hf-generate), "
                        "with prompt lookup (hf-prompt-lookup) and with assisted generation (hf-assisted, when a draft "
                        "model is given or built); llama.cpp plain and with prompt lookup when llama-cpp-python is installed")
    p.add_argument("--assistant", type=Path, default=None, metavar="DIR",
                   help="transformers model folder of the draft model for hf-assisted (default: the distilled small "
                        "drafter of `specdec draft build small`, if built)")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="the verifier's --dtype (default float32); the peers run the model at the same width: "
                        "transformers in this dtype, llama.cpp on the GGUF re-typed to F32, BF16 or F16")
    p.add_argument("--quantization", choices=QUANTIZATIONS, default="none",
                   help="the verifier's --quantization (int8 needs --dtype bfloat16); the peers at the same precision: "
                        "transformers with the same int8 layers, llama.cpp on the GGUF re-typed to Q8_0")
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default) is greedy and checks outputs")
    p.add_argument("--seed", type=int, default=0, help="sampling seed; prompt i uses seed + i")
    p.add_argument("--verifier-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for the verifier (repeatable), e.g. --verifier-arg=--cpu-onnx-passes=true")
    p.add_argument("--policies-of", type=Path, default=None, metavar="JSON",
                   help="print the policy table of a saved run (its spec_bench-*.json) as this code computes it, and exit")
    add_prompts_flag(p)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                   help="folder for spec_bench-<timestamp>.md and .json (default: bench/results/)")
    args = p.parse_args(list(argv))
    preset = QUICK if args.quick else DEFAULTS
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.per_category < 1 or args.max_new_tokens < 1 or args.temperature < 0:
        p.error("--per-category and --max-new-tokens must be positive, --temperature not negative")
    return args


def _generate(system: System, prompt: Prompt, decoding: Decoding) -> Output | str:
    """The system's output, or the error message if the call failed (the run goes on)."""
    try:
        return system.generate(prompt.messages, decoding)
    except (grpc.RpcError, RuntimeError, ValueError) as error:
        detail = f"{error.code().name}: {error.details()}" if isinstance(error, grpc.RpcError) else repr(error)
        print(f"  {system.name} failed on question {prompt.question_id}: {detail}", file=sys.stderr)
        return detail


def run(systems: Sequence[System], prompts: Sequence[Prompt], max_new_tokens: int, temperature: float, seed: int) -> list[Record]:
    """Every system on every prompt, order reversed on every other prompt; systems[0] is the baseline."""
    for system in systems:
        system.generate(WARM_UP_MESSAGES, Decoding(8, temperature, seed))
    records: list[Record] = []
    for i, prompt in enumerate(prompts):
        decoding = Decoding(max_new_tokens, temperature, seed + i)
        order = list(systems) if i % 2 == 0 else list(reversed(systems))
        outputs = {s.name: _generate(s, prompt, decoding) for s in order}
        baseline, reference = outputs[systems[0].name], outputs.get(TRANSFORMERS_REFERENCE)
        records += [
            make_record(prompt, s.name, order.index(s), outputs[s.name], baseline, decoding.greedy, reference) for s in systems
        ]
        speeds = ", ".join(f"{r.system} {r.tokens_per_second:.1f}" for r in records[-len(systems):] if r.error is None)
        print(f"[{i + 1}/{len(prompts)}] {prompt.row} q{prompt.question_id}: tok/s {speeds}", file=sys.stderr, flush=True)
    return records


def problems(records: Sequence[Record], speculative: set[str]) -> tuple[list[str], bool]:
    """Warnings for the report, and whether the run failed: a generation failed, or a speculative
    configuration's greedy output differs from the baseline's (speculation must not change it)."""
    warnings = []
    lengths: dict[int, set[int]] = {}
    for r in records:
        if r.prompt_tokens is not None:
            lengths.setdefault(r.question_id, set()).add(r.prompt_tokens)
    # Every system must see the same prompt; a different length means a different chat template.
    warnings += [f"question {q}: systems saw prompts of different lengths {sorted(n)}" for q, n in lengths.items() if len(n) > 1]
    failed = [r for r in records if r.error is not None]
    wrong = [r for r in records if r.differs_from_baseline and r.system in speculative]
    if failed:
        warnings.append(f"{len(failed)} generations failed (see the JSON records)")
    if wrong:
        warnings.append("speculative greedy outputs differ from the baseline: "
                        + ", ".join(f"{r.system} on q{r.question_id} from token {r.first_difference}" for r in wrong))
    return warnings, bool(failed or wrong)


def policy_section(configs: Sequence[SpecdecConfig], summaries: Sequence[Summary], records: Sequence[Record]) -> str:
    """The report's policy table (report.policy_table), if the run had fixed lengths and others."""
    fixed = [c.name for c in configs if c.speculates and c.draft_policy == "fixed" and not c.overlap]
    others = [c.name for c in configs if c.speculates and c.name not in fixed]
    if not (fixed and others):
        return ""
    return (f"\n## Draft-length policies and overlap\n\nSpeedup vs baseline (verification rate / discard rate: target "
            f"passes and discarded drafts per generated token; after the semicolon, the median per-prompt "
            f"tokens/s ratio to the best fixed K and its bootstrap 90% interval, then to the fixed K that was best "
            f"on the other half of the prompts)\n\n"
            f"{policy_table(summaries, fixed, others, records)}\n\n"
            f"Decode rate against the best fixed K (tokens after the first over seconds after the first, each "
            f"summed over the task's prompts: the prefill left out, which at T > 0 dominates a short sampled "
            f"answer's tokens/s), with its bootstrap 90% interval\n\n"
            f"{decode_table(summaries, fixed, others, records)}\n")


def policy_section_of_saved_run(path: Path) -> str:
    """policy_section of a run's saved JSON, computed again by this code."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(Record)}
    records = [
        Record(**{k: tuple(v) if isinstance(v, list) else v for k, v in r.items() if k in fields}) for r in payload["records"]
    ]
    configs = []
    for name in payload["run"]["systems"]:
        try:
            configs.append(parse_config(name))
        except ValueError:  # a peer
            pass
    rows = list(dict.fromkeys(r.row for r in records))
    greedy = float(payload["run"]["temperature"]) == 0.0
    return policy_section(configs, summarize(records, rows, [c.name for c in configs], greedy), records)


def _write(args: argparse.Namespace, argv: Sequence[str], started: datetime, elapsed: float, machine: dict[str, object],
           systems: Sequence[str], records: Sequence[Record], summaries: Sequence[Summary], warnings: Sequence[str],
           configs: Sequence[SpecdecConfig] = ()) -> None:
    """Print the Markdown report and write it, with a JSON of everything, under args.out."""
    title = (f"Spec-Bench, {len(records) // len(systems)} prompts ({args.per_category} per row), "
             f"{args.max_new_tokens} new tokens, temperature {args.temperature}, {started:%Y-%m-%d %H:%M} UTC")
    llama = f", llama-cpp-python {machine['llama_cpp_python']}" if machine.get("llama_cpp_python") else ""
    machine_line = (f"{machine['cpu_model']}, {machine['usable_cpus']} CPUs, torch {machine['torch']}{llama}, "
                    f"Python {machine['python']}, commit {str(machine['git_commit'])[:12]}, {args.dtype}"
                    f"{', int8 weights' if args.quantization == 'int8' else ''}"
                    f"{''.join(f', verifier {arg}' for arg in args.verifier_arg)}, "
                    f"run took {elapsed:.0f} s")
    if machine.get("verifier_engine"):  # what ran the passes, as the verifier's ModelInfo said
        machine_line += f"\n\nverifier engine: {machine['verifier_engine']}"
    legend = ("tok/s: new tokens / wall seconds of one generate call (prefill included); "
              "columns explained in docs/benchmarks.md")
    notes = "".join(f"\n- warning: {w}" for w in warnings)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    plots = [
        speedup_plot(summaries, title, args.out / f"spec_bench-{stamp}-speedup.png"),
        acceptance_plot(summaries, title, args.out / f"spec_bench-{stamp}-acceptance.png"),
    ]
    images = "".join(f"\n![{p.stem}]({p.name})\n" for p in plots if p is not None)
    text = f"# {title}\n\n{machine_line}\n\n{markdown_table(summaries)}\n\n{legend}\n{notes}\n{images}"
    text += policy_section(configs, summaries, records)
    print(text)

    md_path, json_path = args.out / f"spec_bench-{stamp}.md", args.out / f"spec_bench-{stamp}.json"
    md_path.write_text(text, encoding="utf-8")
    options = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    payload = {
        "run": {**options, "argv": list(argv), "started": started.isoformat(), "seconds": elapsed, "systems": list(systems),
                "plots": [p.name for p in plots if p is not None]},
        "machine": machine,
        "warnings": list(warnings),
        "summary": [dataclasses.asdict(s) for s in summaries],
        "records": [dataclasses.asdict(r) for r in records],
    }
    json_path.write_text(json.dumps(payload, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {md_path} and {json_path}", file=sys.stderr)


def default_assistant() -> Path | None:
    """The distilled small drafter as a transformers folder, if `specdec draft build small` made it."""
    from specdec.model_files import drafter_dir

    folder = drafter_dir("default", "small") / "torch"
    return folder if (folder / "config.json").is_file() else None


def _peers(assistant: Path | None, dtype: str, quantization: str, skipped: list[str]) -> list[System]:
    """The peers that can run here, at `dtype`'s width (with int8 weights where `quantization` says
    so); why the others cannot is appended to `skipped`."""
    import torch

    from bench.llama_cpp_peers import llama_cpp_peers
    from bench.peers import hf_peers  # imports torch and transformers: only for peers
    from specdec.model_files import tokenizer_dir
    from specdec.tokenizer import Tokenizer

    assistant = assistant or default_assistant()
    if assistant is None:
        skipped.append("hf-assisted skipped: no draft model (build one with `specdec draft build small`, or pass --assistant)")
    peers: list[System] = [*hf_peers(assistant, getattr(torch, dtype), int8=quantization == "int8")]
    llama, why = llama_cpp_peers(Tokenizer(tokenizer_dir("default")), "int8" if quantization == "int8" else dtype)
    peers += llama
    if why:
        skipped.append(why)
    return peers


def main(argv: Sequence[str]) -> int:
    """Run the benchmark: 0 if all went well, 1 if a generation failed or a speculative greedy
    output differs from the baseline, 2 for bad options."""
    args = parse_args(argv)
    if args.policies_of is not None:
        print(policy_section_of_saved_run(args.policies_of))
        return 0
    if args.quantization == "int8" and args.dtype != "bfloat16":
        print("specdec bench: --quantization int8 needs --dtype bfloat16 (the verifier serves int8 weights with bfloat16 activations)", file=sys.stderr)
        return 2
    try:
        configs = parse_configs(args.configs)
        rows = [c.strip() for c in args.categories.split(",") if c.strip()]
        prompts = select(load_bench_questions(args.prompts), rows, args.per_category)
    except (ValueError, OSError) as error:
        print(f"specdec bench: {error}", file=sys.stderr)
        return 2
    started = datetime.now(timezone.utc)
    machine = describe()
    log_dir = Path(tempfile.mkdtemp(prefix="specdec-bench-"))
    skipped: list[str] = []
    # The verifier's prefix cache off: every system runs every prompt, so with it on, the system
    # that runs a prompt first (systems alternate order) pays its prefill and the rest get it free
    # (and the peers, which have no such cache, always pay it).
    verifier_args = ["--prefix-cache-tokens", "0", "--dtype", args.dtype, "--quantization", args.quantization, *args.verifier_arg]
    with LocalCluster(log_dir, verifier_args=verifier_args) as cluster, Client(cluster.address) as client:
        machine["verifier_engine"] = verifier_info(cluster.verifier.address).engine
        systems: list[System] = [SpecdecSystem(client, c) for c in configs]
        if args.peers:
            systems += _peers(args.assistant, args.dtype, args.quantization, skipped)
        print(f"{len(prompts)} prompts x {len(systems)} systems, {args.max_new_tokens} new tokens, "
              f"temperature {args.temperature}; service logs in {log_dir}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        records = run(systems, prompts, args.max_new_tokens, args.temperature, args.seed)
        elapsed = time.perf_counter() - t0
    machine["load_average_end"] = describe()["load_average"]

    names = [s.name for s in systems]
    summaries = summarize(records, rows, names, greedy=args.temperature == 0.0)
    warnings, failed = problems(records, {c.name for c in configs if c.speculates})
    warnings = skipped + warnings
    _write(args, argv, started, elapsed, machine, names, records, summaries, warnings, configs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
