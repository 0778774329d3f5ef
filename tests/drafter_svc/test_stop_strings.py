"""StopStringMatcher: release text that cannot begin a stop string, end at the first one."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from drafter_svc.stop_strings import StopStringMatcher


def feed(stop: Sequence[str], chunks: Sequence[str]) -> tuple[list[str], bool, str]:
    """(released piece per push, stopped, flushed tail)."""
    matcher = StopStringMatcher(stop)
    pieces, stopped = [], False
    for chunk in chunks:
        piece, stopped = matcher.push(chunk)
        pieces.append(piece)
    return pieces, stopped, matcher.flush()


def test_stop_within_one_push() -> None:
    assert feed(["STOP"], ["Hello STOP world"]) == (["Hello "], True, "")


def test_stop_across_chunk_boundaries() -> None:
    assert feed(["STOP"], ["Hello ST", "O", "P world"]) == (["Hello ", "", ""], True, "")
    assert feed(["\n\nUser:"], ["answer.\n", "\nUs", "er: hi"]) == (["answer.", "", ""], True, "")


def test_a_held_tail_that_does_not_complete_is_released() -> None:
    assert feed(["STOP"], ["Hello ST", "ill here"]) == (["Hello ", "STill here"], False, "")
    assert feed(["STOP"], ["the end: STO"]) == (["the end: "], False, "STO")


def test_the_first_of_several_stops_to_complete_wins() -> None:
    assert feed(["world", "lo"], ["hello world"]) == (["hel"], True, "")
    assert feed(["world", "lo"], ["hel", "l", "o world"]) == (["he", "l", ""], True, "")
    # "ba" completes before "abac", although "abac" starts earlier: generation has ended by then.
    assert feed(["abac", "ba"], ["abac"]) == (["a"], True, "")
    assert feed(["abac", "ba"], ["ab", "ac"]) == (["", "a"], True, "")
    # Ending together, the longer stop string removes more.
    assert feed(["b", "ab"], ["xab"]) == (["x"], True, "")


def test_overlapping_prefixes() -> None:
    # "abcd" is still possible after "xabc" until "e" arrives, but "bce" has matched by then.
    assert feed(["abcd", "bce"], ["xab", "c", "e"]) == (["x", "", "a"], True, "")
    # Self-overlapping stop: "aab" inside "aaab".
    assert feed(["aab"], ["a", "a", "a", "b"]) == (["", "", "a", ""], True, "")


def test_ignores_input_after_stopping() -> None:
    matcher = StopStringMatcher(["."])
    assert matcher.push("one. two") == ("one", True)
    assert matcher.push("three.") == ("", True)
    assert matcher.flush() == ""


def test_without_stop_strings_nothing_is_held() -> None:
    for stop in ([], [""]):
        assert feed(stop, ["a", "", "bc ", "\n"]) == (["a", "", "bc ", "\n"], False, "")


def test_empty_stop_strings_are_ignored() -> None:
    assert feed(["", "!"], ["hi", "!"]) == (["hi", ""], True, "")


def test_holds_only_a_possible_stop_prefix() -> None:
    matcher = StopStringMatcher(["STOP", "</s>"])
    assert matcher.push("xyz") == ("xyz", False)
    assert matcher.push("TOP <") == ("TOP ", False)  # "T" cannot begin a stop; "<" can
    assert matcher.push("/") == ("", False)
    assert matcher.push("p>") == ("</p>", False)


def first_stop(text: str, stop: Sequence[str]) -> int | None:
    """Reference: where the text is cut when read one character at a time; None if never."""
    for end in range(1, len(text) + 1):
        starts = [end - len(s) for s in stop if s and text[:end].endswith(s)]
        if starts:
            return min(starts)
    return None


def test_random_streams_match_a_character_at_a_time_reference() -> None:
    rng = random.Random(31337)
    alphabet = "abc"
    for _ in range(400):
        stop = ["".join(rng.choices(alphabet, k=rng.randint(1, 4))) for _ in range(rng.randint(0, 3))]
        text = "".join(rng.choices(alphabet + " ", k=rng.randint(0, 30)))
        matcher = StopStringMatcher(stop)
        longest = max(map(len, stop), default=0)
        released, seen, stopped, start = "", "", False, 0
        while start < len(text) and not stopped:
            chunk = text[start : start + rng.randint(0, 5)]
            start += len(chunk)
            seen += chunk
            piece, stopped = matcher.push(chunk)
            released += piece
            if not stopped:
                held = seen[len(released) :]
                assert seen.startswith(released)
                assert len(held) <= max(longest - 1, 0)
                # No false holds: the held tail could still begin some stop string.
                assert held == "" or any(s.startswith(held) and s != held for s in stop)
        if not stopped:
            released += matcher.flush()
        cut = first_stop(text, stop)
        assert stopped == (cut is not None)
        assert released == (text if cut is None else text[:cut])
        assert not any(s in released for s in stop)


@pytest.mark.parametrize("stop", [["STOP"], ["a", "bb", "ccc"]])
def test_flush_after_nothing_pushed_is_empty(stop: list[str]) -> None:
    assert StopStringMatcher(stop).flush() == ""
