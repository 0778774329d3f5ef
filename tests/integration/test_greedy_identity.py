"""Greedy identity: at temperature 0 our output equals transformers' own greedy generate,
token for token, for the copy and n-gram drafters (and the ONNX drafter: its default chain and a tree of 4 deep), draft lengths 1, 4 and 8 (and no speculation), as chains and
as token trees (one and several branches per node, up to the verifier's 16 nodes), with fixed
draft lengths and with the adaptive draft-length policies, with and without overlapped drafting
(the verifier's lone passes through onnxruntime, the argmax of greedy passes of up to 4 rows from
its int8-bounded head: its defaults on CPU); plain decoding alone, each
token scored while its verdict travels; and a few of those with every pass in torch
(--cpu-onnx-passes false)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch

from specdec.client import AsyncClient, GenerationResult
from specdec.launcher import LocalCluster
from tests.conftest import services, verifier_metrics
from tests.integration.prompts import CHAT_PROMPTS, TEXT_PROMPTS

MAX_NEW_TOKENS = 40
CONCURRENCY = 8  # within the test cluster's CLUSTER_SESSIONS (12) verifier sessions
CASES = [("chat", p) for p in CHAT_PROMPTS] + [("text", p) for p in TEXT_PROMPTS]


def _prompt_ids(tokenizer, kind: str, prompt: str) -> list[int]:  # type: ignore[no-untyped-def]
    if kind == "chat":
        return tokenizer.encode_chat([{"role": "user", "content": prompt}])
    return tokenizer.encode(prompt)


@pytest.fixture(scope="module")
def reference_outputs(reference_model, tokenizer) -> dict[int, list[int]]:  # type: ignore[no-untyped-def]
    """transformers' greedy generate, cut at EOS (our streams do not include the EOS token)."""
    outputs = {}
    for i, (kind, prompt) in enumerate(CASES):
        ids = torch.tensor([_prompt_ids(tokenizer, kind, prompt)])
        with torch.inference_mode():
            out = reference_model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW_TOKENS
            )
        new = out[0, ids.shape[1]:].tolist()
        outputs[i] = [t for t in new[: next((j for j, t in enumerate(new) if t in tokenizer.eos_token_ids), len(new))]]
    return outputs


CONFIGS = [
    # (drafter, draft length, tree nodes: = length is a chain, draft policy, overlap)
    ("copy", 0, 0, "fixed", False), ("copy", 1, 1, "fixed", False), ("copy", 8, 8, "fixed", False),
    ("ngram", 4, 4, "fixed", False), ("copy", 1, 4, "fixed", False), ("copy", 4, 16, "fixed", False),
    ("ngram", 8, 16, "fixed", False),
    # Adaptive lengths cut trees per round; overlap sends pre-drafted rounds when the verdict agrees.
    ("copy", 8, 16, "auto", True), ("ngram", 8, 8, "specdec++", True), ("copy", 8, 8, "leviathan", False),
    # The ONNX drafter (int8 copy of the target): as the default `hybrid` drafter runs it (a chain
    # under `auto`, first round without a model draft while it prefills, overlap pre-drafts on its
    # own KV cache, copies where they pay), and a tree branching at depths 1-2.
    ("hybrid", 6, 6, "auto", True), ("onnx-quantized", 4, 8, "fixed", False),
]


@pytest.mark.parametrize("drafter,k,nodes,policy,overlap", CONFIGS)
def test_greedy_output_equals_transformers_generate(  # type: ignore[no-untyped-def]
    request, cluster, tokenizer, reference_outputs, drafter: str, k: int, nodes: int, policy: str, overlap: bool
) -> None:
    if drafter.startswith("onnx-"):
        request.getfixturevalue("onnx_quantized_dir")  # built once, found by the drafter service
    check_greedy_identity(cluster, tokenizer, reference_outputs, drafter, k, nodes, policy, overlap)
    log = cluster.verifier.log_path.read_text()
    # Made, and kept by the start-up check against the model's forward.
    assert "onnxruntime lone passes ready" in log and "onnxruntime lone passes off" not in log, "the shared cluster serves the default engine"
    assert "the argmax of greedy passes of up to 4 rows from an int8-bounded head" in log and "greedy head off" not in log


