"""A session's rules on its output: a constraint (grammar matcher), penalties and biases, and
logprob requests; the session applies them to every round (session.py).

`OutputOptions` is what a session opens with; `OutputRules` is its state: the matcher at the
committed tokens and the counts of the generated ones. For a round's target logits it gives the
processed logits (penalties, then the constraint's mask at every row: constraints.py) from
which the acceptance rule's p is standardized, and the logprobs of the emitted tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.errors import InvalidArgument
from specdec.grammar import GrammarCompiler
from specdec.output_constraint import OutputConstraint
from specdec.penalties import Penalties, validate_top_logprobs
from specdec.sampling_params import SamplingParams
from verifier_svc.constraints import masked_logits, restrict, tree_masks
from verifier_svc.logprobs import TokenLogprob, emitted_logprobs
from verifier_svc.penalties import penalized_logits
from verifier_svc.sampling import standardize
from verifier_svc.token_tree import TokenTree


@dataclass(frozen=True)
class OutputOptions:
    constraint: OutputConstraint | None = None
    penalties: Penalties = Penalties()
    logprobs: bool = False
    top_logprobs: int = 0  # alternatives per emitted token, [0, 20]
    generated_tokens: int = 0  # the prompt's last tokens that were generated (a resumed session)


class OutputRules:
    """The rules' state for one session whose committed tokens are `tokens`."""

    def __init__(
        self, options: OutputOptions, tokens: list[int], vocab_size: int, eos_token_ids: frozenset[int], compiler: GrammarCompiler | None
    ) -> None:
        if not 0 <= options.generated_tokens < len(tokens):
            raise InvalidArgument("open.generated_tokens", f"must be in [0, {len(tokens)}) (fewer than the prompt's tokens), got {options.generated_tokens}")
        options.penalties.validate("open.penalties", vocab_size)
        validate_top_logprobs(options.top_logprobs, "open.top_logprobs")
        self.options = options
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.compiler = compiler
        self.matcher = None
        if options.constraint is not None:
            if compiler is None:
                raise InvalidArgument("open.constraint", "this verifier has no tokenizer to compile constraints with")
            self.matcher = compiler.matcher(options.constraint, "open.constraint")
            generated = tokens[len(tokens) - options.generated_tokens :]
            if generated and self.matcher.try_consume_tokens(generated) != len(generated):
                raise InvalidArgument("open.prompt_token_ids", "the generated tokens do not follow the constraint")
        self.generated = options.generated_tokens
        # The committed tokens, the last `generated` of them generated. Their penalty tensors are
        # built at the first penalized round, on the pass thread: a session opens on the event
        # loop's thread, where tensor work would start a second team of torch threads that spins
        # beside the passes' (docs/design/one-model-thread.md).
        self.history = list(tokens)
        self._seen: torch.Tensor | None = None  # [vocab] bool: in the prompt or generated
        self._counts: torch.Tensor | None = None  # [vocab] float32: times generated

    def _penalty_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(seen [vocab] bool, counts [vocab] float32) of the committed tokens, built once."""
        if self._seen is None or self._counts is None:
            ids = torch.tensor(self.history, dtype=torch.long)
            self._seen = torch.zeros(self.vocab_size, dtype=torch.bool)
            self._seen[ids] = True
            generated = ids[len(ids) - self.generated :] if self.generated else ids[:0]
            self._counts = torch.zeros(self.vocab_size, dtype=torch.float32)
            self._counts.index_add_(0, generated, torch.ones(len(generated)))
        return self._seen, self._counts

    @property
    def shapes_logits(self) -> bool:
        """Whether the rules change the target's distribution (logprobs alone do not)."""
        return self.matcher is not None or self.options.penalties.active

    def processed_logits(self, logits: torch.Tensor, tree: TokenTree) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits [n+1, vocab] with the penalties and -inf outside each row's allowed tokens,
        the allowed mask [n+1, vocab] or None without a constraint)."""
        scores = logits.float()
        if self.options.penalties.active:
            seen, counts = self._penalty_state()
            scores = penalized_logits(scores, tree, self.options.penalties, seen, counts, self.generated, self.eos_token_ids)
        if self.matcher is None:
            return scores, None
        assert self.compiler is not None
        allowed = tree_masks(self.compiler, self.matcher, tree, self.eos_token_ids)
        return scores, allowed

    def probs(self, scores: torch.Tensor, allowed: torch.Tensor | None, sampling: SamplingParams) -> torch.Tensor:
        """[n+1, vocab] the exact rule's p: standardized from the penalized scores, restricted to
        the allowed tokens and renormalized (constraints.restrict)."""
        if allowed is None:
            return standardize(scores, sampling)
        constrained = standardize(masked_logits(scores, allowed), sampling)
        if sampling.top_k == 0 and sampling.top_p >= 1.0:
            return constrained  # no truncation: the softmax of masked logits is the restriction
        return restrict(standardize(scores, sampling), allowed, constrained)

    def greedy_logits(self, scores: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        return scores if allowed is None else masked_logits(scores, allowed)

    def logprobs(self, logits: torch.Tensor, rows: list[int], tokens: list[int]) -> list[TokenLogprob]:
        return emitted_logprobs(logits, rows, tokens, self.options.top_logprobs) if self.options.logprobs else []

    def commit(self, emitted: list[int]) -> None:
        """The round's emitted tokens join the generated ones; the matcher consumes them up to an EOS."""
        if not emitted:
            return
        self.history += emitted
        self.generated += len(emitted)
        if self._seen is not None and self._counts is not None:
            ids = torch.tensor(emitted, dtype=torch.long)
            self._seen[ids] = True
            self._counts.index_add_(0, ids, torch.ones(len(emitted)))
        if self.matcher is not None:
            for token in emitted:
                if token in self.eos_token_ids or self.matcher.is_stopped():
                    break
                if not self.matcher.consume_token(token):
                    raise RuntimeError(f"the grammar matcher refused emitted token {token}: {self.matcher.get_error()}")
