"""DefinitionEMB model (models/definition_emb): Auto registration, config inference and validation, the loss of Eq. 1
against a hand computation (python loops over examples and positions), gradients and frozen targets, initialisation
from a PLM (every weight copied), saving and loading, damaged checkpoints, bad input, portable loading (folder and
loopback Hub without the package) and Trainer steps.

The hand computation follows the paper (Section 5): s = the reader's last hidden state (the decoder's for an
encoder-decoder reader), e_d = A s, and Eq. 1 as the plan fixes it: per example, the mean over its labelled positions
of sum_h (e_d - e)^2; then the mean over the examples that have a labelled position.
"""

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_hub_portability import NO_PACKAGE_PRELUDE, assert_ships_only_running_code, run_python, subprocess_env
from transformers import (
    AlbertConfig,
    AutoConfig,
    AutoModel,
    BartConfig,
    BartForConditionalGeneration,
    BartModel,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    RobertaConfig,
    RobertaModel,
    T5Config,
    T5ForConditionalGeneration,
    Trainer,
    TrainingArguments,
)

from hf_entity_models import CheckpointError, DefinitionEmbConfig, DefinitionEmbModel
from hf_entity_models.models.definition_emb import copy_reader_weights

VOCAB = 100
PAD, BOS, EOS = 1, 0, 2


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny models: extra intra-op threads only add synchronisation on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def roberta_config(**overrides) -> RobertaConfig:
    values = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=64, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return RobertaConfig(**{**values, **overrides})


def bart_config(**overrides) -> BartConfig:
    values = dict(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                  pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=EOS,
                  dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    return BartConfig(**{**values, **overrides})


def bert_config(**overrides) -> BertConfig:
    values = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **overrides})


def definition_model(reader_config, seed: int = 0, **overrides) -> DefinitionEmbModel:
    """A tiny model whose targets are random (as a PLM's embeddings would be), in eval mode."""
    torch.manual_seed(seed)
    model = DefinitionEmbModel(DefinitionEmbConfig(reader_config=reader_config, **overrides)).eval()
    with torch.no_grad():
        model.target_embeddings.copy_(torch.randn_like(model.target_embeddings) * 0.5)
    return model


def random_ids(*shape: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, shape, generator=generator)


def batch_for(model: DefinitionEmbModel, seed: int = 1) -> dict[str, torch.Tensor]:
    """Three examples: two labelled positions, none, one (after right padding of the second and third)."""
    input_ids = random_ids(3, 7, seed=seed)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    attention_mask[2, 6:] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD)
    batch = dict(input_ids=input_ids, attention_mask=attention_mask)
    if model.config.reader_type == "encoder-decoder":
        batch["decoder_input_ids"] = random_ids(3, 5, seed=seed + 1)
        batch["decoder_attention_mask"] = torch.ones(3, 5, dtype=torch.long)
        length = 5
    else:
        length = 7
    labels = torch.full((3, length), -100)
    labels[0, 1], labels[0, 3], labels[2, 2] = 11, 57, 98
    batch["labels"] = labels
    return batch


def hand_loss(definition_embeddings: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor, loss: str) -> float:
    per_example = []
    for example in range(labels.shape[0]):
        distances = []
        for position in range(labels.shape[1]):
            label = int(labels[example, position])
            if label == -100:
                continue
            predicted = [float(value) for value in definition_embeddings[example, position]]
            target = [float(value) for value in targets[label]]
            if loss == "mse":
                distance = sum((a - b) ** 2 for a, b in zip(predicted, target))
            else:
                dot = sum(a * b for a, b in zip(predicted, target))
                distance = 1.0 - dot / (math.sqrt(sum(a * a for a in predicted)) * math.sqrt(sum(b * b for b in target)))
            distances.append(distance)
        if distances:
            per_example.append(sum(distances) / len(distances))
    return sum(per_example) / len(per_example) if per_example else 0.0


def reader_states(model: DefinitionEmbModel, batch: dict) -> torch.Tensor:
    """The reader's last hidden states, computed by calling the transformers model directly."""
    reader_inputs = {key: value for key, value in batch.items() if key != "labels"}
    return model.reader(**reader_inputs).last_hidden_state


