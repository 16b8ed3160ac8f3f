"""`hf-entity train` under `accelerate launch --multi_gpu --num_processes 2` (two real CPU processes, gloo): the
main process alone evaluates, saves and reports, the others wait for it, and the Trainer's temporary folder is one
folder for both processes (they read the best epoch from it) that nothing leaves behind. GPT2E gives each process
whole books and reads the held-out books on both processes: its report equals a one-process evaluation."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, SHARED_DATA, litbank_book_opening, save_tiny_encoder
from ddp_launch import free_port, launch_command, launch_environment
from transformers import AutoTokenizer

from hf_entity_models import AutoModelForCoreference, GPT2EForCausalLM, PetraForCoreference
from hf_entity_models.tasks.language_modeling import evaluate_entity_lm, load_litbank_entity_lm

CONSOLE_SCRIPT = Path(sys.executable).parent / "hf-entity"  # installed with the package in this environment
GPT2_TOKENIZER = SHARED_DATA / "tokenizers" / "gpt2"
# Four short LitBank books (their openings): one training book per process, one validation and one test book.
BOOKS = ("145_middlemarch_brat", "45_anne_of_green_gables_brat", "711_allan_quatermain_brat",
         "74_the_adventures_of_tom_sawyer_brat")


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"), num_hidden_layers=1)


def test_two_processes_train_and_the_main_process_alone_saves_and_reports(encoder_folder, tmp_path):
    output, temporary = tmp_path / "petra", tmp_path / "tmp"
    temporary.mkdir()
    command = launch_command(
        CONSOLE_SCRIPT, "train", "petra", "--synthetic", "16", "--synthetic-validation", "8", "--epochs", "2",
        "--batch-size", "4", "--encoder", str(encoder_folder), "--hidden-size", "8", "--mlp-hidden-size", "8",
        "--num-memory-cells", "2", "--config-overrides", '{"encoder_layers": [-1]}', "--output-dir", str(output),
        port=free_port(),
    )
    completed = subprocess.run(command, cwd=REPO_ROOT, env={**launch_environment(), "TMPDIR": str(temporary)},
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-5000:]
    lines = completed.stdout.splitlines()
    assert sum(line.startswith("validation F1") for line in lines) == 1, completed.stdout
    assert sum("checkpoint saved to" in line for line in lines) == 1, completed.stdout
    assert json.loads((output / "validation_results.json").read_text())["processes"] == 2
    assert isinstance(AutoModelForCoreference.from_pretrained(output), PetraForCoreference)
    assert not any(path.name.startswith(".") for path in tmp_path.iterdir()), "no staging folder left"
    assert list(temporary.glob("hf-entity-trainer-*")) == [], "the shared Trainer folder is deleted"


def test_gpt2e_trains_on_two_processes_and_reports_the_one_process_perplexity(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    for book in BOOKS:
        litbank_book_opening(book, books)  # some 400 words each: several windows per book
    output = tmp_path / "gpt2e"
    command = launch_command(
        CONSOLE_SCRIPT, "train", "gpt2e", "--conll", str(books), "--tokenizer", str(GPT2_TOKENIZER), "--n-layer", "1",
        "--n-embd", "32", "--n-head", "2", "--window-length", "64", "--max-steps", "3", "--batch-size", "1",
        "--validation-books", "1", "--test-books", "1", "--output-dir", str(output), port=free_port(),
    )
    completed = subprocess.run(command, cwd=REPO_ROOT, env=launch_environment(), capture_output=True, text=True,
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-5000:]
    assert "ParallelMode.DISTRIBUTED" not in completed.stderr  # transformers' warning of a run that is not parallel
    lines = completed.stdout.splitlines()
    assert sum(line.startswith("validation perplexity") for line in lines) == 1, completed.stdout
    assert sum("checkpoint saved to" in line for line in lines) == 1, completed.stdout
    report = json.loads((output / "validation_results.json").read_text())
    assert report["processes"] == 2 and report["steps"] == 3 and report["train"]["documents"] == 2
    # Both processes read the held-out book (their shares summed): the same number as one process reading it all.
    model = GPT2EForCausalLM.from_pretrained(output).eval()
    splits = load_litbank_entity_lm(books, AutoTokenizer.from_pretrained(GPT2_TOKENIZER), window_length=64,
                                    validation_books=1, test_books=1)
    alone = evaluate_entity_lm(model, splits["validation"], batch_size=1)
    assert report["validation"]["perplexity"] == pytest.approx(alone["perplexity"], rel=1e-5)
