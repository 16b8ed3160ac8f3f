"""The official SQuAD v1.1 / v2.0 scores: hand-computed cases, the `evaluate` module, and the real dev sets.

Token counts in the comments are after normalisation (lower case, no ASCII punctuation, no a/an/the).
"""

import gzip
import json
import math
from pathlib import Path

import evaluate
import numpy as np
import pytest
import torch

from hf_entity_models.metrics import load, metric_path
from hf_entity_models.tasks.question_answering.metrics import (
    BestThresholds,
    SquadV1Scores,
    exact_match,
    find_best_threshold,
    find_best_thresholds,
    normalize_answer,
    read_squad_gold,
    score_answer,
    score_squad,
    score_squad_v1,
    score_squad_v2,
    token_f1,
)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SQUAD_V1 = "squad/squad-v1.1-dev-public.json.gz"
SQUAD_V2 = "squad/squad-v2.0-dev-public.json.gz"


@pytest.fixture
def squad_v1_metric():
    return evaluate.load(metric_path("squad"))


@pytest.fixture
def squad_v2_metric():
    return evaluate.load(metric_path("squad"), "v2.0")


def prediction(qid: str, text: str, odds: float | None = None) -> dict:
    row = {"id": qid, "prediction_text": text}
    if odds is not None:
        row["no_answer_probability"] = odds
    return row


def reference(qid: str, *texts: str) -> dict:
    return {"id": qid, "answers": {"text": list(texts), "answer_start": [0] * len(texts)}}


# ------------------------------------------------------------------------------------------------ one answer
@pytest.mark.parametrize(
    "text, normalised",
    [
        ("The Denver Broncos", "denver broncos"),
        ("  An  apple,\ta day!\n", "apple day"),  # articles as words, whitespace collapsed
        ("Theatre, another thesis", "theatre another thesis"),  # "the"/"an" inside words stay
        ("U.S.A.", "usa"),
        ("1,000.5 km", "10005 km"),
        ("Levi's Stadium", "levis stadium"),
        ("the-end", "theend"),  # punctuation goes first, so "the" is no longer a word of its own
        ("a.n", ""),  # ... and "a.n" becomes the article "an"
        ("A", ""),
        ("...", ""),
        ("Arab–Israeli ‘war’", "arab–israeli ‘war’"),  # only ASCII punctuation is removed
        ("ÉCOLE Normale", "école normale"),
        ("", ""),
    ],
)
def test_normalize_answer_follows_the_official_steps(text, normalised):
    assert normalize_answer(text) == normalised


def test_exact_match_and_token_f1_on_hand_counted_cases():
    assert exact_match("the Denver Broncos.", "Denver Broncos") == 1.0
    assert token_f1("the Denver Broncos.", "Denver Broncos") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    # [broncos, of, denver] vs [denver, broncos]: 2 shared; P 2/3, R 2/2 -> F1 2*(2/3)/(5/3) = 4/5
    assert token_f1("Broncos of Denver", "Denver Broncos") == pytest.approx(4 / 5)
    # A multiset intersection: [denver x3] vs [denver x2] share 2 tokens, not 1; P 2/3, R 1 -> 4/5
    assert token_f1("Denver Denver Denver", "Denver Denver") == pytest.approx(4 / 5)
    # [levis, stadium, in, santa, clara] vs [santa, clara]: 2 shared; P 2/5, R 1 -> 2*(2/5)/(7/5) = 4/7
    assert token_f1("Levi's Stadium in Santa Clara", "Santa Clara") == pytest.approx(4 / 7)
    assert token_f1("Carolina Panthers", "Denver Broncos") == 0.0
    # One side without tokens: 0 in both versions; both without tokens: 1 in v2.0, 0 in v1.1.
    for version in ("v1.1", "v2.0"):
        assert token_f1("", "Denver", version=version) == 0.0
        assert token_f1("Denver", "the", version=version) == 0.0
    assert token_f1(".", "", version="v2.0") == 1.0
    assert token_f1(".", "", version="v1.1") == 0.0
    assert exact_match(".", "") == 1.0


