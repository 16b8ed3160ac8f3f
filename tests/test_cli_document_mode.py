"""`hf-entity train petra|refreader --conll` in the document mode (the default) and `hf-entity evaluate CHECKPOINT
--conll` on a document-mode checkpoint: tiny encoder, tiny stories, a few epochs."""

import inspect
import json
from pathlib import Path

import pytest
from conftest import error_line, run_cli, save_tiny_encoder
from test_cli_conll import TINY_PETRA, train_in_process
from test_document_training import story

from hf_entity_models import AutoModelForCoreference
from hf_entity_models.tasks.coreference import read_conll_coreference, score_coreference, write_conll_coreference

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY_HEAD = {"encoder_layers": [-2, -1], "document_hidden_size": 16, "span_width_size": 4, "max_span_width": 4,
             "document_dropout": 0.0}
TINY = ["--config-overrides", json.dumps(TINY_HEAD), "--threads", 1]
TABLE_ROWS = ("MUC", "B3", "CEAF-m", "CEAF-e", "BLANC", "LEA")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """A tiny encoder; four training stories (a folder), two validation stories (one file), an empty folder."""
    root = tmp_path_factory.mktemp("document-data")
    books = root / "books"
    books.mkdir()
    for index in range(4):
        write_conll_coreference(story(index), books / f"story_{index}.conll")
    (root / "empty").mkdir()
    return {
        "encoder": save_tiny_encoder(root / "encoder"),
        "books": books,
        "validation": write_conll_coreference([story(4), story(5)], root / "validation.conll"),
        "empty": root / "empty",
        "tmp": root,
    }


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory) -> dict:
    """`train petra --conll BOOKS --validation FILE` (the document mode, by default)."""
    output = tmp_path_factory.mktemp("runs") / "petra-document"
    status, out, err = train_in_process([
        "train", "petra", "--conll", data["books"], "--validation", data["validation"], "--encoder", data["encoder"],
        *TINY, "--epochs", 10, "--learning-rate", 0.01, "--output-dir", output,
    ])
    assert status == 0, err[-3000:]
    return {"folder": output, "out": out, "report": json.loads((output / "validation_results.json").read_text())}


@pytest.fixture(scope="module")
def token_checkpoint(data, tmp_path_factory) -> dict:
    """`train petra --conll BOOKS --validation FILE --coreference-mode tokens`: the token memory, as before."""
    output = tmp_path_factory.mktemp("runs") / "petra-tokens"
    status, out, err = train_in_process([
        "train", "petra", "--conll", data["books"], "--validation", data["validation"], "--encoder", data["encoder"],
        *TINY_PETRA, "--coreference-mode", "tokens", "--epochs", 1, "--chunk-length", 16, "--batch-size", 4,
        "--threads", 1, "--output-dir", output,
    ])
    assert status == 0, err[-3000:]
    return {"folder": output, "out": out, "report": json.loads((output / "validation_results.json").read_text())}


