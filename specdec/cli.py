"""The `specdec` command: serve either service, generate from a running drafter, demo, bench."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import grpc

# numpy's BLAS (OpenBLAS) keeps its worker thread spinning for a while after each threaded call,
# such as the entropy of a flat q (a dot product of over 10,000 entries). In the drafter that
# spin ran during the verifier's target passes, on the cores the two services share: over a
# quarter of the drafted passes of a T=1 summarization took twice their time (README, "A
# spinning BLAS thread"). Neither service needs threaded numpy: their tensor work runs in torch
# and onnxruntime. Set before any command imports numpy; an explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _generate(args: argparse.Namespace) -> int:
    from specdec.auth import load_token
    from specdec.client import Client
    from specdec.penalties import Penalties
    from specdec.tls import channel_credentials

    credentials = channel_credentials(args.tls_ca_file, args.tls_cert_file, args.tls_key_file)
    token = load_token(args.token_file).decode() if args.token_file else None
    with Client(args.address, credentials=credentials, token=token) as client:
        try:
            for chunk in client.stream(
                None if args.chat else args.prompt,
                messages=[{"role": "user", "content": args.prompt}] if args.chat else None,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                top_k=args.top_k,
                top_p=args.top_p,
                seed=args.seed,
                stop=args.stop,
                drafter=args.drafter,
                num_draft_tokens=args.num_draft_tokens,
                max_tree_nodes=args.max_tree_nodes,
                acceptance=args.acceptance,
                draft_policy=args.draft_policy,
                overlap=args.overlap,
                json_schema=_read_arg(args.json_schema),
                regex=args.regex,
                grammar=_read_arg(args.grammar),
                penalties=Penalties(args.repetition_penalty, args.frequency_penalty, args.presence_penalty, min_tokens=args.min_tokens),
            ):
                sys.stdout.write(chunk.text)
                sys.stdout.flush()
                if chunk.stats:
                    s = chunk.stats
                    print(
                        f"\n[{chunk.finish_reason}] {s.generated_tokens} tokens in {s.total_seconds:.2f} s "
                        f"({s.tokens_per_second:.1f} tok/s), {s.rounds} target passes, "
                        f"acceptance {s.acceptance_rate:.2f}, mean acceptance length {s.mean_acceptance_length:.2f}, "
                        f"rule {s.acceptance_rule}, "
                        f"policy {s.draft_policy}{' with overlap' if s.overlap else ''}",
                        file=sys.stderr,
                    )
        except grpc.RpcError as error:
            print(f"\nerror: {error.code().name}: {error.details()}", file=sys.stderr)
            return 1
    return 0


def _read_arg(value: str | None) -> str | None:
    """A flag's value, or the contents of the file it names after '@'."""
    if value is not None and value.startswith("@"):
        with open(value[1:], encoding="utf-8") as f:
            return f.read()
    return value


