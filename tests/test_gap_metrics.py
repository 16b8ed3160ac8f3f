"""Tests for GAP scoring and PeTra's counting diagnostic.

Expected values are worked out by hand in the comments next to each case.
"""

from __future__ import annotations

import csv
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from hf_entity_models.tasks.coreference.metrics import (
    FEMININE_PRONOUNS,
    MASCULINE_PRONOUNS,
    BinaryCounts,
    CountingResult,
    GapGold,
    ThresholdSweep,
    count_unique_people,
    pronoun_gender,
    read_gap_gold,
    score_gap,
    score_gap_probabilities,
    select_counting_threshold,
    sweep_threshold,
)

# Repo is /work/main; shared data lives next to it at /work/shared/data.
GAP_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gap"

GAP_HEADER = (
    "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL"
)


def approx(fraction: Fraction) -> object:
    return pytest.approx(float(fraction), abs=1e-12)


# --------------------------------------------------------------------------- #
# Pronouns and BinaryCounts
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("pronoun", ["he", "Him", "HIS", "himself"])
def test_masculine_pronouns(pronoun):
    assert pronoun_gender(pronoun) == "M"


@pytest.mark.parametrize("pronoun", ["she", "Her", "HERS", "herself"])
def test_feminine_pronouns(pronoun):
    assert pronoun_gender(pronoun) == "F"


def test_pronoun_sets_are_the_eight_gap_pronouns():
    assert MASCULINE_PRONOUNS == {"he", "him", "his", "himself"}
    assert FEMININE_PRONOUNS == {"she", "her", "hers", "herself"}


@pytest.mark.parametrize("pronoun", ["they", "it", "", "hes"])
def test_unknown_pronoun_raises(pronoun):
    with pytest.raises(ValueError, match="Cannot assign a gender"):
        pronoun_gender(pronoun)


def test_binary_counts_metrics_and_addition():
    # TP=2, FP=1, FN=3: P = 2/3, R = 2/5, F1 = 2*2 / (4 + 1 + 3) = 1/2.
    counts = BinaryCounts(true_positives=2, false_positives=1, false_negatives=3)
    assert counts.precision == approx(Fraction(2, 3))
    assert counts.recall == approx(Fraction(2, 5))
    assert counts.f1 == approx(Fraction(1, 2))
    assert counts + BinaryCounts(1, 0, 2) == BinaryCounts(3, 1, 5)


def test_binary_counts_undefined_metrics_are_zero():
    empty = BinaryCounts(0, 0, 0)
    assert (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0)
    # Nothing predicted: precision undefined -> 0, recall 0/2 = 0.
    only_misses = BinaryCounts(0, 0, 2)
    assert (only_misses.precision, only_misses.recall, only_misses.f1) == (0.0, 0.0, 0.0)


def test_binary_counts_rejects_negative():
    with pytest.raises(ValueError, match="false_positives"):
        BinaryCounts(1, -1, 0)


# --------------------------------------------------------------------------- #
# score_gap on hand-computed cases
# --------------------------------------------------------------------------- #


def four_row_gold() -> list[GapGold]:
    return [
        GapGold("r1", "he", a_coref=True, b_coref=False),
        GapGold("r2", "His", a_coref=False, b_coref=True),
        GapGold("r3", "she", a_coref=True, b_coref=False),
        GapGold("r4", "her", a_coref=False, b_coref=True),
    ]


def test_score_gap_hand_computed_four_rows():
    predictions = {
        "r1": (True, False),  # M: A TP                      -> TP1
        "r2": (True, True),  # M: A FP (gold F), B TP        -> TP1 FP1
        "r3": (True, True),  # F: A TP, B FP                 -> TP1 FP1
        "r4": (False, False),  # F: B gold True missed        -> FN1
    }
    scores = score_gap(four_row_gold(), predictions)

    # Masculine: TP2 FP1 FN0 -> P 2/3, R 1, F1 = 4 / (4 + 1) = 4/5.
    assert scores.masculine == BinaryCounts(2, 1, 0)
    assert scores.masculine_f1 == approx(Fraction(4, 5))
    # Feminine: TP1 FP1 FN1 -> P 1/2, R 1/2, F1 1/2.
    assert scores.feminine == BinaryCounts(1, 1, 1)
    assert scores.feminine_f1 == approx(Fraction(1, 2))
    # Overall: TP3 FP2 FN1 -> P 3/5, R 3/4, F1 = 6 / (6 + 3) = 2/3.
    assert scores.overall == BinaryCounts(3, 2, 1)
    assert scores.f1 == approx(Fraction(2, 3))
    # Bias = (1/2) / (4/5) = 5/8.
    assert scores.bias == approx(Fraction(5, 8))

    metrics = scores.as_dict(prefix="eval_")
    assert set(metrics) == {
        "eval_f1", "eval_precision", "eval_recall",
        "eval_masculine_f1", "eval_feminine_f1", "eval_bias",
    }
    assert metrics["eval_precision"] == approx(Fraction(3, 5))
    assert metrics["eval_recall"] == approx(Fraction(3, 4))
    assert metrics["eval_bias"] == approx(Fraction(5, 8))
    assert all(isinstance(value, float) for value in metrics.values())


