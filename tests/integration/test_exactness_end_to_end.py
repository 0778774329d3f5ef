"""Exactness end to end: through the real services and model, at temperature 0.8 and top_k 50,
the first generated token over 1,000-2,000 seeded requests follows the target's own next-token
distribution computed directly with transformers.

Two cases. A chain: the prompt makes the copy drafter draft the first token (" tea", after the
2-token match " We like"), and the target gives that draft a moderate probability, so both the
accepted and the rejected (recovered-token) paths of Algorithm 1 are exercised on most seeds. A
tree: the prompt has two earlier occurrences of " She has a" (" red", " blue"), so the first
round's tree has two sibling point masses under the root, tried in random order, each accepted
with its probability under what the other's rejection left of p (Stratos, section 2.1).

The bound: Pearson's chi-square goodness-of-fit statistic over the tokens with expected count
>= 5 (the rest pooled into one cell) is asymptotically chi2(cells - 1) under exactness; the test
fails when its p-value is below ALPHA = 1e-4. Seeds are fixed, so the outcome is deterministic.
Power: the same counts must REJECT plausible bugs (temperature ignored, top-k ignored, drafts
always accepted), which shows the sample sizes are enough to see a wrong distribution.

Two more cases run the ONNX drafter (the int8 copy of the target), whose drafts are sampled from a
real q that it sends: at temperature 0.8/top-k 50 as a tree of two siblings drawn i.i.d. from q,
and at temperature 1 without truncation (q tail-cut) as a chain; 1,000 seeds each.

A seeded request under the exact rule is verified by the exponential race (coupled_sampling.py),
whose output does not depend on the drafts. These cases test speculative sampling, as unseeded
requests run it, so they ask for `lenient:1`: Leviathan's rule bit for bit (lossy_acceptance.py)
that a seed makes reproducible. One more case, the chain under `exact`, tests the race.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from drafter_svc.copy_drafter import CopyDrafter
from specdec.client import AsyncClient
from specdec.launcher import LocalCluster
from tests.conftest import services

SPECULATIVE = "lenient:1"  # speculative sampling with a reproducible seed (module docstring)
CASES = {
    # name: (prompt, max_tree_nodes, number of root children the copy drafter drafts, samples, rule)
    "chain": ("Yes. We like tea. You like tea. We like", 1, 1, 2000, SPECULATIVE),
    # Half the samples: the same power. Simulated from p (200 sets of seeds each), the power
    # checks below reject all three wrong distributions for 98.5% of seed sets at 1,000 samples
    # (the chain case needs 2,000 for that).
    "tree": ("She has a red hat. She has a blue hat. She has a", 4, 2, 1000, SPECULATIVE),
    "chain-race": ("Yes. We like tea. You like tea. We like", 1, 1, 2000, "exact"),
}
TEMPERATURE, TOP_K = 0.8, 50
SAMPLES = 2000
# Requests in flight: the verifier scores their rounds in one batched pass, whose cost is mostly
# reading the weights once (the tree case: 57 s at 4, 24 s at 20; the three copy cases 119 s at
# 20, 98 s at 32, 92 s at 48). A cancelled session closes a little later, so the cluster
# allows more sessions than this.
CONCURRENCY = 32
ALPHA = 1e-4


@pytest.fixture(scope="module")
def exact_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Services with room for CONCURRENCY sessions and those still closing. The verifier scores
    every drafted node as sent (it cuts trees only at a hard limit, --max-pass-rows, off here),
    and the requests use the fixed policy, so the tree case's two siblings are always tested.
    Tuned as served: its passes batch ~16 sessions' 2-3 rows each, which the oneDNN copies that
    tuning makes run ~1.2x as fast (the chain case 37.6 s -> 30.9 s, against ~11 s of tuning). The
    int8 drafter reads prompts itself: taken from the verifier, a prompt comes after the first
    round, which then carries no model draft, and these tests read the first round alone."""
    args = ("--max-sessions", str(CONCURRENCY + 8))
    drafter_args = ("--onnx-prompt-from-verifier-tokens", "0")
    with services(tmp_path_factory.mktemp("exact-cluster-logs"), *args, drafter_args=drafter_args) as c:
        yield c