def test_a_question_scores_the_maximum_over_its_gold_answers():
    # vs "Broncos": P 1/2, R 1 -> 2/3; vs "Denver Broncos team": 2 shared, P 2/2, R 2/3 -> 4/5. The maximum: 4/5.
    exact, f1 = score_answer("Denver Broncos", ["Broncos", "Denver Broncos team"])
    assert exact == 0.0 and f1 == pytest.approx(4 / 5)
    assert score_answer("Denver Broncos", ["Denver Broncos team", "Broncos"]) == (exact, f1)
    # An exact match with any gold answer is enough.
    assert score_answer("the Broncos", ["Denver Broncos", "Broncos", "Broncos team"]) == (1.0, 1.0)
    # The gold "." (three v1.1 dev questions have it): in v1.1 it matches "" exactly but adds no F1; v2.0 drops it.
    assert score_answer("", [".", "Denver"], version="v1.1") == (1.0, 0.0)
    assert score_answer("", [".", "Denver"], version="v2.0") == (0.0, 0.0)
    # v2.0: no gold answer, or none left after dropping empty ones, means the only right answer is "".
    assert score_answer("", [], version="v2.0") == (1.0, 1.0)
    assert score_answer("", [".", "The"], version="v2.0") == (1.0, 1.0)
    assert score_answer("Denver", [], version="v2.0") == (0.0, 0.0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: normalize_answer(None), r"The answer must be a string"),
        (lambda: exact_match(3, "x"), r"The prediction must be a string.*int 3"),
        (lambda: token_f1("x", "y", version="2.0"), r"Unknown SQuAD version '2.0'.*\['v1.1', 'v2.0'\]"),
        (lambda: score_answer("x", "Denver"), r"gold_answers must be a list of gold answer texts.*str 'Denver'"),
        (lambda: score_answer("x", [], version="v1.1"), r"every SQuAD 1.1 question has at least one gold answer"),
        (lambda: score_answer("x", ["a", None]), r"gold_answers\[1\] must be a string"),
    ],
)
def test_one_answer_functions_refuse_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------------------------------------------------------------ v1.1
V1_GOLD = {
    "q1": ["Denver Broncos", "Broncos"],
    "q2": ["Levi's Stadium in Santa Clara", "Levi's Stadium"],
    "q3": ["golden anniversary"],
}
V1_PREDICTIONS = {"q1": "the Denver Broncos", "q2": "Santa Clara", "q3": "gold"}
# q1: exact (1, 1). q2: vs the first gold 2 shared of 5, P 1 R 2/5 -> 4/7; vs "Levi's Stadium" 0 -> (0, 4/7).
# q3: "gold" is not the token "golden" -> (0, 0). EM 1/3, F1 (1 + 4/7 + 0) / 3 = 11/21; in percent.
V1_EXPECTED = {"exact_match": 100 / 3, "f1": 100 * 11 / 21}


def test_squad_v1_scores_a_hand_made_case():
    scores = score_squad_v1(V1_PREDICTIONS, V1_GOLD)
    assert isinstance(scores, SquadV1Scores) and scores.total == 3
    assert scores.as_dict() == pytest.approx(V1_EXPECTED)
    assert list(scores.as_dict()) == ["exact_match", "f1"]
    assert score_squad(V1_PREDICTIONS, V1_GOLD, version="v1.1") == scores.as_dict()


def test_squad_v1_missing_predictions_raise_or_with_allow_missing_score_zero_and_warn(caplog):
    partial = {"q1": "Broncos", "q2": "Santa Clara"}
    with pytest.raises(ValueError, match=r"1 of 3 question\(s\) have no prediction: 'q3'.*allow_missing=True"):
        score_squad_v1(partial, V1_GOLD)
    with caplog.at_level("WARNING"):
        scores = score_squad_v1(partial, V1_GOLD, allow_missing=True)
    assert "1 of 3 question(s) have no prediction" in caplog.text and "'q3'" in caplog.text
    # Still divided by all 3 questions, as evaluate-v1.1.py does.
    assert scores.total == 3 and scores.as_dict() == pytest.approx(V1_EXPECTED)


