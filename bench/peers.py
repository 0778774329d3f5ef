"""Peers: transformers' own `generate()` on the same model, in the benchmark's process.

`hf-generate` is plain decoding (greedy unless a temperature is set); `hf-prompt-lookup` is
transformers' prompt lookup decoding (Saxena, 2023), the n-gram drafter built into `generate()`;
`hf-assisted` is transformers' assisted generation with a draft model (our distilled `small`
drafter, as a torch model, when it has been built). All see the token ids our services see (the
same chat template) and are timed the same way: wall time of one `generate()` call; the time to
first token is when `generate()` hands its first new token to a streamer.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.streamers import BaseStreamer

from bench.systems import TRANSFORMERS_REFERENCE, Decoding, Output
from verifier_svc.int8_weights import quantize_linear_layers
from verifier_svc.model_loader import model_dir

PROMPT_LOOKUP_NUM_TOKENS = 10
ASSISTANT_NUM_TOKENS = 4  # the draft length transformers starts from (it adapts it with its heuristic)


class FirstTokenClock(BaseStreamer):
    """Notes when generate() streams its first new token (its first put() is the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.first_token_at: float | None = None

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


class HFModel:
    """The default model and its tokenizer, loaded once in the dtype the verifier serves (with its
    linear layers' weights in int8 as the verifier's `--quantization int8` serves them, if `int8`)."""

    def __init__(self, source: str = "default", dtype: torch.dtype = torch.float32, int8: bool = False) -> None:
        folder = model_dir(source)
        self.tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(str(folder))
        self.model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype).eval()
        if int8:
            quantize_linear_layers(self.model)
        eos = self.model.generation_config.eos_token_id
        self.eos_token_ids: frozenset[int] = frozenset(eos if isinstance(eos, list) else [eos])


class HFSystem:
    """`model.generate()` with greedy or sampled decoding, optionally with prompt lookup."""

    def __init__(
        self, name: str, hf: HFModel, prompt_lookup_num_tokens: int | None = None, assistant: PreTrainedModel | None = None
    ) -> None:
        self.name = name
        self._hf = hf
        self._prompt_lookup_num_tokens = prompt_lookup_num_tokens
        self._assistant = assistant

    def generate(self, messages: list[dict[str, str]], decoding: Decoding) -> Output:
        tok, model = self._hf.tokenizer, self._hf.model
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        input_ids = torch.tensor([ids])
        sampling = {} if decoding.greedy else {"temperature": decoding.temperature, "top_k": 0, "top_p": 1.0}
        if not decoding.greedy and decoding.seed is not None:
            # generate() draws from torch's global generator and takes no other; seed it per call.
            torch.manual_seed(decoding.seed)
        clock = FirstTokenClock()
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=decoding.max_new_tokens,
                do_sample=not decoding.greedy,
                prompt_lookup_num_tokens=self._prompt_lookup_num_tokens,
                assistant_model=self._assistant,
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else min(self._hf.eos_token_ids),
                streamer=clock,
                **sampling,
            )
        wall = time.perf_counter() - started
        new = [int(t) for t in out[0, len(ids):]]
        eos_at = next((i for i, t in enumerate(new) if t in self._hf.eos_token_ids), None)
        finish = "length" if eos_at is None else "eos"
        new = new if eos_at is None else new[:eos_at]
        ttft = None if clock.first_token_at is None else clock.first_token_at - started
        return Output(new, tok.decode(new, skip_special_tokens=True), finish, wall, len(ids), time_to_first_token_seconds=ttft)


def hf_peers(assistant_dir: Path | None = None, dtype: torch.dtype = torch.float32, int8: bool = False) -> list[HFSystem]:
    """hf-generate, hf-prompt-lookup, and hf-assisted when a draft model folder is given, in
    `dtype` (the target's linear weights in int8 if `int8`; the assistant's as built)."""
    hf = HFModel(dtype=dtype, int8=int8)
    peers = [HFSystem(TRANSFORMERS_REFERENCE, hf), HFSystem("hf-prompt-lookup", hf, PROMPT_LOOKUP_NUM_TOKENS)]
    if assistant_dir is not None:
        assistant = AutoModelForCausalLM.from_pretrained(str(assistant_dir), dtype=dtype).eval()
        assistant.generation_config.num_assistant_tokens = ASSISTANT_NUM_TOKENS
        peers.append(HFSystem("hf-assisted", hf, assistant=assistant))
    return peers
