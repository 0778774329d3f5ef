"""Statistical tests' sampling loops over both cores: half the samples here, half in a second
process, each half from its own seed, so the union is as many i.i.d. samples as one loop gives.

The loops run the real rule one round at a time in Python, which keeps one core busy; the CI
machine has two. The second process is spawned once per test process (importing torch takes a
few seconds) and reused. A sampler must be a module-level function (it is pickled by name) that
takes `num_samples` and `seed` as its last two arguments and returns a tensor or a tuple of them.
A test that patches the code under test (monkeypatch) must not use this: the other process would
not see the patch.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from typing import Any

import torch

# The second half's seed is the first's plus this, far from the seeds the tests pick themselves.
OTHER_HALF_SEED = 1_000_003


@cache
def _other_process() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def _run_pickled(call: bytes) -> bytes:
    sampler, args = pickle.loads(call)
    return pickle.dumps(sampler(*args))


def sampled_on_two_cores(sampler: Callable[..., Any], *args: Any, num_samples: int, seed: int) -> Any:
    """sampler(*args, num_samples, seed), its samples drawn in two halves (see the module):
    the halves' tensors concatenated along dim 0, a tuple of them where the sampler returns one."""
    # Pickled to bytes here, by plain pickle: handed to the executor as they are, the tensors would
    # go through torch's multiprocessing reducers, which move a tensor's storage into shared memory
    # in place, from the executor's feeder thread, while this thread's half reads the same tensors.
    call = pickle.dumps((sampler, (*args, num_samples - num_samples // 2, seed + OTHER_HALF_SEED)))
    other = _other_process().submit(_run_pickled, call)
    here = sampler(*args, num_samples // 2, seed)
    there = pickle.loads(other.result())
    if isinstance(here, tuple):
        return tuple(torch.cat([a, b]) for a, b in zip(here, there))
    return torch.cat([here, there])
