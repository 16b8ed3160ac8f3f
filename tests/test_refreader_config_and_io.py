"""Referential Reader config validation, Auto classes, save/load in both input modes, missing keys, corrupt
checkpoints, LM -> coreference transfer, frozen parts after loading, word vectors, generation."""

import json
import math
import re
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_encoder_config
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from hf_entity_models import (
    AutoModelForCoreference,
    CheckpointError,
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
    RefReaderModel,
)
from hf_entity_models.training import GumbelTemperatureCallback


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # A tiny recurrent model is all per-step overhead: extra intra-op threads only add synchronisation (and
    # oversubscribe a busy CI machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(**overrides) -> RefReaderConfig:
    values = dict(vocab_size=60, embedding_size=6, hidden_size=8, key_size=4, num_memory_cells=3)
    values.update(overrides)
    return RefReaderConfig(**values)


def tiny_encoder_reader_config(**overrides) -> RefReaderConfig:
    values = dict(
        encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], hidden_size=8, key_size=4, num_memory_cells=2
    )
    values.update(overrides)
    return RefReaderConfig(**values)


def perturb(model):
    """Make every tensor distinct from its initialisation, so that a tensor left at init is noticed."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    return model


def batch(low=1, high=60):
    input_ids = torch.randint(low, high, (2, 9))
    mask = torch.ones_like(input_ids)
    mask[1, 6:] = 0
    return dict(input_ids=input_ids.masked_fill(mask == 0, 0), attention_mask=mask)


# ---------------------------------------------------------------------------------------------------- config
def test_default_config_follows_the_paper_and_builds_working_models():
    config = RefReaderConfig()
    assert config.model_type == "refreader"
    assert config.uses_encoder is False
    assert (config.num_memory_cells, config.key_size, config.hidden_size, config.embedding_size) == (2, 16, 300, 300)
    assert config.dropout == 0.5 and config.initial_salience == 1e-7
    assert (config.entity_half_life, config.non_entity_half_life) == (4, 30)
    assert config.entity_decay == pytest.approx(0.5 ** (1 / 4), abs=1e-12)
    assert config.non_entity_decay == pytest.approx(0.5 ** (1 / 30), abs=1e-12)
    assert config.entity_decay ** 4 == pytest.approx(0.5) and config.non_entity_decay ** 30 == pytest.approx(0.5)
    weights = (config.self_link_weight, config.positive_link_weight, config.negative_link_weight, config.other_pair_weight)
    assert weights == (0.1, 5.0, 50.0, 1.0)
    assert config.lm_loss_weight == 0 and config.gumbel_temperature == 1.0
    assert config.vocab_size == 30522 and config.tie_word_embeddings is False
    input_ids = torch.tensor([[101, 7592, 2088, 102]])
    coreference = RefReaderForCoreference(config).eval()
    assert coreference.lm_head is None
    with torch.no_grad():
        output = coreference(input_ids=input_ids)
    assert output.overwrite_probs.shape == (1, 4, 2) and torch.isfinite(output.salience).all()
    language_model = RefReaderForCausalLM(config).eval()
    with torch.no_grad():
        lm_output = language_model(input_ids=input_ids, labels=input_ids)
    assert lm_output.logits.shape == (1, 4, 30522)
    # An untrained LM is close to uniform over the vocabulary.
    assert lm_output.loss.item() == pytest.approx(math.log(30522), rel=0.05)


def test_key_size_defaults_to_16_incremental_and_32_with_an_encoder():
    assert RefReaderConfig(hidden_size=8).key_size == 16
    with_encoder = RefReaderConfig(encoder_config=tiny_encoder_config(num_hidden_layers=4), hidden_size=8)
    assert with_encoder.uses_encoder and with_encoder.key_size == 32
    assert with_encoder.encoder_layers == [-1, -2, -3, -4]  # top four layers, last first (authors' code)
    assert RefReaderConfig(encoder_config=tiny_encoder_config(), encoder_layers=[-1], key_size=8).key_size == 8
    # The default top-four layers do not exist in a two-layer encoder: refused, with the valid range.
    with pytest.raises(ValueError, match=r"use indices in \[-3, 2\]"):
        RefReaderConfig(encoder_config=tiny_encoder_config())
    assert with_encoder.input_feature_size == 4 * 32
    assert RefReaderConfig(embedding_size=12).input_feature_size == 12


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_memory_cells=0), "num_memory_cells must be >= 1"),
        (dict(hidden_size=0), "hidden_size must be >= 1"),
        (dict(key_size=0), "key_size must be >= 1"),
        (dict(entity_half_life=0), "entity_half_life is a number of tokens"),
        (dict(non_entity_half_life=-3), "non_entity_half_life is a number of tokens"),
        (dict(initial_salience=0.0), "initial_salience must be in"),
        (dict(dropout=1.0), "dropout must be in"),
        (dict(negative_link_weight=-1.0), "negative_link_weight must be >= 0"),
        (dict(gumbel_temperature=0.0), "gumbel_temperature must be > 0"),
        (dict(coref_threshold=1.5), "coref_threshold is a probability"),
        (dict(pad_token_id=60), "pad_token_id must be in"),
        (dict(tie_word_embeddings=True), "embedding_size == hidden_size"),
        (dict(encoder_config=tiny_encoder_config(), lm_loss_weight=0.5), "lm_loss_weight > 0 needs the incremental"),
        (dict(encoder_config=tiny_encoder_config(), encoder_layers=[-4]), "do not exist in an encoder with 2 layers"),
        (dict(encoder_config=tiny_encoder_config(), encoder_layers=[-1, -1]), "must not repeat"),
        (dict(encoder_config=tiny_encoder_config(), encoder_layers=[-1], encoder_window_size=64, encoder_window_overlap=64),
         "encoder_window_overlap must be in"),
    ],
)
def test_invalid_values_raise_value_error_with_the_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_wrongly_typed_values_are_refused():
    with pytest.raises(TypeError, match=r"num_memory_cells must be an integer, got 'two' \(str\)"):
        tiny_config(num_memory_cells="two")


def test_causal_lm_refuses_the_encoder_mode():
    with pytest.raises(ValueError, match="incremental mode"):
        RefReaderForCausalLM(tiny_encoder_reader_config())


def test_config_round_trips_through_json(tmp_path):
    config = tiny_encoder_reader_config(coref_threshold=0.05, entity_half_life=3, encoder_window_size=64)
    config.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["model_type"] == "refreader" and stored["encoder_config"]["model_type"] == "bert"
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, RefReaderConfig)
    assert loaded.key_size == 4 and loaded.entity_decay == pytest.approx(0.5 ** (1 / 3))
    without_path = lambda values: {k: v for k, v in values.items() if k != "_name_or_path"}
    assert without_path(loaded.to_dict()) == without_path(config.to_dict())


# ------------------------------------------------------------------------------------------------ Auto classes
def test_auto_classes_resolve_the_referential_reader():
    config = tiny_config()
    assert isinstance(AutoConfig.for_model("refreader"), RefReaderConfig)
    assert type(AutoModel.from_config(config)) is RefReaderModel
    assert type(AutoModelForCausalLM.from_config(config)) is RefReaderForCausalLM
    assert type(AutoModelForCoreference.from_config(config)) is RefReaderForCoreference
    assert type(AutoModelForCoreference.from_config(tiny_encoder_reader_config())) is RefReaderForCoreference


def test_auto_classes_load_saved_checkpoints(tmp_path):
    RefReaderForCausalLM(tiny_config()).save_pretrained(tmp_path / "lm")
    RefReaderForCoreference(tiny_config()).save_pretrained(tmp_path / "coref")
    assert type(AutoModelForCausalLM.from_pretrained(tmp_path / "lm")) is RefReaderForCausalLM
    assert type(AutoModelForCoreference.from_pretrained(tmp_path / "coref")) is RefReaderForCoreference
    assert type(AutoModel.from_pretrained(tmp_path / "coref")) is RefReaderModel


# ----------------------------------------------------------------------------------------------- save and load
def outputs_of(model, inputs):
    with torch.no_grad():
        output = model(**inputs)
    return {name: value for name, value in output.items() if isinstance(value, torch.Tensor)}


@pytest.mark.parametrize(
    "model_class, mode",
    [
        (RefReaderModel, "incremental"),
        (RefReaderForCoreference, "incremental"),
        (RefReaderForCausalLM, "incremental"),
        (RefReaderModel, "encoder"),
        (RefReaderForCoreference, "encoder"),
    ],
)
def test_save_and_load_give_identical_outputs(tmp_path, model_class, mode):
    config = tiny_config() if mode == "incremental" else tiny_encoder_reader_config()
    model = perturb(model_class(config)).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pt"))
    loaded = model_class.from_pretrained(tmp_path).eval()
    for (name, expected), (other, actual) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert name == other and torch.equal(expected, actual), name
    inputs = batch() if mode == "incremental" else batch(1000, 2000)
    if model_class is RefReaderForCoreference:
        inputs.update(pronoun_spans=torch.tensor([[4, 5], [3, 4]]), candidate_spans=torch.tensor([[[1, 3], [6, 8]]] * 2))
        inputs.update(link_pairs=torch.tensor([[[1, 4]], [[2, 3]]]), link_labels=torch.tensor([[1], [0]]))
    if model_class is RefReaderForCausalLM:
        inputs["labels"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    before, after = outputs_of(model, inputs), outputs_of(loaded, inputs)
    assert before.keys() == after.keys() and len(before) >= 5
    for name in before:
        # Loaded weights are views into the (unaligned) safetensors file, so CPU kernels may round differently
        # in the last bit: identical up to float32 rounding (a wrongly loaded tensor is off by ~0.05).
        torch.testing.assert_close(after[name], before[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    "model_class, missing_key",
    [
        (RefReaderForCoreference, "refreader.initial_hidden"),
        (RefReaderForCoreference, "refreader.initial_keys"),
        (RefReaderForCoreference, "refreader.initial_values"),
        (RefReaderForCoreference, "refreader.query_bias"),
        (RefReaderForCoreference, "refreader.key_update.weight_hh"),
        (RefReaderForCoreference, "refreader.gru.bias_ih"),
        (RefReaderForCoreference, "refreader.embeddings.weight"),
        (RefReaderForCausalLM, "lm_head.weight"),
        (RefReaderModel, "initial_keys"),
        (RefReaderModel, "value_update.weight_ih"),
    ],
)
def test_loading_with_a_missing_key_gives_finite_weights(tmp_path, model_class, missing_key):
    model = perturb(model_class(tiny_config()))
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    assert missing_key in weights
    del weights[missing_key]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    # from_pretrained refuses a checkpoint that lacks a weight, naming it ...
    with pytest.raises(CheckpointError, match=rf"it lacks 1 weight the config asks for \({re.escape(missing_key)}\)"):
        model_class.from_pretrained(tmp_path)
    # ... and strict=False loads as transformers does: it starts as in a fresh model, never from leftover memory.
    loaded = model_class.from_pretrained(tmp_path, strict=False)
    for name, parameter in loaded.named_parameters():
        assert torch.isfinite(parameter).all(), name
    # The missing tensor was re-initialised; every other tensor was loaded.
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor) != (name == missing_key), name
    # ... the way a fresh model initialises it (authors' code: standard normal initial state, zero offset b).
    reinitialised = loaded.get_parameter(missing_key).detach()
    if missing_key.endswith("query_bias"):
        assert torch.count_nonzero(reinitialised) == 0
    elif missing_key.split(".")[-1].startswith("initial_"):
        assert 0.4 < reinitialised.std().item() < 1.8 and reinitialised.abs().max() < 6
    with torch.no_grad():
        output = loaded.eval()(**batch())
    tensors = [value for value in output.values() if isinstance(value, torch.Tensor)]
    assert all(torch.isfinite(value).all() for value in tensors)


def test_learned_initial_state_is_initialised_like_the_authors_code():
    model = RefReaderModel(tiny_config(hidden_size=64, key_size=32, num_memory_cells=4))
    # Standard normal initial hidden state, keys and values; a zero attention offset.
    for name in ("initial_hidden", "initial_keys", "initial_values"):
        values = model.get_parameter(name).detach()
        assert 0.6 < values.std().item() < 1.4 and abs(values.mean().item()) < 0.4, name
    assert torch.count_nonzero(model.query_bias) == 0


def test_a_corrupt_checkpoint_fails_loudly(tmp_path):
    RefReaderForCoreference(tiny_config()).save_pretrained(tmp_path)
    weights_file = tmp_path / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[: weights_file.stat().st_size // 2])
    with pytest.raises(Exception) as error:
        RefReaderForCoreference.from_pretrained(tmp_path)
    assert "safetensors" in repr(error.value).lower() or "incomplete" in str(error.value).lower()


def test_a_checkpoint_with_a_wrongly_shaped_tensor_is_refused(tmp_path):
    RefReaderForCoreference(tiny_config()).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["refreader.initial_keys"] = torch.zeros(5, 4)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(Exception, match="(?i)size|shape"):
        RefReaderForCoreference.from_pretrained(tmp_path)


# ------------------------------------------------------------------------------------ LM -> coreference transfer
def test_language_model_checkpoint_loads_into_the_coreference_head(tmp_path):
    language_model = perturb(RefReaderForCausalLM(tiny_config()))
    language_model.save_pretrained(tmp_path)
    coreference = RefReaderForCoreference.from_pretrained(tmp_path)
    assert coreference.lm_head is None
    reader_tensors = {k: v for k, v in language_model.state_dict().items() if k.startswith("refreader.")}
    assert len(reader_tensors) > 20
    loaded = coreference.state_dict()
    for name, tensor in reader_tensors.items():
        assert torch.equal(loaded[name], tensor), name
    # With an LM loss weight, the LM head comes along and the combined loss is reported.
    combined = RefReaderForCoreference.from_pretrained(tmp_path, lm_loss_weight=0.5).eval()
    assert combined.config.lm_loss_weight == 0.5
    assert torch.equal(combined.lm_head.weight, language_model.lm_head.weight)
    assert torch.equal(combined.lm_head.bias, language_model.lm_head.bias)
    for name, tensor in reader_tensors.items():
        assert torch.equal(combined.state_dict()[name], tensor), name
    inputs = batch()
    pairs = dict(link_pairs=torch.tensor([[[1, 4]], [[2, 3]]]), link_labels=torch.tensor([[1], [0]]))
    with torch.no_grad():
        output = combined(**inputs, **pairs)
        lm_output = language_model.eval()(**inputs, labels=inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100))
    assert output.lm_loss is not None and output.lm_loss.item() == pytest.approx(lm_output.loss.item(), rel=1e-6)
    assert output.loss.item() == pytest.approx(output.coref_loss.item() + 0.5 * output.lm_loss.item(), rel=1e-6)


# ------------------------------------------------------------------------------------------ frozen parts, vectors
def test_a_loaded_model_keeps_its_encoder_frozen(tmp_path):
    model = RefReaderForCoreference(tiny_encoder_reader_config())
    assert not any(parameter.requires_grad for parameter in model.refreader.encoder.parameters())
    model.save_pretrained(tmp_path)
    loaded = RefReaderForCoreference.from_pretrained(tmp_path)
    assert not any(parameter.requires_grad for parameter in loaded.refreader.encoder.parameters())
    assert all(parameter.requires_grad for parameter in loaded.refreader.gru.parameters())
    assert loaded.refreader.initial_keys.requires_grad
    loaded.train()
    assert not loaded.refreader.encoder.training  # a frozen feature extractor runs without dropout


def test_freeze_embeddings_survives_loading(tmp_path):
    model = RefReaderForCoreference(tiny_config(freeze_embeddings=True))
    assert not model.refreader.embeddings.weight.requires_grad
    model.save_pretrained(tmp_path)
    loaded = RefReaderForCoreference.from_pretrained(tmp_path)
    assert not loaded.refreader.embeddings.weight.requires_grad
    assert loaded.refreader.input_projection.weight.requires_grad
    trainable = RefReaderForCoreference.from_pretrained(tmp_path, freeze_embeddings=False)
    assert trainable.refreader.embeddings.weight.requires_grad
    # A frozen embedding gets no gradient in training.
    loaded.train()
    output = loaded(input_ids=torch.tensor([[3, 4, 5, 6]]), link_pairs=torch.tensor([[[1, 3]]]), link_labels=torch.tensor([[1]]))
    output.loss.backward()
    assert loaded.refreader.embeddings.weight.grad is None
    assert loaded.refreader.entity_gate.weight.grad.abs().sum() > 0


def test_load_word_vectors_copies_the_vectors_and_checks_their_shape():
    model = RefReaderModel(tiny_config())
    vectors = torch.randn(60, 6)
    model.load_word_vectors(vectors)
    assert torch.equal(model.embeddings.weight.detach(), vectors)
    for bad in (torch.randn(59, 6), torch.randn(60, 7), torch.randn(60), [[0.0] * 6] * 60):
        with pytest.raises(ValueError, match=r"shape \(60, 6\)"):
            model.load_word_vectors(bad)
    with pytest.raises(ValueError, match="NaN"):
        model.load_word_vectors(torch.full((60, 6), float("nan")))
    with pytest.raises(ValueError, match="incremental mode"):
        RefReaderModel(tiny_encoder_reader_config()).load_word_vectors(vectors)


def test_tied_word_embeddings_share_the_output_projection(tmp_path):
    model = RefReaderForCausalLM(tiny_config(embedding_size=8, tie_word_embeddings=True))
    assert model.lm_head.weight.data_ptr() == model.refreader.embeddings.weight.data_ptr()
    model.save_pretrained(tmp_path)
    loaded = RefReaderForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight.data_ptr() == loaded.refreader.embeddings.weight.data_ptr()
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    untied = RefReaderForCausalLM(tiny_config(embedding_size=8))
    assert untied.lm_head.weight.data_ptr() != untied.refreader.embeddings.weight.data_ptr()


# ------------------------------------------------------------------------------------------------ generation
def test_generate_equals_a_manual_greedy_loop():
    model = perturb(RefReaderForCausalLM(tiny_config())).eval()
    prompt = torch.tensor([[5, 17, 42, 8]])
    with torch.no_grad():
        generated = model.generate(
            input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3, do_sample=False
        )
        manual = prompt
        for _ in range(3):
            next_token = model(input_ids=manual).logits[:, -1].argmax(-1, keepdim=True)
            manual = torch.cat([manual, next_token], dim=1)
    assert generated.shape == (1, 7)
    assert torch.equal(generated, manual)


def test_gumbel_temperature_schedule_reaches_the_reader():
    for model in (RefReaderForCoreference(tiny_config()), RefReaderForCausalLM(tiny_config())):
        callback = GumbelTemperatureCallback()
        seen = {}
        for epoch in (0, 10, 25):
            callback.on_epoch_begin(None, SimpleNamespace(epoch=float(epoch)), None, model=model)
            seen[epoch] = model.refreader.gumbel_temperature
        assert seen == {0: 1.0, 10: 0.5, 25: 0.25}
        assert model.config.gumbel_temperature == 1.0
        with pytest.raises(ValueError, match="must be > 0"):
            model.set_gumbel_temperature(0.0)
