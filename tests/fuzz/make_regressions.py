"""Writes the hand-made regression inputs of tests/fuzz/regressions/ (the crashes issue 11 found by
hand; the fuzzer's own finds are added as it writes them). Run with /usr/bin/python3."""
import os

import onnx
from onnx import TensorProto, helper

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions")


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


def save(name, m):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(m.SerializeToString())


def main():
    os.makedirs(HERE, exist_ok=True)
    save("conv_rank_mismatch.onnx", model([helper.make_node("Conv", ["x", "w"], ["y"])],
                                          [tensor("x", [1, 1, 5]), tensor("w", [1, 1, 3, 3])], [tensor("y", None)]))
    # QLinearConv's weight is its fourth input: x, x_scale, x_zero_point, w, w_scale, w_zero_point, ...
    u8, scale = TensorProto.UINT8, TensorProto.FLOAT
    save("qlinearconv_rank_mismatch.onnx",
         model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])],
               [tensor("x", [1, 1, 5], u8), tensor("xs", [], scale), tensor("xz", [], u8),
                tensor("w", [1, 1, 3, 3], u8), tensor("ws", [], scale), tensor("wz", [], u8),
                tensor("ys", [], scale), tensor("yz", [], u8)], [tensor("y", None, u8)]))
    save("conv_transpose_rank2_x.onnx", model([helper.make_node("ConvTranspose", ["x", "w"], ["y"])],
                                              [tensor("x", [1, 3]), tensor("w", [1, 2, 3, 3])], [tensor("y", None)]))
    save("conv_transpose_rank2_w.onnx", model([helper.make_node("ConvTranspose", ["x", "w"], ["y"])],
                                              [tensor("x", [1, 1, 3, 3]), tensor("w", [2, 3])], [tensor("y", None)]))
    save("layer_norm_rank0.onnx", model([helper.make_node("LayerNormalization", ["x", "s"], ["y"])],
                                        [tensor("x", []), tensor("s", [1])], [tensor("y", None)]))
    # Reshape to dims whose product wraps around int64, then a Transpose that would read wild memory.
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [7, 0x6DB6DB6DB6DB6DB7, -1])
    save("reshape_overflow.onnx", model([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                                         helper.make_node("Transpose", ["r"], ["y"], perm=[2, 1, 0])],
                                        [tensor("x", [3, 5, 6])], [tensor("y", None)], [shape]))


if __name__ == "__main__":
    main()
