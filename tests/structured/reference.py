"""References for structured-output tests: transformers-side logits processors built on
llguidance's own mask functions (independent of verifier_svc's masks), a tiny random-weight
model with the default tokenizer's vocabulary, and the test constraints."""

from __future__ import annotations

import json

import llguidance
import llguidance.numpy
import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor

from specdec.grammar import GrammarCompiler
from specdec.output_constraint import OutputConstraint

PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "address"],
    "additionalProperties": False,
}
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                "required": ["sku", "qty"],
                "additionalProperties": False,
            },
        },
        "express": {"type": "boolean"},
    },
    "required": ["items", "express"],
    "additionalProperties": False,
}
READING_SCHEMA = {
    "type": "object",
    "properties": {
        "sensor": {"enum": ["temp", "humidity", "pressure"]},
        "values": {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 50}, "maxItems": 4},
        "unit": {"type": "string", "maxLength": 6},
        "ok": {"type": "boolean"},
    },
    "required": ["sensor", "values", "unit", "ok"],
    "additionalProperties": False,
}
DATE_REGEX = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
ARITHMETIC_GRAMMAR = """
start: expr
expr: term (OP term){0,3}
term: NUMBER | "(" NUMBER (OP NUMBER){0,2} ")"
OP: "+" | "-"
NUMBER: /[1-9][0-9]{0,2}/
"""

CONSTRAINTS = {
    "person": OutputConstraint("json_schema", json.dumps(PERSON_SCHEMA)),
    "order": OutputConstraint("json_schema", json.dumps(ORDER_SCHEMA)),
    "reading": OutputConstraint("json_schema", json.dumps(READING_SCHEMA)),
    "date": OutputConstraint("regex", DATE_REGEX),
    "arithmetic": OutputConstraint("grammar", ARITHMETIC_GRAMMAR),
}
SCHEMAS = {"person": PERSON_SCHEMA, "order": ORDER_SCHEMA, "reading": READING_SCHEMA}


def tiny_model(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer random Llama with the given vocabulary (the grammar's validity does not depend
    on the model's quality)."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper logits than the default init, so that the mask decides less alone
        model.lm_head.weight.mul_(8.0)
    return model


class GrammarLogitsProcessor(LogitsProcessor):
    """A transformers logits processor over llguidance's own bitmask functions: -inf outside the
    tokens the grammar allows after each row's generated tokens."""

    def __init__(self, compiler: GrammarCompiler, constraint: OutputConstraint, prompt_length: int) -> None:
        self.matcher = compiler.matcher(constraint, "constraint")
        self.prompt_length = prompt_length
        self.consumed = 0
        self.vocab_size = compiler.vocab_size

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[0, self.prompt_length :].tolist()
        for token in generated[self.consumed :]:
            assert self.matcher.consume_token(token), self.matcher.get_error()
        self.consumed = len(generated)
        bitmask = llguidance.numpy.allocate_token_bitmask(1, self.vocab_size)
        llguidance.numpy.fill_next_token_bitmask(self.matcher, bitmask)
        out = scores.detach().float().numpy().copy()
        llguidance.numpy.apply_token_bitmask_inplace(out, bitmask)
        return torch.from_numpy(out)


class FrequencyPresenceProcessor(LogitsProcessor):
    """OpenAI's frequency and presence penalties over the generated tokens."""

    def __init__(self, frequency: float, presence: float, prompt_length: int) -> None:
        self.frequency, self.presence, self.prompt_length = frequency, presence, prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        counts = torch.zeros_like(scores)
        generated = input_ids[:, self.prompt_length :]
        counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


def masked_distribution(logits: torch.Tensor, allowed: np.ndarray) -> torch.Tensor:
    """softmax of logits restricted to allowed (temperature 1)."""
    return torch.softmax(logits.float().masked_fill(~torch.from_numpy(allowed), float("-inf")), dim=-1)
