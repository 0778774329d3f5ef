"""Faults survived, with real processes and the real default model: verifiers killed with
SIGKILL mid-generation (another verifier available; the same one restarted), a verifier stalled
(SIGSTOP) past the client's deadline, the drafter killed mid-stream, SIGTERM under load.

One module-scoped cluster (two verifiers, one drafter) serves every case, in file order: each
case leaves the cluster as the next one expects (a killed verifier stays dead or is restarted on
its port). Greedy outputs are compared token by token with an uninterrupted run.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from specdec.client import AsyncClient, Client
from specdec.launcher import Service, free_port
from specdec.metrics import scrape_metrics
from specdec.v1 import verifier_pb2, verifier_pb2_grpc

pytestmark = pytest.mark.slow

POEM = [{"role": "user", "content": "Write a long poem about the mountains and the rivers."}]
GREEDY = dict(messages=POEM, max_new_tokens=64, temperature=0.0, num_draft_tokens=4)
# Untuned: these tests are about faults, and timing pass sizes at start-up costs ~20 s a start.
VERIFIER_ARGS = ["--max-sessions", "8", "--grace-seconds", "30", "--tune-pass-sizes", "false"]


class Faults:
    """Two verifiers and a drafter that resumes quickly (load polled every 0.2 s, many attempts)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.verifiers = [Service("verifier", VERIFIER_ARGS, logs / f"verifier-{i}.log") for i in range(2)]
        for verifier in self.verifiers:
            verifier.wait_serving(600)
        self.metrics_port = free_port()
        self.drafter = self._start_drafter()
        self.drafter.wait_serving(600)
        self.address = self.drafter.address

    def _start_drafter(self) -> Service:
        return Service(
            "drafter",
            ["--verifier", ",".join(v.address for v in self.verifiers), "--load-poll-seconds", "0.2",
             "--resume-attempts", "40", "--resume-backoff-seconds", "0.1", "--grace-seconds", "30",
             "--metrics-port", str(self.metrics_port)],
            self.logs / f"drafter-{time.monotonic_ns()}.log",
        )

    def restart_drafter(self) -> None:
        self.drafter = self._start_drafter()
        self.drafter.wait_serving(120)
        self.address = self.drafter.address

    def restart(self, index: int) -> Service:
        """Start verifier `index` again on its port (the drafter knows it by address)."""
        old = self.verifiers[index]
        self.verifiers[index] = Service("verifier", [*VERIFIER_ARGS, "--port", str(old.port)], self.logs / f"verifier-{index}-again.log")
        return self.verifiers[index]

    def alive(self) -> list[Service]:
        return [v for v in self.verifiers if v.process.poll() is None]

    def stop(self) -> None:
        for service in [self.drafter, *self.verifiers]:
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGCONT)
            service.stop()


def _open_sessions(verifier: Service) -> int:
    with grpc.insecure_channel(verifier.address) as channel:
        return verifier_pb2_grpc.VerifierStub(channel).GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=5).open_sessions


def _drafter_open_sessions(faults: Faults) -> float:
    return scrape_metrics(faults.metrics_port)["specdec_drafter_open_sessions"]


