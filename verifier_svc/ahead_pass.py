"""Passes run ahead: a lone plain session's next one-token pass, run while its verdict travels
(the scheduler decides when: scheduler.py; the session keeps the logits: Session.run_ahead;
docs/design/ahead-passes.md)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from verifier_svc.round_pass import PassRecord, cached_entries
from verifier_svc.session import Session

log = logging.getLogger(__name__)


@dataclass
class AheadPasses:
    """Whether passes run ahead, and how many did (metrics): `run`, of which `used` were taken
    by an empty round (the others were dropped: the round drafted, or the session ended)."""

    enabled: bool = True
    run: int = 0
    used: int = 0

    def run_for(self, session: Session) -> PassRecord | None:
        """Run the session's next pass now if it may (Session.run_ahead); its record, or None.
        A pass that fails costs only the head start: it is logged and dropped with whatever it
        wrote, and the round will have its own pass."""
        started = time.perf_counter()
        try:
            if not session.run_ahead():
                return None
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("a pass run ahead failed")
            session.drop_ahead()
            return None
        self.run += 1
        slots = cached_entries(session) - 1  # before the pass
        return PassRecord(1, 1, [], time.perf_counter() - started, 1, slots)
