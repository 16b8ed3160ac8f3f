"""What every config of the package says about a value it cannot take: a wrongly typed value (in Python, from
`from_dict`, in a checkpoint's config.json, through `--config-overrides`), a size no real model comes near, and a
key that names a property the other fields decide (`preset`). One clear error, naming the field, the value, what
is expected and the fix, instead of huggingface_hub's strict-dataclass traceback or an allocation failure."""

import json
import re

import pytest
from conftest import error_line, run_cli, save_tiny_encoder, tiny_encoder_config, tiny_petra_config
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, BartConfig, BertConfig

from hf_entity_models import (
    CheckpointError,
    DefinitionEmbConfig,
    ForceReaderConfig,
    GPT2EConfig,
    PetraConfig,
    PetraForCoreference,
    RefReaderConfig,
)


def refreader_config(**overrides) -> RefReaderConfig:
    return RefReaderConfig(**{**dict(vocab_size=100, embedding_size=16, hidden_size=16), **overrides})


def forcereader_config(**overrides) -> ForceReaderConfig:
    return ForceReaderConfig(**{**dict(encoder_config=tiny_encoder_config(), interaction_channels=8), **overrides})


def gpt2e_config(**overrides) -> GPT2EConfig:
    values = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, max_entities=8)
    return GPT2EConfig(**{**values, **overrides})


def definition_emb_config(**overrides) -> DefinitionEmbConfig:
    return DefinitionEmbConfig(**{**dict(reader_config=tiny_encoder_config()), **overrides})


BUILDERS = {
    "petra": tiny_petra_config,
    "refreader": refreader_config,
    "forcereader": forcereader_config,
    "gpt2e": gpt2e_config,
    "definition_emb": definition_emb_config,
}


# ------------------------------------------------------------------------------------------ wrongly typed values
@pytest.mark.parametrize(
    "model, field, value, expected, default",
    [
        ("petra", "num_memory_cells", 1.5, "an integer", "10"),
        ("petra", "coref_threshold", "x", "a number", "0.5"),
        ("petra", "encoder_layers", "-1", "a list of integers", "(-4, -3, -2, -1)"),
        ("refreader", "num_memory_cells", "two", "an integer", "2"),
        ("refreader", "entity_half_life", None, "a number", "4"),
        ("forcereader", "separate_encoding", "yes", "True or False", "True"),
        ("forcereader", "interaction_kernel_sizes", 3, "a list of integers", "(3, 5, 7)"),
        ("gpt2e", "max_entities", "many", "an integer", "256"),
        ("gpt2e", "n_layer", 2.0, "an integer", "12"),
        ("definition_emb", "loss", 3, "a string", "'cosine'"),
        ("definition_emb", "freeze_reader_embeddings", 1, "True or False", "False"),
    ],
)
def test_a_wrongly_typed_value_names_the_field_the_value_the_type_and_the_fix(model, field, value, expected, default):
    with pytest.raises(TypeError) as raised:
        BUILDERS[model](**{field: value})
    error = raised.value
    message = str(error)
    assert not isinstance(error, StrictDataclassError)
    assert isinstance(error, ValueError), "callers that catch ValueError for bad input (the CLI) must catch it too"
    assert f"{field} must be {expected}" in message and f"got {value!r}" in message, message
    assert f"(the default is {default})" in message, message
    assert "\n" not in message
    # One frame of ours, not huggingface_hub's chain of validators.
    assert error.__cause__ is None and error.__suppress_context__


def test_a_number_given_as_a_string_is_told_to_drop_the_quotes():
    with pytest.raises(TypeError, match=r"coref_threshold must be a number, got 'high' \(str\).*without quotes"):
        tiny_petra_config(coref_threshold="high")


def test_from_dict_gives_the_same_clear_error():
    stored = tiny_petra_config().to_dict()
    with pytest.raises(TypeError, match=r"PetraConfig\.coref_threshold must be a number.*got 'x'"):
        PetraConfig.from_dict({**stored, "coref_threshold": "x"})


def test_a_class_level_check_of_transformers_is_a_one_line_value_error():
    with pytest.raises(ValueError, match=r"^PetraConfig: The `output_attentions` attribute is not supported") as raised:
        tiny_petra_config(output_attentions=True, attn_implementation="sdpa")
    assert not isinstance(raised.value, StrictDataclassError)


@pytest.fixture(scope="module")
def petra_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("petra")
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    return folder


