"""HuggingFace transformers models (small configs, random weights, nothing downloaded) trained
through the engine as HF passes their inputs: input_ids, an attention_mask with real padding,
token_type_ids, decoder_input_ids and labels, the loss computed inside the model, the output HF's
ModelOutput. Each is judged against eager float32 and the float64 floor over STEPS steps
(zoo_parity.py), on the capture this torch uses by default, with no fallback of either kind.

transformers is installed per torch by scripts/torch_venv.sh (4.44 on Debian's 1.13, 4.57 on 2.4,
5.x on the newest); run as a script, this prints the README's parity table of these models.
"""
import sys

import pytest
import torch

import conftest  # noqa: F401 - first: it puts the package on sys.path when run as a script
import onnxtrain  # noqa: E402
import zoo_parity  # noqa: E402

pytestmark = pytest.mark.zoo

transformers = pytest.importorskip("transformers") if __name__ != "__main__" else __import__("transformers")

VOCAB, BATCH, SEQ, LABELS = 100, 2, 8, 3
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
BERT_SIZE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                 max_position_embeddings=64)


def _ids(gen, seq=SEQ):
    return torch.randint(3, VOCAB, (BATCH, seq), generator=gen)


def _padding(seq=SEQ):
    """The second sequence is padded after 5 tokens."""
    mask = torch.ones(BATCH, seq, dtype=torch.long)
    mask[1, 5:] = 0
    return mask


def classification(gen, seq=SEQ):
    ids = _ids(gen, seq)
    return (), dict(input_ids=ids, attention_mask=_padding(seq), labels=torch.randint(0, LABELS, (BATCH,), generator=gen),
                    return_dict=True), None


def with_token_types(gen, seq=SEQ):
    args, kwargs, target = classification(gen, seq)
    types = torch.zeros(BATCH, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    return args, dict(kwargs, token_type_ids=types), target


def language_model(gen, seq=SEQ, **extra):
    """Labels are the inputs (the model shifts them), -100 where padded."""
    ids, mask = _ids(gen, seq), _padding(seq)
    return (), dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100), **extra), None


def masked_lm(gen, seq=SEQ):
    ids, mask = _ids(gen, seq), _padding(seq)
    labels = torch.full_like(ids, -100)
    labels[:, 1::3] = ids[:, 1::3]
    masked = ids.clone()
    masked[:, 1::3] = 2  # the [MASK] token of this vocabulary
    return (), dict(input_ids=masked, attention_mask=mask, labels=labels), None


def seq2seq(gen, seq=SEQ):
    ids, mask = _ids(gen, seq), _padding(seq)
    decoder = _ids(gen, 5)
    return (), dict(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder,
                    labels=torch.randint(3, VOCAB, (BATCH, 5), generator=gen)), None


def images(gen, seq=None):
    return (), dict(pixel_values=torch.randn(BATCH, 3, 32, 32, generator=gen),
                    labels=torch.randint(0, 10, (BATCH,), generator=gen)), None


def bert_classifier():
    return transformers.BertForSequenceClassification(transformers.BertConfig(**BERT_SIZE, **NO_DROPOUT,
                                                                              num_labels=LABELS))


def bert_masked_lm():
    return transformers.BertForMaskedLM(transformers.BertConfig(**BERT_SIZE, **NO_DROPOUT))


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def roberta():
    return transformers.RobertaForSequenceClassification(transformers.RobertaConfig(
        **BERT_SIZE, **NO_DROPOUT, num_labels=LABELS, pad_token_id=1, bos_token_id=0, eos_token_id=2))


def distilbert():
    return transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2, hidden_dim=128, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, seq_classif_dropout=0.0, num_labels=LABELS))


def t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=32, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=2,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def vit():
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=32, patch_size=8, num_channels=3, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, **NO_DROPOUT, num_labels=10))


def llama():
    # Grouped-query attention (4 heads, 2 key/value heads) and rotary embeddings.
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=2))


def opt():
    return transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=2,
        max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.0, attention_dropout=0.0, pad_token_id=2,
        bos_token_id=0, eos_token_id=1))


def gpt_neox():
    return transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, bos_token_id=0, eos_token_id=1))


def qwen2():
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1))


def mistral():
    # Its cache layers slide (sliding_window): they count the tokens they have seen.
    return transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1, pad_token_id=2))


