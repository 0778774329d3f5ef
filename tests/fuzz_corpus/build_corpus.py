"""Writes the fuzz seed corpus (replayed first by tests/integration/test_fuzz.py).

    python tests/fuzz_corpus/build_corpus.py

generate/NAME.bin: the raw bytes of one Drafter.Generate request. verify/NAME.bin: one
Verifier.Verify stream, each message after its 4-byte big-endian length. Names starting with
`valid` must be served (a complete stream); every other input must be refused with a status.
The inputs are the nastiest we know: broken wire format (truncated varints, lengths past the
end, wrong wire types, deep group nesting, invalid UTF-8), out-of-range and non-finite numbers,
oversized prompts and trees, and out-of-order session messages.
"""

from __future__ import annotations

import struct
from pathlib import Path

from specdec.v1 import common_pb2, drafter_pb2, verifier_pb2

HERE = Path(__file__).resolve().parent


def gen(**kwargs) -> bytes:  # type: ignore[no-untyped-def]
    return drafter_pb2.GenerateRequest(**kwargs).SerializeToString()


def hi(**kwargs) -> bytes:  # type: ignore[no-untyped-def]
    return gen(text="hi", max_new_tokens=1, **kwargs)


def q(*ids: int, probs: list[float] | None = None) -> common_pb2.SparseDistribution:
    return common_pb2.SparseDistribution(token_ids=list(ids), probs=probs if probs is not None else [1.0 / len(ids)] * len(ids))


def opening(prompt: list[int] = [1, 2, 3], **sampling) -> verifier_pb2.VerifyRequest:  # type: ignore[no-untyped-def]  # noqa: B006
    return verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(prompt_token_ids=prompt, sampling=common_pb2.SamplingParams(**sampling)))


def round_(*nodes: tuple[int, int, common_pb2.SparseDistribution]) -> verifier_pb2.VerifyRequest:
    return verifier_pb2.VerifyRequest(round=verifier_pb2.Round(nodes=[verifier_pb2.DraftNode(parent=p, token_id=t, q=d) for p, t, d in nodes]))


def points(parents: list[int], tokens: list[int]) -> verifier_pb2.VerifyRequest:
    return round_(*[(p, t, q(t)) for p, t in zip(parents, tokens)])


CLOSE = verifier_pb2.VerifyRequest(close=verifier_pb2.CloseSession())
EMPTY_ROUND = verifier_pb2.VerifyRequest(round=verifier_pb2.Round())

GENERATE: dict[str, bytes] = {
    "empty": b"",
    "truncated_varint": b"\x20\xff\xff\xff",
    "length_past_end": b"\x0a\xff\xff\xff\xff\x0fhi",
    "wrong_wire_type_text_as_varint": b"\x08\x01\x20\x01",
    "deep_group_nesting": b"\x0b" * 5000,
    "invalid_utf8_text": b"\x0a\x02\xff\xfe\x20\x01",
    "max_new_tokens_minus_one": gen(text="hi", max_new_tokens=-1),
    "max_new_tokens_int32_max": gen(text="hi", max_new_tokens=2**31 - 1),
    "temperature_nan": hi(sampling=common_pb2.SamplingParams(temperature=float("nan"))),
    "temperature_subnormal": hi(sampling=common_pb2.SamplingParams(temperature=1e-45)),
    "top_p_inf": hi(sampling=common_pb2.SamplingParams(top_p=float("inf"))),
    "top_k_negative": hi(sampling=common_pb2.SamplingParams(top_k=-(2**31))),
    "prompt_100k_token_ids": gen(token_ids=drafter_pb2.TokenIds(ids=[42] * 100_000), max_new_tokens=1),
    "token_id_int32_min": gen(token_ids=drafter_pb2.TokenIds(ids=[-(2**31)]), max_new_tokens=1),
    "chat_role_empty": gen(chat=drafter_pb2.ChatMessages(messages=[drafter_pb2.ChatMessage(role="", content="x")] * 500), max_new_tokens=1),
    "draft_tokens_int32_max": hi(speculation=drafter_pb2.SpeculationParams(num_draft_tokens=2**31 - 1)),
    "tree_nodes_int32_min": hi(speculation=drafter_pb2.SpeculationParams(num_draft_tokens=2, max_tree_nodes=-(2**31))),
    "drafter_name_10k": hi(speculation=drafter_pb2.SpeculationParams(drafter="x" * 10_000)),
    "acceptance_mentored_nan": hi(sampling=common_pb2.SamplingParams(temperature=1.0), acceptance=common_pb2.AcceptanceParams(rule="mentored", parameter=float("nan"))),
    "acceptance_lenient_inf": hi(acceptance=common_pb2.AcceptanceParams(rule="lenient", parameter=float("inf"))),
    "empty_stop_string": hi(stop=["ok", ""]),
    "valid_unknown_fields": hi() + b"\xb8\x3e\x01" + b"\xc2\x3e\x03abc",
    "valid_top_k_int32_max_seed_uint64_max": hi(sampling=common_pb2.SamplingParams(temperature=1.0, top_k=2**31 - 1, seed=2**64 - 1)),
    "json_schema_malformed": hi(constraint=common_pb2.OutputConstraint(json_schema='{"type": ')),
    "json_schema_deep_nesting": hi(constraint=common_pb2.OutputConstraint(json_schema='{"items": ' * 2000 + "{}" + "}" * 2000)),
    "regex_look_behind": hi(constraint=common_pb2.OutputConstraint(regex="(?<=a)b")),
    "regex_huge_alternation": hi(constraint=common_pb2.OutputConstraint(regex="(" + "|".join(f"w{i}" for i in range(30000)) + ")")),
    "grammar_undefined_rule": hi(constraint=common_pb2.OutputConstraint(grammar="start: foo")),
    "top_logprobs_int32_max": hi(logprobs=True, top_logprobs=2**31 - 1),
    "repetition_penalty_nan": hi(penalties=common_pb2.Penalties(repetition_penalty=float("nan"))),
    "frequency_penalty_inf": hi(penalties=common_pb2.Penalties(frequency_penalty=float("inf"))),
    "logit_bias_id_int32_max": hi(penalties=common_pb2.Penalties(logit_bias_token_ids=[2**31 - 1], logit_bias_values=[1.0])),
    "logit_bias_unpaired": hi(penalties=common_pb2.Penalties(logit_bias_token_ids=[5, 6], logit_bias_values=[1.0])),
    "banned_token_negative": hi(penalties=common_pb2.Penalties(banned_token_ids=[-7])),
    "valid_constrained_logprobs": hi(constraint=common_pb2.OutputConstraint(regex="[a-z]{1,3}"), logprobs=True, top_logprobs=20),
    "valid_nul_text_many_stops": gen(text="\x00" * 16, max_new_tokens=2, stop=[chr(0x10FFFF) * 3] * 200),
}

