"""The benchmark zoo (shared/reference/baseline.md): each entry builds a model and its batches."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Classifier(nn.Module):
    """Model plus cross-entropy, so that every entry is `loss = model(x, y)`."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


class LeNet(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Dropout(dropout),
                                        nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class TransformerClassifier(nn.Module):
    def __init__(self, dropout, d_model=256, nhead=4, ff=2048, layers=2, classes=10):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


class LanguageModelHead(nn.Module):
    def __init__(self, vocab=4096, d=256):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab)

    def forward(self, tokens, targets):
        logits = self.out(F.gelu(self.norm(self.embed(tokens))))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _classifier_batch(x_shape, classes):
    def make(gen):
        return torch.randn(*x_shape, generator=gen), torch.randint(0, classes, (x_shape[0],), generator=gen)
    return make


ZOO = {
    "mlp_small": dict(
        title="MLP 784-512-256-10", batch=64,
        build=lambda dropout: Classifier(nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                                       nn.Linear(256, 10))),
        batch_fn=_classifier_batch((64, 784), 10)),
    "mlp_large": dict(
        title="MLP 1024-4096-4096-1024", batch=256,
        build=lambda dropout: Classifier(nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                                                       nn.ReLU(), nn.Linear(4096, 1024))),
        batch_fn=_classifier_batch((256, 1024), 1024)),
    "cnn": dict(
        title="LeNet CNN + BatchNorm + Dropout, 1x28x28", batch=64,
        build=lambda dropout: Classifier(LeNet(dropout)),
        batch_fn=_classifier_batch((64, 1, 28, 28), 10)),
    "transformer": dict(
        title="2-layer TransformerEncoder d256 h4 ff2048 seq128", batch=16,
        build=lambda dropout: Classifier(TransformerClassifier(dropout)),
        batch_fn=_classifier_batch((16, 128, 256), 10)),
    "lm_head": dict(
        title="Embedding(4096,256)+LayerNorm+GELU+Linear LM head, seq 64", batch=32,
        build=lambda dropout: LanguageModelHead(),
        batch_fn=lambda gen: (torch.randint(0, 4096, (32, 64), generator=gen),
                              torch.randint(0, 4096, (32, 64), generator=gen))),
}

DEFAULT_DROPOUT = {"cnn": 0.5, "transformer": 0.1}


def build(name, dropout=None):
    entry = ZOO[name]
    p = DEFAULT_DROPOUT.get(name, 0.0) if dropout is None else dropout
    return entry["build"](p)


def train_flops(name, model):
    """Approximate training FLOPs per step: 3x the forward's multiply-adds, times 2."""
    if name.startswith("mlp"):
        layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
        batch = ZOO[name]["batch"]
        return sum(6.0 * batch * m.in_features * m.out_features for m in layers)
    return None
