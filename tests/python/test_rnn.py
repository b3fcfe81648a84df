"""nn.LSTM, nn.GRU and nn.RNN through onnxtrain (ONNX LSTM/GRU/RNN and their Grad ops) against
PyTorch eager: outputs, final states, every parameter gradient, input and initial-state
gradients, and optimizer steps."""
import pytest
import torch
import torch.nn as nn

import onnxtrain
from conftest import assert_engine_ran, torch_export_capture
from parity import train_and_compare

I, H = 5, 6


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Recurrent(nn.Module):
    """Returns (output, h_n[, c_n]); takes the initial state as extra inputs when given."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *state):
        if state:
            out, hidden = self.rnn(x, state if isinstance(self.rnn, nn.LSTM) else state[0])
        else:
            out, hidden = self.rnn(x)
        return (out,) + (hidden if isinstance(hidden, tuple) else (hidden,))


def weighted_sum(outputs, _):
    """A loss that reaches every element of every output with a different weight."""
    return sum((o * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum() for o in outputs)


def batches(rnn, seq=4, batch=3, with_state=False, seeds=(1, 2)):
    directions = 2 if rnn.bidirectional else 1
    steps = []
    for seed in seeds:
        x = randn(batch, seq, I, seed=seed) if rnn.batch_first else randn(seq, batch, I, seed=seed)
        inputs = (x,)
        if with_state:
            state_shape = (rnn.num_layers * directions, batch, H)
            inputs += (randn(*state_shape, seed=seed + 10),)
            if isinstance(rnn, nn.LSTM):
                inputs += (randn(*state_shape, seed=seed + 20),)
        steps.append(inputs)
    return lambda step: (steps[step % len(steps)], None)


CONFIGS = [
    dict(),
    dict(bidirectional=True),
    dict(num_layers=2, batch_first=True),
    dict(num_layers=2, bidirectional=True, with_state=True),
    dict(batch_first=True, with_state=True, bias=False),
]


def config_id(c):
    return ",".join(f"{k}" if v is True else f"{k}={v}" for k, v in c.items()) or "default"


def make(kind, config, **extra):
    kwargs = {k: v for k, v in config.items() if k != "with_state"}
    kwargs.update(extra)
    torch.manual_seed(0)
    return getattr(nn, kind)(I, H, **kwargs)


@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_lstm_and_gru_train_like_eager(kind, config):
    rnn = make(kind, config)
    train_and_compare(Recurrent(rnn), batches(rnn, with_state=config.get("with_state", False)), weighted_sum,
                      steps=2, input_grad=True)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("config", [dict(), dict(num_layers=2, bidirectional=True, batch_first=True, with_state=True)],
                         ids=config_id)
def test_rnn_tanh_and_relu_train_like_eager(nonlinearity, config):
    rnn = make("RNN", config, nonlinearity=nonlinearity)
    train_and_compare(Recurrent(rnn), batches(rnn, with_state=config.get("with_state", False)), weighted_sum,
                      steps=2, input_grad=True)


def test_adam_steps_on_a_sequence_classifier():
    torch.manual_seed(0)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(I, H, num_layers=2, batch_first=True)
            self.head = nn.Linear(H, 3)

        def forward(self, x, y):
            out, _ = self.lstm(x)
            return nn.functional.cross_entropy(self.head(out[:, -1]), y)

    y = torch.tensor([0, 2, 1, 1])
    data = lambda step: ((randn(4, 7, I, seed=step % 2), y), None)  # noqa: E731
    train_and_compare(Classifier(), data, steps=4, optimizer="adam", lr=0.01, input_grad=True)


def test_eval_mode_skips_inter_layer_dropout():
    rnn = make("LSTM", dict(num_layers=2), dropout=0.5)
    module = Recurrent(rnn).eval()
    train_and_compare(module, batches(rnn), weighted_sum, steps=2, input_grad=True)


def test_inter_layer_dropout_in_training_mode_is_refused_clearly():
    # torch 1.13's exporter cannot export an LSTM's dropout in training mode.
    rnn = make("LSTM", dict(num_layers=2), dropout=0.5)
    model = onnxtrain.ORTModule(Recurrent(rnn))
    if torch_export_capture():  # the dynamo exporter writes one LSTM per layer, Dropout between
        out = model(randn(4, 3, I))
        assert_engine_ran(out[0] if isinstance(out, tuple) else out)
        return
    with pytest.raises(RuntimeError, match="dropout in training mode"):
        model(randn(4, 3, I))


class Packed(nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, hidden = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return (out,) + (hidden if isinstance(hidden, tuple) else (hidden,))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_packed_sequences_of_unequal_lengths(kind):
    # Y past each sequence's length is zero and h_n is the state at its last valid step, in
    # both directions (the reverse one runs each sequence backwards from its own end).
    rnn = make(kind, dict(bidirectional=True, batch_first=True))
    lengths = torch.tensor([3, 5, 1, 4])
    data = lambda step: ((randn(4, 5, I, seed=step), lengths), None)  # noqa: E731
    train_and_compare(Packed(rnn), data, weighted_sum, steps=2, input_grad=True)
