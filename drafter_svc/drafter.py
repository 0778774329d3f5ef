"""The drafter interface: propose a continuation (a chain or a token tree), learn from the
verifier's verdict.

Shaped like Hugging Face's `CandidateGenerator`: `propose(context, budget, max_nodes) -> Draft`
and `observe(feedback)`. A draft carries the distribution q each token was drawn from, which the
verifier needs for exact acceptance (Algorithm 1 of Leviathan et al., 2023; over trees, Stratos'
section 2.1); the zero-cost drafters here are deterministic and declare point masses. An empty
draft means "decode normally".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from specdec.errors import FailedPrecondition
from specdec.sampling_params import SamplingParams

if TYPE_CHECKING:
    from drafter_svc.onnx_drafter import DraftModel


log = logging.getLogger(__name__)
ROOT = -1  # the parent index of a node that follows the context's last token


@dataclass(frozen=True)
class Draft:
    """A proposed token tree (a chain is a tree with one child per node).

    Node i holds token_ids[i]; its parent is parents[i]: ROOT (-1) for a node that follows the
    context directly, else an earlier node (parents[i] < i). Token i was drawn from the
    distribution q_i, given sparsely as (q_token_ids[i], q_probs[i]); q_probs[i] sums to 1 and
    q_token_ids[i] contains token_ids[i]. Siblings must be independent draws from the q they
    declare; a deterministic drafter declares point masses ([t], [1.0]) and may branch freely.
    Empty draft = decode normally.

    Optional per-node evidence the drafter had, read by draft-length policies (draft_policy.py),
    never by the verifier: match_lengths[i] is how many context tokens the prediction of node i
    rests on (the matched suffix of a copy draft, the backed-off context of an n-gram draft);
    confidences[i] is the drafter's own estimate in [0, 1] that the token comes next (an n-gram
    draft's empirical frequency, a greedy model draft's softmax probability of its token);
    q_entropies[i] is the entropy of q_i in nats, as `acceptance_predictor.q_entropy` computes
    it, by a drafter that had q as an array (a model drafter: computed once, not again from the
    lists at every policy step). Empty: unknown (computed when needed). Not part of equality:
    the same tree is the same draft.
    """

    token_ids: list[int]
    parents: list[int]
    q_token_ids: list[list[int]]
    q_probs: list[list[float]]
    match_lengths: list[int] = field(default_factory=list, compare=False)
    confidences: list[float] = field(default_factory=list, compare=False)
    q_entropies: list[float] = field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        if not len(self.token_ids) == len(self.parents) == len(self.q_token_ids) == len(self.q_probs):
            raise ValueError("token_ids, parents, q_token_ids and q_probs must have one entry per node")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}: parent {parent} must be ROOT or an earlier node")
        for token, ids, probs in zip(self.token_ids, self.q_token_ids, self.q_probs):
            if len(ids) != len(probs) or token not in ids:
                raise ValueError("each q must list its drafted token, with one probability per token id")
        for name in ("match_lengths", "confidences", "q_entropies"):
            if getattr(self, name) and len(getattr(self, name)) != len(self.token_ids):
                raise ValueError(f"{name} must be empty or have one entry per node")

    @staticmethod
    def point_masses(
        token_ids: Sequence[int],
        parents: Sequence[int] | None = None,
        match_lengths: Sequence[int] = (),
        confidences: Sequence[float] = (),
    ) -> Draft:
        """The draft of a deterministic drafter: q_i puts all its mass on token_ids[i]. Without
        parents the tokens form a chain."""
        ids = [int(t) for t in token_ids]
        tree = list(range(ROOT, len(ids) - 1)) if parents is None else [int(p) for p in parents]
        return Draft(ids, tree, [[t] for t in ids], [[1.0] for _ in ids], list(match_lengths), list(confidences))

    def __len__(self) -> int:
        return len(self.token_ids)

    def depth(self) -> int:
        """Length of the longest root-to-leaf path (0 for an empty draft)."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return max(depths, default=0)

    def path_tokens(self, nodes: Sequence[int]) -> list[int]:
        """The tokens of the given nodes, in order (e.g. the accepted path)."""
        return [self.token_ids[i] for i in nodes]