def test_missing_rows_count_both_decisions_as_false_negatives():
    # The official gap_scorer.py counts each decision of a gold row without system output as a false
    # negative, whatever the gold label: a missing all-FALSE row is two FN, not two TN.
    gold = [
        GapGold("m1", "he", a_coref=True, b_coref=False),  # TP (A), TN (B)
        GapGold("m2", "him", a_coref=False, b_coref=True),  # missing: FN (A) + FN (B)
        GapGold("m3", "his", a_coref=False, b_coref=False),  # FP (A), TN (B)
        GapGold("f1", "she", a_coref=False, b_coref=False),  # missing: FN (A) + FN (B)
        GapGold("f2", "hers", a_coref=True, b_coref=False),  # TP (A), TN (B)
        GapGold("f3", "Her", a_coref=False, b_coref=True),  # FN (B): answered False
    ]
    predictions = {"m1": (True, False), "m3": (True, False), "f2": (True, False), "f3": (False, False)}
    scores = score_gap(gold, predictions)
    # Masculine: TP1 FP1 FN2 -> P 1/2, R 1/3, F1 = 2 / (2 + 1 + 2) = 2/5.
    assert scores.masculine == BinaryCounts(1, 1, 2)
    assert scores.masculine_f1 == approx(Fraction(2, 5))
    # Feminine: TP1 FP0 FN3 -> P 1, R 1/4, F1 = 2 / (2 + 0 + 3) = 2/5.
    assert scores.feminine == BinaryCounts(1, 0, 3)
    assert scores.feminine.recall == approx(Fraction(1, 4))
    assert scores.feminine_f1 == approx(Fraction(2, 5))
    # Overall: TP2 FP1 FN5 -> P 2/3, R 2/7, F1 = 4 / (4 + 1 + 5) = 2/5; bias (2/5) / (2/5) = 1.
    assert scores.overall == BinaryCounts(2, 1, 5)
    assert scores.overall.precision == approx(Fraction(2, 3))
    assert scores.overall.recall == approx(Fraction(2, 7))
    assert scores.f1 == approx(Fraction(2, 5))
    assert scores.bias == approx(Fraction(1))
    # Answering (False, False) for the missing rows instead turns their 3 gold-negative decisions into
    # true negatives: only m2's gold-B positive stays a false negative.
    answered = score_gap(gold, {**predictions, "m2": (False, False), "f1": (False, False)})
    assert answered.overall == BinaryCounts(2, 1, 2)
    # The same counts through the probability scorer and the sweep (missing rows never answered).
    probabilities = {key: tuple(float(d) for d in pair) for key, pair in predictions.items()}
    assert score_gap_probabilities(gold, probabilities, threshold=0.5).overall == BinaryCounts(2, 1, 5)
    # Threshold 0: every answered decision is positive -> TP m1A f2A f3B, FP m1B m3A m3B f2B f3A, and the
    # 4 unanswered decisions stay FN: TP3 FP5 FN4 -> F1 = 6 / (6 + 5 + 4) = 2/5.
    assert score_gap_probabilities(gold, probabilities, threshold=0.0).overall == BinaryCounts(3, 5, 4)
    sweep = sweep_threshold(gold, probabilities, thresholds=[0.5, 0.0])
    # Both give F1 2/5; the tie goes to the smallest threshold.
    assert sweep.f1.tolist() == [approx(Fraction(2, 5)), approx(Fraction(2, 5))]
    assert sweep.best_threshold == 0.0 and sweep.best_scores.overall == BinaryCounts(3, 5, 4)


def test_a_none_decision_is_one_false_negative():
    # The official scorer reads an unparseable system label as None and counts that decision (only) as FN.
    gold = [GapGold("a", "he", True, False), GapGold("b", "she", False, False)]
    scores = score_gap(gold, {"a": (True, None), "b": (None, False)})
    assert scores.masculine == BinaryCounts(1, 0, 1)  # A TP, B not answered
    assert scores.feminine == BinaryCounts(0, 0, 1)  # A not answered, B TN
    assert score_gap(gold, {"a": (None, None)}).overall == score_gap(gold, {}).overall == BinaryCounts(0, 0, 4)


def test_empty_predictions_are_all_false_negatives():
    scores = score_gap(four_row_gold(), {})
    # Every one of the 8 decisions of the 4 rows is unanswered.
    assert scores.overall == BinaryCounts(0, 0, 8)
    assert scores.f1 == 0.0