# --------------------------------------------------------------------------------------------------- train
def test_train_conll_saves_a_document_mode_checkpoint_with_its_span_threshold(trained, data):
    folder, report = trained["folder"], trained["report"]
    model = AutoModelForCoreference.from_pretrained(folder)
    assert type(model).__name__ == "PetraForCoreference" and model.config.coreference_mode == "document"
    assert model.config.document_hidden_size == 16 and model.document_head is not None
    stored = json.loads((folder / "config.json").read_text())
    assert stored["coreference_mode"] == "document"
    assert stored["span_threshold"] == report["span_threshold"] == model.config.span_threshold
    # The threshold is the best of the sweep on the validation documents (the first of equals).
    sweep = {float(key): value for key, value in report["span_threshold_sweep"].items()}
    assert sorted(sweep) == [-1.0, -0.5, 0.0, 0.5, 1.0]
    best = max(sweep, key=sweep.get)
    assert report["span_threshold"] == best and report["conll_f1"] == sweep[best]
    assert (report["coreference_mode"], report["training_documents"], report["validation_documents"]) == (
        "document", 4, 2
    )
    assert report["epochs_run"] == 10 and len(report["history"]) == 10 and report["encoder_fine_tuned"] is False
    assert report["best_epoch"] == 1 + max(range(10), key=lambda index: report["history"][index]["conll_f1"])
    assert report["encoder"] == str(data["encoder"])
    # What it was trained on and measured is in its config (the model card reads it) and its card.
    recorded = {(r["split"], r["metric"]): r for r in model.config.evaluation_results}
    assert recorded[("validation", "conll_f1")]["value"] == pytest.approx(report["conll_f1"])
    assert recorded[("validation", "gold_conll_f1")]["value"] == pytest.approx(report["gold_conll_f1"])
    assert recorded[("validation", "mention_f1")]["dataset"] == "validation"  # named after the --validation file
    assert (folder / "README.md").is_file() and (folder / "tokenizer.json").is_file()
    lines = trained["out"].strip().splitlines()
    assert lines[-2] == (
        f"validation CoNLL F1 {report['conll_f1']:.1f} (MUC {report['muc_f1']:.1f}, B3 {report['bcub_f1']:.1f}, "
        f"CEAF-e {report['ceafe_f1']:.1f}, LEA {report['lea_f1']:.1f}); gold-mention CoNLL F1 "
        f"{report['gold_conll_f1']:.1f}; mentions P {report['mention_precision']:.1f} R "
        f"{report['mention_recall']:.1f} F1 {report['mention_f1']:.1f}; span threshold "
        f"{report['span_threshold']:g}; best epoch {report['best_epoch']}, {report['seconds_per_epoch']:.1f} s per "
        "epoch"
    )
    assert lines[-1] == f"checkpoint saved to {folder}"


def test_train_refreader_conll_trains_the_document_mode_holding_out_the_last_document(data, tmp_path, capsys):
    output = tmp_path / "refreader-document"
    status, out, err = run_cli(capsys, "train", "refreader", "--conll", data["books"], "--encoder", data["encoder"],
                               *TINY, "--epochs", 1, "--output-dir", output)
    assert status == 0, err[-3000:]
    assert "held out for validation (not trained on): the last 1 of the 4 documents of --conll, story_3" in out
    report = json.loads((output / "validation_results.json").read_text())
    assert (report["training_documents"], report["validation_documents"], report["held_out_documents"]) == (
        3, 1, ["story_3"]
    )
    model = AutoModelForCoreference.from_pretrained(output)
    assert type(model).__name__ == "RefReaderForCoreference" and model.config.coreference_mode == "document"
    assert model.config.entity_update == "gru"  # the Referential Reader's own update


def test_train_conll_fine_tunes_the_encoder_at_its_own_rate(data, tmp_path, capsys):
    output = tmp_path / "petra-fine-tuned"
    overrides = json.dumps({**TINY_HEAD, "freeze_encoder": False, "trainable_encoder_layers": 1})
    status, out, err = run_cli(capsys, "train", "petra", "--conll", data["books"], "--validation", data["validation"],
                               "--encoder", data["encoder"], "--config-overrides", overrides, "--threads", 1,
                               "--epochs", 1, "--encoder-learning-rate", 0.001, "--output-dir", output)
    assert status == 0, err[-3000:]
    report = json.loads((output / "validation_results.json").read_text())
    assert report["encoder_fine_tuned"] is True and report["encoder_learning_rate"] == 0.001
    model = AutoModelForCoreference.from_pretrained(output)
    assert model.config.freeze_encoder is False and model.config.trainable_encoder_layers == 1


