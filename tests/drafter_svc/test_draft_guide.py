"""A model drafter guided by a grammar (drafter_svc/draft_guide.py): each drawn node's q is the
model's q restricted to the tokens the grammar allows after the node's path and renormalized
(checked against the tiny model's own logits in torch), greedy nodes are the argmax of the
masked logits, the tokens the grammar forces join the chain as point masses without a model
call of their own, and releasing the guide returns the matcher to where it was.

The grammar is a stand-in for llguidance's matcher over the tiny model's 48-token vocabulary:
even tokens, and after a multiple of 4 the next odd token, forced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from drafter_svc.draft import ROOT
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.drafter_models import DrafterModels
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.onnx_drafter import OnnxDrafter
from specdec.sampling_params import SamplingParams
from tests.drafter_build.tiny_model import FINGERPRINT, VOCAB, tiny_drafter_folder
from verifier_svc.sampling import standardize as target_standardize

CONTEXT = [3, 17, 9, 40, 2, 11, 25, 7]
EOS = 0


class EvenThenForced:
    """Allows even tokens (EOS among them); after a multiple of 4 (not EOS) forces the next token."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def allowed(self) -> set[int]:
        last = self.tokens[-1] if self.tokens else 1
        if last % 4 == 0 and last != EOS:
            return {last + 1}
        return set(range(0, VOCAB, 2))

    def consume_token(self, token: int) -> bool:
        if token not in self.allowed():
            return False
        self.tokens.append(token)
        return True

    def consume_tokens(self, tokens: list[int]) -> bool:
        return all(self.consume_token(t) for t in tokens)

    def compute_ff_tokens(self) -> list[int]:
        forced = self.allowed()
        return list(forced) if len(forced) == 1 else []

    def rollback(self, n: int) -> None:
        del self.tokens[len(self.tokens) - n:]

    def is_stopped(self) -> bool:
        return False

    def get_error(self) -> str:
        return ""


def mask_of(matcher: EvenThenForced) -> np.ndarray:
    mask = np.zeros(VOCAB, dtype=bool)
    mask[sorted(matcher.allowed())] = True
    return mask


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return tiny_drafter_folder(tmp_path_factory.mktemp("tiny-drafter"))


def drafter(folder: Path, sampling: SamplingParams, seed: int) -> OnnxDrafter:
    made = make_drafter("onnx-small", sampling, seed, 0, DrafterModels({"small": folder}, FINGERPRINT))
    assert isinstance(made, OnnxDrafter)
    return made


def masked_target(model: torch.nn.Module, path: list[int], allowed: set[int], params: SamplingParams) -> np.ndarray:
    """The model's standardized probabilities after `path`, restricted to `allowed`, renormalized."""
    with torch.no_grad():
        logits = model(torch.tensor([path])).logits[0, -1]
    keep = torch.full_like(logits, float("-inf"))
    keep[sorted(allowed)] = 0.0
    if params.greedy:
        return (logits + keep).double().numpy()
    probs = target_standardize((logits + keep)[None], params)[0].double().numpy()
    return probs / probs.sum()


@pytest.mark.parametrize("params", [SamplingParams(0.0), SamplingParams(1.0), SamplingParams(0.8, 10)], ids=str)
def test_guided_chains_draw_from_the_masked_q_and_take_forced_tokens_free(tiny, params: SamplingParams) -> None:  # type: ignore[no-untyped-def]
    model, folder = tiny
    forced_seen = 0
    for seed in range(8):
        context = [*CONTEXT, 5 * seed + 1]  # greedy chains differ by context only
        matcher = EvenThenForced()
        d = drafter(folder, params, seed)
        guide = DraftGuide(matcher, mask_of, frozenset([EOS]))  # type: ignore[arg-type]
        draft = d.propose(context, 6, keep_drafting=None, guide=guide)
        assert draft.parents == list(range(ROOT, len(draft) - 1))
        assert matcher.tokens == draft.token_ids or draft.token_ids[-1] == EOS
        guide.release()
        assert matcher.tokens == []
        replay = EvenThenForced()
        drawn = 0
        forced_depths = []
        for i, token in enumerate(draft.token_ids):
            allowed = replay.allowed()
            assert token in allowed
            ids, probs = draft.q_token_ids[i], draft.q_probs[i]
            if len(allowed) == 1:  # forced: a point mass, no model call
                assert (ids, probs) == ([token], [1.0])
                forced_depths.append(i + 1)
            else:
                drawn += 1
                expected = masked_target(model, context + draft.token_ids[:i], allowed, params)
                if params.greedy:
                    assert ids == [int(np.argmax(expected))]
                else:
                    assert set(ids) <= allowed
                    assert np.abs(np.asarray(probs) - expected[ids] / expected[ids].sum()).max() < 1e-5
                    assert expected[ids].sum() > 1 - 1e-2 - 1e-4  # the tail cut leaves at most tail_mass
            if token != EOS:
                replay.consume_token(token)
        assert d.model_calls == drawn  # one call per drawn token: forced ones ride with the next
        assert guide.forced_depths == forced_depths
        forced_seen += len(forced_depths)
    assert forced_seen > 0


def test_greedy_siblings_under_a_guide_are_allowed_tokens(tiny) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    matcher = EvenThenForced()
    draft = drafter(folder, SamplingParams(0.0), 0).propose(CONTEXT, 3, 9, guide=DraftGuide(matcher, mask_of, frozenset([EOS])))  # type: ignore[arg-type]
    roots = [t for t, p in zip(draft.token_ids, draft.parents) if p == ROOT]
    assert len(roots) > 1 and all(t % 2 == 0 for t in roots)