# ----------------------------------------------------------------------------------------- registration, config
def test_auto_classes_know_definition_emb():
    default = AutoConfig.for_model("definition-emb")
    assert type(default) is DefinitionEmbConfig
    assert default.reader_config.model_type == "roberta" and default.reader_type == "encoder-only"
    assert default.embedding_size == 768 and default.vocab_size == 50265
    for reader_config, reader_class in [(roberta_config(), RobertaModel), (bart_config(), BartModel)]:
        model = AutoModel.from_config(DefinitionEmbConfig(reader_config=reader_config))
        assert type(model) is DefinitionEmbModel and type(model.reader) is reader_class
        assert model.get_input_embeddings() is model.reader.get_input_embeddings()


@pytest.mark.parametrize(
    "reader_config, reader_type, embedding_size",
    [
        (roberta_config(), "encoder-only", 32),
        (bert_config(hidden_size=48, num_attention_heads=4), "encoder-only", 48),
        (bart_config(), "encoder-decoder", 32),
        (AlbertConfig(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_attention_heads=2,
                      intermediate_size=64), "encoder-only", 16),
        ({"model_type": "bart", "vocab_size": VOCAB, "d_model": 24}, "encoder-decoder", 24),
    ],
    ids=["roberta", "bert", "bart", "albert-factorised-embeddings", "dict"],
)
def test_reader_type_and_embedding_size_are_inferred(reader_config, reader_type, embedding_size):
    config = DefinitionEmbConfig(reader_config=reader_config)
    assert config.reader_type == reader_type and config.embedding_size == embedding_size
    assert config.vocab_size == VOCAB
    again = DefinitionEmbConfig.from_dict(config.to_dict())
    assert (again.reader_type, again.embedding_size, again.reader_config.model_type) == (
        reader_type, embedding_size, config.reader_config.model_type)
    explicit = DefinitionEmbConfig(reader_config=reader_config, reader_type=reader_type, embedding_size=8)
    assert explicit.embedding_size == 8


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(reader_config=roberta_config(), reader_type="decoder-only"), "reader_type must be one of"),
        (dict(reader_config=roberta_config(), reader_type="encoder-decoder"),
         "needs an encoder-decoder reader_config .*pass reader_type='encoder-only'"),
        (dict(reader_config=bart_config(), reader_type="encoder-only"),
         "needs an encoder-only reader_config .*pass reader_type='encoder-decoder'"),
        (dict(reader_config=roberta_config(), embedding_size=0), r"embedding_size \(H_e\) must be a positive int"),
        (dict(reader_config=roberta_config(), embedding_size=-4), r"embedding_size \(H_e\) must be a positive int"),
    ],
    ids=["unknown-type", "encoder-decoder-on-roberta", "encoder-only-on-bart", "zero-size", "negative-size"],
)
def test_bad_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        DefinitionEmbConfig(**fields)


# ------------------------------------------------------------------------------------------------------ loss
@pytest.mark.parametrize("loss", ["mse", "cosine"])
@pytest.mark.parametrize("reader_config", [roberta_config(), bart_config()], ids=["encoder-only", "encoder-decoder"])
def test_loss_equals_a_hand_computation(reader_config, loss):
    model = definition_model(reader_config, loss=loss)
    batch = batch_for(model)
    with torch.no_grad():
        output = model(**batch)
        states = reader_states(model, batch)
        projection = model.embedding_projection.weight  # A: (H_e, H_s)
        expected_embeddings = torch.einsum("bth,eh->bte", states, projection)
    torch.testing.assert_close(output.definition_embeddings, expected_embeddings)
    expected = hand_loss(expected_embeddings, batch["labels"], model.target_embeddings, loss)
    assert expected > 0
    assert output.loss.item() == pytest.approx(expected, rel=1e-5)
    # The example without a labelled position counts for nothing: dropping it leaves the loss unchanged.
    kept = {key: value[[0, 2]] for key, value in batch.items()}
    with torch.no_grad():
        assert model(**kept).loss.item() == pytest.approx(expected, rel=1e-5)