@pytest.mark.parametrize(
    "predictions, gold, message",
    [
        ({**V1_PREDICTIONS, "q9": "x"}, V1_GOLD,
         r"1 prediction\(s\) are for questions that are not in the gold data: 'q9'"),
        ({**V1_PREDICTIONS, "q3": None}, V1_GOLD, r"predictions\['q3'\] must be a string \(use '' for no answer\)"),
        ([("q1", "x")], V1_GOLD, r"predictions must map each question id"),
        (V1_PREDICTIONS, {**V1_GOLD, "q3": []},
         r"gold_answers\['q3'\] is empty.*score SQuAD 2.0 data with version 'v2.0'"),
        (V1_PREDICTIONS, {**V1_GOLD, "q3": "golden anniversary"}, r"gold_answers\['q3'\] must be a list"),
        ({}, {}, r"gold_answers is empty"),
    ],
)
def test_squad_v1_refuses_bad_input(predictions, gold, message):
    with pytest.raises(ValueError, match=message):
        score_squad_v1(predictions, gold)


def test_score_squad_refuses_v2_arguments_for_v1():
    with pytest.raises(ValueError, match=r"SQuAD 2.0 arguments"):
        score_squad(V1_PREDICTIONS, V1_GOLD, {qid: 0.0 for qid in V1_GOLD}, version="v1.1")


# ------------------------------------------------------------------------------------------------ v2.0
V2_GOLD = {
    "a1": ["Denver Broncos"],
    "a2": ["Santa Clara, California", "Santa Clara"],
    "a3": ["1,000 people"],
    "n1": [],
    "n2": [],
}
V2_PREDICTIONS = {"a1": "Denver Broncos", "a2": "California", "a3": "", "n1": "", "n2": "Carolina Panthers"}
# a1 (1, 1). a2: vs "santa clara california" 1 shared, P 1 R 1/3 -> 1/2; vs "santa clara" 0 -> (0, 1/2).
# a3: abstains on an answerable question (0, 0). n1: "" is right (1, 1). n2: answers an unanswerable one (0, 0).
# HasAns: EM 1/3, F1 (1 + 1/2 + 0)/3 = 1/2. NoAns: 1/2, 1/2. All: EM 2/5, F1 (1 + 1/2 + 0 + 1 + 0)/5 = 1/2.
V2_EXPECTED = {
    "exact": 40.0, "f1": 50.0, "total": 5,
    "HasAns_exact": 100 / 3, "HasAns_f1": 50.0, "HasAns_total": 3,
    "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2,
}
# Null odds, ascending: a1 -4, a2 -1, n2 0.5, a3 2, n1 3. find_best_thresh starts from "all unanswerable" (n1, n2
# right: 2) and switches each question, in that order, to its prediction:
#   EM: a1 +1 -> 3 (best, thresh -4); a2 +0 -> 3; n2 -1 -> 2; a3 +0 -> 2; n1 +0 -> 2.   best 3/5 at -4
#   F1: a1 +1 -> 3 (thresh -4); a2 +1/2 -> 3.5 (best, thresh -1); n2 -1 -> 2.5; a3, n1 +0.  best 3.5/5 at -1
V2_ODDS = {"a1": -4.0, "a2": -1.0, "a3": 2.0, "n1": 3.0, "n2": 0.5}
V2_BEST = {"best_exact": 60.0, "best_exact_thresh": -4.0, "best_f1": 70.0, "best_f1_thresh": -1.0}


def test_squad_v2_scores_a_hand_made_case_split_into_has_ans_and_no_ans():
    scores = score_squad_v2(V2_PREDICTIONS, V2_GOLD)
    assert scores.best is None
    assert list(scores.as_dict()) == list(V2_EXPECTED)
    assert scores.as_dict() == pytest.approx(V2_EXPECTED)
    assert score_squad(V2_PREDICTIONS, V2_GOLD, version="v2.0") == scores.as_dict()


