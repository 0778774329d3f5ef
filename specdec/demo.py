"""`specdec demo`: both services as separate processes on loopback with the default model;
a few built-in prompts with the drafter service's default speculation and without any; a table
of speeds and acceptance. The default drafter is the int8 copy of the target (onnx-quantized),
built once (about 30 s) on the first demo; with --no-build the copy drafter stands in."""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from specdec.client import Client, GenerationResult
from specdec.launcher import LocalCluster
from specdec.progress import StepFailed, quiet_step

PROMPTS: dict[str, str] = {
    "code edit": (
        "Rename the function `area` to `rectangle_area` in this code and return the whole file:\n\n"
        "```python\ndef area(width, height):\n    \"\"\"Return the area of a rectangle.\"\"\"\n    return width * height\n\n\n"
        "def total_area(shapes):\n    total = 0\n    for width, height in shapes:\n        total += area(width, height)\n    return total\n```"
    ),
    "summarize": (
        "Summarize this passage in two sentences.\n\nThe city council met on Tuesday to discuss the new library. "
        "The new library will have three floors, a reading garden and a children's room. The council said the "
        "new library will open in the spring, and that the old library will become a community center. "
        "Residents asked whether the new library will have longer opening hours, and the council said the new "
        "library will be open every day of the week."
    ),
    "rag": (
        "Answer using only the passage.\n\nPassage: The Eiffel Tower is a wrought-iron lattice tower on the Champ "
        "de Mars in Paris, France. It is named after the engineer Gustave Eiffel, whose company designed and built "
        "the tower from 1887 to 1889.\n\nQuestion: Who is the Eiffel Tower named after, and when was it built?"
    ),
    "chat": "Write a short poem about the sea.",
}


def _run(client: Client, prompt: str, max_new_tokens: int, k: int | None) -> GenerationResult:
    """k None: the server's default speculation; 0: none."""
    return client.generate(
        messages=[{"role": "user", "content": prompt}], max_new_tokens=max_new_tokens, temperature=0.0, num_draft_tokens=k,
    )


def _build_default_drafter(log_dir: Path, verbose: bool) -> None:
    """Build the onnx-quantized drafter unless a build that passed its export check is there (the
    drafter service's default then; it refuses any other)."""
    from drafter_svc.drafter_manifest import Manifest
    from specdec.model_files import drafter_dir

    try:
        if Manifest.read(drafter_dir("default", "quantized")).check_passed:
            return
    except ValueError:  # not built, or not readable: build it
        pass
    with quiet_step("building the default drafter, an int8 ONNX copy of the target (once)", log_dir / "build.log", verbose):
        from drafter_build.build import build  # torch + transformers: only here

        build("quantized")


def _compare(client: Client, max_new_tokens: int, num_draft_tokens: int | None) -> tuple[list[tuple], list[float], str]:
    """Each prompt without speculation and with the default: table rows, speedups, the drafter."""
    _run(client, "Hi", 4, num_draft_tokens)  # warm both paths
    rows, speedups, drafter = [], [], ""
    for name, prompt in PROMPTS.items():
        base = _run(client, prompt, max_new_tokens, 0)
        spec = _run(client, prompt, max_new_tokens, num_draft_tokens)
        drafter = f"{spec.stats.drafter} drafter, {spec.stats.draft_policy} draft length up to {spec.stats.num_draft_tokens}"
        drafter += ", overlapped drafting" if spec.stats.overlap else ""
        same = "yes" if base.token_ids == spec.token_ids else "NO"
        speedup = spec.stats.tokens_per_second / base.stats.tokens_per_second
        speedups.append(speedup)
        rows.append((name, base.stats.tokens_per_second, spec.stats.tokens_per_second, speedup,
                     spec.stats.acceptance_rate, spec.stats.mean_acceptance_length, same))
    return rows, speedups, drafter


def main(max_new_tokens: int = 96, num_draft_tokens: int | None = None, build: bool = True, verbose: bool = False) -> int:
    """Run the demo; 0 when every speculative output equals the plain greedy one, 1 otherwise or
    when a step fails (its log's tail is printed)."""
    log_dir = Path(tempfile.mkdtemp(prefix="specdec-demo-"))
    print(f"specdec demo: the target model SmolLM2-135M-Instruct, with and without speculation (logs in {log_dir})",
          flush=True)
    try:
        if build:
            _build_default_drafter(log_dir, verbose)
        with quiet_step("starting the verifier (loading the target model) and the drafter", log_dir / "start.log", verbose):
            cluster = LocalCluster(log_dir)
        with cluster, Client(cluster.address) as client:
            print("\nstreamed with the default speculation:\n")
            for chunk in client.stream(
                messages=[{"role": "user", "content": PROMPTS["code edit"]}], max_new_tokens=max_new_tokens,
                temperature=0.0, num_draft_tokens=num_draft_tokens,
            ):
                sys.stdout.write(chunk.text)
                sys.stdout.flush()
            print("\n")
            with quiet_step(f"timing {len(PROMPTS)} prompts with and without speculation"):
                rows, speedups, drafter = _compare(client, max_new_tokens, num_draft_tokens)
    except StepFailed as failed:
        return failed.code
    print(f"\ntemperature 0, {max_new_tokens} new tokens, {drafter} vs. no speculation")
    print(f"{'prompt':<10} {'base tok/s':>10} {'spec tok/s':>10} {'speedup':>8} {'accept':>7} {'mean len':>9} {'same output':>12}")
    for name, b, s, up, acc, mal, same in rows:
        print(f"{name:<10} {b:>10.1f} {s:>10.1f} {up:>7.2f}x {acc:>7.2f} {mal:>9.2f} {same:>12}")
    print(f"\ngeometric-mean speedup: {statistics.geometric_mean(speedups):.2f}x")
    return 0 if all(row[-1] == "yes" for row in rows) else 1