def test_the_pooled_definition_readout_is_a_of_the_masked_mean_state_at_every_position():
    model = definition_model(roberta_config(), readout="pooled-definition")
    batch = batch_for(model)
    with torch.no_grad():
        output = model(**batch)
        states = reader_states(model, batch)  # (B, T, H_s)
    for example in range(states.shape[0]):
        real = [position for position in range(states.shape[1]) if batch["attention_mask"][example, position] == 1]
        pooled = sum(states[example, position] for position in real) / len(real)
        expected = model.embedding_projection.weight @ pooled
        for position in range(states.shape[1]):
            torch.testing.assert_close(output.definition_embeddings[example, position], expected)
    expected_loss = hand_loss(output.definition_embeddings, batch["labels"], model.target_embeddings, "cosine")
    assert output.loss.item() == pytest.approx(expected_loss, rel=1e-5)


def test_the_default_readout_follows_the_models_head_and_old_configs_load_as_the_paper(tmp_path):
    sentence_encoder = bert_config(architectures=["BertModel"])
    masked_lm = bert_config(architectures=["BertForMaskedLM"])
    assert DefinitionEmbConfig(reader_config=sentence_encoder).readout == "pooled-definition"
    assert DefinitionEmbConfig(reader_config=masked_lm).readout == "mask-slot"
    assert DefinitionEmbConfig(reader_config=roberta_config()).readout == "mask-slot"  # no architecture recorded
    assert DefinitionEmbConfig(reader_config=bart_config()).readout == "mask-slot"
    config = DefinitionEmbConfig(reader_config=masked_lm)
    assert (config.word_slots, config.loss) == ("distinct", "cosine")
    with pytest.raises(ValueError, match="pooled-definition.*encoder-decoder"):
        DefinitionEmbConfig(reader_config=bart_config(), readout="pooled-definition")
    # A config saved before these fields existed was trained with the paper's settings and loads as such.
    saved = config.to_dict()
    for key in ("word_slots", "readout", "loss"):
        saved.pop(key)
    old = DefinitionEmbConfig.from_dict(saved)
    assert (old.word_slots, old.readout, old.loss) == ("paper", "mask-slot", "mse")
    json_file = tmp_path / "config.json"
    json_file.write_text(json.dumps(saved))
    from_file = DefinitionEmbConfig.from_json_file(json_file)
    assert (from_file.word_slots, from_file.readout, from_file.loss) == ("paper", "mask-slot", "mse")


def test_a_batch_without_labelled_positions_has_zero_loss_and_a_valid_backward():
    model = definition_model(roberta_config()).train()
    batch = batch_for(model)
    batch["labels"] = torch.full_like(batch["labels"], -100)
    loss = model(**batch).loss
    assert loss.item() == 0.0
    loss.backward()
    assert model.embedding_projection.weight.grad.abs().max() == 0


@pytest.mark.parametrize("reader_config", [roberta_config(), bart_config()], ids=["encoder-only", "encoder-decoder"])
def test_gradients_reach_the_projection_and_the_reader_but_never_the_targets(reader_config):
    model = definition_model(reader_config).train()
    assert "target_embeddings" not in dict(model.named_parameters())
    assert "target_embeddings" in model.state_dict()
    targets_before = model.target_embeddings.clone()
    projection_before = model.embedding_projection.weight.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(**batch_for(model)).loss.backward()
    assert model.embedding_projection.weight.grad.abs().sum() > 0
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0
    reader_layer = next(param for name, param in model.reader.named_parameters()
                        if "layers.0." in name or "layer.0." in name)
    assert reader_layer.grad is not None and reader_layer.grad.abs().sum() > 0
    optimizer.step()
    assert torch.equal(model.target_embeddings, targets_before)
    assert not torch.equal(model.embedding_projection.weight, projection_before)


