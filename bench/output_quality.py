"""Quality signals of generated outputs: their log-likelihood under the target, and GSM8K answers.

- Mean per-token log-likelihood: log p(output token | prompt, earlier output) under the target
  model at temperature 1 (its own softmax, as the sampled runs use it), averaged over the
  output's tokens; computed in-process with transformers on the same model folder
  (verifier_svc.model_loader.model_dir("default")), one forward pass per output. A lossy rule
  that makes unlikely tokens likelier lowers it; exact sampling has the target's own mean.
- GSM8K: the final numeric answer of a worked solution is the last number in it (commas
  dropped); the reference answer follows "####" in Spec-Bench's math_reasoning references.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> str | None:
    """The last number in text, normalized ("1,000.50" -> "1000.5", "7.0" -> "7"), or None."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "").rstrip(".")
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return value


def reference_answer(question: dict) -> str | None:
    """The "#### N" answer of a Spec-Bench math_reasoning (GSM8K) question, normalized."""
    references = question.get("reference") or []
    match = re.search(r"####\s*(.+)", references[0]) if references else None
    return final_number(match.group(1)) if match else None


class TargetScorer:
    """The target model in this process (float32 CPU, like the verifier), for log-likelihoods."""

    def __init__(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from verifier_svc.model_loader import model_dir

        folder = model_dir("default")
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The ids our drafter sends for a chat prompt (the model's template, assistant turn opened)."""
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))

    def mean_log_likelihood(self, prompt_ids: Sequence[int], output_ids: Sequence[int]) -> float | None:
        """Mean over output tokens of log p(token | everything before it), temperature 1."""
        if not output_ids:
            return None
        torch = self._torch
        ids = torch.tensor([[*prompt_ids, *output_ids]])
        with torch.inference_mode():
            logits = self.model(ids).logits[0, len(prompt_ids) - 1 : -1].float()  # [len(output), vocab]
        log_probs = logits.log_softmax(-1).gather(1, torch.tensor(list(output_ids)).unsqueeze(1))
        return float(log_probs.mean())
