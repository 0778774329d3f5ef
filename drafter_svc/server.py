"""`specdec serve drafter`: load the tokenizer, connect to the verifier, serve Drafter."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from drafter_svc.draft_policy import POLICY_NAMES, PolicyState
from drafter_svc.protocol import Defaults
from drafter_svc.servicer import DrafterServicer
from drafter_svc.settings import DrafterSettings
from drafter_svc.verifier_link import VerifierLink
from specdec import grpc_server, settings
from specdec.model_files import tokenizer_dir
from specdec.tokenizer import Tokenizer
from specdec.v1 import drafter_pb2, drafter_pb2_grpc

ENV_PREFIX = "SPECDEC_DRAFTER_"
log = logging.getLogger(__name__)


async def run(config: DrafterSettings) -> None:
    tokenizer = Tokenizer(tokenizer_dir(config.model))
    link = VerifierLink(config.verifier, tokenizer)
    defaults = Defaults(
        config.drafter, config.num_draft_tokens, config.max_tree_nodes, config.max_new_tokens_cap,
        config.draft_policy, config.overlap,
    )
    if config.draft_policy not in POLICY_NAMES:
        raise SystemExit(f"--draft-policy: unknown policy {config.draft_policy!r}; choose one of {', '.join(POLICY_NAMES)}")
    servicer = DrafterServicer(link, defaults, PolicyState(config.stop_threshold, config.load_weight))

    def add_services(server) -> list[str]:  # type: ignore[no-untyped-def]
        drafter_pb2_grpc.add_DrafterServicer_to_server(servicer, server)
        return [drafter_pb2.DESCRIPTOR.services_by_name["Drafter"].full_name]

    async def warm_up() -> None:
        await link.connect()
        if link.mismatch:
            raise RuntimeError(link.mismatch)

    await grpc_server.serve(
        host=config.host, port=config.port, add_services=add_services, warm_up=warm_up, grace_seconds=config.grace_seconds
    )


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s drafter %(levelname)s %(message)s")
    asyncio.run(run(settings.parse(DrafterSettings, ENV_PREFIX, argv)))