def target_distribution(logits: torch.Tensor, temperature: float, top_k: int) -> np.ndarray:
    """softmax(logits / T) restricted to the top_k tokens and renormalized: the definition."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_k:
        keep = torch.zeros_like(probs, dtype=torch.bool)
        keep[probs.topk(top_k).indices] = True
        probs = torch.where(keep, probs, 0.0)
    return (probs / probs.sum()).numpy()


def chi_square_p_value(counts: Counter, probs: np.ndarray, n: int) -> float:
    expected = probs * n
    big = np.flatnonzero(expected >= 5)
    observed = np.array([counts.get(int(t), 0) for t in big], dtype=float)
    rest_obs, rest_exp = n - observed.sum(), n - expected[big].sum()
    if rest_exp < 1e-9 and rest_obs > 0:
        return 0.0  # tokens seen that the distribution says are impossible
    obs = np.append(observed, rest_obs) if rest_exp >= 1e-9 else observed
    exp = np.append(expected[big], rest_exp) if rest_exp >= 1e-9 else expected[big]
    return float(scipy_stats.chisquare(obs, exp).pvalue)


async def first_tokens(
    address: str, prompt_ids: list[int], max_tree_nodes: int,
    drafter: str = "copy", temperature: float = TEMPERATURE, top_k: int = TOP_K, samples: int = SAMPLES,
    acceptance: str = SPECULATIVE,
) -> tuple[Counter, int]:
    """First-token counts over SAMPLES seeds, and how often the first round accepted a draft.

    Each request reads only the first streamed chunk (the first round: an accepted draft and the
    next token, or a recovered token) and then cancels, sparing the second target pass."""
    counts: Counter = Counter()
    accepted = 0
    seeds = iter(range(samples))
    async with AsyncClient(address) as client:
        async def worker() -> None:
            nonlocal accepted
            for seed in seeds:
                stream = client.stream(
                    token_ids=prompt_ids, max_new_tokens=2, temperature=temperature, top_k=top_k,
                    seed=seed, drafter=drafter, num_draft_tokens=1, max_tree_nodes=max_tree_nodes,
                    draft_policy="fixed",  # every first round drafts: an adaptive policy might not
                    acceptance=acceptance,
                )
                first_round = await anext(stream)
                await stream.aclose()
                counts[first_round.token_ids[0]] += 1
                accepted += len(first_round.token_ids) == 2
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return counts, accepted


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_first_token_follows_the_target_distribution(exact_cluster, reference_model, tokenizer, case: str) -> None:  # type: ignore[no-untyped-def]
    prompt, max_tree_nodes, width, samples, rule = CASES[case]
    prompt_ids = tokenizer.encode(prompt)
    draft = CopyDrafter().propose(prompt_ids, 1, max_tree_nodes).token_ids
    with torch.inference_mode():
        logits = reference_model(torch.tensor([prompt_ids])).logits[0, -1]
    p = target_distribution(logits, TEMPERATURE, TOP_K)
    assert len(draft) == width and 0.15 < p[draft].sum() < 0.8, "the prompt must make both paths likely"

    counts, accepted = asyncio.run(
        first_tokens(exact_cluster.address, prompt_ids, max_tree_nodes, samples=samples, acceptance=rule)
    )
    assert sum(counts.values()) == samples
    assert 0.1 * samples < accepted < 0.8 * samples  # both paths ran, many times

    assert chi_square_p_value(counts, p, samples) > ALPHA, counts.most_common(10)
    # Power: plausible bugs are rejected by the same counts.
    always_accept = np.zeros_like(p)
    always_accept[draft] = 1.0 / width
    for wrong in (target_distribution(logits, 1.0, TOP_K), target_distribution(logits, TEMPERATURE, 0), always_accept):
        assert chi_square_p_value(counts, wrong, samples) < ALPHA


# The ONNX drafter (int8 copy of the target) samples its drafts from a real q and sends it: the
# first token must still follow p exactly, with a truncated q (temperature 0.8, top-k 50; a tree
# of two siblings drawn i.i.d. from q) and an untruncated one (temperature 1; q tail-cut, a chain).
ONNX_PROMPT = "Once upon a time, in a small village, there lived a"
# Half the copy cases' samples: each request also runs the drafter's prefill, and the power checks
# below still reject the wrong distributions at this size.
ONNX_SAMPLES = 1000
ONNX_CASES = {
    # name: (temperature, top_k, max_tree_nodes)
    "t0.8-k50-tree": (0.8, 50, 2),
    "t1-chain": (1.0, 0, 1),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(ONNX_CASES))
def test_first_token_follows_the_target_distribution_with_the_onnx_drafter(  # type: ignore[no-untyped-def]
    onnx_quantized_dir, exact_cluster, reference_model, tokenizer, case: str
) -> None:
    temperature, top_k, max_tree_nodes = ONNX_CASES[case]
    prompt_ids = tokenizer.encode(ONNX_PROMPT)
    with torch.inference_mode():
        logits = reference_model(torch.tensor([prompt_ids])).logits[0, -1]
    p = target_distribution(logits, temperature, top_k)

    counts, accepted = asyncio.run(
        first_tokens(exact_cluster.address, prompt_ids, max_tree_nodes, "onnx-quantized", temperature, top_k, ONNX_SAMPLES)
    )
    assert sum(counts.values()) == ONNX_SAMPLES
    print(f"{case}: first draft accepted on {accepted} of {ONNX_SAMPLES} seeds; {len(counts)} distinct first tokens")
    assert 0.3 * ONNX_SAMPLES < accepted < ONNX_SAMPLES - 10  # accepted and recovered paths both ran

    assert chi_square_p_value(counts, p, ONNX_SAMPLES) > ALPHA, counts.most_common(10)
    # Power: another temperature (total variation 0.14 and 0.18 from p) or a truncation the
    # request did not ask for (top-k 20) is rejected by the same counts.
    wrong = [target_distribution(logits, 0.8 if temperature == 1.0 else 1.0, top_k), target_distribution(logits, temperature, 20)]
    for r in wrong:
        assert chi_square_p_value(counts, r, ONNX_SAMPLES) < ALPHA
