"""A generation's statistics, tallied round by round and sent with its last response."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from drafter_svc.draft import Draft
from specdec.v1 import drafter_pb2


@dataclass
class Stats:
    prompt_tokens: int
    drafter: str
    num_draft_tokens: int
    max_tree_nodes: int
    acceptance_rule: str = "exact"
    draft_policy: str = ""
    overlap: bool = False
    generated_tokens: int = 0
    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    round_trip_seconds: float = 0.0
    time_to_first_token_seconds: float = 0.0
    copied_rounds: int = 0
    overlap_hits: int = 0
    overlap_misses: int = 0
    hidden_draft_seconds: float = 0.0
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    q_bytes: int = 0
    forced_tokens: int = 0
    prompt_tokens_from_verifier: int = 0
    started: float = field(default_factory=time.perf_counter)

    def count_round(self, draft: Draft, accepted: int) -> None:
        """Tally one verified round: its draft and the length of its accepted path."""
        self.rounds += 1
        self.drafted_tokens += len(draft)
        self.accepted_tokens += accepted
        depth = draft.depth()
        grow = depth - len(self.drafted_by_position)
        self.drafted_by_position += [0] * grow
        self.accepted_by_position += [0] * grow
        for position in range(depth):
            self.drafted_by_position[position] += 1
            self.accepted_by_position[position] += position < accepted

    def to_proto(self) -> drafter_pb2.GenerationStats:
        return drafter_pb2.GenerationStats(
            prompt_tokens=self.prompt_tokens,
            generated_tokens=self.generated_tokens,
            rounds=self.rounds,
            drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens,
            acceptance_rate=self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0,
            mean_acceptance_length=1.0 + self.accepted_tokens / self.rounds if self.rounds else 0.0,
            draft_seconds=self.draft_seconds,
            verify_seconds=self.verify_seconds,
            network_seconds=max(0.0, self.round_trip_seconds - self.verify_seconds),
            total_seconds=time.perf_counter() - self.started,
            time_to_first_token_seconds=self.time_to_first_token_seconds,
            drafter=self.drafter,
            num_draft_tokens=self.num_draft_tokens,
            max_tree_nodes=self.max_tree_nodes,
            acceptance_rule=self.acceptance_rule,
            draft_policy=self.draft_policy,
            overlap=self.overlap,
            discarded_tokens=self.drafted_tokens - self.accepted_tokens,
            copied_rounds=self.copied_rounds,
            overlap_hits=self.overlap_hits,
            overlap_misses=self.overlap_misses,
            hidden_draft_seconds=self.hidden_draft_seconds,
            drafted_by_position=self.drafted_by_position,
            accepted_by_position=self.accepted_by_position,
            q_bytes=self.q_bytes,
            forced_tokens=self.forced_tokens,
            prompt_tokens_from_verifier=self.prompt_tokens_from_verifier,
        )