# name -> (make, batch, output type name)
MODELS = {
    "BertForSequenceClassification": (bert_classifier, with_token_types, "SequenceClassifierOutput"),
    "BertForMaskedLM": (bert_masked_lm, masked_lm, "MaskedLMOutput"),
    "GPT2LMHeadModel": (gpt2, language_model, "CausalLMOutputWithCrossAttentions"),
    "RobertaForSequenceClassification": (roberta, classification, "SequenceClassifierOutput"),
    "DistilBertForSequenceClassification": (distilbert, classification, "SequenceClassifierOutput"),
    "T5ForConditionalGeneration": (t5, seq2seq, "Seq2SeqLMOutput"),
    "ViTForImageClassification": (vit, images, "ImageClassifierOutput"),
    "LlamaForCausalLM": (llama, language_model, "CausalLMOutputWithPast"),
    "OPTForCausalLM": (opt, language_model, "CausalLMOutputWithPast"),
    "GPTNeoXForCausalLM": (gpt_neox, language_model, "CausalLMOutputWithPast"),
    "Qwen2ForCausalLM": (qwen2, language_model, "CausalLMOutputWithPast"),
    "MistralForCausalLM": (mistral, language_model, "CausalLMOutputWithPast"),
}
# The decoder-only language models, called as users call them: the config's use_cache is True, so
# the model returns its key/value cache in training too (a DynamicCache from transformers 4.45 on,
# tuples or nothing before; T5's is an EncoderDecoderCache of two).
LANGUAGE_MODELS = ["GPT2LMHeadModel", "LlamaForCausalLM", "OPTForCausalLM", "GPTNeoXForCausalLM", "Qwen2ForCausalLM",
                   "MistralForCausalLM"]


def case(name):
    make, batch, output_type = MODELS[name]
    return zoo_parity.Case(make=make, batch=batch, loss=lambda out, _: out.loss, logits=lambda out: out.logits,
                           output_type=getattr(transformers.modeling_outputs, output_type))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hf_model_trains_at_the_float64_floor(name, no_fallback):
    problems = zoo_parity.compare_with_float64(case(name)).problems()
    assert not problems, f"{name}:\n" + "\n".join(problems[:20])


@pytest.mark.parametrize("name", ["BertForSequenceClassification", "LlamaForCausalLM", "T5ForConditionalGeneration"])
def test_a_new_sequence_length_is_a_new_plan_not_a_new_export(name, no_fallback):
    make, batch, _ = MODELS[name]
    torch.manual_seed(0)
    net = make()
    reference = __import__("copy").deepcopy(net)
    model = onnxtrain.ORTModule(net)
    gen = torch.Generator().manual_seed(3)
    for seq in (8, 12, 6):
        _, kwargs, _ = batch(gen, seq)
        out, ref = model(**kwargs), reference(**kwargs)
        conftest.assert_close(out.loss, ref.loss, f"loss at length {seq}")
        conftest.assert_close(out.logits, ref.logits, f"logits at length {seq}")
    exports = [graphs.exported for graphs, _, _ in model._graphs.values()]
    if onnxtrain.capture.backend_name() == "torch_export" or not exports[0].sizes_may_be_baked():
        assert len(exports) == 1, f"{len(exports)} exports for three sequence lengths"
    # else a TorchScript trace that warned in the model's code (transformers 4.57's masks on torch
    # 2.4 read the length as a Python number): a length its graph fails at is exported again.


def _cache_of(output):
    """The key/value cache of an HF output: 'cache' from transformers 5, 'past_key_values' before."""
    for key in ("cache", "past_key_values"):
        if key in output:
            return output[key]
    return None


def assert_same_value(ours, eager, what):
    """Two outputs alike as eager returns them: the same types, containers and numbers, tensors
    within the suite's tolerance, objects (a DynamicCache and its layers) attribute by attribute."""
    assert type(ours) is type(eager), f"{what}: {type(ours).__name__}, eager has {type(eager).__name__}"
    if isinstance(eager, torch.Tensor):
        conftest.assert_close(ours, eager, what)
    elif isinstance(eager, (list, tuple)):
        assert len(ours) == len(eager), f"{what}: {len(ours)} items, eager has {len(eager)}"
        for i, (a, b) in enumerate(zip(ours, eager)):
            assert_same_value(a, b, f"{what}[{i}]")
    elif isinstance(eager, dict):
        assert list(ours) == list(eager), f"{what}: keys {list(ours)}, eager has {list(eager)}"
        for k in eager:
            assert_same_value(ours[k], eager[k], f"{what}[{k!r}]")
    elif hasattr(eager, "__dict__") and not isinstance(eager, (type, torch.device)):
        mine, theirs = _plain_state(ours), _plain_state(eager)
        assert sorted(mine) == sorted(theirs), f"{what}: attributes {sorted(mine)}, eager has {sorted(theirs)}"
        for k in theirs:
            assert_same_value(mine[k], theirs[k], f"{what}.{k}")
    else:
        assert ours == eager, f"{what}: {ours!r}, eager has {eager!r}"


