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
                    labels=torch.randint(3, VOCAB, (BATCH, 5), generator=gen), use_cache=False), None


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


def _decoder(gen, seq=SEQ):
    return language_model(gen, seq, use_cache=False)


# name -> (make, batch, output type name)
MODELS = {
    "BertForSequenceClassification": (bert_classifier, with_token_types, "SequenceClassifierOutput"),
    "BertForMaskedLM": (bert_masked_lm, masked_lm, "MaskedLMOutput"),
    "GPT2LMHeadModel": (gpt2, _decoder, "CausalLMOutputWithCrossAttentions"),
    "RobertaForSequenceClassification": (roberta, classification, "SequenceClassifierOutput"),
    "DistilBertForSequenceClassification": (distilbert, classification, "SequenceClassifierOutput"),
    "T5ForConditionalGeneration": (t5, seq2seq, "Seq2SeqLMOutput"),
    "ViTForImageClassification": (vit, images, "ImageClassifierOutput"),
    "LlamaForCausalLM": (llama, _decoder, "CausalLMOutputWithPast"),
}


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


def test_a_key_value_cache_comes_back_or_is_refused_saying_how_to_train(no_fallback):
    """transformers before 4.45 return GPT-2's cache as tuples of tensors, which come back as eager's;
    later ones return a Cache object, which is refused with the way out."""
    torch.manual_seed(0)
    net = gpt2()
    _, kwargs, _ = language_model(torch.Generator().manual_seed(0), use_cache=True)
    reference = net(**kwargs).past_key_values
    model = onnxtrain.ORTModule(net)
    if isinstance(reference, tuple):
        cache = model(**kwargs).past_key_values
        pairs = [(a, b) for layer_ours, layer_eager in zip(cache, reference) for a, b in zip(layer_ours, layer_eager)]
        assert len(pairs) == 2 * len(reference)
        for k, (ours, eager) in enumerate(pairs):
            conftest.assert_close(ours, eager, f"cache tensor {k}")
        return
    with pytest.raises(Exception, match="use_cache=False"):
        model(**kwargs)


def test_trainer_trains_the_wrapped_model_like_eager(no_fallback, tmp_path):
    """transformers.Trainer, a few steps of SGD on the loss the model computes, against the same
    Trainer run on the eager model."""
    import copy

    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    eager = bert_classifier()
    wrapped_module = copy.deepcopy(eager)
    gen = torch.Generator().manual_seed(5)
    rows = []
    for _ in range(4):
        _, kwargs, _ = with_token_types(gen)
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
