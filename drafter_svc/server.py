"""`specdec serve drafter`: load the tokenizer, follow the verifiers, serve Drafter."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

import grpc

from drafter_svc.discovery import discovery_from_target
from drafter_svc.drafter_models import DrafterModels, load_built_model, resolve_default_drafter
from drafter_svc.drafter_names import DRAFTER_NAMES, MODEL_DRAFTERS
from drafter_svc.policies.policy_state import PolicyState
from drafter_svc.policies.registry import POLICY_NAMES
from drafter_svc.protocol import OVERLAP_MODES, Defaults
from drafter_svc.resumable_session import ResumePolicy
from drafter_svc.servicer import DrafterServicer
from drafter_svc.settings import DrafterSettings
from drafter_svc.verifier_pool import VerifierPool
from specdec import grpc_server, settings, tls
from specdec.auth import BearerTokenInterceptor, load_token
from specdec.client_limits import ClientStreamLimit
from specdec.cpu_pinning import pin_and_size_pool
from specdec.errors import FailedPrecondition
from specdec.metrics import DrafterMetrics, serve_metrics
from specdec.model_files import drafter_dir, tokenizer_dir
from specdec.tokenizer import Tokenizer
from specdec.v1 import drafter_pb2, drafter_pb2_grpc

ENV_PREFIX = "SPECDEC_DRAFTER_"
log = logging.getLogger(__name__)


def make_pool(config: DrafterSettings, tokenizer: Tokenizer) -> VerifierPool:
    """The verifier pool the settings describe (addresses, TLS to verifiers, polling)."""
    return VerifierPool(
        discovery_from_target(config.verifier, config.verifier_refresh_seconds),
        tokenizer,
        credentials=tls.channel_credentials(
            config.verifier_tls_ca_file, config.verifier_tls_cert_file, config.verifier_tls_key_file
        ),
        # Verdicts may carry a prompt's keys and values: larger than what clients may send.
        options=[
            *tls.channel_options(config.verifier_tls_server_name),
            *grpc_server.message_size_options(max(config.max_message_bytes, grpc_server.PROMPT_CACHE_MESSAGE_BYTES), config.max_message_bytes),
        ],
        poll_seconds=config.load_poll_seconds,
    )


async def run(config: DrafterSettings) -> None:
    tokenizer = Tokenizer(tokenizer_dir(config.model))
    pool = make_pool(config, tokenizer)
    metrics = DrafterMetrics()
    metrics.verifiers_ready.set_function(lambda: sum(m.ready for m in pool.members.values()))
    serve_metrics(metrics.registry, config.host, config.metrics_port)
    models = DrafterModels(
        {
            kind: Path(folder) if folder else drafter_dir(config.model, kind)
            for kind, folder in (("quantized", config.onnx_quantized_dir), ("small", config.onnx_small_dir))
        },
        tokenizer.fingerprint,
        config.onnx_threads,
        config.onnx_tail_mass,
        config.onnx_prompt_window,
        config.onnx_prompt_cache_tokens,
        config.onnx_prompt_from_verifier_tokens,
        target=config.model,
    )
    if not 0.0 <= config.onnx_tail_mass < 1.0:
        raise SystemExit(f"--onnx-tail-mass: must be in [0, 1), got {config.onnx_tail_mass}")
    if config.onnx_prompt_window < 0:
        raise SystemExit(f"--onnx-prompt-window: must be >= 0, got {config.onnx_prompt_window}")
    if config.onnx_prompt_cache_tokens < 0:
        raise SystemExit(f"--onnx-prompt-cache-tokens: must be >= 0, got {config.onnx_prompt_cache_tokens}")
    if config.onnx_prompt_from_verifier_tokens < 0:
        raise SystemExit(f"--onnx-prompt-from-verifier-tokens: must be >= 0, got {config.onnx_prompt_from_verifier_tokens}")
    if config.draft_policy not in POLICY_NAMES:
        raise SystemExit(f"--draft-policy: unknown policy {config.draft_policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    if config.overlap not in OVERLAP_MODES:
        raise SystemExit(f"--overlap: {config.overlap!r} is not one of {', '.join(OVERLAP_MODES)}")
    drafter = resolve_default_drafter(config.drafter, models)
    if drafter not in DRAFTER_NAMES:
        raise SystemExit(f"--drafter: unknown drafter {config.drafter!r}; choose auto or one of {', '.join(DRAFTER_NAMES)}")
    if drafter in MODEL_DRAFTERS:  # loaded now (checked), not by the first request
        try:
            load_built_model(drafter, models)
        except FailedPrecondition as error:
            raise SystemExit(f"--drafter {drafter}: {error}") from None
    log.info("default drafter: %s%s", drafter, " (auto)" if config.drafter == "auto" else "")
    defaults = Defaults(
        drafter, config.num_draft_tokens, config.max_tree_nodes, config.max_new_tokens_cap,
        config.draft_policy, config.overlap, config.max_prompt_tokens, config.model_num_draft_tokens, config.model_max_tree_nodes,
        busy_drafter="copy" if config.drafter == "auto" else "",
    )
    resume = ResumePolicy(config.resume_attempts, config.resume_backoff_seconds)
    servicer = DrafterServicer(
        pool, defaults, metrics, PolicyState(config.stop_threshold, config.load_weight), models, resume
    )
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if config.auth_token_file:
        interceptors.append(BearerTokenInterceptor(load_token(config.auth_token_file)))
    interceptors.append(ClientStreamLimit(config.max_streams_per_client))

    def add_services(server) -> list[str]:  # type: ignore[no-untyped-def]
        drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
        return [drafter_pb2.DESCRIPTOR.services_by_name["Drafter"].full_name]

    async def warm_up() -> None:  # SERVING once some verifier is ready and has our tokenizer
        pool.start()
        await pool.wait_ready()

    await grpc_server.serve(
        host=config.host,
        port=config.port,
        add_services=add_services,
        warm_up=warm_up,
        grace_seconds=config.grace_seconds,
        credentials=tls.server_credentials(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file),
        health_port=config.health_port,
        options=grpc_server.message_size_options(config.max_message_bytes),
        interceptors=interceptors,
    )


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s drafter %(levelname)s %(message)s")
    config = settings.parse(DrafterSettings, ENV_PREFIX, argv)
    config = dataclasses.replace(config, onnx_threads=pin_and_size_pool(config.cpus, config.onnx_threads, "onnxruntime"))
    asyncio.run(run(config))
