"""Prometheus metrics of the gateway, served at GET /metrics (and on `metrics_port` when set).

HTTP requests by endpoint, method and status (`http_requests_total`,
`http_request_duration_seconds`: the names of prometheus-fastapi-instrumentator, which vLLM's
server uses; a stream's duration runs to its last byte). Generation latencies carry vLLM's
names and meaning, labelled by model_name: `vllm:time_to_first_token_seconds` (request arrival
to the first generated text sent), `vllm:inter_token_latency_seconds` (between two streamed
deltas; a speculative round may deliver several tokens in one delta, as one vLLM step does),
`vllm:e2e_request_latency_seconds`, `vllm:request_time_per_output_token_seconds`, the token
counters `vllm:prompt_tokens_total` and `vllm:generation_tokens_total`, finished requests by
reason `vllm:request_success_total`, and `vllm:num_requests_running`.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specdec.client import GenerationStats

# Seconds, as vLLM buckets them (first token up to a long prefill, inter-token down to 1 ms).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0)
# Paths with a route; anything else is counted as "other" (a scanner's paths must not make labels).
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.http_requests = Counter("http_requests", "HTTP requests answered", ["handler", "method", "status"], registry=r)
        self.http_duration = Histogram(
            "http_request_duration_seconds", "HTTP request to its last byte", ["handler", "method", "status"],
            buckets=REQUEST_BUCKETS, registry=r,
        )
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "request arrival to the first generated text sent",
                              ["model_name"], buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "between two streamed deltas of one request",
                             ["model_name"], buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "request arrival to its last token",
                             ["model_name"], buckets=REQUEST_BUCKETS, registry=r)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "a request's (last - first token time) / (tokens - 1)",
                              ["model_name"], buckets=ITL_BUCKETS, registry=r)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "prompt tokens of finished requests", ["model_name"], registry=r)
        self.generation_tokens = Counter("vllm:generation_tokens", "tokens generated for finished requests", ["model_name"], registry=r)
        self.success = Counter("vllm:request_success", "finished requests", ["model_name", "finished_reason"], registry=r)
        self.running = Gauge("vllm:num_requests_running", "generations in progress", ["model_name"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def observe_http(self, path: str, method: str, status: int, seconds: float) -> None:
        handler = path if path in ENDPOINTS else "other"
        self.http_requests.labels(handler, method, str(status)).inc()
        self.http_duration.labels(handler, method, str(status)).observe(seconds)


class GenerationTimer:
    """The latencies of one generation, observed as its deltas are sent."""

    def __init__(self, metrics: GatewayMetrics, model: str, arrived: float) -> None:
        self.metrics = metrics
        self.model = model
        self.arrived = arrived
        self.first: float | None = None
        self.last: float | None = None

    def delta_sent(self, tokens: int) -> None:
        """A delta carrying `tokens` new tokens went out now."""
        if not tokens:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first = now
            self.metrics.ttft.labels(self.model).observe(now - self.arrived)
        elif self.last is not None:
            self.metrics.itl.labels(self.model).observe(now - self.last)
        self.last = now

    def finished(self, reason: str, stats: GenerationStats) -> None:
        now = time.perf_counter()
        labels = self.metrics
        labels.e2e.labels(self.model).observe(now - self.arrived)
        if self.first is not None and self.last is not None and stats.generated_tokens > 1:
            labels.tpot.labels(self.model).observe((self.last - self.first) / (stats.generated_tokens - 1))
        labels.prompt_tokens.labels(self.model).inc(stats.prompt_tokens)
        labels.generation_tokens.labels(self.model).inc(stats.generated_tokens)
        labels.success.labels(self.model, reason).inc()
