"""The request bodies the gateway accepts: OpenAI's fields, and the extensions `top_k`,
`repetition_penalty`, `min_tokens`, `structured_outputs` (vLLM's names for its extra fields) and
`speculation`.

These models check types and the ranges the wire format imposes (32-bit counts, 64-bit seeds);
the drafter owns every other check and names the field (gateway_svc.errors renames it).
Fields OpenAI defines that the gateway does not implement are accepted at their neutral values
only (gateway_svc.translate refuses the rest by name); unknown fields are ignored, as vLLM
ignores them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

INT32_MAX = 2**31 - 1
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
# OpenAI's seed is a signed 64-bit integer; the drafter's an unsigned one (taken modulo 2**64).
Seed = Annotated[int, Field(ge=-(2**63), lt=2**64)]
CONFIG = ConfigDict(extra="ignore", allow_inf_nan=False)


class Speculation(BaseModel):
    """How specdec speculates for this request (SpeculationParams in drafter.proto); unset
    fields take the drafter's defaults."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    drafter: str | None = Field(None, description="copy, ngram, onnx-quantized, onnx-small or hybrid")
    num_draft_tokens: Int32 | None = Field(None, description="draft length (tree depth); 0 turns speculation off")
    max_tree_nodes: Int32 | None = Field(None, description="tree nodes per round at most")
    draft_policy: str | None = Field(None, description="auto, fixed, leviathan, specdec++ or copy-confidence")
    overlap: bool | None = Field(None, description="draft the next round while the verifier checks this one")
    acceptance: str | None = Field(None, description="exact (default), or opt-in lossy lenient:L or mentored:D")


class StreamOptions(BaseModel):
    model_config = CONFIG

    include_usage: bool = False


class ContentPart(BaseModel):
    model_config = CONFIG

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = CONFIG

    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None


class JsonSchemaFormat(BaseModel):
    """OpenAI's `response_format.json_schema`; `strict` is accepted and always in force."""

    model_config = CONFIG

    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] = Field(alias="schema", description="the JSON Schema the output is valid under")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = CONFIG

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="with type json_schema")


class StructuredOutputs(BaseModel):
    """Extension, vLLM's `structured_outputs`: at most one constraint on the output."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    json_schema: dict[str, Any] | str | None = Field(None, alias="json", description="a JSON Schema (object or JSON text)")
    regex: str | None = Field(None, description="the whole output matches it (Rust regex syntax)")
    grammar: str | None = Field(None, description="a Lark grammar as llguidance reads it (GBNF accepted)")


class GenerationFields(BaseModel):
    """Fields both endpoints share."""

    model_config = CONFIG

    model: str | None = Field(None, description="the served model (GET /v1/models); unset: the only one")
    max_tokens: Int32 | None = Field(None, description="new tokens at most (unset: the drafters' cap; the context ends a generation too)")
    temperature: float | None = Field(None, description="0: greedy; unset: 1")
    top_p: float | None = None
    top_k: Int32 | None = Field(None, description="extension: keep the k most likely tokens (0 or -1: off)")
    stop: str | list[str] | None = None
    seed: Seed | None = None
    n: int | None = Field(None, description="only 1")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    frequency_penalty: float | None = Field(None, description="in [-2, 2]: logit -= frequency_penalty * count")
    presence_penalty: float | None = Field(None, description="in [-2, 2]: logit -= presence_penalty * (count > 0)")
    logit_bias: dict[str, float] | None = Field(None, description="token id (a string) -> bias in [-100, 100]")
    response_format: ResponseFormat | None = Field(None, description="text, json_object or json_schema")
    repetition_penalty: float | None = Field(None, description="extension: in (0, 10], transformers' definition")
    min_tokens: Int32 | None = Field(None, description="extension: no end of sequence before this many tokens")
    structured_outputs: StructuredOutputs | None = None
    speculation: Speculation | None = None


class ChatCompletionRequest(GenerationFields):
    messages: list[ChatMessage]
    max_completion_tokens: Int32 | None = Field(None, description="as max_tokens (wins when both are set)")
    logprobs: bool | None = Field(None, description="return each generated token's logprob")
    top_logprobs: Int32 | None = Field(None, description="in [0, 20] alternatives per token; needs logprobs")
    tools: list[dict[str, Any]] | None = Field(None, description="only empty")
    tool_choice: Literal["none", "auto"] | dict[str, Any] | None = None


class CompletionRequest(GenerationFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: Int32 | None = Field(None, description="in [0, 5]: each token's logprob and this many alternatives")
    echo: bool | None = Field(None, description="only false")
    best_of: int | None = Field(None, description="only 1")
    suffix: str | None = Field(None, description="only empty")
