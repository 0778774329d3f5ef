"""drafter_build.distill on a tiny random Llama: the student's shape, what is frozen, the loss,
and that distillation raises agreement with the teacher (seconds; the real build is offline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from drafter_build import distill

FIXTURES = Path(__file__).resolve().parent / "fixtures"  # three seed tasks (README.md there)


def tiny_target(layers: int = 6) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=64,
                         initializer_range=0.3)  # peaked distributions, so agreement starts low
    return LlamaForCausalLM(config).eval()


def test_student_layers_are_evenly_spaced_with_both_ends() -> None:
    assert distill.student_layers(30, 4) == [0, 10, 19, 29]
    assert distill.student_layers(30, 1) == [0]
    with pytest.raises(ValueError, match="layers"):
        distill.student_layers(30, 31)


def test_student_copies_the_chosen_layers_and_freezes_the_shared_embedding() -> None:
    target = tiny_target()
    student = distill.make_student(target, 3)  # layers 0, 2 (rounded from 2.5), 5
    assert student.config.num_hidden_layers == 3
    for mine, theirs in zip(student.model.layers, [target.model.layers[i] for i in distill.student_layers(6, 3)]):
        assert torch.equal(mine.mlp.up_proj.weight, theirs.mlp.up_proj.weight)
    assert torch.equal(student.model.embed_tokens.weight, target.model.embed_tokens.weight)
    assert student.lm_head.weight is student.model.embed_tokens.weight  # tied, one frozen tensor
    assert not student.model.embed_tokens.weight.requires_grad
    assert torch.equal(student.model.norm.weight, target.model.norm.weight)


def test_loss_is_the_cross_entropy_to_the_teacher_on_real_positions() -> None:
    logits = torch.tensor([[[0.0, 0.0], [5.0, -5.0]]])  # [b=1, n=2, V=2]
    mask = torch.tensor([[1, 0]])  # the second position is padding
    top_ids = torch.tensor([[[0, 1], [0, 1]]])
    top_probs = torch.tensor([[[0.5, 0.5], [1.0, 0.0]]])
    expected = -(0.5 * torch.log(torch.tensor(0.5)) * 2)
    assert torch.isclose(distill.distillation_loss(logits, mask, top_ids, top_probs), expected)


def test_distillation_raises_agreement_with_the_teacher() -> None:
    target = tiny_target()
    generator = torch.Generator().manual_seed(1)
    corpus = [torch.randint(0, 64, (24,), generator=generator).tolist() for _ in range(16)]
    data = distill.teacher_targets(target, corpus, top_k=64, seq_len=24)
    config = distill.DistillConfig(layers=2, steps=60, batch_size=4, lr=3e-3, warmup_steps=5)
    student = distill.make_student(target, config.layers)
    before = distill.agreement(student, data)
    losses = distill.distill(student, data, config)
    after = distill.agreement(student, data)
    print(f"agreement {before:.3f} -> {after:.3f}, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert after > before + 0.05 and losses[-1] < losses[0]
    again = distill.make_student(target, config.layers)
    distill.distill(again, data, config)  # seeded: the same data and config give the same student
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), student.state_dict().values()))


def test_training_prompts_are_the_seed_tasks_not_the_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_TRAIN_DIR", str(FIXTURES))
    prompts = distill.training_prompts()
    seeds = [json.loads(line) for line in (FIXTURES / distill.SEED_TASKS_FILE).read_text().splitlines()]
    assert len(prompts) == len(seeds) == 3
    for prompt, seed in zip(prompts, seeds):  # the instruction, then its input when it has one
        given = seed["instances"][0]["input"]
        assert prompt == (f"{seed['instruction']}\n\n{given}" if given else seed["instruction"])
    monkeypatch.delenv("SPECDEC_TRAIN_DIR")
    assert distill.train_dir().name == "train" and "bench" not in distill.train_dir().parts


def test_missing_training_prompts_are_named_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_TRAIN_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as missing:
        distill.training_prompts()
    message = str(missing.value)
    assert "\n" not in message and "SPECDEC_TRAIN_DIR" in message and str(tmp_path) in message
    assert "seed_tasks.jsonl" in message and "stanford_alpaca" in message
