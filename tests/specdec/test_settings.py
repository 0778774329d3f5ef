"""Settings come from flags, else environment variables, else the dataclass defaults."""

from __future__ import annotations

import pytest

from drafter_svc.settings import DrafterSettings
from specdec import settings
from verifier_svc.settings import VerifierSettings


def test_defaults_env_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.parse(VerifierSettings, "SPECDEC_VERIFIER_", []) == VerifierSettings()
    monkeypatch.setenv("SPECDEC_VERIFIER_MAX_SESSIONS", "3")
    monkeypatch.setenv("SPECDEC_VERIFIER_GRACE_SECONDS", "1.5")
    config = settings.parse(VerifierSettings, "SPECDEC_VERIFIER_", ["--port", "0"])
    assert (config.max_sessions, config.grace_seconds, config.port) == (3, 1.5, 0)
    flagged = settings.parse(VerifierSettings, "SPECDEC_VERIFIER_", ["--max-sessions", "9"])
    assert flagged.max_sessions == 9


def test_bad_flag_value_is_refused() -> None:
    with pytest.raises(SystemExit):
        settings.parse(DrafterSettings, "SPECDEC_DRAFTER_", ["--num-draft-tokens", "many"])
