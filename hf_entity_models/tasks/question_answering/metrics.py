"""The official SQuAD v1.1 and v2.0 scores (exact match and token F1), in plain Python.

This module re-implements the semantics of the official evaluation scripts ``evaluate-v1.1.py`` and
``evaluate-v2.0.py`` (Rajpurkar et al., 2016, 2018) so that our numbers are comparable with published ones:

* :func:`normalize_answer`: lower-case, drop ASCII punctuation (``string.punctuation``), drop the
  articles *a*, *an*, *the* (whole words), collapse whitespace; in that order.
* :func:`exact_match` and :func:`token_f1` compare one prediction with one gold answer; a question's score is
  the maximum over its gold answers (:func:`score_answer`).
* :func:`score_squad_v1`: EM and F1 in percent over all questions, as ``evaluate-v1.1.py``.
* :func:`score_squad_v2`: EM / F1 overall and split into answerable (``HasAns_*``) and unanswerable
  (``NoAns_*``) questions, as ``evaluate-v2.0.py``. An unanswerable question's only gold answer is the empty
  string, so predicting ``""`` is correct for it. Given per-question *null odds* (a no-answer score minus the
  best span score: the larger, the surer the model is that there is no answer), it also reports the best
  EM / F1 reachable with one threshold and that threshold (:func:`find_best_threshold`, the official
  ``find_best_thresh``). The rule is: predict no answer iff ``null_odds > threshold``.

The two versions differ in two details, both reproduced: v1.1 scores the F1 of two answers that both normalise
to nothing as 0 (v2.0 as 1), and v2.0 ignores gold answers that normalise to nothing (such as ``"."``) unless
no other gold answer is left, in which case the question counts as unanswerable. Three questions of the
public v1.1 dev set have the gold answer ``"."``: predicting ``""`` for them is an exact match in v1.1.

Where this module deliberately differs from the scripts (each only on input the scripts mishandle):

* A prediction for a question that is not in the gold data raises ``ValueError`` (the scripts ignore it: it
  usually means predictions and gold come from different files).
* A question without a prediction raises ``ValueError`` by default. With ``allow_missing=True`` it is scored
  as wrong (0 EM, 0 F1, whatever the threshold) and counted in every total, with a warning: what
  ``evaluate-v1.1.py`` does. (``evaluate-v2.0.py`` prints a warning, leaves the question out of the overall
  total and then fails with a ``KeyError`` on the HasAns / NoAns split.)
* v1.1 questions without any gold answer raise ``ValueError`` (the v1.1 script fails on ``max([])``): they are
  SQuAD 2.0 questions, score them with :func:`score_squad_v2`.

Two properties of the official ``find_best_thresh`` are kept so that the reported numbers match the script's:
the threshold starts at ``0.0`` for the state "every question predicted unanswerable", so when that state is
the best one the reported threshold is ``0.0`` even if some null odds are below 0; and for the "answered"
side of an unanswerable question it tests the raw prediction string (``"  "`` counts as an answer there).
Questions are visited in ascending null odds, ties in the order of ``null_odds``.

The module stays whole at about 800 lines: it is one metric family (the official scripts' EM and F1, both
versions), whose public functions share the normalisation, the per-answer scores and the input checks
(``_checked_*``), and much of its length is this account of where it follows or departs from the scripts.

Example:
    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    >>> score_squad_v1({"q1": "Denver Broncos"}, {"q1": ["Denver Broncos", "Broncos"]}).as_dict()
    {'exact_match': 100.0, 'f1': 100.0}
    >>> scores = score_squad_v2({"q1": "Broncos", "q2": ""}, {"q1": ["Denver Broncos"], "q2": []})
    >>> scores.exact, round(scores.f1, 4), scores.has_ans_total, scores.no_ans_exact
    (50.0, 83.3333, 1, 100.0)
"""

from __future__ import annotations

import gzip
import json
import math
import numbers
import os
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from transformers.utils import logging

__all__ = [
    "SquadVersion",
    "SQUAD_VERSIONS",
    "normalize_answer",
    "answer_tokens",
    "exact_match",
    "token_f1",
    "score_answer",
    "SquadV1Scores",
    "SquadV2Scores",
    "BestThresholds",
    "score_squad_v1",
    "score_squad_v2",
    "score_squad",
    "find_best_threshold",
    "find_best_thresholds",
    "read_squad_gold",
]