def test_plain_decoding_alone_scores_each_token_before_its_round(cluster, tokenizer, reference_outputs) -> None:  # type: ignore[no-untyped-def]
    """No speculation, one session at a time: the drafter's plain hint has the verifier run each
    next pass as soon as a verdict is sent (scheduler.py); the outputs are still transformers'
    greedy ones, and the rounds after each prompt's were answered from those passes (at least
    half of them: a round back before the worker looked finds no pass run ahead, and has its own)."""
    async def generate_all() -> list[GenerationResult]:
        async with AsyncClient(cluster.address) as client:
            return [
                await client.generate(token_ids=_prompt_ids(tokenizer, kind, prompt), max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, num_draft_tokens=0)
                for kind, prompt in CASES
            ]

    before = verifier_metrics(cluster)
    results = asyncio.run(generate_all())
    after = verifier_metrics(cluster)
    for i, result in enumerate(results):
        assert result.token_ids == reference_outputs[i], f"prompt {i}"
    later_rounds = sum(len(r.token_ids) - 1 for r in results)  # a round a token; the first reads the prompt
    used = after["specdec_verifier_ahead_passes_used"] - before["specdec_verifier_ahead_passes_used"]
    run = after["specdec_verifier_ahead_passes"] - before["specdec_verifier_ahead_passes"]
    assert later_rounds // 2 <= used <= later_rounds and used <= run <= used + len(CASES)


