"""pass_sizes: a pass is padded to the fastest measured size at or above its own."""

from __future__ import annotations

from verifier_svc.pass_sizes import fastest_at_least


def test_each_size_goes_to_the_fastest_size_at_or_above_it() -> None:
    # 1 token 40 ms; 2-3 slow (padded to 4); 7 slower than 8; nothing above 8 beats its own size
    seconds = [0.040, 0.064, 0.064, 0.058, 0.058, 0.062, 0.076, 0.064, 0.072]
    assert fastest_at_least(seconds) == [1, 4, 4, 4, 5, 6, 8, 8, 9]


def test_plain_decoding_is_never_padded_and_noise_is_not_followed() -> None:
    assert fastest_at_least([0.050, 0.045, 0.060])[0] == 1  # even if 2 tokens looked faster
    assert fastest_at_least([0.040, 0.060, 0.0595]) == [1, 2, 3]  # 1% is noise, not a gain
    assert fastest_at_least([]) == []
