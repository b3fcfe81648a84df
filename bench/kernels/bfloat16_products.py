"""Kernel timing, not a bench row: the engine's bfloat16 products (one MatMul or Gemm node in an
InferenceSession: oneDNN's matmul primitive, or float32 where the CPU has no bfloat16
instructions) against torch.mm on the same bfloat16 operands, one thread, best of 8 in one
process, on llama_100m's layer and LM-head shapes. Run in a torch 2.x venv from the clone's root:

    PYTHONPATH=python ~/.cache/onnxtrain/torch-2.15.0/bin/python bench/kernels/bfloat16_products.py
    ONEDNN_MAX_CPU_ISA=AVX512_CORE PYTHONPATH=python ...   # a CPU without bfloat16 instructions
"""
import time

import torch
from onnx import TensorProto, helper

from onnxtrain import _C
from onnxtrain._engine import to_capsules


def best_of(fn, repeats=8):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def product(m, k, n, transposed_b):
    b_shape = [n, k] if transposed_b else [k, n]
    node = helper.make_node("Gemm" if transposed_b else "MatMul", ["A", "B"], ["Y"],
                            **({"transB": 1} if transposed_b else {}))
    graph = helper.make_graph([node], "product",
                              [helper.make_tensor_value_info("A", TensorProto.BFLOAT16, [m, k]),
                               helper.make_tensor_value_info("B", TensorProto.BFLOAT16, b_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.BFLOAT16, [m, n])])
    session = _C.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                                  .SerializeToString(), False, 0)
    a, b = torch.randn(m, k).bfloat16(), torch.randn(*b_shape).bfloat16()
    engine = best_of(lambda: session.run(to_capsules([a, b])))
    eager = best_of(lambda: torch.mm(a, b.t() if transposed_b else b))
    flops = 2 * m * n * k
    print(f"{'NT' if transposed_b else 'NN'} {m}x{n}x{k}: engine {flops / engine / 1e9:.0f} GFLOP/s "
          f"({engine * 1e3:.2f} ms), torch.mm {flops / eager / 1e9:.0f} GFLOP/s ({eager * 1e3:.2f} ms)")


if __name__ == "__main__":
    torch.set_num_threads(1)
    _C.set_num_threads(1)
    for m, k, n, transposed_b in [(1024, 768, 2048, True), (1024, 768, 768, True), (1024, 2048, 768, True),
                                  (1024, 768, 2048, False), (1024, 768, 32000, True)]:
        product(m, k, n, transposed_b)
