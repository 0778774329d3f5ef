"""specdec: exact speculative decoding as two gRPC services, a drafter (the front door) and a
verifier (the target model)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import grpc

# numpy's BLAS (OpenBLAS) keeps its worker thread spinning for a while after each threaded call,
# such as the entropy of a flat q (a dot product of over 10,000 entries). In the drafter that
# spin ran during the verifier's target passes, on the cores the two services share: over a
# quarter of the drafted passes of a T=1 summarization took twice their time (measurement:
# docs/design/blas-thread.md). Neither service needs threaded numpy: their tensor work runs in
# torch and onnxruntime. Set before any command imports numpy; an explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# torch's OpenMP threads (libgomp) spin 300,000 rounds at each wait by default: beside another
# busy process on the same cores (a verifier starting, a drafter) they spin through their slices
# for a descheduled partner and both processes crawl. 10,000 rounds leave torch's passes as fast
# when alone (docs/design/openmp-spin.md). Read when torch loads; a user's GOMP_SPINCOUNT or
# OMP_WAIT_POLICY wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")


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


# What each command needs beyond the client install (pyproject's extras; specdec/extras.py).
_COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "serve verifier": ("verifier",),
    "serve drafter": ("drafter",),
    "serve openai": ("gateway",),
    "draft": ("build-drafter",),
    "demo": ("build-drafter",),
    "demo --no-build": ("drafter", "verifier"),
    "bench": ("all",),
    "bench-lossy": ("all",),
    "bench-drafter": ("drafter", "verifier"),
}


class _CommandListFormatter(argparse.HelpFormatter):
    """Each command and its help on one line: argparse measures the command names at the indent
    of the list's heading, one step left of where it prints them; this adds that step."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            self._action_max_length += self._indent_increment


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specdec", description=__doc__,
        formatter_class=_CommandListFormatter,
        epilog="Each command has its own --help. `pip install specdec` runs generate and health; the services "
               "need an extra: 'specdec[drafter]', 'specdec[verifier]', or 'specdec[all]' for every command.",
    )
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run a service: specdec serve {verifier,drafter,openai}", add_help=False)
    serve.add_argument("kind", choices=["verifier", "drafter", "openai"])

    gen = commands.add_parser("generate", help="stream a completion from a running drafter")
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

    check = commands.add_parser("health", help="exit 0 if a server reports SERVING (grpc.health.v1)")
    check.add_argument("--address", default="127.0.0.1:50051", help="the server's plaintext port (main or health port)")
    check.add_argument("--service", default="", help="service name to ask about ('' = the whole server)")
    check.add_argument("--timeout", type=float, default=3.0)

    demo = commands.add_parser("demo", help="start both services here; compare speculation on and off")
    demo.add_argument("--max-new-tokens", type=int, default=96)
    demo.add_argument("--num-draft-tokens", type=int, default=None, help="draft length (default: the drafter service's)")
    demo.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                      help="build the default onnx-quantized drafter first if it is not built (default: on; off: copy drafter)")
    demo.add_argument("--verbose", action="store_true", help="show the output of every step, third-party logs included")

    commands.add_parser("bench", help="speed and acceptance on Spec-Bench, beside peers", add_help=False)
    commands.add_parser("bench-lossy", help="exact vs. lossy acceptance rules on Spec-Bench", add_help=False)
    commands.add_parser("bench-drafter", help="cost and acceptance of the ONNX drafters", add_help=False)
    commands.add_parser("draft", help="build an ONNX drafter (specdec draft build --help)",
                        add_help=False)
    return parser


def _missing_extras(args: argparse.Namespace, rest: Sequence[str]) -> str | None:
    """The one-line answer for a command whose extra is not installed; None if it can run."""
    from specdec.extras import needs_extras_message

    if "-h" in rest or "--help" in rest:
        return None  # help needs nothing more
    command = args.command
    if command == "serve":
        command = f"serve {args.kind}"
    elif command == "demo" and not args.build:
        command = "demo --no-build"
    extras = _COMMAND_EXTRAS.get(command)
    return needs_extras_message(f"specdec {command}", extras) if extras else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "draft" and (not rest or rest[0] not in ("build", "-h", "--help")):
        parser.error("usage: specdec draft build {quantized,small} [--out DIR] [--force] (specdec draft build --help)")
    if message := _missing_extras(args, rest):
        print(message, file=sys.stderr)
        return 2
    if args.command == "draft":
        return _draft_build(rest[1:] if rest[0] == "build" else rest)
    if args.command == "serve":
        if args.kind == "verifier":
            from verifier_svc.server import main as serve_main
        elif args.kind == "openai":  # the OpenAI-compatible HTTP gateway in front of the drafters
            from gateway_svc.server import main as serve_main
        else:
            from drafter_svc.server import main as serve_main
        serve_main(rest)
        return 0
    if args.command in ("bench", "bench-drafter", "bench-lossy"):
        return _bench(args.command, rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "generate":
        return _generate(args)
    if args.command == "health":
        return _health(args)
    from specdec.demo import main as demo_main

    return demo_main(args.max_new_tokens, args.num_draft_tokens, args.build, args.verbose)


def _draft_build(rest: Sequence[str]) -> int:
    """`specdec draft build`: one progress line, the build's logs in a file shown only if it fails
    (--verbose: shown as they come); the built folder on stdout."""
    from drafter_build.build import main as build_main  # torch + transformers: only here
    from specdec.progress import StepFailed, quiet_step

    if "-h" in rest or "--help" in rest:
        return build_main(rest)
    verbose = "--verbose" in rest
    rest = [a for a in rest if a != "--verbose"]
    log_path = Path(tempfile.mkdtemp(prefix="specdec-draft-build-")) / "build.log"
    label = f"building the {next((a for a in rest if a in ('quantized', 'small')), 'quantized')} drafter"
    try:
        with quiet_step(label, log_path, verbose, keep_stdout=True):
            code = build_main(rest)
    except StepFailed as failed:
        return failed.code
    return code


def _bench(command: str, rest: Sequence[str]) -> int:
    """Run a benchmark command; missing prompt files end it with one line, not a traceback."""
    from bench.prompts import PromptsNotFound

    try:
        if command == "bench":
            from bench.spec_bench import main as bench_main

            return bench_main(rest)
        if command == "bench-drafter":
            from bench.drafter_quality import main as drafter_bench_main

            return drafter_bench_main(rest)
        from bench.lossy_bench import main as lossy_bench_main

        return lossy_bench_main(rest)
    except PromptsNotFound as error:
        print(f"specdec {command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
