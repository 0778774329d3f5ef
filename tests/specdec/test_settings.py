"""Settings come from flags, else environment variables, else the dataclass defaults."""

from __future__ import annotations

import dataclasses
import re

import pytest

from drafter_svc.settings import DrafterSettings
from gateway_svc.settings import GatewaySettings
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


def test_a_boolean_takes_only_boolean_words(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`maybe` is refused (it was once read as false), by flag and by environment, naming the setting."""
    for word, value in (("TRUE", True), ("off", False), ("1", True), ("no", False)):
        assert settings.parse(VerifierSettings, "SPECDEC_VERIFIER_", ["--cuda-graphs", word]).cuda_graphs is value
    with pytest.raises(SystemExit):
        settings.parse(VerifierSettings, "SPECDEC_VERIFIER_", ["--cuda-graphs", "maybe"])
    assert "argument --cuda-graphs: not a boolean: 'maybe'" in capsys.readouterr().err
    monkeypatch.setenv("SPECDEC_VERIFIER_TUNE_PASS_SIZES", "maybe")
    with pytest.raises(SystemExit):
        settings.parse(VerifierSettings, "SPECDEC_VERIFIER_", [])
    assert "SPECDEC_VERIFIER_TUNE_PASS_SIZES='maybe': not a boolean" in capsys.readouterr().err


@pytest.mark.parametrize("cls", [VerifierSettings, DrafterSettings, GatewaySettings])
def test_every_setting_has_a_help_group(cls: type, capsys: pytest.CaptureFixture[str]) -> None:
    fields = dataclasses.fields(cls)
    assert all(f.metadata.get("group") in settings.GROUPS and f.metadata.get("help") for f in fields)
    with pytest.raises(SystemExit):
        settings.parse(cls, "SPECDEC_X_", ["--help"])
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {cls.COMMAND} [options]")
    sections = re.split(r"\n\n([a-z]+):\n", text)  # [usage and description, title, body, title, body, ...]
    titles = sections[1::2]
    used = [g for g in settings.GROUPS if any(f.metadata["group"] == g for f in fields)]
    assert titles == ["options", *used]  # in GROUPS' order, each once
    flags_under = {title: re.findall(r"^  (--[a-z0-9-]+)", body, re.M) for title, body in zip(titles, sections[2::2])}
    for f in fields:
        assert f"--{f.name.replace('_', '-')}" in flags_under[f.metadata["group"]], f.name
