"""Plain decoding through the services with passes run ahead (--ahead-passes true) against
without, alternated in one run: two clusters up side by side, one generation each in turn, the
order swapped every pair; prints each pair's decode ms/token (after the first token) and ratio.
`--hop-ms` puts a proxy between each drafter and its verifier that forwards every chunk that many
milliseconds late, each way (a network hop between pods; this host's loopback has no netem).

    PYTHONPATH=. python bench/results/ahead_pass_ab.py --pairs 12 --tokens 64
    PYTHONPATH=. python bench/results/ahead_pass_ab.py --verifier-arg=--cpus=1 --drafter-arg=--cpus=0
    PYTHONPATH=. python bench/results/ahead_pass_ab.py --hop-ms 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from specdec.client import Client
from specdec.launcher import Service

PROMPTS = [
    "Once upon a time, in a lighthouse on a rocky island far from the coast, there lived an old keeper who",
    "The old train station at the edge of the city had been closed for years, until one winter morning when",
    "In the spring of 1887, a young engineer named Clara arrived in the mountain village to",
]


def decode_ms(client: Client, prompt: str, tokens: int) -> float:
    stats = client.generate(prompt, max_new_tokens=tokens, num_draft_tokens=0, temperature=0.0).stats
    if stats.generated_tokens < tokens:  # an early end would time a few tokens as if they were all
        raise RuntimeError(f"the generation ended after {stats.generated_tokens} of {tokens} tokens: {prompt!r}")
    return 1000 * (stats.total_seconds - stats.time_to_first_token_seconds) / max(1, stats.generated_tokens - 1)


class DelayingProxy:
    """Forwards TCP on loopback to `port`, each chunk `delay_s` after it was read, in order."""

    def __init__(self, port: int, delay_s: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.port_to, self.delay_s = port, delay_s
        self.server = self.loop.run_until_complete(asyncio.start_server(self.connect, "127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port_to)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(1 << 16):
                self.loop.call_later(self.delay_s, sink.write, data)
            self.loop.call_later(self.delay_s, sink.close)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@contextlib.contextmanager
def cluster(logs: Path, verifier_args: list[str], drafter_args: list[str], hop_ms: float) -> Iterator[str]:
    """A verifier and a drafter (through a DelayingProxy where hop_ms > 0); yields the drafter's address."""
    logs.mkdir(parents=True)
    verifier = Service("verifier", verifier_args, logs / "verifier.log")
    drafter = None
    try:
        address = DelayingProxy(verifier.port, hop_ms / 1000).address if hop_ms > 0 else verifier.address
        drafter = Service("drafter", ["--verifier", address, *drafter_args], logs / "drafter.log")
        verifier.wait_serving(600)
        drafter.wait_serving(600)
        yield drafter.address
    finally:
        for service in (drafter, verifier):
            if service is not None:
                service.stop()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=12)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--verifier-arg", action="append", default=[], help="for both verifiers")
    p.add_argument("--drafter-arg", action="append", default=[], help="for both drafters (besides --drafter copy)")
    p.add_argument("--hop-ms", type=float, default=0.0, help="latency added each way between drafter and verifier")
    args = p.parse_args(argv)
    drafter = ["--drafter", "copy", *args.drafter_arg]
    with tempfile.TemporaryDirectory() as logs, contextlib.ExitStack() as stack:
        on, off = (
            stack.enter_context(cluster(Path(logs) / name, [*args.verifier_arg, "--ahead-passes", name], drafter, args.hop_ms))
            for name in ("true", "false")
        )
        with Client(on) as a, Client(off) as b:
            for client in (a, b):
                decode_ms(client, PROMPTS[0], 8)  # warm-up
            ratios = []
            print("| pair | prompt | ahead ms/token | without ms/token | ratio (without / ahead) |\n|---|---|---|---|---|")
            for i in range(args.pairs):
                prompt = PROMPTS[i % len(PROMPTS)]
                order = [(a, "on"), (b, "off")] if i % 2 == 0 else [(b, "off"), (a, "on")]
                ms = {name: decode_ms(client, prompt, args.tokens) for client, name in order}
                ratios.append(ms["off"] / ms["on"])
                print(f"| {i + 1} | {i % len(PROMPTS)} | {ms['on']:.2f} | {ms['off']:.2f} | {ratios[-1]:.3f} |", flush=True)
    print(f"\nmedian ratio {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) over {len(ratios)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