def test_both_false_row_predicted_positive_gives_false_positives():
    gold = [GapGold("x", "herself", a_coref=False, b_coref=False)]
    scores = score_gap(gold, {"x": (True, True)})
    assert scores.feminine == BinaryCounts(0, 2, 0)
    assert scores.masculine == BinaryCounts(0, 0, 0)
    assert scores.f1 == 0.0


def test_bias_is_nan_when_either_f1_is_zero():
    # make_scorecard prints the bias only when both F1 are non-zero ("-" otherwise).
    gold = [GapGold("m", "he", True, False), GapGold("f", "she", True, False)]
    scores = score_gap(gold, {"m": (True, False), "f": (False, True)})
    assert scores.masculine_f1 == 1.0 and scores.feminine_f1 == 0.0
    assert math.isnan(scores.bias)
    # A gender without rows has F1 0 too.
    assert math.isnan(score_gap(gold[:1], {"m": (True, False)}).bias)


def test_bias_is_nan_when_masculine_f1_is_zero():
    gold = [GapGold("m", "he", True, False), GapGold("f", "she", True, False)]
    scores = score_gap(gold, {"m": (False, True), "f": (True, False)})
    # Masculine: TP0 FP1 FN1 -> F1 0; feminine F1 1.
    assert scores.masculine_f1 == 0.0
    assert scores.feminine_f1 == 1.0
    assert math.isnan(scores.bias)
    assert math.isnan(scores.as_dict()["bias"])


def test_numpy_bool_and_integer_decisions_are_accepted():
    gold = [GapGold("a", "he", True, False)]
    assert score_gap(gold, {"a": np.array([True, False])}).f1 == 1.0
    assert score_gap(gold, {"a": (1, 0)}).f1 == 1.0


# --------------------------------------------------------------------------- #
# Validation errors
# --------------------------------------------------------------------------- #


def test_unknown_prediction_id_raises():
    with pytest.raises(ValueError, match="not in the gold data.*'r9'"):
        score_gap(four_row_gold(), {"r1": (True, False), "r9": (False, False)})


def test_duplicate_gold_ids_raise():
    gold = [GapGold("dup", "he", True, False), GapGold("dup", "she", False, True)]
    with pytest.raises(ValueError, match="Duplicate gold id 'dup'"):
        score_gap(gold, {})


def test_empty_gold_raises():
    with pytest.raises(ValueError, match="gold is empty"):
        score_gap([], {})
    with pytest.raises(ValueError, match="gold is empty"):
        sweep_threshold([], {})


def test_gold_with_both_true_raises():
    with pytest.raises(ValueError, match="both a_coref and b_coref"):
        GapGold("bad", "he", True, True)


def test_gold_with_unknown_pronoun_raises():
    with pytest.raises(ValueError, match="'they'"):
        GapGold("bad", "they", True, False)


@pytest.mark.parametrize("prediction", [(True,), (True, False, True), "TF", ("yes", "no")])
def test_malformed_prediction_raises(prediction):
    with pytest.raises(ValueError, match="pair of booleans"):
        score_gap(four_row_gold(), {"r1": prediction})


@pytest.mark.parametrize("pair", [(0.5, 1.5), (-0.1, 0.2), (float("nan"), 0.3)])
def test_probabilities_outside_unit_interval_or_nan_raise(pair):
    with pytest.raises(ValueError, match=r"\[0, 1\]|NaN"):
        score_gap_probabilities(four_row_gold(), {"r1": pair}, threshold=0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]|NaN"):
        sweep_threshold(four_row_gold(), {"r1": pair})


def test_probability_pair_of_wrong_length_raises():
    with pytest.raises(ValueError, match="pair"):
        score_gap_probabilities(four_row_gold(), {"r1": (0.5, 0.5, 0.5)}, threshold=0.5)


@pytest.mark.parametrize("threshold", [-0.01, 1.01, float("nan")])
def test_threshold_outside_unit_interval_raises(threshold):
    probabilities = {"r1": (0.5, 0.5)}
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        score_gap_probabilities(four_row_gold(), probabilities, threshold=threshold)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sweep_threshold(four_row_gold(), probabilities, thresholds=[0.5, threshold])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        count_unique_people(np.zeros((2, 2)), threshold)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        select_counting_threshold([np.zeros((2, 2))], [0], thresholds=[threshold])


def test_empty_threshold_grid_raises():
    with pytest.raises(ValueError, match="non-empty"):
        sweep_threshold(four_row_gold(), {}, thresholds=[])


# --------------------------------------------------------------------------- #
# Probabilities and threshold sweep
# --------------------------------------------------------------------------- #


def two_row_probabilities() -> tuple[list[GapGold], dict[str, tuple[float, float]]]:
    gold = [
        GapGold("p1", "he", a_coref=True, b_coref=False),
        GapGold("p2", "she", a_coref=False, b_coref=True),
    ]
    # Gold positives score 0.7 and 0.6; gold negatives score 0.2 and 0.4.
    probabilities = {"p1": (0.7, 0.2), "p2": (0.4, 0.6)}
    return gold, probabilities


