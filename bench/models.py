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


class LstmLanguageModel(nn.Module):
    """Next-token model: embedding, a 2-layer LSTM, a projection to the vocabulary. Dropout sits
    outside the LSTM (torch cannot export an LSTM's inter-layer dropout in training mode)."""

    def __init__(self, dropout, vocab=2048, d=512, hidden=512, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(d, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens, targets):
        h, _ = self.lstm(self.drop(self.embed(tokens)))
        logits = self.out(self.drop(h))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _classifier_batch(x_shape, classes):
    def make(gen):
        return torch.randn(*x_shape, generator=gen), torch.randint(0, classes, (x_shape[0],), generator=gen)
    return make


def _torchvision(make, shape, classes=10):
    """A torchvision model with its classifier, random init; dropout as the zoo entry says."""
    def build(dropout):
        import torchvision  # deferred: the MLP entries do not need it

        net = make(torchvision, classes)
        for m in net.modules():
            if isinstance(m, nn.Dropout):
                m.p = dropout
        return Classifier(net)
    return dict(build=build, batch_fn=_classifier_batch(shape, classes), batch=shape[0])


def _vit(tv, classes):
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=64, patch_size=8, num_layers=6, num_heads=6, hidden_dim=384, mlp_dim=1536,
                             num_classes=classes)


