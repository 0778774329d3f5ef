"""onnxruntime's MatMulNBits (the drafters' int8 products) on this CPU: 1 and 8 rows through 30
[576, 3072] products quantized by MatMulNBitsQuantizer at 8 and 4 bits, blocks of 32 and 128,
int8 products (accuracy level 4) or float32 ones (0); 2 threads spinning, min of 3 blocks of 20.
Run on 2026-11-28 (onnxruntime 1.31.1, an AMD EPYC):
    flock -x /tmp/specdec-cpu.lock python bench/results/matmul_nbits_probe.py
Output: bench/results/matmul_nbits_probe-20261128.txt (docs/design/int8-drafter.md)."""
import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from matmul_chain import K, LAYERS, N, call_ms, chain, session

SETTINGS = ((8, 32, 4), (8, 128, 4), (4, 32, 4), (4, 128, 4), (8, 32, 0))  # bits, block, accuracy level


def quantized_session(base: onnx.ModelProto, bits: int, block: int, accuracy: int) -> ort.InferenceSession:
    quantizer = MatMulNBitsQuantizer(onnx.ModelProto.FromString(base.SerializeToString()), bits=bits, block_size=block, is_symmetric=True, accuracy_level=accuracy)
    quantizer.process()
    return session(quantizer.model.model)


def main() -> None:
    base = chain()
    sessions = {setting: quantized_session(base, *setting) for setting in SETTINGS}
    times: dict = {}
    for _ in range(3):
        for setting, session in sessions.items():
            for rows in (1, 8):
                x = np.random.randn(rows, K).astype(np.float32)
                times.setdefault((setting, rows), []).append(call_ms(session, x))
    for ((bits, block, accuracy), rows), values in sorted(times.items()):
        best, packed_mb = min(values), LAYERS * K * N * bits / 8 / 1e6
        print(f"bits {bits} block {block:3d} acc {accuracy} rows {rows}: {best:6.2f} ms ({packed_mb / best:.1f} GB/s of packed weights)")


if __name__ == "__main__":
    main()
