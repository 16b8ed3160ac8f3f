"""Where `hf-entity` writes and what it fetches: `definitions` saves like `train` (a staging folder moved into place,
only checkpoint files replaced, nothing left by an interrupted run), refuses a reader that is not one for its model,
and reads a definitions file's header; output paths are refused before torch is imported; `push` and Hub look-ups
say where they go and stop in seconds when the Hub does not answer (issue 32, section 3)."""

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from conftest import error_line, run_cli, tiny_petra_config
from embedding_fixtures import tiny_bert_config, wordpiece_tokenizer
from transformers import AutoModel, BertModel

import hf_entity_models.tasks.embeddings.definitions as definition_data
import hf_entity_models.tasks.embeddings.replacement as replacement
from hf_entity_models import DefinitionEmbModel, PetraForCoreference
from hf_entity_models.cli.checkpoints import checkpoint_entries

CONSOLE_SCRIPT = Path(sys.executable).parent / "hf-entity"
HEADER = "word\tpart_of_speech\tdefinition\n"
DEFINITIONS = HEADER + "cat\tnoun\ta small domesticated feline animal\ndog\tnoun\ta domesticated canine animal\n"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A tiny BERT (32 wide) with MiniLM's tokenizer, a definitions table and task texts."""
    folder = tmp_path_factory.mktemp("inputs")
    tokenizer = wordpiece_tokenizer()
    torch.manual_seed(1)
    BertModel(tiny_bert_config(tokenizer)).save_pretrained(folder / "plm")
    tokenizer.save_pretrained(folder / "plm")
    (folder / "definitions.tsv").write_text(DEFINITIONS)
    (folder / "task.txt").write_text("the cat sat on the mat\na dog barked\n")
    return folder


def definitions_command(inputs: Path, output: Path, *options) -> list:
    return ["definitions", inputs / "plm", "--definitions", inputs / "definitions.tsv", "--task-texts",
            inputs / "task.txt", "--alpha", 100, "--max-steps", 1, "--batch-size", 2, "--no-number-words",
            "--allow-worse", "--output-dir", output, *options]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(path.relative_to(folder)): None if path.is_dir() else path.read_bytes() for path in folder.rglob("*")}


def hidden_leftovers(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir() if path.name.startswith(".")]


# ------------------------------------------------------------------------------- definitions: staging, interrupts
def test_definitions_overwrite_replaces_the_checkpoint_files_and_keeps_the_users(inputs, tmp_path, capsys):
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("mine\n")
    (output / "model.safetensors.index.json").write_text('{"weight_map": {}}\n')  # a stale sharded checkpoint's
    (output / "vocab.json").write_text('{"foreign": 0}\n')  # another tokenizer's
    status, _, err = run_cli(capsys, *definitions_command(inputs, output, "--overwrite"))
    assert status == 0, err
    names = {path.name for path in output.iterdir()}
    assert "model.safetensors.index.json" not in names and "vocab.json" not in names, names
    assert {"notes.txt", "model.safetensors", "config.json", "definition-reader"} <= names
    assert (output / "notes.txt").read_text() == "mine\n"
    # What `push` would upload is the new checkpoint only.
    assert not {"model.safetensors.index.json", "vocab.json"} & {path.name for path in checkpoint_entries(output)}
    card = (output / "README.md").read_text()
    assert f'from_pretrained("{output}")' in card and ".saving-" not in card, "the card names the final folder"
    # A rerun replaces its own earlier output (the reader folder included) and still keeps the user's file.
    reader_before = (output / "definition-reader" / "model.safetensors").read_bytes()
    status, _, err = run_cli(capsys, *definitions_command(inputs, output, "--overwrite", "--max-steps", 4))
    assert status == 0, err
    assert (output / "definition-reader" / "model.safetensors").read_bytes() != reader_before
    assert (output / "notes.txt").read_text() == "mine\n"
    assert hidden_leftovers(tmp_path) == [] and hidden_leftovers(output) == []


@pytest.mark.parametrize("earlier_run", [False, True], ids=["no-target", "earlier-checkpoint"])
def test_an_interrupted_definitions_run_leaves_the_target_as_it_was(inputs, tmp_path, capsys, monkeypatch,
                                                                      earlier_run):
    output = tmp_path / "out"
    if earlier_run:
        status, _, err = run_cli(capsys, *definitions_command(inputs, output))
        assert status == 0, err
    before = snapshot(output) if earlier_run else None

    def interrupt(*args, **kwargs):  # after the reader is trained, while the checkpoint is being written
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(replacement, "apply_definition_embeddings", interrupt)
        # Longer training: a reader written in place would differ from the earlier run's (its one step is warm-up).
        status, _, err = run_cli(capsys, *definitions_command(inputs, output, "--overwrite", "--max-steps", 4))
    assert status == 130 and err.strip().endswith("hf-entity definitions: interrupted"), err
    if earlier_run:
        assert snapshot(output) == before
    else:
        assert not output.exists()
    assert hidden_leftovers(tmp_path) == []
    status, _, err = run_cli(capsys, *definitions_command(inputs, output, *(["--overwrite"] if earlier_run else [])))
    assert status == 0, err
    assert (output / "definition-reader" / "config.json").is_file() and (output / "model.safetensors").is_file()