def test_squad_v2_best_thresholds_on_a_hand_made_case():
    scores = score_squad_v2(V2_PREDICTIONS, V2_GOLD, V2_ODDS)
    assert scores.as_dict() == pytest.approx({**V2_EXPECTED, **V2_BEST})
    assert list(scores.as_dict())[-4:] == list(V2_BEST)
    best = find_best_thresholds(V2_PREDICTIONS, V2_GOLD, V2_ODDS)
    assert best == BestThresholds(**V2_BEST) == scores.best

    # Applying a best threshold ("no answer iff odds > threshold") reaches the best score:
    # at -1, n2 (0.5), a3 (2) and n1 (3) become "no answer": F1 1 + 1/2 + 1 + 0 + 1 = 3.5 of 5, EM 1 + 0 + 1 + 0 + 1.
    at_f1 = score_squad_v2(V2_PREDICTIONS, V2_GOLD, V2_ODDS, no_answer_threshold=-1.0)
    assert (at_f1.f1, at_f1.exact) == pytest.approx((70.0, 60.0))
    assert (at_f1.has_ans_f1, at_f1.no_ans_exact) == pytest.approx((50.0, 100.0))  # (1 + 1/2 + 0) / 3; n1, n2 right
    at_exact = score_squad_v2(V2_PREDICTIONS, V2_GOLD, V2_ODDS, no_answer_threshold=-4.0)
    assert at_exact.exact == pytest.approx(60.0)
    # ... and the best_* keys still come from the raw predictions, like the script.
    assert at_f1.best == best


def test_find_best_threshold_keeps_the_official_quirks():
    # All unanswerable is best (1 of 2): the official script reports 0.0, not a threshold below the odds.
    predictions = {"a": "wrong", "n": "x"}
    has_answer = {"a": True, "n": False}
    scores = {"a": 0.0, "n": 0.0}
    assert find_best_threshold(predictions, scores, {"a": -5.0, "n": -2.0}, has_answer) == (50.0, 0.0)
    # Equal odds are visited in the order of the mapping (a stable sort), as the script visits its JSON file.
    predictions = {"right": "Denver", "n": "x"}
    has_answer = {"right": True, "n": False}
    scores = {"right": 1.0, "n": 0.0}
    # right first: start 1 (n), right +1 -> 2 (best, at 1.0), n -1 -> 1.
    assert find_best_threshold(predictions, scores, {"right": 1.0, "n": 1.0}, has_answer) == (100.0, 1.0)
    # n first: start 1, n -1 -> 0, right +1 -> 1, never above the start.
    assert find_best_threshold(predictions, scores, {"n": 1.0, "right": 1.0}, has_answer) == (50.0, 0.0)
    # For an unanswerable question the raw prediction is tested: " " counts as answering (-1) ...
    assert find_best_threshold({"n": " "}, {"n": 1.0}, {"n": 0.0}, {"n": False}) == (100.0, 0.0)
    # ... though it scores as "" in EM / F1.
    assert score_squad_v2({"n": " "}, {"n": []}).exact == 100.0


def test_squad_v2_null_odds_may_be_numpy_or_torch_scalars_and_infinite():
    odds = {"a1": np.float32(-4.0), "a2": torch.tensor(-1.0), "a3": 2, "n1": math.inf, "n2": np.float64(0.5)}
    assert find_best_thresholds(V2_PREDICTIONS, V2_GOLD, odds) == BestThresholds(**V2_BEST)


