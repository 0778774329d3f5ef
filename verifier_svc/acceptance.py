"""The exact acceptance rule for one round of drafted tokens.

Pure functions over tensors: no model, cache or RPC. Words as in vLLM's rejection sampler:
drafted tokens are *accepted* or rejected; the first rejection is replaced by a *recovered*
token sampled from the residual distribution; a fully accepted draft earns a *bonus* token
sampled from the target's last row.

Draft distributions q arrive sparse: row i lists the support of q_i (token ids) and its
probabilities, padded to a common width S with probability-0 entries whose ids mean nothing
(and may repeat a real id of the same row). A deterministic drafter declares a point mass:
S = 1, ids = [token], probs = [1.0].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verifier_svc.sampling import greedy_tokens

# Below float32's resolution of 1.0 a residual max(p - q, 0) is rounding noise, not a
# distribution: it is that small only when p == q up to rounding, where rejection has
# (nearly) zero probability; we then sample from p itself.
MIN_RESIDUAL_MASS = torch.finfo(torch.float32).eps
_TINY = torch.finfo(torch.float32).tiny


@dataclass(frozen=True)
class RoundVerdict:
    """What the target decided about one round of k drafted tokens."""

    num_accepted: int  # drafted tokens accepted, 0..k
    next_token: int  # recovered token (after a rejection) or bonus token (all k accepted)
    is_bonus: bool  # True iff num_accepted == k
    # [k] float32 for EVERY drafted token, also those after the first rejection: min(1, p_i(x_i) / q_i(x_i));
    # greedy: 1.0 where x_i is the argmax of row i, else 0.0.
    acceptance_probs: torch.Tensor


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> RoundVerdict:
    """Greedy verification (Appendix A of Stratos, after Stern et al.).

    target_logits [k+1, vocab]: row i scores the position after draft i-1 (row 0: after the
    context). draft_tokens [k] int64. Accept while draft i equals the argmax of row i; the next
    token is the argmax at the first mismatch, or of row k (the bonus) when all k match.
    acceptance_probs is 1.0 where draft i equals the argmax of row i, else 0.0.
    """
    k = draft_tokens.shape[0]
    assert target_logits.shape[0] == k + 1, "need one target row per drafted token plus one"
    argmax = greedy_tokens(target_logits)  # [k+1]
    matches = argmax[:k] == draft_tokens  # [k]
    num_accepted = _leading_true(matches)
    return RoundVerdict(
        num_accepted=num_accepted,
        next_token=int(argmax[num_accepted]),
        is_bonus=num_accepted == k,
        acceptance_probs=matches.float(),
    )


def verify_speculative(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_q_ids: torch.Tensor,
    draft_q_probs: torch.Tensor,
    generator: torch.Generator,
) -> RoundVerdict:
    """Speculative sampling: Algorithm 1 of Leviathan et al. (Stratos, section 1.1).

    target_probs [k+1, vocab]: standardized p_i, row i conditioned on the context and drafts
    before i. draft_tokens [k] int64, x_i ~ q_i. draft_q_ids [k, S] int64 and draft_q_probs
    [k, S] float32: the sparse q_i (padding has probability 0). Accept x_i with probability
    min(1, p_i(x_i) / q_i(x_i)); at the first rejection sample the recovered token from
    norm(max(p_i - q_i, 0)); if all k are accepted sample the bonus token from p_k. k may be 0
    (plain sampling from p_0). The emitted tokens are distributed exactly as sampling from p.

    Randomness comes only from `generator`, always in the same order: one torch.rand(k), then
    one torch.multinomial; the same generator state gives the same verdict.
    """
    k = draft_tokens.shape[0]
    assert target_probs.shape[0] == k + 1, "need one target row per drafted token plus one"
    assert draft_q_ids.shape == draft_q_probs.shape and draft_q_ids.shape[0] == k, "q must be [k, S]"

    # p_i(x_i): one gather per row (row k, the bonus row, is not gathered). q_i(x_i): the sum
    # over support entries equal to x_i, so padding (probability 0) adds nothing even when its
    # id repeats x_i.
    x = draft_tokens.unsqueeze(1)  # [k, 1]
    p_x = target_probs.gather(1, x).squeeze(1)  # [k]
    q_x = draft_q_probs.where(draft_q_ids == x, 0.0).sum(1)  # [k]
    # min(1, p/q); p(x) = 0 (e.g. x outside top-k) gives 0. q(x) = 0 cannot be drawn from q;
    # the floor only keeps the division finite.
    acceptance = (p_x / q_x.clamp_min(_TINY)).clamp_max_(1.0)  # [k]

    # x_i is accepted iff u_i < min(1, p/q), u_i ~ U[0, 1): probability exactly min(1, p/q).
    uniforms = torch.rand(k, generator=generator, dtype=acceptance.dtype)  # [k]
    num_accepted = _leading_true(uniforms < acceptance)

    if num_accepted == k:
        final = target_probs[k]  # [vocab] bonus: p_k, conditioned on all k drafts
    else:
        # Recovered token for the ONE rejected row n: norm(max(p_n - q_n, 0)). Subtracting the
        # sparse q_n with index_add sums repeated ids, so padding never overwrites a real entry.
        p_n = target_probs[num_accepted]  # [vocab]
        q_n_probs = draft_q_probs[num_accepted].to(p_n.dtype)  # [S]
        residual = p_n.index_add(0, draft_q_ids[num_accepted], q_n_probs, alpha=-1.0).clamp_min_(0.0)  # [vocab]
        # multinomial normalizes the residual itself.
        final = residual if float(residual.sum()) > MIN_RESIDUAL_MASS else p_n
    next_token = int(torch.multinomial(final, 1, generator=generator))

    return RoundVerdict(
        num_accepted=num_accepted,
        next_token=next_token,
        is_bonus=num_accepted == k,
        acceptance_probs=acceptance.float(),
    )


def _leading_true(flags: torch.Tensor) -> int:
    """Length of the run of True at the start of a [k] bool tensor."""
    flags_list = flags.tolist()
    return flags_list.index(False) if False in flags_list else len(flags_list)
