"""Distils the `small` draft model from the target (issue 4), offline, on a CPU, in minutes.

The student is the target's own architecture cut to a few layers: its token embedding, final
norm and (tied) output head are the target's, frozen, so it shares the tokenizer and the
vocabulary; its layers start as copies of evenly spaced target layers and are trained.

Data (never the benchmark prompts of ../shared/bench/): the target's own generations for the
Self-Instruct seed tasks of ../shared/train/ (greedy and sampled at temperature 1, the two
regimes the drafter serves), rendered with the target's chat template. Loss: the forward KL
from the target's distribution to the student's at every position, with the target's
distribution kept as its top-k tokens (the tail mass is small and dropped), as in
knowledge distillation (Hinton et al., 2015) and DistillSpec (Zhou et al., 2024), whose point
is exactly this: distil on the target's own outputs to raise acceptance.

Everything is seeded: the same target, data and config give the same student.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

log = logging.getLogger(__name__)
SEED_TASKS_FILE = "seed_tasks.jsonl"


def train_dir() -> Path:
    """$SPECDEC_TRAIN_DIR, else <repo root>/../shared/train/ (see the README there)."""
    default = Path(__file__).resolve().parents[1].parent / "shared" / "train"
    return Path(os.environ.get("SPECDEC_TRAIN_DIR", default))


@dataclass(frozen=True)
class DistillConfig:
    """What the student is and how it is trained; the defaults are the shipped `small` drafter."""

    layers: int = 4  # transformer layers of the student
    max_new_tokens: int = 128  # per target generation
    sampled_per_prompt: int = 1  # generations at temperature 1 per prompt (plus one greedy)
    teacher_top_k: int = 64  # target probabilities kept per position
    steps: int = 600
    batch_size: int = 4  # sequences per step
    seq_len: int = 320  # tokens per training sequence (longer ones are cut)
    lr: float = 1e-3
    warmup_steps: int = 10
    held_out: float = 0.1  # share of the training prompts kept out of training, for the report
    seed: int = 0


def training_prompts(path: Path | None = None) -> list[str]:
    """The seed tasks' prompts (default: seed_tasks.jsonl of train_dir()): each instruction,
    followed by its input when it has one. FileNotFoundError, with a one-line message saying
    which file is needed and where it comes from, if it is not there."""
    path = path or train_dir() / SEED_TASKS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"distillation needs {path.name}, the 175 Self-Instruct seed tasks (github.com/tatsu-lab/stanford_alpaca, "
            f"file seed_tasks.jsonl, Apache-2.0), in the folder SPECDEC_TRAIN_DIR names; it is not in {path.parent}"
        )
    prompts = []
    for line in path.read_text().splitlines():
        task = json.loads(line)
        text = task["instruction"]
        given = task["instances"][0]["input"] if task["instances"] else ""
        prompts.append(f"{text}\n\n{given}" if given else text)
    return prompts


def student_layers(num_target_layers: int, layers: int) -> list[int]:
    """Evenly spaced target layers, first and last included, that the student starts from."""
    if not 1 <= layers <= num_target_layers:
        raise ValueError(f"layers must be in [1, {num_target_layers}], got {layers}")
    if layers == 1:
        return [0]
    return [round(i * (num_target_layers - 1) / (layers - 1)) for i in range(layers)]


def make_student(target: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
    """A copy of the target with only `layers` of its layers; embedding, norm and head are the
    target's and frozen (the head is tied to the embedding)."""
    keep = student_layers(target.config.num_hidden_layers, layers)
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    config.layer_types = None  # recomputed for the new depth (all full attention in Llama)
    student = LlamaForCausalLM(config)
    state = {}
    for name, tensor in target.state_dict().items():
        if name.startswith("model.layers."):
            index = int(name.split(".")[2])
            if index not in keep:
                continue
            name = name.replace(f"model.layers.{index}.", f"model.layers.{keep.index(index)}.", 1)
        state[name] = tensor.clone()
    student.load_state_dict(state, strict=False)  # lm_head is tied to embed_tokens
    student.tie_weights()
    student.model.embed_tokens.weight.requires_grad_(False)
    return student