# ----------------------------------------------------------------------------------------- definitions: --reader
def _petra_checkpoint(folder: Path) -> str:
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    return "'petra'"


def _wider_reader(folder: Path) -> str:
    tokenizer = wordpiece_tokenizer()
    config = tiny_bert_config(tokenizer)
    config.hidden_size, config.intermediate_size = 48, 96
    DefinitionEmbModel.from_pretrained_model(BertModel(config)).save_pretrained(folder)
    return "48"


@pytest.mark.parametrize("make_reader", [_petra_checkpoint, _wider_reader], ids=["coreference-model", "other-width"])
def test_definitions_refuses_a_reader_for_another_model_before_any_work(inputs, tmp_path, capsys, monkeypatch,
                                                                         make_reader):
    reader = tmp_path / "reader"
    detail = make_reader(reader)
    monkeypatch.setattr(AutoModel, "from_pretrained", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(definition_data, "load_definitions", lambda *a, **k: pytest.fail("the definitions were read"))
    status, out, err = run_cli(capsys, *definitions_command(inputs, tmp_path / "out", "--reader", reader))
    line = error_line(err, "definitions")
    assert status == 1 and out == ""
    assert f"--reader {reader}" in line and f"MODEL {inputs / 'plm'}" in line and detail in line, line
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------- definitions: file header
@pytest.mark.parametrize(
    "name, content, found",
    [
        ("renamed.tsv", "lemma\tpos\tgloss\ncat\tnoun\ta small animal\n", "lemma, pos, gloss"),
        ("headerless.tsv", "cat\tnoun\ta small animal\n", "cat, noun, a small animal"),
        ("renamed.csv", "term,kind,meaning\ncat,noun,a small animal\n", "term, kind, meaning"),
    ],
    ids=["renamed-columns", "no-header-line", "csv"],
)
def test_a_definitions_file_with_the_wrong_header_names_the_columns(inputs, tmp_path, capsys, name, content, found):
    definitions = tmp_path / name
    definitions.write_text(content)
    argv = definitions_command(inputs, tmp_path / "out")
    argv[argv.index(inputs / "definitions.tsv")] = definitions
    status, _, err = run_cli(capsys, *argv)
    line = error_line(err, "definitions")
    assert status == 1 and "header only" not in line, line
    assert f"{definitions}" in line and "header" in line, line
    assert "word, part_of_speech, definition" in line and found in line, line


def test_a_definitions_file_with_a_right_header_only_is_still_said_to_have_no_rows(inputs, tmp_path, capsys):
    definitions = tmp_path / "header.tsv"
    definitions.write_text(HEADER)
    argv = definitions_command(inputs, tmp_path / "out")
    argv[argv.index(inputs / "definitions.tsv")] = definitions
    status, _, err = run_cli(capsys, *argv)
    assert status == 1 and "holds no definitions" in error_line(err, "definitions")


# ------------------------------------------------------------------------------- output paths before heavy imports
def _a_file(root: Path) -> Path:
    (root / "model.bin").write_text("x")
    return root / "model.bin"


def _under_a_file(root: Path) -> Path:
    (root / "notes.txt").write_text("x")
    return root / "notes.txt" / "model"


def _users_folder(root: Path) -> Path:
    (root / "project").mkdir()
    (root / "project" / "notes.txt").write_text("mine")
    return root / "project"


@pytest.mark.parametrize(
    "command, make_output, message",
    [
        (["train", "petra", "--synthetic", "8"], _a_file, "is a file, not a folder; give the path of a folder."),
        (["train", "gpt2e", "--conll", "books"], _users_folder,
         "is not empty and is not a checkpoint of this package (it holds notes.txt"),
        (["train", "forcereader", "--squad", "squad.json"], _under_a_file, "notes.txt is a file, not a folder."),
        (["definitions", "plm", "--definitions", "d.tsv", "--task-texts", "t.txt"], _under_a_file,
         "notes.txt is a file, not a folder."),
        (["definitions", "plm", "--definitions", "d.tsv", "--task-texts", "t.txt"], _users_folder,
         "is not empty (it holds notes.txt); choose a new or empty folder, or pass --overwrite"),
    ],
    ids=["train-output-is-a-file", "train-users-folder", "train-output-under-a-file", "definitions-under-a-file",
         "definitions-users-folder"],
)
def test_refused_output_paths_answer_before_torch_is_imported(tmp_path, command, make_output, message):
    output = make_output(tmp_path)
    before = snapshot(tmp_path)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(CONSOLE_SCRIPT), *command, "--output-dir", str(output)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    messages = [line for line in result.stderr.splitlines() if "|" not in line]
    assert result.returncode == 1, result.stderr[-2000:]
    program = "hf-entity " + " ".join(command[:2] if command[0] == "train" else command[:1])
    assert len(messages) == 1 and messages[0].startswith(f"{program}: error: --output-dir {output}"), messages
    assert message in messages[0] and "Errno" not in messages[0], messages[0]
    assert "torch" not in imported, "the path was refused only after torch was imported"
    assert snapshot(tmp_path) == before
    assert time.monotonic() - started < 60


# --------------------------------------------------------------------------------------------------------- push
class SilentServer:
    """A TCP server that accepts connections and never answers (until stopped, or `hold` seconds have passed)."""

    def __init__(self, hold: float = 40.0):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.endpoint = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.hold = hold
        self.stopped = threading.Event()
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        self.socket.settimeout(0.1)
        deadline = time.monotonic() + self.hold
        while not self.stopped.is_set() and time.monotonic() < deadline:
            try:
                self.connections.append(self.socket.accept()[0])
            except OSError:
                continue

    def __enter__(self) -> "SilentServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join()
        for connection in self.connections:
            connection.close()
        self.socket.close()


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bert")
    tokenizer = wordpiece_tokenizer()
    BertModel(tiny_bert_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_push_to_an_endpoint_that_never_answers_times_out_naming_it(saved_model, capsys, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at request time
    monkeypatch.setenv("HF_TOKEN", "test-token")
    with SilentServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        started = time.monotonic()
        status, out, err = run_cli(capsys, "push", saved_model, "me/tiny", "--timeout", "1")
        elapsed = time.monotonic() - started
    assert status == 1 and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("uploading ") and f"{server.endpoint}/me/tiny" in lines[0], lines
    line = error_line(err, "push")
    assert server.endpoint in line and "did not answer within 1 s" in line and "--timeout" in line, line
    assert elapsed < 20, f"took {elapsed:.0f} s"


def test_push_says_where_it_uploads_before_uploading(saved_model, capsys, monkeypatch):
    from hub_server import LoopbackHub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "loopback-token")
        status, out, err = run_cli(capsys, "push", saved_model, "tester/tiny")
        files = hub.files("tester/tiny")
    assert status == 0, err
    uploaded = len(checkpoint_entries(saved_model))
    assert f"uploading {uploaded} files of {saved_model} to {hub.endpoint}/tester/tiny" in err.splitlines()[0], err
    assert "model.safetensors" in files


# ---------------------------------------------------------------------------------------------- Hub look-ups
def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_hub_encoder_without_a_reachable_hub_fails_in_seconds(tmp_path):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {key: value for key, value in os.environ.items() if key not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"))
    started = time.monotonic()
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "train", "petra", "--synthetic", "8", "--encoder", "bert-base-cased", "--output-dir",
         str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    elapsed = time.monotonic() - started
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 2, result.stderr[-2000:]
    # First what is looked up where, then why it cannot be, and what to do instead.
    assert lines[0] == f"--encoder bert-base-cased: not a local folder, looking it up on the Hub at {endpoint}", lines
    assert lines[1].startswith("hf-entity train petra: error: --encoder bert-base-cased is not a local folder"), lines
    assert f"the Hub at {endpoint} cannot be reached" in lines[1] and "HF_HUB_OFFLINE=1" in lines[1], lines
    assert elapsed < 45, f"took {elapsed:.0f} s"


def test_the_default_gpt2_tokenizer_without_a_reachable_hub_fails_in_seconds(tmp_path, capsys, monkeypatch):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at request time
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))  # nothing cached
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    (tmp_path / "books.conll").write_text("#begin document (book); part 0\nbook\t0\t0\tHello\t-\n\n#end document\n")
    started = time.monotonic()
    status, _, err = run_cli(capsys, "train", "gpt2e", "--conll", tmp_path / "books.conll", "--output-dir",
                             tmp_path / "out")
    elapsed = time.monotonic() - started
    line = error_line(err, "train gpt2e")
    assert status == 1 and f"openai-community/gpt2: not a local folder, looking it up on the Hub at {endpoint}" in err
    assert "openai-community/gpt2 is not a local folder" in line and f"the Hub at {endpoint} cannot be reached" in line
    assert "pass --tokenizer PATH" in line and "HF_HUB_OFFLINE=1" in line, line
    assert "Retrying" not in err and elapsed < 30, f"took {elapsed:.0f} s"


def test_a_cached_hub_name_is_read_from_the_cache_when_the_hub_cannot_be_reached(tmp_path, monkeypatch, capsys):
    from hf_entity_models.cli.common import CliError, check_hub_reachable

    snapshot_folder = tmp_path / "models--someone--tiny" / "snapshots" / "0123abcd"
    snapshot_folder.mkdir(parents=True)
    (snapshot_folder / "config.json").write_text("{}")
    (tmp_path / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "models--someone--tiny" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(CliError, match="someone/other is not a local folder, and the Hub at"):
        check_hub_reachable("someone/other", "--encoder")
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False
    check_hub_reachable("someone/tiny", "--encoder")  # the run goes on, from the cache, without waiting for the Hub
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True
    assert "reading someone/tiny from the Hugging Face cache" in capsys.readouterr().err
