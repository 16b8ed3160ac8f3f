"""`hf-entity train petra|refreader --conll --coreference-mode tokens` and `hf-entity evaluate CHECKPOINT --conll`:
whole-document coreference with the token memory on CoNLL-2012 files from the command line, on tiny stories and tiny
models (one epoch, chunks of 16 tokens)."""

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch
from conftest import error_line, run_cli, save_tiny_encoder, tiny_encoder_config
from transformers import AutoTokenizer

from hf_entity_models import AutoModelForCoreference, ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.cli import main
from hf_entity_models.tasks.coreference import (
    CorefDocument,
    read_conll_coreference,
    score_coreference,
    write_conll_coreference,
)

NAMES = ["Anna", "Boris", "Clara", "David", "Emma", "Felix"]
TINY_PETRA = ["--hidden-size", 16, "--mlp-hidden-size", 16, "--num-memory-cells", 4,
              "--config-overrides", '{"encoder_layers": [-2, -1]}']
TINY_REFREADER = ["--hidden-size", 8, "--num-memory-cells", 2,
                  "--config-overrides", '{"key_size": 4, "encoder_layers": [-2, -1]}']
# The token memory on --conll (the document mode, the default, is tested in test_cli_document_mode.py); QUICK[:2]
# serves GAP-format runs too.
QUICK = ["--epochs", 1, "--chunk-length", 16, "--batch-size", 4, "--threads", 1, "--coreference-mode", "tokens"]
TABLE_ROWS = ("MUC", "B3", "CEAF-m", "CEAF-e", "BLANC", "LEA")


def story(index: int) -> CorefDocument:
    """A story of 23 words with two people, their pronouns and a dog (nested in "her dog")."""
    first, second = NAMES[index % len(NAMES)], NAMES[(index + 1) % len(NAMES)]
    words = (f"{first} met {second} in the garden . She smiled at him and he waved back to her . {first} left early "
             "with her dog .").split()
    mentions = [(0, 0, 1), (2, 2, 2), (6, 6, 1), (9, 9, 2), (11, 11, 2), (16, 16, 1), (18, 18, 1), (21, 21, 1),
                (21, 22, 3)]
    return CorefDocument(f"story_{index}", 0, words, mentions)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """A tiny encoder; three training stories (a folder), one validation story, one story alone."""
    root = tmp_path_factory.mktemp("conll-data")
    books = root / "books"
    books.mkdir()
    for index in range(3):
        write_conll_coreference(story(index), books / f"story_{index}.conll")
    return {
        "encoder": save_tiny_encoder(root / "encoder"),
        "books": books,
        "validation": write_conll_coreference(story(4), root / "validation.conll"),
        "one": write_conll_coreference(story(5), root / "one.conll"),
        "tmp": root,
    }