def _plain_state(obj):
    state = dict(vars(obj))
    if isinstance(obj, torch.nn.Module):  # transformers 4.44's caches are Modules: compare the cache's own
        state = {k: v for k, v in state.items() if not k.startswith("_") or k == "_seen_tokens"}
    return state


@pytest.mark.parametrize("name", LANGUAGE_MODELS + ["T5ForConditionalGeneration"])
def test_a_language_models_cache_comes_back_as_eagers_and_carries_gradients(name, no_fallback):
    """The cache a causal LM returns with its default config: the same type as eager's, the same
    tensors and counters per layer, at two sequence lengths from one export, and a loss that reads
    the cache's tensors trains the parameters as eager's does."""
    import copy

    make, batch, _ = MODELS[name]
    torch.manual_seed(0)
    net = make()
    reference = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    gen = torch.Generator().manual_seed(11)
    for seq in (8, 12):
        _, kwargs, _ = batch(gen, seq)
        outputs = []
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            out = m(**kwargs)
            cache = _cache_of(out)
            tensors = [t for t in _tensors_in(cache) if t.is_floating_point()]
            # Gradients through the cache, as a loss that reads it would send them.
            loss = out.loss + sum((t * (k + 1) * 1e-2).sum() for k, t in enumerate(tensors))
            loss.backward()
            outputs.append((out, [p.grad for p in m.parameters()]))
        (ours, our_grads), (eager, eager_grads) = outputs
        conftest.assert_engine_ran(ours.loss)
        assert_same_value(_cache_of(ours), _cache_of(eager), f"{name}'s cache at length {seq}")
        conftest.assert_close(ours.logits, eager.logits, f"logits at length {seq}")
        for (pname, _), a, b in zip(net.named_parameters(), our_grads, eager_grads):
            assert (a is None) == (b is None), f"{pname}: gradient {a is not None}, eager {b is not None}"
            if b is not None:
                conftest.assert_close(a, b, f"{pname}.grad at length {seq}")
    assert model.engine_runs == 2 and model.fallback_reason is None
    assert len(model._graphs) == 1, f"{len(model._graphs)} exports for two sequence lengths"


def _tensors_in(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    if value is not None and hasattr(value, "__dict__") and not isinstance(value, type):
        return [t for _, v in sorted(_plain_state(value).items()) for t in _tensors_in(v)]
    return []


def _prefix_cache(prefix):
    """A DynamicCache holding per-layer (key, value) prefixes, built as a user builds one."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    for layer, (k, v) in enumerate(prefix):
        cache.update(k, v, layer)
    return cache


@pytest.mark.parametrize("name", ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"])
def test_a_cache_passed_in_trains_as_in_eager_and_is_updated_in_place(name, no_fallback):
    """Prefix tuning: learned per-layer key/value prefixes passed as past_key_values. The loss, the
    gradients of the prefixes and of the parameters are eager's, and the cache the caller passed
    holds the new keys afterwards, as eager's update leaves it (the output is that same object)."""
    import copy

    make, _, _ = MODELS[name]
    torch.manual_seed(0)
    net = make()
    reference = copy.deepcopy(net)
    model = onnxtrain.ORTModule(net)
    config = net.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = config.hidden_size // config.num_attention_heads
    gen = torch.Generator().manual_seed(5)
    for past, seq in ((4, 8), (6, 8)):
        prefix = [tuple(torch.randn(BATCH, kv_heads, past, head_dim, generator=gen).requires_grad_() for _ in "kv")
                  for _ in range(config.num_hidden_layers)]
        ids = _ids(gen, seq)
        kwargs = dict(input_ids=ids, attention_mask=torch.ones(BATCH, past + seq, dtype=torch.long), labels=ids)
        results = []
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            cache = _prefix_cache(prefix)
            out = m(**kwargs, past_key_values=cache)
            out.loss.backward()
            grads = [t.grad for kv in prefix for t in kv]
            for kv in prefix:
                for t in kv:
                    t.grad = None
            results.append((out, cache, grads, [p.grad for p in m.parameters()]))
        (ours, our_cache, our_prefix_grads, our_grads), (eager, eager_cache, eager_prefix_grads, eager_grads) = results
        conftest.assert_engine_ran(ours.loss)
        conftest.assert_close(ours.loss, eager.loss, f"loss after a prefix of {past}")
        assert (_cache_of(ours) is our_cache) == (_cache_of(eager) is eager_cache)
        assert_same_value(our_cache, eager_cache, f"the caller's cache after a prefix of {past}")
        for k, (a, b) in enumerate(zip(our_prefix_grads, eager_prefix_grads)):
            conftest.assert_close(a, b, f"prefix tensor {k}'s gradient")
        for (pname, _), a, b in zip(net.named_parameters(), our_grads, eager_grads):
            conftest.assert_close(a, b, f"{pname}.grad after a prefix of {past}")
    assert model.engine_runs == 2 and model.fallback_reason is None


class AppendsToACache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x, cache):
        keys = self.fc(x).unsqueeze(1)
        cache.update(keys, keys, 0)  # eager's caller sees the cache grow
        return keys.sum()


