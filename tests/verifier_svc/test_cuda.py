"""The verifier on a CUDA GPU, with the real default model in float32 and in bfloat16 (the
production dtype on cuda: `--dtype auto`). Skipped where torch sees no CUDA device (CI has none);
run it on a GPU machine: `python -m pytest tests/verifier_svc/test_cuda.py -s`.

What holds on the GPU as on the CPU:
- a tree pass (tree attention mask, tree position ids, the session's KV cache, keep() of an
  accepted path) gives, at every node, the logits of scoring that node's root-to-node path as a
  plain sequence, within LOGIT_ATOL of the dtype (printed); and the same comparison against the
  parent's path is far off (the check has power);
- the batched pass gives the tokens of the unbatched one, greedy and sampled with seeds;
- greedy: the verifier's output (no speculation, copy-drafter chains and trees) equals
  transformers' own greedy generate() on the same device and dtype, token for token, in float32.
  In bfloat16 two kernels that sum in another order break near ties either way (generate()
  scores one token per pass, we score trees under a mask): there a divergence is allowed only
  where the reference's own logits of the two tokens are within GREEDY_TIE (printed);
- lone passes replay CUDA graphs (the default: backends/cuda.py) and give the logits of the same
  passes run eagerly, at every recorded size, with padding rows, across keep() of tree paths;
- speculative sampling is exact: the first emitted token over 2,000 seeds follows p (chi-square,
  with the bound and power checks of tests/integration/test_exactness_end_to_end.py), and so
  does the exponential race's (its `exact` case: seeded sessions under the exact rule).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest
import torch

from drafter_svc.copy_drafter import CopyDrafter
from specdec.acceptance_params import AcceptanceParams, parse as parse_acceptance
from specdec.sampling_params import SamplingParams
from tests.integration.prompts import CHAT_PROMPTS, TEXT_PROMPTS
from tests.integration.test_exactness_end_to_end import ALPHA, CASES, SAMPLES, TEMPERATURE, TOP_K, chi_square_p_value, target_distribution
from tests.verifier_svc import test_batched_pass as batched
from verifier_svc.backends.cuda_graphs import GraphRunner
from verifier_svc.batched_pass import PassInput, score_batch
from verifier_svc.model_loader import load_model, model_dir
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.target_model import TargetModel
from verifier_svc.token_tree import ROOT, build_tree, chain

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")

# Largest |logit difference| between two computations of the same logits that differ only in
# kernels and summation order. float32: the CPU tests' bound (measured on an H100: 6e-5).
# bfloat16 keeps 8 bits of mantissa: the head's output alone is rounded to steps of 0.125 at
# logits of 16-32 and 0.25 at 32-64, after 30 layers of bfloat16 sums; measured on an H100 with
# cuDNN's and with the memory-efficient attention kernel: 0.19 and 0.63 (tree vs sequential),
# 0.67 and 0.94 (a padded batch of 4 vs alone). A wrong mask or position moves logits by whole
# units (at least 6.1 measured): the power check asserts twice the tolerance.
LOGIT_ATOL = {torch.float32: 1e-3, torch.bfloat16: 2.0}
# Greedy in bfloat16: where our output leaves generate()'s, the reference's own logits of the two
# tokens must be this close (two steps at logits of 32-64; measured gaps 0 to 0.125). float32:
# no divergence at all.
GREEDY_TIE = 0.5
LIMITS = Limits(max_draft_tokens=32, max_draft_depth=16, context_length=2048)
MAX_NEW_TOKENS = 64
GREEDY_PROMPTS = [("chat", p) for p in CHAT_PROMPTS[:4]] + [("text", p) for p in TEXT_PROMPTS]
# (draft length, tree nodes): no speculation, a chain, a tree.
GREEDY_CONFIGS = [(0, 0), (8, 8), (4, 16)]
SESSIONS_PER_PASS = 250  # the exactness runs score this many one-round sessions per batched pass


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def target(request: pytest.FixtureRequest) -> TargetModel:
    model = load_model(model_dir("default"), "cuda", request.param)
    return TargetModel(model, f"default-{request.param}")


def plain_logits(target: TargetModel, ids: Sequence[int]) -> torch.Tensor:
    """[vocab] float32: the model's next-token logits after `ids`, one causal pass, no cache."""
    with torch.inference_mode():
        return target.model(torch.tensor([list(ids)], device=target.device)).logits[0, -1].float().cpu()


def path_tokens(tokens: Sequence[int], parents: Sequence[int], node: int) -> list[int]:
    path = []
    while node != ROOT:
        path.append(tokens[node])
        node = parents[node]
    return path[::-1]


def random_tree(rng: random.Random, context: Sequence[int], n: int) -> tuple[list[int], list[int]]:
    tokens = [rng.choice(context) for _ in range(n)]
    parents = [rng.choice([ROOT, *range(i)]) if i else ROOT for i in range(n)]
    return tokens, parents