def _holder(faults: Faults) -> Service:
    """The verifier the running session is on."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for verifier in faults.alive():
            if _open_sessions(verifier) == 1:
                return verifier
        time.sleep(0.02)
    raise AssertionError("no verifier holds the session")


def _eventually(condition, timeout: float = 15) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    cluster = Faults(tmp_path_factory.mktemp("fault-logs"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def reference(faults: Faults) -> list[int]:
    with Client(faults.address) as client:
        result = client.generate(**GREEDY)
    assert result.stats.resumes == 0 and len(result.token_ids) == 64
    return result.token_ids


def _run_and_kill(faults: Faults, after_kill=None) -> tuple[list[int], int]:  # type: ignore[no-untyped-def]
    """Generate; after the first chunk, SIGKILL the verifier holding the session."""
    with Client(faults.address) as client:
        stream = client.stream(**GREEDY)
        chunks = [next(stream)]
        victim = _holder(faults)
        victim.process.kill()
        victim.process.wait()
        if after_kill:
            after_kill(victim)
        chunks += list(stream)
    assert chunks[-1].finish_reason == "length"
    return [t for c in chunks for t in c.token_ids], chunks[-1].stats.resumes


def test_verifier_killed_mid_generation_with_another_available(faults: Faults, reference: list[int]) -> None:
    tokens, resumes = _run_and_kill(faults)
    assert resumes >= 1
    assert tokens == reference  # token for token: none lost, none repeated
    assert len(faults.alive()) == 1


def test_verifier_killed_mid_generation_and_restarted(faults: Faults, reference: list[int]) -> None:
    """Only one verifier is left (the previous case killed the other); it is killed and
    started again on its port while the generation waits."""
    assert len(faults.alive()) == 1
    restarted: list[Service] = []
    tokens, resumes = _run_and_kill(faults, after_kill=lambda victim: restarted.append(faults.restart(faults.verifiers.index(victim))))
    assert resumes >= 1
    assert tokens == reference
    assert _open_sessions(restarted[0]) == 0


def test_verifier_stalled_past_the_deadline(faults: Faults) -> None:
    with Client(faults.address, timeout=3.0) as client:
        stream = client.stream(**{**GREEDY, "max_new_tokens": 400})
        next(stream)
        stalled = _holder(faults)
        stalled.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as caught:
                list(stream)
            assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started < 4
        finally:
            stalled.process.send_signal(signal.SIGCONT)
    _eventually(lambda: _open_sessions(stalled) == 0)  # the verifier freed the session
    _eventually(lambda: _drafter_open_sessions(faults) == 0)
    _eventually(lambda: _generates(faults))  # and serves again once its load poll answers


def _generates(faults: Faults) -> bool:
    try:
        with Client(faults.address) as client:
            return len(client.generate("Hi", max_new_tokens=2, temperature=0.0).token_ids) == 2
    except grpc.RpcError:
        return False


def test_drafter_killed_mid_stream(faults: Faults) -> None:
    with Client(faults.address) as client:
        stream = client.stream(**{**GREEDY, "max_new_tokens": 400})
        next(stream)
        verifier = _holder(faults)
        faults.drafter.process.kill()
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            list(stream)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 2
    _eventually(lambda: _open_sessions(verifier) == 0)  # the verifier freed the session
    faults.restart_drafter()


def test_sigterm_under_load_finishes_running_streams_and_refuses_new_ones(faults: Faults) -> None:
    async def one(client: AsyncClient, started: threading.Event) -> list:  # type: ignore[type-arg]
        chunks = []
        async for chunk in client.stream(messages=POEM, max_new_tokens=40, temperature=0.0, num_draft_tokens=0):
            chunks.append(chunk)
            started.set()
        return chunks

    results: list = []
    running = [threading.Event() for _ in range(3)]

    def load() -> None:
        async def streams() -> list:  # type: ignore[type-arg]
            async with AsyncClient(faults.address) as client:
                return await asyncio.gather(*(one(client, e) for e in running))

        results.extend(asyncio.run(streams()))

    loader = threading.Thread(target=load)
    loader.start()
    for event in running:
        assert event.wait(60)
    terminated = time.monotonic()
    services = [faults.drafter, *faults.alive()]
    for service in services:
        service.process.terminate()
    time.sleep(0.3)
    with pytest.raises(grpc.RpcError) as refused:
        Client(faults.address).generate("hi", max_new_tokens=2)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    loader.join(timeout=60)
    assert len(results) == 3
    for chunks in results:
        assert chunks[-1].finish_reason == "length" and sum(len(c.token_ids) for c in chunks) == 40
    for service in services:
        assert service.process.wait(timeout=35) == 0
    assert time.monotonic() - terminated < 30 + 5  # within the grace period
