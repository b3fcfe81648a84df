#pragma once
// torch exports some tensor code through ONNX sequences: x.chunk(n, dim) over a dynamic dim is
// SplitToSequence followed by SequenceAt at constant positions. Gradients cannot flow through a
// sequence value, so at load these patterns become the tensor ops they stand for (Slice,
// Concat, Identity), which have gradient rules. What stays a sequence runs forward only.
#include "ir/graph.h"

namespace onnxtrain {

// Rewrites, in `graph` and its bodies:
//   SequenceAt(SplitToSequence(x, split), p)      -> Slice of x (p a constant)
//   SequenceAt(SequenceConstruct(a0, a1, ...), p) -> Identity(a_p)
//   SequenceLength(SequenceConstruct(k values))  -> the constant k
//   ConcatFromSequence(SequenceConstruct(...))    -> Concat (Unsqueeze first for new_axis)
// and drops the sequence producers nothing reads any more. Returns the number of rewrites.
int lower_sequences(Graph& graph);

}  // namespace onnxtrain
