"""Verifier discovery and placement: `--verifier` forms, a Kubernetes Service's EndpointSlices
followed through list + watch (against a loopback fake of the Kubernetes API), and sessions
placed on the least-loaded ready verifier (real gRPC fake verifiers reporting their load)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from urllib.parse import parse_qs

import grpc
import pytest

from drafter_svc.discovery import DnsDiscovery, StaticDiscovery, discovery_from_target
from drafter_svc.k8s_discovery import KubernetesDiscovery
from drafter_svc.verifier_pool import VerifierPool
from specdec.client import Client
from specdec.errors import FailedPrecondition, Unavailable
from specdec.launcher import Service
from specdec.v1 import verifier_pb2
from tests.fake_kube_api import FakeKubeApi, endpoint_slice
from tests.fake_verifier import FakeVerifier

NAMESPACE, SERVICE = "ml", "specdec-verifier"
FINGERPRINT = "f" * 64


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def next_update(updates: AsyncIterator[frozenset[str]], timeout: float = 5.0) -> frozenset[str]:
    return await asyncio.wait_for(updates.__anext__(), timeout)


def test_verifier_target_forms() -> None:
    assert isinstance(discovery_from_target("10.0.0.1:50052"), StaticDiscovery)
    static = discovery_from_target("a:1, b:2,[::1]:3")
    assert isinstance(static, StaticDiscovery) and static.addresses == {"a:1", "b:2", "[::1]:3"}
    dns = discovery_from_target("dns:///specdec-verifier.ml.svc:50052", refresh_seconds=2)
    assert isinstance(dns, DnsDiscovery) and (dns.host, dns.port, dns.refresh_seconds) == ("specdec-verifier.ml.svc", 50052, 2)
    k8s = discovery_from_target("k8s://ml/specdec-verifier:grpc")
    assert isinstance(k8s, KubernetesDiscovery) and (k8s.namespace, k8s.service, k8s.port) == ("ml", "specdec-verifier", "grpc")
    for bad in ("nohost", "dns:///name-without-port", "k8s://just-a-namespace", "a:1,b"):
        with pytest.raises(ValueError):
            discovery_from_target(bad)


def test_dns_discovery_resolves_every_address() -> None:
    async def scenario() -> frozenset[str]:
        return await DnsDiscovery("localhost", 50052, refresh_seconds=60).resolve()

    assert "127.0.0.1:50052" in asyncio.run(scenario())


def test_k8s_discovery_follows_slices_through_list_and_watch() -> None:
    api = FakeKubeApi(NAMESPACE)
    api.put(endpoint_slice("v-1", SERVICE, [("10.0.0.1", True), ("10.0.0.2", None)], 50052))
    api.put(endpoint_slice("other", "another-service", [("10.9.9.9", True)], 50052))

    async def scenario() -> None:
        discovery = KubernetesDiscovery(NAMESPACE, SERVICE, api_client=api.client(), watch_timeout_seconds=30, retry_seconds=0.05)
        updates = discovery.updates()
        assert await next_update(updates) == {"10.0.0.1:50052", "10.0.0.2:50052"}  # unset `ready` counts as ready
        api.put(endpoint_slice("v-2", SERVICE, [("10.0.0.3", True)], 50052))  # a pod joins (another slice)
        assert await next_update(updates) == {"10.0.0.1:50052", "10.0.0.2:50052", "10.0.0.3:50052"}
        api.put(endpoint_slice("v-1", SERVICE, [("10.0.0.1", True), ("10.0.0.2", False)], 50052))  # turns unready
        assert await next_update(updates) == {"10.0.0.1:50052", "10.0.0.3:50052"}
        api.expire_watches()  # 410 Gone: the client lists again and watches on
        api.delete("v-2")  # a pod leaves
        assert await next_update(updates) == {"10.0.0.1:50052"}
        api.put(endpoint_slice("v-1", SERVICE, [("10.0.0.1", True), ("10.0.0.4", True)], 50052))
        assert await next_update(updates) == {"10.0.0.1:50052", "10.0.0.4:50052"}
        await updates.aclose()

    try:
        asyncio.run(scenario())
    finally:
        api.close()
    lists = [r for r in api.requests if r.startswith("list")]
    assert len(lists) >= 2, api.requests  # the first list and the one after the expired watch
    selectors = {parse_qs(r.split(" ", 1)[1])["labelSelector"][0] for r in api.requests}
    assert selectors == {"kubernetes.io/service-name=specdec-verifier"}


def test_k8s_discovery_picks_the_named_port() -> None:
    api = FakeKubeApi(NAMESPACE)
    both = endpoint_slice("v-1", SERVICE, [("10.0.0.1", True)], 50052)
    both["ports"].append({"name": "health", "port": 50062, "protocol": "TCP"})
    api.put(both)

    async def first(port: str) -> frozenset[str]:
        updates = KubernetesDiscovery(NAMESPACE, SERVICE, port, api_client=api.client()).updates()
        try:
            return await next_update(updates)
        finally:
            await updates.aclose()

    try:
        assert asyncio.run(first("")) == {"10.0.0.1:50052"}  # "grpc" by default
        assert asyncio.run(first("health")) == {"10.0.0.1:50062"}
        assert asyncio.run(first("7000")) == {"10.0.0.1:7000"}
    finally:
        api.close()


def test_sessions_go_to_the_least_loaded_ready_verifier_and_stay_there() -> None:
    api = FakeKubeApi(NAMESPACE)
    a, b, c = (FakeVerifier(FINGERPRINT) for _ in range(3))
    a.extra_load, b.extra_load = 5, 1
    tokenizer = SimpleNamespace(fingerprint=FINGERPRINT)

    def slice_of(name: str, verifier: FakeVerifier, ready: bool = True) -> dict:
        return endpoint_slice(name, SERVICE, [(verifier.host, ready)], verifier.port)

    api.put(slice_of("a", a))
    api.put(slice_of("b", b))

    async def scenario() -> None:
        discovery = KubernetesDiscovery(NAMESPACE, SERVICE, api_client=api.client(), retry_seconds=0.05)
        pool = VerifierPool(discovery, tokenizer, poll_seconds=0.02)  # type: ignore[arg-type]
        pool.start()
        await asyncio.wait_for(pool.wait_ready(), 5)
        await eventually(lambda: all(m.ready for m in pool.members.values()) and len(pool.members) == 2)
        with pool.place() as placed:
            assert placed.address == b.address  # 1/10 beats 5/10
        b.extra_load = 9  # the reported load changes: the next session goes to a
        await eventually(lambda: pool.members[b.address].open_sessions == 9)
        with pool.place() as placed:
            assert placed.address == a.address

        api.put(slice_of("c", c))  # a new, idle verifier pod joins
        await eventually(lambda: c.address in pool.members and pool.members[c.address].ready)
        held = pool.place()
        running = held.__enter__()
        assert running.address == c.address
        api.put(slice_of("c", c, ready=False))  # c turns unready (e.g. draining) while a session runs on it
        await eventually(lambda: not pool.members[c.address].listed)
        with pool.place() as placed:
            assert placed.address == a.address  # no new sessions on c
        # the running session keeps its verifier and channel
        load = await running.stub.GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=5)
        assert load.max_sessions == 10
        held.__exit__(None, None, None)
        await eventually(lambda: c.address not in pool.members)  # channel released after the last session

        api.delete("a")
        api.delete("b")
        await eventually(lambda: not pool.members)
        with pytest.raises(Unavailable, match="no verifier is ready"):
            with pool.place():
                pass
        await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        api.close()
        for verifier in (a, b, c):
            verifier.stop()


def test_placement_counts_sessions_placed_since_the_last_report() -> None:
    a, b = FakeVerifier(FINGERPRINT), FakeVerifier(FINGERPRINT)

    async def scenario() -> None:
        pool = VerifierPool(StaticDiscovery([a.address, b.address]), SimpleNamespace(fingerprint=FINGERPRINT), poll_seconds=60)  # type: ignore[arg-type]
        pool.start()
        await eventually(lambda: len(pool.members) == 2 and all(m.ready for m in pool.members.values()))
        with pool.place() as first, pool.place() as second:  # no new report in between
            assert {first.address, second.address} == {a.address, b.address}
        await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        a.stop()
        b.stop()


def test_a_verifier_with_another_tokenizer_is_refused_and_a_silent_one_is_unavailable() -> None:
    other = FakeVerifier("0" * 64)

    async def scenario() -> None:
        pool = VerifierPool(StaticDiscovery([other.address]), SimpleNamespace(fingerprint=FINGERPRINT), poll_seconds=0.02)  # type: ignore[arg-type]
        pool.start()
        await eventually(lambda: pool.members and pool.members[other.address].mismatch is not None)
        with pytest.raises(FailedPrecondition, match="tokenizer"):
            with pool.place():
                pass
        await pool.close()

        silent = VerifierPool(StaticDiscovery(["127.0.0.1:1"]), SimpleNamespace(fingerprint=FINGERPRINT), poll_seconds=0.02)  # type: ignore[arg-type]
        silent.start()
        await eventually(lambda: bool(silent.members))
        with pytest.raises(Unavailable, match=r"127\.0\.0\.1:1 \(not answering\)"):
            with silent.place():
                pass
        await silent.close()

    try:
        asyncio.run(scenario())
    finally:
        other.stop()


def test_a_verifier_that_stops_answering_gets_no_new_sessions() -> None:
    """A verifier that goes away is marked not answering, and a session placed later avoids it."""
    a, b = FakeVerifier(FINGERPRINT), FakeVerifier(FINGERPRINT)
    b.extra_load = 3

    async def scenario() -> None:
        pool = VerifierPool(StaticDiscovery([a.address, b.address]), SimpleNamespace(fingerprint=FINGERPRINT), poll_seconds=0.02)  # type: ignore[arg-type]
        pool.start()
        await eventually(lambda: len(pool.members) == 2 and all(m.ready for m in pool.members.values()))
        a.stop()
        await eventually(lambda: not pool.members[a.address].answering)
        with pool.place() as placed:
            assert placed.address == b.address
        with pytest.raises(grpc.aio.AioRpcError):
            await pool.members[a.address].stub.GetModelInfo(verifier_pb2.GetModelInfoRequest(), timeout=1)
        await pool.close()

    try:
        asyncio.run(scenario())
    finally:
        b.stop()


def test_drafter_process_with_k8s_verifier_follows_pods_joining_and_leaving(tokenizer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`specdec serve drafter --verifier k8s://...` as a process (API access from KUBECONFIG):
    generations go to the verifier pods the EndpointSlices list, as they change."""
    yes, no = tokenizer.encode(" yes")[0], tokenizer.encode(" no")[0]
    api = FakeKubeApi(NAMESPACE)
    first, second = FakeVerifier(tokenizer.fingerprint, next_token=yes), FakeVerifier(tokenizer.fingerprint, next_token=no)
    api.put(endpoint_slice("first", SERVICE, [(first.host, True)], first.port))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [{"name": "fake", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": NAMESPACE}}],
    }))
    drafter = Service("drafter", ["--verifier", f"k8s://{NAMESPACE}/{SERVICE}", "--load-poll-seconds", "0.05"],
                      tmp_path / "drafter.log", env={"KUBECONFIG": str(kubeconfig)})
    try:
        drafter.wait_serving(30)
        with Client(drafter.address) as client:
            assert client.generate("Yes or no?", max_new_tokens=2, num_draft_tokens=0).token_ids == [yes, yes]
            api.put(endpoint_slice("second", SERVICE, [(second.host, True)], second.port))  # a pod joins
            deadline = time.monotonic() + 10
            while second.info_calls < 2:  # the drafter checked it and polls it
                assert time.monotonic() < deadline
                time.sleep(0.02)
            api.delete("first")  # the old one leaves: sessions move to the new one, none fails
            while client.generate("Yes or no?", max_new_tokens=2, num_draft_tokens=0).token_ids != [no, no]:
                assert time.monotonic() < deadline, (tmp_path / "drafter.log").read_text()[-2000:]
                time.sleep(0.05)
        assert any(r.startswith("watch") for r in api.requests)
    finally:
        assert drafter.stop() == 0
        api.close()
        first.stop()
        second.stop()
