"""Every architecture of tests/model_matrix.py behind a real verifier process (`specdec serve
verifier --model <folder>`), driven through its gRPC API with explicit draft trees (on random
weights the drafters would rarely propose anything):

(c) greedy output equals transformers' `generate()` on the eager reference, for a session
    drafting chains and one drafting trees (a correct path beside wrong branches), run at once so
    that their rounds share batched passes;
(d) a seeded temperature-1 session gives the same tokens alone and beside two others.

Then (e), for one windowed model and one with a logit scale: the first token at temperature 1
over SAMPLES seeded requests, CONCURRENCY at a time so that rounds share batched passes, follows the
model's own next-token distribution (Pearson's chi-square, as
tests/integration/test_exactness_end_to_end.py does for the default model), and the same counts
reject the distribution a pass without the window or without the logit scale would give (total
variation 0.59 and 0.86 from the right one: 500 samples are plenty).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from specdec.launcher import Service
from specdec.v1 import common_pb2, verifier_pb2, verifier_pb2_grpc
from tests.integration.test_exactness_end_to_end import ALPHA, chi_square_p_value
from tests.model_matrix import ARCHITECTURES, VOCAB, WINDOW
from verifier_svc.token_tree import ROOT

NEW_TOKENS = 24
PROMPT = "The quick brown fox jumps over the lazy dog. A"  # with NEW_TOKENS, longer than the window
SAMPLED_PROMPTS = ["Once upon a time", "One, two, three, four, five, six", "def add(a, b):"]
SAMPLED_TOKENS = 12
Draft = tuple[list[int], list[int]]  # (tokens, parents)


def verifier(folder, logs, *args: str) -> Service:  # type: ignore[no-untyped-def]
    """A verifier serving the model folder (untuned: a tiny model's pass sizes are not worth timing)."""
    args = ("--model", str(folder), "--max-draft-tokens", "16", "--max-draft-depth", "8", "--tune-pass-sizes", "false", *args)
    service = Service("verifier", args, logs / "verifier.log")
    try:
        service.wait_serving(120)
    except BaseException:
        service.stop()
        raise
    return service


AHEAD = 2  # verifiers starting at once beside the tests (the CI machine has 2 cores)


class VerifierStarts:
    """The module's verifiers, each started while earlier architectures' tests run, AHEAD at a
    time: a start is mostly importing torch and transformers (~10 s of one core), an
    architecture's tests take a few seconds. `order`: the architectures in the order the
    collected tests use them."""

    def __init__(self, order: list[str], folder: Callable[[str], Path], logs: Callable[[str], Path]) -> None:
        self.order, self.folder, self.logs = order, folder, logs
        self.starting: dict[str, Future[Service]] = {}
        self.pool = ThreadPoolExecutor(max_workers=AHEAD)

    def get(self, name: str) -> Service:
        """`name`'s verifier, serving; the next AHEAD architectures' start meanwhile."""
        future = self.starting.pop(name, None) or self._start(name)
        later = self.order[self.order.index(name) + 1 :] if name in self.order else []
        for upcoming in later[:AHEAD]:
            if upcoming not in self.starting:
                self.starting[upcoming] = self._start(upcoming)
        return future.result()

    def _start(self, name: str) -> Future[Service]:
        # The folder is saved on the test thread (building a model seeds torch's global generator);
        # the sessions allowed make room for the chi-square test's.
        folder, logs = self.folder(name), self.logs(name)
        return self.pool.submit(verifier, folder, logs, "--max-sessions", str(CONCURRENCY + 8))

    def close(self) -> None:
        for future in self.starting.values():  # started for tests that did not run
            if future.exception() is None:
                future.result().stop()
        self.pool.shutdown()


@pytest.fixture(scope="module")
def verifier_starts(request, matrix_model_folder, tmp_path_factory) -> Iterator[VerifierStarts]:  # type: ignore[no-untyped-def]
    used = [item.callspec.params.get("served") for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")]
    order = list(dict.fromkeys(name for name in used if name is not None))  # the run order, after pytest's grouping
    starts = VerifierStarts(order, matrix_model_folder, lambda name: tmp_path_factory.mktemp(f"verifier-{name}"))
    try:
        yield starts
    finally:
        starts.close()


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def served(request, verifier_starts) -> Iterator[tuple[str, Service, PreTrainedModel]]:  # type: ignore[no-untyped-def]
    service = verifier_starts.get(request.param)
    try:
        folder = verifier_starts.folder(request.param)
        reference = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
        yield request.param, service, reference
    finally:
        service.stop()


async def session(
    stub: verifier_pb2_grpc.VerifierStub, prompt: list[int], sampling: common_pb2.SamplingParams, new_tokens: int,
    draft: Callable[[list[int]], Draft] | None = None, acceptance: common_pb2.AcceptanceParams | None = None,
) -> list[int]:
    """Open a session and run rounds until new_tokens are committed; each round's draft is
    draft(committed so far) (or none). Returns the committed tokens after the prompt."""
    call = stub.Verify()
    await call.write(verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt, sampling=sampling, acceptance=acceptance)))
    out: list[int] = []
    try:
        while len(out) < new_tokens:
            tokens, parents = draft(out) if draft else ([], [])
            nodes = [verifier_pb2.DraftNode(parent=p, token_id=t, q=common_pb2.SparseDistribution(token_ids=[t], probs=[1.0])) for t, p in zip(tokens, parents)]
            await call.write(verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=nodes)))
            verdict = await call.read()
            out += [tokens[i] for i in verdict.accepted_nodes] + [verdict.next_token_id]
        await call.done_writing()
    finally:
        call.cancel()
    return out[:new_tokens]


