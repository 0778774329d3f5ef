"""bench.systems: configuration names map to drafter, draft length and tree size."""

from __future__ import annotations

import pytest

from bench.systems import BASELINE, SpecdecConfig, parse_config, parse_configs


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (BASELINE, SpecdecConfig(BASELINE, "", 0, 0)),
        ("copy-k8", SpecdecConfig("copy-k8", "copy", 8, 8)),  # a chain
        ("ngram-k4-t16", SpecdecConfig("ngram-k4-t16", "ngram", 4, 16)),  # a tree
    ],
)
def test_parse_config(name: str, expected: SpecdecConfig) -> None:
    assert parse_config(name) == expected


@pytest.mark.parametrize("name", ["copy", "copy-k0", "copy-k4-t4", "copy-k4-t2", "medusa-k4", "copy-k4-x8"])
def test_bad_config_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="bad config"):
        parse_config(name)


def test_baseline_always_runs_first() -> None:
    assert [c.name for c in parse_configs("copy-k4-t8, copy-k4")] == [BASELINE, "copy-k4-t8", "copy-k4"]


@pytest.mark.parametrize(
    ("name", "policy", "overlap"),
    [
        ("copy-k8", "fixed", False),  # no suffix: a fixed length, as before policies existed
        ("copy-k8-auto", "auto", False),
        ("copy-k8-t16-specdec++-overlap", "specdec++", True),
        ("ngram-k4-copy-confidence", "copy-confidence", False),
        ("copy-k8-fixed-overlap", "fixed", True),
    ],
)
def test_policy_and_overlap_suffixes(name: str, policy: str, overlap: bool) -> None:
    config = parse_config(name)
    assert (config.draft_policy, config.overlap) == (policy, overlap)


@pytest.mark.parametrize("name", ["copy-k8-greedy", "copy-k8-overlap-auto", "copy-auto"])
def test_bad_policy_suffixes_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="bad config"):
        parse_config(name)


def test_a_rule_suffix_asks_for_an_acceptance_rule() -> None:
    config = parse_config("onnx-quantized-k4-auto@lenient:1")
    assert config == SpecdecConfig("onnx-quantized-k4-auto@lenient:1", "onnx-quantized", 4, 4, "lenient:1", "auto")
    assert parse_config("defaults@exact").acceptance == "exact" and parse_config("defaults@exact").draft_policy == ""
    for bad in ("copy-k4@", "copy-k4@lenient:x", "copy@lenient:1"):
        with pytest.raises(ValueError, match="bad config|acceptance"):
            parse_config(bad)