def edited_copy(checkpoint, destination, **changes):
    """A copy of a checkpoint folder's config.json and weights, with `changes` written into config.json."""
    destination.mkdir(exist_ok=True)
    for name in ("model.safetensors",):
        (destination / name).write_bytes((checkpoint / name).read_bytes())
    stored = json.loads((checkpoint / "config.json").read_text())
    (destination / "config.json").write_text(json.dumps({**stored, **changes}))
    return destination


@pytest.mark.parametrize(
    "load",
    [PetraConfig.from_pretrained, AutoConfig.from_pretrained, PetraForCoreference.from_pretrained],
    ids=["PetraConfig", "AutoConfig", "PetraForCoreference"],
)
def test_a_wrongly_typed_value_in_config_json_names_the_file(petra_checkpoint, tmp_path, load):
    folder = edited_copy(petra_checkpoint, tmp_path / "edited", coref_threshold="high")
    with pytest.raises(CheckpointError) as raised:
        load(str(folder))
    message = str(raised.value)
    assert str(folder / "config.json") in message, message
    assert "coref_threshold must be a number" in message and "got 'high'" in message, message
    assert "\n" not in message


def test_a_value_out_of_range_in_config_json_names_the_file(petra_checkpoint, tmp_path):
    folder = edited_copy(petra_checkpoint, tmp_path / "edited", coref_threshold=1.5)
    with pytest.raises(CheckpointError, match=r"config\.json.*coref_threshold is a probability and must be in \[0, 1\]"):
        AutoConfig.from_pretrained(str(folder))


def test_an_override_passed_to_from_pretrained_is_checked_and_blamed_not_the_file(petra_checkpoint):
    with pytest.raises(TypeError, match=r"num_memory_cells must be an integer.*got 1\.5") as raised:
        PetraConfig.from_pretrained(str(petra_checkpoint), num_memory_cells=1.5)
    assert not isinstance(raised.value, CheckpointError)
    # Set after construction, an override used to skip the value checks (and the size limits) altogether.
    with pytest.raises(ValueError, match="memory_chunk_size") as raised:
        PetraConfig.from_pretrained(str(petra_checkpoint), memory_chunk_size=100_000)
    assert not isinstance(raised.value, CheckpointError)
    loaded, unused = PetraConfig.from_pretrained(str(petra_checkpoint), num_memory_cells=3, other=1, return_unused_kwargs=True)
    assert loaded.num_memory_cells == 3 and unused == {"other": 1}


# ------------------------------------------------------------------------------------------------------ presets
def test_a_forcereader_config_json_with_a_preset_key_loads_when_the_fields_make_that_preset(tmp_path):
    config = ForceReaderConfig.from_preset("joint-bert", encoder_config=tiny_encoder_config())
    config.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**stored, "preset": "joint-bert"}))
    assert AutoConfig.from_pretrained(str(tmp_path)).preset == "joint-bert"


def test_a_forcereader_config_json_with_another_preset_is_refused_with_the_fix(tmp_path):
    forcereader_config().save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**stored, "preset": "joint-bert"}))
    for load in (ForceReaderConfig.from_pretrained, AutoConfig.from_pretrained):
        with pytest.raises(CheckpointError) as raised:
            load(str(tmp_path))
        message = str(raised.value)
        assert str(tmp_path / "config.json") in message and "'joint-bert'" in message and "'forcereader'" in message
        assert "ForceReaderConfig.from_preset('joint-bert'" in message, message


def test_a_preset_argument_is_checked_against_the_fields():
    with pytest.raises(ValueError, match=r"preset .*'forcereader'.*from_preset\('joint-bert'"):
        forcereader_config(preset="joint-bert")
    assert forcereader_config(preset="forcereader").preset == "forcereader"
    with pytest.raises(ValueError, match=r"GPT2EConfig\.from_preset\('paper'"):
        gpt2e_config(preset="paper")
    assert gpt2e_config(preset="entity-memory").preset == "entity-memory"


def test_other_derived_properties_are_accepted_when_they_agree_and_refused_when_not():
    assert definition_emb_config(vocab_size=30522).vocab_size == 30522
    with pytest.raises(ValueError, match=r"vocab_size .*follows from the other fields.*30522.*remove"):
        definition_emb_config(vocab_size=5)
    with pytest.raises(ValueError, match="encoder_feature_size"):
        tiny_petra_config(encoder_feature_size=3)


