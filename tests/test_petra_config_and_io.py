"""PeTra config validation, Auto classes, save/load, missing keys and corrupt checkpoints, the Gumbel schedule."""

import json
import re
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_encoder_config, tiny_petra_config
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel

from hf_entity_models import AutoModelForCoreference, CheckpointError, PetraConfig, PetraForCoreference, PetraModel
from hf_entity_models.training import GumbelTemperatureCallback


def test_default_config_follows_the_paper_and_builds_a_working_model():
    config = PetraConfig()
    assert config.model_type == "petra"
    assert config.encoder_config.model_type == "bert" and config.encoder_config.hidden_size == 768
    assert config.encoder_layers == [-4, -3, -2, -1]
    assert config.freeze_encoder is True
    assert (config.hidden_size, config.num_memory_cells, config.key_size) == (300, 10, 20)
    assert config.usage_decay == 0.98 and config.dropout == 0.5
    assert (config.self_link_weight, config.positive_link_weight, config.negative_link_weight) == (1, 5, 50)
    assert config.entity_loss_weight == 0.1
    model = PetraForCoreference(config).eval()
    with torch.no_grad():
        output = model(input_ids=torch.tensor([[101, 7592, 2088, 102]]))
    assert output.overwrite_probs.shape == (1, 4, 10)
    assert torch.isfinite(output.coref_probs).all()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(num_memory_cells=0), "num_memory_cells must be >= 1"),
        (dict(memory_variant="key_value"), "memory_variant must be one of"),
        (dict(memory_variant="fixed_key", key_size=16), "key_size must be in"),
        (dict(usage_decay=1.0), "usage_decay must be in"),
        (dict(dropout=1.0), "dropout must be in"),
        (dict(negative_link_weight=-1.0), "negative_link_weight must be >= 0"),
        (dict(gumbel_temperature=0.0), "gumbel_temperature must be > 0"),
        (dict(coref_threshold=1.5), "coref_threshold is a probability"),
        (dict(encoder_layers=[-4]), r"do not exist in an encoder with 2 layers"),
        (dict(encoder_layers=[-1, -1]), "must not repeat"),
        (dict(encoder_window_size=64, encoder_window_overlap=64), "encoder_window_overlap must be in"),
        (dict(hidden_size=0), "hidden_size must be >= 1"),
    ],
)
def test_invalid_values_raise_value_error_with_the_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_petra_config(**overrides)


def test_wrongly_typed_values_are_refused():
    with pytest.raises(TypeError, match=r"num_memory_cells must be an integer, got 'ten' \(str\)"):
        tiny_petra_config(num_memory_cells="ten")


def test_auto_classes_resolve_petra():
    config = tiny_petra_config()
    assert isinstance(AutoConfig.for_model("petra"), PetraConfig)
    assert type(AutoModel.from_config(config)) is PetraModel
    assert type(AutoModelForCoreference.from_config(config)) is PetraForCoreference


def test_config_round_trips_through_json(tmp_path):
    config = tiny_petra_config(memory_variant="fixed_key", key_size=4, coref_threshold=0.07, encoder_window_size=64)
    config.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert stored["model_type"] == "petra" and stored["encoder_config"]["model_type"] == "bert"
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, PetraConfig)
    without_path = lambda values: {k: v for k, v in values.items() if k != "_name_or_path"}  # noqa: E731
    assert without_path(loaded.to_dict()) == without_path(config.to_dict())


@pytest.mark.parametrize("variant", ["vanilla", "learned_init", "fixed_key"])
def test_save_and_load_give_identical_outputs(tmp_path, variant):
    model = PetraForCoreference(tiny_petra_config(memory_variant=variant, key_size=4)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))  # make every tensor distinct from its init
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert not list(tmp_path.glob("*.bin")) and not list(tmp_path.glob("*.pt"))
    loaded = AutoModelForCoreference.from_pretrained(tmp_path).eval()
    for (name, expected), (_, actual) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(expected, actual), name
    input_ids = torch.randint(1000, 2000, (2, 9))
    spans = dict(pronoun_spans=torch.tensor([[4, 5], [6, 7]]), candidate_spans=torch.tensor([[[1, 3], [6, 8]]] * 2))
    with torch.no_grad():
        before, after = model(input_ids=input_ids, **spans), loaded(input_ids=input_ids, **spans)
    assert torch.equal(before.candidate_scores, after.candidate_scores)
    assert torch.equal(before.overwrite_probs, after.overwrite_probs)


