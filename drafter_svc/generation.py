"""The round loop of one generation: draft, send the round to the verifier, stream the result.

Each round: the drafter proposes a token tree (depth up to k, a chain or branches) with each
node's q; the request's draft-length policy cuts it to the depth it chooses (policies/); the
verifier answers in one target pass with the accepted path plus a recovered or bonus token; the
drafter and the policy learn from the verdict. With overlap on, the next round is pre-drafted
while the verifier works (overlap.py) and used when the verdict matches its guess.
With k = 0 every round is one plain target step: the no-speculation baseline on the same path.

Model drafters (onnx-*) keep the event loop free: they draft in a worker thread, and ask the
policy before each model step whether the next token pays for it (policies/pricing_policy.py);
the choice of depth then counts the steps drafted. Under an adaptive policy, after a
prompt of over LONG_PROMPT_TOKENS, their first round sends no model draft, so that the
verifier's prefill of the prompt does not wait for the drafter's read of it. The drafter reads
it at its first model draft, whose first step the policy prices with a share of the read
(policies/pricing_policy.py). Only with overlap on, which says the drafter's work may run
beside the verifier's (cores of its own), does it read the prompt during the prefill, if the
policy expects the model's drafts to pay after such a prompt (`SessionPolicy.read_prompt`),
and that thread then also pre-drafts the second round. On shared cores that read slowed the
prefill by more than the read takes alone (one run, summarization and RAG, T=1 and T=0, 20
prompts each: the first token 96 and 129 ms sooner without it, 1.6% fewer ms per token;
docs/design/prompt-read-after-prefill.md). With other sessions under way the drafter neither
prefills nor pre-drafts in the first round: the verifier has work for every core (load
benchmark with the ONNX drafter: eight such prefills at once cut throughput to 0.62x of plain
decoding). Their pre-drafts share the session's drafter (one KV cache, rolled back by prefix)
instead of a second instance that would prefill the prompt again.

The `hybrid` drafter is onnx-quantized with the copy drafter beside it: each round the copy
drafter proposes too (a table lookup), and the policy sends that draft instead of drafting with
the model when it expects more tokens per unit of cost from it (`SessionPolicy.send_copy`;
policies/auto.py), the first round included, where the model
reads the prompt meanwhile. Each round is an ordinary round whose draft declares its q (a copy's
is a point mass), chosen from the emitted history only, so exactness does not depend on the choice.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from drafter_svc.detokenizer import IncrementalDetokenizer
from drafter_svc.policies.load_price import LoadPrice
from drafter_svc.policies.policy_state import PolicyState
from drafter_svc.policies.session_policy import SessionPolicy
from drafter_svc.draft_tree import cut, primary_path
from drafter_svc.grammar_drafts import GrammarDrafts, compiler_for, graft
from drafter_svc.draft import ROOT, Draft, Feedback
from drafter_svc.drafter_models import DrafterModels
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.overlap import Prefetcher
from drafter_svc.protocol import GenerationRequest, open_message, round_message
from drafter_svc.stop_strings import StopStringMatcher
from specdec.coupled_sampling import race_seed
from specdec.errors import Unavailable
from specdec.tokenizer import Tokenizer
from specdec.v1 import drafter_pb2, verifier_pb2, verifier_pb2_grpc


# After a prompt longer than this a model drafter's first round sends no model draft (the prefill
# runs at once; the drafter reads the prompt at its first draft, or with overlap on beside the
# prefill where SessionPolicy.read_prompt expects its drafts to pay); a shorter one is read in
# its first draft's first step, so the first round drafts too. Measured (one run, hybrid at T=0,
# 9 MT-bench, QA and math prompts of 40-136 tokens, twice, the two drafters alternated beside one
# verifier): 30.7 ms per token against 31.8, per prompt 1.04x (median 1.05x).
LONG_PROMPT_TOKENS = 128


@dataclass
class Stats:
    prompt_tokens: int
    drafter: str
    num_draft_tokens: int
    max_tree_nodes: int
    acceptance_rule: str = "exact"
    draft_policy: str = ""
    overlap: bool = False
    generated_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    round_trip_seconds: float = 0.0
    time_to_first_token_seconds: float = 0.0
    copied_rounds: int = 0
    overlap_hits: int = 0
    overlap_misses: int = 0
    hidden_draft_seconds: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    q_bytes: int = 0
    forced_tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    def count_round(self, draft: Draft, accepted: int) -> None:
        """Tally one verified round: its draft and the length of its accepted path."""
        self.rounds += 1
        self.drafted_tokens += len(draft)
        self.accepted_tokens += accepted
        depth = draft.depth()
        grow = depth - len(self.drafted_by_position)
        self.drafted_by_position += [0] * grow
        self.accepted_by_position += [0] * grow
        for position in range(depth):
            self.drafted_by_position[position] += 1
            self.accepted_by_position[position] += position < accepted

    def to_proto(self) -> drafter_pb2.GenerationStats:
        return drafter_pb2.GenerationStats(
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            rounds=self.rounds,
            drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens,
            acceptance_rate=self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0,
            mean_acceptance_length=1.0 + self.accepted_tokens / self.rounds if self.rounds else 0.0,
            draft_seconds=self.draft_seconds,
            verify_seconds=self.verify_seconds,
            network_seconds=max(0.0, self.round_trip_seconds - self.verify_seconds),
            total_seconds=time.perf_counter() - self.started,
            time_to_first_token_seconds=self.time_to_first_token_seconds,
            drafter=self.drafter,
            num_draft_tokens=self.num_draft_tokens,
            max_tree_nodes=self.max_tree_nodes,
            acceptance_rule=self.acceptance_rule,
            draft_policy=self.draft_policy,
            overlap=self.overlap,
            discarded_tokens=self.drafted_tokens - self.accepted_tokens,
            copied_rounds=self.copied_rounds,
            overlap_hits=self.overlap_hits,
            overlap_misses=self.overlap_misses,
            hidden_draft_seconds=self.hidden_draft_seconds,
            drafted_by_position=self.drafted_by_position,
            accepted_by_position=self.accepted_by_position,
            q_bytes=self.q_bytes,
            forced_tokens=self.forced_tokens,
        )


def _accepted_path(draft: Draft, nodes: list[int]) -> list[int]:
    """The verdict's accepted nodes, checked to be a root-down path of the draft."""
    parent = ROOT
    for node in nodes:
        if not 0 <= node < len(draft) or draft.parents[node] != parent:
            raise Unavailable("", f"the verifier answered with accepted nodes {nodes}, not a path of the draft")
        parent = node
    return nodes