def test_a_cache_the_module_updates_without_returning_it_is_refused(no_fallback):
    """The graph can leave the caller's cache as eager does only through an output that is that
    cache; one the module grows and keeps to itself is refused, naming it, not left stale."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    with pytest.raises(Exception, match="argument 1: the module changes this DynamicCache in place and does not "
                                        "return it"):
        onnxtrain.ORTModule(AppendsToACache())(torch.randn(2, 3, 4), cache)


def test_a_cache_that_writes_in_place_is_refused_by_name(no_fallback):
    """A StaticCache writes the new keys into its preallocated tensors, which a graph cannot do to
    tensors the caller holds: refused, naming the class and why."""
    static = pytest.importorskip("transformers.cache_utils").StaticCache
    torch.manual_seed(0)
    net = llama()
    try:
        cache = static(config=net.config, max_cache_len=16)
    except TypeError:  # transformers 4.44 also wants the batch size, device and dtype
        try:
            cache = static(config=net.config, max_batch_size=BATCH, max_cache_len=16, device="cpu", dtype=torch.float32)
        except AttributeError as e:  # 4.44 marks its tensors with torch._dynamo, which torch 1.13 lacks
            pytest.skip(f"transformers {transformers.__version__} cannot make a StaticCache on torch {torch.__version__}: {e}")
    _, kwargs, _ = language_model(torch.Generator().manual_seed(0))
    with pytest.raises(Exception, match="StaticCache.*in place"):
        onnxtrain.ORTModule(net)(**kwargs, past_key_values=cache)


@pytest.mark.parametrize("name", ["BertForSequenceClassification", "LlamaForCausalLM"])
def test_trainer_trains_the_wrapped_model_like_eager(name, no_fallback, tmp_path):
    """transformers.Trainer, a few steps of SGD on the loss the model computes, against the same
    Trainer run on the eager model. The causal LM keeps its default config (use_cache=True), so
    every training step returns its cache."""
    import copy

    pytest.importorskip("accelerate")
    make, batch, _ = MODELS[name]
    torch.manual_seed(0)
    eager = make()
    wrapped_module = copy.deepcopy(eager)
    gen = torch.Generator().manual_seed(5)
    rows = []
    for _ in range(4):
        _, kwargs, _ = batch(gen)
        rows += [{k: v[i] for k, v in kwargs.items() if isinstance(v, torch.Tensor)} for i in range(BATCH)]

    def train(model, out):
        args = transformers.TrainingArguments(output_dir=str(tmp_path / out), per_device_train_batch_size=BATCH,
                                              max_steps=3, learning_rate=0.05, optim="sgd", lr_scheduler_type="constant",
                                              weight_decay=0.0, max_grad_norm=0.0, logging_steps=1, report_to=[],
                                              save_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0,
                                              remove_unused_columns=False)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)
        result = trainer.train()
        return result.training_loss, [h["loss"] for h in trainer.state.log_history if "loss" in h]

    wrapped = onnxtrain.ORTModule(wrapped_module)
    ours = train(wrapped, "ours")
    reference = train(eager, "eager")
    assert wrapped.engine_runs >= 3 and wrapped.fallback_reason is None
    assert ours[1] == pytest.approx(reference[1], rel=1e-4, abs=1e-5), (ours, reference)
    for (name, p), q in zip(wrapped_module.named_parameters(), eager.parameters()):
        conftest.assert_close(p, q, f"{name} after Trainer's steps")


if __name__ == "__main__":
    zoo_parity.without_fallback()
    zoo_parity.print_table(sys.argv[1:] or sorted(MODELS), case)
