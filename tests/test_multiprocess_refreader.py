"""The Referential Reader trains data-parallel under ``accelerate launch --multi_gpu --num_processes 2``: GAP
coreference with `train_on_gap` and LM pre-training with `build_refreader_lm_trainer`.

`tests/scripts/ddp_train_refreader.py` runs in the one launch of `ddp_launch.models_run`. Both trainings evaluate
every epoch, save a checkpoint each time and load the best one at the end. The checks: both processes stepped on
their own batches, gradients were averaged, only rank 0 wrote checkpoints and the final model, every process saw
the same (gathered) validation numbers, so both chose the same threshold and best checkpoint, and the threshold
sweep equals a one-process sweep of rank 0's saved model.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ddp_launch import NUM_PROCESSES, assert_two_connected_processes, rank_reports, run  # noqa: F401  (run: a fixture)
from ddp_launch import assert_gradients_were_averaged, assert_only_the_main_process_saved

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))

from ddp_common import minilm_tokenizer  # noqa: E402
from ddp_train_refreader import (  # noqa: E402
    EPOCHS,
    GAP_DIR,
    GAP_TRAIN_ROWS,
    GAP_VALIDATION_ROWS,
    LM_TRAIN_BLOCKS,
    PER_DEVICE_BATCH,
)

from hf_entity_models import RefReaderForCoreference  # noqa: E402
from hf_entity_models.tasks.coreference import (  # noqa: E402
    CoreferenceCollator,
    GapMetrics,
    gap_gold,
    load_gap,
    prepare_gap_dataset,
)

MODEL = "refreader"


@pytest.fixture(scope="module")
def gap_reports(run) -> dict[int, dict]:
    return rank_reports(run / "gap")


@pytest.fixture(scope="module")
def lm_reports(run) -> dict[int, dict]:
    return rank_reports(run / "lm")


@pytest.fixture(scope="module")
def single_process_sweep(run):
    """The validation threshold sweep of rank 0's saved model, every row scored in this one process."""
    model = RefReaderForCoreference.from_pretrained(run / "gap" / "model").eval()
    rows = load_gap(GAP_DIR / "gap-validation.tsv").select(range(GAP_VALIDATION_ROWS))
    validation = prepare_gap_dataset(rows, minilm_tokenizer(), link_scheme=model.gap_link_scheme)
    batch = CoreferenceCollator(pad_token_id=0)([validation[index] for index in range(len(validation))])
    batch.pop("gap_labels", None)
    with torch.no_grad():
        scores = model(**batch).candidate_scores.numpy().astype(np.float64)
    return GapMetrics(gap_gold(validation)).sweep(scores)


def test_two_real_processes_ran_with_gloo(gap_reports, lm_reports):
    assert_two_connected_processes(gap_reports)
    assert_two_connected_processes(lm_reports)


def test_both_processes_stepped_on_their_share_of_the_batches(gap_reports, lm_reports):
    for reports, rows in ((gap_reports, GAP_TRAIN_ROWS), (lm_reports, LM_TRAIN_BLOCKS)):
        steps = EPOCHS * rows // (PER_DEVICE_BATCH * NUM_PROCESSES)  # one process would take twice as many
        for report in reports.values():
            assert report["global_step"] == steps
            assert report["train_batch_sizes"] == [PER_DEVICE_BATCH] * steps


def test_gradients_were_averaged_and_only_rank_0_saved_checkpoints_and_model(run, gap_reports, lm_reports):
    for folder, reports in ((run / "gap", gap_reports), (run / "lm", lm_reports)):
        assert_gradients_were_averaged(folder, reports)
        # One checkpoint per epoch (the best loaded at the end), then the final model.
        assert_only_the_main_process_saved(folder, reports, saves_on_rank_0=EPOCHS + 1)


def test_every_process_saw_the_same_gathered_validation_numbers(gap_reports, lm_reports):
    for key in ("eval_f1_per_epoch", "threshold", "validation_f1", "report_f1", "coref_threshold"):
        assert gap_reports[0][key] == gap_reports[1][key], key
    assert len(gap_reports[0]["eval_f1_per_epoch"]) == EPOCHS
    for key in ("eval_loss_per_epoch", "best_metric"):
        assert lm_reports[0][key] == lm_reports[1][key], key
    assert lm_reports[0]["best_metric"] == min(lm_reports[0]["eval_loss_per_epoch"])


def test_the_threshold_sweep_equals_a_single_process_sweep_of_the_saved_model(gap_reports, single_process_sweep):
    for report in gap_reports.values():
        assert report["threshold"] == pytest.approx(single_process_sweep.best_threshold)
        assert report["validation_f1"] == pytest.approx(single_process_sweep.best_f1)