def _run_all(work: list[Callable[[], None]]) -> None:
    """The steps in order, in one worker thread (they share the session's drafter)."""
    for step in work:
        step()


@dataclass(frozen=True)
class VerifierInfo:
    eos_token_ids: frozenset[int]
    context_length: int


async def generate(
    request: GenerationRequest,
    stub: verifier_pb2_grpc.VerifierStub,
    tokenizer: Tokenizer,
    info: VerifierInfo,
    policies: PolicyState | None = None,
    models: DrafterModels | None = None,
) -> AsyncIterator[drafter_pb2.GenerateResponse]:
    """Yield text deltas with their token ids; the last response has the finish reason and stats.
    `policies` is the drafter process's learned policy state (a fresh one if None); `models`
    where its model drafters are (default: the drafter build cache)."""
    stats = Stats(
        len(request.prompt_token_ids), request.drafter, request.num_draft_tokens, request.max_tree_nodes,
        str(request.acceptance), request.draft_policy, request.overlap,
    )
    # A seeded session under the exact rule is verified by the exponential race (same seed, same
    # output, whatever is drafted: specdec/coupled_sampling.py); its model drafts join that race.
    race = race_seed(request.seed, request.sampling, request.acceptance) is not None
    drafter = make_drafter(request.drafter, request.sampling, request.seed, 0, models, race)
    model_drafter = drafter.drafts_with_a_model and request.num_draft_tokens > 0
    partial_prompt = model_drafter and not drafter.reads_all_of(len(request.prompt_token_ids))
    policy = SessionPolicy(
        request.draft_policy, request.drafter, policies or PolicyState(), len(request.prompt_token_ids), request.sampling.greedy,
        request.max_new_tokens, race, partial_prompt,
    )
    # An adaptive policy sends a model drafter's first round after a long prompt without a model
    # draft, so that the verifier's prefill does not wait for the drafter's read of the prompt
    # (module docstring); `fixed` drafts every round, the first included, as does any policy after
    # a short prompt (read in a step or two).
    long_prompt = model_drafter and policy.rule.adaptive and len(request.prompt_token_ids) > LONG_PROMPT_TOKENS
    # A model drafter asks the policy before each model step (policies/pricing_policy.py).
    keep_drafting = policy.keep_drafting if model_drafter else None
    prefetcher = None
    if request.overlap and request.num_draft_tokens > 0:
        # A model drafter's pre-drafts reuse its KV cache; a zero-cost drafter gets its own instance
        # (an incremental index re-built for every guessed context would cost the main one).
        prefetcher = Prefetcher(
            drafter if model_drafter else make_drafter(request.drafter, request.sampling, request.seed, 1, models, race), keep_drafting
        )
    ahead: Draft | None = None  # the pre-drafted round, when the last verdict matched its guess
    detokenizer = IncrementalDetokenizer(tokenizer.decode, request.prompt_token_ids)
    stopper = StopStringMatcher(request.stop)
    context = list(request.prompt_token_ids)
    grammar = None  # under a constraint: the drafter's own matcher (grammar_drafts.py)
    if request.constraint is not None:
        compiler = compiler_for(tokenizer)
        grammar = GrammarDrafts(compiler, compiler.matcher(request.constraint, "constraint"), info.eos_token_ids, request.seed)
    call = stub.Verify()
    try:
        await call.write(open_message(request))
        while True:
            room = min(request.max_new_tokens - stats.generated_tokens, info.context_length - len(context))
            budget = min(request.num_draft_tokens, room - 1)
            started = time.perf_counter()
            # Under a constraint the tokens the grammar forces come first, drafted for free; the
            # drafter drafts after them (grammar_drafts.py).
            forced = grammar.forced(budget) if grammar is not None else []
            if forced:
                ahead = None  # pre-drafted for the context without them
            draft_context, budget, nodes = context + forced, budget - len(forced), request.max_tree_nodes - len(forced)
            full = draft = Draft.point_masses([])
            copy_draft: Draft | None = None  # a hybrid session's free copy draft, weighed against the model's
            asked = False  # the drafter was asked for a draft (a model drafter may decline: policies/)
            copied = False  # a hybrid session sends its copy draft this round
            prefilling = long_prompt and stats.rounds == 0  # the model drafter may read the prompt meanwhile
            if budget > 0 and policy.may_draft() and model_drafter and ahead is None:
                copy_draft = drafter.propose_copy(draft_context, budget, nodes)
            if copy_draft is not None:
                model_step = None if prefilling else drafter.step_seconds
                catch_up = 0.0 if prefilling else drafter.catch_up_seconds(draft_context)
                copied = policy.send_copy(copy_draft, budget, nodes, model_step, catch_up, drafter.reads_prompt)
            if copied and copy_draft is not None:
                full = copy_draft
                draft = policy.choose(full, budget, nodes, copied=True)
                stats.copied_rounds += 1
            elif budget > 0 and policy.may_draft() and not prefilling:
                asked = True
                step_seconds = 0.0  # the drafting time this round pays, per chain token
                if ahead is not None:  # drafted while the verifier worked
                    full = cut(ahead, budget, nodes)
                elif model_drafter:
                    full = await asyncio.to_thread(drafter.propose, draft_context, budget, nodes, keep_drafting)
                    step_seconds = drafter.step_seconds
                else:
                    full = drafter.propose(draft_context, budget, nodes)
                draft = policy.choose(full, budget, nodes, step_seconds)
            if grammar is not None:  # cut or redrawn where it leaves the grammar, then forced tokens after it
                fitted = grammar.fit(graft(forced, draft))
                draft = grammar.extend(fitted, budget + len(forced), request.max_tree_nodes)
                stats.forced_tokens += len(forced) + len(draft) - len(fitted)
            stats.draft_seconds += time.perf_counter() - started

            started = time.perf_counter()
            message = round_message(draft)
            stats.q_bytes += sum(node.q.ByteSize() for node in message.round.nodes)
            await call.write(message)
            next_budget = min(request.num_draft_tokens, room - len(primary_path(draft)) - 2)
            # Work done in a thread while the verifier checks `draft`, with overlap on: a model
            # drafter's first prefill, and the pre-draft of the next round. A model drafter's first
            # round does them only when the session is alone: they run the whole prompt. The
            # prefill comes first: a pre-draft's first step, priced with the whole prompt still to
            # read, would be declined.
            spare_cores = not (model_drafter and stats.rounds == 0) or not policy.state.busy()
            work: list[Callable[[], None]] = []
            if prefilling and request.overlap and spare_cores and policy.read_prompt(
                drafter.step_seconds, drafter.catch_up_seconds(context), budget, request.max_tree_nodes
            ):
                work.append(functools.partial(drafter.prefill, context))
            if prefetcher is not None and policy.may_draft() and spare_cores:
                work.append(functools.partial(prefetcher.start, context, draft, next_budget, request.max_tree_nodes))
            meanwhile = asyncio.ensure_future(asyncio.to_thread(_run_all, work)) if work else None
            try:
                verdict: verifier_pb2.VerifyResponse = await call.read()
            finally:
                if meanwhile is not None:  # the drafter is used again only once that work is done
                    await meanwhile
            if verdict is grpc.aio.EOF:
                raise Unavailable("", "the verifier ended the session unexpectedly")
            stats.round_trip_seconds += time.perf_counter() - started
            if stats.rounds == 0:
                stats.time_to_first_token_seconds = time.perf_counter() - stats.started
            path = _accepted_path(draft, list(verdict.accepted_nodes))
            emitted = [*draft.path_tokens(path), verdict.next_token_id]
            if grammar is not None:
                grammar.commit(emitted)
            drafter.observe(Feedback(len(draft), path, list(verdict.acceptance_probs), emitted))
            policy.observe(
                draft, list(verdict.acceptance_probs), verdict.verify_seconds, verdict.queued_rounds,
                first_round=stats.rounds == 0, had_draft=len(full) > 0 or (asked and model_drafter),
                price=LoadPrice(verdict.pass_rounds, verdict.pass_seconds, verdict.pass_rows, verdict.row_seconds, verdict.open_sessions),
                copied=copied, emitted=len(emitted),
            )
            if copy_draft and not copied:
                policy.observe_unsent_copy(copy_draft, emitted)
            if prefetcher is not None and next_budget > 0:
                ahead = prefetcher.take(path, verdict.next_token_id)
                if ahead is None:
                    stats.overlap_misses += 1
                else:
                    stats.overlap_hits += 1
                    stats.hidden_draft_seconds += prefetcher.last_seconds
            else:
                ahead = None
            stats.count_round(draft, len(path))
            stats.verify_seconds += verdict.verify_seconds

            finish = drafter_pb2.FINISH_REASON_UNSPECIFIED
            eos_at = next((i for i, t in enumerate(emitted) if t in info.eos_token_ids), None)
            if eos_at is not None:
                emitted, finish = emitted[:eos_at], drafter_pb2.FINISH_REASON_EOS
            context += emitted
            logprobs = verdict.logprobs[: len(emitted)]
            stats.generated_tokens += len(emitted)
            text, stopped = stopper.push(detokenizer.push(emitted))
            if stopped:
                finish = drafter_pb2.FINISH_REASON_STOP
            elif finish == drafter_pb2.FINISH_REASON_UNSPECIFIED and stats.generated_tokens >= request.max_new_tokens:
                finish = drafter_pb2.FINISH_REASON_LENGTH
            elif finish == drafter_pb2.FINISH_REASON_UNSPECIFIED and len(context) >= info.context_length:
                finish = drafter_pb2.FINISH_REASON_CONTEXT_LENGTH
            if finish != drafter_pb2.FINISH_REASON_UNSPECIFIED and not stopped:
                tail, stopped = stopper.push(detokenizer.flush())
                text += tail if stopped else tail + stopper.flush()
                finish = drafter_pb2.FINISH_REASON_STOP if stopped else finish
            if finish != drafter_pb2.FINISH_REASON_UNSPECIFIED:
                await call.write(verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession()))
                await call.done_writing()
                yield drafter_pb2.GenerateResponse(text=text, token_ids=emitted, finish_reason=finish, stats=stats.to_proto(), logprobs=logprobs)
                return
            yield drafter_pb2.GenerateResponse(text=text, token_ids=emitted, logprobs=logprobs)
    finally:
        call.cancel()
