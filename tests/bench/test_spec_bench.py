"""`specdec bench` end to end on two prompts with tiny budgets: it runs on this checkout, with its
peers, and writes the table, the JSON and the plots (kept from rotting; no timing is checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import spec_bench
from bench.prompts import PromptsNotFound, load_bench_questions

FIXTURES = Path(__file__).resolve().parent / "fixtures"  # three Spec-Bench questions (README.md there)


@pytest.mark.slow
def test_quick_bench_writes_table_json_and_plots(tmp_path: Path) -> None:
    code = spec_bench.main([
        "--quick", "--per-category", "1", "--max-new-tokens", "6", "--categories", "qa,math_reasoning",
        "--configs", "baseline,copy-k4,ngram-k4-t8", "--out", str(tmp_path), "--prompts", str(FIXTURES),
        "--verifier-arg=--tune-pass-sizes=false",  # its seconds of start-up timing change nothing here
    ])
    assert code == 0
    (md,) = tmp_path.glob("spec_bench-*.md")
    (js,) = tmp_path.glob("spec_bench-*.json")
    payload = json.loads(js.read_text())
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == sorted(payload["run"]["plots"]) and any("speedup" in p for p in pngs)
    drafted = any(s["acceptance_by_position"] for s in payload["summary"] if s["row"] == "overall")
    assert any("acceptance" in p for p in pngs) == drafted
    systems = payload["run"]["systems"]
    assert systems[:3] == ["baseline", "copy-k4", "ngram-k4-t8"]
    assert {"hf-generate", "hf-prompt-lookup"} <= set(systems)
    records = payload["records"]
    assert len(records) == 2 * len(systems) and all(r["error"] is None for r in records)
    assert all(0 < r["new_tokens"] <= 6 for r in records)
    # Greedy: speculation is exact, and every system is compared with transformers' own output.
    speculative = [r for r in records if r["system"] in ("copy-k4", "ngram-k4-t8")]
    assert not any(r["differs_from_baseline"] for r in speculative)
    assert all(r["differs_from_transformers"] is not None for r in records)
    assert all(r["time_to_first_token_seconds"] for r in records)
    overall = {s["system"]: s for s in payload["summary"] if s["row"] == "overall"}
    assert overall["copy-k4"]["verification_rate"] <= 1.0
    text = md.read_text()
    assert "time to first token" in text and "hf-prompt-lookup" in text and all(p in text for p in pngs)
    # What ran the verifier's passes, as its ModelInfo said (the default model on this CPU: onnxruntime).
    assert f"\n\nverifier engine: {payload['machine']['verifier_engine']}\n" in text
    assert "lone passes of up to 512 tokens through onnxruntime" in payload["machine"]["verifier_engine"]


def test_prompts_come_from_the_flag_else_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECDEC_BENCH_DIR", str(FIXTURES))
    assert [q["category"] for q in load_bench_questions()] == ["writing", "qa", "math_reasoning"]
    assert load_bench_questions(FIXTURES) == load_bench_questions()
    with pytest.raises(PromptsNotFound) as missing:
        load_bench_questions(tmp_path)
    message = str(missing.value)
    assert "\n" not in message and str(tmp_path) in message and "--prompts" in message and "Spec-Bench" in message


def test_bench_without_its_prompts_exits_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specdec.cli import main

    assert main(["bench", "--quick", "--prompts", str(tmp_path)]) == 2
    assert main(["bench-lossy", "--prompts", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert not out and len(lines) == 2 and all("spec_bench.jsonl" in line for line in lines)
    assert lines[0].startswith("specdec bench: ") and lines[1].startswith("specdec bench-lossy: ")


def test_a_saved_runs_policy_table_is_computed_again_as_its_report_printed_it() -> None:
    """A committed run (T=0, eight prompts per task): each row comes out as its report printed it,
    with the comparison to the held-out best added."""
    saved = Path(spec_bench.__file__).parent / "results" / "spec_bench-20261124-003125"
    table = spec_bench.policy_section_of_saved_run(saved.with_suffix(".json")).splitlines()
    printed = [line for line in saved.with_suffix(".md").read_text(encoding="utf-8").splitlines() if "of the best fixed (" in line]
    assert len(printed) == 7  # six tasks and overall
    for old in printed:
        (new,) = [line for line in table if line.startswith(old.removesuffix(" |") + ", ")]
        assert " of the held-out best (" in new.removeprefix(old) and new.endswith(") |")


def test_bench_with_int8_weights_needs_bfloat16(capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before any service starts, in one line (the verifier serves int8 weights with bfloat16 rows)."""
    from specdec.cli import main

    assert main(["bench", "--quick", "--quantization", "int8"]) == 2
    out, err = capsys.readouterr()
    assert not out and err == "specdec bench: --quantization int8 needs --dtype bfloat16 (the verifier serves int8 weights with bfloat16 activations)\n"
