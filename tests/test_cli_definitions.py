"""`hf-entity definitions`: a definitions file without definitions is refused before any model is loaded, an
output folder that holds an input is refused, and a run leaves no empty Trainer folder behind."""

import json
from pathlib import Path

import pytest
import torch
from conftest import error_line, run_cli
from embedding_fixtures import tiny_bert_config, wordpiece_tokenizer
from transformers import AutoModel, BertModel

DEFINITIONS = [
    ("cat", "noun", "a small domesticated feline animal"),
    ("dog", "noun", "a domesticated canine animal"),
    ("happy", "adjective", "feeling or showing pleasure"),
]
TASK_TEXTS = ["the cat sat on the mat", "a happy dog barked at the zebra"]
HEADER = "word\tpart_of_speech\tdefinition\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A tiny BERT with MiniLM's tokenizer, a definitions table and task texts."""
    folder = tmp_path_factory.mktemp("definitions")
    tokenizer = wordpiece_tokenizer()
    torch.manual_seed(1)
    BertModel(tiny_bert_config(tokenizer)).save_pretrained(folder / "plm")
    tokenizer.save_pretrained(folder / "plm")
    (folder / "definitions.tsv").write_text(HEADER + "".join(f"{w}\t{p}\t{d}\n" for w, p, d in DEFINITIONS))
    (folder / "task.txt").write_text("\n".join(TASK_TEXTS) + "\n")
    return folder


def arguments(inputs: Path, definitions: Path, output: Path) -> list:
    return ["definitions", inputs / "plm", "--definitions", definitions, "--task-texts", inputs / "task.txt",
            "--alpha", 100, "--max-steps", 2, "--batch-size", 2, "--no-number-words", "--output-dir", output]


@pytest.mark.parametrize("content", ["", HEADER], ids=["empty", "header-only"])
def test_a_definitions_file_without_definitions_is_refused_before_the_model_loads(
    inputs, tmp_path, capsys, monkeypatch, content
):
    definitions = tmp_path / "definitions.tsv"
    definitions.write_text(content)
    monkeypatch.setattr(AutoModel, "from_pretrained", lambda *a, **k: pytest.fail("the model was loaded"))
    status, out, err = run_cli(capsys, *arguments(inputs, definitions, tmp_path / "out"))
    assert status == 1 and out == ""
    # The loader refuses it too (tasks/embeddings/definitions.py); the CLI checks before loading any model either way.
    assert f"{definitions} holds no definitions" in error_line(err, "definitions")
    assert not (tmp_path / "out").exists()


def test_an_output_folder_that_holds_an_input_is_refused(inputs, tmp_path, capsys):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    definitions = project / "data" / "definitions.tsv"
    definitions.write_text((inputs / "definitions.tsv").read_text())
    status, _, err = run_cli(capsys, *arguments(inputs, definitions, project), "--overwrite")
    assert status == 1
    assert f"--output-dir {project} contains --definitions {definitions}" in error_line(err, "definitions")
    assert sorted(path.name for path in project.rglob("*")) == ["data", "definitions.tsv"]


def test_a_run_leaves_no_empty_trainer_folder(inputs, tmp_path, capsys):
    output = tmp_path / "out"
    status, out, err = run_cli(capsys, *arguments(inputs, inputs / "definitions.tsv", output))
    assert status == 0, err
    assert json.loads(out.strip().splitlines()[-1])["replaced_tokens"] >= 2
    assert (output / "definition-reader" / "config.json").is_file()
    empty = [str(path) for path in output.rglob("*") if path.is_dir() and not any(path.iterdir())]
    assert empty == [] and not any(path.name == "trainer" for path in output.rglob("*"))


def test_a_task_text_file_that_is_not_text_is_named_in_one_line(inputs, tmp_path, capsys):
    binary = tmp_path / "task.bin"
    binary.write_bytes(b"the cat\n\xff\xfe\x00binary")
    argv = arguments(inputs, inputs / "definitions.tsv", tmp_path / "out")
    argv[argv.index(inputs / "task.txt")] = binary
    status, out, err = run_cli(capsys, *argv)
    assert status == 1 and out == ""
    line = error_line(err, "definitions")
    assert str(binary) in line and "UTF-8" in line, line
    assert not (tmp_path / "out").exists()