@pytest.fixture(scope="module")
def torch_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The test cluster with every verifier pass in torch (--cpu-onnx-passes false), untuned (its
    passes unpadded: padding's exactness is tests/verifier_svc/test_session.py's)."""
    logs = tmp_path_factory.mktemp("torch-cluster-logs")
    with services(logs, "--cpu-onnx-passes", "false", "--tune-pass-sizes", "false") as c:
        yield c
    assert "onnxruntime lone passes ready" not in "".join(p.read_text() for p in logs.glob("*verifier*"))


@pytest.mark.parametrize("drafter,k,nodes,policy,overlap", [("copy", 0, 0, "fixed", False), ("copy", 4, 16, "fixed", False)])
def test_greedy_output_with_torch_passes_equals_transformers_generate(  # type: ignore[no-untyped-def]
    torch_cluster, tokenizer, reference_outputs, drafter: str, k: int, nodes: int, policy: str, overlap: bool
) -> None:
    """The cases above run the default model's lone passes through onnxruntime (the default on
    CPU); these run them in torch: plain decoding, and a tree of 16 nodes four at a time (the
    policies and overlap are the drafter's, tested above whatever engine scores their rounds)."""
    check_greedy_identity(torch_cluster, tokenizer, reference_outputs, drafter, k, nodes, policy, overlap)


def check_greedy_identity(  # type: ignore[no-untyped-def]
    cluster: LocalCluster, tokenizer, reference_outputs: dict[int, list[int]], drafter: str, k: int, nodes: int, policy: str, overlap: bool
) -> None:
    async def generate_all() -> list[GenerationResult]:
        """The prompts, CONCURRENCY at a time with a fixed draft length (their rounds share the
        verifier's batched passes), one at a time with an adaptive one (which may rightly stop
        drafting when passes are shared, and must draft here for the test to prove anything)."""
        gate = asyncio.Semaphore(CONCURRENCY if policy == "fixed" else 1)
        async with AsyncClient(cluster.address) as client:
            async def one(kind: str, prompt: str) -> GenerationResult:
                async with gate:
                    return await client.generate(
                        token_ids=_prompt_ids(tokenizer, kind, prompt), max_new_tokens=MAX_NEW_TOKENS,
                        temperature=0.0, drafter=drafter, num_draft_tokens=k, max_tree_nodes=nodes,
                        draft_policy=policy, overlap=overlap,
                    )
            return await asyncio.gather(*(one(kind, prompt) for kind, prompt in CASES))

    drafted = hits = 0
    took: list[int] = []
    for i, ((_, prompt), result) in enumerate(zip(CASES, asyncio.run(generate_all()))):
        assert result.token_ids == reference_outputs[i], f"prompt {i} ({prompt[:40]!r})"
        expected = "eos" if len(reference_outputs[i]) < MAX_NEW_TOKENS else "length"
        assert result.finish_reason == expected
        assert result.text == tokenizer.decode(result.token_ids)
        assert (result.stats.draft_policy, result.stats.overlap) == (policy, overlap)
        assert (result.stats.q_bytes > 0) == (result.stats.drafted_tokens > 0)  # every drafted node sends its q
        # The int8 copy of the target starts from the verifier's keys and values of the prompt, or
        # from its own prompt cache where an earlier session of the process took that prompt.
        took.append(result.stats.prompt_tokens_from_verifier)
        assert took[-1] in ((0, result.stats.prompt_tokens) if drafter in ("hybrid", "onnx-quantized") else (0,))
        drafted += result.stats.drafted_tokens
        hits += result.stats.overlap_hits
    # The speculative configurations really speculated (otherwise this test proves nothing), and
    # with overlap on, pre-drafted rounds were really sent.
    assert (drafted > 0) == (k > 0)
    assert (hits > 0) == overlap
    if drafter == "hybrid":  # the first configuration with the int8 drafter: every prompt new to it
        assert all(took)


def test_the_onnx_default_drafts_after_a_long_prompt(request, cluster, tokenizer, reference_model) -> None:  # type: ignore[no-untyped-def]
    """Lone sessions with the ONNX drafter's default shape (auto, overlap) take a ~400-token prompt's
    keys and values from the verifier (~9 MB in float16: past the 4 MB that either service
    receives from its clients) and then draft, with greedy identity. Twice: a drafter that never
    read the prompt must not price its first step with the whole prompt and never draft (the bug
    this guarded against when the drafter read the prompt beside the verifier's prefill: the first
    pre-draft stood in for the prefill, and was declined). Then the hybrid drafter without overlap,
    under `auto` and under `fixed`. The answer copies a request from the prompt, so `fixed`, which sends a copy
    draft whenever there is one, sends them after the model's first round, and the output is the
    same. Whether `auto` sends copies here is a close call on the process's learned copy
    predictor (copy 2.05 against model 1.95 tokens per plain pass in one run, the other way in
    another), so only its output is checked."""
    request.getfixturevalue("onnx_quantized_dir")
    document = " ".join(CHAT_PROMPTS * 3)
    ids = tokenizer.encode_chat([{"role": "user", "content": f"Summarize these requests:\n\n{document}"}])
    assert len(ids) > 300
    with torch.inference_mode():
        out = reference_model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False, max_new_tokens=32)
    new = out[0, len(ids):].tolist()
    expected = new[: next((j for j, t in enumerate(new) if t in tokenizer.eos_token_ids), len(new))]

    async def generate() -> list[GenerationResult]:
        async with AsyncClient(cluster.address) as client:
            return [
                await client.generate(
                    token_ids=ids, max_new_tokens=32, temperature=0.0, drafter=drafter, num_draft_tokens=6,
                    max_tree_nodes=6, draft_policy=policy, overlap=overlap,
                )
                for drafter, policy, overlap in [
                    ("onnx-quantized", "auto", True), ("onnx-quantized", "auto", True), ("hybrid", "auto", False),
                    ("hybrid", "fixed", False),
                ]
            ]

    results = asyncio.run(generate())
    for result in results:
        assert result.token_ids == expected
        assert result.stats.drafted_tokens > 0 and result.stats.accepted_tokens > 0
        assert result.stats.prompt_tokens_from_verifier == len(ids)
    assert [r.stats.copied_rounds for r in results][:2] == [0, 0]
    fixed = results[3].stats
    assert 0 < fixed.copied_rounds < fixed.rounds  # a model round (no copy before the answer starts), then copies
