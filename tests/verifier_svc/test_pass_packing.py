"""Which waiting rounds share a pass: decode rounds together, a prefill not padding them."""

from __future__ import annotations

from verifier_svc.pass_packing import pack


def test_decode_rounds_share_a_pass_whatever_their_drafts() -> None:
    assert pack([1, 3, 1, 9, 2], [1] * 5, max_tokens=512, max_padding=0) == [0, 1, 2, 3, 4]


def test_a_prefill_does_not_pad_the_decode_rounds_around_it() -> None:
    # Decode rounds first: the 200-token prompt waits for a pass of its own.
    assert pack([1, 2, 200, 1], [1, 1, 200, 1], max_tokens=512) == [0, 1, 3]
    # The prompt first: it runs alone, the decode rounds next.
    assert pack([200, 1, 2], [200, 1, 1], max_tokens=512) == [0]


def test_prompts_of_similar_length_share_a_pass_within_the_budget() -> None:
    assert pack([100, 90, 110, 400], [100, 90, 110, 400], max_tokens=512, max_padding=30) == [0, 1, 2]
    assert pack([100, 90, 110], [100, 90, 110], max_tokens=250, max_padding=16) == [0, 1]


def test_a_short_prompt_may_pad_a_decode_round_by_a_few_rows() -> None:
    # 12 pending tokens pad one decode round by 11 rows: within the default PADDING_ROWS (16).
    assert pack([1, 12], [1, 12], max_tokens=512) == [0, 1]
    assert pack([1, 12], [1, 12], max_tokens=512, max_padding=5) == [0]


def test_the_first_round_always_runs_and_nothing_waiting_is_nothing() -> None:
    assert pack([600, 1], [600, 1], max_tokens=512) == [0]
    assert pack([], [], max_tokens=512) == []