def generate_corpus(
    target: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    config: DistillConfig,
    batch_size: int = 16,
) -> list[list[int]]:
    """Token ids (chat-templated prompt + the target's reply) of one greedy and
    `sampled_per_prompt` temperature-1 generations per prompt."""
    rendered = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    tokenizer.padding_side = "left"
    eos = target.config.eos_token_id
    corpus: list[list[int]] = []
    for sample in range(1 + config.sampled_per_prompt):
        torch.manual_seed(config.seed * 1000 + sample)
        for start in range(0, len(rendered), batch_size):
            batch = tokenizer(rendered[start : start + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = target.generate(
                    **batch,
                    max_new_tokens=config.max_new_tokens,
                    do_sample=sample > 0,
                    temperature=1.0 if sample > 0 else None,
                    top_k=0 if sample > 0 else None,
                    top_p=1.0 if sample > 0 else None,
                    pad_token_id=eos,
                )
            width = batch["input_ids"].shape[1]
            for row, mask in zip(out.tolist(), batch["attention_mask"]):
                prompt, reply = row[width - int(mask.sum()) : width], row[width:]
                if eos in reply:  # keep the EOS token itself, drop the padding after it
                    reply = reply[: reply.index(eos) + 1]
                ids = prompt + reply
                corpus.append(ids)
        log.info("target generations: %d of %d", len(corpus), len(rendered) * (1 + config.sampled_per_prompt))
    return corpus


def _cached_corpus(target_dir: Path, prompts: Sequence[str], config: DistillConfig, generate) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The target's generations, kept in the specdec cache (keyed by the target's weights file,
    the prompts and the generation settings): rebuilding with other training settings reuses them."""
    from specdec.model_files import cache_root

    key = hashlib.sha256()
    weights = target_dir / "model.safetensors"
    key.update((weights.read_bytes()[: 1 << 20] if weights.is_file() else (target_dir / "config.json").read_bytes()))
    key.update(json.dumps([list(prompts), config.max_new_tokens, config.sampled_per_prompt, config.seed]).encode())
    path = cache_root() / "distill" / f"corpus-{key.hexdigest()[:16]}.json"
    if path.is_file():
        log.info("target generations from %s", path)
        return json.loads(path.read_text())
    corpus = generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(corpus))
    tmp.rename(path)
    return corpus


def teacher_targets(
    target: LlamaForCausalLM, corpus: Sequence[Sequence[int]], top_k: int, seq_len: int
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per sequence (cut to seq_len tokens): its ids [n], and the target's top_k token ids
    [n, top_k] and probabilities [n, top_k] (temperature 1) for the token after each position."""
    out = []
    for ids in corpus:
        x = torch.tensor(ids[:seq_len]).unsqueeze(0)
        with torch.no_grad():
            probs = target(x).logits[0].float().softmax(-1)
        top = probs.topk(top_k, dim=-1)
        out.append((x[0], top.indices, top.values))
    return out


def _batches(data: list, batch_size: int, generator: random.Random):
    """Endless shuffled batches of the data."""
    while True:
        order = list(range(len(data)))
        generator.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield [data[i] for i in order[start : start + batch_size]]


def _pad(batch: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]):
    """Right-pad a batch: ids [b, n], mask [b, n], teacher ids and probs [b, n, k]."""
    n = max(len(ids) for ids, _, _ in batch)
    k = batch[0][1].shape[1]
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.long)
    top_ids = torch.zeros(len(batch), n, k, dtype=torch.long)
    top_probs = torch.zeros(len(batch), n, k)
    for row, (x, t_ids, t_probs) in enumerate(batch):
        ids[row, : len(x)] = x
        mask[row, : len(x)] = 1
        top_ids[row, : len(x)] = t_ids
        top_probs[row, : len(x)] = t_probs
    return ids, mask, top_ids, top_probs


