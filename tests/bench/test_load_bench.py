"""bench/load_bench.py's verifier flags: the prefix cache off unless asked for (the runs
themselves are the benchmark's)."""

from __future__ import annotations

from bench.load_bench import verifier_flags


def test_the_prefix_cache_is_off_unless_a_flag_sets_it() -> None:
    # On, the second half of a pair reuses the prefills of the first.
    assert verifier_flags([]) == ["--prefix-cache-tokens=0"]
    assert verifier_flags(["--max-sessions=32"]) == ["--prefix-cache-tokens=0", "--max-sessions=32"]
    assert verifier_flags(["--prefix-cache-tokens=4096"]) == ["--prefix-cache-tokens=4096"]
