"""Probe (2026-11-29): one-token attention of 16 sessions, one torch SDPA call per session and
layer (as a batched pass runs it: verifier_svc/session_attention.py, the query heads of each
key/value head stacked as its rows: verifier_svc/attention.py) against one call per layer over a
slot pool, every session's cache one row of a [sessions, kv_heads, capacity, head_dim] buffer,
the unused tail of each row masked. SmolLM2-135M's shapes: 30 layers, 9 query heads over 3
key/value heads of 64. The two ways interleaved; medians of the repeats; outputs compared.

    flock /tmp/specdec-cpu.lock python bench/results/slot_pool_attention_probe.py
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

LAYERS, HEADS, KV_HEADS, DIM = 30, 9, 3, 64
GROUPS = HEADS // KV_HEADS


def main() -> None:
    torch.manual_seed(0)
    for sessions, cached, capacity in ((4, 300, 512), (16, 300, 512), (16, 1000, 2048), (32, 300, 512)):
        lengths = [cached + (37 * s) % 200 - 100 for s in range(sessions)]
        pool_k = torch.randn(LAYERS, sessions, KV_HEADS, capacity, DIM)
        pool_v = torch.randn(LAYERS, sessions, KV_HEADS, capacity, DIM)
        own_k = [[pool_k[l, s, :, : lengths[s]].clone().unsqueeze(0) for s in range(sessions)] for l in range(LAYERS)]
        own_v = [[pool_v[l, s, :, : lengths[s]].clone().unsqueeze(0) for s in range(sessions)] for l in range(LAYERS)]
        q = torch.randn(LAYERS, sessions, HEADS, DIM)
        mask = torch.full((sessions, 1, 1, capacity), float("-inf"))
        for s, n in enumerate(lengths):
            mask[s, :, :, :n] = 0.0

        def per_session() -> list[torch.Tensor]:
            outs = []
            for l in range(LAYERS):
                rows = []
                for s in range(sessions):
                    query = q[l, s].reshape(1, KV_HEADS, GROUPS, DIM)
                    rows.append(F.scaled_dot_product_attention(query, own_k[l][s], own_v[l][s], attn_mask=torch.zeros(1, 1, 1, lengths[s])))
                outs.append(torch.cat(rows))
            return outs

        def pooled() -> list[torch.Tensor]:
            outs = []
            for l in range(LAYERS):
                query = q[l].reshape(sessions, KV_HEADS, GROUPS, DIM)
                outs.append(F.scaled_dot_product_attention(query, pool_k[l], pool_v[l], attn_mask=mask))
            return outs

        longest = max(lengths)

        def pooled_to_longest() -> list[torch.Tensor]:  # the pool read up to the longest session only
            outs = []
            for l in range(LAYERS):
                query = q[l].reshape(sessions, KV_HEADS, GROUPS, DIM)
                outs.append(F.scaled_dot_product_attention(
                    query, pool_k[l, :, :, :longest], pool_v[l, :, :, :longest], attn_mask=mask[..., :longest]))
            return outs

        a, b, c = per_session(), pooled(), pooled_to_longest()
        diff = max(float((x - y).abs().max()) for x, y in [*zip(a, b), *zip(a, c)])
        ways = {"per session": per_session, "pool": pooled, "pool to the longest": pooled_to_longest}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(15):
            for name, run in ways.items():
                started = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - started)
        ms = {k: 1000 * statistics.median(v) for k, v in times.items()}
        print(f"{sessions} sessions, {min(lengths)}-{longest} cached (capacity {capacity}): per session "
              f"{ms['per session']:.1f} ms ({sessions * LAYERS} calls), pool {ms['pool']:.1f} ms, pool to the longest "
              f"{ms['pool to the longest']:.1f} ms ({LAYERS} calls each); max |difference| {diff:.1e}")


if __name__ == "__main__":
    main()