class HuggingFaceLoss(nn.Module):
    """A transformers model from its config (random init, nothing downloaded), returning the loss
    it computes itself from the labels, as HF training loops use it."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


def _huggingface(make, batch, seq, vocab, labels):
    """make(transformers, dropout) -> model; labels: "classes:N" or "tokens"."""
    def build(dropout):
        import transformers  # deferred: only these entries need it
        return HuggingFaceLoss(make(transformers, dropout))

    def batch_fn(gen):
        ids = torch.randint(0, vocab, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[batch // 2:, seq - seq // 8:] = 0  # real padding on half the rows
        if labels == "tokens":
            target = ids.masked_fill(mask == 0, -100)
        else:
            target = torch.randint(0, int(labels.split(":")[1]), (batch,), generator=gen)
        return ids, mask, target
    return dict(build=build, batch_fn=batch_fn, batch=batch)


def _bert_base(tf, dropout):
    config = tf.BertConfig(num_labels=2, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return tf.BertForSequenceClassification(config)


def _gpt2_small(tf, dropout):
    config = tf.GPT2Config(resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return tf.GPT2LMHeadModel(config)


def _llama_100m(tf, dropout):
    # Llama's architecture at about 100M parameters: 8 layers of d768 (12 heads, SwiGLU 2048) and an
    # untied 32000-token vocabulary.
    config = tf.LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
                            num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=512,
                            attention_dropout=dropout)
    return tf.LlamaForCausalLM(config)


def _timm(model_name, shape, classes=1000):
    def build(dropout):
        import timm  # deferred: only these entries need it
        return Classifier(timm.create_model(model_name, pretrained=False, num_classes=classes, drop_rate=dropout))
    return dict(build=build, batch_fn=_classifier_batch(shape, classes), batch=shape[0])


# Each entry: title, batch, build(dropout) -> module returning the loss, batch_fn(generator), and
# the timed and warm-up steps per benchmark process (fewer for the slow models, about 5-10 s each).
ZOO = {
    "mlp_small": dict(steps=30, warmup=5, 
        title="MLP 784-512-256-10", batch=64,
        build=lambda dropout: Classifier(nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                                       nn.Linear(256, 10))),
        batch_fn=_classifier_batch((64, 784), 10)),
    "demo_mlp": dict(steps=30, warmup=5, 
        title="demo: digits MLP 64-256-128-10", batch=64,
        build=lambda dropout: Classifier(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                                       nn.Linear(128, 10))),
        batch_fn=_classifier_batch((64, 64), 10)),
    "mlp_large": dict(steps=10, warmup=3, 
        title="MLP 1024-4096-4096-1024", batch=256,
        build=lambda dropout: Classifier(nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                                                       nn.ReLU(), nn.Linear(4096, 1024))),
        batch_fn=_classifier_batch((256, 1024), 1024)),
    "cnn": dict(steps=30, warmup=5, 
        title="LeNet CNN + BatchNorm + Dropout, 1x28x28", batch=64,
        build=lambda dropout: Classifier(LeNet(dropout)),
        batch_fn=_classifier_batch((64, 1, 28, 28), 10)),
    "transformer": dict(steps=10, warmup=3, 
        title="2-layer TransformerEncoder d256 h4 ff2048 seq128", batch=16,
        build=lambda dropout: Classifier(TransformerClassifier(dropout)),
        batch_fn=_classifier_batch((16, 128, 256), 10)),
    "lm_head": dict(steps=15, warmup=3, 
        title="Embedding(4096,256)+LayerNorm+GELU+Linear LM head, seq 64", batch=32,
        build=lambda dropout: LanguageModelHead(),
        batch_fn=lambda gen: (torch.randint(0, 4096, (32, 64), generator=gen),
                              torch.randint(0, 4096, (32, 64), generator=gen))),
    "lstm_lm": dict(steps=10, warmup=3,
        title="LSTM LM: Embedding(2048,512)+2-layer LSTM h512+Linear, seq 64", batch=32,
        build=lambda dropout: LstmLanguageModel(dropout),
        batch_fn=lambda gen: (torch.randint(0, 2048, (32, 64), generator=gen),
                              torch.randint(0, 2048, (32, 64), generator=gen))),
    "resnet18": dict(steps=10, warmup=3, title="torchvision resnet18, 3x112x112",
                     **_torchvision(lambda tv, c: tv.models.resnet18(num_classes=c), (8, 3, 112, 112))),
    "mobilenet_v3_small": dict(steps=15, warmup=3, title="torchvision mobilenet_v3_small, 3x112x112",
                               **_torchvision(lambda tv, c: tv.models.mobilenet_v3_small(num_classes=c),
                                              (16, 3, 112, 112))),
    # relu6 after nearly every convolution (issue 36 found it at 1.35 x eager when relu6 was slow).
    "mobilenet_v2": dict(steps=15, warmup=3, title="torchvision mobilenet_v2, 3x96x96",
                         **_torchvision(lambda tv, c: tv.models.mobilenet_v2(num_classes=c), (8, 3, 96, 96))),
    "convnext_tiny": dict(steps=10, warmup=3, title="torchvision convnext_tiny, 3x64x64",
                          **_torchvision(lambda tv, c: tv.models.convnext_tiny(num_classes=c), (8, 3, 64, 64))),
    "vit": dict(steps=6, warmup=2, title="VisionTransformer 64/8, 6 layers, 6 heads, d384, mlp 1536",
                **_torchvision(_vit, (16, 3, 64, 64))),
    "bert_base": dict(steps=3, warmup=1, title="HF BertForSequenceClassification, bert-base config, seq 128",
                      **_huggingface(_bert_base, 8, 128, 30522, "classes:2")),
    "gpt2_small": dict(steps=3, warmup=1, title="HF GPT2LMHeadModel, GPT-2 small (124M), seq 256",
                       **_huggingface(_gpt2_small, 4, 256, 50257, "tokens")),
    "llama_100m": dict(steps=3, warmup=1, title="HF LlamaForCausalLM, 8 layers d768 (~100M), seq 256",
                       **_huggingface(_llama_100m, 4, 256, 32000, "tokens")),
    "timm_resnet50": dict(steps=3, warmup=1, title="timm resnet50, 3x224x224",
                          **_timm("resnet50", (8, 3, 224, 224))),
    "timm_efficientnet_b0": dict(steps=5, warmup=2, title="timm efficientnet_b0, 3x224x224",
                                 **_timm("efficientnet_b0", (8, 3, 224, 224))),
    "timm_vit_small": dict(steps=3, warmup=1, title="timm vit_small_patch16_224, 3x224x224",
                           **_timm("vit_small_patch16_224", (8, 3, 224, 224))),
}

# The models of the bfloat16 table (bench/run --contenders bf16): the transformers, where autocast
# pays most, and two convolutional nets; TRANSFORMERS have the target against onnxtrain's own float32.
TRANSFORMERS = ["bert_base", "gpt2_small", "llama_100m", "timm_vit_small"]
BFLOAT16_ZOO = TRANSFORMERS + ["timm_resnet50", "timm_efficientnet_b0"]

# Dropout in the timed runs; the torchvision models there keep their own stochastic depth
# (convnext_tiny's drops residual blocks with p up to 0.1).
DEFAULT_DROPOUT = {"cnn": 0.5, "transformer": 0.1, "mobilenet_v3_small": 0.2, "mobilenet_v2": 0.2,
                   "vit": 0.0,
                   "bert_base": 0.1, "gpt2_small": 0.1, "timm_efficientnet_b0": 0.2}

# Stochastic depth (torchvision) and drop path (timm) draw from the contender's own random stream,
# as dropout does, so a loss-agreement run (an explicit dropout, 0) sets their p too.
_STOCHASTIC_DEPTH_PROBABILITY = {"StochasticDepth": "p", "DropPath": "drop_prob"}  # class name: its attribute


def build(name, dropout=None):
    entry = ZOO[name]
    p = DEFAULT_DROPOUT.get(name, 0.0) if dropout is None else dropout
    model = entry["build"](p)
    if dropout is not None:
        for module in model.modules():
            attribute = _STOCHASTIC_DEPTH_PROBABILITY.get(type(module).__name__)
            if attribute is not None:
                if not hasattr(module, attribute):
                    raise RuntimeError(f"{name}: {type(module).__name__} has no attribute {attribute!r} to set")
                setattr(module, attribute, dropout)
    return model


def train_flops(model, batch):
    """GEMM and convolution FLOPs of one training step: every matrix product PyTorch runs in
    forward and backward (counted by its profiler, which sees the backward's mm/bmm calls), plus
    for each convolution its forward, its weight gradient and, unless its input needs no
    gradient, its data gradient. The same for both contenders: it is the work, not a measurement."""
    from torch.profiler import ProfilerActivity, profile

    conv_flops = []

    def on_conv(module, inputs, output):
        x = inputs[0]
        per_pass = 2.0 * output.numel() * (module.in_channels // module.groups) * \
            torch.tensor(module.kernel_size).prod().item()
        passes = 2 + (1 if x.requires_grad else 0)
        conv_flops.append(per_pass * passes)

    hooks = [m.register_forward_hook(on_conv) for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd)]
    try:
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            loss = model(*batch)
            loss.backward()
    finally:
        for h in hooks:
            h.remove()
    model.zero_grad(set_to_none=True)
    gemm = sum(e.flops for e in prof.events() if e.flops and e.name in ("aten::mm", "aten::addmm", "aten::bmm"))
    return gemm + sum(conv_flops)
