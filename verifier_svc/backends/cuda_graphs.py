"""Lone passes recorded once as CUDA graphs and replayed: one launch per pass instead of hundreds.

On a GPU a small model's eager pass is bound by Python and kernel launches, not by the device
(SmolLM2-135M on an H100: 30-45 ms a pass of any size, for a few milliseconds of kernels). A
static pass (static_pass.py) has every tensor at a fixed shape and address, so its forward is
recorded once per slot, size and key length (torch.cuda.CUDAGraph) and each pass replays it after loading
its inputs. All graphs of one model share one memory pool (the backend's): passes run one at a
time, on the scheduler's one thread, and each graph's output stays referenced by its runner. A
pool is not shared across models: once one model's graphs are freed its pool's handle is spent
(torch 2.11's allocator asserts when a later capture names it).
"""

from __future__ import annotations

import torch

from verifier_svc.static_pass import StaticPass

# Eager runs before recording (torch's advice: lazy initializations and kernel choices happen
# outside the graph, on a side stream).
WARMUP_RUNS = 2


class GraphRunner:
    """A StaticPass recorded as a CUDA graph; `run` replays it over the loaded inputs."""

    recorded = 0  # graphs recorded by this process
    replays = 0  # passes replayed by this process

    def __init__(self, static: StaticPass, pool: tuple[int, int]) -> None:
        """Record `static`'s forward into the memory pool `pool` (torch.cuda.graph_pool_handle())."""
        self.static = static
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                static.forward()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.logits = static.forward()
        GraphRunner.recorded += 1

    def run(self) -> torch.Tensor:
        GraphRunner.replays += 1
        self.graph.replay()
        return self.logits
