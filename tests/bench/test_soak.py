"""bench/soak.py's report (the runs themselves are the benchmark's, not CI's): a run's counts as
written, and an earlier run's JSON, written before some counts existed, still rendered."""

from __future__ import annotations

from bench.soak import memory_growth, render


def report(**extra: object) -> dict:
    rss = [{"t": 5.0 * i, "sessions": 10 * i, "drafter": 300.0 + i, "verifier0": 900.0, "verifier0_incarnation": 0,
            "verifier1": 910.0, "verifier1_incarnation": 0} for i in range(40)]
    return {
        "stamp": "20261129-120000", "minutes": 3.3, "clients": 2, "max_new_tokens": 40, "cancel_rate": 0.15, "sampled_rate": 0.2,
        "fault_seconds": 60, "seed": 0, "sessions": 120, "served": 100, "cancelled": 20, "errors": {}, "error_samples": [],
        "greedy_checked": 80, "tokens_lost": 0, "tokens_duplicated": 0, "tokens_different": 0, "mismatches": [], "resumes": 3,
        "verifier_kills": [{"verifier": 1, "open_sessions_when_killed": 1, "back_after_seconds": 9.5}],
        "memory_growth_mb_per_1000_sessions": memory_growth(rss), "rss_mb_first": rss[0], "rss_mb_last": rss[-1],
        "rss_samples": rss, "after": {"drafter": 0.0, "verifier0": 0, "verifier1": 0}, **extra,
    }


def test_the_report_counts_plain_sessions_and_their_passes_run_ahead() -> None:
    text = render(report(plain_rate=0.2, plain_sessions=24, ahead_passes={"run": 310.0, "taken": 297.0}))
    assert "20% decoded without speculation" in text
    assert "| decoded without speculation | 24 (passes run ahead: 310, taken by their round: 297) |" in text
    assert "| tokens lost / duplicated / different | 0 / 0 / 0 |" in text


def test_a_report_written_before_plain_sessions_were_counted_still_renders() -> None:
    text = render(report())
    assert "0% decoded without speculation" in text
    assert "| decoded without speculation | 0 (passes run ahead: 0, taken by their round: 0) |" in text


def test_a_restarted_verifier_is_measured_from_when_it_serves() -> None:
    # Its start (loading, timing passes) took 90 s beside the other verifier, its memory rising
    # all the while; once it serves, its memory is flat: no growth per session.
    rss = []
    for i in range(60):
        starting = i < 18
        rss.append({"t": 5.0 * i, "sessions": 10 * i, "drafter": 300.0, "verifier0": 900.0, "verifier0_incarnation": 0,
                    "verifier0_serving": True, "verifier1": 500.0 + 80 * i if starting else 2000.0, "verifier1_incarnation": 1,
                    "verifier1_serving": not starting})
    growth = memory_growth(rss)
    assert growth["verifier1"] == {1: 0.0}
    assert growth["verifier0"] == {0: 0.0}
    for sample in rss:  # a run from before the flag was sampled: counted from the first sample
        del sample["verifier1_serving"]
    assert memory_growth(rss)["verifier1"][1] > 100
