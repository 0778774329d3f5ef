"""Measure the two numbers that size a deployment, on this machine's real services:

  c      the drafter's CPU seconds per round (target pass) over the verifier's seconds per round:
         the whole drafter process (tokenize, draft, gRPC, detokenize), read from /proc
  alpha  the acceptance rate (accepted / drafted tokens), and the mean acceptance length
         (tokens per target pass, 1 + accepted / rounds)

Usage: python deploy/measure_cost.py [--max-new-tokens 64] [--num-draft-tokens 8] [--drafter copy]
It starts a verifier and a drafter on loopback (specdec.launcher), runs the demo's prompts
greedily, and prints the measured figures; docs/deployment.md explains how to use them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from specdec.client import Client
from specdec.demo import PROMPTS
from specdec.launcher import LocalCluster


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-draft-tokens", type=int, default=8)
    parser.add_argument("--drafter", default="copy")
    args = parser.parse_args()
    with LocalCluster(Path(tempfile.mkdtemp(prefix="specdec-cost-"))) as cluster, Client(cluster.address) as client:
        client.generate("Hi", max_new_tokens=4)  # warm up both paths
        drafter_pid = cluster.drafter.process.pid
        start = cpu_seconds(drafter_pid)
        rounds = drafted = accepted = tokens = 0
        verify = wall = 0.0
        for prompt in PROMPTS.values():
            result = client.generate(
                messages=[{"role": "user", "content": prompt}], max_new_tokens=args.max_new_tokens, temperature=0.0,
                drafter=args.drafter, num_draft_tokens=args.num_draft_tokens,
            )
            s = result.stats
            rounds, drafted, accepted, tokens = rounds + s.rounds, drafted + s.drafted_tokens, accepted + s.accepted_tokens, tokens + s.generated_tokens
            verify, wall = verify + s.verify_seconds, wall + s.total_seconds
        drafter_cpu = cpu_seconds(drafter_pid) - start
    print(f"{len(PROMPTS)} prompts, {tokens} tokens, {rounds} rounds, {args.drafter} drafter, k={args.num_draft_tokens}")
    print(f"verifier seconds per round     {verify / rounds * 1000:8.1f} ms")
    print(f"drafter CPU seconds per round  {drafter_cpu / rounds * 1000:8.1f} ms")
    print(f"c (drafter CPU / verifier time) {drafter_cpu / verify:8.3f}")
    print(f"alpha (acceptance rate)         {accepted / max(drafted, 1):8.3f}")
    print(f"mean acceptance length          {1 + accepted / rounds:8.3f} tokens per target pass")
    print(f"tokens per second per session   {tokens / wall:8.1f}")


if __name__ == "__main__":
    main()
