"""Probe (2026-12-02): would the int8 drafter make fewer calls if the copy drafter (prompt
lookup) guessed its next tokens, checked in the same call? A call reading the last token and m
guesses gives the logits after each; at temperature 0 every guess the model's own choice
confirms is drafted from that one call, so the chain is the same and only calls are saved.
Simulated on the target's greedy answers of a `specdec bench` run (its baseline rows, 64 tokens,
re-tokenized; the drafter agrees with them 0.966 of the time: int8_sibling_probe-20261202.txt):
walking each answer, a call at position t drafts 1 + the number of leading guesses equal to the
answer's next tokens (the copy drafter's chain of up to m tokens after the longest suffix match
of 2-8 tokens in prompt + answer so far).

    PYTHONPATH=. SPECDEC_BENCH_DIR=../shared/bench python bench/results/copy_guided_drafter_probe.py bench/results/spec_bench-20261202-010842.json
Output: bench/results/copy_guided_drafter_probe-20261202.txt (docs/design/int8-drafter.md)."""
import json
import sys
from collections import defaultdict

from bench.prompts import Prompt, load_bench_questions
from drafter_svc.copy_drafter import CopyDrafter
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer


def main() -> None:
    tokenizer = Tokenizer(tokenizer_dir("default"))
    questions = {q["question_id"]: q for q in load_bench_questions()}
    records = [r for r in json.load(open(sys.argv[1]))["records"] if r["system"] == "baseline"]
    print("| guesses m | task | tokens | calls | calls per token | calls with guesses | guessed tokens |")
    print("|---|---|---|---|---|---|---|")
    for m in (2, 4, 8):
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for record in records:
            question = questions[record["question_id"]]
            prompt = tokenizer.encode_chat(Prompt(question["question_id"], question["category"], record["row"], question["turns"][0]).messages)
            answer = tokenizer.encode(record["text"], add_special_tokens=False)
            copy, t, row = CopyDrafter(), 0, totals[record["row"]]
            while t < len(answer):
                guesses = copy.propose(prompt + answer[:t], m).token_ids
                matched = 0
                while matched < len(guesses) and t + matched < len(answer) and guesses[matched] == answer[t + matched]:
                    matched += 1
                row[1] += 1
                row[2] += bool(guesses)
                row[3] += len(guesses)
                t += 1 + matched
            row[0] += len(answer)
        for task, (tokens, calls, guessed_calls, guessed) in totals.items():
            print(f"| {m} | {task} | {tokens} | {calls} | {calls / tokens:.2f} | {guessed_calls} | {guessed} |")


if __name__ == "__main__":
    main()
