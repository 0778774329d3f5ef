"""`specdec serve verifier`: load the target, then serve Verifier with health and reflection.

A process that cannot serve does not stay up: bad options, a model the verifier cannot serve
exactly and a load failure of any kind end it with exit status 1 and one line on stderr naming
the model and the reason (model_loader.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

import torch

from specdec import grpc_server, settings, tls
from specdec.cpu_pinning import pin_and_size_pool
from specdec.metrics import VerifierMetrics, serve_metrics
from specdec.sampling_params import SamplingParams
from specdec.tokenizer import Tokenizer
from specdec.v1 import verifier_pb2, verifier_pb2_grpc
from verifier_svc.backends.cuda import compiled_error
from verifier_svc.backends.pass_timing import PRICE_CONTEXT_TOKENS, time_lone_passes
from verifier_svc.backends.stored_steps import store_folder
from verifier_svc.batched_pass_timing import time_batched_passes
from verifier_svc.int8_weights import quantization_error, quantize_linear_layers
from verifier_svc.model_loader import ModelNotServable, one_line, open_model, placement_error, resolve_dtype, served_name
from verifier_svc.servicer import Batching, VerifierServicer
from verifier_svc.session import Limits, RoundInput, Session
from verifier_svc.settings import VerifierSettings
from verifier_svc.target_model import TargetModel

ENV_PREFIX = "SPECDEC_VERIFIER_"
# At shutdown, how long the scheduler's thread may take to end: once the model is ready, the
# pass in progress (a pass takes well under this); before, an idle thread (one loading the model
# is left running and the process exits without it).
PASS_WAIT_SECONDS = 5.0
IDLE_WORKER_SECONDS = 2.0
log = logging.getLogger(__name__)


def load_target(config: VerifierSettings) -> tuple[TargetModel, Tokenizer]:
    """Load the model and warm it up with one short round (first passes are slow).
    ModelNotServable (one line) if it cannot be loaded or served."""
    if config.torch_threads:
        torch.set_num_threads(config.torch_threads)
    model, folder = open_model(config.model, config.device, resolve_dtype(config.dtype, config.device, config.quantization), config.device_map)
    if config.quantization == "int8":  # before the backend looks for nn.Linear layers to lay out
        log.info("int8 weights: %d MB", quantize_linear_layers(model) >> 20)
    target = TargetModel(
        model, name=served_name(config.model), graphs=config.cuda_graphs, cuda_compiled=config.cuda_compiled,
        compiled_passes=config.cpu_compiled_passes, compiled_store=store_folder(config.cpu_compiled_pass_store),
        one_row_copies=config.cpu_one_row_copies, float32_copies=config.cpu_float32_copies, onnx_passes=config.cpu_onnx_passes,
        onednn_copies=config.cpu_onednn_copies,
    )
    tokenizer = Tokenizer(folder)
    limits = Limits(max_draft_tokens=3, max_draft_depth=2, context_length=target.context_length)
    warm = Session(target, tokenizer.encode("Hello"), SamplingParams(temperature=0.0), seed=0, limits=limits)
    for round_ in ([], [], [1, 2, 3], [1, 2, 3]):  # plain steps, then a small tree (two branches)
        warm.verify(RoundInput.point_masses(round_, [-1, 0, -1] if round_ else []))
    target.backend.prepare(target)
    if config.tune_pass_sizes:
        seconds = target.tune_pass_sizes()
        if seconds:
            log.info(
                "pass sizes on %s: %s ms for 1..%d tokens; passes padded to %s", target.backend.kind,
                [round(1000 * t, 1) for t in seconds], len(seconds), target.pass_tokens,
            )
    if not target.pass_seconds:  # not tuned: the round price still starts from this device's own passes
        target.pass_seconds, target.pass_context_tokens = time_lone_passes(target), PRICE_CONTEXT_TOKENS
    if config.tune_pass_sizes:  # else the lone passes' line prices shared passes until they run
        target.batched_pass_seconds = time_batched_passes(target)
        log.info("batched passes: %s ms for %s rows", [round(1000 * t, 1) for _, _, t in target.batched_pass_seconds], [r for r, _, _ in target.batched_pass_seconds])
    return target, tokenizer


async def run(config: VerifierSettings) -> None:
    metrics = VerifierMetrics(lambda: servicer.sessions.open, config.max_sessions, lambda: float(servicer.target is not None))
    batching = Batching(
        config.max_batch_tokens, config.max_wait_ms, config.max_pass_rows, config.max_kv_bytes, config.retry_after_ms, config.ahead_passes,
    )
    servicer = VerifierServicer(
        config.max_sessions, config.max_draft_tokens, config.max_draft_depth, config.context_length, batching, metrics,
        config.prefix_cache_tokens,
    )
    metrics.queue_depth.set_function(servicer.scheduler.depth)
    metrics.kv_tokens.set_function(servicer.sessions.kv_tokens)
    metrics.recorded_passes.set_function(lambda: servicer.target.backend.pass_counts()[0] if servicer.target else 0)
    metrics.replayed_passes.set_function(lambda: servicer.target.backend.pass_counts()[1] if servicer.target else 0)
    metrics.ahead_passes.set_function(lambda: servicer.scheduler.ahead.run)
    metrics.ahead_passes_used.set_function(lambda: servicer.scheduler.ahead.used)
    serve_metrics(metrics.registry, config.host, config.metrics_port)

    def add_services(server) -> list[str]:  # type: ignore[no-untyped-def]
        verifier_pb2_grpc.add_VerifierServicer_to_server(servicer, server)
        return [verifier_pb2.DESCRIPTOR.services_by_name["Verifier"].full_name]

    async def warm_up() -> None:
        # On the scheduler's thread, which runs every pass: one thread for all tensor work
        # (scheduler.py). Raising ends serve() and the process (main).
        try:
            target, tokenizer = await asyncio.wrap_future(servicer.scheduler.call(lambda: load_target(config)))
        except ModelNotServable:
            raise
        except Exception as error:  # noqa: BLE001 - the tokenizer or the warm-up round failed
            raise ModelNotServable(f"cannot serve model {config.model!r}: {one_line(error)}") from error
        servicer.set_ready(target, tokenizer)
        log.info("model %s ready (context %d): %s", target.name, servicer.limits.context_length, servicer.info.engine)

    try:
        await grpc_server.serve(
            host=config.host,
            port=config.port,
            add_services=add_services,
            warm_up=warm_up,
            grace_seconds=config.grace_seconds,
            credentials=tls.server_credentials(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file),
            health_port=config.health_port,
            options=grpc_server.message_size_options(
                config.max_message_bytes, max(config.max_message_bytes, grpc_server.PROMPT_CACHE_MESSAGE_BYTES)
            ),
        )
    finally:
        # The streams are done or cancelled, but the scheduler's thread may still be in a pass
        # (of a cancelled stream's round) or loading the model: it must leave torch before the
        # interpreter tears down (Scheduler.close). A pass is waited for; a load is not.
        wait = PASS_WAIT_SECONDS if servicer.target is not None else IDLE_WORKER_SECONDS
        started = time.perf_counter()
        ended = await asyncio.to_thread(servicer.scheduler.close, wait)
        log.info("target thread %s after %.2f s", "ended" if ended else "still running", time.perf_counter() - started)
    if not ended:
        _exit_now(f"the target thread is still {'in a pass' if servicer.target is not None else 'loading the model'}; exiting without it")


def _exit_now(reason: str) -> NoReturn:
    """End the process with status 0 without interpreter teardown, which would abort it while
    a thread is inside torch (Scheduler.close)."""
    log.warning("%s", reason)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def option_error(config: VerifierSettings) -> str | None:
    """The first option that cannot work, as `--flag: reason` (None: all can)."""
    try:
        resolve_dtype(config.dtype, config.device)
    except ValueError as error:
        return f"--dtype: {error}"
    quantization = quantization_error(config.quantization, config.device, config.dtype)
    if quantization:
        return f"--quantization: {quantization}"
    compiled = compiled_error(config.cuda_compiled)
    if compiled:
        return f"--cuda-compiled: {compiled}"
    placement = placement_error(config.device, config.device_map, torch.cuda.device_count() if config.device_map else 0)
    return f"--device-map: {placement}" if placement else None


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s verifier %(levelname)s %(message)s")
    config = settings.parse(VerifierSettings, ENV_PREFIX, argv)
    error = option_error(config)
    if error:
        sys.exit(f"verifier: {error}")
    config = dataclasses.replace(config, torch_threads=pin_and_size_pool(config.cpus, config.torch_threads, "torch"))
    try:
        asyncio.run(run(config))
    except ModelNotServable as failure:
        sys.exit(f"verifier: {failure}")
