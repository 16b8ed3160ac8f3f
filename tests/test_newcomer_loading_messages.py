"""What loading and pushing say to a newcomer: a strict load of a sound checkpoint prints nothing (issue 10), a folder
that is no checkpoint and an --encoder that is no encoder are named for what they are (issue 13), `push` refuses an
invalid repository id before it says it uploads and names an endpoint's answer that is not JSON (issue 14), and
`strict=False` loads a folder of another model as transformers does (issue 15)."""

import json
import logging
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from conftest import error_line, run_cli, save_tiny_encoder, tiny_encoder_config, tiny_petra_config
from transformers import BertModel
from transformers.utils import logging as transformers_logging

from hf_entity_models import (
    AutoModelForCoreference,
    CheckpointError,
    PetraConfig,
    PetraForCoreference,
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
)
from hf_entity_models.cli.checkpoints import load_model

HTML_PAGE = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Company proxy</body></html>"


@pytest.fixture(scope="module")
def petra_folder(tmp_path_factory) -> Path:
    """A tiny PeTra checkpoint with the MiniLM tokenizer next to it (what `train` writes)."""
    folder = tmp_path_factory.mktemp("petra")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    encoder = save_tiny_encoder(tmp_path_factory.mktemp("encoder"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(encoder / name, folder / name)
    return folder


@pytest.fixture
def transformers_records(caplog) -> Iterator[pytest.LogCaptureFixture]:
    """caplog, also fed by transformers' loggers (which do not propagate to the root logger outside CI), from
    WARNING up; transformers' progress bars are off (a bar is not a message, and the user chooses it)."""
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(caplog.handler)
    caplog.set_level(logging.WARNING)
    bars_shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield caplog
    finally:
        library_logger.removeHandler(caplog.handler)
        if bars_shown:
            transformers_logging.enable_progress_bar()


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


# ------------------------------------------------------------------------------ issue 10: a strict load is quiet
def test_a_strict_load_of_a_sound_checkpoint_prints_and_logs_nothing(petra_folder, transformers_records, capfd):
    report_logger = logging.getLogger("transformers.modeling_utils")
    level_before = report_logger.level
    capfd.readouterr()
    for load in (PetraForCoreference.from_pretrained, AutoModelForCoreference.from_pretrained,
                 lambda folder: load_model(AutoModelForCoreference, str(folder))):
        assert type(load(petra_folder)) is PetraForCoreference
    out, err = capfd.readouterr()
    assert out == "" and err == "", err[:500]
    assert _messages(transformers_records) == []
    assert report_logger.level == level_before and not report_logger.filters


def test_a_strict_load_that_leaves_a_head_untrained_says_so_in_one_line(tmp_path, transformers_records, capfd):
    config = RefReaderConfig(vocab_size=60, embedding_size=6, hidden_size=8, key_size=4, num_memory_cells=2)
    RefReaderForCoreference(config).save_pretrained(tmp_path)
    capfd.readouterr()
    RefReaderForCausalLM.from_pretrained(tmp_path)
    messages = _messages(transformers_records)
    assert len(messages) == 1 and "lm_head start untrained" in messages[0] and str(tmp_path) in messages[0], messages
    assert "not sharded" not in capfd.readouterr().err
    # strict=False is transformers' own load: its load report shows what started untrained.
    transformers_records.clear()
    RefReaderForCausalLM.from_pretrained(tmp_path, strict=False)
    assert any("LOAD REPORT" in message and "MISSING" in message for message in _messages(transformers_records))


def test_a_refused_load_still_names_the_missing_weights(petra_folder, tmp_path, transformers_records):
    folder = shutil.copytree(petra_folder, tmp_path / "deeper")
    stored = json.loads((folder / "config.json").read_text())
    stored["encoder_config"]["num_hidden_layers"] += 1
    (folder / "config.json").write_text(json.dumps(stored))
    lacks_a_layer = r"it lacks 16 weights the config asks for \(petra\.encoder\.encoder\.layer\.2"
    with pytest.raises(CheckpointError, match=lacks_a_layer):
        PetraForCoreference.from_pretrained(folder)
    assert not any("not sharded" in message for message in _messages(transformers_records))


# ---------------------------------------------------------------- issue 13: say what is missing, naming the path
def test_a_folder_without_config_json_is_said_to_be_no_checkpoint(petra_folder, tmp_path, capsys):
    folder = shutil.copytree(petra_folder, tmp_path / "no-config")
    (folder / "config.json").unlink()
    for load in (PetraForCoreference.from_pretrained, PetraConfig.from_pretrained):
        with pytest.raises(CheckpointError) as error:
            load(folder)
        message = str(error.value)
        assert message.startswith(f"{folder} has no config.json") and "save_pretrained" in message, message
        assert "tensor sizes" not in message and "\n" not in message
    # With the config given, the weights alone are a complete load (as in transformers).
    PetraForCoreference.from_pretrained(folder, config=PetraConfig.from_pretrained(petra_folder))
    status, _, err = run_cli(capsys, "evaluate", folder, tmp_path / "gap.tsv")
    line = error_line(err, "evaluate")
    assert status == 1 and f"{folder} has no config.json" in line and "Unrecognized model" not in line, line


def _missing_path(root: Path) -> str:
    return "./runs/no-such-encoder"


def _three_parts(root: Path) -> str:
    return "runs/encoders/minilm"


def _a_file(root: Path) -> str:
    (root / "encoder.bin").write_bytes(b"\0")
    return str(root / "encoder.bin")


def _no_config(root: Path) -> str:
    """Weights alone (a folder of tokenizer files alone may serve `train refreader --incremental`)."""
    BertModel(tiny_encoder_config()).save_pretrained(root / "encoder")
    (root / "encoder" / "config.json").unlink()
    return str(root / "encoder")


def _offline_hub_id(root: Path) -> str:
    return "runs/encoder"


@pytest.mark.parametrize(
    "make_encoder, problem",
    [
        (_missing_path, "no such folder, and not a Hub model id"),
        (_three_parts, "no such folder, and not a Hub model id"),
        (_a_file, "is a file, not a folder"),
        (_no_config, "has no config.json: it is not a saved model"),
        (_offline_hub_id, "no such folder, and HF_HUB_OFFLINE=1"),
    ],
    ids=["missing-path", "three-parts", "a-file", "no-config-json", "offline-hub-id"],
)
def test_a_bad_encoder_path_is_named_with_what_is_wrong(tmp_path, capsys, monkeypatch, make_encoder, problem):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))  # nothing cached
    encoder = make_encoder(tmp_path)
    status, out, err = run_cli(capsys, "train", "petra", "--synthetic", 8, "--encoder", encoder, "--output-dir",
                               tmp_path / "out")
    line = error_line(err, "train petra")
    assert status == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"--encoder {encoder}" in line and problem in line, line
    assert "Repo id must" not in line and "couldn't connect" not in line, line


