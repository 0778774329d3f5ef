"""Sampling settings validation (specdec/sampling_params.py)."""

from __future__ import annotations

import math

import pytest

from specdec.errors import InvalidArgument
from specdec.sampling_params import MIN_TEMPERATURE, SamplingParams


@pytest.mark.parametrize("temperature", [1e-45, 1e-30, MIN_TEMPERATURE / 2, -1e-9, math.nan, math.inf])
def test_temperatures_that_would_break_the_distribution_are_refused(temperature: float) -> None:
    with pytest.raises(InvalidArgument) as refused:
        SamplingParams(temperature=temperature).validate("sampling")
    assert refused.value.field == "sampling.temperature"


@pytest.mark.parametrize("temperature", [0.0, MIN_TEMPERATURE, 0.7, 100.0])
def test_greedy_and_ordinary_temperatures_pass(temperature: float) -> None:
    SamplingParams(temperature=temperature).validate("sampling")
