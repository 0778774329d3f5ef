"""What the drafter service reads of a built drafter's manifest.json (drafter_build/build.py
writes it): the cache shape the ONNX model needs and its cache contract (draft_cache.py), the
target it was built for (source and tokenizer fingerprint) and its export check against torch
(drafter_build/export_check.py). Torch-free."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from drafter_svc.draft_cache import CONCATENATED, IN_PLACE


@dataclass(frozen=True)
class Manifest:
    """What the drafter reads of a build's manifest.json (drafter_build/build.py writes it)."""

    kind: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tokenizer_fingerprint: str
    target_source: str = ""
    check_passed: bool | None = None  # None: built before builds were checked
    check_summary: str = ""
    cache: str = CONCATENATED  # the graph's cache contract (built before graph version 3: concatenated)
    max_positions: int = 0  # positions the graph takes (its rotary tables' length); 0: any

    @property
    def is_target_copy(self) -> bool:
        """The model is the target itself in int8 (`specdec draft build quantized`): its keys and
        values are the target's, approximately, so it may start from the target's own."""
        return self.kind == "quantized"

    @staticmethod
    def read(folder: Path) -> Manifest:
        """ValueError where manifest.json is not a build's manifest."""
        try:
            data = json.loads((folder / "manifest.json").read_text())
            model, target, check = data["model"], data["target"], data.get("check") or {}
            return Manifest(
                data["kind"], int(model["num_layers"]), int(model["num_kv_heads"]), int(model["head_dim"]),
                int(model["vocab_size"]), str(target["tokenizer_fingerprint"]), str(target.get("source", "")),
                bool(check["passed"]) if "passed" in check else None, check_summary(check), _contract(model.get("cache", CONCATENATED)),
                int(model.get("max_positions", 0)),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{folder / 'manifest.json'} is not a drafter build's manifest ({type(error).__name__}: {error})") from None


def _contract(name: object) -> str:
    if name not in (CONCATENATED, IN_PLACE):
        raise ValueError(f"unknown cache contract {name!r}")
    return str(name)


def check_summary(check: dict) -> str:
    """The export check's measurements in a few words: each precision's measure, its bound and the verdict."""
    parts = []
    for precision, measure, bound in (("float32", "max_abs_logit_diff", "tolerance"), ("int8", "argmax_agreement", "floor")):
        entry = check.get(precision)
        if isinstance(entry, dict):
            verdict = "passed" if entry.get("passed") else "FAILED"
            parts.append(f"{precision} {measure} {_number(entry.get(measure))}, {bound} {_number(entry.get('tolerance'))}: {verdict}")
    return "; ".join(parts)


def _number(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)
