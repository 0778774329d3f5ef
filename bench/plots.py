"""PNG plots of a `specdec bench` run: speedup per task per system, acceptance by draft position.

matplotlib is a dev dependency; without it the functions draw nothing and return None.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.report import OVERALL, Summary
from bench.systems import BASELINE


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def speedup_plot(summaries: Sequence[Summary], title: str, path: Path) -> Path | None:
    """Grouped bars: for each task (and overall), each system's median speedup vs the baseline."""
    plt = _pyplot()
    systems = [s for s in dict.fromkeys(x.system for x in summaries) if s != BASELINE]
    rows = list(dict.fromkeys(x.row for x in summaries))
    if plt is None or not systems:
        return None
    by = {(s.row, s.system): s.speedup for s in summaries}
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(rows) * max(1, len(systems) // 3)), 4.5))
    for i, system in enumerate(systems):
        xs = [r + (i - (len(systems) - 1) / 2) * width for r in range(len(rows))]
        ax.bar(xs, [by.get((row, system)) or 0.0 for row in rows], width, label=system)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [f"{r}" if r != OVERALL else "OVERALL" for r in rows], rotation=20)
    ax.set_ylabel("speedup vs specdec baseline (median)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def acceptance_plot(summaries: Sequence[Summary], title: str, path: Path) -> Path | None:
    """Per speculative system (all prompts pooled): the share of rounds whose accepted path
    reaches each draft position, among rounds whose draft reached it."""
    plt = _pyplot()
    curves = [s for s in summaries if s.row == OVERALL and s.acceptance_by_position]
    if plt is None or not curves:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for s in curves:
        positions = range(1, len(s.acceptance_by_position) + 1)
        ax.plot(positions, s.acceptance_by_position, marker="o", label=s.system)
    ax.set_xlabel("draft position (depth in the tree)")
    ax.set_ylabel("acceptance rate at that position")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
