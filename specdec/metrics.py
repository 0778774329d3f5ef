"""Prometheus metrics of both services, served over HTTP on `metrics_port` (0: off), and
`scrape_metrics`, which reads them back (the benchmarks and tests).

Names follow what the ecosystem already reads: the spec-decode counters carry vLLM's names
(num_drafts = target passes with a draft, num_draft_tokens, num_accepted_tokens; mean
acceptance length = 1 + accepted / drafts), prefixed `specdec_`. `specdec_drafter_open_sessions`
is what the chart's HorizontalPodAutoscaler can scale drafters on (through a custom-metrics
adapter). Each server owns its own registry, so several servers can live in one process.

The verifier adds its scheduler's view: queue depth and wait, rounds per pass (batch size),
pass latency, tokens through the target, per-position acceptance
(`specdec_spec_decode_num_accepted_tokens_per_pos`, vLLM's name: rounds whose accepted path
reached position i), and errors by status code. Tokens/s is `rate()` of the token counters.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.parser import text_string_to_metric_families

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
        self.errors = Counter("specdec_drafter_errors", "Generate streams ended by an error, by gRPC status code", ["code"], registry=r)
        self.resumes = Counter("specdec_drafter_resumes", "verifier sessions re-opened after a broken stream (finished generations)", registry=r)

    def observe(self, response: drafter_pb2.GenerateResponse) -> None:
        """Count one streamed response; the last one of a generation carries its statistics."""
        self.generated_tokens.inc(len(response.token_ids))
        if response.finish_reason:
            stats = response.stats
            self.requests.labels(drafter_pb2.FinishReason.Name(response.finish_reason).removeprefix("FINISH_REASON_").lower()).inc()
            self.num_drafts.inc(stats.rounds)
            self.num_draft_tokens.inc(stats.drafted_tokens)
            self.num_accepted_tokens.inc(stats.accepted_tokens)
            self.resumes.inc(stats.resumes)


# Seconds: from ~1 ms (a short CPU pass) to several seconds (a long prompt under load).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


class VerifierMetrics:
    def __init__(self, open_sessions: Callable[[], float], max_sessions: float, ready: Callable[[], float]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        Gauge("specdec_verifier_open_sessions", "sessions (Verify streams) open", registry=r).set_function(open_sessions)
        Gauge("specdec_verifier_max_sessions", "the session limit", registry=r).set(max_sessions)
        Gauge("specdec_verifier_ready", "1 once the model is loaded and warm", registry=r).set_function(ready)
        self.queue_depth = Gauge("specdec_verifier_queue_depth", "rounds waiting for a target pass", registry=r)
        self.kv_tokens = Gauge("specdec_verifier_kv_cache_tokens", "tokens held in the open sessions' KV caches", registry=r)
        # Device graphs (CUDA): recorded once per shape at start, so the count is bounded.
        self.recorded_passes = Gauge("specdec_verifier_recorded_passes", "passes recorded as device graphs, one per fixed shape", registry=r)
        self.replayed_passes = Gauge("specdec_verifier_replayed_passes", "lone passes run by replaying a recorded graph", registry=r)
        self.ahead_passes = Gauge("specdec_verifier_ahead_passes", "one-token passes of a lone plain session run before its round arrived", registry=r)
        self.ahead_passes_used = Gauge("specdec_verifier_ahead_passes_used", "of those, the ones its round took (the others: it drafted, or ended)", registry=r)
        self.queue_wait = Histogram("specdec_verifier_queue_wait_seconds", "a round's wait for its pass", buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("specdec_verifier_batch_size", "rounds (sessions) per target pass", buckets=BATCH_BUCKETS, registry=r)
        self.pass_seconds = Histogram("specdec_verifier_pass_seconds", "one target pass, acceptance included", buckets=LATENCY_BUCKETS, registry=r)
        self.pass_tokens = Counter("specdec_verifier_pass_tokens", "new tokens through the target (pending + tree nodes)", registry=r)
        self.generated_tokens = Counter("specdec_verifier_generated_tokens", "tokens committed (accepted + one per round)", registry=r)
        self.prompt_cache_bytes = Counter(
            "specdec_verifier_prompt_cache_bytes", "bytes of prompts' keys and values sent to drafters (OpenSession.return_prompt_cache)", registry=r
        )
        self.num_drafts = Counter("specdec_spec_decode_num_drafts", "rounds (target passes per session)", registry=r)
        self.num_draft_tokens = Counter("specdec_spec_decode_num_draft_tokens", "drafted tokens (tree nodes) verified", registry=r)
        self.num_accepted_tokens = Counter("specdec_spec_decode_num_accepted_tokens", "drafted tokens accepted", registry=r)
        self.accepted_per_pos = Counter(
            "specdec_spec_decode_num_accepted_tokens_per_pos", "rounds whose accepted path reached this position (0-based)", ["position"], registry=r
        )
        self.errors = Counter("specdec_verifier_errors", "Verify streams ended by an error, by gRPC status code", ["code"], registry=r)

    def observe_pass(self, record) -> None:  # type: ignore[no-untyped-def]  # verifier_svc.scheduler.PassRecord
        self.batch_size.observe(record.rounds)
        self.pass_seconds.observe(record.seconds)
        self.pass_tokens.inc(record.tokens)
        for wait in record.waits:
            self.queue_wait.observe(wait)

    def observe_verdict(self, verdict, drafted: int) -> None:  # type: ignore[no-untyped-def]  # acceptance.RoundVerdict
        self.num_drafts.inc()
        self.num_draft_tokens.inc(drafted)
        self.num_accepted_tokens.inc(verdict.num_accepted)
        self.generated_tokens.inc(verdict.num_accepted + 1)
        for position in range(verdict.num_accepted):
            self.accepted_per_pos.labels(str(position)).inc()


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> None:
    """Serve /metrics on host:port in a background thread (nothing when port is 0)."""
    if port:
        start_http_server(port, addr=host, registry=registry)


def scrape_metrics(port: int, host: str = "127.0.0.1", timeout: float = 5.0) -> dict[str, float]:
    """Every sample of the /metrics served on host:port, by name, its labels in braces after it
    (`name{label=value,...}`, sorted); what the benchmarks and tests read from the services."""
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout).read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values
