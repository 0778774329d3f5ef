"""bench/checkout_ab.py's report: each task's paired ratio of the two checkouts' defaults, and
its refusal of a folder that cannot serve (the runs themselves are the benchmark's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.checkout_ab import OTHER, main, ratio_table
from bench.report import Record


def _record(question: int, row: str, system: str, tok_s: float) -> Record:
    return Record(question_id=question, category=row, row=row, system=system, position=0, tokens_per_second=tok_s)


def test_the_ratio_table_pairs_each_prompt_and_pools_the_tasks() -> None:
    records = []
    for q, (ours, theirs) in enumerate([(20.0, 10.0), (30.0, 15.0), (12.0, 12.0)]):
        row = "qa" if q < 2 else "rag"
        records += [_record(q, row, "defaults", ours), _record(q, row, OTHER, theirs)]
    table = ratio_table(records, ["qa", "rag"])
    assert "| qa | 2.000 | 2.000-2.000 |" in table
    assert "| rag | 1.000 | 1.000-1.000 |" in table
    assert "| overall | 2.000 |" in table  # the median of 2, 2 and 1


def test_a_folder_without_generated_protos_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["--other", str(tmp_path)])
    assert refused.value.code == 2
