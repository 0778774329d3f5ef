"""bench.report: SpecDec++'s verification and discard rates, the best-fixed-K table and the paired
comparisons with it (chosen after the fact, and held out)."""

from __future__ import annotations

import statistics

import pytest

from bench.prompts import Prompt
from bench.report import decode_ratio, decode_table, held_out_ratio, make_record, paired_ratio, policy_table, summarize
from bench.systems import Output


def output(tokens: int, seconds: float, rounds: int, drafted: int, accepted: int, hits: int = 0, misses: int = 0) -> Output:
    return Output(
        token_ids=list(range(tokens)), text="", finish_reason="length", wall_seconds=seconds, prompt_tokens=5,
        rounds=rounds, drafted_tokens=drafted, accepted_tokens=accepted, discarded_tokens=drafted - accepted,
        overlap_hits=hits, overlap_misses=misses, hidden_draft_seconds=0.001 * hits, draft_seconds=0.01,
    )


def test_rates_and_the_best_fixed_length_chosen_after_the_fact() -> None:
    prompt = Prompt(1, "writing", "mt_bench", "hi")
    outputs = {
        "baseline": output(40, 4.0, 40, 0, 0),
        "copy-k2": output(40, 2.0, 25, 30, 15),  # 2.0x
        "copy-k8": output(40, 2.5, 20, 80, 20),  # 1.6x
        "copy-k8-auto-overlap": output(40, 1.6, 20, 40, 20, hits=5, misses=15),  # 2.5x
    }
    records = [make_record(prompt, name, i, out, outputs["baseline"], greedy=False) for i, (name, out) in enumerate(outputs.items())]
    summaries = summarize(records, ["mt_bench"], list(outputs), greedy=False)
    auto = next(s for s in summaries if s.system == "copy-k8-auto-overlap" and s.row == "mt_bench")
    assert auto.verification_rate == 20 / 40 and auto.discard_rate == 20 / 40
    assert auto.overlap_hit_rate == 0.25
    table = policy_table(summaries, ["copy-k2", "copy-k8"], ["copy-k8-auto-overlap"])
    row = next(line for line in table.splitlines() if line.startswith("| mt_bench"))
    assert "copy-k2: 2.00x (0.62 / 0.38)" in row  # the faster fixed length, its passes and discards per token
    assert "2.50x (0.50 / 0.50), hits 25%" in row


def test_acceptance_by_position_is_pooled_and_outputs_are_compared_with_transformers() -> None:
    prompt = Prompt(2, "qa", "qa", "hi")
    reference = Output(token_ids=[1, 2, 3], text="", finish_reason="length", wall_seconds=1.0, prompt_tokens=5)
    same = Output(token_ids=[1, 2, 3], text="", finish_reason="length", wall_seconds=1.0, prompt_tokens=5,
                  rounds=2, drafted_tokens=5, accepted_tokens=1, drafted_by_position=(2, 2, 1), accepted_by_position=(1, 0, 0))
    other = Output(token_ids=[1, 9, 3], text="", finish_reason="length", wall_seconds=1.0, prompt_tokens=5,
                   rounds=1, drafted_tokens=2, accepted_tokens=2, drafted_by_position=(1, 1), accepted_by_position=(1, 1))
    records = [
        make_record(prompt, "copy-k3", 0, same, reference, greedy=True, transformers=reference),
        make_record(Prompt(3, "qa", "qa", "ho"), "copy-k3", 0, other, reference, greedy=True, transformers=reference),
    ]
    (row, overall) = summarize(records, ["qa"], ["copy-k3"], greedy=True)
    assert overall.acceptance_by_position == (2 / 3, 1 / 3, 0.0)  # (1+1)/(2+1), (0+1)/(2+1), 0/1
    assert overall.differs_from_transformers == 1 and overall.differs_from_baseline == 1
    sampled = summarize([make_record(prompt, "copy-k3", 0, other, reference, greedy=False, transformers=reference)],
                        ["qa"], ["copy-k3"], greedy=False)
    assert sampled[0].differs_from_transformers is None