def test_squad_v2_missing_predictions_score_zero_with_allow_missing(caplog):
    partial = {qid: text for qid, text in V2_PREDICTIONS.items() if qid != "n1"}
    with pytest.raises(ValueError, match=r"1 of 5 question\(s\) have no prediction: 'n1'"):
        score_squad_v2(partial, V2_GOLD)
    with caplog.at_level("WARNING"):
        scores = score_squad_v2(partial, V2_GOLD, {qid: V2_ODDS[qid] for qid in partial}, allow_missing=True)
    assert "have no prediction" in caplog.text
    # n1 (right before) is now wrong: EM 1/5, F1 (1 + 1/2)/5, NoAns 0 of 2; the totals still count it.
    assert scores.as_dict() == pytest.approx(
        {**V2_EXPECTED, "exact": 20.0, "f1": 30.0, "NoAns_exact": 0.0, "NoAns_f1": 0.0}
        | {"best_exact": 40.0, "best_exact_thresh": -4.0, "best_f1": 50.0, "best_f1_thresh": -1.0}
    )
    # best: start 1 (n2 only: n1 has no prediction); EM a1 +1 -> 2 at -4; F1 a1 +1, a2 +1/2 -> 2.5 at -1; of 5.


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(null_odds={**V2_ODDS, "zz": 1.0}), r"null_odds has 1 question\(s\) without a prediction: 'zz'"),
        (dict(null_odds={"a1": 1.0}), r"4 predicted question\(s\) have no null odds: 'a2', 'a3', 'n1', 'n2'"),
        (dict(null_odds={**V2_ODDS, "a1": float("nan")}), r"null_odds\['a1'\] must be a number.*nan"),
        (dict(null_odds={**V2_ODDS, "a1": "high"}), r"null_odds\['a1'\] must be a number.*'high'"),
        (dict(null_odds={**V2_ODDS, "a1": True}), r"null_odds\['a1'\] must be a number"),
        (dict(no_answer_threshold=0.0), r"no_answer_threshold needs null_odds"),
        (dict(null_odds=V2_ODDS, no_answer_threshold=float("nan")), r"no_answer_threshold must be a number"),
        (dict(predictions={**V2_PREDICTIONS, "x": ""}), r"not in the gold data: 'x'"),
    ],
)
def test_squad_v2_refuses_bad_input(kwargs, message):
    kwargs = {"predictions": V2_PREDICTIONS, "gold_answers": V2_GOLD, **kwargs}
    with pytest.raises(ValueError, match=message):
        score_squad_v2(**kwargs)


# ------------------------------------------------------------------------------------------------ evaluate module
def test_the_squad_metric_loads_offline_with_a_version_per_configuration(squad_v1_metric, squad_v2_metric):
    assert squad_v1_metric.name == squad_v2_metric.name == "squad"
    assert squad_v1_metric.squad_version == "v1.1" and squad_v2_metric.squad_version == "v2.0"
    assert "no_answer_probability" not in squad_v1_metric.features["predictions"]
    assert "no_answer_probability" in squad_v2_metric.features["predictions"]
    assert evaluate.load(metric_path("squad"), "v1.1").squad_version == "v1.1"
    assert load("squad", config_name="v2.0").squad_version == "v2.0"
    with pytest.raises(ValueError, match=r"Unknown configuration 'squad_v2'.*\"v2.0\""):
        evaluate.load(metric_path("squad"), "squad_v2")


