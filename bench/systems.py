"""The systems under test: specdec configurations, each a drafter, a draft length k, a tree size,
a draft-length policy and overlap on or off.

A configuration is named `baseline` (k = 0: no speculation, one target pass per token through
the same two services), `defaults` (a request that sets no speculation field: what the drafter
service does by default, docs/concepts/drafters.md), `DRAFTER-kN` for chains of N drafts, e.g. `copy-k8`, or `DRAFTER-kN-tM`
for token trees of depth N with M nodes, e.g. `copy-k4-t12`; these draft a fixed length. The
ONNX model drafters go by their names too: `onnx-quantized-k4`, `onnx-small-k4-t8`. A
policy suffix makes N the longest draft a policy may choose (`copy-k8-auto`, `copy-k8-leviathan`,
`copy-k8-specdec++`, `copy-k8-copy-confidence`, `copy-k8-fixed`), and `-overlap` turns on
overlapped drafting (`copy-k8-auto-overlap`). Any name may end in `@RULE` to ask for an
acceptance rule (docs/concepts/lossy-rules.md): `defaults@lenient:1` runs speculative sampling
where a seeded request under the exact rule would run the exponential race
(docs/concepts/exactness.md). Every system is timed the same way: wall-clock seconds of one generate call,
seen by the caller.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Protocol

from drafter_svc.policies.registry import POLICY_NAMES
from drafter_svc.drafter_names import DRAFTER_NAMES
from specdec.acceptance_params import parse as parse_acceptance
from specdec.client import Client

BASELINE = "baseline"
SERVER_DEFAULTS = "defaults"
TRANSFORMERS_REFERENCE = "hf-generate"  # transformers' plain generate(): greedy outputs are compared with it
DEFAULT_CONFIGS: tuple[str, ...] = (BASELINE, SERVER_DEFAULTS, "copy-k4", "copy-k8", "ngram-k4")
_CONFIG_NAME = re.compile(
    r"(?P<drafter>[a-z_]+(?:-[a-z_]+)*)-k(?P<k>\d+)(-t(?P<nodes>\d+))?"
    rf"(-(?P<policy>{'|'.join(re.escape(p) for p in POLICY_NAMES)}))?(?P<overlap>-overlap)?"
)


@dataclass(frozen=True)
class Decoding:
    """What every system is asked for on one prompt."""

    max_new_tokens: int
    temperature: float
    seed: int | None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Output:
    """One generation: the new tokens (no EOS), its wall time, and speculation counters if any."""

    token_ids: list[int]
    text: str
    finish_reason: str
    wall_seconds: float
    prompt_tokens: int
    rounds: int | None = None  # target passes
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    server_seconds: float | None = None  # the drafter service's own total_seconds
    time_to_first_token_seconds: float | None = None
    discarded_tokens: int | None = None  # drafted nodes not on an accepted path
    overlap_hits: int | None = None
    overlap_misses: int | None = None
    hidden_draft_seconds: float | None = None
    draft_seconds: float | None = None
    copied_rounds: int | None = None  # rounds of a hybrid session that sent its copy draft
    drafted_by_position: tuple[int, ...] = ()  # rounds whose draft reached each depth
    accepted_by_position: tuple[int, ...] = ()  # rounds whose accepted path reached it


class System(Protocol):
    name: str

    def generate(self, messages: list[dict[str, str]], decoding: Decoding) -> Output: ...


@dataclass(frozen=True)
class SpecdecConfig:
    name: str
    drafter: str  # "" lets the server pick; irrelevant when k = 0
    num_draft_tokens: int | None  # None: the server's default (and so for the fields below)
    max_tree_nodes: int | None  # = num_draft_tokens: a chain
    acceptance: str | None = None  # "exact", "lenient:L", "mentored:D"; None: the server's default (exact)
    draft_policy: str = "fixed"  # "": the server's default
    overlap: bool | None = False

    @property
    def speculates(self) -> bool:
        return self.num_draft_tokens is None or self.num_draft_tokens > 0

    def request_fields(self) -> dict:
        """The speculation fields of a generate call (specdec.client.build_request) for this configuration."""
        return {
            "drafter": self.drafter, "num_draft_tokens": self.num_draft_tokens, "max_tree_nodes": self.max_tree_nodes,
            "acceptance": self.acceptance, "draft_policy": self.draft_policy, "overlap": self.overlap,
        }


def parse_config(name: str) -> SpecdecConfig:
    """`baseline`, `defaults`, `DRAFTER-kN` (N >= 1) or `DRAFTER-kN-tM` (M > N), each optionally
    followed by `-POLICY` and `-overlap`, then by `@RULE`; ValueError otherwise. Without a
    policy: fixed."""
    system, at, rule = name.partition("@")
    if at:
        if not rule:
            raise ValueError(f"bad config {name!r}: no acceptance rule after '@'")
        parse_acceptance(rule)  # ValueError for a malformed rule
        return dataclasses.replace(parse_config(system), name=name, acceptance=rule)
    if name == BASELINE:
        return SpecdecConfig(BASELINE, "", 0, 0)
    if name == SERVER_DEFAULTS:
        return SpecdecConfig(SERVER_DEFAULTS, "", None, None, draft_policy="", overlap=None)
    match = _CONFIG_NAME.fullmatch(name)
    if not match or int(match["k"]) < 1 or (match["nodes"] and int(match["nodes"]) <= int(match["k"])):
        raise ValueError(
            f"bad config {name!r}: expected {BASELINE!r}, {SERVER_DEFAULTS!r}, DRAFTER-kN or DRAFTER-kN-tM (M > N), then optionally "
            f"-POLICY ({', '.join(POLICY_NAMES)}) and -overlap, e.g. copy-k8, copy-k4-t12, copy-k8-auto-overlap"
        )
    if match["drafter"] not in DRAFTER_NAMES:
        raise ValueError(f"bad config {name!r}: drafters are {', '.join(DRAFTER_NAMES)}")
    k = int(match["k"])
    return SpecdecConfig(
        name, match["drafter"], k, int(match["nodes"] or k), draft_policy=match["policy"] or "fixed", overlap=bool(match["overlap"])
    )


def parse_configs(names: str) -> list[SpecdecConfig]:
    """Comma-separated names; the baseline is always measured, and first, since speedups refer to it."""
    configs = [parse_config(n.strip()) for n in names.split(",") if n.strip()]
    others = [c for c in configs if c.name != BASELINE]
    if len({c.name for c in others}) != len(others):
        raise ValueError(f"duplicate configs in {names!r}")
    return [parse_config(BASELINE), *others]


class SpecdecSystem:
    """One configuration, through a running drafter service."""

    def __init__(self, client: Client, config: SpecdecConfig) -> None:
        self.name = config.name
        self._client = client
        self._config = config

    def generate(self, messages: list[dict[str, str]], decoding: Decoding) -> Output:
        started = time.perf_counter()
        result = self._client.generate(
            messages=messages,
            max_new_tokens=decoding.max_new_tokens,
            temperature=decoding.temperature,
            seed=decoding.seed,
            **self._config.request_fields(),
        )
        wall = time.perf_counter() - started
        s = result.stats
        return Output(
            token_ids=result.token_ids,
            text=result.text,
            finish_reason=result.finish_reason,
            wall_seconds=wall,
            prompt_tokens=s.prompt_tokens,
            rounds=s.rounds,
            drafted_tokens=s.drafted_tokens,
            accepted_tokens=s.accepted_tokens,
            server_seconds=s.total_seconds,
            time_to_first_token_seconds=s.time_to_first_token_seconds,
            discarded_tokens=s.discarded_tokens,
            overlap_hits=s.overlap_hits,
            overlap_misses=s.overlap_misses,
            hidden_draft_seconds=s.hidden_draft_seconds,
            draft_seconds=s.draft_seconds,
            copied_rounds=s.copied_rounds,
            drafted_by_position=tuple(s.drafted_by_position),
            accepted_by_position=tuple(s.accepted_by_position),
        )
