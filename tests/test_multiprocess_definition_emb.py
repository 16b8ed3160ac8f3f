"""DefinitionEMB trains data-parallel under ``accelerate launch --multi_gpu --num_processes 2``: the definition reader
with `build_definition_trainer`, and the GLUE classifier of its evaluation with `build_glue_trainer` on real MRPC.

`tests/scripts/ddp_train_definition_emb.py` runs in the one launch of `ddp_launch.models_run`. The checks: both
processes stepped on their own batches, gradients were averaged, only rank 0 saved, each process evaluated its share
of the rows and both got the same gathered metrics; the MRPC metrics equal a one-process evaluation of rank 0's saved
classifier (whose loss is the plain batch mean: not multiplied by the number of processes).
"""

import sys
from pathlib import Path

import pytest
from ddp_launch import NUM_PROCESSES, assert_two_connected_processes, rank_reports, run  # noqa: F401  (run: a fixture)
from ddp_launch import assert_gradients_were_averaged, assert_only_the_main_process_saved
from transformers import BertForSequenceClassification

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))

from ddp_common import minilm_tokenizer  # noqa: E402
from ddp_train_definition_emb import (  # noqa: E402
    DEFINITION_EVAL,
    DEFINITION_TRAIN,
    GLUE_DEV,
    GLUE_DIR,
    GLUE_TRAIN,
    PER_DEVICE_BATCH,
)

from hf_entity_models.tasks.embeddings.glue import read_glue
from hf_entity_models.tasks.embeddings.glue_fine_tuning import build_glue_trainer, glue_training_arguments  # noqa: E402

MODEL = "definition_emb"
ROWS = {"definitions": (DEFINITION_TRAIN, DEFINITION_EVAL), "glue": (GLUE_TRAIN, GLUE_DEV)}


@pytest.fixture(scope="module")
def reports(run) -> dict[str, dict[int, dict]]:
    return {part: rank_reports(run / part) for part in ROWS}


@pytest.fixture(scope="module")
def single_process_glue_metrics(run, tmp_path_factory) -> dict[str, float]:
    """MRPC dev metrics of rank 0's saved classifier from the stock Trainer in this one process."""
    model = BertForSequenceClassification.from_pretrained(run / "glue" / "model")
    batch = PER_DEVICE_BATCH["glue"]
    arguments = glue_training_arguments(
        str(tmp_path_factory.mktemp("glue-eval")), "mrpc", per_device_eval_batch_size=batch, disable_tqdm=True
    )
    dev = read_glue(GLUE_DIR, "mrpc", "dev").select(range(GLUE_DEV))
    trainer = build_glue_trainer(model, minilm_tokenizer(), dev, dev, arguments)
    return trainer.evaluate(metric_key_prefix="dev")


def test_two_real_processes_ran_with_gloo(reports):
    for part_reports in reports.values():
        assert_two_connected_processes(part_reports)


def test_both_processes_stepped_on_their_share_of_the_batches(reports):
    for part, (train_rows, eval_rows) in ROWS.items():
        batch = PER_DEVICE_BATCH[part]
        steps = train_rows // (batch * NUM_PROCESSES)  # one epoch (GLUE: max_steps=2, also one epoch)
        for report in reports[part].values():
            assert report["global_step"] == steps, part
            assert report["train_batch_sizes"] == [batch] * steps, part
            assert report["eval_rows"] == eval_rows // NUM_PROCESSES, part


def test_gradients_were_averaged_and_only_rank_0_saved(run, reports):
    for part, part_reports in reports.items():
        assert_gradients_were_averaged(run / part, part_reports)
        assert_only_the_main_process_saved(run / part, part_reports)


def test_both_processes_report_the_same_gathered_evaluation(reports):
    for part, key in (("definitions", "eval_loss"), ("glue", "dev_loss"), ("glue", "dev_accuracy")):
        assert reports[part][0]["metrics"][key] == reports[part][1]["metrics"][key], (part, key)


def test_glue_metrics_equal_a_single_process_evaluation(reports, single_process_glue_metrics):
    for report in reports["glue"].values():
        for key in ("dev_accuracy", "dev_f1"):
            assert report["metrics"][key] == single_process_glue_metrics[key], key
        assert report["metrics"]["dev_loss"] == pytest.approx(single_process_glue_metrics["dev_loss"], rel=1e-5)