def train_in_process(argv: list) -> tuple[int, str, str]:
    """`main(argv)` for a module fixture (capsys is per test): status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(arg) for arg in argv])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory) -> dict:
    """`train petra --conll BOOKS --validation FILE`."""
    output = tmp_path_factory.mktemp("runs") / "petra-conll"
    status, out, err = train_in_process([
        "train", "petra", "--conll", data["books"], "--validation", data["validation"], "--encoder", data["encoder"],
        *TINY_PETRA, *QUICK, "--output-dir", output,
    ])
    assert status == 0, err[-3000:]
    return {"folder": output, "out": out, "report": json.loads((output / "validation_results.json").read_text())}


@pytest.fixture(scope="module")
def forcereader_checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("forcereader")
    config = ForceReaderConfig(encoder_config=tiny_encoder_config(num_hidden_layers=1), interaction_channels=4,
                               interaction_kernel_sizes=[3, 5])
    ForceReaderForQuestionAnswering(config).save_pretrained(folder)  # refused on its config.json: no tokenizer needed
    return folder


# --------------------------------------------------------------------------------------------------- train
def test_train_conll_saves_the_model_with_its_mention_threshold(trained):
    folder, report = trained["folder"], trained["report"]
    model = AutoModelForCoreference.from_pretrained(folder)
    assert type(model).__name__ == "PetraForCoreference"
    assert model.config.mention_threshold == pytest.approx(report["mention_threshold"])
    assert json.loads((folder / "config.json").read_text())["mention_threshold"] == report["mention_threshold"]
    assert AutoTokenizer.from_pretrained(folder).is_fast and (folder / "README.md").is_file()
    assert (report["training_documents"], report["validation_documents"], report["held_out_documents"]) == (3, 1, [])
    assert report["chunk_length"] == 16 and report["epochs_run"] == 1
    lines = trained["out"].strip().splitlines()
    assert lines[-2] == (
        f"validation CoNLL F1 {report['conll_f1']:.1f} (MUC {report['muc_f1']:.1f}, B3 {report['bcub_f1']:.1f}, "
        f"CEAF-e {report['ceafe_f1']:.1f}, LEA {report['lea_f1']:.1f}); mentions F1 {report['mention_f1']:.1f}; "
        f"gold-mention CoNLL F1 {report['gold_conll_f1']:.1f}; mention threshold {report['mention_threshold']:.2f}"
        + ("" if report["new_entity_threshold"] is None
           else f", new entity at overwrite share {report['new_entity_threshold']:.2f}")
    )  # fmt: skip
    assert model.config.new_entity_threshold == report["new_entity_threshold"]
    assert lines[-1] == f"checkpoint saved to {folder}"
    assert "held out" not in trained["out"], "--validation given: nothing is held out"


def test_train_conll_without_validation_holds_out_the_last_document(data, tmp_path, capsys):
    output = tmp_path / "refreader-conll"
    status, out, err = run_cli(capsys, "train", "refreader", "--conll", data["books"], "--encoder", data["encoder"],
                               *TINY_REFREADER, *QUICK, "--output-dir", output)
    assert status == 0, err[-3000:]
    assert "held out for validation (not trained on): the last 1 of the 3 documents of --conll, story_2" in out
    report = json.loads((output / "validation_results.json").read_text())
    assert (report["training_documents"], report["validation_documents"]) == (2, 1)
    assert report["held_out_documents"] == ["story_2"] and report["validation"] is None
    assert type(AutoModelForCoreference.from_pretrained(output)).__name__ == "RefReaderForCoreference"
    # The held-out story scored by `evaluate` gives the validation scores of training.
    status, out, err = run_cli(capsys, "evaluate", output, "--conll", data["books"] / "story_2.conll", "--json")
    assert status == 0, err[-3000:]
    result = json.loads(out)
    assert result["model"] == "RefReaderForCoreference" and result["documents"] == 1
    assert result["conll_f1"] == pytest.approx(report["conll_f1"])


# ------------------------------------------------------------------------------------------------ evaluate
def test_evaluate_conll_prints_the_table_and_writes_the_responses(trained, data, tmp_path, capsys):
    folder, report = trained["folder"], trained["report"]
    responses, output = tmp_path / "responses.conll", tmp_path / "result.json"
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--responses", responses,
                               "--output", output)
    assert status == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[0].startswith("PetraForCoreference on 1 document(s) of ")
    assert f"mention threshold {report['mention_threshold']:.2f}" in lines[0]
    assert lines[1].split() == ["metric", "recall", "precision", "F1"]
    assert [line.split()[0] for line in lines[2:8]] == list(TABLE_ROWS)
    assert lines[8].startswith("CoNLL F1 ") and lines[9].startswith("mentions: recall ")
    result = json.loads(output.read_text())
    # The threshold stored by training, on the validation documents of training: the same scores.
    assert result["mention_threshold"] == pytest.approx(report["mention_threshold"])
    assert result["conll_f1"] == pytest.approx(report["conll_f1"])
    assert result["mention_f1"] == pytest.approx(report["mention_f1"])
    assert lines[8] == f"CoNLL F1 {result['conll_f1']:.2f} (mean of the MUC, B3 and CEAF-e F1)"
    # The written responses are the documents of the key, and score as printed.
    key, written = read_conll_coreference(data["validation"]), read_conll_coreference(responses)
    assert [(d.name, d.part, d.words) for d in written] == [(d.name, d.part, d.words) for d in key]
    assert score_coreference(key, written)["conll_f1"] == pytest.approx(result["conll_f1"])


def test_evaluate_conll_with_gold_mentions_and_a_threshold(trained, data, capsys):
    folder, report = trained["folder"], trained["report"]
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--gold-mentions", "--json")
    assert status == 0, err[-3000:]
    result = json.loads(out)
    assert result["gold_mentions"] is True and result["mention_threshold"] is None
    assert result["mention_f1"] == 100.0 and result["conll_f1"] == pytest.approx(report["gold_conll_f1"])
    assert set(result) >= {"muc", "bcub", "ceafm", "ceafe", "blanc", "lea", "conll_f1"}
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--mention-threshold", 1)
    assert status == 0, err[-3000:]
    assert "(mention threshold 1.00; singletons scored)" in out.splitlines()[0]


# -------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "argv, message",
    [
        (lambda d: ["--conll", d["books"], "--train", d["validation"]], "--conll and --train are two sources"),
        (lambda d: ["--conll", d["books"], "--synthetic", 8], "--conll and --synthetic are two sources"),
        (lambda d: ["--conll", d["books"], "--validation", d["books"] / "story_1.conll"],
         "shares 1 of its 1 document(s) with --conll"),
        (lambda d: ["--conll", d["one"]], "holds 1 document(s), too few to hold one out for validation"),
        (lambda d: ["--conll", d["tmp"] / "missing"], "missing does not exist"),
        (lambda d: ["--conll", d["books"], "--max-train-rows", 4], "--max-train-rows apply to GAP-format data"),
        (lambda d: ["--synthetic", 8, "--chunk-length", 16], "--chunk-length applies to --conll documents"),
    ],
    ids=["with-train", "with-synthetic", "shared-validation", "one-document", "missing", "gap-option", "chunk-alone"],
)
def test_train_conll_errors_are_one_line(argv, message, data, tmp_path, capsys):
    output = tmp_path / "out"
    status, out, err = run_cli(capsys, "train", "petra", *argv(data), "--encoder", data["encoder"],
                               "--output-dir", output)
    assert status == 1 and out == ""
    assert message in error_line(err, "train petra")
    assert not output.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (lambda d: ["forcereader", "--conll", d["validation"]],
         "--conll scores a coreference checkpoint (PeTra, Referential Reader: CoNLL-2012 metrics) or a language "
         "model (GPT2E, GPT-2: perplexity), but"),
        (lambda d: ["forcereader", "--conll", d["validation"], "--gold-mentions"],
         "--gold-mentions only apply to coreference checkpoints (PeTra, Referential Reader) scored on --conll"),
        (lambda d: ["petra", "--gold-mentions"], "--gold-mentions apply to CoNLL-2012 documents; add --conll"),
        (lambda d: ["petra", "--conll", d["validation"], "--sweep"], "--sweep tunes the GAP decision threshold"),
        (lambda d: ["petra", "--conll", d["validation"], "--gold-mentions", "--mention-threshold", 0.5],
         "--gold-mentions clusters the gold ones; drop one of them"),
        (lambda d: ["petra", "--conll", d["validation"], "--split", "test"], "drop --split"),
        (lambda d: ["petra", "--conll", d["tmp"] / "missing"], "missing does not exist"),
        (lambda d: ["petra", "--conll", d["validation"], "--responses", d["one"]], "already exists; pass --overwrite"),
        (lambda d: ["petra", "--conll", d["validation"], "--responses", d["validation"], "--overwrite"],
         "is an input of this command"),
    ],
    ids=["forcereader", "forcereader-option", "option-without-conll", "sweep", "gold-and-threshold", "split",
         "missing", "responses-exist", "responses-is-the-key"],
)
def test_evaluate_conll_errors_are_one_line(argv, message, trained, forcereader_checkpoint, data, capsys):
    name, *rest = argv(data)
    checkpoint = {"petra": trained["folder"], "forcereader": forcereader_checkpoint}[name]
    before = data["validation"].read_text()
    status, out, err = run_cli(capsys, "evaluate", checkpoint, *rest)
    assert status == 1 and out == ""
    assert message in error_line(err, "evaluate")
    assert data["validation"].read_text() == before


def test_the_cli_defaults_are_train_on_conlls():
    from hf_entity_models.cli import coreference as cli
    from hf_entity_models.tasks.coreference import conll_training

    assert (cli.CONLL_BATCH_SIZE, cli.CONLL_CHUNK_LENGTH) == (
        conll_training.CONLL_BATCH_SIZE, conll_training.CONLL_CHUNK_LENGTH
    )
