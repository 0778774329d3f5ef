#!/usr/bin/env bash
# The CUDA engine benchmarks and tests for a lent GPU machine (docs/benchmarks.md, section GPU),
# in two phases that fit one device call each. Run from the repository root with the project's
# dependencies importable:
#
#     OUT=bench/results/cuda bench/cuda_checks.sh engine    # about 5 minutes
#     OUT=bench/results/cuda bench/cuda_checks.sh tests     # about 4-5 minutes
#     OUT=bench/results/cuda bench/cuda_checks.sh check     # about 6 minutes
#     OUT=bench/results/cuda bench/cuda_checks.sh compare   # about 4 minutes
#     OUT=bench/results/cuda bench/cuda_checks.sh services  # about 2 minutes; needs py-spy on PATH
#
# engine: nvidia-smi.txt, then engine profiles (bench/engine.py) of the default model in
# bfloat16: graphs recorded with compiled layers (the default), in-process and through the
# services; graphs of the model as written, in-process; then a random-weight 1.07 B Llama
# (bench/random_model.py), in-process, compiled layers and the model as written. tests:
# tests/verifier_svc/test_cuda.py (float32, then bfloat16). check: nvidia-smi.txt, the default
# model's one-session profile with compiled layers (in-process and through the services), then tests.
# compare: nvidia-smi.txt, one-session profiles of the default model with compiled layers (in-process
# and through the services), then with compiled blocks (norms and MLPs, in-process). services:
# nvidia-smi.txt, then where both services spend a round of plain decoding outside the pass
# (bench/services_profile.py). Every step has its own time limit and the run goes on past a
# failed one.
set -u
phase=${1:?engine, tests, check, compare or services}
out=${OUT:-bench/results/cuda}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

step() {  # step SECONDS NAME COMMAND...: run with that time limit, output to $out/NAME
    local seconds=$1 name=$2; shift 2
    echo "== $name: $*" >&2
    local began=$SECONDS
    timeout "$seconds" "$@" > "$out/$name" 2>&1
    echo "== $name: exit $? after $((SECONDS - began)) s" | tee -a "$out/$name" >&2
}

engine=(python3 -m bench.engine --device cuda --dtype bfloat16 --batches 1 4 --max-new 8 --repeats 3)
large=(python3 -m bench.engine --device cuda --model /tmp/llama-1b --dtype bfloat16 --batches 1 4 --max-new 8 --repeats 3 --no-services)
machine() {  # nvidia-smi and the versions, to $out/nvidia-smi.txt
    nvidia-smi > "$out/nvidia-smi.txt" 2>&1
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" >> "$out/nvidia-smi.txt" 2>&1
}
profile() { step 150 engine-bfloat16-compiled.md env TORCH_LOGS=recompiles "${engine[@]}"; }
lone() {  # lone NAME SECONDS COMPILED [MORE...]: a one-session profile with --cuda-compiled COMPILED
    local name=$1 seconds=$2 compiled=$3; shift 3
    step "$seconds" "$name" env TORCH_LOGS=recompiles "${engine[@]}" --batches 1 --cuda-compiled "$compiled" "$@"
}
cuda_tests() { step 330 test_cuda.log python3 -m pytest tests/verifier_svc/test_cuda.py -s -q -p no:cacheprovider; }

case "$phase" in
engine)
    machine
    profile
    step 80 engine-bfloat16-graphs.md "${engine[@]}" --no-services --cuda-compiled none
    step 100 engine-llama-1b.md bash -c "python3 -m bench.random_model llama-1b /tmp/llama-1b && ${large[*]} && ${large[*]} --cuda-compiled none"
    ;;
tests) cuda_tests ;;
compare)
    machine
    lone engine-bfloat16-layers.md 200 layers
    lone engine-bfloat16-blocks.md 100 blocks --no-services
    ;;
services)
    machine
    step 150 services-profile.md python3 -m bench.services_profile --device cuda --dtype bfloat16 --seconds 15
    ;;
check)
    machine
    lone engine-bfloat16-layers.md 150 layers
    cuda_tests
    ;;
*) echo "phase: engine, tests, check, compare or services" >&2; exit 2 ;;
esac
