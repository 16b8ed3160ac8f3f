"""ForceReader trains data-parallel with `train_on_squad` under ``accelerate launch --multi_gpu --num_processes 2``.

`tests/scripts/ddp_train_forcereader.py` runs in the one launch of `ddp_launch.models_run`: 2 steps on 16 real SQuAD
2.0 questions (batches of 4 per process), then the validation evaluation of `train_on_squad`, whose features are
shared between the processes and whose logits are gathered. The checks: both processes trained (gradients
averaged), each answered only its share of the validation features, both computed the same evaluation and
no-answer threshold, equal to a one-process evaluation of rank 0's saved model, and only rank 0 saved.
"""

import math
import sys
from pathlib import Path

import pytest
from ddp_launch import assert_two_connected_processes, reports, run  # noqa: F401  (reports, run: fixtures)
from ddp_launch import assert_gradients_were_averaged, assert_only_the_main_process_saved

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))

from ddp_common import minilm_tokenizer  # noqa: E402
from ddp_train_forcereader import (  # noqa: E402
    DOC_STRIDE,
    MAX_LENGTH,
    MAX_STEPS,
    PER_DEVICE_TRAIN_BATCH,
    squad_questions,
)

from hf_entity_models import ForceReaderForQuestionAnswering  # noqa: E402
from hf_entity_models.tasks.question_answering.features import squad_features  # noqa: E402
from hf_entity_models.tasks.question_answering.training import (  # noqa: E402
    answer_squad,
    choose_null_threshold,
    score_answers,
)

MODEL = "forcereader"


@pytest.fixture(scope="module")
def validation():
    return squad_questions()[1]


@pytest.fixture(scope="module")
def single_process_answers(run, validation):
    """Best spans and null odds of rank 0's saved model, every feature computed in this one process."""
    model = ForceReaderForQuestionAnswering.from_pretrained(run / "model")
    return answer_squad(
        model, minilm_tokenizer(), validation, max_length=MAX_LENGTH, doc_stride=DOC_STRIDE, distributed=False
    )


def test_two_real_processes_ran_with_gloo(reports):
    assert_two_connected_processes(reports)


def test_both_processes_trained_on_their_own_batches(run, reports):
    for report in reports.values():
        assert report["global_step"] == MAX_STEPS
        assert report["train_batch_sizes"] == [PER_DEVICE_TRAIN_BATCH] * MAX_STEPS
    # The QA heads read the encoder's token states, never its pooled [CLS] output.
    assert_gradients_were_averaged(run, reports, unused=("encoder.pooler.",))
    assert_only_the_main_process_saved(run, reports)


def test_each_process_answered_its_share_of_the_validation_features(reports, validation):
    features = len(squad_features(validation, minilm_tokenizer(), MAX_LENGTH, DOC_STRIDE, training=False))
    rows = [reports[rank]["eval_rows"] for rank in (0, 1)]
    assert rows == [math.ceil(features / 2), features // 2], (rows, features)


def test_every_process_computed_the_one_process_evaluation(reports, validation, single_process_answers):
    threshold = choose_null_threshold(single_process_answers, validation)
    expected = score_answers(single_process_answers, validation, threshold)
    for report in reports.values():
        assert report["validation_ids"] == list(validation["id"])
        assert report["null_score_diff_threshold"] == pytest.approx(threshold, abs=1e-5)
        assert report["predictions"] == expected.predictions
        assert report["null_odds"] == pytest.approx(single_process_answers.null_odds, abs=1e-5)
        assert report["scores"] == pytest.approx(expected.scores, abs=1e-6)
    assert reports[0]["null_odds"] == reports[1]["null_odds"]
