"""Spec-Bench prompts: load `spec_bench.jsonl`, group its categories into tasks, pick a subset.

Spec-Bench (Xia et al., 2024) has six tasks of 80 questions each: MT-bench (eight categories of
10, ids 81-160), translation, summarization, qa, math_reasoning and rag. A report row is a task,
or a single MT-bench category when one is asked for by name.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MT_BENCH_CATEGORIES: tuple[str, ...] = (
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities",
)
TASKS: dict[str, tuple[str, ...]] = {
    "mt_bench": MT_BENCH_CATEGORIES,
    "translation": ("translation",),
    "summarization": ("summarization",),
    "qa": ("qa",),
    "math_reasoning": ("math_reasoning",),
    "rag": ("rag",),
}
QUESTIONS_FILE = "spec_bench.jsonl"


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: the first user turn of a Spec-Bench question."""

    question_id: int
    category: str  # as in the file, e.g. "writing"
    row: str  # the report row it counts towards, e.g. "mt_bench"
    text: str

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.text}]


class PromptsNotFound(FileNotFoundError):
    """The prompt file is not in the folder looked in; the message (one line) says which file is
    needed, where it comes from and how to point at it."""


def bench_dir(prompts: Path | None = None) -> Path:
    """The folder of the prompt files: `prompts` (a --prompts flag), else $SPECDEC_BENCH_DIR, else
    ../shared/bench beside the repository (where the project's machines keep them)."""
    if prompts is not None:
        return prompts
    if env := os.environ.get("SPECDEC_BENCH_DIR"):
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "bench"


def load_bench_questions(prompts: Path | None = None) -> list[dict]:
    """Spec-Bench's questions from bench_dir(prompts); PromptsNotFound if the file is not there."""
    path = bench_dir(prompts) / QUESTIONS_FILE
    if not path.is_file():
        raise PromptsNotFound(
            f"needs {QUESTIONS_FILE}, Spec-Bench's 480 questions (github.com/hemingkx/Spec-Bench, file "
            f"data/spec_bench/question.jsonl, Apache-2.0), in the folder given by --prompts DIR or SPECDEC_BENCH_DIR; "
            f"it is not in {path.parent}"
        )
    return load_questions(path)


def add_prompts_flag(parser: argparse.ArgumentParser) -> None:
    """The --prompts DIR flag of the benchmarks that read Spec-Bench."""
    parser.add_argument("--prompts", type=Path, default=None, metavar="DIR",
                        help=f"folder holding {QUESTIONS_FILE} (default: $SPECDEC_BENCH_DIR, else ../shared/bench "
                             "beside the repository)")


def load_questions(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _round_robin(groups: Iterable[Sequence[Prompt]]) -> list[Prompt]:
    """Interleave the groups: a[0], b[0], c[0], a[1], ..."""
    return [p for batch in itertools.zip_longest(*groups) for p in batch if p is not None]


def select(questions: Sequence[dict], rows: Sequence[str], per_row: int) -> list[Prompt]:
    """Up to per_row prompts for each row (a task name or a single category), in file order.

    Within a task the pick goes round-robin over its categories (2 MT-bench prompts: one writing,
    one roleplay), and the result interleaves the rows so slow drift of the machine during a run
    spreads over every row rather than hitting the last one.
    """
    known = set(TASKS) | {q["category"] for q in questions}
    unknown = [r for r in rows if r not in known]
    if unknown:
        raise ValueError(f"unknown categories {unknown}; expected tasks {sorted(TASKS)} or categories {sorted(known - set(TASKS))}")
    picked: list[list[Prompt]] = []
    for row in rows:
        by_category = [
            [Prompt(q["question_id"], c, row, q["turns"][0]) for q in questions if q["category"] == c]
            for c in TASKS.get(row, (row,))
        ]
        picked.append(_round_robin(by_category)[:per_row])
    return _round_robin(picked)