def test_tree_pass_equals_sequential_scoring(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """Two rounds on one cache (the second after keep() of a path with a gap): every row of the
    tree pass equals the plain pass over prompt + committed + that node's path."""
    tol = LOGIT_ATOL[target.dtype]
    rng = random.Random(3)
    committed = tokenizer.encode("The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the")
    cache = target.new_cache()
    pending = committed
    worst, nearest_wrong = 0.0, float("inf")
    for _ in range(2):
        tokens, parents = random_tree(rng, committed, 12)
        logits = target.score(cache, pending, build_tree(tokens, parents))  # [13, vocab]
        assert logits.device.type == "cpu" and logits.dtype == torch.float32
        for row in range(len(tokens) + 1):
            path = path_tokens(tokens, parents, row - 1) if row else []
            expected = plain_logits(target, committed + path)
            worst = max(worst, (logits[row] - expected).abs().max().item())
            if row:  # the parent's logits: what a wrong mask or position would come near
                wrong = plain_logits(target, committed + path[:-1])
                nearest_wrong = min(nearest_wrong, (logits[row] - wrong).abs().max().item())
        # Keep a path that skips a node (keep() gathers), as an accepted path would.
        leaf = max(range(len(tokens)), key=lambda i: len(path_tokens(tokens, parents, i)))
        path_nodes, node = [], leaf
        while node != ROOT:
            path_nodes.append(node)
            node = parents[node]
        path_nodes.reverse()
        cache.keep(len(committed), path_nodes)
        committed = committed + [tokens[i] for i in path_nodes]
        assert len(cache) == len(committed)
        pending = [int(logits[len(path_nodes)].argmax())]  # the next token, not cached yet
        committed = committed + pending
    print(f"\n{target.dtype}: tree pass vs sequential max |logit diff| {worst:.2e} (tolerance {tol}); "
          f"vs the parent's logits at least {nearest_wrong:.2f}")
    assert worst < tol
    assert nearest_wrong > 2 * tol


def test_graph_replays_give_the_eager_logits(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """One session in a graph slot against the same rounds on a target without graphs: trees of
    0-40 nodes (the recorded sizes 1-64, padded), a path kept after each; the prefill (over 64
    tokens) runs eagerly on both."""
    eager = TargetModel(target.model, target.name, graphs=False)
    assert target.backend.passes is not None and eager.backend.lone_pass(eager.new_cache(), 0, 1) is None
    assert " slots replay CUDA graphs" in target.backend.engine() and eager.backend.engine().endswith("; no CUDA graphs")
    rng = random.Random(5)
    prompt = tokenizer.encode(" ".join(TEXT_PROMPTS))[:100]
    graphed, plain = target.new_cache(), eager.new_cache()
    assert graphed.in_storage()
    for t, cache in ((target, graphed), (eager, plain)):
        t.score(cache, prompt, chain([]))
    replays, worst = GraphRunner.replays, 0.0
    for n in (0, 1, 3, 6, 12, 25, 40):
        tokens, parents = random_tree(rng, prompt, n)
        pending = [rng.choice(prompt)]
        ours = target.score(graphed, pending, build_tree(tokens, parents))
        theirs = eager.score(plain, pending, build_tree(tokens, parents))
        worst = max(worst, (ours - theirs).abs().max().item())
        for cache in (graphed, plain):
            cache.keep(len(cache) - n, [0] if n else [])
    print(f"\n{target.dtype}: graph replays vs eager passes max |logit diff| {worst:.2e}; {GraphRunner.recorded} graphs recorded")
    assert GraphRunner.replays == replays + 7, "every round replayed a graph"
    assert graphed.in_storage() and len(graphed) == len(plain)
    assert worst < LOGIT_ATOL[target.dtype]


def test_batched_pass_equals_unbatched(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """tests/verifier_svc/test_batched_pass.py's run on the GPU: 4 sessions (greedy and three
    sampled settings with seeds) joining at different rounds, batched and alone."""
    alone_tokens, alone_logits = batched.run(target, tokenizer, batched=False)
    batch_tokens, batch_logits = batched.run(target, tokenizer, batched=True)
    worst = max((a - b).abs().max().item() for xs, ys in zip(alone_logits, batch_logits) for a, b in zip(xs, ys))
    print(f"\n{target.dtype}: batched vs unbatched max |logit diff| {worst:.2e} (tolerance {LOGIT_ATOL[target.dtype]})")
    assert batch_tokens == alone_tokens
    assert worst < LOGIT_ATOL[target.dtype]


def greedy_by_verifier(target: TargetModel, prompt_ids: list[int], k: int, nodes: int, eos: set[int]) -> list[int]:
    """Rounds of Session.verify with the copy drafter's drafts (none when k = 0), as the services run them."""
    session = Session(target, prompt_ids, SamplingParams(temperature=0.0), seed=0, limits=LIMITS)
    drafter = CopyDrafter()
    out: list[int] = []
    while len(out) < MAX_NEW_TOKENS and not eos.intersection(out):
        draft = drafter.propose(session.tokens, min(k, MAX_NEW_TOKENS - len(out) - 1), nodes)
        round_ = RoundInput(draft.token_ids, draft.parents, draft.q_token_ids, draft.q_probs)
        verdict = session.verify(round_)
        out += [round_.tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token]
    return cut_at_eos(out[:MAX_NEW_TOKENS], eos)


def cut_at_eos(tokens: Sequence[int], eos: set[int]) -> list[int]:
    return list(tokens[: next((j for j, t in enumerate(tokens) if t in eos), len(tokens))])


def test_greedy_output_equals_transformers_generate(target: TargetModel, tokenizer) -> None:  # type: ignore[no-untyped-def]
    eos = set(tokenizer.eos_token_ids)
    compared = identical = 0
    for kind, prompt in GREEDY_PROMPTS:
        ids = tokenizer.encode_chat([{"role": "user", "content": prompt}]) if kind == "chat" else tokenizer.encode(prompt)
        with torch.inference_mode():
            x = torch.tensor([ids], device=target.device)
            generated = target.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
        reference = cut_at_eos(generated[0, len(ids):].tolist(), eos)
        for k, nodes in GREEDY_CONFIGS:
            ours = greedy_by_verifier(target, ids, k, nodes, eos)
            compared += 1
            if ours == reference:
                identical += 1
                continue
            j = next((j for j, (a, b) in enumerate(zip(ours, reference)) if a != b), min(len(ours), len(reference)))
            assert target.dtype != torch.float32, f"k={k} nodes={nodes} prompt {prompt[:30]!r}: differs from token {j}"
            assert j < min(len(ours), len(reference)), "one output is a prefix of the other (a wrong stop)"
            logits = plain_logits(target, ids + reference[:j])
            gap = (logits[reference[j]] - logits[ours[j]]).item()
            print(f"\n{target.dtype} k={k} nodes={nodes} {prompt[:30]!r}: token {j} differs "
                  f"({reference[j]} vs {ours[j]}); their logits are {gap:.3f} apart")
            assert abs(gap) < GREEDY_TIE, "a divergence where the reference has no near tie"
    print(f"\n{target.dtype}: {identical} of {compared} greedy outputs ({MAX_NEW_TOKENS} tokens) identical to generate(); "
          f"every other one left it at a near tie")


def first_tokens(
    target: TargetModel, prompt_ids: list[int], round_: RoundInput, samples: int, acceptance: AcceptanceParams
) -> tuple[Counter, int, torch.Tensor]:
    """First emitted token over seeds 0..samples-1 under `acceptance`, one session per seed,
    SESSIONS_PER_PASS sessions per batched pass; how often a draft was accepted; the row-0 logits
    of the last pass."""
    sampling = SamplingParams(temperature=TEMPERATURE, top_k=TOP_K)
    counts: Counter = Counter()
    accepted = 0
    for start in range(0, samples, SESSIONS_PER_PASS):
        seeds = range(start, min(start + SESSIONS_PER_PASS, samples))
        group = [Session(target, prompt_ids, sampling, seed, LIMITS, acceptance) for seed in seeds]
        prepared = [s.prepare(round_) for s in group]
        scored = score_batch(target, [PassInput(s.cache, p.pending, p.tree) for s, p in zip(group, prepared)])
        for session, ready, logits in zip(group, prepared, scored):
            verdict = session.finish(ready, logits)
            counts[([round_.tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token])[0]] += 1
            accepted += bool(verdict.accepted_nodes)
    return counts, accepted, scored[0][0]


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_sampling_follows_the_target_distribution(target: TargetModel, tokenizer, case: str) -> None:  # type: ignore[no-untyped-def]
    prompt, max_tree_nodes, width, _, rule = CASES[case]  # the sample count here is this module's own
    prompt_ids = tokenizer.encode(prompt)
    draft = CopyDrafter().propose(prompt_ids, 1, max_tree_nodes)
    assert len(draft.token_ids) == width
    round_ = RoundInput(draft.token_ids, draft.parents, draft.q_token_ids, draft.q_probs)
    counts, accepted, logits = first_tokens(target, prompt_ids, round_, SAMPLES, parse_acceptance(rule))
    assert sum(counts.values()) == SAMPLES
    assert 0.1 * SAMPLES < accepted < 0.8 * SAMPLES  # accepted and recovered paths both ran

    p = target_distribution(logits, TEMPERATURE, TOP_K)  # the p the verifier sampled from
    reference = target_distribution(plain_logits(target, prompt_ids), TEMPERATURE, TOP_K)
    value = chi_square_p_value(counts, p, SAMPLES)
    print(f"\n{target.dtype} {case}: {accepted} of {SAMPLES} drafts accepted; chi-square p-value {value:.3f} "
          f"(bound {ALPHA}); total variation to a plain pass's p {0.5 * abs(p - reference).sum():.4f}")
    assert value > ALPHA, counts.most_common(10)
    assert chi_square_p_value(counts, reference, SAMPLES) > ALPHA
    always_accept = p * 0
    always_accept[draft.token_ids] = 1.0 / width
    for wrong in (target_distribution(logits, 1.0, TOP_K), target_distribution(logits, TEMPERATURE, 0), always_accept):
        assert chi_square_p_value(counts, wrong, SAMPLES) < ALPHA  # power: plausible bugs are rejected
