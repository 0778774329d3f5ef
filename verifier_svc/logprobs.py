"""Log-probabilities of emitted tokens under the target (pure): the log-softmax of the target's
own logits at each emitted token's position, before temperature, top-k, top-p, penalties and
constraints (OpenAI's logprobs: the model's distribution before sampling), with the
`top` most likely tokens there, most likely first."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top_token_ids: list[int]
    top_logprobs: list[float]


def emitted_logprobs(logits: torch.Tensor, rows: list[int], tokens: list[int], top: int) -> list[TokenLogprob]:
    """logits [n+1, vocab]; rows[j] is the row that scores the position of tokens[j] (0 for the
    first token after the committed ones, node i + 1 for the token after node i)."""
    logprobs = torch.log_softmax(logits[rows].float(), dim=-1)  # [m, vocab]
    chosen = logprobs.gather(1, torch.tensor(tokens, dtype=torch.long).unsqueeze(1)).squeeze(1).tolist()
    if top:
        best = torch.topk(logprobs, top, dim=-1)
        ids, values = best.indices.tolist(), best.values.tolist()
    else:
        ids, values = [[] for _ in rows], [[] for _ in rows]
    return [TokenLogprob(t, lp, i, v) for t, lp, i, v in zip(tokens, chosen, ids, values)]
