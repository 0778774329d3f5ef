"""Per-prompt records, their summary per row and system, and the Markdown table.

Speedup is the median over prompts of tokens/s(system) / tokens/s(baseline) on the same prompt,
so it pairs each measurement with the baseline's on the same input. Acceptance is pooled over a
row's prompts, with vLLM's definitions: acceptance rate = accepted / drafted tokens, mean
acceptance length = 1 + accepted tokens / target passes. SpecDec++'s hardware-independent rates
are pooled too: verification rate = target passes / generated tokens, discard rate = discarded
drafted tokens / generated tokens.

A policy is compared with the best fixed length of its row by the median over prompts of their
tokens/s ratio on the same prompt, with a bootstrap 90% interval of that median (`paired_ratio`):
"matches" means the interval reaches 1. The best fixed length being the best of several after the
fact, the comparison leans against the policy; beside it, the same ratio against a fixed length
chosen on the other half of the row's prompts (`held_out_ratio`), which does not. A third
comparison, `decode_ratio`, leaves the prefill out (tokens and seconds after the first token,
summed over the row): a 3-token answer's tokens/s is mostly the prompt's prefill, which no draft
policy changes. (At T > 0 the seeded systems under the exact rule sample the same text, by the
exponential race: docs/concepts/exactness.md; a lossy rule, or `@lenient:1`, samples its own.)
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from bench.prompts import Prompt
from bench.systems import BASELINE, Output

OVERALL = "overall"
T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    """One system on one prompt; error is set (and the measurements empty) if the call failed."""

    question_id: int
    category: str
    row: str
    system: str
    position: int  # order within this prompt's systems (0 = first); alternates between prompts
    prompt_tokens: int | None = None
    new_tokens: int | None = None
    wall_seconds: float | None = None
    tokens_per_second: float | None = None
    speedup: float | None = None  # tokens_per_second / the baseline's on this prompt
    finish_reason: str | None = None
    rounds: int | None = None
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    server_seconds: float | None = None
    time_to_first_token_seconds: float | None = None
    discarded_tokens: int | None = None
    overlap_hits: int | None = None
    overlap_misses: int | None = None
    hidden_draft_seconds: float | None = None
    draft_seconds: float | None = None
    copied_rounds: int | None = None
    differs_from_baseline: bool | None = None  # greedy runs only
    first_difference: int | None = None  # index of the first token that differs
    differs_from_transformers: bool | None = None  # greedy runs with the hf-generate peer only
    drafted_by_position: tuple[int, ...] = ()
    accepted_by_position: tuple[int, ...] = ()
    text: str | None = None
    error: str | None = None


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _tokens_per_second(out: Output) -> float:
    return len(out.token_ids) / out.wall_seconds if out.wall_seconds > 0 else 0.0


def make_record(
    prompt: Prompt, system: str, position: int, out: Output | str, baseline: Output | str | None, greedy: bool,
    transformers: Output | str | None = None,
) -> Record:
    """A record of `out`, or of a failure when `out` is the error message. Greedy outputs are
    compared with the baseline's and, when given, with transformers' own greedy output."""
    base = dict(question_id=prompt.question_id, category=prompt.category, row=prompt.row, system=system, position=position)
    if isinstance(out, str):
        return Record(**base, error=out)
    tps = _tokens_per_second(out)
    speedup = differs = first = None
    if isinstance(baseline, Output):
        base_tps = _tokens_per_second(baseline)
        speedup = tps / base_tps if base_tps > 0 else None
        if greedy:
            first = _first_difference(out.token_ids, baseline.token_ids)
            differs = first is not None
    differs_hf = None
    if greedy and isinstance(transformers, Output):
        differs_hf = _first_difference(out.token_ids, transformers.token_ids) is not None
    return Record(
        **base, prompt_tokens=out.prompt_tokens, new_tokens=len(out.token_ids), wall_seconds=out.wall_seconds,
        tokens_per_second=tps, speedup=speedup, finish_reason=out.finish_reason, rounds=out.rounds,
        drafted_tokens=out.drafted_tokens, accepted_tokens=out.accepted_tokens, server_seconds=out.server_seconds,
        time_to_first_token_seconds=out.time_to_first_token_seconds, discarded_tokens=out.discarded_tokens,
        overlap_hits=out.overlap_hits, overlap_misses=out.overlap_misses,
        hidden_draft_seconds=out.hidden_draft_seconds, draft_seconds=out.draft_seconds,
        copied_rounds=out.copied_rounds, differs_from_baseline=differs,
        first_difference=first, differs_from_transformers=differs_hf, drafted_by_position=out.drafted_by_position,
        accepted_by_position=out.accepted_by_position, text=out.text,
    )


@dataclass(frozen=True)
class Summary:
    row: str
    system: str
    prompts: int  # successful generations
    failures: int
    tokens_per_second: float | None  # median over prompts
    speedup: float | None  # median of per-prompt ratios to the baseline
    acceptance_rate: float | None  # pooled; None when nothing was drafted
    mean_acceptance_length: float | None  # pooled; None when nothing was drafted
    differs_from_baseline: int | None  # prompts whose tokens differ; None unless greedy
    verification_rate: float | None = None  # target passes / generated tokens, pooled
    discard_rate: float | None = None  # discarded drafted tokens / generated tokens, pooled
    overlap_hit_rate: float | None = None  # hits / (hits + misses); None without overlap
    hidden_draft_ms_per_token: float | None = None  # drafting ms that overlapped verification, per token
    draft_ms_per_token: float | None = None  # drafting ms on the critical path, per token
    time_to_first_token_ms: float | None = None  # median over prompts
    differs_from_transformers: int | None = None  # prompts whose tokens differ from hf-generate's
    acceptance_by_position: tuple[float, ...] = ()  # pooled, per draft depth


def _by_position(records: Sequence[Record]) -> tuple[float, ...]:
    """Per draft depth: rounds whose accepted path reached it / rounds whose draft reached it."""
    depth = max((len(r.drafted_by_position) for r in records), default=0)
    drafted = [sum(r.drafted_by_position[i] for r in records if i < len(r.drafted_by_position)) for i in range(depth)]
    accepted = [sum(r.accepted_by_position[i] for r in records if i < len(r.accepted_by_position)) for i in range(depth)]
    return tuple(a / d for a, d in zip(accepted, drafted) if d)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _summarize(row: str, system: str, records: Sequence[Record], greedy: bool) -> Summary:
    ok = [r for r in records if r.error is None]
    drafted = sum(r.drafted_tokens or 0 for r in ok)
    accepted = sum(r.accepted_tokens or 0 for r in ok)
    rounds = sum(r.rounds or 0 for r in ok)
    tokens = sum(r.new_tokens or 0 for r in ok)
    hits = sum(r.overlap_hits or 0 for r in ok)
    tries = hits + sum(r.overlap_misses or 0 for r in ok)
    counted = tokens and any(r.rounds is not None for r in ok)
    return Summary(
        row=row, system=system, prompts=len(ok), failures=len(records) - len(ok),
        tokens_per_second=_median([r.tokens_per_second for r in ok]),
        speedup=_median([r.speedup for r in ok]),
        acceptance_rate=accepted / drafted if drafted else None,
        mean_acceptance_length=1 + accepted / rounds if drafted and rounds else None,
        differs_from_baseline=sum(bool(r.differs_from_baseline) for r in ok) if greedy else None,
        verification_rate=rounds / tokens if counted else None,
        discard_rate=sum(r.discarded_tokens or 0 for r in ok) / tokens if counted else None,
        overlap_hit_rate=hits / tries if tries else None,
        hidden_draft_ms_per_token=1000 * sum(r.hidden_draft_seconds or 0 for r in ok) / tokens if tries else None,
        draft_ms_per_token=1000 * sum(r.draft_seconds or 0 for r in ok) / tokens if counted else None,
        time_to_first_token_ms=_median([1000 * r.time_to_first_token_seconds for r in ok if r.time_to_first_token_seconds]),
        differs_from_transformers=(
            sum(bool(r.differs_from_transformers) for r in ok)
            if greedy and any(r.differs_from_transformers is not None for r in ok) else None
        ),
        acceptance_by_position=_by_position(ok),
    )


def summarize(records: Sequence[Record], rows: Sequence[str], systems: Sequence[str], greedy: bool) -> list[Summary]:
    """One summary per (row, system), rows in the given order, then the overall ones."""
    out = []
    for row in [*rows, OVERALL]:
        for system in systems:
            chosen = [r for r in records if r.system == system and (row == OVERALL or r.row == row)]
            if chosen:
                out.append(_summarize(row, system, chosen, greedy))
    return out


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown_table(summaries: Sequence[Summary]) -> str:
    header = (
        "| task | system | prompts | tok/s (median) | speedup vs baseline | acceptance rate "
        "| mean acceptance length | verification rate | discard rate | time to first token (ms, median) "
        "| outputs differing from baseline | from transformers |"
    )
    lines = [header, "|" + "---|" * 12]
    for s in summaries:
        failed = f" ({s.failures} failed)" if s.failures else ""
        speedup = "1.00x" if s.system == BASELINE else _fmt(s.speedup, ".2f") + ("x" if s.speedup is not None else "")
        task = _task(s.row)
        lines.append(
            f"| {task} | {s.system} | {s.prompts}{failed} | {_fmt(s.tokens_per_second, '.1f')} | {speedup} "
            f"| {_fmt(s.acceptance_rate, '.2f')} | {_fmt(s.mean_acceptance_length, '.2f')} "
            f"| {_fmt(s.verification_rate, '.3f')} | {_fmt(s.discard_rate, '.3f')} | {_fmt(s.time_to_first_token_ms, '.0f')} "
            f"| {_fmt(s.differs_from_baseline, 'd')} | {_fmt(s.differs_from_transformers, 'd')} |"
        )
    return "\n".join(lines)


def paired_ratio(
    records: Sequence[Record], row: str, system: str, reference: str, resamples: int = 2000, seed: int = 0,
) -> tuple[float, float, float] | None:
    """Median over the row's prompts of tokens/s(system) / tokens/s(reference) on the same prompt,
    with the 5th and 95th percentiles of that median over `resamples` bootstrap resamples of the
    prompts (seeded); None without a prompt both ran."""
    ours, theirs = _speeds(records, row, system), _speeds(records, row, reference)
    return _median_with_interval([ours[q] / theirs[q] for q in ours if q in theirs], resamples, seed)


def held_out_ratio(
    records: Sequence[Record], row: str, system: str, fixed: Sequence[str], resamples: int = 2000, seed: int = 0,
) -> tuple[float, float, float] | None:
    """paired_ratio against a fixed length chosen without the prompts it is compared on
    (two-fold cross-fitting): the row's prompts are split in two, alternately in question order
    within each task; on each half `system` is compared with the fixed system of the highest
    median speedup on the other half. Choosing the best of several after the fact favours the
    fixed length by its luck on the very prompts compared (the winner's curse); this does not.
    The interval resamples the pooled ratios (the choices held fixed)."""
    by_task: dict[str, set[int]] = {}
    for r in records:
        if row == OVERALL or r.row == row:
            by_task.setdefault(r.row, set()).add(r.question_id)
    halves = [{q for ids in by_task.values() for q in sorted(ids)[i::2]} for i in (0, 1)]
    ours = _speeds(records, row, system)
    ratios: list[float] = []
    for this, other in (halves, halves[::-1]):
        speedups: dict[str, float] = {}
        for f in fixed:
            chosen_on = [r.speedup for r in records if r.system == f and r.question_id in other and r.speedup]
            if chosen_on:
                speedups[f] = statistics.median(chosen_on)
        if not speedups:
            continue
        theirs = _speeds(records, row, max(speedups, key=lambda f: speedups[f]))
        ratios += [ours[q] / theirs[q] for q in this if q in ours and q in theirs]
    return _median_with_interval(ratios, resamples, seed)


def _speeds(records: Sequence[Record], row: str, system: str) -> dict[int, float]:
    """tokens/s of `system` per question of the row (every row's for OVERALL)."""
    return {
        r.question_id: r.tokens_per_second for r in records
        if r.system == system and r.error is None and r.tokens_per_second and (row == OVERALL or r.row == row)
    }


def _median_with_interval(ratios: Sequence[float], resamples: int, seed: int) -> tuple[float, float, float] | None:
    """The median, and the 5th and 95th percentiles of the medians of seeded bootstrap resamples."""
    return _with_interval(ratios, statistics.median, resamples, seed)


def _with_interval(
    items: Sequence[T], statistic: Callable[[Sequence[T]], float], resamples: int, seed: int,
) -> tuple[float, float, float] | None:
    """statistic(items), and its 5th and 95th percentiles over seeded bootstrap resamples of the
    items; None without items."""
    if not items:
        return None
    rng = random.Random(seed)
    values = sorted(statistic(rng.choices(items, k=len(items))) for _ in range(resamples))
    return statistic(items), values[int(0.05 * resamples)], values[int(0.95 * resamples) - 1]


def decode_ratio(
    records: Sequence[Record], row: str, system: str, reference: str, resamples: int = 2000, seed: int = 0,
) -> tuple[float, float, float] | None:
    """The decode rate of `system` over `reference`'s on the prompts both ran: tokens after the first
    over seconds after the first, each summed over the row's prompts, with the 5th and 95th
    percentiles of that ratio over seeded bootstrap resamples of the prompts. The phase a draft
    policy controls: the prefill is the same work for every system, and a short answer's tokens/s
    (paired_ratio) is mostly its prefill."""
    ours, theirs = _decode_phases(records, row, system), _decode_phases(records, row, reference)

    def ratio(questions: Sequence[int]) -> float:
        def rate(phases: dict[int, tuple[int, float]]) -> float:
            return sum(phases[q][0] for q in questions) / max(sum(phases[q][1] for q in questions), 1e-9)

        return rate(ours) / max(rate(theirs), 1e-9)

    return _with_interval([q for q in ours if q in theirs], ratio, resamples, seed)


def _decode_phases(records: Sequence[Record], row: str, system: str) -> dict[int, tuple[int, float]]:
    """(tokens after the first, seconds after the first) of `system` per question of the row."""
    return {
        r.question_id: (r.new_tokens - 1, r.wall_seconds - r.time_to_first_token_seconds) for r in records
        if r.system == system and r.error is None and (row == OVERALL or r.row == row) and r.new_tokens
        and r.wall_seconds and r.time_to_first_token_seconds is not None
    }


def decode_table(summaries: Sequence[Summary], fixed: Sequence[str], others: Sequence[str], records: Sequence[Record]) -> str:
    """Per row: each of `others` against the best fixed length after the fact (policy_table's),
    by decode_ratio."""
    by = {(s.row, s.system): s for s in summaries}
    rows = list(dict.fromkeys(s.row for s in summaries))
    lines = ["| task | " + " | ".join(others) + " |", "|" + "---|" * (1 + len(others))]
    for row in rows:
        best = _best_fixed(by, row, fixed)
        cells = []
        for o in others:
            ratio = decode_ratio(records, row, o, best.system) if best is not None else None
            cells.append(f"{ratio[0]:.2f} ({ratio[1]:.2f}-{ratio[2]:.2f})" if ratio else "-")
        lines.append(f"| {_task(row)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def policy_table(summaries: Sequence[Summary], fixed: Sequence[str], others: Sequence[str], records: Sequence[Record] = ()) -> str:
    """Per row: the best of the `fixed` systems by speedup, chosen after the fact (the strongest
    fixed-length baseline), next to each of `others` (policies, overlap), as speedup and
    verification / discard rate; with overlap, its hit rate and the drafting it hid; given the
    records, each of `others` against that best fixed length (paired_ratio)."""
    by = {(s.row, s.system): s for s in summaries}
    rows = list(dict.fromkeys(s.row for s in summaries))
    header = "| task | best fixed K (after the fact) | " + " | ".join(others) + " |"
    lines = [header, "|" + "---|" * (2 + len(others))]

    def cell(s: Summary | None, best: Summary | None = None) -> str:
        if s is None or s.speedup is None:
            return "-"
        text = f"{s.speedup:.2f}x ({_fmt(s.verification_rate, '.2f')} / {_fmt(s.discard_rate, '.2f')})"
        if s.overlap_hit_rate is not None:
            text += f", hits {s.overlap_hit_rate:.0%}, hid {_fmt(s.hidden_draft_ms_per_token, '.3f')} ms/token"
        paired = paired_ratio(records, s.row, s.system, best.system) if best is not None and records else None
        if paired is not None:
            text += f"; {paired[0]:.2f} of the best fixed ({paired[1]:.2f}-{paired[2]:.2f})"
        held_out = held_out_ratio(records, s.row, s.system, fixed) if best is not None and records else None
        if held_out is not None:
            text += f", {held_out[0]:.2f} of the held-out best ({held_out[1]:.2f}-{held_out[2]:.2f})"
        return text

    for row in rows:
        best = _best_fixed(by, row, fixed)
        task = _task(row)
        best_cell = f"{best.system}: {cell(best)}" if best else "-"
        lines.append(f"| {task} | {best_cell} | " + " | ".join(cell(by.get((row, o)), best) for o in others) + " |")
    return "\n".join(lines)


def _best_fixed(by: dict[tuple[str, str], Summary], row: str, fixed: Sequence[str]) -> Summary | None:
    """The row's fixed-length system of the highest speedup (chosen after the fact)."""
    candidates = [by[(row, f)] for f in fixed if (row, f) in by and by[(row, f)].speedup is not None]
    return max(candidates, key=lambda s: s.speedup or 0.0, default=None)


def _task(row: str) -> str:
    """A row's label in a table: the overall row in bold."""
    return f"**{row}**" if row == OVERALL else row