def test_the_squad_metric_agrees_with_the_functions_on_the_hand_made_cases(squad_v1_metric, squad_v2_metric):
    v1 = squad_v1_metric.compute(
        predictions=[prediction(qid, text) for qid, text in V1_PREDICTIONS.items()],
        # Paired by id: the references may come in another order; official-JSON answers are accepted too.
        references=[{"id": qid, "answers": [{"text": text, "answer_start": 0} for text in V1_GOLD[qid]]}
                    for qid in reversed(V1_GOLD)],
    )
    assert v1 == score_squad_v1(V1_PREDICTIONS, V1_GOLD).as_dict()

    predictions = [prediction(qid, text, V2_ODDS[qid]) for qid, text in V2_PREDICTIONS.items()]
    references = [reference(qid, *texts) for qid, texts in V2_GOLD.items()]
    v2 = squad_v2_metric.compute(predictions=predictions, references=references)
    assert v2 == score_squad_v2(V2_PREDICTIONS, V2_GOLD, V2_ODDS).as_dict()
    assert v2 == pytest.approx({**V2_EXPECTED, **V2_BEST})
    # Without probabilities there are no best_* keys; with a threshold the predictions are overridden first.
    without = squad_v2_metric.compute(predictions=[prediction(qid, text) for qid, text in V2_PREDICTIONS.items()],
                                      references=references)
    assert without == pytest.approx(V2_EXPECTED)
    thresholded = squad_v2_metric.compute(predictions=predictions, references=references, no_answer_threshold=-1.0)
    assert thresholded["f1"] == pytest.approx(70.0)

    # One at a time, and in two batches, gives the same.
    for row, gold in zip(predictions, references):
        squad_v2_metric.add(prediction=row, reference=gold)
    assert squad_v2_metric.compute() == v2
    squad_v2_metric.add_batch(predictions=predictions[:2], references=references[:2])
    squad_v2_metric.add_batch(predictions=predictions[2:], references=references[2:])
    assert squad_v2_metric.compute() == v2


BAD_V1_INPUTS = [
    ([prediction("q1", "x")] * 2, [reference("q1", "x")], r"number of predictions \(2\) and references \(1\)"),
    ([prediction("q1", "x"), prediction("q1", "y")], [reference("q1", "x"), reference("q2", "y")],
     r"'q1' occurs twice in the predictions"),
    ([prediction("q1", "x")], [reference("q2", "x")], r"not in the gold data: 'q1'"),
    ([{"id": "q1", "text": "x"}], [reference("q1", "x")], r"predictions\[0\] must be a dict with the keys 'id' and"),
    ([prediction("q1", None)], [reference("q1", "x")], r"predictions\[0\]\['prediction_text'\] must be a string"),
    ([prediction(1, "x")], [reference("q1", "x")], r"predictions\[0\]\['id'\] must be a string"),
    ([prediction("q1", "x", 0.5)], [reference("q1", "x")], r"only SQuAD 2.0 scores.*\"v2.0\""),
    ([prediction("q1", "x")], [reference("q1")], r"references\[0\] \(id 'q1'\) has no gold answer.*\"v2.0\""),
    ([prediction("q1", "x")], [{"id": "q1", "answers": {"text": "x"}}], r"\['text'\] must be a list of answer strings"),
    ([prediction("q1", "x")], [{"id": "q1", "answers": {"text": ["x"], "answer_start": [0, 5]}}],
     r"one offset per answer text"),
    ([prediction("q1", "x")], [{"id": "q1", "answers": "x"}], r"references\[0\]\['answers'\] must be"),
    ([prediction("q1", "x")], [{"id": "q1"}], r"references\[0\] must be a dict with the keys 'id' and 'answers'"),
    (prediction("q1", "x"), [reference("q1", "x")], r"predictions must be a list"),
    ([prediction("q1", "x")], None, r"references is missing"),
    ([], [], r"No SQuAD questions to score"),
]


@pytest.mark.parametrize("predictions, references, message", BAD_V1_INPUTS)
def test_the_squad_metric_refuses_bad_input(squad_v1_metric, predictions, references, message):
    with pytest.raises(ValueError, match=message):
        squad_v1_metric.compute(predictions=predictions, references=references)


@pytest.mark.parametrize(
    "predictions, references, kwargs, message",
    [
        ([prediction("q1", "x", 0.5), prediction("q2", "")], [reference("q1", "x"), reference("q2")], {},
         r"1 of 2 predictions have no 'no_answer_probability'"),
        ([prediction("q1", "x", "0.5")], [reference("q1", "x")], {}, r"\['no_answer_probability'\] must be a number"),
        ([prediction("q1", "x")], [reference("q1", "x")], {"no_answer_threshold": 0.0},
         r"no_answer_threshold needs a 'no_answer_probability'"),
    ],
)
def test_the_squad_v2_metric_refuses_bad_input(squad_v2_metric, predictions, references, kwargs, message):
    with pytest.raises(ValueError, match=message):
        squad_v2_metric.compute(predictions=predictions, references=references, **kwargs)


