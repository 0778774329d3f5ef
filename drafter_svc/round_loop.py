"""One generation's rounds against a verifier, as a pipeline: plan, draft, send, absorb the
verdict, emit text.

Each round the drafter proposes a token tree with each node's q (drafter.py), the session's
draft-length policy cuts it (policies/), the verifier answers in one target pass with the
accepted path plus a recovered or bonus token and the price of the next round, and the drafter
and the policy learn from the verdict. With overlap on, the next round is pre-drafted while the verifier works (overlap.py).
With k = 0 every round is one plain target step: the no-speculation baseline on the same path.

A drafter whose drafts cost model steps drafts in a worker thread and asks the policy before each
step. A model that is the target's own copy (the int8 drafter) does not read the prompt: the
session asks the verifier for the prompt's keys and values, which follow the first verdict in a
message of their own (read while the first tokens go out), and its first round sends no model
draft (docs/design/prompt-from-verifier.md). Otherwise, under an adaptive policy, after a prompt
of over LONG_PROMPT_TOKENS, its first round sends no model draft, so that the verifier's prefill
does not wait for the drafter's read of the prompt; it reads the prompt at its first model draft,
or beside the prefill where overlap is on (its work may run beside the verifier's), the session
is alone, and the policy expects its drafts to pay (docs/design/prompt-read-after-prefill.md). A
hybrid drafter's free copy draft is weighed against drafting with the model each round, the first
included (hybrid_drafter.py). Under a constraint a model drafter drafts along the grammar
(draft_guide.py) and every draft is fitted to it before it is sent (grammar_drafts.py). Every
draft declares its q and is chosen from the emitted history only, so exactness does not depend on
it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from drafter_svc.draft import ROOT, Draft, Feedback
from drafter_svc.draft_guide import DraftGuide
from drafter_svc.draft_tree import cut, primary_path
from drafter_svc.drafter import Drafter
from drafter_svc.finish_rule import RoundText
from drafter_svc.generation_stats import Stats
from drafter_svc.grammar_drafts import GrammarDrafts, graft
from drafter_svc.overlap import Prefetcher
from drafter_svc.policies.session_policy import SessionPolicy
from drafter_svc.protocol import GenerationRequest, round_message
from drafter_svc.verifier_info import VerifierInfo
from drafter_svc.verify_call import VerifyCall
from specdec.errors import Unavailable
from specdec.round_price import RoundPrice
from specdec.v1 import verifier_pb2

# After a prompt longer than this a model drafter's first round sends no model draft; a shorter
# one is read in its first draft's first step (docs/design/prompt-read-after-prefill.md).
LONG_PROMPT_TOKENS = 128


@dataclass
class Round:
    """One round as it goes through the pipeline."""

    room: int  # tokens the generation may still emit
    budget: int  # the drafter's depth, after the forced tokens
    nodes: int  # the drafter's node budget, after the forced tokens
    forced: list[int]  # tokens the grammar forces, sent first
    prefilling: bool  # a model drafter's first round after a long prompt: no model draft
    full: Draft  # what the drafter proposed (or the copy draft sent)
    draft: Draft  # what is sent
    copy_draft: Draft | None = None  # a hybrid session's free copy draft, sent or not
    copied: bool = False  # the copy draft is sent
    asked: bool = False  # the drafter was asked (a model drafter may decline to draft)
    next_budget: int = 0  # the next round's depth if this one's primary path is accepted


class RoundLoop:
    """The rounds of one generation. `model_drafter`: its drafts cost model steps (and k > 0)."""

    def __init__(
        self, request: GenerationRequest, info: VerifierInfo, drafter: Drafter, policy: SessionPolicy,
        prefetcher: Prefetcher | None, grammar: GrammarDrafts | None, stats: Stats, prompt_from_verifier: bool = False,
    ) -> None:
        """`prompt_from_verifier`: the session asks the verifier for the prompt's keys and values
        (Drafter.takes_prompt_cache), and its first round sends no model draft."""
        self.request = request
        self.info = info
        self.drafter = drafter
        self.policy = policy
        self.prefetcher = prefetcher
        self.grammar = grammar
        self.stats = stats
        self.model_drafter = drafter.drafts_with_a_model and request.num_draft_tokens > 0
        self.keep_drafting = policy.keep_drafting if self.model_drafter else None
        self.long_prompt = self.model_drafter and policy.rule.adaptive and len(request.prompt_token_ids) > LONG_PROMPT_TOKENS
        self.prompt_from_verifier = prompt_from_verifier
        self.prompt_cache_read: asyncio.Future | None = None  # the read of the message after the first verdict
        self.context = list(request.prompt_token_ids)
        self.ahead: Draft | None = None  # the pre-drafted round, when the last verdict matched its guess

    def plan(self) -> Round:
        """The round's room, budgets and forced tokens (drafted for free, first: grammar_drafts.py)."""
        request = self.request
        room = min(request.max_new_tokens - self.stats.generated_tokens, self.info.context_length - len(self.context))
        budget = min(request.num_draft_tokens, room - 1)
        forced = self.grammar.forced(budget) if self.grammar is not None else []
        if forced:
            self.ahead = None  # pre-drafted for the context without them
        empty = Draft.point_masses([])
        prefilling = (self.long_prompt or self.prompt_from_verifier) and self.stats.rounds == 0
        return Round(room, budget - len(forced), request.max_tree_nodes - len(forced), forced, prefilling, empty, empty)

    async def draft(self, plan: Round) -> None:
        """Fill in what the round sends: a hybrid session's copy draft, a pre-draft, or the
        drafter's draft, cut by the policy; under a constraint fitted to the grammar."""
        started = time.perf_counter()
        drafter, policy, context = self.drafter, self.policy, self.context + plan.forced
        if self.prompt_cache_read is not None:
            await self._take_prompt_cache()
        if plan.budget > 0 and policy.may_draft() and self.model_drafter and self.ahead is None:
            plan.copy_draft = drafter.propose_copy(context, plan.budget, plan.nodes)
        if plan.copy_draft is not None:
            model_step = None if plan.prefilling else drafter.step_seconds
            catch_up = 0.0 if plan.prefilling else drafter.catch_up_seconds(context)
            plan.copied = policy.send_copy(plan.copy_draft, plan.budget, plan.nodes, model_step, catch_up, drafter.reads_prompt)
        if plan.copied and plan.copy_draft is not None:
            plan.full = plan.copy_draft
            plan.draft = policy.choose(plan.full, plan.budget, plan.nodes, copied=True)
            self.stats.copied_rounds += 1
        elif plan.budget > 0 and policy.may_draft() and not plan.prefilling:
            plan.asked = True
            step_seconds = 0.0  # the drafting time this round pays, per chain token
            guide: DraftGuide | None = None  # under a constraint, the grammar along the model's chain
            if self.ahead is not None:  # drafted while the verifier worked
                plan.full = cut(self.ahead, plan.budget, plan.nodes)
            elif self.model_drafter:
                guide = self.grammar.guide(plan.forced) if self.grammar is not None else None
                try:
                    plan.full = await asyncio.to_thread(drafter.propose, context, plan.budget, plan.nodes, self.keep_drafting, guide)
                finally:
                    if guide is not None:
                        guide.release()
                step_seconds = drafter.step_seconds
            else:
                plan.full = drafter.propose(context, plan.budget, plan.nodes)
            plan.draft = policy.choose(plan.full, plan.budget, plan.nodes, step_seconds)
            if guide is not None:  # the forced tokens the model's chain took free, as far as it is sent
                self.stats.forced_tokens += sum(depth <= plan.draft.depth() for depth in guide.forced_depths)
        if self.grammar is not None:  # cut or redrawn where it leaves the grammar, then forced tokens after it
            fitted = self.grammar.fit(graft(plan.forced, plan.draft))
            plan.draft = self.grammar.extend(fitted, plan.budget + len(plan.forced), self.request.max_tree_nodes)
            self.stats.forced_tokens += len(plan.forced) + len(plan.draft) - len(fitted)
        self.stats.draft_seconds += time.perf_counter() - started

    async def send(self, call: VerifyCall, plan: Round) -> verifier_pb2.VerifyResponse:
        """Send the round and read its verdict, with the work that may run meanwhile."""
        started = time.perf_counter()
        message = round_message(plan.draft)
        self.stats.q_bytes += sum(node.q.ByteSize() for node in message.round.nodes)
        await call.write(message)
        plan.next_budget = min(self.request.num_draft_tokens, plan.room - len(primary_path(plan.draft)) - 2)
        work = self._meanwhile(plan)
        meanwhile = asyncio.ensure_future(asyncio.to_thread(_run_all, work)) if work else None
        try:
            verdict: verifier_pb2.VerifyResponse = await call.read()
        finally:
            if meanwhile is not None:  # the drafter is used again only once that work is done
                await meanwhile
        if verdict is grpc.aio.EOF:
            raise Unavailable("", "the verifier ended the session unexpectedly")
        self.stats.round_trip_seconds += time.perf_counter() - started
        if self.stats.rounds == 0:
            self.stats.time_to_first_token_seconds = time.perf_counter() - self.stats.started
            if self.prompt_from_verifier:  # the prompt's keys and values come next, read meanwhile
                self.prompt_cache_read = asyncio.ensure_future(call.read())
        return verdict

    async def _take_prompt_cache(self) -> None:
        """Hand the drafter the prompt's keys and values sent after the first verdict (a copy of
        every entry: off the event loop); without them it reads the prompt itself."""
        read, self.prompt_cache_read = self.prompt_cache_read, None
        assert read is not None
        message = await read
        if message is grpc.aio.EOF:
            raise Unavailable("", "the verifier ended the session unexpectedly")
        cache = message.prompt_cache
        if cache.tokens and await asyncio.to_thread(self.drafter.adopt_prompt_cache, self.request.prompt_token_ids, cache):
            self.stats.prompt_tokens_from_verifier = cache.tokens

    def stop(self) -> None:
        """Drop the read of the prompt's keys and values where the generation ended before it was
        needed (after its first round): cancelled, or its outcome retrieved (a failure then says
        nothing)."""
        read, self.prompt_cache_read = self.prompt_cache_read, None
        if read is not None and not read.cancel() and not read.cancelled():
            read.exception()

    def _meanwhile(self, plan: Round) -> list[Callable[[], None]]:
        """Work done in a thread while the verifier checks the round, with overlap on: a model
        drafter's first read of a long prompt, then the pre-draft of the next round (a pre-draft's
        first step, priced with the whole prompt still to read, would be declined). A model
        drafter's first round does them only when the session is alone: they run the whole prompt."""
        request, drafter, policy = self.request, self.drafter, self.policy
        spare_cores = not (self.model_drafter and self.stats.rounds == 0) or not policy.state.busy()
        if self.prompt_from_verifier and self.stats.rounds == 0:  # nothing to read or pre-draft with before the prompt comes
            return []
        work: list[Callable[[], None]] = []
        if plan.prefilling and request.overlap and spare_cores and policy.read_prompt(
            drafter.step_seconds, drafter.catch_up_seconds(self.context), plan.budget, request.max_tree_nodes
        ):
            work.append(functools.partial(drafter.prefill, self.context))
        if self.prefetcher is not None and policy.may_draft() and spare_cores:
            work.append(functools.partial(self.prefetcher.start, self.context, plan.draft, plan.next_budget, request.max_tree_nodes))
        return work

    def absorb(self, plan: Round, verdict: verifier_pb2.VerifyResponse) -> list[int]:
        """Teach the grammar, the drafter, the policy and the prefetcher the verdict; the tokens
        it emits: the accepted path, then the recovered or bonus token."""
        path = _accepted_path(plan.draft, list(verdict.accepted_nodes))
        emitted = [*plan.draft.path_tokens(path), verdict.next_token_id]
        if self.grammar is not None:
            self.grammar.commit(emitted)
        self.drafter.observe(Feedback(len(plan.draft), path, list(verdict.acceptance_probs), emitted))
        self.policy.observe(
            plan.draft, list(verdict.acceptance_probs), verdict.queued_rounds,
            had_draft=len(plan.full) > 0 or (plan.asked and self.model_drafter), price=RoundPrice.from_proto(verdict.price),
            open_sessions=verdict.open_sessions, copied=plan.copied, emitted=len(emitted),
        )
        if plan.copy_draft and not plan.copied:
            self.policy.observe_unsent_copy(plan.copy_draft, emitted)
        if self.prefetcher is not None and plan.next_budget > 0:
            self.ahead = self.prefetcher.take(path, verdict.next_token_id)
            if self.ahead is None:
                self.stats.overlap_misses += 1
            else:
                self.stats.overlap_hits += 1
                self.stats.hidden_draft_seconds += self.prefetcher.last_seconds
        else:
            self.ahead = None
        self.stats.count_round(plan.draft, len(path))
        self.stats.verify_seconds += verdict.verify_seconds
        return emitted

    def commit(self, text: RoundText) -> None:
        """Append the round's tokens (up to an EOS) to the context and the tally."""
        self.context += text.token_ids
        self.stats.generated_tokens += len(text.token_ids)


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
