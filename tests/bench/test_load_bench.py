"""bench/load_bench.py's verifier flags (the prefix cache off unless asked for) and its
staggered first requests (the runs themselves are the benchmark's)."""

from __future__ import annotations

from bench.load_bench import first_request_tokens, verifier_flags


def test_the_prefix_cache_is_off_unless_a_flag_sets_it() -> None:
    # On, the second half of a pair reuses the prefills of the first.
    assert verifier_flags([]) == ["--prefix-cache-tokens=0"]
    assert verifier_flags(["--max-sessions=32"]) == ["--prefix-cache-tokens=0", "--max-sessions=32"]
    assert verifier_flags(["--prefix-cache-tokens=4096"]) == ["--prefix-cache-tokens=4096"]


def test_the_first_requests_are_staggered_over_a_requests_life() -> None:
    # 16 clients, 48 tokens: 3, 6, ..., 48; one client asks for them all; never 0 tokens.
    assert [first_request_tokens(i, 16, 48) for i in range(16)] == list(range(3, 49, 3))
    assert first_request_tokens(0, 1, 48) == 48
    assert [first_request_tokens(i, 32, 8) for i in range(4)] == [1, 1, 1, 1]
    assert first_request_tokens(31, 32, 8) == 8