def test_score_gap_probabilities_uses_greater_or_equal():
    gold, probabilities = two_row_probabilities()
    # t = 0.4: 0.4 >= 0.4 is positive -> FP on p2/A; TP2 FP1 FN0 -> F1 4/5.
    at_boundary = score_gap_probabilities(gold, probabilities, threshold=0.4)
    assert at_boundary.overall == BinaryCounts(2, 1, 0)
    assert at_boundary.f1 == approx(Fraction(4, 5))
    # t = 0.6: 0.6 >= 0.6 keeps the p2/B true positive -> perfect.
    assert score_gap_probabilities(gold, probabilities, threshold=0.6).f1 == 1.0
    # t = 0.61: p2/B is lost -> TP1 FN1, F1 2/3; feminine F1 0 so the bias is undefined (official "-").
    above = score_gap_probabilities(gold, probabilities, threshold=0.61)
    assert above.overall == BinaryCounts(1, 0, 1)
    assert math.isnan(above.bias)


def test_score_gap_probabilities_missing_row_never_predicted_even_at_zero():
    gold, probabilities = two_row_probabilities()
    del probabilities["p2"]
    # Threshold 0 predicts every *present* decision positive: p1 TP + FP,
    # and both decisions of the missing p2 are false negatives (never positives).
    scores = score_gap_probabilities(gold, probabilities, threshold=0.0)
    assert scores.overall == BinaryCounts(1, 1, 2)


def test_sweep_threshold_default_grid_picks_smallest_best_threshold():
    gold, probabilities = two_row_probabilities()
    sweep = sweep_threshold(gold, probabilities)
    assert isinstance(sweep, ThresholdSweep)
    np.testing.assert_allclose(sweep.thresholds, np.arange(100) / 100)
    # F1 by threshold t (positives 0.7, 0.6; negatives 0.4, 0.2):
    #   t <= 0.20: TP2 FP2 -> 4/6 = 2/3
    #   0.21..0.40: TP2 FP1 -> 4/5   (0.40 still counts 0.4 as positive)
    #   0.41..0.60: TP2 FP0 -> 1     (tie over 20 thresholds -> choose 0.41)
    #   0.61..0.70: TP1 FN1 -> 2/3
    #   t >= 0.71: TP0 -> 0
    expected = np.select(
        [sweep.thresholds <= 0.20, sweep.thresholds <= 0.40, sweep.thresholds <= 0.60,
         sweep.thresholds <= 0.70],
        [2 / 3, 4 / 5, 1.0, 2 / 3],
        default=0.0,
    )
    np.testing.assert_allclose(sweep.f1, expected)
    assert sweep.best_threshold == 0.41
    assert sweep.best_f1 == 1.0
    assert sweep.best_scores.overall == BinaryCounts(2, 0, 0)


def test_sweep_threshold_custom_unsorted_grid_tie_goes_to_smallest():
    gold, probabilities = two_row_probabilities()
    # 0.5 and 0.45 both give F1 1 (tie); 0.3 gives 4/5. Smallest tied = 0.45.
    sweep = sweep_threshold(gold, probabilities, thresholds=[0.5, 0.45, 0.3])
    np.testing.assert_array_equal(sweep.thresholds, [0.3, 0.45, 0.5])
    np.testing.assert_allclose(sweep.f1, [0.8, 1.0, 1.0])
    assert sweep.best_threshold == 0.45


def test_sweep_threshold_all_zero_f1_picks_first_threshold():
    gold = [GapGold("z", "his", True, False)]
    # Probability 0 on the positive -> only t = 0.0 predicts it, and also the
    # negative (0.0 >= 0.0): TP1 FP1 -> F1 2/3 at t = 0, 0 elsewhere.
    sweep = sweep_threshold(gold, {"z": (0.0, 0.0)})
    assert sweep.best_threshold == 0.0
    assert sweep.best_f1 == approx(Fraction(2, 3))
    assert np.all(sweep.f1[1:] == 0.0)


def test_sweep_arrays_are_read_only():
    gold, probabilities = two_row_probabilities()
    sweep = sweep_threshold(gold, probabilities)
    with pytest.raises(ValueError):
        sweep.f1[0] = 1.0


def test_sweep_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    gold, probabilities = two_row_probabilities()
    tensors = {key: torch.tensor(value, requires_grad=True) for key, value in probabilities.items()}
    assert sweep_threshold(gold, tensors).best_threshold == 0.41


# --------------------------------------------------------------------------- #
# Independent reference implementation on random data
# --------------------------------------------------------------------------- #


