"""CNNs and Transformers trained through onnxtrain match PyTorch over several optimizer steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from parity import train_and_compare


def batches(shape, classes, seed=0, count=8):
    gen = torch.Generator().manual_seed(seed)
    data = [((torch.randn(*shape, generator=gen),), torch.randint(0, classes, (shape[0],), generator=gen))
            for _ in range(count)]
    return lambda step: data[step]


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 5 * 5, 64), nn.ReLU(), nn.Dropout(0.0),
                                        nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def test_lenet_with_batchnorm_pooling_and_dropout():
    torch.manual_seed(0)
    train_and_compare(LeNet(), batches((8, 1, 28, 28), 10), F.cross_entropy, steps=5, input_grad=True)


class BasicBlock(nn.Module):
    def __init__(self, channels, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels * stride, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels * stride)
        self.conv2 = nn.Conv2d(channels * stride, channels * stride, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels * stride)
        self.shortcut = nn.Sequential()
        if stride != 1:
            self.shortcut = nn.Sequential(nn.Conv2d(channels, channels * stride, 1, stride, bias=False),
                                          nn.BatchNorm2d(channels * stride))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetTiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(8), BasicBlock(8, stride=2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def test_resnet_basic_blocks():
    torch.manual_seed(1)
    train_and_compare(ResNetTiny(), batches((4, 3, 16, 16), 5, seed=1), F.cross_entropy, steps=5)


class TransformerClassifier(nn.Module):
    def __init__(self, vocab=50, d_model=32, classes=4, norm_first=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True,
                                           norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens, padding_mask):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=padding_mask)
        keep = (~padding_mask).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


def token_batches(seed=2, batch=4, seq=7, vocab=50, classes=4):
    gen = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(6):
        tokens = torch.randint(0, vocab, (batch, seq), generator=gen)
        lengths = torch.randint(3, seq + 1, (batch,), generator=gen)
        mask = torch.arange(seq).unsqueeze(0) >= lengths.unsqueeze(1)
        data.append(((tokens, mask), torch.randint(0, classes, (batch,), generator=gen)))
    return lambda step: data[step]


def test_two_layer_transformer_encoder_classifier_with_padding_mask():
    torch.manual_seed(2)
    train_and_compare(TransformerClassifier(), token_batches(), F.cross_entropy, steps=5, lr=0.02)


def test_transformer_encoder_norm_first():
    torch.manual_seed(3)
    train_and_compare(TransformerClassifier(norm_first=True), token_batches(seed=3), F.cross_entropy, steps=5,
                      lr=0.02)


class LanguageModelHead(nn.Module):
    """Embedding + LayerNorm + GELU + Linear, with the loss computed inside the module."""

    def __init__(self, vocab=64, d=16, ignore_index=0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=3)
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d)
        self.out = nn.Linear(d, vocab)
        self.loss = nn.CrossEntropyLoss(ignore_index=ignore_index)

    def forward(self, tokens, targets):
        h = F.gelu(self.proj(self.norm(self.embed(tokens))))
        logits = self.out(h)
        return self.loss(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def test_language_model_head_with_loss_inside():
    torch.manual_seed(4)
    gen = torch.Generator().manual_seed(4)
    data = []
    for _ in range(6):
        tokens = torch.randint(0, 64, (3, 9), generator=gen)
        tokens[0, :2] = 3  # padding_idx rows must keep a zero gradient
        targets = torch.randint(0, 64, (3, 9), generator=gen)
        targets[1, 4:] = 0  # ignored positions
        data.append(((tokens, targets), None))
    model, ref = train_and_compare(LanguageModelHead(), lambda step: data[step], None, steps=5, lr=0.1)
    assert not model.module.embed.weight.grad[3].any()


def test_dropout_in_training_is_statistically_right_and_masks_its_gradient():
    torch.manual_seed(5)
    import onnxtrain

    p = 0.3
    model = onnxtrain.ORTModule(nn.Dropout(p))
    x = (torch.rand(200, 500) + 0.5).requires_grad_()
    y = model(x)
    zero = y == 0
    fraction = zero.float().mean().item()
    assert abs(fraction - p) < 0.01, fraction  # 100000 draws: the standard error is 0.0015
    torch.testing.assert_close(y[~zero], x[~zero] / (1 - p))
    y.backward(torch.ones_like(y))
    assert torch.equal(x.grad == 0, zero)
    torch.testing.assert_close(x.grad[~zero], torch.full_like(x.grad[~zero], 1 / (1 - p)))
    # torch.manual_seed makes the mask repeatable; a new step draws a new mask.
    torch.manual_seed(7)
    a = model(x)
    b = model(x)
    torch.manual_seed(7)
    assert torch.equal(model(x), a)
    assert not torch.equal(a, b)
    # Eval mode: the identity.
    model.eval()
    assert torch.equal(model(x), x)