@pytest.mark.parametrize("reader_config", [roberta_config(), bart_config()], ids=["encoder-only", "encoder-decoder"])
def test_freeze_reader_embeddings(reader_config, tmp_path):
    trained = definition_model(reader_config)
    assert trained.get_input_embeddings().weight.requires_grad
    model = definition_model(reader_config, freeze_reader_embeddings=True).train()
    embeddings = model.get_input_embeddings().weight
    assert not embeddings.requires_grad
    if reader_config.is_encoder_decoder:  # BART's encoder and decoder read the same (shared) matrix
        assert model.reader.encoder.embed_tokens.weight is embeddings
        assert model.reader.decoder.embed_tokens.weight is embeddings
    model(**batch_for(model)).loss.backward()
    assert embeddings.grad is None
    assert all(param.requires_grad for name, param in model.named_parameters() if "embed_tokens" not in name
               and "word_embeddings" not in name and name != "reader.shared.weight")
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert loaded.config.freeze_reader_embeddings and not loaded.get_input_embeddings().weight.requires_grad
    frozen = trained.num_parameters() - trained.num_parameters(only_trainable=True)
    assert frozen == 0 and loaded.num_parameters(only_trainable=True) == (
        loaded.num_parameters() - embeddings.numel())


# ----------------------------------------------------------------------------------------- from a PLM
def _plm(kind: str):
    torch.manual_seed(3)
    if kind == "BertForMaskedLM":
        return BertForMaskedLM(bert_config()), "encoder-only"
    if kind == "RobertaModel":
        return RobertaModel(roberta_config()), "encoder-only"
    if kind == "T5ForConditionalGeneration":  # its base model is itself, with an LM head
        return T5ForConditionalGeneration(T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=1,
                                                   num_heads=2, decoder_start_token_id=0, dropout_rate=0.0)), \
            "encoder-decoder"
    return BartForConditionalGeneration(bart_config()), "encoder-decoder"


@pytest.mark.parametrize(
    "kind", ["BertForMaskedLM", "RobertaModel", "BartForConditionalGeneration", "T5ForConditionalGeneration"]
)
def test_from_pretrained_model_copies_every_weight(kind):
    plm, reader_type = _plm(kind)
    plm.config.name_or_path = f"tester/tiny-{kind.lower()}"
    model = DefinitionEmbModel.from_pretrained_model(plm)
    assert model.config.reader_type == reader_type
    assert model.config.base_model_name_or_path == f"tester/tiny-{kind.lower()}"
    # The base model of each PLM, named by hand rather than through `base_model`, which the code under test uses.
    base = {"BertForMaskedLM": lambda: plm.bert, "RobertaModel": lambda: plm,
            "BartForConditionalGeneration": lambda: plm.model, "T5ForConditionalGeneration": lambda: plm}[kind]()
    base_state = base.state_dict()
    reader_state = model.reader.state_dict()
    # The reader has every base-model weight but the pooler and T5's LM head, which DefinitionEMB never reads.
    assert set(reader_state) == {key for key in base_state if not key.startswith(("pooler.", "lm_head."))}
    for key, value in reader_state.items():
        assert torch.equal(value, base_state[key]), key
    torch.testing.assert_close(model.target_embeddings, plm.get_input_embeddings().weight, rtol=0, atol=0)
    assert model.target_embeddings.data_ptr() != plm.get_input_embeddings().weight.data_ptr()
    # The reader computes what the PLM's base model computes.
    input_ids = random_ids(2, 6, seed=4)
    decoder = dict(decoder_input_ids=random_ids(2, 4, seed=5)) if reader_type == "encoder-decoder" else {}
    plm.eval(), model.eval()
    with torch.no_grad():
        if kind == "T5ForConditionalGeneration":  # the decoder's last hidden state, after its final layer norm
            expected = base(input_ids, **decoder, output_hidden_states=True).decoder_hidden_states[-1]
        else:
            expected = base(input_ids, **decoder).last_hidden_state
        got = model.reader(input_ids, **decoder).last_hidden_state
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_from_pretrained_model_reads_a_folder_and_keeps_overrides(tmp_path):
    plm, _ = _plm("BartForConditionalGeneration")
    plm.save_pretrained(tmp_path / "bart")
    model = DefinitionEmbModel.from_pretrained_model(tmp_path / "bart", freeze_reader_embeddings=True)
    assert model.config.base_model_name_or_path == str(tmp_path / "bart")
    assert model.config.freeze_reader_embeddings and not model.get_input_embeddings().weight.requires_grad
    for key, value in model.reader.state_dict().items():
        assert torch.equal(value, plm.model.state_dict()[key]), key
    torch.testing.assert_close(model.target_embeddings, plm.get_input_embeddings().weight, rtol=0, atol=0)