@dataclass(frozen=True)
class Feedback:
    """What the verifier did with the last draft.

    emitted_token_ids are the tokens appended to the context this round: the tokens of the
    accepted path followed by the recovered (after a rejection) or bonus (after a leaf) token.
    """

    num_drafted: int  # nodes in the draft
    accepted_nodes: list[int]  # the accepted root-to-node path, as node indices
    acceptance_probs: list[float]  # min(1, p/q) per node, p conditioned on the node's path (the race: its own)
    emitted_token_ids: list[int]

    @property
    def num_accepted(self) -> int:
        return len(self.accepted_nodes)


class Drafter(Protocol):
    """One object per generation session; it may keep incremental state between calls."""

    def propose(self, context: Sequence[int], budget: int, max_nodes: int | None = None) -> Draft:
        """Draft a tree to follow `context`, the whole sequence so far (prompt + generated):
        no path longer than `budget` (>= 0) tokens, at most `max_nodes` nodes (default: budget,
        which allows only a chain). Within a session the context only grows, by the emitted
        tokens."""
        ...

    def observe(self, feedback: Feedback) -> None:
        """Learn from the verifier's verdict on the last draft."""
        ...


# Model drafters (onnx_drafter.py) by name -> the `specdec draft build` kind they run. `hybrid`
# runs onnx-quantized's model and, beside it, the free copy drafter: each round the session's
# policy sends whichever draft it expects more from (drafter_svc/generation.py).
HYBRID = "hybrid"
MODEL_DRAFTERS: dict[str, str] = {"onnx-quantized": "quantized", "onnx-small": "small", HYBRID: "quantized"}
DRAFTER_NAMES: tuple[str, ...] = ("copy", "ngram", *MODEL_DRAFTERS)


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
    target: str = ""  # the model source this process serves, named in refusals


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
    exponential race, specdec/coupled_sampling.py): they draw by that race instead.
    FailedPrecondition when the model folder is missing or was built for another tokenizer."""
    # Imported here: the drafters import Draft from this module.
    from drafter_svc.copy_drafter import CopyDrafter
    from drafter_svc.ngram_drafter import NgramDrafter

    if name == "copy":
        return CopyDrafter()
    if name == "ngram":
        return NgramDrafter()
    if name in MODEL_DRAFTERS:
        return _make_model_drafter(name, sampling or SamplingParams(), seed, stream, models or DrafterModels(), race)
    raise ValueError(f"unknown drafter {name!r}; expected one of {', '.join(DRAFTER_NAMES)}")


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
    from specdec.model_files import drafter_dir

    kind = MODEL_DRAFTERS[name]
    return models.folders.get(kind) or drafter_dir("default", kind)


def load_built_model(name: str, models: DrafterModels) -> DraftModel:
    """Model drafter `name`'s built model, loaded once per process; FailedPrecondition (naming
    speculation.drafter) when it is not built, its build failed its export check (or predates
    the check), or it was built for another tokenizer: the message names the drafter's build
    and the target this process serves."""
    from drafter_svc.drafter_manifest import Manifest
    from drafter_svc.onnx_drafter import load_draft_model  # imports Draft from this module

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


_MODEL_DRAFTER_STREAM = 0x0D5A  # keeps drafter seeds apart from any other use of the request seed


def _make_model_drafter(
    name: str, sampling: SamplingParams, seed: int | None, stream: int, models: DrafterModels, race: bool
) -> Drafter:
    import numpy as np

    from drafter_svc.onnx_drafter import OnnxDrafter

    model = load_built_model(name, models)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_MODEL_DRAFTER_STREAM, stream)))
    options = {"tail_mass": models.tail_mass, "window": models.window}
    race_seed = seed if race else None
    return OnnxDrafter(model, sampling, rng, race_seed=race_seed, **{k: v for k, v in options.items() if v is not None})


class AppendOnlyCursor:
    """How far a drafter has indexed an append-only context, and whether a new context extends it.

    The check compares the length and the last `window` indexed tokens, O(window) rather than
    O(len(context)): the session contract is append-only, and this catches the ways it could be
    broken in practice (a new session's context, a rollback). On failure the drafter re-indexes.
    """

    def __init__(self, window: int) -> None:
        self.window = window
        self.length = 0
        self._tail: list[int] = []

    def extended_by(self, context: Sequence[int]) -> bool:
        start = self.length - len(self._tail)
        return len(context) >= self.length and list(context[start : self.length]) == self._tail

    def advance(self, context: Sequence[int]) -> None:
        self.length = len(context)
        self._tail = list(context[max(0, self.length - self.window) : self.length])

    def reset(self) -> None:
        self.length = 0
        self._tail = []