def distillation_loss(logits: torch.Tensor, mask: torch.Tensor, top_ids: torch.Tensor, top_probs: torch.Tensor) -> torch.Tensor:
    """Mean over real positions of -sum_k p_k log q(k): the forward KL up to the teacher's
    entropy, over the teacher's top-k tokens. logits [b, n, V]; mask [b, n]; top_* [b, n, k]."""
    log_q = logits.float().log_softmax(-1).gather(-1, top_ids)  # [b, n, k]
    per_position = -(top_probs * log_q).sum(-1)  # [b, n]
    return (per_position * mask).sum() / mask.sum()


def agreement(student: LlamaForCausalLM, data: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
    """Mean over positions of sum_x min(p(x), q(x)) at temperature 1 (alpha of Leviathan et al.),
    p the teacher's top-k (a lower bound of the full sum)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, top_ids, top_probs in data:
            q = student(ids.unsqueeze(0)).logits[0].float().softmax(-1).gather(-1, top_ids)
            total += torch.minimum(q, top_probs).sum().item()
            count += len(ids)
    return total / max(count, 1)


def distill(
    student: LlamaForCausalLM,
    train: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    config: DistillConfig,
) -> list[float]:
    """Trains the student's unfrozen weights in place (AdamW, linear warm-up then cosine decay);
    returns the loss of each step."""
    torch.manual_seed(config.seed)
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)

    def rate(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    batches = _batches(train, config.batch_size, random.Random(config.seed))
    student.train()
    losses = []
    started = time.monotonic()
    for step in range(config.steps):
        ids, mask, top_ids, top_probs = _pad(next(batches))
        loss = distillation_loss(student(ids, attention_mask=mask).logits, mask, top_ids, top_probs)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == config.steps - 1:
            log.info("step %d/%d loss %.4f (%.0f s)", step + 1, config.steps, loss.item(), time.monotonic() - started)
    student.eval()
    return losses


def build_small_model(target_dir: Path, out_dir: Path, *, seed: int = 0, config: DistillConfig | None = None) -> Path:
    """Distils the small drafter from the target model folder into out_dir (a transformers
    LlamaForCausalLM folder with the target's tokenizer, plus distill.json: the config, the
    losses and the held-out agreement before and after training). Returns out_dir."""
    config = config or DistillConfig(seed=seed)
    torch.manual_seed(config.seed)
    started = time.monotonic()
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))

    prompts = training_prompts()
    random.Random(config.seed).shuffle(prompts)
    cut = int(len(prompts) * (1 - config.held_out))
    corpus = _cached_corpus(target_dir, prompts, config, lambda: generate_corpus(target, tokenizer, prompts, config))
    per_sample = len(prompts)
    train_seqs = [s for i, s in enumerate(corpus) if i % per_sample < cut]
    held_seqs = [s for i, s in enumerate(corpus) if i % per_sample >= cut]
    generated_at = time.monotonic()
    train = teacher_targets(target, train_seqs, config.teacher_top_k, config.seq_len)
    held = teacher_targets(target, held_seqs, config.teacher_top_k, config.seq_len)

    student = make_student(target, config.layers)
    before = agreement(student, held)
    losses = distill(student, train, config)
    after = agreement(student, held)
    log.info("held-out agreement (alpha at temperature 1): %.3f before, %.3f after", before, after)

    out_dir.mkdir(parents=True, exist_ok=True)
    student.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    report = {
        "config": asdict(config),
        "student_layers_from_target": student_layers(target.config.num_hidden_layers, config.layers),
        "train_sequences": len(train_seqs),
        "held_out_sequences": len(held_seqs),
        "train_tokens": sum(min(len(s), config.seq_len) for s in train_seqs),
        "held_out_agreement_before": before,
        "held_out_agreement_after": after,
        "loss_first": losses[0],
        "loss_last_25_mean": sum(losses[-25:]) / len(losses[-25:]),
        "generate_seconds": generated_at - started,
        "total_seconds": time.monotonic() - started,
        "torch_version": torch.__version__,
    }
    (out_dir / "distill.json").write_text(json.dumps(report, indent=2) + "\n")
    return out_dir