logger = logging.get_logger(__name__)

SquadVersion = Literal["v1.1", "v2.0"]
"""The two versions of the official evaluation script."""

SQUAD_VERSIONS: tuple[str, ...] = get_args(SquadVersion)

_PUNCTUATION = frozenset(string.punctuation)  # ASCII only, like the scripts: "–" and "’" stay
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_SHOWN_IDS = 5  # how many offending ids an error message lists


# --------------------------------------------------------------------------- #
# One prediction against one gold answer
# --------------------------------------------------------------------------- #


def _checked_text(text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string (use '' for no answer), got {type(text).__name__} {text!r}.")
    return text


def _checked_version(version: Any) -> str:
    if version not in SQUAD_VERSIONS:
        raise ValueError(f"Unknown SQuAD version {version!r}: use one of {list(SQUAD_VERSIONS)}.")
    return version


def normalize_answer(text: str) -> str:
    """Normalises an answer as both official SQuAD scripts do before comparing answers.

    Lower-cases, removes ASCII punctuation, replaces the whole words *a*, *an*, *the* by a space and
    collapses runs of whitespace to one space (stripping the ends), in that order. Punctuation is removed
    before articles are, so ``"the-end"`` becomes ``"theend"`` and keeps its letters.

    Args:
        text: An answer string.

    Returns:
        The normalised answer; ``""`` when nothing but punctuation, articles and whitespace was given.

    Raises:
        ValueError: If ``text`` is not a string.

    Example:
        >>> normalize_answer("  The Denver Broncos. ")
        'denver broncos'
        >>> normalize_answer("An apple, a day")
        'apple day'
        >>> normalize_answer("Theatre of the U.S.A.")
        'theatre of usa'
    """
    text = _checked_text(text, "The answer").lower()
    text = "".join(character for character in text if character not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    """The tokens the official F1 counts: the normalised answer split on whitespace.

    Example:
        >>> answer_tokens("The Broncos, the champions")
        ['broncos', 'champions']
        >>> answer_tokens("")
        []
    """
    return normalize_answer(text).split()


def exact_match(prediction: str, gold: str) -> float:
    """1.0 if the two answers are equal after :func:`normalize_answer`, else 0.0 (both versions).

    Example:
        >>> exact_match("the Broncos!", "Broncos"), exact_match("Denver Broncos", "Broncos")
        (1.0, 0.0)
    """
    prediction = _checked_text(prediction, "The prediction")
    gold = _checked_text(gold, "The gold answer")
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, *, version: SquadVersion = "v2.0") -> float:
    """Token-overlap F1 between a prediction and one gold answer, as the official scripts compute it.

    Tokens are those of :func:`answer_tokens`; shared tokens are counted with multiplicity (a multiset
    intersection). Precision = shared / prediction tokens, recall = shared / gold tokens, F1 their harmonic
    mean; no shared token gives 0.0.

    Args:
        prediction: The predicted answer (``""`` for no answer).
        gold: One gold answer (``""`` for an unanswerable question in v2.0).
        version: ``"v2.0"`` (default) scores two answers without tokens as 1.0 (both say "no answer") and
            one empty against one non-empty as 0.0; ``"v1.1"`` scores both cases 0.0.

    Returns:
        The F1 in [0, 1].

    Raises:
        ValueError: If an answer is not a string or the version is unknown.

    Example:
        >>> token_f1("Denver Broncos", "Broncos")  # 1 shared; P 1/2, R 1/1 -> 2/3
        0.6666666666666666
        >>> token_f1("", ""), token_f1("", "", version="v1.1")
        (1.0, 0.0)
    """
    _checked_version(version)
    prediction_tokens = answer_tokens(_checked_text(prediction, "The prediction"))
    gold_tokens = answer_tokens(_checked_text(gold, "The gold answer"))
    if version == "v2.0" and (not prediction_tokens or not gold_tokens):
        return float(prediction_tokens == gold_tokens)
    shared = sum((Counter(prediction_tokens) & Counter(gold_tokens)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(prediction_tokens)
    recall = shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _scoring_golds(gold_answers: Sequence[str], version: str) -> list[str]:
    if version == "v1.1":
        return list(gold_answers)
    # v2.0: gold answers that normalise to nothing (".") are dropped; none left means unanswerable.
    kept = [gold for gold in gold_answers if normalize_answer(gold)]
    return kept or [""]


def score_answer(
    prediction: str, gold_answers: Sequence[str], *, version: SquadVersion = "v2.0"
) -> tuple[float, float]:
    """Exact match and F1 of one prediction: each is the maximum over the question's gold answers.

    Args:
        prediction: The predicted answer (``""`` for no answer).
        gold_answers: All gold answers of the question. In v2.0, ``[]`` (an unanswerable question) means the
            only correct answer is ``""``, and answers that normalise to nothing are ignored.
        version: ``"v1.1"`` or ``"v2.0"`` (see :func:`token_f1`).

    Returns:
        ``(exact_match, f1)``, each in [0, 1]; the two maxima may come from different gold answers.

    Raises:
        ValueError: If an answer is not a string, ``gold_answers`` is a bare string or, in v1.1, empty.

    Example:
        >>> score_answer("Denver", ["Denver Broncos", "Broncos", "Denver"])
        (1.0, 1.0)
        >>> score_answer("the Broncos team", ["Denver Broncos", "Broncos"])  # F1 vs "Broncos": 2*(1/2*1)/(3/2)
        (0.0, 0.6666666666666666)
        >>> score_answer("", [])  # v2.0: unanswerable, and no answer given
        (1.0, 1.0)
    """
    _checked_version(version)
    golds = _checked_gold_list(gold_answers, "gold_answers", version)
    prediction = _checked_text(prediction, "The prediction")
    golds = _scoring_golds(golds, version)
    return (
        max(exact_match(prediction, gold) for gold in golds),
        max(token_f1(prediction, gold, version=version) for gold in golds),
    )


# --------------------------------------------------------------------------- #
# Results
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class SquadV1Scores:
    """The scores of ``evaluate-v1.1.py``, in percent.

    Attributes:
        exact_match: Mean exact match over all questions, times 100.
        f1: Mean F1 over all questions, times 100.
        total: Number of questions scored.

    Example:
        >>> SquadV1Scores(exact_match=50.0, f1=75.0, total=2).as_dict()
        {'exact_match': 50.0, 'f1': 75.0}
    """

    exact_match: float
    f1: float
    total: int

    def as_dict(self) -> dict[str, float]:
        """The keys and values the official script prints (and the Hub ``squad`` metric returns)."""
        return {"exact_match": self.exact_match, "f1": self.f1}


@dataclass(frozen=True)
class BestThresholds:
    """The best scores one no-answer threshold reaches, and those thresholds (``find_all_best_thresh``).

    A question is predicted unanswerable iff its null odds are ``> threshold``.

    Attributes:
        best_exact: The best overall exact match in percent.
        best_exact_thresh: The threshold that reaches it.
        best_f1: The best overall F1 in percent.
        best_f1_thresh: The threshold that reaches it.
    """

    best_exact: float
    best_exact_thresh: float
    best_f1: float
    best_f1_thresh: float


@dataclass(frozen=True)
class SquadV2Scores:
    """The scores of ``evaluate-v2.0.py``, in percent.

    Attributes:
        exact: Mean exact match over all questions, times 100.
        f1: Mean F1 over all questions, times 100.
        total: Number of questions.
        has_ans_exact: Exact match over the answerable questions; ``None`` when there are none.
        has_ans_f1: F1 over the answerable questions; ``None`` when there are none.
        has_ans_total: Number of answerable questions.
        no_ans_exact: Exact match over the unanswerable questions; ``None`` when there are none.
        no_ans_f1: F1 over the unanswerable questions (equal to their exact match); ``None`` when there are none.
        no_ans_total: Number of unanswerable questions.
        best: Best threshold and scores from the null odds; ``None`` when no null odds were given.

    Example:
        >>> scores = SquadV2Scores(50.0, 50.0, 2, 100.0, 100.0, 1, 0.0, 0.0, 1)
        >>> sorted(scores.as_dict())[:3]
        ['HasAns_exact', 'HasAns_f1', 'HasAns_total']
    """

    exact: float
    f1: float
    total: int
    has_ans_exact: float | None
    has_ans_f1: float | None
    has_ans_total: int
    no_ans_exact: float | None
    no_ans_f1: float | None
    no_ans_total: int
    best: BestThresholds | None = None

    def as_dict(self) -> dict[str, float]:
        """The keys and values the official script prints (and the Hub ``squad_v2`` metric returns).

        ``HasAns_*`` / ``NoAns_*`` are left out when there is no such question and ``best_*`` when no null
        odds were given, as the script leaves them out.
        """
        results: dict[str, float] = {"exact": self.exact, "f1": self.f1, "total": self.total}
        if self.has_ans_total:
            results.update(HasAns_exact=self.has_ans_exact, HasAns_f1=self.has_ans_f1, HasAns_total=self.has_ans_total)
        if self.no_ans_total:
            results.update(NoAns_exact=self.no_ans_exact, NoAns_f1=self.no_ans_f1, NoAns_total=self.no_ans_total)
        if self.best is not None:
            results.update(
                best_exact=self.best.best_exact,
                best_exact_thresh=self.best.best_exact_thresh,
                best_f1=self.best.best_f1,
                best_f1_thresh=self.best.best_f1_thresh,
            )
        return results


# --------------------------------------------------------------------------- #
# Input checks
# --------------------------------------------------------------------------- #


def _shown(ids: Iterable[str]) -> str:
    ids = list(ids)
    listed = ", ".join(repr(qid) for qid in ids[:_SHOWN_IDS])
    return listed + (f" and {len(ids) - _SHOWN_IDS} more" if len(ids) > _SHOWN_IDS else "")


def _checked_gold_list(answers: Any, where: str, version: str) -> list[str]:
    if isinstance(answers, (str, bytes)) or not isinstance(answers, Sequence):
        raise ValueError(
            f"{where} must be a list of gold answer texts (e.g. ['Denver Broncos'], or [] for an unanswerable "
            f"question in v2.0), got {type(answers).__name__} {answers!r}."
        )
    answers = [_checked_text(answer, f"{where}[{index}]") for index, answer in enumerate(answers)]
    if version == "v1.1" and not answers:
        raise ValueError(
            f"{where} is empty: every SQuAD 1.1 question has at least one gold answer. A question without "
            "answers is an unanswerable SQuAD 2.0 question; score SQuAD 2.0 data with version 'v2.0' "
            "(score_squad_v2)."
        )
    return answers


def _checked_gold(gold_answers: Any, version: str) -> dict[str, list[str]]:
    if not isinstance(gold_answers, Mapping):
        raise ValueError(
            "gold_answers must map each question id to its list of gold answer texts, e.g. "
            f"{{'56be4db0acb8001400a502ec': ['Denver Broncos']}}, got {type(gold_answers).__name__}. "
            "read_squad_gold(path) builds it from an official SQuAD file."
        )
    if not gold_answers:
        raise ValueError("gold_answers is empty: there are no questions to score.")
    checked = {}
    for qid, answers in gold_answers.items():
        if not isinstance(qid, str):
            raise ValueError(f"Question ids must be strings, got {type(qid).__name__} {qid!r} in gold_answers.")
        checked[qid] = _checked_gold_list(answers, f"gold_answers[{qid!r}]", version)
    return checked


def _checked_predictions(predictions: Any, gold: Mapping[str, list[str]], allow_missing: bool) -> dict[str, str]:
    if not isinstance(predictions, Mapping):
        raise ValueError(
            "predictions must map each question id to the predicted answer text ('' for no answer), got "
            f"{type(predictions).__name__}."
        )
    unknown = [qid for qid in predictions if qid not in gold]
    if unknown:
        raise ValueError(
            f"{len(unknown)} prediction(s) are for questions that are not in the gold data: {_shown(unknown)}. "
            "Check that the predictions and the gold answers come from the same SQuAD file (and version)."
        )
    checked = {qid: _checked_text(text, f"predictions[{qid!r}]") for qid, text in predictions.items()}
    missing = [qid for qid in gold if qid not in checked]
    if missing:
        if not allow_missing:
            raise ValueError(
                f"{len(missing)} of {len(gold)} question(s) have no prediction: {_shown(missing)}. Predict '' "
                "for a question the system leaves unanswered, or pass allow_missing=True to score missing "
                "predictions as wrong (the official v1.1 rule)."
            )
        logger.warning(
            "%d of %d question(s) have no prediction and are scored as wrong: %s.",
            len(missing),
            len(gold),
            _shown(missing),
        )
    return checked


def _checked_odds(value: Any, where: str) -> float:
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # numpy / torch scalars
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(
            f"{where} must be a number (a no-answer score minus the best span score, or a no-answer "
            f"probability), got {value!r}."
        )
    return float(value)


def _checked_null_odds(null_odds: Any, predictions: Mapping[str, str]) -> dict[str, float]:
    if not isinstance(null_odds, Mapping):
        raise ValueError(f"null_odds must map each question id to a number, got {type(null_odds).__name__}.")
    unknown = [qid for qid in null_odds if qid not in predictions]
    if unknown:
        raise ValueError(
            f"null_odds has {len(unknown)} question(s) without a prediction: {_shown(unknown)}. Give null odds "
            "for exactly the questions you predict."
        )
    missing = [qid for qid in predictions if qid not in null_odds]
    if missing:
        raise ValueError(
            f"{len(missing)} predicted question(s) have no null odds: {_shown(missing)}. Give null odds for "
            "every predicted question, or none at all (null_odds=None)."
        )
    # In the order of null_odds: it decides between equal odds in find_best_threshold, as in the script.
    return {qid: _checked_odds(value, f"null_odds[{qid!r}]") for qid, value in null_odds.items()}


def _percent(values: Iterable[float], total: int) -> float:
    return 100.0 * sum(values) / total


# --------------------------------------------------------------------------- #
# Whole data sets
# --------------------------------------------------------------------------- #


def score_squad_v1(
    predictions: Mapping[str, str],
    gold_answers: Mapping[str, Sequence[str]],
    *,
    allow_missing: bool = False,
) -> SquadV1Scores:
    """SQuAD 1.1 exact match and F1 in percent, as ``evaluate-v1.1.py`` computes them.

    Args:
        predictions: Question id -> predicted answer text.
        gold_answers: Question id -> the question's gold answer texts (at least one each); see
            :func:`read_squad_gold`.
        allow_missing: Score a question without a prediction as wrong (0 EM and F1, still counted in the
            total) and warn, as the official script does. By default a missing prediction raises.

    Returns:
        :class:`SquadV1Scores`; ``.as_dict()`` gives the script's ``{"exact_match", "f1"}``.

    Raises:
        ValueError: If a prediction is for an unknown question id, a question has no prediction (unless
            ``allow_missing``) or no gold answer, an answer is not a string, or there are no questions.

    Example:
        >>> gold = {"q1": ["Denver Broncos", "Broncos"], "q2": ["Santa Clara, California"]}
        >>> scores = score_squad_v1({"q1": "Broncos", "q2": "California"}, gold)
        >>> scores.exact_match, scores.f1  # q2: 1 shared token; P 1/1, R 1/3 -> F1 1/2
        (50.0, 75.0)
    """
    gold = _checked_gold(gold_answers, "v1.1")
    predicted = _checked_predictions(predictions, gold, allow_missing)
    exact_scores, f1_scores = [], []
    for qid, answers in gold.items():
        if qid not in predicted:
            continue  # scored 0 but counted in the total, as in evaluate-v1.1.py
        exact, f1 = score_answer(predicted[qid], answers, version="v1.1")
        exact_scores.append(exact)
        f1_scores.append(f1)
    return SquadV1Scores(
        exact_match=_percent(exact_scores, len(gold)), f1=_percent(f1_scores, len(gold)), total=len(gold)
    )


def find_best_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    null_odds: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """The best overall score one no-answer threshold reaches, and that threshold (official ``find_best_thresh``).

    Start with every question predicted unanswerable (each unanswerable question counts 1), then visit the
    questions by ascending null odds and switch each one to its predicted answer: an answerable question gains
    its score, an unanswerable one loses 1 if the prediction is a non-empty string. The best running total
    and the null odds of the question where it was reached are returned: with the rule "no answer iff
    null_odds > threshold" that threshold keeps every question visited so far answered.

    Args:
        predictions: Question id -> predicted answer text, for the questions that have one.
        scores: Question id -> that question's exact match or F1 in [0, 1] *before* any threshold, for every
            question (a question without a prediction: 0).
        null_odds: Question id -> null odds, for exactly the questions in ``predictions``. Ties are visited
            in the order of this mapping.
        has_answer: Question id -> whether the question is answerable, for the questions of ``scores``.

    Returns:
        ``(best score in percent of all questions, threshold)``. The threshold is ``0.0`` when the best state
        is "every question unanswerable", as in the script (see the module docstring).

    Raises:
        ValueError: If the ids of the four mappings do not fit together as described or an odds value is
            not a number.

    Example:
        >>> # q1 answerable and right (score 1), odds -2; q2 unanswerable but answered "x", odds 1;
        >>> # q3 unanswerable, predicted "", odds 3. All no-answer: 2 of 3; after q1: 3 (best, threshold -2);
        >>> # after q2: 2; after q3: 2.
        >>> find_best_threshold(
        ...     {"q1": "a", "q2": "x", "q3": ""}, {"q1": 1.0, "q2": 0.0, "q3": 1.0},
        ...     {"q1": -2.0, "q2": 1.0, "q3": 3.0}, {"q1": True, "q2": False, "q3": False},
        ... )
        (100.0, -2.0)
    """
    if set(scores) != set(has_answer):
        raise ValueError("scores and has_answer must hold the same question ids (every question).")
    unknown = [qid for qid in predictions if qid not in scores]
    if unknown:
        raise ValueError(f"predictions has question(s) that scores lacks: {_shown(unknown)}.")
    if not scores:
        raise ValueError("There are no questions to find a threshold for.")
    null_odds = _checked_null_odds(null_odds, predictions)
    # "Every question unanswerable": right for each unanswerable question that has a prediction. A question
    # without one is wrong in every state (the script would count it here, but it fails on those earlier).
    current = sum(1 for qid in null_odds if not has_answer[qid])
    best_score, best_threshold = current, 0.0
    for qid in sorted(null_odds, key=null_odds.__getitem__):  # stable: ties in the mapping's order
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best_score:
            best_score, best_threshold = current, null_odds[qid]
    return 100.0 * best_score / len(scores), best_threshold


def _v2_raw_scores(
    predictions: Mapping[str, str], gold: Mapping[str, list[str]]
) -> tuple[dict[str, float], dict[str, float], dict[str, bool]]:
    exact_scores, f1_scores, has_answer = {}, {}, {}
    for qid, answers in gold.items():
        # Answerable as in the script's make_qid_to_has_ans: any gold answer at all, even "." alone.
        has_answer[qid] = bool(answers)
        if qid in predictions:
            exact_scores[qid], f1_scores[qid] = score_answer(predictions[qid], answers, version="v2.0")
        else:
            exact_scores[qid] = f1_scores[qid] = 0.0
    return exact_scores, f1_scores, has_answer


def find_best_thresholds(
    predictions: Mapping[str, str],
    gold_answers: Mapping[str, Sequence[str]],
    null_odds: Mapping[str, float],
    *,
    allow_missing: bool = False,
) -> BestThresholds:
    """The no-answer thresholds that maximise SQuAD 2.0 exact match and F1 (official ``find_all_best_thresh``).

    Use it on validation data to tune the threshold of the rule "no answer iff null_odds > threshold", where
    the predictions are each question's best non-empty span (or ``""`` where there is none).

    Args:
        predictions: Question id -> predicted answer text.
        gold_answers: Question id -> gold answer texts (``[]`` for an unanswerable question).
        null_odds: Question id -> null odds (no-answer score minus best span score), for every predicted question.
        allow_missing: As in :func:`score_squad_v2`.

    Returns:
        :class:`BestThresholds` (scores in percent).

    Raises:
        ValueError: As :func:`score_squad_v2` and :func:`find_best_threshold`.

    Example:
        >>> best = find_best_thresholds(
        ...     {"q1": "Broncos", "q2": "Panthers"}, {"q1": ["Broncos"], "q2": []}, {"q1": -1.0, "q2": 0.5}
        ... )
        >>> best.best_exact, best.best_exact_thresh  # answer q1 (odds -1 <= -1), abstain on q2 (0.5 > -1)
        (100.0, -1.0)
    """
    gold = _checked_gold(gold_answers, "v2.0")
    predicted = _checked_predictions(predictions, gold, allow_missing)
    exact_scores, f1_scores, has_answer = _v2_raw_scores(predicted, gold)
    best_exact, exact_threshold = find_best_threshold(predicted, exact_scores, null_odds, has_answer)
    best_f1, f1_threshold = find_best_threshold(predicted, f1_scores, null_odds, has_answer)
    return BestThresholds(
        best_exact=best_exact, best_exact_thresh=exact_threshold, best_f1=best_f1, best_f1_thresh=f1_threshold
    )


def score_squad_v2(
    predictions: Mapping[str, str],
    gold_answers: Mapping[str, Sequence[str]],
    null_odds: Mapping[str, float] | None = None,
    *,
    no_answer_threshold: float | None = None,
    allow_missing: bool = False,
) -> SquadV2Scores:
    """SQuAD 2.0 scores in percent, as ``evaluate-v2.0.py`` computes them.

    Args:
        predictions: Question id -> predicted answer text; ``""`` predicts "unanswerable".
        gold_answers: Question id -> gold answer texts; ``[]`` marks an unanswerable question, whose only
            correct answer is ``""``.
        null_odds: Optional question id -> null odds (no-answer score minus best span score; a no-answer
            probability works too), for every predicted question. When given, the result has the best
            thresholds (:func:`find_best_thresholds`), computed from the predictions as given.
        no_answer_threshold: Optional: before scoring, replace the prediction of every question whose null
            odds are ``> no_answer_threshold`` by "no answer" (the script's ``--na-prob-thresh``). Needs
            ``null_odds``. ``None`` (default) scores the predictions as given. The script's default, 1.0 with
            probabilities, never fires; with null odds it would, so there is no numeric default here.
        allow_missing: Score a question without a prediction as wrong (0, counted in every total) and warn.
            By default a missing prediction raises.

    Returns:
        :class:`SquadV2Scores`; ``.as_dict()`` gives the script's keys (``exact``, ``f1``, ``total``,
        ``HasAns_exact``, ..., ``NoAns_total``, and ``best_exact``, ``best_exact_thresh``, ``best_f1``,
        ``best_f1_thresh`` with null odds).

    Raises:
        ValueError: If a prediction is for an unknown question id, a question has no prediction (unless
            ``allow_missing``), the null odds do not cover exactly the predicted questions or are not numbers,
            ``no_answer_threshold`` is given without null odds, an answer is not a string, or there are no
            questions.

    Example:
        >>> gold = {"q1": ["Denver Broncos"], "q2": [], "q3": []}
        >>> scores = score_squad_v2({"q1": "Denver", "q2": "", "q3": "Carolina"}, gold)
        >>> round(scores.has_ans_f1, 4), scores.no_ans_exact  # q1: P 1/1, R 1/2 -> F1 2/3; q2 right, q3 wrong
        (66.6667, 50.0)
        >>> round(scores.exact, 4), round(scores.f1, 4)  # (0 + 1 + 0) / 3 and (2/3 + 1 + 0) / 3
        (33.3333, 55.5556)
    """
    gold = _checked_gold(gold_answers, "v2.0")
    predicted = _checked_predictions(predictions, gold, allow_missing)
    checked_odds = None if null_odds is None else _checked_null_odds(null_odds, predicted)
    if no_answer_threshold is not None and checked_odds is None:
        raise ValueError(
            "no_answer_threshold needs null_odds: the threshold is applied to each question's null odds."
        )
    exact_raw, f1_raw, has_answer = _v2_raw_scores(predicted, gold)
    exact_scores, f1_scores = dict(exact_raw), dict(f1_raw)
    if no_answer_threshold is not None:
        threshold = _checked_odds(no_answer_threshold, "no_answer_threshold")
        for qid, odds in checked_odds.items():
            if odds > threshold:  # predicted unanswerable: right iff the question is
                exact_scores[qid] = f1_scores[qid] = float(not has_answer[qid])

    def split(ids: list[str]) -> tuple[float | None, float | None]:
        if not ids:
            return None, None
        exact = _percent((exact_scores[qid] for qid in ids), len(ids))
        return exact, _percent((f1_scores[qid] for qid in ids), len(ids))

    answerable = [qid for qid in gold if has_answer[qid]]
    unanswerable = [qid for qid in gold if not has_answer[qid]]
    has_ans_exact, has_ans_f1 = split(answerable)
    no_ans_exact, no_ans_f1 = split(unanswerable)
    best = None
    if checked_odds is not None:
        # From the raw scores, like the script: the threshold search replaces no_answer_threshold.
        best_exact, exact_threshold = find_best_threshold(predicted, exact_raw, checked_odds, has_answer)
        best_f1, f1_threshold = find_best_threshold(predicted, f1_raw, checked_odds, has_answer)
        best = BestThresholds(best_exact, exact_threshold, best_f1, f1_threshold)
    return SquadV2Scores(
        exact=_percent(exact_scores.values(), len(gold)),
        f1=_percent(f1_scores.values(), len(gold)),
        total=len(gold),
        has_ans_exact=has_ans_exact,
        has_ans_f1=has_ans_f1,
        has_ans_total=len(answerable),
        no_ans_exact=no_ans_exact,
        no_ans_f1=no_ans_f1,
        no_ans_total=len(unanswerable),
        best=best,
    )


def score_squad(
    predictions: Mapping[str, str],
    gold_answers: Mapping[str, Sequence[str]],
    null_odds: Mapping[str, float] | None = None,
    *,
    version: SquadVersion,
    no_answer_threshold: float | None = None,
    allow_missing: bool = False,
) -> dict[str, float]:
    """The official script's output dict for either version (``score_squad_v1`` / ``score_squad_v2`` ``.as_dict()``).

    Args:
        predictions: Question id -> predicted answer text.
        gold_answers: Question id -> gold answer texts.
        null_odds: v2.0 only: question id -> null odds (adds the ``best_*`` keys).
        version: ``"v1.1"`` or ``"v2.0"``.
        no_answer_threshold: v2.0 only; see :func:`score_squad_v2`.
        allow_missing: Score missing predictions as wrong instead of raising.

    Returns:
        ``{"exact_match", "f1"}`` for v1.1; ``{"exact", "f1", "total", "HasAns_*", "NoAns_*"[, "best_*"]}`` for v2.0.

    Raises:
        ValueError: For an unknown version, v2.0-only arguments with v1.1, or what the scorers raise.

    Example:
        >>> score_squad({"q1": ""}, {"q1": []}, version="v2.0")["NoAns_exact"]
        100.0
    """
    if _checked_version(version) == "v1.1":
        if null_odds is not None or no_answer_threshold is not None:
            raise ValueError(
                "null_odds and no_answer_threshold are SQuAD 2.0 arguments: SQuAD 1.1 has no unanswerable "
                "questions. Use version='v2.0' for SQuAD 2.0 data."
            )
        return score_squad_v1(predictions, gold_answers, allow_missing=allow_missing).as_dict()
    return score_squad_v2(
        predictions, gold_answers, null_odds, no_answer_threshold=no_answer_threshold, allow_missing=allow_missing
    ).as_dict()


def read_squad_gold(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, list[str]]:
    """The gold answers of an official SQuAD file: question id -> answer texts, in file order.

    Args:
        source: The path of an official SQuAD JSON file (``.json`` or gzip-compressed ``.json.gz``), or its
            parsed content (a dict with a ``"data"`` list of articles, as the scripts read it). Unanswerable
            SQuAD 2.0 questions get ``[]`` (their ``plausible_answers`` are not gold answers).

    Returns:
        A dict ready for :func:`score_squad_v1` / :func:`score_squad_v2`.

    Raises:
        ValueError: If the file is not in the official layout or a question id occurs twice.
        FileNotFoundError: If there is no such file.

    Example:
        >>> read_squad_gold({"data": [{"title": "T", "paragraphs": [{"context": "Hi there", "qas": [
        ...     {"id": "q1", "question": "Who?", "answers": [{"text": "there", "answer_start": 3}]},
        ...     {"id": "q2", "question": "Why?", "answers": [], "is_impossible": True}]}]}]})
        {'q1': ['there'], 'q2': []}
    """
    if isinstance(source, Mapping):
        content, where = source, "The SQuAD data"
    else:
        path = Path(source)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8-sig") as handle:
            try:
                content = json.load(handle)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} is not a SQuAD JSON file: {error}.") from error
        where = str(path)
    layout = "the official layout {'data': [{'paragraphs': [{'qas': [{'id', 'answers': [{'text'}]}]}]}]}"
    if not isinstance(content, Mapping) or not isinstance(content.get("data"), list):
        raise ValueError(f"{where} has no 'data' list of articles: SQuAD files have {layout}.")
    gold: dict[str, list[str]] = {}
    try:
        for article in content["data"]:
            for paragraph in article["paragraphs"]:
                for qa in paragraph["qas"]:
                    qid = qa["id"]
                    if qid in gold:
                        raise ValueError(f"{where} has the question id {qid!r} twice; ids must be unique.")
                    gold[qid] = [answer["text"] for answer in qa["answers"]]
    except (KeyError, TypeError) as error:
        raise ValueError(f"{where} is not in {layout}: missing or malformed {error}.") from error
    return gold
