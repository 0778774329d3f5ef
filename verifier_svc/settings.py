"""Verifier settings: flags, else SPECDEC_VERIFIER_* environment variables, else these defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class VerifierSettings:
    """`specdec serve verifier`: the target model, its KV cache and the acceptance of drafts.

    Each setting is a flag, else a SPECDEC_VERIFIER_* environment variable, else the default."""

    COMMAND: ClassVar[str] = "specdec serve verifier"
    host: str = field(default="127.0.0.1", metadata={"group": "server", "help": "address to bind"})
    port: int = field(default=50052, metadata={"group": "server", "help": "port to bind (0 picks a free one)"})
    model: str = field(default="default", metadata={"group": "model", "help": "'default' (SmolLM2-135M-Instruct), a .gguf file or a model folder"})
    device: str = field(default="cpu", metadata={"group": "model", "help": "torch device, e.g. cpu or cuda"})
    dtype: str = field(
        default="auto",
        metadata={"group": "model", "help": "weights and activations: auto (float32 on cpu, bfloat16 elsewhere), float32, bfloat16 or float16; outputs are exact for the model in this dtype"},
    )
    quantization: str = field(
        default="none",
        metadata={"group": "model", "help": "none, or int8: weight-only int8 linear layers (one scale per output channel), activations in bfloat16; on CPU, where one-token passes then read a quarter of float32's bytes (int8_weights.py); outputs are exact for the model so quantized"},
    )
    device_map: str = field(
        default="",
        metadata={"group": "model", "help": "spread a model larger than one GPU over all visible GPUs with accelerate: auto, balanced, balanced_low_0 or sequential (needs --device cuda; empty: the whole model on --device)"},
    )
    max_sessions: int = field(default=64, metadata={"group": "limits", "help": "open sessions at most; more get RESOURCE_EXHAUSTED"})
    max_draft_tokens: int = field(default=32, metadata={"group": "limits", "help": "drafted tokens (tree nodes) per round at most"})
    max_draft_depth: int = field(default=16, metadata={"group": "limits", "help": "depth of a round's token tree at most"})
    max_batch_tokens: int = field(default=512, metadata={"group": "performance", "help": "new tokens per batched target pass at most (one round always fits)"})
    max_wait_ms: float = field(default=3.0, metadata={"group": "performance", "help": "how long a round may wait for other sessions' rounds to join its pass (besides the wait for sessions turning around: scheduler.py)"})
    max_pass_rows: int = field(default=0, metadata={"group": "performance", "help": "a hard limit: in a pass of B rounds each round keeps at most this many token rows / B, its drafted trees cut to fit (0: no limit)"})
    ahead_passes: bool = field(
        default=True,
        metadata={"group": "performance", "help": "while one session is open and its drafter decodes without speculation (OpenSession.plain), run its next one-token pass as soon as each verdict is sent, so the verdict's round trip overlaps the pass; outputs unchanged; a round that drafts after all drops it (scheduler.py; docs/design/ahead-passes.md)"},
    )
    max_kv_bytes: int = field(default=0, metadata={"group": "limits", "help": "KV cache memory of all sessions at most, in bytes; new sessions past it get RESOURCE_EXHAUSTED (0: no limit)"})
    retry_after_ms: int = field(default=1000, metadata={"group": "limits", "help": "the retry hint (trailing metadata retry-after-ms) sent with RESOURCE_EXHAUSTED"})
    context_length: int = field(default=0, metadata={"group": "limits", "help": "tokens per session at most (0: the model's own limit)"})
    # About 46 KB a token for SmolLM2-135M in float32 (30 layers x 3 KV heads x 64 x 2 x 4 bytes):
    # 8192 tokens are ~0.4 GB.
    prefix_cache_tokens: int = field(default=8192, metadata={"group": "performance", "help": "prompt tokens whose keys/values are kept for reuse by later sessions (0: off)"})
    tune_pass_sizes: bool = field(
        default=True,
        metadata={"group": "performance", "help": "time lone passes of 1-16 tokens at start; on CPU in both linear layouts (~8 s), keeping the faster layout (linear_layout.py) and padding each lone pass to the fastest size at or above its own (batch_planner.py); then batched passes of 2-32 rows (~1 s); the timings also start the round price (pass_price.py), whose lone line is timed briefly when this is off and prices shared passes until they run"},
    )
    cuda_graphs: bool = field(
        default=True,
        metadata={"group": "performance", "help": "on CUDA, record lone passes of up to 64 tokens as CUDA graphs at start (8 sessions at a time, up to 4096 cached tokens each) and replay them"},
    )
    cuda_compiled: str = field(
        default="layers",
        metadata={"group": "performance", "help": "on CUDA with graphs, what torch.compile compiles inside the recorded passes (fewer kernels a pass): layers (whole decoder layers; backends/compiled_layers.py), blocks (norms and MLPs; backends/compiled_blocks.py) or none"},
    )
    cpu_compiled_passes: bool = field(
        default=False,
        metadata={"group": "performance", "help": "on CPU, run lone passes of 2-8 tokens (1-8 without one-row copies) as static passes with their decoder layers compiled by torch.compile, five a call (4 sessions at a time, up to 4096 cached tokens each; a few compiles at the first start, minutes on a 2-core host, read back from --cpu-compiled-pass-store in seconds at later ones; backends/cpu_compiled.py)"},
    )
    cpu_compiled_pass_store: str = field(
        default="",
        metadata={"group": "performance", "help": "with --cpu-compiled-passes, the folder that keeps their compiled code, so that a later start with the same model, code and versions loads it in seconds instead of compiling (empty: compiled-passes in $SPECDEC_CACHE_DIR, else in ~/.cache/specdec; off: compile at every start; backends/stored_steps.py)"},
    )
    cpu_one_row_copies: bool = field(
        default=True,
        metadata={"group": "performance", "help": "on CPU in float32, keep a second copy of the linear weights laid out for one-token passes (plain decoding steps), which read it faster with one block a thread; made only where at least half the available memory stays free, and, where pass sizes are tuned without compiled passes, kept only where start-up timing finds it faster (doubles the linear weights' memory; linear_layout.py)"},
    )
    cpu_float32_copies: bool = field(
        default=True,
        metadata={"group": "performance", "help": "on CPU in bfloat16 or float16, keep a float32 copy of the linear weights for products of 4 rows or more (speculation's rounds, batched passes, prefills), which this CPU runs faster in float32; plain decoding keeps the narrow weights; only the summation order changes; made only where at least half the available memory stays free, and, where pass sizes are tuned without compiled passes, kept only where start-up timing finds 8-token passes faster (adds twice the narrow linear weights' memory; linear_layout.py)"},
    )
    cpu_onednn_copies: bool = field(
        default=True,
        metadata={"group": "performance", "help": "on CPU in float32, keep a copy of the linear weights packed in oneDNN's layout for products of several rows (batched passes, speculative rounds and prompts run in torch), which this CPU's MKL runs slowly; in bfloat16, where oneDNN has bfloat16 kernels for the CPU (AVX-512 BF16, AMX), such a copy of the bfloat16 weights for products of any size, which then replaces the float32 copies; made at start-up tuning where at least half the available memory stays free, and kept from the fewest rows (2-16; in bfloat16 1-16) whose passes it runs faster (the linear weights' memory again; linear_layout.py)"},
    )
    cpu_onnx_passes: bool = field(
        default=True,
        metadata={"group": "performance", "help": "on CPU, run lone passes of up to 512 tokens (plain decoding steps, speculative rounds, a session's prompt) through onnxruntime, over a graph exported from the served model at start (float32 Llama-layout models; others run in torch as before); its own copy of the weights, the caches shared in place; checked against the model's forward at start and turned off with a warning where it differs; off with --cpu-compiled-passes (backends/onnx_passes.py)"},
    )
    cpus: str = field(default="", metadata={"group": "performance", "help": "CPU list to pin this process to, e.g. 0 or 0-1,3 (empty: all it may use)"})
    torch_threads: int = field(default=0, metadata={"group": "performance", "help": "torch intra-op threads (0: one per --cpus CPU if pinned, else torch's default)"})
    grace_seconds: float = field(default=20.0, metadata={"group": "server", "help": "on SIGTERM, how long running streams may finish"})
    health_port: int = field(default=0, metadata={"group": "observability", "help": "also serve grpc.health.v1 in plaintext on this port, for probes (0: off)"})
    metrics_port: int = field(default=0, metadata={"group": "observability", "help": "serve Prometheus /metrics over HTTP on this port (0: off)"})
    tls_cert_file: str = field(default="", metadata={"group": "security", "help": "PEM server certificate: serve TLS (empty: plaintext)"})
    tls_key_file: str = field(default="", metadata={"group": "security", "help": "PEM private key of tls_cert_file"})
    tls_client_ca_file: str = field(default="", metadata={"group": "security", "help": "PEM CA: require client certificates it signed (mutual TLS)"})
    max_message_bytes: int = field(default=4 * 1024 * 1024, metadata={"group": "limits", "help": "largest gRPC message received or sent, in bytes"})
