"""OpenAI's output fields to the drafter's: the constraint (`response_format`, the extension
`structured_outputs`), the penalties and biases, and the logprobs asked for. Pure functions.

Mapping (GenerateRequest fields in protos/specdec/v1):
- `response_format` `{"type": "json_schema", "json_schema": {"schema": S}}` -> constraint.json_schema S;
  `{"type": "json_object"}` -> constraint.json_schema `{"type": "object"}` (any JSON object);
  `{"type": "text"}` -> no constraint.
- `structured_outputs` `{"json": S}` / `{"regex": R}` / `{"grammar": G}` -> constraint.json_schema
  / regex / grammar; at most one constraint per request, counting `response_format`'s.
- `frequency_penalty`, `presence_penalty`, `repetition_penalty`, `min_tokens` -> penalties.*;
  `logit_bias` {"<token id>": bias} -> penalties.logit_bias_token_ids / logit_bias_values.
- chat `logprobs` (bool) and `top_logprobs` -> logprobs and top_logprobs; completions
  `logprobs` N in [0, 5] -> logprobs with top_logprobs N.

`OutputRules.renames` maps the drafter's field names for these to the fields the client sent,
so that the drafter's INVALID_ARGUMENT names the client's field (gateway_svc.errors).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway_svc.errors import invalid
from gateway_svc.schema import INT32_MAX, ChatCompletionRequest, CompletionRequest, GenerationFields
from specdec.penalties import Penalties

MAX_COMPLETION_LOGPROBS = 5  # OpenAI's legacy completions limit
ANY_JSON_OBJECT = '{"type": "object"}'
# The drafter's names of the penalty fields -> the request's.
PENALTY_FIELDS = {
    "penalties.frequency_penalty": "frequency_penalty",
    "penalties.presence_penalty": "presence_penalty",
    "penalties.repetition_penalty": "repetition_penalty",
    "penalties.min_tokens": "min_tokens",
    "penalties.logit_bias_token_ids": "logit_bias",
    "penalties.logit_bias_values": "logit_bias",
}


@dataclass(frozen=True)
class OutputRules:
    """Keyword arguments for specdec.client.build_request, and the field renames."""

    kwargs: dict[str, Any] = field(default_factory=dict)
    renames: dict[str, str] = field(default_factory=dict)

    @property
    def top_logprobs(self) -> int:
        return int(self.kwargs.get("top_logprobs", 0))

    @property
    def logprobs(self) -> bool:
        return bool(self.kwargs.get("logprobs", False))


def chat_rules(body: ChatCompletionRequest) -> OutputRules:
    rules = _shared(body)
    if body.logprobs:
        rules.kwargs["logprobs"] = True
    if body.top_logprobs:
        rules.kwargs["top_logprobs"] = body.top_logprobs  # without logprobs: the drafter refuses it, by name
    rules.renames.update({"logprobs": "logprobs", "top_logprobs": "top_logprobs"})
    return rules


def completion_rules(body: CompletionRequest) -> OutputRules:
    rules = _shared(body)
    if body.logprobs is not None:
        if not 0 <= body.logprobs <= MAX_COMPLETION_LOGPROBS:
            raise invalid("logprobs", f"must be in [0, {MAX_COMPLETION_LOGPROBS}], got {body.logprobs}")
        rules.kwargs.update(logprobs=True, top_logprobs=body.logprobs)
    rules.renames.update({"logprobs": "logprobs", "top_logprobs": "logprobs"})
    return rules


def _shared(body: GenerationFields) -> OutputRules:
    rules = OutputRules(renames=dict(PENALTY_FIELDS))
    constraints = _constraints(body)
    if len(constraints) > 1:
        raise invalid(constraints[1][2], f"give at most one output constraint, got {' and '.join(c[2] for c in constraints)}")
    if constraints:
        kind, text, sent_as = constraints[0]
        rules.kwargs[kind] = text
        rules.renames[f"constraint.{kind}"] = sent_as
    penalties = _penalties(body)
    if penalties.active:
        rules.kwargs["penalties"] = penalties
    return rules


def _constraints(body: GenerationFields) -> list[tuple[str, str, str]]:
    """(kind, text, the field it came from) for every constraint the request sets."""
    found = []
    response_format = body.response_format
    if response_format is not None and response_format.type == "json_object":
        found.append(("json_schema", ANY_JSON_OBJECT, "response_format"))
    elif response_format is not None and response_format.type == "json_schema":
        if response_format.json_schema is None:
            raise invalid("response_format.json_schema", "is required when type is json_schema")
        found.append(("json_schema", json.dumps(response_format.json_schema.json_schema), "response_format.json_schema.schema"))
    structured = body.structured_outputs
    if structured is not None:
        schema = structured.json_schema
        if schema is not None:
            found.append(("json_schema", schema if isinstance(schema, str) else json.dumps(schema), "structured_outputs.json"))
        if structured.regex is not None:
            found.append(("regex", structured.regex, "structured_outputs.regex"))
        if structured.grammar is not None:
            found.append(("grammar", structured.grammar, "structured_outputs.grammar"))
    return found


def _penalties(body: GenerationFields) -> Penalties:
    """The request's penalties; their ranges are the drafter's to check (it names the field)."""
    return Penalties(
        repetition_penalty=1.0 if body.repetition_penalty is None else body.repetition_penalty,
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        logit_bias=tuple(_logit_bias(body.logit_bias or {}).items()),
        min_tokens=body.min_tokens or 0,
    )


def _logit_bias(biases: dict[str, float]) -> dict[int, float]:
    """OpenAI's {"<token id>": bias}: keys must be integers (token ids of the model's tokenizer)."""
    parsed = {}
    for key, bias in biases.items():
        try:
            token = int(key)
        except ValueError:
            raise invalid("logit_bias", f"keys must be token ids (integers as strings), got {key!r}") from None
        if not 0 <= token <= INT32_MAX:
            raise invalid("logit_bias", f"token id {token} is outside the vocabulary")
        parsed[token] = bias
    return parsed