def _health(args: argparse.Namespace) -> int:
    """Exit 0 if the server's grpc.health.v1 says SERVING (a container HEALTHCHECK)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(args.address) as channel:
        try:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout).status
        except grpc.RpcError as error:
            print(f"{args.address}: {error.code().name}", file=sys.stderr)
            return 1
    print(f"{args.address}: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}")
    return 0 if status == health_pb2.HealthCheckResponse.SERVING else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run a service (flags: specdec serve KIND --help)", add_help=False)
    serve.add_argument("kind", choices=["verifier", "drafter"])

    gen = commands.add_parser("generate", help="generate from a running drafter, streaming to the terminal")
    gen.add_argument("prompt")
    gen.add_argument("--address", default="127.0.0.1:50051", help="the drafter service")
    gen.add_argument("--chat", action="store_true", help="send the prompt as one user chat message")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stop", action="append", default=[])
    gen.add_argument("--drafter", default="", help="copy, ngram, onnx-quantized, onnx-small or hybrid (default: the server's)")
    gen.add_argument("--num-draft-tokens", type=int, default=None, help="draft length (tree depth); 0 disables speculation")
    gen.add_argument("--max-tree-nodes", type=int, default=None, help="tree nodes per round (= draft length: a chain)")
    gen.add_argument("--draft-policy", default="", help="auto, fixed, leviathan, specdec++ or copy-confidence (default: the server's)")
    gen.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                     help="draft the next round while the verifier checks this one (default: the server's)")
    gen.add_argument("--acceptance", default=None, metavar="RULE",
                     help="exact (default), or opt-in lossy lenient:L (L in (0, 1]) or mentored:D (KL budget D >= 0, "
                          "temperature > 0)")
    constraint = gen.add_mutually_exclusive_group()
    constraint.add_argument("--json-schema", default=None, help="constrain the output to this JSON Schema (JSON text, or @FILE)")
    constraint.add_argument("--regex", default=None, help="constrain the output to match this regular expression")
    constraint.add_argument("--grammar", default=None, help="constrain the output to this Lark/EBNF grammar (text, or @FILE)")
    gen.add_argument("--repetition-penalty", type=float, default=1.0, help="transformers' repetition penalty (1: none)")
    gen.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI's frequency penalty, [-2, 2]")
    gen.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI's presence penalty, [-2, 2]")
    gen.add_argument("--min-tokens", type=int, default=0, help="no end of sequence before this many tokens")
    gen.add_argument("--tls-ca-file", default="", help="PEM CA to check the drafter with: use TLS")
    gen.add_argument(
        "--token-file", default=os.environ.get("SPECDEC_TOKEN_FILE", ""),
        help="file holding the bearer token the drafter requires (env SPECDEC_TOKEN_FILE)",
    )
    gen.add_argument("--tls-cert-file", default="", help="PEM client certificate (mutual TLS)")
    gen.add_argument("--tls-key-file", default="", help="PEM private key of --tls-cert-file")

    check = commands.add_parser("health", help="check a server's grpc.health.v1 status (plaintext); exit 0 if SERVING")
    check.add_argument("--address", default="127.0.0.1:50051", help="the server's plaintext port (main or health port)")
    check.add_argument("--service", default="", help="service name to ask about ('' = the whole server)")
    check.add_argument("--timeout", type=float, default=3.0)

    demo = commands.add_parser("demo", help="start both services locally and compare speculation on and off")
    demo.add_argument("--max-new-tokens", type=int, default=96)
    demo.add_argument("--num-draft-tokens", type=int, default=None, help="draft length (default: the drafter service's)")
    demo.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                      help="build the default onnx-quantized drafter first if it is not built (default: on; off: copy drafter)")

    commands.add_parser("bench", help="benchmark on ../shared/bench (flags: specdec bench --help)", add_help=False)
    commands.add_parser("bench-lossy", help="exact vs. lossy acceptance rules on ../shared/bench (flags: specdec bench-lossy --help)",
                        add_help=False)

    commands.add_parser("bench-drafter", help="c and alpha of the ONNX drafters against the target (flags: specdec bench-drafter --help)",
                        add_help=False)
    commands.add_parser("draft", help="offline drafter models: specdec draft build {quantized,small} (needs torch; --help)",
                        add_help=False)

    args, rest = parser.parse_known_args(argv)
    if args.command == "draft":
        if not rest or rest[0] != "build":
            parser.error("usage: specdec draft build {quantized,small} [--out DIR] [--force] (specdec draft build --help)")
        from drafter_build.build import main as build_main  # torch + transformers: only here

        return build_main(rest[1:])
    if args.command == "serve":
        if args.kind == "verifier":
            from verifier_svc.server import main as serve_main
        else:
            from drafter_svc.server import main as serve_main
        serve_main(rest)
        return 0
    if args.command == "bench":
        from bench.spec_bench import main as bench_main

        return bench_main(rest)
    if args.command == "bench-drafter":
        from bench.drafter_quality import main as drafter_bench_main

        return drafter_bench_main(rest)
    if args.command == "bench-lossy":
        from bench.lossy_bench import main as lossy_bench_main

        return lossy_bench_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "generate":
        return _generate(args)
    if args.command == "health":
        return _health(args)
    from specdec.demo import main as demo_main

    return demo_main(args.max_new_tokens, args.num_draft_tokens, args.build)


if __name__ == "__main__":
    sys.exit(main())