def test_the_squad_v2_metric_checks_probabilities_across_batches(squad_v2_metric):
    squad_v2_metric.add_batch(predictions=[prediction("q1", "x", 0.5)], references=[reference("q1", "x")])
    squad_v2_metric.add_batch(predictions=[prediction("q2", "")], references=[reference("q2")])
    with pytest.raises(ValueError, match=r"1 of 2 predictions have no 'no_answer_probability'"):
        squad_v2_metric.compute()


def test_no_answer_threshold_is_refused_for_v1(squad_v1_metric):
    with pytest.raises(ValueError, match=r"no_answer_threshold is a SQuAD 2.0 argument"):
        squad_v1_metric.compute(predictions=[prediction("q1", "x")], references=[reference("q1", "x")],
                                no_answer_threshold=0.5)


# ------------------------------------------------------------------------------------------------ real dev data
@pytest.fixture(scope="module")
def v1_gold():
    return read_squad_gold(SHARED_DATA / SQUAD_V1)


@pytest.fixture(scope="module")
def v2_gold():
    return read_squad_gold(SHARED_DATA / SQUAD_V2)


def test_read_squad_gold_reads_the_official_layout(v1_gold, v2_gold, shared_data, tmp_path):
    assert len(v1_gold) == 8882 and len(v2_gold) == 9698
    assert all(v1_gold.values())
    assert sum(1 for answers in v2_gold.values() if not answers) == 4767
    content = json.loads(gzip.decompress((shared_data / SQUAD_V1).read_bytes()))
    assert read_squad_gold(content) == v1_gold  # the parsed JSON works as well as the path
    plain = tmp_path / "dev.json"  # an uncompressed file with the first article
    plain.write_text(json.dumps({"version": "1.1", "data": content["data"][:1]}), encoding="utf-8")
    first_article = read_squad_gold(plain)
    assert 0 < len(first_article) < len(v1_gold)
    assert list(first_article.items()) == list(v1_gold.items())[: len(first_article)]

    with pytest.raises(ValueError, match=r"has no 'data' list of articles"):
        read_squad_gold({"version": "1.1"})
    with pytest.raises(ValueError, match=r"not in the official layout.*'qas'"):
        read_squad_gold({"data": [{"paragraphs": [{"context": "x"}]}]})
    qa = {"id": "q1", "answers": []}
    with pytest.raises(ValueError, match=r"question id 'q1' twice"):
        read_squad_gold({"data": [{"paragraphs": [{"qas": [qa, qa]}]}]})
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match=r"broken.json is not a SQuAD JSON file"):
        read_squad_gold(tmp_path / "broken.json")


def test_real_v1_dev_first_gold_answers_score_100_and_empty_answers_score_0(v1_gold, squad_v1_metric):
    first = {qid: answers[0] for qid, answers in v1_gold.items()}
    assert score_squad_v1(first, v1_gold).as_dict() == {"exact_match": 100.0, "f1": 100.0}

    empty = {qid: "" for qid in v1_gold}
    # F1 is 0. EM is not quite: three questions have the gold answer "." (normalised: ""), which matches ""
    # exactly in evaluate-v1.1.py (while their F1 is 0, since v1.1 scores no shared tokens as 0).
    dots = [qid for qid, answers in v1_gold.items() if any(not normalize_answer(answer) for answer in answers)]
    assert dots == ["5725bad5271a42140099d0c1", "5730b7ce069b5314008322c4", "57340d124776f419006617bf"]
    scores = score_squad_v1(empty, v1_gold)
    assert scores.f1 == 0.0 and scores.exact_match == 100.0 * 3 / 8882

    # The evaluate module on the whole set, from the rows a SQuAD dataset has.
    references = [{"id": qid, "answers": {"text": answers, "answer_start": [0] * len(answers)}}
                  for qid, answers in v1_gold.items()]
    results = squad_v1_metric.compute(predictions=[prediction(qid, "") for qid in v1_gold], references=references)
    assert results == scores.as_dict()