@pytest.mark.parametrize(
    "variant, missing_key",
    [
        ("vanilla", "petra.gru.weight_hh_l0"),
        ("vanilla", "petra.similarity_mlp.input_layer.weight"),
        ("learned_init", "petra.memory_init"),
        ("fixed_key", "petra.memory_key"),
        ("vanilla", "petra.encoder.embeddings.word_embeddings.weight"),
    ],
)
def test_loading_with_a_missing_key_gives_finite_weights(tmp_path, variant, missing_key):
    PetraForCoreference(tiny_petra_config(memory_variant=variant, key_size=4)).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    assert missing_key in weights
    del weights[missing_key]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    # from_pretrained refuses a checkpoint that lacks a weight, naming it ...
    with pytest.raises(CheckpointError, match=rf"it lacks 1 weight the config asks for \({re.escape(missing_key)}\)"):
        PetraForCoreference.from_pretrained(tmp_path)
    # ... and strict=False loads as transformers does: it starts as in a fresh model, never from leftover memory.
    loaded = PetraForCoreference.from_pretrained(tmp_path, strict=False)
    for name, parameter in loaded.named_parameters():
        assert torch.isfinite(parameter).all(), name
    if missing_key in ("petra.memory_init", "petra.memory_key"):
        assert torch.count_nonzero(loaded.get_parameter(missing_key)) == 0  # the paper's zero initialisation


def test_a_corrupt_checkpoint_fails_loudly(tmp_path):
    PetraForCoreference(tiny_petra_config()).save_pretrained(tmp_path)
    weights_file = tmp_path / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[: weights_file.stat().st_size // 2])
    with pytest.raises(Exception) as error:
        PetraForCoreference.from_pretrained(tmp_path)
    assert "safetensors" in repr(error.value).lower() or "incomplete" in str(error.value).lower()


def test_a_checkpoint_with_a_wrongly_shaped_tensor_is_refused(tmp_path):
    PetraForCoreference(tiny_petra_config()).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["petra.gru.weight_hh_l0"] = torch.zeros(3, 3)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(Exception, match="(?i)size|shape"):
        PetraForCoreference.from_pretrained(tmp_path)


def test_from_encoder_copies_the_pretrained_encoder_weights(tmp_path):
    encoder = AutoModel.from_config(tiny_encoder_config())
    encoder.save_pretrained(tmp_path / "encoder")
    model = PetraForCoreference.from_encoder(
        str(tmp_path / "encoder"), encoder_layers=[-2, -1], hidden_size=16, mlp_hidden_size=16, num_memory_cells=3
    )
    assert model.config.num_memory_cells == 3
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(model.petra.encoder.state_dict()[name], tensor), name
    model.save_pretrained(tmp_path / "petra")
    restored = AutoModelForCoreference.from_pretrained(tmp_path / "petra")
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(restored.petra.encoder.state_dict()[name], tensor), name


def test_gumbel_temperature_halves_every_ten_epochs():
    model = PetraForCoreference(tiny_petra_config(gumbel_temperature=1.0))
    callback = GumbelTemperatureCallback()
    seen = {}
    for epoch in [0, 9, 10, 19, 20, 35]:
        callback.on_epoch_begin(None, SimpleNamespace(epoch=float(epoch)), None, model=model)
        seen[epoch] = model.petra.gumbel_temperature
    assert seen == {0: 1.0, 9: 1.0, 10: 0.5, 19: 0.5, 20: 0.25, 35: 0.125}
    assert model.config.gumbel_temperature == 1.0  # the saved config keeps the initial temperature


def test_a_loaded_model_keeps_its_encoder_frozen(tmp_path):
    PetraForCoreference(tiny_petra_config()).save_pretrained(tmp_path)
    loaded = PetraForCoreference.from_pretrained(tmp_path)
    assert not any(parameter.requires_grad for parameter in loaded.petra.encoder.parameters())
    assert all(parameter.requires_grad for parameter in loaded.petra.gru.parameters())
    unfrozen = PetraForCoreference.from_pretrained(tmp_path, freeze_encoder=False)
    assert all(parameter.requires_grad for parameter in unfrozen.petra.encoder.parameters())
