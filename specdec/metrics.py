"""Prometheus metrics of both services, served over HTTP on `metrics_port` (0: off).

Names follow what the ecosystem already reads: the spec-decode counters carry vLLM's names
(num_drafts = target passes with a draft, num_draft_tokens, num_accepted_tokens; mean
acceptance length = 1 + accepted / drafts), prefixed `specdec_`. `specdec_drafter_open_sessions`
is what the chart's HorizontalPodAutoscaler can scale drafters on (through a custom-metrics
adapter). Each server owns its own registry, so several servers can live in one process.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from specdec.v1 import drafter_pb2


class DrafterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.open_sessions = Gauge("specdec_drafter_open_sessions", "Generate streams running on this drafter", registry=r)
        self.requests = Counter("specdec_drafter_requests", "finished generations", ["finish_reason"], registry=r)
        self.generated_tokens = Counter("specdec_drafter_generated_tokens", "tokens streamed to clients", registry=r)
        self.num_drafts = Counter("specdec_spec_decode_num_drafts", "target passes (rounds)", registry=r)
        self.num_draft_tokens = Counter("specdec_spec_decode_num_draft_tokens", "drafted tokens sent for verification", registry=r)
        self.num_accepted_tokens = Counter("specdec_spec_decode_num_accepted_tokens", "drafted tokens accepted", registry=r)
        self.verifiers_ready = Gauge("specdec_drafter_verifiers_ready", "verifiers ready for new sessions", registry=r)

    def observe(self, response: drafter_pb2.GenerateResponse) -> None:
        """Count one streamed response; the last one of a generation carries its statistics."""
        self.generated_tokens.inc(len(response.token_ids))
        if response.finish_reason:
            stats = response.stats
            self.requests.labels(drafter_pb2.FinishReason.Name(response.finish_reason).removeprefix("FINISH_REASON_").lower()).inc()
            self.num_drafts.inc(stats.rounds)
            self.num_draft_tokens.inc(stats.drafted_tokens)
            self.num_accepted_tokens.inc(stats.accepted_tokens)


class VerifierMetrics:
    def __init__(self, open_sessions: Callable[[], float], max_sessions: float, ready: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Gauge("specdec_verifier_open_sessions", "sessions (Verify streams) open", registry=r).set_function(open_sessions)
        Gauge("specdec_verifier_max_sessions", "the session limit", registry=r).set(max_sessions)
        Gauge("specdec_verifier_ready", "1 once the model is loaded and warm", registry=r).set_function(ready)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> None:
    """Serve /metrics on host:port in a background thread (nothing when port is 0)."""
    if port:
        start_http_server(port, addr=host, registry=registry)
