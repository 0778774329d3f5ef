"""The price of a drafted node in a batched pass, from the verifier's description of the pass.

Under load a pass is compute-bound and padded to its longest round, so one more drafted node in
our round adds a row to every round of the next pass, about S of them (S = max(B, open
sessions)): S m seconds, where the measured pass yields B plain tokens in t_plain = t - m (rows -
B) seconds. In units of a plain round's share t_plain / B a node costs c = S m B / t_plain, with
no fixed overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

from drafter_svc.pass_cost import RelativeCost


@dataclass(frozen=True)
class LoadPrice:
    """The pass that scored a session's last round, as its verdict described it."""

    rounds: int  # B; 0: the verifier did not say
    seconds: float  # t
    rows: int  # B x T, padded
    row_seconds: float  # m, the verifier's marginal seconds of one more row
    open_sessions: int = 0  # sessions open on the verifier: the rounds the next pass may hold

    @property
    def batched(self) -> bool:
        return max(self.rounds, self.open_sessions) >= 2 and self.seconds > 0 and self.rounds > 0

    def plain_share(self) -> float:
        """t_plain / B: a plain round's share of the pass without its drafted rows, in seconds."""
        return max(self.seconds - self.row_seconds * max(0, self.rows - self.rounds), 1e-9) / self.rounds

    def node_cost(self) -> float:
        """c = S m / (t_plain / B): a drafted node pads every round of the next pass (S of them,
        S = max(B, open sessions)), in units of a plain round's share of the measured pass."""
        return max(self.rounds, self.open_sessions) * self.row_seconds / self.plain_share()

    def relative(self) -> RelativeCost:
        return RelativeCost(per_node=self.node_cost(), overhead=0.0)