def test_train_conll_coreference_mode_tokens_keeps_the_token_memory(token_checkpoint):
    folder, report = token_checkpoint["folder"], token_checkpoint["report"]
    model = AutoModelForCoreference.from_pretrained(folder)
    assert model.config.coreference_mode == "tokens" and model.document_head is None
    assert report["chunk_length"] == 16 and model.config.mention_threshold == pytest.approx(report["mention_threshold"])
    assert "coreference_mode" not in report and "span_threshold" not in report
    assert token_checkpoint["out"].strip().splitlines()[-2].endswith(
        f"mention threshold {report['mention_threshold']:.2f}"
        + ("" if report["new_entity_threshold"] is None
           else f", new entity at overwrite share {report['new_entity_threshold']:.2f}")
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ evaluate
def test_evaluate_prints_the_table_and_writes_responses_that_rescore_as_printed(trained, data, tmp_path, capsys):
    folder, report = trained["folder"], trained["report"]
    responses, output = tmp_path / "responses.conll", tmp_path / "result.json"
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--responses", responses,
                               "--output", output)
    assert status == 0, err[-3000:]
    lines = out.strip().splitlines()
    assert lines[0].startswith("PetraForCoreference on 2 document(s) of ")
    assert f"(span threshold {report['span_threshold']:g}; singletons scored)" in lines[0]
    assert lines[1].split() == ["metric", "recall", "precision", "F1"]
    assert [line.split()[0] for line in lines[2:8]] == list(TABLE_ROWS)
    result = json.loads(output.read_text())
    assert result["coreference_mode"] == "document" and result["span_threshold"] == report["span_threshold"]
    assert lines[8] == f"CoNLL F1 {result['conll_f1']:.2f} (mean of the MUC, B3 and CEAF-e F1)"
    assert lines[9] == (
        f"mentions: recall {result['mention_recall']:.2f}, precision {result['mention_precision']:.2f}, F1 "
        f"{result['mention_f1']:.2f} (exact spans; {result['response_mentions']} found, 18 in the key)"
    )
    assert lines[10] == (
        f"gold-mention CoNLL F1 {result['gold_conll_f1']:.2f} (the key's mentions clustered by the model)"
    )
    # The validation documents of training at the threshold it chose: the scores training reported.
    for key in ("conll_f1", "mention_f1", "mention_precision", "mention_recall", "gold_conll_f1"):
        assert result[key] == pytest.approx(report[key]), key
    # The written responses are the key's documents, and score as printed.
    key, written = read_conll_coreference(data["validation"]), read_conll_coreference(responses)
    assert [(d.name, d.part, d.words) for d in written] == [(d.name, d.part, d.words) for d in key]
    rescored = score_coreference(key, written)
    assert rescored["conll_f1"] == pytest.approx(result["conll_f1"])
    assert [rescored[metric]["f1"] for metric in ("muc", "bcub", "ceafe")] == pytest.approx(
        [result[metric]["f1"] for metric in ("muc", "bcub", "ceafe")]
    )
    assert sum(len(d.mentions) for d in written) == result["response_mentions"]


def test_evaluate_with_a_span_threshold_or_the_gold_mentions(trained, data, tmp_path, capsys):
    folder, report = trained["folder"], trained["report"]
    # The lowest threshold keeps the most spans (0.6 per word), overlapping ones among them: still written, and
    # rescored as printed.
    responses = tmp_path / "many.conll"
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--span-threshold", -1e6,
                               "--responses", responses, "--json")
    assert status == 0, err[-3000:]
    result = json.loads(out)
    written = read_conll_coreference(responses)
    assert result["response_mentions"] == sum(len(d.mentions) for d in written) > 18
    assert score_coreference(read_conll_coreference(data["validation"]), written)["conll_f1"] == pytest.approx(
        result["conll_f1"]
    )
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--span-threshold", 1e6,
                               "--json")
    assert status == 0, err[-3000:]
    result = json.loads(out)
    assert result["span_threshold"] == 1e6 and result["response_mentions"] == 0 and result["mention_f1"] == 0.0
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], "--gold-mentions", "--json")
    assert status == 0, err[-3000:]
    result = json.loads(out)
    assert result["gold_mentions"] is True and result["span_threshold"] is None and result["mention_f1"] == 100.0
    assert result["conll_f1"] == pytest.approx(report["gold_conll_f1"]) == pytest.approx(result["gold_conll_f1"])


