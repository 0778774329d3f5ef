"""Drafter settings: flags, else SPECDEC_DRAFTER_* environment variables, else these defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class DrafterSettings:
    """`specdec serve drafter`: the front door for clients; drafts and has verifiers check them.

    Each setting is a flag, else a SPECDEC_DRAFTER_* environment variable, else the default."""

    COMMAND: ClassVar[str] = "specdec serve drafter"
    host: str = field(default="127.0.0.1", metadata={"group": "server", "help": "address to bind"})
    port: int = field(default=50051, metadata={"group": "server", "help": "port to bind (0 picks a free one)"})
    verifier: str = field(
        default="127.0.0.1:50052",
        metadata={"group": "verifiers", "help": "verifiers: HOST:PORT, a comma-separated list, dns:///NAME:PORT or k8s://NAMESPACE/SERVICE[:PORT]"},
    )
    verifier_refresh_seconds: float = field(default=5.0, metadata={"group": "verifiers", "help": "how often dns:/// verifier names are resolved again"})
    load_poll_seconds: float = field(default=1.0, metadata={"group": "verifiers", "help": "how often each verifier's model, load and round price are asked for (GetModelInfo)"})
    verifier_tls_ca_file: str = field(default="", metadata={"group": "security", "help": "PEM CA to check verifiers with: TLS to verifiers (empty: plaintext)"})
    verifier_tls_cert_file: str = field(default="", metadata={"group": "security", "help": "PEM client certificate shown to verifiers (mutual TLS)"})
    verifier_tls_key_file: str = field(default="", metadata={"group": "security", "help": "PEM private key of verifier_tls_cert_file"})
    verifier_tls_server_name: str = field(
        default="", metadata={"group": "security", "help": "name the verifiers' certificates must carry (pods are dialled by IP; empty: the address)"}
    )
    model: str = field(default="default", metadata={"group": "model", "help": "tokenizer source: 'default', a .gguf file or a model folder"})
    drafter: str = field(
        default="auto",
        metadata={"group": "drafting", "help": "drafter used when a request names none; auto: hybrid (onnx-quantized's drafts, or the copy drafter's where the policy expects more of them) if `specdec draft build quantized` has built it, else copy, and copy for a request that arrives while other sessions are served"},
    )
    onnx_quantized_dir: str = field(
        default="", metadata={"group": "model", "help": "model folder of the onnx-quantized drafter (empty: where `specdec draft build quantized` puts it for --model)"}
    )
    onnx_small_dir: str = field(
        default="", metadata={"group": "model", "help": "model folder of the onnx-small drafter (empty: where `specdec draft build small` puts it for --model)"}
    )
    cpus: str = field(default="", metadata={"group": "performance", "help": "CPU list to pin this process to, e.g. 1 or 2-3 (empty: all it may use)"})
    onnx_threads: int = field(default=0, metadata={"group": "performance", "help": "onnxruntime threads of the model drafters (0: one per --cpus CPU if pinned, else one per core)"})
    onnx_tail_mass: float = field(
        default=1e-2,
        metadata={"group": "drafting", "help": "model drafters: mass of q's least likely tokens left unsent when nothing truncates q (fewer bytes, alpha lower by at most this)"},
    )
    onnx_prompt_window: int = field(
        default=128,
        metadata={"group": "drafting", "help": "model drafters read only the prompt's last this many tokens (and all generated ones): a shorter drafter prefill; 0: the whole prompt"},
    )
    onnx_prompt_cache_tokens: int = field(
        default=1024,
        metadata={"group": "performance", "help": "model drafters keep what sessions read of their prompts, this many tokens in all (~46 KB a token for the default model), for later sessions sharing a prompt's beginning; 0: off"},
    )
    onnx_prompt_from_verifier_tokens: int = field(
        default=2048,
        metadata={"group": "performance", "help": "model drafters that are the target's own copy (onnx-quantized) take the keys and values of prompts of up to this many tokens from the verifier's first pass instead of reading them (~46 KB a token sent for the default model; the whole prompt, not --onnx-prompt-window of it); 0: off"},
    )
    num_draft_tokens: int = field(default=8, metadata={"group": "drafting", "help": "draft length (tree depth) used when a request sets none"})
    # Trees of 2x the draft length gave the longest mean acceptance length per target pass in
    # three bench runs (bench/results/spec_bench-20261122-024820, -025633, -030646), at no
    # measurable speed cost on a 2-core CPU; 4x added nothing more: docs/design/trees-vs-chains.md.
    max_tree_nodes: int = field(
        default=16, metadata={"group": "drafting", "help": "tree nodes per round at the default draft length (scaled with a request's own length)"}
    )
    # The model drafters' own default shape: a chain (siblings cost them leaf draws that mostly
    # end the walk early at temperature 1: docs/design/trees-vs-chains.md), up to 8 deep under
    # `auto`, which cuts it where a step would not pay: 1.07x over up to 6 at temperature 0
    # (docs/design/draft-length.md).
    model_num_draft_tokens: int = field(default=8, metadata={"group": "drafting", "help": "draft length used when a request names none, for the model drafters (onnx-*)"})
    model_max_tree_nodes: int = field(default=8, metadata={"group": "drafting", "help": "tree nodes per round at the model drafters' default draft length"})
    # `auto` is the default: it is within the run-to-run noise of the best fixed length chosen
    # after the fact, and under load it prices drafts by the verifier's round price and turns
    # speculation off when it cannot pay (docs/design/draft-length.md).
    draft_policy: str = field(
        default="auto",
        metadata={"group": "drafting", "help": "draft-length policy when a request names none: auto, fixed, leviathan, specdec++, copy-confidence"},
    )
    # Off: where drafter and verifier share the cores (one machine), pre-drafting slows the
    # verifier's pass by more than it hides (docs/design/overlap-off-on-shared-cores.md); `greedy`
    # or `on` where the drafter has cores of its own.
    overlap: str = field(
        default="off",
        metadata={"group": "drafting", "help": "draft the next round while the verifier checks this one when a request does not say: on, off, or greedy (at temperature 0 only)"},
    )
    stop_threshold: float = field(
        default=0.5, metadata={"group": "drafting", "help": "specdec++ policy: stop drafting once P(some draft is rejected) exceeds this"}
    )
    load_weight: float = field(
        default=1.0, metadata={"group": "drafting", "help": "specdec++ policy: its threshold is divided by (1 + this * rounds queued in the verifier)"}
    )
    max_new_tokens_cap: int = field(default=4096, metadata={"group": "limits", "help": "largest max_new_tokens a request may ask for"})
    grace_seconds: float = field(default=20.0, metadata={"group": "server", "help": "on SIGTERM, how long running streams may finish"})
    health_port: int = field(default=0, metadata={"group": "observability", "help": "also serve grpc.health.v1 in plaintext on this port, for probes (0: off)"})
    metrics_port: int = field(default=0, metadata={"group": "observability", "help": "serve Prometheus /metrics over HTTP on this port (0: off)"})
    tls_cert_file: str = field(default="", metadata={"group": "security", "help": "PEM server certificate: serve TLS (empty: plaintext)"})
    tls_key_file: str = field(default="", metadata={"group": "security", "help": "PEM private key of tls_cert_file"})
    tls_client_ca_file: str = field(default="", metadata={"group": "security", "help": "PEM CA: require client certificates it signed (mutual TLS)"})
    # Reliability and security (docs/concepts/failover.md, docs/deployment.md)
    resume_attempts: int = field(default=8, metadata={"group": "verifiers", "help": "re-opens of a broken verifier session per break, on the same or another verifier (0: fail with UNAVAILABLE)"})
    resume_backoff_seconds: float = field(default=0.25, metadata={"group": "verifiers", "help": "wait before the second re-open attempt; doubles per attempt, up to 4 s"})
    auth_token_file: str = field(default="", metadata={"group": "security", "help": "file holding the bearer token clients must send (authorization: Bearer ...); empty: no check"})
    max_streams_per_client: int = field(default=64, metadata={"group": "limits", "help": "Generate calls in progress per client address at most; more get RESOURCE_EXHAUSTED (0: no limit)"})
    max_prompt_tokens: int = field(default=8192, metadata={"group": "limits", "help": "prompt tokens per request at most (the verifier's context length applies too)"})
    max_message_bytes: int = field(default=4 * 1024 * 1024, metadata={"group": "limits", "help": "largest gRPC message received or sent, in bytes"})
