"""GPT2E trains data-parallel with `build_entity_lm_trainer` under ``accelerate launch --multi_gpu --num_processes 2``.

`tests/scripts/ddp_train_gpt2e.py` runs in the one launch of `ddp_launch.models_run`: one epoch over six synthetic
documents of 5, 1, 3, 2, 2 and 1 windows, batches of 2 per process, then `trainer.evaluate()` and
`evaluate_entity_lm` on five other documents. Each process wrote the (document, window) pairs of every training
batch its model read. The checks: each document's windows were read by ONE process, all of them, in window order,
never two in one batch; the processes' batch counts are equal (padding windows, fresh documents at window 0); the
weights are equal on both ranks; and the gathered evaluation equals a one-process evaluation of rank 0's saved model.
"""

import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from ddp_launch import NUM_PROCESSES, assert_two_connected_processes, reports, run  # noqa: F401  (fixtures)
from ddp_launch import assert_gradients_were_averaged, assert_only_the_main_process_saved

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))

from ddp_train_gpt2e import (  # noqa: E402
    EVAL_DOCUMENT_WINDOWS,
    PER_DEVICE_BATCH,
    TRAIN_DOCUMENT_WINDOWS,
    synthetic_windows,
)

from hf_entity_models import GPT2EForCausalLM  # noqa: E402
from hf_entity_models.tasks.language_modeling import evaluate_entity_lm  # noqa: E402
from hf_entity_models.tasks.language_modeling.entity_evaluation import entity_nll  # noqa: E402

MODEL = "gpt2e"
PADDING_DOCUMENTS = range(len(TRAIN_DOCUMENT_WINDOWS), len(TRAIN_DOCUMENT_WINDOWS) + PER_DEVICE_BATCH)


@pytest.fixture(scope="module")
def windows_by_rank(reports) -> dict[int, dict[int, list[int]]]:
    """rank -> real document -> the windows of it that rank read, in reading order."""
    seen: dict[int, dict[int, list[int]]] = {}
    for rank, report in reports.items():
        documents: dict[int, list[int]] = defaultdict(list)
        for batch in report["train_windows"]:
            for document, window in batch:
                if document not in PADDING_DOCUMENTS:
                    documents[document].append(window)
        seen[rank] = dict(documents)
    return seen


@pytest.fixture(scope="module")
def single_process_evaluation(run) -> dict[str, float]:
    """`evaluate_entity_lm` of rank 0's saved model over every evaluation document, in this one process."""
    model = GPT2EForCausalLM.from_pretrained(run / "model")
    windows = synthetic_windows(EVAL_DOCUMENT_WINDOWS, seed=2)
    scores = evaluate_entity_lm(model, windows, batch_size=PER_DEVICE_BATCH, progress=False, distributed=False)
    total_loss, tokens = entity_nll(model, windows, batch_size=PER_DEVICE_BATCH, progress=False, distributed=False)
    return {**scores, "loss": total_loss / tokens}


def test_two_real_processes_ran_with_gloo(reports):
    assert_two_connected_processes(reports)


def test_each_document_is_read_by_one_process_whole_and_in_window_order(windows_by_rank):
    documents_of = {rank: set(documents) for rank, documents in windows_by_rank.items()}
    assert documents_of[0] and documents_of[1], documents_of
    shared = documents_of[0] & documents_of[1]
    assert not shared, f"documents read by both processes: {shared}"
    assert documents_of[0] | documents_of[1] == set(range(len(TRAIN_DOCUMENT_WINDOWS)))
    for documents in windows_by_rank.values():
        for document, windows in documents.items():
            assert windows == list(range(TRAIN_DOCUMENT_WINDOWS[document])), (document, windows)


def test_batches_are_full_and_padding_only_starts_fresh_documents(reports):
    for report in reports.values():
        for batch in report["train_windows"]:
            assert len(batch) == PER_DEVICE_BATCH
            assert len({document for document, _ in batch}) == PER_DEVICE_BATCH, batch  # one window per document
            assert all(window == 0 for document, window in batch if document in PADDING_DOCUMENTS), batch


def test_both_processes_took_the_same_steps_and_the_second_pads_its_last_batch(reports):
    # Process 0 reads documents 0 (5 windows) and 4 (2) in two streams: 5 batches. Process 1 reads documents 2 and 5
    # in one stream and 1 and 3 in the other (4 and 3 windows): 4 batches, then one of padding only.
    assert [reports[rank]["global_step"] for rank in (0, 1)] == [5, 5]
    assert [len(reports[rank]["train_windows"]) for rank in (0, 1)] == [5, 5]
    assert all(document in PADDING_DOCUMENTS for document, _ in reports[1]["train_windows"][-1])
    # One process would read the 14 windows in 7 batches of 2: each of the two read 5 (one epoch).
    assert reports[0]["train_dataset_rows"] == NUM_PROCESSES * 5 * PER_DEVICE_BATCH


def test_gradients_were_averaged_and_only_rank_0_saved(run, reports):
    assert_gradients_were_averaged(run, reports)
    assert_only_the_main_process_saved(run, reports)


def test_each_process_evaluated_only_its_own_documents(reports):
    # trainer.evaluate and evaluate_entity_lm(distributed=True) read every evaluation window twice (with and without
    # entity ids), each window on one process only.
    for key in ("trainer_eval_rows", "shared_eval_rows"):
        rows = [reports[rank][key] for rank in (0, 1)]
        assert sum(rows) == 2 * sum(EVAL_DOCUMENT_WINDOWS) and all(rows), (key, rows)
    assert reports[0]["trainer_eval_rows"] == reports[0]["shared_eval_rows"]


def test_gathered_evaluation_equals_one_process_evaluation_of_the_saved_model(reports, single_process_evaluation):
    expected = single_process_evaluation
    for report in reports.values():
        metrics, scores = report["metrics"], report["evaluate_entity_lm"]
        assert metrics["eval_loss"] == pytest.approx(expected["loss"], rel=1e-6)
        assert metrics["eval_perplexity"] == pytest.approx(expected["perplexity"], rel=1e-5)
        assert metrics["eval_perplexity_without_entities"] == pytest.approx(
            expected["perplexity_without_entities"], rel=1e-5
        )
        assert scores == pytest.approx({key: expected[key] for key in scores}, rel=1e-5)
    assert reports[0]["metrics"]["eval_loss"] == reports[1]["metrics"]["eval_loss"]
    assert torch.isfinite(torch.tensor(expected["loss"]))
