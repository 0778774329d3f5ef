"""Token matchers for output constraints, through llguidance (torch-free: both services use it).

A constraint compiles into an llguidance grammar once per distinct (kind, text) and tokenizer
(`GrammarCompiler`, a bounded cache); every session gets its own `LLMatcher`, a copy of the
compiled prototype, which consumes the session's tokens and rolls back. The token mask of a
matcher state is `allowed_tokens`: True where the grammar allows the token next (EOS only where
the grammar accepts). Why llguidance and not xgrammar: docs/design/structured-output.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import llguidance
import numpy as np

from specdec.errors import InvalidArgument, ResourceExhausted
from specdec.output_constraint import CONSTRAINT_KINDS, OutputConstraint

# A JSON Schema's output is compact (no optional whitespace) unless the schema's own
# "x-guidance" options say otherwise: fewer tokens, and more of them forced.
JSON_DEFAULTS: dict = {"whitespace_flexible": False}

# What one grammar may cost to build and to step (llguidance's own limits, at their defaults but
# a tenth of the lexer fuel and grammar size): a grammar past them is refused with
# RESOURCE_EXHAUSTED instead of holding the process.
PARSER_LIMITS = {"initial_lexer_fuel": 100_000, "max_grammar_size": 50_000, "verbose_errors": False}

# Words in llguidance's messages for a grammar that passes a limit (as opposed to a wrong one).
_LIMIT_WORDS = ("limit", "too big", "too large", "too complex", "fuel")


def _grammar_text(constraint: OutputConstraint, field: str) -> str:
    """llguidance's grammar for the constraint; InvalidArgument where even that fails."""
    where = f"{field}.{constraint.kind}"
    if constraint.kind not in CONSTRAINT_KINDS:
        raise InvalidArgument(field, f"unknown constraint kind {constraint.kind!r}; choose one of {', '.join(CONSTRAINT_KINDS)}")
    if not constraint.text:
        raise InvalidArgument(where, "must not be empty")
    try:
        if constraint.kind == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(constraint.text, defaults=JSON_DEFAULTS)
        if constraint.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(constraint.text)
        return llguidance.grammar_from("grammar", constraint.text)
    except ValueError as error:
        raise InvalidArgument(where, f"not a valid {constraint.kind.replace('_', ' ')}: {error}") from None


class GrammarCompiler:
    """Compiles constraints for one tokenizer, once per distinct constraint (LRU of `capacity`).

    tokenizer_json: the tokenizer's tokenizer.json text; eos_token_ids: the ids that end a
    generation; vocab_size: the model's vocabulary (masks have this many entries; ids past the
    tokenizer's are never allowed). Thread-safe.
    """

    def __init__(self, tokenizer_json: str, eos_token_ids: list[int], vocab_size: int, capacity: int = 64) -> None:
        self.tokenizer = llguidance.LLTokenizer(tokenizer_json, eos_token=list(eos_token_ids))
        self.vocab_size = vocab_size
        self.capacity = capacity
        self.limits = llguidance.LLParserLimits(**PARSER_LIMITS)
        self._compiled: OrderedDict[OutputConstraint, llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()
        self.compilations = 0  # grammars built (cache misses that compiled)

    def matcher(self, constraint: OutputConstraint, field: str) -> llguidance.LLMatcher:
        """A fresh matcher at the start of the constraint's grammar. InvalidArgument naming
        `field`.<kind> with llguidance's reason for a malformed or unsupported constraint;
        ResourceExhausted for one past the parser limits."""
        with self._lock:
            prototype = self._compiled.get(constraint)
            if prototype is not None:
                self._compiled.move_to_end(constraint)
                return prototype.deep_copy()
        grammar = _grammar_text(constraint, field)
        prototype = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0, limits=self.limits)
        if not prototype.is_error():
            # The first mask builds the lexer's start state: a limit there shows up now, not mid-session.
            prototype.compute_bitmask()
        if prototype.is_error():
            reason = prototype.get_error().strip()
            where = f"{field}.{constraint.kind}"
            if any(word in reason.lower() for word in _LIMIT_WORDS):
                raise ResourceExhausted(where, f"the {constraint.kind.replace('_', ' ')} is too expensive to compile: {reason}")
            raise InvalidArgument(where, f"not a valid or supported {constraint.kind.replace('_', ' ')}: {reason}")
        with self._lock:
            self.compilations += 1
            self._compiled[constraint] = prototype
            while len(self._compiled) > self.capacity:
                self._compiled.popitem(last=False)
        return prototype.deep_copy()

    def allowed_tokens(self, matcher: llguidance.LLMatcher) -> np.ndarray:
        """[vocab_size] bool: the tokens the matcher's grammar allows next."""
        bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, bitorder="little")[: self.vocab_size].astype(bool)
        if allowed.shape[0] < self.vocab_size:
            allowed = np.concatenate([allowed, np.zeros(self.vocab_size - allowed.shape[0], dtype=bool)])
        return allowed
