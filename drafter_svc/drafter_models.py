"""Where a drafter process finds its built model drafters, and loading them with their checks."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from drafter_svc.draft_model import DraftModel, load_draft_model
from drafter_svc.drafter_manifest import Manifest
from drafter_svc.drafter_names import HYBRID, MODEL_DRAFTERS
from specdec.errors import FailedPrecondition
from specdec.model_files import drafter_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrafterModels:
    """Where a process finds its model drafters: build kind -> folder (a kind left out: the
    `specdec draft build` cache folder of the default target), the tokenizer fingerprint they
    must have been built for (empty: unchecked), onnxruntime's threads (0: its default), and
    the tail mass cut from q when nothing truncates it (draft_sampling.TAIL_MASS if None)."""

    folders: dict[str, Path] = field(default_factory=dict)
    tokenizer_fingerprint: str = ""
    threads: int = 0
    tail_mass: float | None = None
    window: int | None = None  # prompt tokens read, from the end (onnx_drafter.PROMPT_WINDOW if None; 0: all)
    prompt_cache_tokens: int = 0  # prompt tokens read kept for later sessions (prompt_cache.py; 0: none)
    prompt_from_verifier_tokens: int = 0  # longest prompt whose keys and values a target's copy takes from the verifier (0: none)
    target: str = ""  # the model source this process serves, named in refusals


def resolve_default_drafter(name: str, models: DrafterModels) -> str:
    """The server's default drafter: `name`, or for "auto" hybrid (onnx-quantized's drafts or
    copies) where onnx-quantized's model is built and usable (it is loaded now), else copy (no
    build step; a build that is there but refused is logged with the reason;
    docs/design/hybrid-drafter.md)."""
    if name != "auto":
        return name
    try:
        load_built_model(HYBRID, models)
    except FailedPrecondition as error:
        if _model_folder(HYBRID, models).joinpath("manifest.json").is_file():
            log.warning("--drafter auto: serving with copy, not %s: %s", HYBRID, error.message)
        return "copy"
    return HYBRID


def _model_folder(name: str, models: DrafterModels) -> Path:
    kind = MODEL_DRAFTERS[name]
    return models.folders.get(kind) or drafter_dir("default", kind)


def load_built_model(name: str, models: DrafterModels) -> DraftModel:
    """Model drafter `name`'s built model, loaded once per process; FailedPrecondition (naming
    speculation.drafter) when it is not built, its build failed its export check (or predates
    the check), or it was built for another tokenizer: the message names the drafter's build
    and the target this process serves."""
    kind = MODEL_DRAFTERS[name]
    folder = _model_folder(name, models)
    rebuild = f"`specdec draft build {kind}{f' --model {models.target}' if models.target else ''} --force`"
    if not (folder / "manifest.json").is_file():
        raise FailedPrecondition(
            "speculation.drafter", f"{name} has no model in {folder}: build it with `specdec draft build {kind}`"
        )
    try:
        manifest = Manifest.read(folder)
    except ValueError as error:
        raise FailedPrecondition("speculation.drafter", f"{name}'s model in {folder}: {error}; rebuild it with {rebuild}") from None
    built_for = f"target {manifest.target_source or '?'} (tokenizer fingerprint {manifest.tokenizer_fingerprint[:12]})"
    serving = f"target {models.target or '?'} (tokenizer fingerprint {models.tokenizer_fingerprint[:12]})"
    if models.tokenizer_fingerprint and manifest.tokenizer_fingerprint != models.tokenizer_fingerprint:
        raise FailedPrecondition(
            "speculation.drafter",
            f"{name}'s model in {folder} was built for another tokenizer: for {built_for}, but this drafter serves {serving}; "
            f"build one for this target with `specdec draft build {kind}{f' --model {models.target}' if models.target else ''}`",
        )
    if manifest.check_passed is None:
        raise FailedPrecondition(
            "speculation.drafter", f"{name}'s model in {folder} (built for {built_for}) predates the export check: rebuild it with {rebuild}"
        )
    if not manifest.check_passed:
        raise FailedPrecondition(
            "speculation.drafter",
            f"{name}'s model in {folder} (built for {built_for}) failed its export check against torch ({manifest.check_summary}); "
            f"this drafter serves {serving}: rebuild it with {rebuild} or build another model",
        )
    return load_draft_model(folder, models.threads)