# -------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "argv, message",
    [
        (lambda d: ["petra", "--conll", d["empty"]], "holds no CoNLL file"),
        (lambda d: ["petra", "--synthetic", 8, "--coreference-mode", "document"],
         "--coreference-mode document chooses how --conll documents are learned"),
        (lambda d: ["petra", "--conll", d["books"], "--chunk-length", 16],
         "--chunk-length cuts the token mode's training chunks; the document mode trains on whole documents"),
        (lambda d: ["petra", "--conll", d["books"], "--hidden-size", 16, "--num-memory-cells", 4],
         "--num-memory-cells and --hidden-size set the token memory, which the document mode does not have"),
        (lambda d: ["refreader", "--conll", d["books"], "--incremental"],
         "--incremental reads no encoder, but the document mode reads a pretrained encoder's features"),
        (lambda d: ["petra", "--conll", d["books"], "--config-overrides", '{"coreference_mode": "tokens"}'],
         "--config-overrides sets coreference_mode='tokens', but --coreference-mode is 'document'"),
        (lambda d: ["petra", "--conll", d["books"], "--coreference-mode", "tokens", "--encoder-learning-rate", 1e-5],
         "--encoder-learning-rate applies to the --conll document mode with a fine-tuned encoder, not to "
         "--coreference-mode tokens"),
        (lambda d: ["petra", "--conll", d["books"], "--encoder-learning-rate", 1e-5, *TINY],
         "--encoder-learning-rate applies to a fine-tuned encoder, but this model's encoder is frozen"),
    ],
    ids=["empty-folder", "mode-without-conll", "chunk-length", "token-memory", "incremental", "mode-override",
         "encoder-rate-tokens", "encoder-rate-frozen"],
)
def test_train_document_mode_errors_are_one_line(argv, message, data, tmp_path, capsys):
    output = tmp_path / "out"
    model, *rest = argv(data)
    status, out, err = run_cli(capsys, "train", model, *rest, "--encoder", data["encoder"], "--output-dir", output)
    assert status == 1, err[-3000:]
    assert message in error_line(err, f"train {model}")
    assert not output.exists()


def test_train_refuses_a_token_mode_checkpoint_to_start_the_document_mode(token_checkpoint, data, tmp_path, capsys):
    status, out, err = run_cli(capsys, "train", "petra", "--conll", data["books"], "--init-from",
                               token_checkpoint["folder"], "--output-dir", tmp_path / "out")
    assert status == 1
    assert "is a coreference_mode='tokens' checkpoint, but --conll trains the document mode" in error_line(
        err, "train petra"
    )


def test_an_unknown_coreference_mode_is_a_usage_error(data, tmp_path, capsys):
    status, out, err = run_cli(capsys, "train", "petra", "--conll", data["books"], "--coreference-mode", "spans",
                               "--output-dir", tmp_path / "out")
    assert status == 2
    line = err.strip().splitlines()[-1]
    assert "argument --coreference-mode: invalid choice: 'spans' (choose from" in line
    assert "document" in line and "tokens" in line


@pytest.mark.parametrize(
    "checkpoint, argv, message",
    [
        ("document", ["--mention-threshold", 0.5],
         "is a coreference_mode='document' checkpoint, whose mentions are spans chosen by their logit: use "
         "--span-threshold LOGIT instead"),
        ("tokens", ["--span-threshold", 0.5],
         "--span-threshold applies to coreference_mode='document' checkpoints, but"),
        ("document", ["--span-threshold", 0.5, "--gold-mentions"],
         "--span-threshold chooses the model's own mentions, but --gold-mentions clusters the gold ones"),
    ],
    ids=["mention-threshold-on-document", "span-threshold-on-tokens", "span-threshold-and-gold"],
)
def test_evaluate_threshold_options_fit_the_checkpoints_mode(checkpoint, argv, message, trained, token_checkpoint,
                                                             data, capsys):
    folder = {"document": trained["folder"], "tokens": token_checkpoint["folder"]}[checkpoint]
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", data["validation"], *argv)
    assert status == 1 and out == ""
    assert message in error_line(err, "evaluate")


def test_the_cli_defaults_are_train_document_coreferences():
    from hf_entity_models.cli import coreference as cli
    from hf_entity_models.tasks.coreference import document_training

    defaults = inspect.signature(document_training.train_document_coreference).parameters
    assert cli.DOCUMENT_EPOCHS == document_training.DOCUMENT_EPOCHS == defaults["epochs"].default
    assert cli.DOCUMENT_ENCODER_LEARNING_RATE == defaults["encoder_learning_rate"].default
    arguments = document_training.document_training_arguments("unused")
    assert cli.DOCUMENT_BATCH_SIZE == arguments.per_device_train_batch_size