# ---------------------------------------------------------------------------------------------------- size limits
@pytest.mark.parametrize(
    "model, overrides, message",
    [
        ("petra", dict(hidden_size=10_000_000), r"hidden_size is 10,000,000, above the limit of 65,536"),
        ("petra", dict(mlp_hidden_size=100_000), r"mlp_hidden_size is 100,000, above the limit"),
        ("petra", dict(memory_chunk_size=100_000), r"memory_chunk_size is 100,000, above the limit of 128.*compile"),
        ("petra", dict(num_memory_cells=100_000), r"num_memory_cells is 100,000, above the limit of 256"),
        ("petra", dict(hidden_size=30_000, mlp_hidden_size=30_000), r"about [\d,]+ parameters.*above the limit of "
         r"10,000,000,000"),
        ("petra", dict(encoder_config=tiny_encoder_config(hidden_size=60_000, num_attention_heads=2)), "parameters"),
        ("refreader", dict(vocab_size=10**9), r"vocab_size is 1,000,000,000, above the limit of 4,194,304"),
        ("refreader", dict(embedding_size=10**6), r"embedding_size is 1,000,000, above the limit"),
        ("refreader", dict(key_size=10**6), r"key_size is 1,000,000, above the limit"),
        ("refreader", dict(memory_chunk_size=100_000), r"memory_chunk_size is 100,000, above the limit of 128"),
        ("forcereader", dict(interaction_channels=10**6), r"interaction_channels is 1,000,000, above the limit"),
        ("forcereader", dict(interaction_kernel_sizes=[3, 100_001]), r"interaction_kernel_sizes .*100,001.*above the "
         "limit"),
        ("gpt2e", dict(n_embd=10**6, entity_attention_size=2), r"n_embd is 1,000,000, above the limit of 65,536"),
        ("gpt2e", dict(n_layer=100_000), r"n_layer is 100,000, above the limit of 1,024"),
        ("gpt2e", dict(max_entities=10**7), r"max_entities is 10,000,000, above the limit"),
        ("gpt2e", dict(n_positions=10**8), r"n_positions is 100,000,000, above the limit"),
        ("gpt2e", dict(n_layer=1_000, n_embd=4_096, n_head=32), "parameters"),
        ("definition_emb", dict(embedding_size=10**7), r"embedding_size is 10,000,000, above the limit"),
    ],
)
def test_sizes_no_real_model_comes_near_are_refused_before_anything_is_allocated(model, overrides, message):
    with pytest.raises(ValueError, match=message) as raised:
        BUILDERS[model](**overrides)
    assert "limit" in str(raised.value) and "\n" not in str(raised.value)


def test_the_largest_real_configurations_are_accepted():
    bert_large = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    PetraConfig(encoder_config=bert_large)
    RefReaderConfig(encoder_config=bert_large)
    RefReaderConfig(vocab_size=262_144, embedding_size=1024, hidden_size=1024, num_memory_cells=20)
    ForceReaderConfig(encoder_config=bert_large)
    GPT2EConfig(n_layer=48, n_embd=1600, n_head=25, vocab_size=50257, n_positions=1024, entity_state="paper")
    bart_large = BartConfig(d_model=1024, encoder_layers=12, decoder_layers=12, vocab_size=50265)
    DefinitionEmbConfig(reader_config=bart_large)
    tiny_petra_config(memory_implementation="compiled", memory_chunk_size=128, num_memory_cells=256)


# ------------------------------------------------------------------------------------------------------- the CLI
@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return save_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.mark.parametrize(
    "options, message",
    [
        (["--config-overrides", '{"num_memory_cells": 1.5}'], r"num_memory_cells must be an integer.*got 1\.5"),
        (["--config-overrides", '{"coref_threshold": "x"}'], r"coref_threshold must be a number.*got 'x'"),
        (["--hidden-size", "10000000"], r"hidden_size is 10,000,000, above the limit of 65,536"),
        (["--config-overrides", '{"memory_chunk_size": 100000}'], r"memory_chunk_size is 100,000, above the limit"),
    ],
    ids=["float-cells", "string-threshold", "huge-hidden-size", "huge-chunk"],
)
def test_train_refuses_a_wrong_config_value_in_one_line(encoder, tmp_path, capsys, options, message):
    status, _, err = run_cli(capsys, "train", "petra", "--synthetic", 8, "--encoder", encoder, *options,
                             "--output-dir", tmp_path / "out")
    assert status == 1
    line = error_line(err, "train petra")
    assert re.search(message, line), line
