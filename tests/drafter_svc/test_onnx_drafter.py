"""The ONNX drafter: the q it sends for a token is the distribution that token was drawn from;
its KV cache, rolled back after rejections, gives what a fresh run over the accepted text gives;
trees branch at the first depths with siblings drawn from their declared q.

Most cases run a tiny random model (tests/drafter_build/tiny_model.py, exported in seconds);
the last ones run the real `quantized` drafter (built once into the drafter cache)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from drafter_svc.acceptance_predictor import FEATURES, node_features
from drafter_svc.draft_sampling import draft_distribution
from drafter_svc.draft_tree import cut
from drafter_svc.draft import ROOT
from drafter_svc.draft_model import DraftModel, causal_bias, load_draft_model
from drafter_svc.drafter_models import DrafterModels, resolve_default_drafter
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.onnx_drafter import OnnxDrafter
from specdec.coupled_sampling import exponentials, race_ranking
from specdec.errors import FailedPrecondition
from specdec.sampling_params import SamplingParams
from tests.drafter_build.tiny_model import FINGERPRINT, VOCAB, tiny_drafter_folder
from tests.verifier_svc.test_acceptance import l1_bound
from verifier_svc.sampling import standardize as target_standardize

CONTEXT = [3, 17, 9, 40, 2, 11, 25, 7]
ROLLBACK_TOLERANCE = 1e-5  # on probabilities; float32 runs of different chunkings differ by rounding


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    return tiny_drafter_folder(tmp_path_factory.mktemp("tiny-drafter"))


def drafter(folder: Path, sampling: SamplingParams, seed: int = 0, stream: int = 0) -> OnnxDrafter:
    made = make_drafter("onnx-small", sampling, seed, stream, DrafterModels({"small": folder}, FINGERPRINT))
    assert isinstance(made, OnnxDrafter)
    return made


@pytest.mark.parametrize("params", [SamplingParams(0.8, 10), SamplingParams(0.7, 0, 0.9)], ids=str)
def test_q_sent_is_the_distribution_the_token_was_drawn_from(tiny, params: SamplingParams) -> None:  # type: ignore[no-untyped-def]
    """Directly: every node's q equals the model's logits (torch) standardized as the target
    standardizes them (verifier_svc.sampling) and tail-cut. Statistically: 100,000 drafted tokens
    (the chain's and its i.i.d. siblings', all declaring that q) are within the
    Bretagnolle-Huber-Carol L1 bound of it, and the same counts reject the raw-logits softmax
    (the bug of transformers issues 32867 and 47932: q from raw logits, tokens from processed
    ones)."""
    model, folder = tiny
    with torch.no_grad():
        raw = model(torch.tensor([CONTEXT])).logits[0, -1]
    processed = target_standardize(raw[None], params)[0].double().numpy()
    d = drafter(folder, params)
    tokens: list[int] = []
    for _ in range(100):
        draft = d.propose(CONTEXT, 1, 1000)  # one depth: the chain's node and 999 siblings
        assert set(draft.parents) == {ROOT}
        for ids, probs in zip(draft.q_token_ids, draft.q_probs):
            assert (ids, probs) == (draft.q_token_ids[0], draft.q_probs[0])
        tokens += draft.token_ids
    ids, probs = np.array(draft.q_token_ids[0]), np.array(draft.q_probs[0])
    assert set(ids.tolist()) <= set(np.flatnonzero(processed).tolist())
    assert np.abs(probs - processed[ids] / processed[ids].sum()).max() < 1e-5
    assert processed[ids].sum() > 1 - 1e-4

    index = {t: i for i, t in enumerate(ids.tolist())}
    assert set(tokens) <= set(index), "a token was drawn from outside the q that was sent"
    empirical = np.bincount([index[t] for t in tokens], minlength=len(ids)) / len(tokens)
    eps = l1_bound(VOCAB, len(tokens))
    distance = np.abs(empirical - probs).sum()
    raw_probs = torch.softmax(raw.double(), -1).numpy()
    raw_distance = np.abs(empirical - raw_probs[ids]).sum() + raw_probs[np.setdiff1d(np.arange(VOCAB), ids)].sum()
    print(f"{params}: |support| {len(ids)}, L1(tokens, q sent) {distance:.4f} < {eps:.4f}; "
          f"L1(tokens, raw softmax) {raw_distance:.4f}")
    assert distance < eps
    assert raw_distance > eps


@pytest.mark.parametrize("params", [SamplingParams(0.0), SamplingParams(1.0), SamplingParams(0.8, 10)], ids=str)
def test_after_rejections_the_next_q_equals_a_fresh_runs(tiny, params: SamplingParams) -> None:  # type: ignore[no-untyped-def]
    """Rounds of drafts partly accepted (then a recovered token the drafter did not propose): the
    session's next q matches a fresh drafter's over the same text."""
    _, folder = tiny
    rng = np.random.default_rng(3)
    session = drafter(folder, params)
    context = list(CONTEXT)
    worst = 0.0
    for _ in range(12):
        draft = session.propose(context, 4)
        accepted = int(rng.integers(0, 5))
        recovered = int(rng.integers(0, VOCAB))
        context += draft.token_ids[:accepted] + ([recovered] if accepted < 4 else [])
        ours = session.next_logits(context)
        fresh = drafter(folder, params).next_logits(context)
        worst = max(worst, float(np.abs(_softmax(ours) - _softmax(fresh)).max()))
    print(f"{params}: largest probability difference from a fresh run {worst:.2e} (tolerance {ROLLBACK_TOLERANCE})")
    assert worst < ROLLBACK_TOLERANCE


def test_cache_keeps_accepted_drafts_and_runs_only_new_tokens(tiny) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    d = drafter(folder, SamplingParams(0.0))
    draft = d.propose(CONTEXT, 4)
    assert d.model_calls == 4  # the context in one call, then one per drafted token but the last
    d.propose(CONTEXT + draft.token_ids + [1], 4)  # all accepted plus a bonus: 2 new tokens, one call
    assert d.model_calls == 4 + 1 + 3


def test_the_policy_is_asked_before_each_step_and_a_stop_saves_the_steps(tiny) -> None:  # type: ignore[no-untyped-def]
    """A chain stopped after 2 tokens is the first 2 tokens of the full chain (same draws), ran
    2 model calls, and times its one-token steps; a stop before the first step runs nothing."""
    _, folder = tiny
    full = drafter(folder, SamplingParams(1.0)).propose(CONTEXT, 5)
    asked: list[tuple[list[int], int, int]] = []

    def keep(chain, max_depth, max_nodes, step_seconds, catch_up_seconds, reads_prompt):  # type: ignore[no-untyped-def]
        asked.append((list(chain.token_ids), max_depth, max_nodes))
        return len(chain) < 2

    stopped = drafter(folder, SamplingParams(1.0))
    draft = stopped.propose(CONTEXT, 5, keep_drafting=keep)
    assert draft.token_ids == full.token_ids[:2] and draft.q_probs == full.q_probs[:2]
    assert asked == [([], 5, 5), (full.token_ids[:1], 5, 5), (full.token_ids[:2], 5, 5)]
    assert stopped.model_calls == 2 and stopped.step_seconds > 0
    declined = drafter(folder, SamplingParams(1.0))
    assert len(declined.propose(CONTEXT, 5, 9, lambda *_: False)) == 0 and declined.model_calls == 0


def test_the_first_step_is_priced_with_the_context_it_must_read_first(tiny) -> None:  # type: ignore[no-untyped-def]
    """Before its first call a drafter reports what that call costs beyond a step: the tokens it
    reads besides the step's own, at the model's per-token seconds (the whole context for a
    drafter that has not read it); after a prefill only the last token is left to run."""
    _, folder = tiny
    context = list(range(1, 41))
    offered: list[float] = []
    reads: list[bool] = []
    fresh, prefilled = drafter(folder, SamplingParams(0.0)), drafter(folder, SamplingParams(0.0))

    def keep(chain, max_depth, max_nodes, step_seconds, catch_up_seconds, reads_prompt):  # type: ignore[no-untyped-def]
        offered.append(catch_up_seconds)
        reads.append(reads_prompt)
        return len(chain) == 0  # one token

    prefilled.prefill(context)  # 40 tokens: times the model's per-token seconds
    model = prefilled.model
    assert model.token_seconds > 0 and fresh.pending_tokens(context) == 40 and prefilled.pending_tokens(context) == 1
    per_token = model.token_seconds
    fresh.propose(context, 3, keep_drafting=keep)  # its 40-token read then updates token_seconds
    assert offered == [pytest.approx(39 * per_token), 0.0]  # the read, then (one token drafted) nothing
    assert reads == [True, False]  # the read is the prompt's
    fresh.propose([*context, 41, 42], 3, keep_drafting=keep)  # now only the two tokens emitted since: the step's and one more
    assert reads == [True, False, False, False] and offered[2] == pytest.approx(model.token_seconds)


def test_prefill_leaves_only_the_last_token_to_run(tiny) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    prefilled, fresh = drafter(folder, SamplingParams(0.0)), drafter(folder, SamplingParams(0.0))
    prefilled.prefill(CONTEXT)
    assert prefilled.model_calls == 1
    assert prefilled.propose(CONTEXT + [5], 4) == fresh.propose(CONTEXT + [5], 4)  # the verifier's token, then drafts
    assert prefilled.model_calls == 1 + 4  # the new token in one call (the prompt was not run again), 3 more drafts


def test_a_window_reads_the_prompts_last_tokens_and_everything_after(tiny) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    model = load_draft_model(folder)
    windowed = OnnxDrafter(model, SamplingParams(0.0), np.random.default_rng(0), window=3)
    whole = OnnxDrafter(model, SamplingParams(0.0), np.random.default_rng(0), window=0)
    assert windowed.reads_all_of(3) and not windowed.reads_all_of(len(CONTEXT)) and whole.reads_all_of(len(CONTEXT))
    first = windowed.propose(CONTEXT, 4)
    assert first == whole.propose(CONTEXT[-3:], 4)
    grown = CONTEXT + first.token_ids[:2] + [5]  # two drafts accepted, then the verifier's token
    assert windowed.propose(grown, 4) == whole.propose(grown[-6:], 4)  # the window's start stays put


def test_greedy_tree_branches_with_the_next_most_likely_tokens(tiny) -> None:  # type: ignore[no-untyped-def]
    model, folder = tiny
    draft = drafter(folder, SamplingParams(0.0)).propose(CONTEXT, 3, 7)
    assert draft.parents == [ROOT, 0, 1, ROOT, ROOT, 0, 0]  # 4 siblings dealt to depths 1, 2
    with torch.no_grad():
        first = model(torch.tensor([CONTEXT])).logits[0, -1]
        second = model(torch.tensor([CONTEXT + draft.token_ids[:1]])).logits[0, -1]
    assert [draft.token_ids[i] for i in (0, 3, 4)] == first.topk(3).indices.tolist()
    assert [draft.token_ids[i] for i in (1, 5, 6)] == second.topk(3).indices.tolist()
    assert all(probs == [1.0] for probs in draft.q_probs)


def test_greedy_drafts_carry_how_sure_the_model_was_of_each_token(tiny) -> None:  # type: ignore[no-untyped-def]
    """A greedy draft's q is a point mass; its confidences are the model's softmax probability of
    each node's token (chain and siblings), which the acceptance predictor reads as its `doubt`,
    and the partial chains the policy is asked about carry them. Sampled drafts carry q itself."""
    model, folder = tiny
    seen: list[list[float]] = []

    def keep(chain, *_):  # type: ignore[no-untyped-def]
        seen.append(list(chain.confidences))
        return True

    draft = drafter(folder, SamplingParams(0.0)).propose(CONTEXT, 3, 7, keep)
    with torch.no_grad():
        first = _softmax(model(torch.tensor([CONTEXT])).logits[0, -1].numpy())
        second = _softmax(model(torch.tensor([CONTEXT + draft.token_ids[:1]])).logits[0, -1].numpy())
    expected = [first[draft.token_ids[i]] if draft.parents[i] == ROOT else second[draft.token_ids[i]] for i in (0, 1, 3, 4, 5, 6)]
    np.testing.assert_allclose([draft.confidences[i] for i in (0, 1, 3, 4, 5, 6)], expected, rtol=1e-4)
    assert draft.confidences[0] > draft.confidences[3] > draft.confidences[4]  # the argmax, then the runners-up
    assert seen == [draft.confidences[:j] for j in range(3)]
    doubt = node_features(draft, range(len(draft)))[:, FEATURES.index("doubt")]
    np.testing.assert_allclose(doubt, 1.0 - np.asarray(draft.confidences))
    assert drafter(folder, SamplingParams(1.0)).propose(CONTEXT, 3, 7).confidences == []


def test_sampled_tree_siblings_declare_their_chain_nodes_q(tiny) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    draft = drafter(folder, SamplingParams(1.0)).propose(CONTEXT, 4, 9)
    assert draft.parents[:4] == [ROOT, 0, 1, 2] and draft.parents[4:] == [ROOT, ROOT, ROOT, 0, 0]
    for node in range(4, 9):
        chain_node = draft.parents[node] + 1
        assert (draft.q_token_ids[node], draft.q_probs[node]) == (draft.q_token_ids[chain_node], draft.q_probs[chain_node])
    assert drafter(folder, SamplingParams(1.0)).propose(CONTEXT, 0, 9).token_ids == []
    assert len(drafter(folder, SamplingParams(1.0)).propose(CONTEXT, 4, 2).token_ids) == 2  # cut to max_nodes


@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(0.0)], ids=str)
def test_drafts_carry_each_nodes_q_entropy_as_the_policies_would_compute_it(tiny, params: SamplingParams) -> None:  # type: ignore[no-untyped-def]
    """Computed once from q's array, and to the last bit what the acceptance features compute
    from the lists a Draft carries (so policies decide as before, without converting every step);
    the partial chains the policy is asked about carry them too, and so does a cut."""
    _, folder = tiny
    seen: list[list[float]] = []

    def keep(chain, *_):  # type: ignore[no-untyped-def]
        seen.append(list(chain.q_entropies))
        return True

    draft = drafter(folder, params).propose(CONTEXT, 4, 9, keep)
    recomputed = node_features(replace(draft, q_entropies=[]), range(len(draft)))
    np.testing.assert_array_equal(node_features(draft, range(len(draft))), recomputed)
    assert len(draft.q_entropies) == 9 and seen == [draft.q_entropies[:j] for j in range(4)]
    assert (max(draft.q_entropies) > 0) == (not params.greedy)
    assert cut(draft, 2, 3).q_entropies == [draft.q_entropies[i] for i in (0, 1, 4)]


def test_seeded_streams_are_reproducible_and_distinct(tiny) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    params = SamplingParams(1.0)

    def tokens(seed: int, stream: int) -> list[int]:
        d = drafter(folder, params, seed, stream)
        return [t for _ in range(5) for t in d.propose(CONTEXT, 4, 8).token_ids]

    assert tokens(1, 0) == tokens(1, 0)
    assert tokens(1, 0) != tokens(1, 1) and tokens(1, 0) != tokens(2, 0)


def test_a_raced_draft_is_q_s_race_winners_with_the_runners_up_as_siblings(tiny) -> None:  # type: ignore[no-untyped-def]
    """With a race (a seeded session under the exact rule) each chain token is the race winner
    of its q at its position in the context, a sibling the next in the race, none repeated; the
    same seed drafts the same whatever the stream, and the q sent is the one raced."""
    _, folder = tiny
    params = SamplingParams(1.0)
    models = DrafterModels({"small": folder}, FINGERPRINT)
    draft = make_drafter("onnx-small", params, 5, 0, models, race=True).propose(CONTEXT, 4, 9)
    assert draft.parents == [ROOT, 0, 1, 2, ROOT, ROOT, ROOT, 0, 0]
    for node in range(9):
        depth = node if node < 4 else draft.parents[node] + 1  # 0-based depth of the node
        exps = exponentials(5, len(CONTEXT) + depth, VOCAB)
        ranking = race_ranking(np.array(draft.q_token_ids[node]), np.array(draft.q_probs[node]), exps, 4)
        rank = 0 if node < 4 else sum(draft.parents[m] == draft.parents[node] for m in range(4, node + 1))  # among siblings
        assert draft.token_ids[node] == ranking[rank]
    assert make_drafter("onnx-small", params, 5, 1, models, race=True).propose(CONTEXT, 4, 9).token_ids == draft.token_ids
    assert make_drafter("onnx-small", params, 6, 0, models, race=True).propose(CONTEXT, 4, 9).token_ids != draft.token_ids


def test_a_larger_tail_mass_sends_fewer_tokens_and_samples_only_from_them(tiny) -> None:  # type: ignore[no-untyped-def]
    model, folder = tiny
    with torch.no_grad():
        p = torch.softmax(model(torch.tensor([CONTEXT])).logits[0, -1].double(), -1).numpy()
    sizes = {}
    for tail in (1e-4, 0.2):
        made = make_drafter("onnx-small", SamplingParams(1.0), 0, 0, DrafterModels({"small": folder}, FINGERPRINT, tail_mass=tail))
        draft = made.propose(CONTEXT, 1, 200)
        ids = draft.q_token_ids[0]
        assert set(draft.token_ids) <= set(ids) and p[ids].sum() >= 1 - tail - 1e-9
        sizes[tail] = len(ids)
    assert sizes[0.2] < sizes[1e-4]


def test_a_drafter_drafts_only_within_its_graphs_positions(tiny) -> None:  # type: ignore[no-untyped-def]
    """The Llama graph's fused node rotates from tables of max_position_embeddings positions: a
    drafter whose tables end at 12 drafts at most the tokens that fit (the chain's last one is
    drawn, not run), nothing once its context alone is past them, and a call past them is a
    ValueError, not a read past the tables."""
    _, folder = tiny
    model = DraftModel(folder)
    assert model.manifest.max_positions == 512  # the tiny model's max_position_embeddings
    model.manifest = replace(model.manifest, max_positions=12)
    session = OnnxDrafter(model, SamplingParams(0.0), np.random.default_rng(0), window=0)
    draft = session.propose(CONTEXT, 8)  # a chain, then greedy siblings up to 8 nodes
    chain = [i for i, parent in enumerate(draft.parents) if parent == i - 1]
    assert len(chain) == 12 - len(CONTEXT) + 1 and len(draft.token_ids) == 8
    assert OnnxDrafter(model, SamplingParams(0.0), np.random.default_rng(0), window=0).propose(list(range(3, 16)), 8).token_ids == []
    with pytest.raises(ValueError, match="position 12 is past the drafter's 12 positions"):
        model.run([5], [12], causal_bias(12, 1), model.empty_cache())


def test_missing_or_foreign_model_is_a_failed_precondition(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    with pytest.raises(FailedPrecondition, match="specdec draft build small"):
        make_drafter("onnx-small", models=DrafterModels({"small": tmp_path}))
    with pytest.raises(FailedPrecondition, match="another tokenizer"):
        make_drafter("onnx-small", models=DrafterModels({"small": folder}, "some-other-fingerprint"))
    assert load_draft_model(folder) is load_draft_model(folder)  # one model per process


def test_auto_default_drafter_is_the_built_quantized_model_else_copy(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, folder = tiny
    built = DrafterModels({"quantized": folder}, FINGERPRINT)
    assert resolve_default_drafter("auto", built) == "hybrid"
    assert resolve_default_drafter("auto", DrafterModels({"quantized": tmp_path}, FINGERPRINT)) == "copy"  # not built
    assert resolve_default_drafter("auto", DrafterModels({"quantized": folder}, "another-tokenizer")) == "copy"
    assert resolve_default_drafter("ngram", built) == "ngram"  # a named drafter is kept


@pytest.mark.slow
def test_real_quantized_drafter_rolls_back_exactly(onnx_quantized_dir: Path, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """The real int8 drafter over a chat prompt: after a round with any number of its drafts
    accepted (and a correction where not all were), its next logits are bit for bit those of a
    fresh session that read the kept text in the same calls (the prompt, then a token a call):
    the rejected drafts' entries, left in the cache's buffers, are never read. (Against one read
    of the whole text they differ by the int8 products' noise: a one-token call's attention
    rounds differently from a many-token call's, and activations quantized per row turn that
    into up to ~0.1 on a probability.) At temperature 1 with no truncation, q stays a small part
    of the vocabulary."""
    models = DrafterModels({"quantized": onnx_quantized_dir}, tokenizer.fingerprint)
    prompt = tokenizer.encode_chat([{"role": "user", "content": "Write a short poem about the sea."}])
    correction = tokenizer.encode(" sea", add_special_tokens=False)[0]
    params = SamplingParams(0.8, 50)
    for accepted in (0, 1, 2, 4):
        session = make_drafter("onnx-quantized", params, 0, 0, models)
        assert isinstance(session, OnnxDrafter)
        draft = session.propose(prompt, 4)  # the prompt, then d1, d2, d3 a call each
        kept = draft.token_ids[:accepted] + ([correction] if accepted < 4 else [])
        ours = session.next_logits(prompt + kept)
        replay = make_drafter("onnx-quantized", params, 0, 0, models)
        assert isinstance(replay, OnnxDrafter)
        for end in range(len(prompt), len(prompt) + len(kept) + 1):  # a call for the prompt, then one a token
            theirs = replay.next_logits((prompt + kept)[:end])
        assert np.array_equal(ours, theirs), f"{accepted} accepted: largest |logit difference| {np.abs(ours - theirs).max():.2e}"
    support = len(draft_distribution(session.next_logits(prompt + kept), SamplingParams(1.0)).token_ids)
    print(f"temperature 1, no truncation: q covers {support} of {tokenizer.vocab_size} tokens")
    assert support < tokenizer.vocab_size // 4


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()
