"""The TorchScript capture backend (see trace.py). Available on every torch this package supports;
on torch 2.x it is the exporter that torch deprecates."""
NAME = "torchscript"


def export_once(module, tensors, input_schema, training):
    # Imported on the first export, which runs in a forked child (capture/common.py): the tracer
    # brings the onnx package and protobuf, which the training process itself never needs.
    from .trace import export_once as export

    return export(module, tensors, input_schema, training)


def unavailable_reason():
    return None


__all__ = ["NAME", "export_once", "unavailable_reason"]