class OfficialScores:
    """The tallies and formulas of the official gap_scorer.py ``Scores`` class (percentages)."""

    def __init__(self):
        self.true_positives = self.false_positives = self.true_negatives = self.false_negatives = 0

    def recall(self):
        denominator = self.true_positives + self.false_negatives
        return 100.0 * self.true_positives / denominator if denominator else 0.0

    def precision(self):
        denominator = self.true_positives + self.false_positives
        return 100.0 * self.true_positives / denominator if denominator else 0.0

    def f1(self):
        recall, precision = self.recall(), self.precision()
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


# The official scorer's gender table (constants.PRONOUNS; GAP has no reflexives). Reflexives are added
# for the synthetic rows below, which draw them too.
OFFICIAL_PRONOUNS = {"she": "F", "her": "F", "hers": "F", "he": "M", "his": "M", "him": "M",
                     "herself": "F", "himself": "M"}


def official_calculate_scores(gold_annotations, system_annotations):
    """A transcription of gap_scorer.calculate_scores (written out here, not imported).

    Args:
        gold_annotations: id -> (gender, a_coref, b_coref), in file order.
        system_annotations: id -> (a_coref, b_coref); a missing id, like a defaultdict's fresh
            Annotation, has None for both decisions.

    Returns:
        gender (None for overall, "M", "F") -> OfficialScores.
    """
    scores = {}
    for example_id, (gender_of_row, gold_a, gold_b) in gold_annotations.items():
        system_a, system_b = system_annotations.get(example_id, (None, None))
        for gender in [None, gender_of_row]:
            if gender not in scores:
                scores[gender] = OfficialScores()
            for gold, system in [(gold_a, system_a), (gold_b, system_b)]:
                if system is None:  # "Missing output for <id>"
                    scores[gender].false_negatives += 1
                elif gold and system:
                    scores[gender].true_positives += 1
                elif not gold and system:
                    scores[gender].false_positives += 1
                elif not gold and not system:
                    scores[gender].true_negatives += 1
                elif gold and not system:
                    scores[gender].false_negatives += 1
    return scores


def official_bias(scores):
    """make_scorecard's bias: F/M when both F1 are non-zero, else "-" (None here)."""
    masculine, feminine = (scores.get(gender, OfficialScores()).f1() for gender in ("M", "F"))
    return feminine / masculine if masculine and feminine else None


def assert_matches_official(ours, official):
    """Our GapScores carry exactly the official TP/FP/FN, percentages / 100 and the bias."""
    for gender, counts in ((None, ours.overall), ("M", ours.masculine), ("F", ours.feminine)):
        theirs = official.get(gender, OfficialScores())
        assert (counts.true_positives, counts.false_positives, counts.false_negatives) == (
            theirs.true_positives, theirs.false_positives, theirs.false_negatives
        ), gender
        assert 100 * counts.precision == pytest.approx(theirs.precision(), abs=1e-9)
        assert 100 * counts.recall == pytest.approx(theirs.recall(), abs=1e-9)
        assert 100 * counts.f1 == pytest.approx(theirs.f1(), abs=1e-9)
    bias = official_bias(official)
    if bias is None:
        assert math.isnan(ours.bias)
    else:
        assert ours.bias == pytest.approx(bias, abs=1e-12)


def reference_gap_f1(gold, predictions):
    """Overall, masculine and feminine F1 (fractions) and per-gender [tp, fp, fn], by the official loop."""
    official = official_calculate_scores(
        {example.example_id: (OFFICIAL_PRONOUNS[example.pronoun.lower()], example.a_coref, example.b_coref)
         for example in gold},
        predictions,
    )
    counts = {}
    for gender in ("M", "F"):
        tally = official.get(gender, OfficialScores())
        counts[gender] = [tally.true_positives, tally.false_positives, tally.false_negatives]
    f1 = [official.get(gender, OfficialScores()).f1() / 100 for gender in (None, "M", "F")]
    return f1[0], f1[1], f1[2], counts


def random_gap_case(seed: int, num_rows: int = 200):
    rng = random.Random(seed)
    pronouns = sorted(MASCULINE_PRONOUNS | FEMININE_PRONOUNS)
    gold_labels = [(True, False), (False, True), (False, False)]
    gold = [
        GapGold(f"test-{index}", rng.choice(pronouns).capitalize(), *rng.choice(gold_labels))
        for index in range(num_rows)
    ]
    probabilities = {
        example.example_id: (round(rng.random(), 3), round(rng.random(), 3))
        for example in gold
        if rng.random() > 0.1  # ~10% of rows missing from the predictions
    }
    return gold, probabilities


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_score_gap_matches_reference_implementation(seed):
    gold, probabilities = random_gap_case(seed)
    rng = random.Random(seed + 100)
    predictions = {
        key: (rng.random() < 0.4, rng.random() < 0.4) for key in probabilities
    }
    overall_f1, masculine_f1, feminine_f1, counts = reference_gap_f1(gold, predictions)
    scores = score_gap(gold, predictions)
    assert scores.masculine == BinaryCounts(*counts["M"])
    assert scores.feminine == BinaryCounts(*counts["F"])
    assert scores.f1 == pytest.approx(overall_f1)
    assert scores.masculine_f1 == pytest.approx(masculine_f1)
    assert scores.feminine_f1 == pytest.approx(feminine_f1)
    assert scores.bias == pytest.approx(feminine_f1 / masculine_f1)


