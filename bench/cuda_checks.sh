#!/usr/bin/env bash
# The CUDA tests and engine benchmarks in one run, for a lent GPU machine (docs/benchmarks.md,
# section GPU). Run from the repository root with the project's dependencies importable:
#
#     OUT=bench/results/cuda bench/cuda_checks.sh [SECONDS_PER_BENCHMARK]
#
# Writes into $OUT: nvidia-smi.txt, test_cuda.log (tests/verifier_svc/test_cuda.py), and one
# engine profile per configuration (bench/engine.py): the default model in bfloat16 with and
# without CUDA graphs, through the services too; a random-weight 1.07 B Llama
# (bench/random_model.py) in bfloat16 with and without graphs, in-process; last, the default
# model in float32 with graphs. Every step has its own time limit (the tests 400 s; they took
# over 200 s on an H200) and the run goes on past a failed one: about 9 minutes.
set -u
out=${OUT:-bench/results/cuda}
limit=${1:-110}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" >> "$out/nvidia-smi.txt" 2>&1

step() {  # step SECONDS NAME COMMAND...: run with that time limit, output to $out/NAME
    local seconds=$1 name=$2; shift 2
    echo "== $name: $*" >&2
    local began=$SECONDS
    timeout "$seconds" "$@" > "$out/$name" 2>&1
    echo "== $name: exit $? after $((SECONDS - began)) s" | tee -a "$out/$name" >&2
}

step 400 test_cuda.log python3 -m pytest tests/verifier_svc/test_cuda.py -s -q -p no:cacheprovider
engine=(python3 -m bench.engine --device cuda --batches 1 4 16 --max-new 16 --repeats 3)
step "$limit" engine-bfloat16-graphs.md "${engine[@]}" --dtype bfloat16
step "$limit" engine-bfloat16-eager.md "${engine[@]}" --dtype bfloat16 --no-graphs
large=(python3 -m bench.engine --device cuda --model /tmp/llama-1b --dtype bfloat16 --batches 1 4 --max-new 8 --repeats 3 --no-services)
step "$limit" engine-llama-1b.md bash -c "python3 -m bench.random_model llama-1b /tmp/llama-1b && ${large[*]} && ${large[*]} --no-graphs"
step "$limit" engine-float32-graphs.md "${engine[@]}" --dtype float32
