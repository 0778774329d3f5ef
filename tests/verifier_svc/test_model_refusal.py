"""A verifier that cannot serve its model does not stay up: `specdec serve verifier` exits with
status 1 after at most EXIT_SECONDS of its own CPU time (on an idle machine, that many seconds),
and the last line it writes names the model (its class, or the source) and the reason, with no
traceback. CPU time, not wall time: the suite shares small machines, where starting Python with
torch can wait on other processes; one that stays up is still caught, by STAY_UP_SECONDS of wall
time. Tiny random-weight models are built from transformers configs into a temporary folder;
the verifiers start two at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers as tf

from specdec.model_files import tokenizer_dir
from verifier_svc.model_loader import ModelNotServable, open_model
from verifier_svc.server import main

EXIT_SECONDS = 30
STAY_UP_SECONDS = 180
SIDE_BY_SIDE = 2
TINY_LLAMA = {"vocab_size": 49152, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "tie_word_embeddings": False}


@dataclass(frozen=True)
class Exit:
    code: int | None  # None: still running after STAY_UP_SECONDS (then killed)
    seconds: float  # wall
    cpu_seconds: float  # user + system, all threads
    stdout: str
    stderr: str


def _with_tokenizer(folder: Path) -> None:
    for item in tokenizer_dir("default").iterdir():
        if item.is_file() and item.name.startswith(("tokenizer", "special_tokens")):
            (folder / item.name).write_bytes(item.read_bytes())


def _build_sources(root: Path) -> dict[str, str]:
    """Model sources the verifier must refuse, by case name."""
    torch.manual_seed(0)
    tf.MambaForCausalLM(tf.MambaConfig(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2)).save_pretrained(root / "mamba")
    tf.T5ForConditionalGeneration(tf.T5Config(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)).save_pretrained(root / "t5")
    tf.LlamaForCausalLM(tf.LlamaConfig(**TINY_LLAMA)).save_pretrained(root / "truncated")
    weights = root / "truncated" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # an interrupted copy
    (root / "unparsable").mkdir()
    (root / "unparsable" / "config.json").write_text('{"model_type": "llama",')
    for name in ("truncated", "unparsable"):
        _with_tokenizer(root / name)
    return {name: str(root / name) for name in ("mamba", "t5", "truncated", "unparsable")}


def _run(source: str, log: Path) -> Exit:
    started = time.monotonic()
    with log.with_suffix(".out").open("w") as out, log.open("w") as err:
        process = subprocess.Popen([sys.executable, "-m", "specdec.cli", "serve", "verifier", "--port", "0", "--model", source], stdout=out, stderr=err)
        code: int | None = None
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                code = process.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() - started > STAY_UP_SECONDS:
                process.kill()
                _, _, usage = os.wait4(process.pid, 0)
                process.returncode = -9
                break
            time.sleep(0.1)
    return Exit(code, time.monotonic() - started, usage.ru_utime + usage.ru_stime, log.with_suffix(".out").read_text(), log.read_text())


@pytest.fixture(scope="module")
def exits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Exit]:
    """Each source's verifier and how it ended."""
    root = tmp_path_factory.mktemp("refused")
    sources = _build_sources(root)
    with ThreadPoolExecutor(SIDE_BY_SIDE) as pool:
        ended = {name: pool.submit(_run, source, root / f"{name}.log") for name, source in sources.items()}
        return {name: future.result() for name, future in ended.items()}


# (case, what the last line says)
CASES = {
    "mamba": "verifier: cannot serve MambaForCausalLM (model_type 'mamba'): MambaForCausalLM keeps a recurrent state that cannot be rolled back",
    "t5": "verifier: cannot serve T5ForConditionalGeneration (model_type 't5'): an encoder-decoder model",
    "truncated": "/truncated': SafetensorError: ",
    "unparsable": "/unparsable': OSError: It looks like the config file at",
}


@pytest.mark.parametrize("case", CASES)
def test_a_verifier_that_cannot_serve_exits_with_one_line(exits: dict[str, Exit], case: str) -> None:
    ended = exits[case]
    assert ended.code is not None, f"{case}: still running after {STAY_UP_SECONDS} s:\n{ended.stderr[-2000:]}"
    assert ended.code == 1, ended.stderr[-2000:]
    assert ended.cpu_seconds < EXIT_SECONDS
    last = ended.stderr.strip().splitlines()[-1]
    assert last.startswith("verifier: "), ended.stderr[-2000:]
    assert CASES[case] in last, last
    assert "Traceback" not in ended.stderr
    print(f"\n{case}: exit {ended.code} after {ended.cpu_seconds:.1f} CPU s ({ended.seconds:.1f} s): {last}")




def test_the_model_is_checked_once_the_server_listens(exits: dict[str, Exit]) -> None:
    """On the warm-up thread, so that probes are answered (NOT_SERVING) while a large model loads."""
    assert exits["mamba"].stdout.startswith("SPECDEC_LISTENING ")


def test_bad_options_end_the_verifier_before_it_listens(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--port", "0", "--dtype", "float64"])
    assert exit_.value.code == "verifier: --dtype: 'float64' is not one of auto, float32, bfloat16, float16"
    assert capsys.readouterr().out == ""


def test_a_checkpoint_without_the_lm_head_is_refused_after_loading(tmp_path: Path) -> None:
    """The config passes (Llama), but the checkpoint is the bare decoder: its LM head would be random."""
    tf.LlamaModel(tf.LlamaConfig(**TINY_LLAMA)).save_pretrained(tmp_path)
    with pytest.raises(ModelNotServable, match=r"^cannot serve LlamaForCausalLM from .* \(a LlamaModel checkpoint\): weights missing lm_head.weight$"):
        open_model(str(tmp_path), "cpu", torch.float32)
