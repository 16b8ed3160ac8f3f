"""PeTra trains unchanged under Accelerate with two real data-parallel processes (CPU, gloo).

`tests/scripts/ddp_train_petra.py` runs in the one launch of `ddp_launch.models_run`
(``accelerate launch --multi_gpu --num_processes 2``): it trains a tiny PeTra with the stock Trainer from
`build_gap_trainer` on 32 real GAP development rows and evaluates it on 13 validation rows (an odd number, so that
the distributed evaluation has to pad the last batch and drop the duplicates again). The tests read the files each
process wrote and recompute the evaluation here, in one process, with the model saved by rank 0.
"""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ddp_launch import NUM_PROCESSES, assert_two_connected_processes, reports, run  # noqa: F401  (fixtures)
from ddp_launch import assert_gradients_were_averaged, assert_only_the_main_process_saved

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))

from ddp_common import minilm_tokenizer  # noqa: E402
from ddp_train_petra import (  # noqa: E402
    EPOCHS,
    EVAL_ROWS,
    GAP_DIR,
    PER_DEVICE_EVAL_BATCH,
    PER_DEVICE_TRAIN_BATCH,
    TRAIN_ROWS,
    prepared_rows,
)

from hf_entity_models import PetraForCoreference  # noqa: E402
from hf_entity_models.tasks.coreference import (  # noqa: E402
    CoreferenceCollator,
    GapMetrics,
    cache_encoder_features,
    gap_gold,
)

MODEL = "petra"


@pytest.fixture(scope="module")
def encoder_tokenizer():
    return minilm_tokenizer()


@pytest.fixture(scope="module")
def eval_rows(encoder_tokenizer):
    return prepared_rows(GAP_DIR / "gap-validation.tsv", encoder_tokenizer, EVAL_ROWS)


@pytest.fixture(scope="module")
def trained_model(run) -> PetraForCoreference:
    return PetraForCoreference.from_pretrained(run / "model").eval()


@pytest.fixture(scope="module")
def sequential_predictions(trained_model, eval_rows, encoder_tokenizer) -> np.ndarray:
    """Candidate scores of rank 0's saved model, one row at a time, in dataset order, in this one process."""
    features = cache_encoder_features(trained_model, eval_rows, show_progress=False)
    collator = CoreferenceCollator(pad_token_id=encoder_tokenizer.pad_token_id)
    scores = []
    with torch.no_grad():
        for index in range(len(features)):
            batch = collator([features[index]])
            batch.pop("gap_labels", None)
            scores.append(trained_model(**batch).candidate_scores[0].numpy())
    return np.stack(scores).astype(np.float64)


def test_two_real_processes_ran_with_gloo(reports):
    assert_two_connected_processes(reports)


def test_training_data_was_split_between_the_processes(reports):
    # One process would take ceil(32 / 4) = 8 steps per epoch; two take ceil(32 / (4 * 2)) = 4.
    steps_per_epoch = -(-TRAIN_ROWS // (PER_DEVICE_TRAIN_BATCH * NUM_PROCESSES))
    for report in reports.values():
        assert report["train_rows"] == TRAIN_ROWS
        assert report["global_step"] == EPOCHS * steps_per_epoch
        assert report["train_batch_sizes"] == [PER_DEVICE_TRAIN_BATCH] * (EPOCHS * steps_per_epoch)


def test_the_main_process_encodes_and_the_others_load_its_feature_cache(reports):
    # One cache file per split: rank 0 found none and wrote both; rank 1 waited for it and found both.
    assert (reports[0]["feature_cache_files_before"], reports[0]["feature_cache_files_after"]) == (0, 2)
    assert (reports[1]["feature_cache_files_before"], reports[1]["feature_cache_files_after"]) == (2, 2)


def test_both_processes_end_with_the_same_trained_weights_and_only_rank_0_saved_them(run, reports, trained_model):
    assert_gradients_were_averaged(run, reports)
    assert_only_the_main_process_saved(run, reports)


def test_evaluation_gathers_every_row_once_in_dataset_order(reports, eval_rows, sequential_predictions):
    # Each rank ran only its share of the eval batches: 13 rows = 4 batches of 4, two per rank; the last batch is
    # padded with repeated rows, which must be dropped when the predictions are gathered.
    for report in reports.values():
        assert report["eval_batches_on_this_rank"] == -(-EVAL_ROWS // PER_DEVICE_EVAL_BATCH) // NUM_PROCESSES
    expected_counts = [len(labels) for labels in eval_rows["link_labels"]]
    assert len(set(map(tuple, sequential_predictions.tolist()))) == EVAL_ROWS  # distinct rows: order is visible
    for report in reports.values():
        predictions = np.asarray(report["predictions"])
        assert predictions.shape == (EVAL_ROWS, 2)
        assert report["eval_ids"] == list(eval_rows["id"])
        assert report["link_pair_counts"] == expected_counts
        np.testing.assert_allclose(predictions, sequential_predictions, rtol=1e-5, atol=1e-7)


def test_distributed_metrics_equal_a_single_process_computation(reports, eval_rows, sequential_predictions):
    sweep = GapMetrics(gap_gold(eval_rows)).sweep(sequential_predictions)
    expected = {f"eval_{key}": value for key, value in sweep.best_scores.as_dict().items()}
    expected["eval_threshold"] = sweep.best_threshold
    for report in reports.values():
        for prefix, metrics in (("eval_", report["metrics"]), ("test_", report["predict_metrics"])):
            for key, value in expected.items():
                name = prefix + key.removeprefix("eval_")
                assert metrics[name] == pytest.approx(value, abs=1e-9), (name, metrics[name], value)
        assert report["metrics"]["eval_loss"] == pytest.approx(report["predict_metrics"]["test_loss"])