def test_a_policy_is_compared_with_the_best_fixed_length_prompt_by_prompt() -> None:
    """The paired ratio is the median of per-prompt ratios, within a bootstrap interval that
    spans their spread; a policy twice as fast on every prompt is 2.00 with no spread."""
    baseline = output(40, 4.0, 40, 0, 0)
    records = []
    for q in range(8):
        prompt = Prompt(q, "qa", "qa", "hi")
        k4 = output(40, 2.0 + 0.1 * q, 20, 40, 20)  # each prompt its own difficulty
        auto = output(40, (2.0 + 0.1 * q) / (1.1 if q % 2 else 0.9), 20, 40, 20)  # 1.1x or 0.9x of k4
        records += [make_record(prompt, name, 0, out, baseline, greedy=False) for name, out in (("k4", k4), ("auto", auto))]
    median, low, high = paired_ratio(records, "qa", "auto", "k4")
    assert median == pytest.approx(1.0) and 0.9 <= low < 1.0 < high <= 1.1
    assert paired_ratio(records, "qa", "auto", "k8") is None  # no such system
    twice = [make_record(Prompt(q, "qa", "qa", "hi"), name, 0, output(40, s, 20, 40, 20), baseline, greedy=False)
             for q in range(5) for name, s in (("k4", 2.0 + q), ("auto", (2.0 + q) / 2))]
    assert paired_ratio(twice, "overall", "auto", "k4") == pytest.approx((2.0, 2.0, 2.0))
    table = policy_table(summarize(records, ["qa"], ["k4", "auto"], greedy=False), ["k4"], ["auto"], records)
    assert "; 1.00 of the best fixed (" in next(line for line in table.splitlines() if line.startswith("| qa"))


def test_the_held_out_best_is_chosen_on_the_other_half_of_the_prompts() -> None:
    """Two fixed lengths each lucky on one half (question order: the even positions, then the odd
    ones): chosen after the fact, the best beats the policy on half the prompts; held out, each
    half is compared with the length that won the other half, and the policy leads on all."""
    baseline = output(40, 4.0, 40, 0, 0)
    records = []
    for q in range(8):
        prompt = Prompt(q, "qa", "qa", "hi")
        lucky_half = q % 2 == 0
        speeds = {"auto": 2.0, "k4": (2.5 if lucky_half else 1.6) + 0.01 * q, "k6": (1.7 if lucky_half else 2.4) + 0.01 * q}
        records += [make_record(prompt, name, 0, output(40, 40 / v, 20, 40, 20), baseline, greedy=False) for name, v in speeds.items()]
    after_the_fact = paired_ratio(records, "qa", "auto", "k4")  # k4's median speedup is the higher
    held_out = held_out_ratio(records, "qa", "auto", ["k4", "k6"])
    assert after_the_fact is not None and held_out is not None
    assert after_the_fact[1] < 1.0 and held_out[1] > 1.15  # auto/k6 on the even half, auto/k4 on the odd
    assert held_out[0] == pytest.approx(statistics.median([2.0 / (1.7 + 0.01 * q) for q in (0, 2, 4, 6)]
                                                          + [2.0 / (1.6 + 0.01 * q) for q in (1, 3, 5, 7)]))
    assert held_out_ratio(records, "qa", "auto", ["k8"]) is None  # no such fixed length
    table = policy_table(summarize(records, ["qa"], ["k4", "k6", "auto"], greedy=False), ["k4", "k6"], ["auto"], records)
    assert f", {held_out[0]:.2f} of the held-out best (" in next(line for line in table.splitlines() if line.startswith("| qa"))


def test_the_decode_rate_leaves_out_the_prefill_that_dominates_a_short_sampled_answer() -> None:
    """Both systems decode at 20 ms a token after a 1.5 s prefill, but on half the prompts the
    policy sampled an answer of 3 tokens: its tokens/s there is a fifth of the fixed length's,
    its decode rate the same. A policy 1.25x faster per token after the first is 1.25 with no
    spread, whatever its answers' lengths."""

    def sampled(tokens: int, per_token: float) -> Output:
        return Output(token_ids=list(range(tokens)), text="", finish_reason="eos", wall_seconds=1.5 + per_token * (tokens - 1),
                      prompt_tokens=700, time_to_first_token_seconds=1.5)

    baseline = sampled(128, 0.08)
    records, faster = [], []
    for q in range(8):
        prompt = Prompt(q, "rag", "rag", "hi")
        records += [make_record(prompt, "k4", 0, sampled(128, 0.02), baseline, greedy=False),
                    make_record(prompt, "auto", 0, sampled(3 if q % 2 else 128, 0.02), baseline, greedy=False)]
        faster += [make_record(prompt, "k4", 0, sampled(128, 0.02), baseline, greedy=False),
                   make_record(prompt, "auto", 0, sampled(3 + 20 * q, 0.016), baseline, greedy=False)]
    paired = paired_ratio(records, "rag", "auto", "k4")
    assert paired is not None and paired[1] < 0.8  # the short answers' prefill
    assert decode_ratio(records, "rag", "auto", "k4") == pytest.approx((1.0, 1.0, 1.0))
    assert decode_ratio(faster, "rag", "auto", "k4") == pytest.approx((1.25, 1.25, 1.25))
    assert decode_ratio(records, "rag", "auto", "k8") is None  # no such system
    table = decode_table(summarize(faster, ["rag"], ["k4", "auto"], greedy=False), ["k4"], ["auto"], faster)
    assert "| rag | 1.25 (1.25-1.25) |" in table.splitlines()

