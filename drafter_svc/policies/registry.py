"""The draft-length policies by the name a request gives (`draft_policy`)."""

from __future__ import annotations

from drafter_svc.policies.auto import AutoPolicy
from drafter_svc.policies.copy_confidence import CopyConfidencePolicy
from drafter_svc.policies.draft_length_policy import DraftLengthPolicy
from drafter_svc.policies.fixed import FixedPolicy
from drafter_svc.policies.leviathan import LeviathanPolicy
from drafter_svc.policies.threshold_policy import ThresholdPolicy

_POLICIES: tuple[type[DraftLengthPolicy], ...] = (AutoPolicy, FixedPolicy, LeviathanPolicy, ThresholdPolicy, CopyConfidencePolicy)
POLICY_NAMES: tuple[str, ...] = tuple(policy.name for policy in _POLICIES)


def policy_named(name: str) -> DraftLengthPolicy:
    """The policy called `name`; ValueError naming POLICY_NAMES for any other."""
    for policy in _POLICIES:
        if policy.name == name:
            return policy()
    raise ValueError(f"unknown draft policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
