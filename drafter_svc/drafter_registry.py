"""A fresh drafter for one session, by the name a request gives (drafter_names.py)."""

from __future__ import annotations

import numpy as np

from drafter_svc.copy_drafter import CopyDrafter
from drafter_svc.drafter import Drafter
from drafter_svc.drafter_models import DrafterModels, load_built_model
from drafter_svc.drafter_names import DRAFTER_NAMES, HYBRID, MODEL_DRAFTERS
from drafter_svc.hybrid_drafter import HybridDrafter
from drafter_svc.ngram_drafter import NgramDrafter
from drafter_svc.onnx_drafter import OnnxDrafter
from specdec.sampling_params import SamplingParams

_MODEL_DRAFTER_STREAM = 0x0D5A  # keeps drafter seeds apart from any other use of the request seed


def make_drafter(
    name: str,
    sampling: SamplingParams | None = None,
    seed: int | None = None,
    stream: int = 0,
    models: DrafterModels | None = None,
    race: bool = False,
) -> Drafter:
    """A fresh drafter for one session, by its name in DRAFTER_NAMES; ValueError for any other.

    Model drafters sample with the request's `sampling` (default: temperature 1) from a numpy
    generator seeded by (seed, stream): each drafter of a session (the main one, the overlap
    prefetcher's) draws from its own stream, independent of the verifier's torch generator.
    seed None: fresh entropy. race (with a seed: the verifier checks the session by the
    exponential race, specdec/coupled_sampling.py): they draw by that race instead. `hybrid` is
    onnx-quantized's model drafter with a copy drafter beside it (hybrid_drafter.py).
    FailedPrecondition when the model folder is missing or was built for another tokenizer."""
    if name == "copy":
        return CopyDrafter()
    if name == "ngram":
        return NgramDrafter()
    if name in MODEL_DRAFTERS:
        model = _make_model_drafter(name, sampling or SamplingParams(), seed, stream, models or DrafterModels(), race)
        return HybridDrafter(model, CopyDrafter()) if name == HYBRID else model
    raise ValueError(f"unknown drafter {name!r}; expected one of {', '.join(DRAFTER_NAMES)}")


def _make_model_drafter(
    name: str, sampling: SamplingParams, seed: int | None, stream: int, models: DrafterModels, race: bool
) -> OnnxDrafter:
    model = load_built_model(name, models)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_MODEL_DRAFTER_STREAM, stream)))
    options = {
        "tail_mass": models.tail_mass, "window": models.window, "prompt_cache_tokens": models.prompt_cache_tokens,
        "prompt_from_verifier_tokens": models.prompt_from_verifier_tokens,
    }
    race_seed = seed if race else None
    return OnnxDrafter(model, sampling, rng, race_seed=race_seed, **{k: v for k, v in options.items() if v is not None})