def test_real_v2_dev_first_gold_answers_score_100_and_empty_answers_score_the_no_ans_share(v2_gold, squad_v2_metric):
    first = {qid: answers[0] if answers else "" for qid, answers in v2_gold.items()}
    perfect = score_squad_v2(first, v2_gold).as_dict()
    assert perfect == {
        "exact": 100.0, "f1": 100.0, "total": 9698,
        "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 4931,
        "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 4767,
    }

    empty = {qid: "" for qid in v2_gold}
    scores = score_squad_v2(empty, v2_gold)
    no_ans_share = 100.0 * 4767 / 9698
    assert scores.exact == pytest.approx(no_ans_share) and scores.f1 == pytest.approx(no_ans_share)
    assert (scores.has_ans_exact, scores.has_ans_f1, scores.no_ans_exact, scores.no_ans_f1) == (0.0, 0.0, 100.0, 100.0)

    references = [reference(qid, *answers) for qid, answers in v2_gold.items()]
    results = squad_v2_metric.compute(predictions=[prediction(qid, "") for qid in v2_gold], references=references)
    assert results == scores.as_dict()

    # A v2.0 file scored as v1.1 is refused, not scored with unanswerable questions as wrong.
    with pytest.raises(ValueError, match=r"is empty: every SQuAD 1.1 question has at least one gold answer"):
        score_squad_v1(first, v2_gold)


def test_best_threshold_on_real_v2_questions_equals_a_brute_force_search(v2_gold, squad_v2_metric):
    # Mixed predictions on 600 real questions: the first gold answer, a wrong one, or "", with random distinct
    # odds. Brute force: apply every candidate threshold (below all odds, and each odds value) and score.
    rng = np.random.default_rng(0)
    qids = list(v2_gold)[:600]
    gold = {qid: v2_gold[qid] for qid in qids}
    choice = rng.integers(0, 3, len(qids))
    predictions = {
        qid: (gold[qid][0] if gold[qid] else "") if pick == 0 else "wrong answer" if pick == 1 else ""
        for qid, pick in zip(qids, choice)
    }
    odds = dict(zip(qids, (rng.permutation(len(qids)) + 0.5) / 10 - 30.0))  # distinct, none 0.0
    scores = score_squad_v2(predictions, gold, odds)

    raw_f1 = np.array([score_answer(predictions[qid], gold[qid])[1] for qid in qids])
    raw_exact = np.array([score_answer(predictions[qid], gold[qid])[0] for qid in qids])
    unanswerable = np.array([not gold[qid] for qid in qids], dtype=float)
    values = np.array([odds[qid] for qid in qids])
    candidates = np.concatenate([[values.min() - 1], np.sort(values)])
    for raw, best, threshold in (
        (raw_exact, scores.best.best_exact, scores.best.best_exact_thresh),
        (raw_f1, scores.best.best_f1, scores.best.best_f1_thresh),
    ):
        totals = np.array([np.where(values > t, unanswerable, raw).sum() for t in candidates]) * 100 / len(qids)
        assert best == pytest.approx(totals.max())
        assert threshold == candidates[np.argmax(np.isclose(totals, totals.max()))]  # the lowest best threshold
        assert threshold != 0.0 and totals[0] < totals.max()  # (so the official 0.0 start does not show here)
        applied = score_squad_v2(predictions, gold, odds, no_answer_threshold=threshold)
        assert best == pytest.approx(applied.exact if raw is raw_exact else applied.f1)

    results = squad_v2_metric.compute(
        predictions=[prediction(qid, predictions[qid], odds[qid]) for qid in qids],
        references=[reference(qid, *gold[qid]) for qid in qids],
    )
    assert results == scores.as_dict()
