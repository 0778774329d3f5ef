"""One generation: a session's drafter, policy and prefetcher, then its rounds (round_loop.py)
streamed to the client as text deltas with their token ids; the last response has the finish
reason (finish_rule.py) and the statistics (generation_stats.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from drafter_svc.drafter_models import DrafterModels
from drafter_svc.drafter_registry import make_drafter
from drafter_svc.finish_rule import UNFINISHED, TextOutput
from drafter_svc.generation_stats import Stats
from drafter_svc.grammar_drafts import GrammarDrafts, compiler_for
from drafter_svc.overlap import Prefetcher
from drafter_svc.policies.policy_state import PolicyState
from drafter_svc.policies.session_policy import SessionPolicy
from drafter_svc.protocol import GenerationRequest, open_message
from drafter_svc.round_loop import RoundLoop
from drafter_svc.verifier_info import VerifierInfo
from drafter_svc.verify_call import VerifyOpener
from specdec.coupled_sampling import race_seed
from specdec.tokenizer import Tokenizer
from specdec.v1 import drafter_pb2, verifier_pb2


async def generate(
    request: GenerationRequest,
    stub: VerifyOpener,
    tokenizer: Tokenizer,
    info: VerifierInfo,
    policies: PolicyState | None = None,
    models: DrafterModels | None = None,
) -> AsyncIterator[drafter_pb2.GenerateResponse]:
    """Yield text deltas with their token ids; the last response has the finish reason and stats.
    `policies` is the drafter process's learned policy state (a fresh one if None); `models`
    where its model drafters are (default: the drafter build cache)."""
    loop = open_rounds(request, tokenizer, info, policies or PolicyState(), models)
    output = TextOutput(
        tokenizer.decode, request.prompt_token_ids, request.stop, info.eos_token_ids, request.max_new_tokens, info.context_length
    )
    call = stub.Verify()
    try:
        await call.write(open_message(request, loop.prompt_from_verifier))
        while True:
            plan = loop.plan()
            await loop.draft(plan)
            verdict = await loop.send(call, plan)
            text = output.emit(loop.absorb(plan, verdict), loop.stats.generated_tokens, len(loop.context))
            loop.commit(text)
            logprobs = verdict.logprobs[: len(text.token_ids)]
            if text.finish != UNFINISHED:
                await call.write(verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession()))
                await call.done_writing()
                yield drafter_pb2.GenerateResponse(
                    text=text.text, token_ids=text.token_ids, finish_reason=text.finish, stats=loop.stats.to_proto(), logprobs=logprobs
                )
                return
            yield drafter_pb2.GenerateResponse(text=text.text, token_ids=text.token_ids, logprobs=logprobs)
    finally:
        loop.stop()
        call.cancel()


def open_rounds(
    request: GenerationRequest, tokenizer: Tokenizer, info: VerifierInfo, policies: PolicyState, models: DrafterModels | None
) -> RoundLoop:
    """The session's drafter, policy, prefetcher (overlap on) and grammar (under a constraint)."""
    stats = Stats(
        len(request.prompt_token_ids), request.drafter, request.num_draft_tokens, request.max_tree_nodes,
        str(request.acceptance), request.draft_policy, request.overlap,
    )
    # A seeded session under the exact rule is verified by the exponential race (same seed, same
    # output, whatever is drafted: specdec/coupled_sampling.py); its model drafts join that race.
    race = race_seed(request.seed, request.sampling, request.acceptance) is not None
    drafter = make_drafter(request.drafter, request.sampling, request.seed, 0, models, race)
    model_drafter = drafter.drafts_with_a_model and request.num_draft_tokens > 0
    # A model that is the target's copy may start from the verifier's keys and values of the prompt.
    prompt_from_verifier = model_drafter and info.sends_prompt_cache and drafter.takes_prompt_cache(request.prompt_token_ids)
    partial_prompt = model_drafter and not prompt_from_verifier and not drafter.reads_all_of(len(request.prompt_token_ids))
    policy = SessionPolicy(
        request.draft_policy, request.drafter, policies, len(request.prompt_token_ids), request.sampling.greedy,
        request.max_new_tokens, race, partial_prompt, info.price, open_sessions(policies, info),
    )
    prefetcher = None
    if request.overlap and request.num_draft_tokens > 0:
        # A model drafter's pre-drafts reuse its KV cache and ask its policy before each step; a
        # free drafter gets its own instance (an incremental index re-built for every guessed
        # context would cost the main one).
        own = drafter if model_drafter else make_drafter(request.drafter, request.sampling, request.seed, 1, models, race)
        prefetcher = Prefetcher(own, policy.keep_drafting if model_drafter else None)
    grammar = None  # under a constraint: the drafter's own matcher (grammar_drafts.py)
    if request.constraint is not None:
        compiler = compiler_for(tokenizer)
        grammar = GrammarDrafts(compiler, compiler.matcher(request.constraint, "constraint"), info.eos_token_ids, request.seed)
    return RoundLoop(request, info, drafter, policy, prefetcher, grammar, stats, prompt_from_verifier)


def open_sessions(policies: PolicyState, info: VerifierInfo) -> int:
    """The sessions a new session will likely share the verifier with, itself included: as the
    latest verdict of this process said (a verdict is fresher than the pool's last poll, which
    may count a session that has just ended), else as the verifier's ModelInfo said, plus this one."""
    return policies.last_open_sessions if policies.last_price.known else info.open_sessions + 1