VERIFY: dict[str, list[bytes]] = {
    "garbage_frames": [b"\xff" * 7, b"\x0a\x80"],
    "open_then_garbage": [opening().SerializeToString(), b"\x12\xff\xff\xff\xff\x0f"],
    "deep_group_nesting": [b"\x0b" * 5000],
    "prompt_over_context": [opening([7] * 9000).SerializeToString()],
    "prompt_id_int32_max": [opening([2**31 - 1]).SerializeToString()],
    "round_before_open": [EMPTY_ROUND.SerializeToString()],
    "two_opens": [opening().SerializeToString(), opening().SerializeToString()],
    "round_after_close": [opening().SerializeToString(), CLOSE.SerializeToString(), EMPTY_ROUND.SerializeToString()],
    "close_without_open": [CLOSE.SerializeToString()],
    "empty_message": [b""],
    "temperature_nan": [opening(temperature=float("nan")).SerializeToString()],
    "temperature_subnormal": [opening(temperature=1e-45).SerializeToString(), EMPTY_ROUND.SerializeToString()],
    "nodes_over_limit": [opening().SerializeToString(), points([-1] * 200, [5] * 200).SerializeToString()],
    "tree_too_deep": [opening().SerializeToString(), points(list(range(-1, 99)), [5] * 100).SerializeToString()],
    "parent_cycle": [opening().SerializeToString(), points([1, 0], [5, 6]).SerializeToString()],
    "parent_int32_min": [opening().SerializeToString(), points([-(2**31)], [5]).SerializeToString()],
    "q_nan": [opening(temperature=1.0).SerializeToString(), round_((-1, 5, q(5, 6, probs=[float("nan"), 1.0]))).SerializeToString()],
    "q_inf": [opening(temperature=1.0).SerializeToString(), round_((-1, 5, q(5, probs=[float("inf")]))).SerializeToString()],
    "valid_q_10k_ids": [opening(temperature=1.0).SerializeToString(), round_((-1, 5, q(*range(10_000)))).SerializeToString()],
    "q_probs_without_ids": [opening(temperature=1.0).SerializeToString(), round_((-1, 5, q(probs=[1.0]))).SerializeToString()],
    "draft_token_negative": [opening().SerializeToString(), points([-1], [-5]).SerializeToString()],
    "constraint_malformed_schema": [verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(
        prompt_token_ids=[1, 2, 3], constraint=common_pb2.OutputConstraint(json_schema="{\"type\": 7}"))).SerializeToString()],
    "generated_tokens_int32_min": [verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(
        prompt_token_ids=[1, 2, 3], generated_tokens=-(2**31))).SerializeToString()],
    "valid_constrained_round": [verifier_pb2.VerifyRequest(open=verifier_pb2.OpenSession(
        prompt_token_ids=[1, 2, 3], constraint=common_pb2.OutputConstraint(regex="[0-9]+"), logprobs=True, top_logprobs=3)).SerializeToString(),
        points([-1, 0], [33, 34]).SerializeToString(), CLOSE.SerializeToString()],
    "valid_wide_tree_uint64_seed": [opening(temperature=1.0, top_k=2**31 - 1, seed=2**64 - 1).SerializeToString(),
                                    points([-1] * 8, list(range(100, 108))).SerializeToString(), CLOSE.SerializeToString()],
}


def main() -> None:
    for folder, cases in (("generate", GENERATE), ("verify", VERIFY)):
        (HERE / folder).mkdir(exist_ok=True)
        for name, data in cases.items():
            if isinstance(data, list):
                data = b"".join(struct.pack(">I", len(frame)) + frame for frame in data)
            (HERE / folder / f"{name}.bin").write_bytes(data)


if __name__ == "__main__":
    main()