def read_gap_tsv_like_the_official_scorer(path):
    """gap_scorer.read_annotations(is_gold=True): id -> (gender, a_coref, b_coref), via csv.DictReader."""
    fieldnames = ["ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref",
                  "B", "B-offset", "B-coref", "URL"]
    annotations = {}
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle, fieldnames=fieldnames, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader, None)  # the header line
        for row in reader:
            labels = {"true": True, "false": False}
            annotations[row["ID"]] = (
                OFFICIAL_PRONOUNS[row["Pronoun"].lower()],
                labels[row["A-coref"].lower()],
                labels[row["B-coref"].lower()],
            )
    return annotations


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_real_validation_file_with_missing_rows_matches_the_official_scorer(gap_validation_gold, seed):
    gold_annotations = read_gap_tsv_like_the_official_scorer(GAP_DATA_DIR / "gap-validation.tsv")
    assert len(gold_annotations) == len(gap_validation_gold) == 454
    rng = random.Random(seed)
    ids = list(gold_annotations)
    dropped = set(rng.sample(ids, k=len(ids) // 10))  # 10% of the rows get no system output
    probabilities = {example_id: (rng.random(), rng.random()) for example_id in ids if example_id not in dropped}
    # Random decisions, biased towards the gold answer so that F1 is neither 0 nor 1.
    predictions = {}
    for example_id in probabilities:
        _, gold_a, gold_b = gold_annotations[example_id]
        predictions[example_id] = tuple(
            gold if rng.random() < 0.6 else rng.random() < 0.3 for gold in (gold_a, gold_b)
        )

    official = official_calculate_scores(gold_annotations, predictions)
    ours = score_gap(gap_validation_gold, predictions)
    assert_matches_official(ours, official)
    # Each dropped row is two false negatives, so they alone cost 2 * 45 FN.
    assert ours.overall.false_negatives >= 2 * len(dropped) == 90
    assert 0.2 < ours.overall.recall < 0.9

    # Thresholded probabilities, one threshold and the sweep, against the official loop too.
    for threshold in (0.0, 0.37, 0.5, 0.99):
        thresholded = {key: (a >= threshold, b >= threshold) for key, (a, b) in probabilities.items()}
        official = official_calculate_scores(gold_annotations, thresholded)
        assert_matches_official(score_gap_probabilities(gap_validation_gold, probabilities, threshold), official)
    sweep = sweep_threshold(gap_validation_gold, probabilities)
    expected = [
        official_calculate_scores(
            gold_annotations, {key: (a >= t, b >= t) for key, (a, b) in probabilities.items()}
        )[None].f1() / 100
        for t in sweep.thresholds
    ]
    np.testing.assert_allclose(sweep.f1, expected, atol=1e-12)
    best = official_calculate_scores(
        gold_annotations,
        {key: (a >= sweep.best_threshold, b >= sweep.best_threshold) for key, (a, b) in probabilities.items()},
    )
    assert_matches_official(sweep.best_scores, best)


# --------------------------------------------------------------------------- #
# read_gap_gold
# --------------------------------------------------------------------------- #


def gap_line(example_id, pronoun, a_coref, b_coref):
    return (
        f"{example_id}\tSome text about {pronoun}.\t{pronoun}\t10\tAnna\t0\t{a_coref}"
        f"\tBert\t5\t{b_coref}\thttp://en.wikipedia.org/wiki/X"
    )


def write_tsv(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_gap_gold_small_file(tmp_path):
    path = write_tsv(
        tmp_path / "gap-small.tsv",
        GAP_HEADER,
        gap_line("dev-1", "He", "TRUE", "FALSE"),
        gap_line("dev-2", "her", "false", "true"),  # lower-case labels are accepted
        gap_line("dev-3", "Himself", "FALSE", "False"),
        "",  # trailing blank line is tolerated
    )
    assert read_gap_gold(path) == [
        GapGold("dev-1", "He", True, False),
        GapGold("dev-2", "her", False, True),
        GapGold("dev-3", "Himself", False, False),
    ]
    assert [example.gender for example in read_gap_gold(str(path))] == ["M", "F", "M"]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (gap_line("dev-2", "she", "TRUE", "FALSE").replace("\tBert", ""), "expected 11"),
        (gap_line("dev-2", "she", "YES", "FALSE"), "A-coref must be TRUE or FALSE"),
        (gap_line("dev-2", "she", "TRUE", "TRUE"), "both a_coref and b_coref"),
        (gap_line("dev-2", "they", "TRUE", "FALSE"), "'they'"),
        (gap_line("dev-1", "she", "TRUE", "FALSE"), "duplicate id 'dev-1'"),
    ],
)
def test_read_gap_gold_malformed_row_names_file_and_line(tmp_path, bad_line, message):
    path = write_tsv(
        tmp_path / "broken.tsv", GAP_HEADER, gap_line("dev-1", "he", "TRUE", "FALSE"), bad_line
    )
    with pytest.raises(ValueError, match=message) as error:
        read_gap_gold(path)
    assert f"{path}:3" in str(error.value)


def test_read_gap_gold_rejects_missing_header_column(tmp_path):
    path = write_tsv(tmp_path / "noheader.tsv", GAP_HEADER.replace("B-coref", "B-label"))
    with pytest.raises(ValueError, match="B-coref"):
        read_gap_gold(path)


def test_read_gap_gold_rejects_empty_file(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        read_gap_gold(empty)
    with pytest.raises(ValueError, match="no data rows"):
        read_gap_gold(write_tsv(tmp_path / "header_only.tsv", GAP_HEADER))


@pytest.fixture(scope="module")
def gap_validation_gold() -> list[GapGold]:
    path = GAP_DATA_DIR / "gap-validation.tsv"
    # Deliberately not a skip: CI always provides the shared data.
    assert path.is_file(), (
        f"GAP validation file not found at {path}; the shared data directory "
        f"{GAP_DATA_DIR} must exist next to the repository."
    )
    return read_gap_gold(path)


def test_read_real_gap_validation_file(gap_validation_gold):
    gold = gap_validation_gold
    assert len(gold) == 454
    assert len({example.example_id for example in gold}) == 454
    assert all(example.example_id.startswith("validation-") for example in gold)
    genders = [example.gender for example in gold]
    assert genders.count("M") + genders.count("F") == 454
    assert not any(example.a_coref and example.b_coref for example in gold)


def test_perfect_predictions_on_real_file_score_one(gap_validation_gold):
    gold = gap_validation_gold
    scores = score_gap(gold, {g.example_id: (g.a_coref, g.b_coref) for g in gold})
    positives = sum(g.a_coref + g.b_coref for g in gold)
    assert scores.overall == BinaryCounts(positives, 0, 0)
    assert scores.as_dict()["bias"] == 1.0


# --------------------------------------------------------------------------- #
# PeTra unique-people counting
# --------------------------------------------------------------------------- #

# 4 tokens x 3 memory cells; the last token is padding.
OVERWRITES = np.array(
    [
        [0.90, 0.10, 0.00],
        [0.20, 0.50, 0.05],
        [0.00, 0.00, 0.60],
        [0.95, 0.95, 0.95],  # padding
    ]
)
TOKEN_MASK = np.array([True, True, True, False])


@pytest.mark.parametrize(
    "threshold, mask, expected",
    [
        # Real tokens, >= 0.5: 0.90, 0.50 (boundary counts), 0.60 -> 3.
        (0.5, TOKEN_MASK, 3),
        # Without the mask the padding row adds three 0.95s -> 6.
        (0.5, None, 6),
        # > 0.5 effectively: 0.90, 0.60 -> 2.
        (0.55, TOKEN_MASK, 2),
        # >= 0.05: 0.90, 0.10, 0.20, 0.50, 0.05, 0.60 -> 6 (0.05 boundary counts).
        (0.05, TOKEN_MASK, 6),
        # 0/1 integer masks (HF attention masks) behave like booleans.
        (0.5, np.array([1, 1, 1, 0]), 3),
        # Nothing reaches 1.0.
        (1.0, TOKEN_MASK, 0),
    ],
)
def test_count_unique_people(threshold, mask, expected):
    assert count_unique_people(OVERWRITES, threshold, token_mask=mask) == expected


def test_count_unique_people_ignores_invalid_values_in_padding():
    overwrites = OVERWRITES.copy()
    overwrites[3] = np.nan  # padding garbage must not trigger validation
    assert count_unique_people(overwrites, 0.5, token_mask=TOKEN_MASK) == 3


def test_count_unique_people_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    overwrites = torch.tensor(OVERWRITES, dtype=torch.bfloat16)
    # bfloat16 rounds 0.5/0.6/0.9 but keeps the >= 0.5 set {0.90, 0.50, 0.60}.
    assert count_unique_people(overwrites, 0.5, token_mask=torch.tensor(TOKEN_MASK)) == 3


@pytest.mark.parametrize(
    "overwrites, mask, message",
    [
        (np.zeros(4), None, "shape"),  # 1-D
        (OVERWRITES, np.array([True, False]), "token_mask"),  # wrong length
        (OVERWRITES, np.array([0, 2, 1, 0]), "boolean or 0/1"),
        (np.array([[0.2, 1.2]]), None, r"\[0, 1\]"),
        (np.array([[0.2, np.nan]]), None, "NaN"),
    ],
)
def test_count_unique_people_validation(overwrites, mask, message):
    with pytest.raises(ValueError, match=message):
        count_unique_people(overwrites, 0.5, token_mask=mask)


def counting_documents():
    # doc1 values 0.1, 0.3, 0.6, 0.9; gold 2 people.
    #   predicted: 4 (a <= .1), 3 (.1 < a <= .3), 2 (.3 < a <= .6), 1 (.6 < a <= .9), 0 above
    doc1 = np.array([[0.9, 0.3], [0.1, 0.6]])
    # doc2 values 0.05, 0.35, 0.8; gold 1 person.
    #   predicted: 3 (a <= .05), 2 (.05 < a <= .35), 1 (.35 < a <= .8), 0 above
    doc2 = np.array([[0.8], [0.35], [0.05]])
    return [doc1, doc2], [2, 1]


def test_select_counting_threshold_hand_computed():
    documents, gold_counts = counting_documents()
    result = select_counting_threshold(documents, gold_counts)
    assert isinstance(result, CountingResult)
    np.testing.assert_allclose(result.thresholds, np.arange(1, 101) / 100)
    # error(a) = |2 - doc1(a)| + |1 - doc2(a)|:
    #   a = 0.01..0.05: 2 + 2 = 4      a = 0.06..0.10: 2 + 1 = 3
    #   a = 0.11..0.30: 1 + 1 = 2      a = 0.31..0.35: 0 + 1 = 1  (0.35 >= 0.35 still counts)
    #   a = 0.36..0.60: 0 + 0 = 0      a = 0.61..0.80: 1 + 0 = 1
    #   a = 0.81..0.90: 1 + 1 = 2      a = 0.91..1.00: 2 + 1 = 3
    alphas = result.thresholds
    expected = np.select(
        [alphas <= 0.05, alphas <= 0.10, alphas <= 0.30, alphas <= 0.35, alphas <= 0.60,
         alphas <= 0.80, alphas <= 0.90],
        [4, 3, 2, 1, 0, 1, 2],
        default=3,
    )
    np.testing.assert_array_equal(result.errors, expected)
    # Error 0 is tied over 0.36..0.60: the smallest alpha wins.
    assert result.best_threshold == 0.36
    assert result.total_absolute_error == 0


def test_select_counting_threshold_with_token_masks_and_custom_grid():
    documents, gold_counts = counting_documents()
    # Pad doc2 with a token that would add an extra person at every alpha.
    padded_doc2 = np.vstack([documents[1], [[1.0]]])
    result = select_counting_threshold(
        [documents[0], padded_doc2],
        gold_counts,
        thresholds=[0.7, 0.2, 0.4],
        token_masks=[None, [True, True, True, False]],
    )
    # From the table above: 0.2 -> 2, 0.4 -> 0, 0.7 -> 1.
    np.testing.assert_array_equal(result.thresholds, [0.2, 0.4, 0.7])
    np.testing.assert_array_equal(result.errors, [2, 0, 1])
    assert result.best_threshold == 0.4

    # Without the mask the padding overwrite (1.0) is counted: +1 error everywhere.
    unmasked = select_counting_threshold(
        [documents[0], padded_doc2], gold_counts, thresholds=[0.7, 0.2, 0.4]
    )
    np.testing.assert_array_equal(unmasked.errors, [3, 1, 2])
    assert unmasked.best_threshold == 0.4


def test_select_counting_threshold_matches_count_unique_people():
    rng = np.random.default_rng(3)
    documents = [rng.random((int(rng.integers(1, 30)), 4)) for _ in range(5)]
    gold_counts = [int(count) for count in rng.integers(0, 12, size=5)]
    result = select_counting_threshold(documents, gold_counts)
    expected = [
        sum(abs(gold - count_unique_people(doc, alpha)) for doc, gold in zip(documents, gold_counts))
        for alpha in result.thresholds
    ]
    np.testing.assert_array_equal(result.errors, expected)
    assert result.total_absolute_error == min(expected)
    assert result.best_threshold == result.thresholds[expected.index(min(expected))]


@pytest.mark.parametrize(
    "documents, gold_counts, token_masks, message",
    [
        ([], [], None, "empty"),
        ([np.zeros((2, 2))], [1, 2], None, "one count per document"),
        ([np.zeros((2, 2))], [-1], None, "non-negative integers"),
        ([np.zeros((2, 2))], [1.5], None, "non-negative integers"),
        ([np.zeros((2, 2))], [1], [None, None], "token_masks"),
        ([np.zeros((2, 2)), np.full((1, 2), 2.0)], [1, 1], None, r"per_doc\[1\]"),
    ],
)
def test_select_counting_threshold_validation(documents, gold_counts, token_masks, message):
    with pytest.raises(ValueError, match=message):
        select_counting_threshold(documents, gold_counts, token_masks=token_masks)