def test_training_builds_prompts_only_for_the_definitions_its_steps_read():
    import argparse
    from types import SimpleNamespace

    from datasets import Dataset

    from hf_entity_models.cli.embeddings import _training_definitions
    from hf_entity_models.tasks.embeddings.training import LEAST_SQUARES_PROMPTS

    mask_slot = SimpleNamespace(readout="mask-slot", word_slots="paper")

    def draw(max_steps, preset="paper", definitions=None, config=mask_slot):
        arguments = argparse.Namespace(max_steps=max_steps, batch_size=3, seed=0, preset=preset)
        return _training_definitions(arguments, definitions, wordpiece_tokenizer(), config)

    definitions = Dataset.from_dict({"word": [f"w{index}" for index in range(10)]})
    chosen, again = draw(2, definitions=definitions), draw(2, definitions=definitions)
    assert len(chosen) == 6 and chosen["word"] == again["word"] and set(chosen["word"]) <= set(definitions["word"])
    assert draw(4, definitions=definitions) is definitions
    # The default preset also reads the least-squares start's sample of A (4,096 prompts): here, everything.
    assert LEAST_SQUARES_PROMPTS > 10 and draw(2, "default", definitions) is definitions
    # A pooled-definition reader rebuilds single-token words only: it draws from their definitions.
    words = Dataset.from_dict({"word": ["cat", "snowboarders", "dog", "discomforting"]})
    pooled = SimpleNamespace(readout="pooled-definition", word_slots="distinct")
    assert wordpiece_tokenizer().tokenize("snowboarders")[1:] and wordpiece_tokenizer().tokenize("discomforting")[1:]
    assert sorted(draw(2, "default", words, pooled)["word"]) == ["cat", "dog"]


GATE_WORDS = ["cat", "dog", "happy", "mat", "zebra", "sat", "barked", "small", "feline", "animal", "canine", "pleasure"]


@pytest.fixture(scope="module")
def gate_inputs(inputs, tmp_path_factory) -> Path:
    """A PLM whose embedding rows share a large common direction (so the mean embedding points close to every row),
    a reader that predicts the zero vector for every token (a reader that learned nothing), and twelve definitions."""
    from hf_entity_models import DefinitionEmbModel

    folder = tmp_path_factory.mktemp("gate")
    model = BertModel.from_pretrained(inputs / "plm")
    with torch.no_grad():
        model.get_input_embeddings().weight.add_(0.5)
    model.save_pretrained(folder / "plm")
    tokenizer = wordpiece_tokenizer()
    tokenizer.save_pretrained(folder / "plm")
    reader = DefinitionEmbModel.from_pretrained_model(model)
    with torch.no_grad():
        reader.embedding_projection.weight.zero_()
    reader.save_pretrained(folder / "reader")
    rows = "".join(f"{word}\tnoun\tthe word {word} as a definition\n" for word in GATE_WORDS)
    (folder / "definitions.tsv").write_text(HEADER + rows)
    return folder


def test_a_reader_that_does_not_beat_the_mean_embedding_is_refused_in_one_line(inputs, gate_inputs, tmp_path, capsys):
    command = ["definitions", gate_inputs / "plm", "--definitions", gate_inputs / "definitions.tsv", "--task-texts",
               inputs / "task.txt", "--reader", gate_inputs / "reader", "--alpha", 100, "--no-number-words"]
    status, _, err = run_cli(capsys, *command, "--output-dir", tmp_path / "refused")
    line = error_line(err, "definitions")
    assert status == 1 and "error: nothing written: on " in line and "against" in line and "--allow-worse" in line
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    status, out, err = run_cli(capsys, *command, "--allow-worse", "--output-dir", tmp_path / "written")
    assert status == 0, err
    held_out = json.loads(out.strip().splitlines()[-1])["held_out"]
    assert held_out["tokens"] >= 1 and held_out["beats_mean_vector"] is False
    assert held_out["reader_cosine"] == 0.0 < held_out["mean_vector_cosine"]
    assert "Held-out check" in (tmp_path / "written" / "README.md").read_text()