def test_from_pretrained_model_refuses_what_does_not_fit(tmp_path):
    plm, _ = _plm("RobertaModel")
    with pytest.raises(ValueError, match=r"input embedding matrix of RobertaModel has shape \(100, 32\).*\(100, 16\)"):
        DefinitionEmbModel.from_pretrained_model(plm, embedding_size=16)
    with pytest.raises(ValueError, match="needs an encoder-decoder reader_config"):
        DefinitionEmbModel.from_pretrained_model(plm, reader_type="encoder-decoder")
    with pytest.raises(TypeError, match="must be a transformers PreTrainedModel"):
        DefinitionEmbModel.from_pretrained_model(42)
    reader = DefinitionEmbModel(DefinitionEmbConfig(reader_config=roberta_config(num_hidden_layers=3))).reader
    with pytest.raises(ValueError, match=r"does not fit .*it lacks 16 weights the config asks for \(encoder.layer.2"):
        copy_reader_weights(reader, plm, "a two-layer RoBERTa")
    wider = RobertaModel(roberta_config(intermediate_size=48))
    with pytest.raises(ValueError, match=r"of another shape .*intermediate.dense.weight: \(48, 32\) vs \(64, 32\)"):
        copy_reader_weights(DefinitionEmbModel(DefinitionEmbConfig(reader_config=roberta_config())).reader, wider, "w")
    # A checkpoint that lacks a base-model weight would leave the reader partly random: refused.
    BertModel(bert_config()).save_pretrained(tmp_path / "bert")
    weights = load_file(tmp_path / "bert" / "model.safetensors")
    del weights["encoder.layer.1.output.dense.weight"]
    save_file(weights, tmp_path / "bert" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"model.safetensors does not fit .*config.json: it lacks 1 weight the "
                                              r"config asks for \(encoder.layer.1.output.dense.weight\)"):
        DefinitionEmbModel.from_pretrained_model(tmp_path / "bert")
    # A config with fewer layers than the weights would silently drop a trained layer: refused too.
    BertModel(bert_config()).save_pretrained(tmp_path / "shallower")
    config = json.loads((tmp_path / "shallower" / "config.json").read_text())
    (tmp_path / "shallower" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(CheckpointError, match=r"shallower.model.safetensors does not fit .*holds 16 weights the config "
                                              r"has no place for \(encoder.layer.1"):
        DefinitionEmbModel.from_pretrained_model(tmp_path / "shallower")


# ------------------------------------------------------------------------------------------- saving, loading
@pytest.mark.parametrize("reader_config", [roberta_config(), bart_config()], ids=["encoder-only", "encoder-decoder"])
def test_save_and_load_give_identical_outputs(reader_config, tmp_path):
    model = definition_model(reader_config, base_model_name_or_path="tester/tiny-plm")
    model.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["model_type"] == "definition-emb"
    assert stored["auto_map"] == {"AutoConfig": "configuration_definition_emb.DefinitionEmbConfig",
                                  "AutoModel": "modeling_definition_emb.DefinitionEmbModel"}
    card = (tmp_path / "README.md").read_text()
    assert "pipeline_tag: feature-extraction" in card and "Reconsidering Token Embeddings" in card
    assert "tester/tiny-plm" in card and model.config.reader_type in card
    loaded = AutoModel.from_pretrained(tmp_path)
    assert type(loaded) is DefinitionEmbModel and not loaded.training
    batch = batch_for(model)
    with torch.no_grad():
        expected, got = model(**batch), loaded(**batch)
    torch.testing.assert_close(got.definition_embeddings, expected.definition_embeddings, rtol=0, atol=0)
    torch.testing.assert_close(got.loss, expected.loss, rtol=0, atol=0)
    torch.testing.assert_close(loaded.target_embeddings, model.target_embeddings, rtol=0, atol=0)


def test_missing_weights_load_finite(tmp_path):
    model = definition_model(bart_config())
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    kept = {name: tensor for name, tensor in weights.items()
            if name not in ("target_embeddings", "embedding_projection.weight")}
    assert len(kept) == len(weights) - 2
    save_file(kept, tmp_path / "model.safetensors", metadata={"format": "pt"})
    # from_pretrained refuses a checkpoint that lacks weights, naming them ...
    with pytest.raises(CheckpointError, match=r"it lacks 2 weights the config asks for \(embedding_projection.weight, "
                                              r"target_embeddings\)"):
        DefinitionEmbModel.from_pretrained(tmp_path)
    # ... and strict=False loads as transformers does: they start as in a fresh model, never from leftover memory.
    loaded = DefinitionEmbModel.from_pretrained(tmp_path, strict=False)
    assert all(torch.isfinite(tensor).all() for tensor in loaded.state_dict().values())
    assert loaded.target_embeddings.abs().max() == 0
    projection = loaded.embedding_projection.weight
    assert 0 < projection.std().item() < 0.05  # normal(0, init_std = 0.02), not zeros or leftover memory
    torch.testing.assert_close(loaded.reader.state_dict()["encoder.layers.0.fc1.weight"],
                               model.reader.state_dict()["encoder.layers.0.fc1.weight"], rtol=0, atol=0)


@pytest.mark.parametrize("damage", ["truncated", "zero-bytes"])
def test_a_damaged_checkpoint_fails_loudly(damage, tmp_path):
    definition_model(roberta_config()).save_pretrained(tmp_path)
    weights_file = tmp_path / "model.safetensors"
    data = weights_file.read_bytes()
    weights_file.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    with pytest.raises(CheckpointError, match="a weights file is damaged") as error:
        AutoModel.from_pretrained(tmp_path)
    assert str(weights_file) in str(error.value)


# ------------------------------------------------------------------------------------------------ bad input
def _bad(batch: dict, **changes) -> dict:
    return {**batch, **changes}


@pytest.mark.parametrize(
    "reader, change, message",
    [
        ("encoder-only", lambda b: _bad(b, labels=b["labels"][:, :5]),
         r"labels must have the shape of input_ids \(3, 7\).*got \(3, 5\)"),
        ("encoder-decoder", lambda b: _bad(b, labels=torch.full((3, 7), -100)),
         r"labels must have the shape of decoder_input_ids \(3, 5\)"),
        ("encoder-only", lambda b: _bad(b, labels=b["labels"].masked_fill(b["labels"] == 57, VOCAB)),
         r"labels must be token ids in \[0, 100\) or -100 .*got \[100\]"),
        ("encoder-only", lambda b: _bad(b, labels=b["labels"].masked_fill(b["labels"] == 57, -5)),
         r"labels must be token ids in \[0, 100\) or -100 .*got \[-5\]"),
        ("encoder-decoder", lambda b: {k: v for k, v in b.items() if not k.startswith("decoder_")},
         "encoder-decoder reader needs decoder_input_ids.*DefinitionCollator"),
        ("encoder-only", lambda b: _bad(b, input_ids=b["input_ids"].masked_fill(b["input_ids"] == PAD, VOCAB)),
         r"input_ids must be token ids in \[0, 100\).*got values from \d+ to 100"),
        ("encoder-only", lambda b: _bad(b, input_ids=b["input_ids"] - 10),
         r"input_ids must be token ids in \[0, 100\).*got values from -"),
        ("encoder-decoder", lambda b: _bad(b, decoder_input_ids=b["decoder_input_ids"] + VOCAB),
         r"decoder_input_ids must be token ids in \[0, 100\)"),
        ("encoder-only", lambda b: _bad(b, decoder_input_ids=b["input_ids"]),
         "decoder_input_ids / decoder_attention_mask are for encoder-decoder readers"),
        ("encoder-only", lambda b: _bad(b, attention_mask=b["attention_mask"][:, :4]),
         r"attention_mask must have the shape of input_ids \(3, 7\)"),
        ("encoder-only", lambda b: _bad(b, input_ids=b["input_ids"][0]),
         r"input_ids must have shape \(batch_size, length\)"),
        ("encoder-only", lambda b: {"input_ids": b["input_ids"][:, :0]},
         r"input_ids has shape \(3, 0\): the reader needs a batch of at least one row of at least one token"),
        ("encoder-only", lambda b: {"input_ids": b["input_ids"][:0]}, r"input_ids has shape \(0, 7\)"),
        ("encoder-decoder", lambda b: {**b, "decoder_input_ids": b["decoder_input_ids"][:, :0], "labels": None,
                                       "decoder_attention_mask": None},
         r"decoder_input_ids has shape \(3, 0\)"),
    ],
    ids=["labels-shape", "labels-shape-decoder", "label-too-large", "label-negative", "no-decoder-input",
         "input-id-too-large", "input-id-negative", "decoder-id-too-large", "decoder-input-for-encoder-only",
         "mask-shape", "one-dimensional", "empty-rows", "empty-batch", "empty-decoder-rows"],
)
def test_bad_input_is_refused(reader, change, message):
    model = definition_model(roberta_config() if reader == "encoder-only" else bart_config())
    with pytest.raises(ValueError, match=message):
        model(**change(batch_for(model)))


# ---------------------------------------------------------------------------------------------- portability
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Saved encoder-only and encoder-decoder models, a batch for each and their outputs in this process."""
    root = tmp_path_factory.mktemp("definition-emb-portable")
    saved = {}
    for name, reader_config in [("roberta", roberta_config()), ("bart", bart_config())]:
        model = definition_model(reader_config, seed=5, base_model_name_or_path=f"tester/tiny-{name}")
        model.save_pretrained(root / name)
        batch = batch_for(model, seed=7)
        with torch.no_grad():
            output = model(**batch)
        saved[name] = dict(folder=root / name, batch={key: value.tolist() for key, value in batch.items()},
                           embeddings=output.definition_embeddings, loss=output.loss.item())
    return saved


# argv[1]: JSON {"jobs": [{"location": ..., "batch": {...}}, ...]}
REMOTE_DEFINITION_EMB = NO_PACKAGE_PRELUDE + r'''
import json
import torch
from transformers import AutoModel

results = []
for job in json.loads(open(sys.argv[1]).read())["jobs"]:
    try:
        AutoModel.from_pretrained(job["location"])
        refused = None
    except Exception as error:
        refused = f"{type(error).__name__}: {error}"
    model = AutoModel.from_pretrained(job["location"], trust_remote_code=True).eval()
    batch = {key: torch.tensor(value) for key, value in job["batch"].items()}
    with torch.no_grad():
        output = model(**batch)
    results.append({
        "refused": refused,
        "model_class": type(model).__name__,
        "model_module": type(model).__module__,
        "embeddings": output.definition_embeddings.tolist(),
        "loss": output.loss.item(),
        "targets_sum": model.target_embeddings.double().sum().item(),
    })
print("\nRESULT " + json.dumps({"results": results,
                                 "package_imported": any(m.startswith("hf_entity_models") for m in sys.modules)}))
'''

PUSH = r'''
import json, sys
from hf_entity_models import DefinitionEmbModel
commits = [str(DefinitionEmbModel.from_pretrained(folder).push_to_hub(repo_id))
           for folder, repo_id in zip(sys.argv[1::2], sys.argv[2::2])]
print("RESULT " + json.dumps({"commits": commits}))
'''


def test_checkpoints_load_without_the_package_from_a_folder_and_from_the_hub(checkpoints, tmp_path):
    from hub_server import LoopbackHub

    repos = {name: f"tester/definition-emb-{name}" for name in checkpoints}
    jobs = []
    for name, saved in checkpoints.items():
        jobs += [dict(name=name, location=str(saved["folder"]), batch=saved["batch"]),
                 dict(name=name, location=repos[name], batch=saved["batch"])]
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": jobs}))
    with LoopbackHub() as hub:
        push_args = [arg for name in checkpoints for arg in (str(checkpoints[name]["folder"]), repos[name])]
        pushed = run_python(PUSH, *push_args, env=subprocess_env(tmp_path / "hf_push", hub.endpoint), cwd=tmp_path)
        remote = run_python(REMOTE_DEFINITION_EMB, str(tmp_path / "jobs.json"),
                            env=subprocess_env(tmp_path / "hf_remote", hub.endpoint), cwd=tmp_path)
        files = {name: hub.files(repo_id) for name, repo_id in repos.items()}
        unhandled = list(hub.unhandled)
    assert unhandled == []
    assert all(commit.startswith(f"{hub.endpoint}/tester/definition-emb-") for commit in pushed["commits"])
    for name in checkpoints:
        assert {"model.safetensors", "config.json", "README.md", "configuration_definition_emb.py",
                "modeling_definition_emb.py", "checkpoints.py", "encoders.py"} <= set(files[name])
        # Only the code that runs the model: no card, Hub or results code.
        assert_ships_only_running_code(files[name], ("configuration_definition_emb.py", "modeling_definition_emb.py",
                                                     "checkpoints.py", "encoders.py"))
        assert files[name]["model.safetensors"] == (checkpoints[name]["folder"] / "model.safetensors").read_bytes()
        assert b"feature-extraction" in files[name]["README.md"]
    assert not remote["package_imported"]
    assert len(remote["results"]) == 4
    for job, result in zip(jobs, remote["results"]):
        saved = checkpoints[job["name"]]
        assert result["refused"] is not None and "trust_remote_code" in result["refused"]
        assert result["model_class"] == "DefinitionEmbModel"
        assert result["model_module"].startswith("transformers_modules.")
        torch.testing.assert_close(torch.tensor(result["embeddings"]), saved["embeddings"], rtol=0, atol=0)
        assert result["loss"] == saved["loss"]


# -------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize(
    "reader_config, overrides",
    [(roberta_config(), {}), (bart_config(), dict(freeze_reader_embeddings=True))],
    ids=["encoder-only", "encoder-decoder-frozen-embeddings"],
)
def test_trainer_steps_lower_the_loss(reader_config, overrides, tmp_path):
    model = definition_model(reader_config, seed=1, **overrides).train()
    rows = []
    for seed in range(4):
        batch = batch_for(model, seed=10 * seed + 1)
        rows += [{key: value[index] for key, value in batch.items()} for index in range(3)]
    stacked = {key: torch.stack([row[key] for row in rows]) for key in rows[0]}
    targets_before = model.target_embeddings.clone()
    embeddings_before = model.get_input_embeddings().weight.detach().clone()

    def eval_loss() -> float:
        model.eval()
        with torch.no_grad():
            return model(**stacked).loss.item()

    before = eval_loss()
    arguments = TrainingArguments(
        output_dir=str(tmp_path), max_steps=24, per_device_train_batch_size=4, learning_rate=3e-3,
        lr_scheduler_type="constant", save_strategy="no", logging_steps=4, report_to=[], disable_tqdm=True,
        use_cpu=True, seed=0,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=rows)
    trainer.train()
    after = eval_loss()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    assert after < 0.7 * before, (before, after)
    assert torch.equal(model.target_embeddings, targets_before)
    frozen = overrides.get("freeze_reader_embeddings", False)
    assert torch.equal(model.get_input_embeddings().weight, embeddings_before) == frozen


def test_resizing_the_vocabulary_is_refused_with_the_way_out():
    from transformers import BertConfig

    model = DefinitionEmbModel(DefinitionEmbConfig(reader_config=BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)))
    with pytest.raises(ValueError, match="from_pretrained_model"):
        model.resize_token_embeddings(60)
    assert model.get_input_embeddings().weight.shape[0] == 50