def greedy_reference(reference: PreTrainedModel, prompt: list[int]) -> list[int]:
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        out = reference.generate(torch.tensor([prompt]), generation_config=config)
    return out[0, len(prompt) :].tolist()


def test_greedy_output_is_generate_for_chains_and_trees(served, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """(c) Chains: the next 0-3 greedy tokens, then a wrong one. Trees: a wrong first token, the
    greedy path (0-3 deep) beside it and a wrong sibling under its end. Both sessions at once."""
    name, service, reference = served
    prompt = tokenizer.encode(PROMPT)
    expected = greedy_reference(reference, prompt)
    rng = random.Random(3)

    def wrong(token: int) -> int:
        """A random token other than `token`."""
        other = rng.randrange(3, VOCAB - 1)
        return other if other < token else other + 1

    def chain_draft(out: list[int]) -> Draft:
        right = expected[len(out) : len(out) + rng.randrange(4)]
        tokens = [*right, wrong(expected[min(len(out) + len(right), NEW_TOKENS - 1)])]
        return tokens, list(range(ROOT, len(tokens) - 1))

    def tree_draft(out: list[int]) -> Draft:
        right = expected[len(out) : len(out) + rng.randrange(4)]
        tokens, parents = [wrong(expected[len(out)])], [ROOT]
        for token in right:
            tokens.append(token)
            parents.append(ROOT if len(tokens) == 2 else len(tokens) - 2)
        tokens.append(wrong(expected[min(len(out) + len(right), NEW_TOKENS - 1)]))
        parents.append(ROOT if len(tokens) == 2 else len(tokens) - 2)
        return tokens, parents

    async def both() -> list[list[int]]:
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = verifier_pb2_grpc.VerifierStub(channel)
            greedy = common_pb2.SamplingParams(temperature=0.0)
            return await asyncio.gather(
                session(stub, prompt, greedy, NEW_TOKENS, chain_draft), session(stub, prompt, greedy, NEW_TOKENS, tree_draft)
            )

    chains, trees = asyncio.run(both())
    assert len(set(expected)) > 3, f"{name}: degenerate greedy output {expected}"
    assert chains == expected, f"{name}: chain rounds"
    assert trees == expected, f"{name}: tree rounds"


def test_seeded_sampling_is_the_same_alone_and_beside_others(served, tokenizer) -> None:  # type: ignore[no-untyped-def]
    """(d) Temperature 1, seed 5, plain rounds: alone, then while two other sessions run."""
    name, service, _ = served
    prompts = [tokenizer.encode(p) for p in SAMPLED_PROMPTS]

    async def run(together: bool) -> list[int]:
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = verifier_pb2_grpc.VerifierStub(channel)
            chosen = prompts if together else prompts[:1]
            runs = [session(stub, p, common_pb2.SamplingParams(temperature=1.0, seed=5 + k), SAMPLED_TOKENS) for k, p in enumerate(chosen)]
            return (await asyncio.gather(*runs))[0]

    alone = asyncio.run(run(together=False))
    assert asyncio.run(run(together=True)) == alone, name


# (e): a windowed architecture and one with a logit scale.
CHI_SQUARE_CASES = ["mistral-window", "granite"]
SAMPLES, CONCURRENCY = 500, 16
LONG_PROMPT = "The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun, and the fox"


def next_token_probs(reference: PreTrainedModel, prompt: list[int]) -> np.ndarray:
    with torch.inference_mode():
        return torch.softmax(reference(torch.tensor([prompt])).logits[0, -1].double(), -1).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("served", CHI_SQUARE_CASES, indirect=True)
def test_first_token_follows_the_models_distribution(served, verifier_starts, tokenizer) -> None:  # type: ignore[no-untyped-def]
    name, service, _ = served
    # A reference of its own: this test changes its config.
    reference = AutoModelForCausalLM.from_pretrained(str(verifier_starts.folder(name)), dtype=torch.float32, attn_implementation="eager").eval()
    prompt = tokenizer.encode(LONG_PROMPT)
    assert len(prompt) > WINDOW
    p = next_token_probs(reference, prompt)
    if name == "granite":  # logits_scaling divides the head's output: a pass that skipped it
        with torch.inference_mode():
            logits = reference(torch.tensor([prompt])).logits[0, -1].double() * reference.config.logits_scaling
        wrong = torch.softmax(logits, -1).numpy()
    else:  # a pass that saw past the window
        reference.config.sliding_window = None
        wrong = next_token_probs(reference, prompt)
    draft = int(p.argmax())  # drafted every time: accepted with probability p(draft), else recovered
    assert 0.03 < p[draft] < 0.8

    async def counts() -> Counter:
        seeds, counter = iter(range(SAMPLES)), Counter()
        speculative = common_pb2.AcceptanceParams(rule="lenient", parameter=1.0)  # Leviathan's rule, reproducible
        async with grpc.aio.insecure_channel(service.address) as channel:
            stub = verifier_pb2_grpc.VerifierStub(channel)

            async def worker() -> None:
                for seed in seeds:
                    sampling = common_pb2.SamplingParams(temperature=1.0, seed=seed)
                    out = await session(stub, prompt, sampling, 1, lambda _: ([draft], [ROOT]), speculative)
                    counter[out[0]] += 1

            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return counter

    observed = asyncio.run(counts())
    assert sum(observed.values()) == SAMPLES
    assert chi_square_p_value(observed, p, SAMPLES) > ALPHA, observed.most_common(10)
    assert chi_square_p_value(observed, wrong, SAMPLES) < ALPHA  # power: the bug's distribution is rejected
