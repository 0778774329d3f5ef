"""bench/services_profile.py's summary of py-spy's raw samples: shares by thread, functions by
their own samples, and the project's functions with what they call (not the libraries')."""

from __future__ import annotations

from pathlib import Path

from bench.services_profile import frame_name, summary

RAW = """\
thread (11): target-scheduler;_run (/work/main/verifier_svc/scheduler.py:170);score (/work/main/verifier_svc/target_model.py:90);forward (/x/site-packages/torch/nn/modules/linear.py:125) 6
thread (11): target-scheduler;_run (/work/main/verifier_svc/scheduler.py:170);observe (/work/main/verifier_svc/pass_price.py:99) 2
thread (12): MainThread;select (/usr/lib/python3.11/selectors.py:468) 2
"""


def test_frames_are_named_by_function_and_the_files_last_two_parts() -> None:
    assert frame_name("forward (/x/site-packages/torch/nn/modules/linear.py:125)") == "forward (modules/linear.py)"
    assert frame_name("score (/work/main/verifier_svc/target_model.py:90)") == "score (verifier_svc/target_model.py)"


def test_summary_counts_threads_own_samples_and_the_projects_inclusive_ones(tmp_path: Path) -> None:
    raw = tmp_path / "verifier.txt"
    raw.write_text(RAW)
    text = "\n".join(summary(raw, top=10))
    assert "10 samples" in text and "thread : target-scheduler 8, thread : MainThread 2" in text
    own, inclusive = text.split("the project's, with what they call")
    assert "| 60.0% | `forward (modules/linear.py)` |" in own
    assert "| 80.0% | `_run (verifier_svc/scheduler.py)` |" in inclusive
    assert "| 20.0% | `observe (verifier_svc/pass_price.py)` |" in inclusive
    assert "linear.py" not in inclusive and "selectors.py" not in inclusive