@pytest.mark.parametrize("command", [["petra", "--synthetic", 8], ["refreader", "--synthetic", 8]])
def test_a_coreference_checkpoint_given_as_encoder_is_refused_as_no_encoder(petra_folder, tmp_path, capsys, command):
    status, _, err = run_cli(capsys, "train", *command, "--encoder", petra_folder, "--output-dir", tmp_path / "out")
    line = error_line(err, f"train {command[0]}")
    assert status == 1 and f"--encoder {petra_folder} is a PetraForCoreference checkpoint" in line, line
    assert "not a pretrained encoder" in line and "vocab_size" not in line, line


# ------------------------------------------------------------------- issue 14: push names what is wrong, in time
@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("bert"))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_push_refuses_an_invalid_repo_id_before_it_says_it_uploads(bert_folder, capsys, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")  # nothing may be asked
    monkeypatch.setenv("HF_TOKEN", "test-token")
    status, out, err = run_cli(capsys, "push", bert_folder, "not a/valid/repo id")
    line = error_line(err, "push")
    assert status == 1 and out == "" and "uploading" not in err, err
    assert "REPO_ID 'not a/valid/repo id' is not a valid repository id" in line and "my-user/" in line, line


class _HtmlServer:
    """An endpoint that is no Hub (a proxy's sign-in page): every request is answered 200 with an HTML page."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(HTML_PAGE)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(HTML_PAGE)

            do_GET = do_POST = do_HEAD = do_PUT = _answer

            def log_message(self, format: str, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "_HtmlServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _html_at_preupload():
    """A loopback Hub that creates the repository, then answers the upload with an HTML error page."""
    from hub_server import LoopbackHub, _Response

    class Hub(LoopbackHub):
        def route(self, method, path, query, body):
            if "/preupload/" in path:
                return _Response(200, HTML_PAGE, headers={"Content-Type": "text/html"})
            return super().route(method, path, query, body)

    return Hub()


@pytest.mark.parametrize(
    "make_server, step",
    [(_HtmlServer, "creating the repository tester/tiny"), (_html_at_preupload, "uploading 4 files to tester/tiny")],
    ids=["html-everywhere", "html-at-upload"],
)
def test_push_to_an_endpoint_that_answers_no_json_names_its_answer(bert_folder, capsys, monkeypatch, make_server,
                                                                    step):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "test-token")
    with make_server() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        status, out, err = run_cli(capsys, "push", bert_folder, "tester/tiny")
    line = error_line(err, "push")
    assert status == 1 and out == "" and "Expecting value" not in line, line
    assert f"the endpoint {server.endpoint}" in line and step in line and "not JSON" in line, line
    assert "HTTP 200" in line and "text/html" in line and "<!DOCTYPE html>" in line, line
    assert "HF_ENDPOINT" in line, line


# ----------------------------------------------------------- issue 15: strict=False loads as transformers does
def _refreader_with_encoder(folder: Path) -> Path:
    config = RefReaderConfig(encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], hidden_size=8,
                             key_size=4, num_memory_cells=2)
    RefReaderForCoreference(config).save_pretrained(folder)
    return folder


def test_strict_false_loads_a_folder_of_another_model_with_transformers_warning(tmp_path, transformers_records):
    folder = _refreader_with_encoder(tmp_path / "refreader")
    model = PetraForCoreference.from_pretrained(folder, strict=False)
    assert type(model) is PetraForCoreference
    assert model.config.encoder_config.hidden_size == tiny_encoder_config().hidden_size  # built from the stored file
    messages = _messages(transformers_records)
    assert any("model of type `refreader` to instantiate a model of type `petra`" in message for message in messages)
    assert all(torch.isfinite(parameter).all() for parameter in model.parameters())


def test_a_folder_of_another_model_is_still_refused_by_default(tmp_path):
    folder = _refreader_with_encoder(tmp_path / "refreader")
    for options in ({}, {"strict": True}):
        with pytest.raises(CheckpointError, match="holds a RefReaderForCoreference checkpoint, not a petra model"):
            PetraForCoreference.from_pretrained(folder, **options)

