"""The gateway imports nothing from torch or transformers: it ships in the drafter image, which
installs neither (deploy/docker/drafter.Dockerfile)."""

from __future__ import annotations

from tests.drafter_svc.test_torch_free import run_without_torch


def test_gateway_imports_without_torch_or_transformers() -> None:
    run = run_without_torch(
        """
        import gateway_svc.server, specdec.cli
        try:
            specdec.cli.main(["serve", "openai", "--help"])  # the chart's command
        except SystemExit as done:
            assert done.code == 0, done.code
        """
    )
    assert "--drafter-tls-ca-file" in run.stdout and "--served-model-name" in run.stdout
