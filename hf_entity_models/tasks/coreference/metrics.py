"""GAP pronoun-resolution scoring and PeTra's diagnostic metrics.

This module implements, in plain Python + numpy:

* the counting of the official GAP scorer (Webster et al., 2018,
  ``gap_scorer.py`` of google-research-datasets/gap-coreference): every gold
  row yields two binary decisions (is the pronoun coreferent with name A? with
  name B?) and precision / recall / F1 are computed on the positive class over
  all decisions, overall and per gender of the pronoun, with
  ``bias = F1_feminine / F1_masculine``. As in the official scorer, a gold row
  the system gave no answer for counts BOTH of its decisions as false
  negatives, whatever the gold labels (a missing row with gold
  ``(False, False)`` is two false negatives, not two true negatives), and the
  bias is undefined (NaN here, ``-`` there) unless both genders have a
  non-zero F1. Scores are fractions in [0, 1] (the official scorecard prints
  percentages);
* PeTra's (Toshniwal et al., 2020) decision-threshold selection, which picks
  the threshold in ``{0.00, 0.01, ..., 0.99}`` maximising validation F1
  (other grids and comparisons in ``THRESHOLD_GRIDS``);
* PeTra's "unique people counting" diagnostic, which counts memory-cell
  overwrites above a threshold ``alpha`` in ``{0.01, ..., 1.00}`` and reports
  the minimum summed absolute counting error over annotated documents.

Array inputs may be numpy arrays, nested sequences or torch tensors (moved to
CPU and detached first); torch is never imported here.

The module stays whole at about 1,000 lines: these are the metrics of one
evaluation, GAP (the threshold is chosen on GAP F1, people are counted on GAP
validation documents), and they share the private checks of arrays,
probabilities and thresholds (``_as_numpy``, ``_validated_thresholds``,
``_check_threshold``, ``_check_probabilities``, ``_read_only``).

Example:
    >>> gold = [GapGold("validation-1", "He", a_coref=True, b_coref=False)]
    >>> score_gap(gold, {"validation-1": (True, False)}).f1
    1.0
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "MASCULINE_PRONOUNS",
    "FEMININE_PRONOUNS",
    "pronoun_gender",
    "BinaryCounts",
    "GapScores",
    "GapGold",
    "score_gap",
    "score_gap_probabilities",
    "ThresholdSweep",
    "sweep_threshold",
    "THRESHOLD_GRIDS",
    "threshold_grid",
    "read_gap_gold",
    "read_people_counts",
    "PeopleCount",
    "count_unique_people",
    "CountingResult",
    "select_counting_threshold",
]

MASCULINE_PRONOUNS: frozenset[str] = frozenset({"he", "him", "his", "himself"})
FEMININE_PRONOUNS: frozenset[str] = frozenset({"she", "her", "hers", "herself"})

# Columns of the official GAP TSV files; only the ones we parse are required.
_GAP_COLUMNS = (
    "ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref",
    "B", "B-offset", "B-coref", "URL",
)
_REQUIRED_GAP_COLUMNS = ("ID", "Pronoun", "A-coref", "B-coref")
_GAP_LABELS = {"true": True, "false": False}


def _default_f1_thresholds() -> np.ndarray:
    """PeTra's F1 grid 0.00, 0.01, ..., 0.99 (rounded so 0.07 is the literal 0.07)."""
    return np.round(np.arange(0.0, 1.0, 0.01), 2)


def _paper_f1_thresholds() -> np.ndarray:
    """The F1 grid of the paper (section 3.6): 0.01, 0.02, ..., 1.00."""
    return np.round(np.arange(1, 101) / 100.0, 2)


# Threshold grids for the validation sweep: name -> (candidate thresholds, comparison). With ">=", a probability
# equal to the threshold is positive; with ">", it is negative.
THRESHOLD_GRIDS: dict[str, tuple[np.ndarray, str]] = {
    # This package's default: 0.00..0.99, probability >= threshold (the GAP scorer's and the pipeline's rule).
    "package": (_default_f1_thresholds(), ">="),
    # The paper's grid 0.01..1.00 (section 3.6) with the strict comparison of the authors' sweep.
    "paper": (_paper_f1_thresholds(), ">"),
    # The authors' released sweep (`find_threshold`): 0.00..0.99 with a strict comparison.
    "authors_code": (_default_f1_thresholds(), ">"),
}


def threshold_grid(name: str) -> tuple[np.ndarray, str]:
    """The thresholds and comparison of a named validation grid (``THRESHOLD_GRIDS``).

    Example:
        >>> thresholds, comparison = threshold_grid("paper")
        >>> float(thresholds[0]), float(thresholds[-1]), comparison
        (0.01, 1.0, '>')
    """
    if name not in THRESHOLD_GRIDS:
        raise ValueError(f"Unknown threshold grid {name!r}; choose one of {sorted(THRESHOLD_GRIDS)}.")
    thresholds, comparison = THRESHOLD_GRIDS[name]
    return thresholds.copy(), comparison


def _check_comparison(comparison: str) -> str:
    if comparison not in (">=", ">"):
        raise ValueError(f"comparison must be '>=' or '>', got {comparison!r}.")
    return comparison


def _default_counting_thresholds() -> np.ndarray:
    """PeTra's counting grid 0.01, 0.02, ..., 1.00 (note: not the F1 grid)."""
    return np.round(np.arange(1, 101) / 100.0, 2)


# --------------------------------------------------------------------------- #
# Pronouns and counts
# --------------------------------------------------------------------------- #


def pronoun_gender(pronoun: str) -> str:
    """Returns the grammatical gender GAP assigns to a pronoun.

    Args:
        pronoun: A GAP pronoun, case-insensitive (e.g. ``"His"``).

    Returns:
        ``"M"`` for masculine or ``"F"`` for feminine pronouns.

    Raises:
        ValueError: If the pronoun is not one of the eight GAP pronouns.

    Example:
        >>> pronoun_gender("Herself")
        'F'
    """
    normalized = pronoun.strip().lower() if isinstance(pronoun, str) else None
    if normalized in MASCULINE_PRONOUNS:
        return "M"
    if normalized in FEMININE_PRONOUNS:
        return "F"
    raise ValueError(
        f"Cannot assign a gender to pronoun {pronoun!r}: GAP only scores the masculine "
        f"pronouns {sorted(MASCULINE_PRONOUNS)} and the feminine pronouns "
        f"{sorted(FEMININE_PRONOUNS)} (case-insensitive)."
    )


def _safe_ratio(numerator: float, denominator: float) -> float:
    # Undefined precision/recall/F1 (nothing predicted or nothing gold) scores 0.0,
    # as in the official GAP scorer, instead of raising ZeroDivisionError.
    return numerator / denominator if denominator > 0 else 0.0


@dataclass(frozen=True)
class BinaryCounts:
    """Confusion counts of the positive class for binary decisions.

    Example:
        >>> counts = BinaryCounts(true_positives=2, false_positives=1, false_negatives=0)
        >>> round(counts.precision, 3), counts.recall, counts.f1
        (0.667, 1.0, 0.8)
    """

    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0

    def __post_init__(self) -> None:
        for name in ("true_positives", "false_positives", "false_negatives"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"BinaryCounts.{name} must be >= 0, got {value}.")

    @property
    def precision(self) -> float:
        """TP / (TP + FP), or 0.0 when nothing was predicted positive."""
        return _safe_ratio(self.true_positives, self.true_positives + self.false_positives)

    @property
    def recall(self) -> float:
        """TP / (TP + FN), or 0.0 when there are no gold positives."""
        return _safe_ratio(self.true_positives, self.true_positives + self.false_negatives)

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall, or 0.0 when undefined."""
        # 2TP / (2TP + FP + FN) equals 2PR / (P + R) but is computed from integers,
        # so equal F1 values compare exactly equal (needed for tie-breaking sweeps).
        return _safe_ratio(
            2 * self.true_positives,
            2 * self.true_positives + self.false_positives + self.false_negatives,
        )

    def __add__(self, other: BinaryCounts) -> BinaryCounts:
        if not isinstance(other, BinaryCounts):
            return NotImplemented
        return BinaryCounts(
            true_positives=self.true_positives + other.true_positives,
            false_positives=self.false_positives + other.false_positives,
            false_negatives=self.false_negatives + other.false_negatives,
        )


@dataclass(frozen=True)
class GapScores:
    """GAP scores overall and per pronoun gender.

    Example:
        >>> scores = GapScores(
        ...     overall=BinaryCounts(2, 0, 0),
        ...     masculine=BinaryCounts(1, 0, 0),
        ...     feminine=BinaryCounts(1, 0, 0),
        ... )
        >>> scores.as_dict(prefix="eval_")["eval_bias"]
        1.0
    """

    overall: BinaryCounts
    masculine: BinaryCounts
    feminine: BinaryCounts

    @property
    def f1(self) -> float:
        """Overall F1."""
        return self.overall.f1

    @property
    def masculine_f1(self) -> float:
        """F1 over rows whose pronoun is masculine."""
        return self.masculine.f1

    @property
    def feminine_f1(self) -> float:
        """F1 over rows whose pronoun is feminine."""
        return self.feminine.f1

    @property
    def bias(self) -> float:
        """feminine_f1 / masculine_f1; NaN unless both F1 are non-zero.

        The official scorer prints ``-`` for the bias when either gender's F1 is
        0, not only when the ratio would divide by zero; NaN is that ``-``.
        """
        if self.masculine_f1 == 0 or self.feminine_f1 == 0:
            return float("nan")
        return self.feminine_f1 / self.masculine_f1

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat metrics for ``Trainer.compute_metrics`` or logging.

        Args:
            prefix: Prepended to every key, e.g. ``"eval_"``.

        Returns:
            Keys ``f1, precision, recall, masculine_f1, feminine_f1, bias``
            (each prefixed) mapped to floats.
        """
        metrics = {
            "f1": self.f1,
            "precision": self.overall.precision,
            "recall": self.overall.recall,
            "masculine_f1": self.masculine_f1,
            "feminine_f1": self.feminine_f1,
            "bias": self.bias,
        }
        return {f"{prefix}{name}": float(value) for name, value in metrics.items()}


@dataclass(frozen=True)
class GapGold:
    """Gold annotation of one GAP row.

    Example:
        >>> GapGold("validation-2", "Her", a_coref=True, b_coref=False).gender
        'F'
    """

    example_id: str
    pronoun: str
    a_coref: bool
    b_coref: bool

    def __post_init__(self) -> None:
        # Fail at construction rather than in the middle of scoring.
        pronoun_gender(self.pronoun)
        if self.a_coref and self.b_coref:
            raise ValueError(
                f"GAP row {self.example_id!r} has both a_coref and b_coref True; GAP "
                "pronouns corefer with at most one of the two names."
            )

    @property
    def gender(self) -> str:
        """``"M"`` or ``"F"``, from the pronoun."""
        return pronoun_gender(self.pronoun)


# --------------------------------------------------------------------------- #
# Internal array helpers
# --------------------------------------------------------------------------- #


def _as_numpy(values: Any, dtype: Any = None) -> np.ndarray:
    """np.asarray that also accepts GPU / grad-requiring / bfloat16 torch tensors."""
    if hasattr(values, "detach") and hasattr(values, "cpu"):
        values = values.detach().cpu()
        if values.is_floating_point():
            values = values.float()  # bfloat16 has no numpy equivalent
    return np.asarray(values, dtype=dtype)


def _validated_thresholds(thresholds: ArrayLike) -> np.ndarray:
    """Sorted, de-duplicated 1-D thresholds in [0, 1]; sorted so argmax/argmin pick the smallest."""
    values = _as_numpy(thresholds, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            f"thresholds must be a non-empty 1-D sequence of floats, got shape {values.shape}."
        )
    if np.isnan(values).any() or values.min() < 0.0 or values.max() > 1.0:
        raise ValueError(
            f"thresholds must lie in [0, 1] (no NaN), got min={values.min()}, max={values.max()}."
        )
    return np.unique(values)


def _check_threshold(threshold: float) -> float:
    value = float(threshold)
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise ValueError(f"threshold must lie in [0, 1], got {threshold!r}.")
    return value


def _check_probabilities(values: np.ndarray, what: str) -> None:
    if np.isnan(values).any():
        raise ValueError(f"{what} contains NaN; probabilities must be finite values in [0, 1].")
    if values.size and (values.min() < 0.0 or values.max() > 1.0):
        raise ValueError(
            f"{what} must lie in [0, 1], got min={values.min()}, max={values.max()}; "
            "pass probabilities (e.g. apply a sigmoid), not logits."
        )


def _read_only(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)
    return values


# --------------------------------------------------------------------------- #
# GAP scoring
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _GoldTable:
    """Gold annotations as arrays: row r has labels[r] = (a_coref, b_coref)."""

    row_of_id: dict[str, int]
    labels: np.ndarray  # (rows, 2) bool
    is_feminine: np.ndarray  # (rows,) bool

    @property
    def num_rows(self) -> int:
        return len(self.row_of_id)


def _gold_table(gold: Sequence[GapGold]) -> _GoldTable:
    if len(gold) == 0:
        raise ValueError("gold is empty; pass at least one GapGold row (see read_gap_gold).")
    row_of_id: dict[str, int] = {}
    for row, example in enumerate(gold):
        if example.example_id in row_of_id:
            raise ValueError(
                f"Duplicate gold id {example.example_id!r} (rows {row_of_id[example.example_id]} "
                f"and {row}); every GAP id must appear once."
            )
        row_of_id[example.example_id] = row
    labels = np.array([(example.a_coref, example.b_coref) for example in gold], dtype=bool)
    is_feminine = np.array([example.gender == "F" for example in gold], dtype=bool)
    return _GoldTable(row_of_id, labels, is_feminine)


def _check_known_ids(table: _GoldTable, ids: Any, what: str) -> None:
    unknown = [example_id for example_id in ids if example_id not in table.row_of_id]
    if unknown:
        raise ValueError(
            f"{len(unknown)} {what} id(s) are not in the gold data, e.g. {unknown[:5]}; "
            "score against the gold file of the same split."
        )


def _decision_pair(example_id: str, value: Any) -> tuple[bool | None, bool | None]:
    pair = tuple(value) if isinstance(value, (tuple, list, np.ndarray)) else ()
    if len(pair) != 2 or not all(
        decision is None or isinstance(decision, (bool, np.bool_)) or decision in (0, 1)
        for decision in pair
    ):
        raise ValueError(
            f"Prediction for {example_id!r} must be an (a_coref, b_coref) pair of booleans "
            f"(None for a decision the system did not make), got {value!r}."
        )
    return tuple(None if decision is None else bool(decision) for decision in pair)


def _decision_array(table: _GoldTable, predictions: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(rows, 2) predicted decisions and the (rows, 2) mask of decisions the system made.

    Decisions not made (rows missing from ``predictions``, or a None in a pair) are False in the
    first array; `_confusion_counts` counts them as false negatives through the mask.
    """
    _check_known_ids(table, predictions, "prediction")
    decisions = np.zeros((table.num_rows, 2), dtype=bool)
    answered = np.zeros((table.num_rows, 2), dtype=bool)
    for example_id, value in predictions.items():
        row = table.row_of_id[example_id]
        for column, decision in enumerate(_decision_pair(example_id, value)):
            if decision is not None:
                decisions[row, column] = decision
                answered[row, column] = True
    return decisions, answered


def _probability_array(
    table: _GoldTable, probabilities: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, 2) probabilities (0 where missing) and the (rows,) mask of predicted rows."""
    _check_known_ids(table, probabilities, "probability")
    values = np.zeros((table.num_rows, 2), dtype=float)
    is_predicted = np.zeros(table.num_rows, dtype=bool)
    for example_id, value in probabilities.items():
        pair = _as_numpy(value, dtype=float)
        if pair.shape != (2,):
            raise ValueError(
                f"Probabilities for {example_id!r} must be an (a_prob, b_prob) pair, "
                f"got shape {pair.shape}."
            )
        _check_probabilities(pair, f"Probabilities for {example_id!r}")
        row = table.row_of_id[example_id]
        values[row] = pair
        is_predicted[row] = True
    return values, is_predicted


def _confusion_counts(
    decisions: np.ndarray, labels: np.ndarray, answered: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TP, FP, FN of decisions shaped (..., rows, 2), summed over the last two axes.

    ``answered`` (broadcastable to ``decisions``) marks the decisions the system made; ``decisions``
    must be False where it is False. The official scorer counts a decision the system did not make
    as a false negative whatever its gold label ("Missing output for ..."), so an unanswered
    gold-negative decision is a false negative too, not a true negative.
    """
    axes = (-2, -1)
    true_positives = np.count_nonzero(decisions & labels, axis=axes)
    false_positives = np.count_nonzero(decisions & ~labels, axis=axes)
    false_negatives = np.count_nonzero((~decisions & labels) | ~answered, axis=axes)
    return true_positives, false_positives, false_negatives


def _binary_counts(decisions: np.ndarray, labels: np.ndarray, answered: np.ndarray) -> BinaryCounts:
    true_positives, false_positives, false_negatives = _confusion_counts(decisions, labels, answered)
    return BinaryCounts(int(true_positives), int(false_positives), int(false_negatives))


def _scores_from_decisions(table: _GoldTable, decisions: np.ndarray, answered: np.ndarray) -> GapScores:
    answered = np.broadcast_to(answered, decisions.shape)
    masculine_rows = ~table.is_feminine
    feminine_rows = table.is_feminine
    masculine = _binary_counts(
        decisions[masculine_rows], table.labels[masculine_rows], answered[masculine_rows]
    )
    feminine = _binary_counts(
        decisions[feminine_rows], table.labels[feminine_rows], answered[feminine_rows]
    )
    return GapScores(overall=masculine + feminine, masculine=masculine, feminine=feminine)


def score_gap(gold: Sequence[GapGold], predictions: Mapping[str, tuple[bool, bool]]) -> GapScores:
    """Scores binary GAP predictions, counting as the official ``gap_scorer.py`` does.

    Args:
        gold: Gold rows, e.g. from :func:`read_gap_gold`.
        predictions: Maps a GAP id to its ``(a_coref, b_coref)`` decisions
            (booleans or 0/1). A gold row missing here counts as TWO false
            negatives whatever its gold labels, as in the official scorer (which
            prints "Missing output for ..."); likewise a single decision given as
            None counts as one false negative (the official scorer's reading of
            an unparseable label).

    Returns:
        Overall and per-gender counts with F1 and bias (NaN unless both
        genders' F1 are non-zero, the official scorer's ``-``).

    Raises:
        ValueError: On empty gold, duplicate gold ids, prediction ids not in
            gold (the official scorer ignores those silently; here they are
            most likely a split mix-up), or a prediction that is not a pair of
            booleans.

    Example:
        >>> gold = [GapGold("t-1", "he", True, False), GapGold("t-2", "she", False, True)]
        >>> scores = score_gap(gold, {"t-1": (True, False), "t-2": (True, False)})
        >>> scores.masculine_f1, scores.feminine_f1
        (1.0, 0.0)
        >>> score_gap(gold, {"t-1": (True, False)}).feminine  # t-2 missing: two false negatives
        BinaryCounts(true_positives=0, false_positives=0, false_negatives=2)
    """
    table = _gold_table(gold)
    return _scores_from_decisions(table, *_decision_array(table, predictions))


def score_gap_probabilities(
    gold: Sequence[GapGold],
    probabilities: Mapping[str, tuple[float, float]],
    threshold: float,
) -> GapScores:
    """Scores GAP coreference probabilities binarised at ``threshold``.

    Args:
        gold: Gold rows.
        probabilities: Maps a GAP id to ``(p(A coref), p(B coref))`` in [0, 1].
            A gold row missing here counts as two false negatives, as in
            :func:`score_gap`.
        threshold: Probabilities ``>= threshold`` are predicted positive.

    Returns:
        The :class:`GapScores` of the thresholded decisions.

    Raises:
        ValueError: On invalid gold, unknown ids, probabilities outside [0, 1]
            or NaN, or a threshold outside [0, 1].

    Example:
        >>> gold = [GapGold("t-1", "his", True, False)]
        >>> score_gap_probabilities(gold, {"t-1": (0.5, 0.2)}, threshold=0.5).f1
        1.0
    """
    threshold = _check_threshold(threshold)
    table = _gold_table(gold)
    values, is_predicted = _probability_array(table, probabilities)
    decisions = (values >= threshold) & is_predicted[:, None]
    return _scores_from_decisions(table, decisions, is_predicted[:, None])


@dataclass(frozen=True, eq=False)
class ThresholdSweep:
    """Overall F1 for each candidate threshold and the best one.

    Attributes:
        thresholds: Candidate thresholds, sorted ascending (read-only).
        f1: Overall F1 at each threshold (read-only).
        best_threshold: Smallest threshold achieving the maximum F1.
        best_f1: That maximum F1.
        best_scores: Full :class:`GapScores` at ``best_threshold``.
        comparison: ``">="`` (a probability equal to the threshold is positive)
            or ``">"``.
    """

    thresholds: np.ndarray
    f1: np.ndarray
    best_threshold: float
    best_f1: float
    best_scores: GapScores = field(repr=False)
    comparison: str = ">="

    @property
    def decision_threshold(self) -> float:
        """The threshold for the ``probability >= threshold`` rule (pipeline, scorer) giving the same decisions.

        ``best_threshold`` itself for ``">="``; for ``">"`` the next float above it (capped at 1.0, where
        ``"> 1.0"`` predicts nothing and ``">= 1.0"`` still predicts probabilities of exactly 1).
        """
        if self.comparison == ">=":
            return self.best_threshold
        return float(min(np.nextafter(self.best_threshold, np.inf), 1.0))


def _f1_array(
    true_positives: np.ndarray, false_positives: np.ndarray, false_negatives: np.ndarray
) -> np.ndarray:
    # Same integer formula as BinaryCounts.f1 so the sweep and best_scores agree exactly.
    numerator = 2.0 * true_positives
    denominator = numerator + false_positives + false_negatives
    return np.divide(
        numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0
    )


def sweep_threshold(
    gold: Sequence[GapGold],
    probabilities: Mapping[str, tuple[float, float]],
    thresholds: Sequence[float] | None = None,
    comparison: str = ">=",
) -> ThresholdSweep:
    """Picks the decision threshold maximising overall F1 (PeTra's validation protocol).

    Args:
        gold: Gold rows (normally the validation split).
        probabilities: Maps a GAP id to ``(p(A coref), p(B coref))`` in [0, 1].
            A gold row missing here counts as two false negatives at every
            threshold, as in :func:`score_gap`.
        thresholds: Candidates in [0, 1]; defaults to ``0.00, 0.01, ..., 0.99``.
            They are sorted and de-duplicated. ``threshold_grid(name)`` gives
            the named grids of ``THRESHOLD_GRIDS`` (e.g. the paper's 0.01..1.00).
        comparison: ``">="`` (default) predicts a link when the probability is
            at least the threshold, ``">"`` when it is strictly above it.

    Returns:
        F1 per threshold and the smallest threshold achieving the maximum.

    Raises:
        ValueError: On invalid gold, probabilities or thresholds.

    Example:
        >>> gold = [GapGold("t-1", "he", True, False)]
        >>> sweep = sweep_threshold(gold, {"t-1": (0.8, 0.3)})
        >>> sweep.best_threshold, sweep.best_f1
        (0.31, 1.0)
    """
    candidates = _validated_thresholds(
        _default_f1_thresholds() if thresholds is None else thresholds
    )
    comparison = _check_comparison(comparison)
    table = _gold_table(gold)
    values, is_predicted = _probability_array(table, probabilities)
    # decisions[k, r, c]: decision c of row r at threshold k.
    if comparison == ">=":
        above = values[None, :, :] >= candidates[:, None, None]
    else:
        above = values[None, :, :] > candidates[:, None, None]
    answered = is_predicted[:, None]
    decisions = above & answered[None, :, :]
    f1 = _f1_array(*_confusion_counts(decisions, table.labels[None, :, :], answered[None, :, :]))
    best = int(np.argmax(f1))  # first maximum == smallest threshold, candidates are sorted
    return ThresholdSweep(
        thresholds=_read_only(candidates),
        f1=_read_only(f1),
        best_threshold=float(candidates[best]),
        best_f1=float(f1[best]),
        best_scores=_scores_from_decisions(table, decisions[best], answered),
        comparison=comparison,
    )


# --------------------------------------------------------------------------- #
# Reading GAP files
# --------------------------------------------------------------------------- #


def _parse_gap_label(value: str, column: str, location: str) -> bool:
    label = _GAP_LABELS.get(value.strip().lower())
    if label is None:
        raise ValueError(f"{location}: column {column} must be TRUE or FALSE, got {value!r}.")
    return label


def _gap_header_indices(header: list[str], path: Path) -> dict[str, int]:
    missing = [column for column in _REQUIRED_GAP_COLUMNS if column not in header]
    if missing:
        raise ValueError(
            f"{path}:1: header is missing column(s) {missing}; expected the official GAP "
            f"tab-separated header {list(_GAP_COLUMNS)}."
        )
    return {column: header.index(column) for column in _REQUIRED_GAP_COLUMNS}


def _parse_gap_row(
    fields: list[str], columns: dict[str, int], expected_fields: int, location: str
) -> GapGold:
    if len(fields) != expected_fields:
        raise ValueError(
            f"{location}: expected {expected_fields} tab-separated fields like the header, "
            f"found {len(fields)}; check for stray tabs or a truncated line."
        )
    try:
        return GapGold(
            example_id=fields[columns["ID"]].strip(),
            pronoun=fields[columns["Pronoun"]],
            a_coref=_parse_gap_label(fields[columns["A-coref"]], "A-coref", location),
            b_coref=_parse_gap_label(fields[columns["B-coref"]], "B-coref", location),
        )
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(location) else f"{location}: {message}") from error


def read_gap_gold(path: str | os.PathLike) -> list[GapGold]:
    """Reads gold annotations from an official GAP TSV file.

    Args:
        path: A file such as ``gap-validation.tsv`` with the header
            ``ID, Text, Pronoun, Pronoun-offset, A, A-offset, A-coref, B,
            B-offset, B-coref, URL``. Labels are TRUE/FALSE, case-insensitive.

    Returns:
        One :class:`GapGold` per data row, in file order.

    Raises:
        ValueError: Naming the file and line of a malformed row, a duplicate
            id, an unknown pronoun, or an empty file.

    Example:
        >>> gold = read_gap_gold("gap-validation.tsv")  # doctest: +SKIP
        >>> len(gold)  # doctest: +SKIP
        454
    """
    path = Path(path)
    # utf-8-sig tolerates a byte-order mark written by spreadsheet tools.
    with path.open(encoding="utf-8-sig") as handle:
        lines = [line.rstrip("\r\n") for line in handle]
    if not lines or not lines[0].strip():
        raise ValueError(f"{path}: file is empty; expected a GAP TSV with a header row.")
    header = lines[0].split("\t")
    columns = _gap_header_indices(header, path)

    examples: list[GapGold] = []
    line_of_id: dict[str, int] = {}
    for line_number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue  # tolerate blank (e.g. trailing) lines
        location = f"{path}:{line_number}"
        example = _parse_gap_row(line.split("\t"), columns, len(header), location)
        if example.example_id in line_of_id:
            raise ValueError(
                f"{location}: duplicate id {example.example_id!r} (first seen on line "
                f"{line_of_id[example.example_id]})."
            )
        line_of_id[example.example_id] = line_number
        examples.append(example)
    if not examples:
        raise ValueError(f"{path}: no data rows after the header.")
    return examples


# --------------------------------------------------------------------------- #
# PeTra unique-people counting
# --------------------------------------------------------------------------- #

# Columns of the authors' counting annotations (``data/num_people.tsv`` in the PeTra repository): 100 GAP
# validation documents, the GAP id, the text, the number of unique people and an optional free-text comment.
_PEOPLE_COUNT_COLUMNS = ("ID", "Text", "Count", "Additional comments")
_REQUIRED_PEOPLE_COUNT_COLUMNS = ("ID", "Count")


@dataclass(frozen=True)
class PeopleCount:
    """One annotated document of the unique-people counting task.

    Attributes:
        example_id: GAP id of the document (e.g. ``"validation-1"``).
        text: The document text (the GAP ``Text`` column); empty when the file has no ``Text`` column.
        count: Annotated number of unique people mentioned.
        comment: The annotator's comment, often empty.
    """

    example_id: str
    text: str
    count: int
    comment: str = ""


def read_people_counts(path: str | os.PathLike) -> list[PeopleCount]:
    """Reads the unique-people counting annotations of PeTra (paper section 3.4).

    The authors publish them as ``data/num_people.tsv`` in their repository (github.com/shtoshni92/petra): a
    tab-separated file with the header ``ID, Text, Count, Additional comments`` and one row per annotated GAP
    validation document (100 rows). Only ``ID`` and ``Count`` are required. Run the model on each ``text`` (or
    on the GAP validation row with the same id), then give the ``overwrite_probs`` of every document and the
    ``count`` values to :func:`select_counting_threshold`.

    Args:
        path: The TSV file.

    Returns:
        One :class:`PeopleCount` per data row, in file order.

    Raises:
        ValueError: Naming the file and line of a missing column, a count that is not a non-negative integer, a
            duplicate id, or an empty file.

    Example:
        >>> documents = read_people_counts("num_people.tsv")  # doctest: +SKIP
        >>> len(documents), documents[0].example_id, documents[0].count  # doctest: +SKIP
        (100, 'validation-1', 3)
    """
    path = Path(path)
    with path.open(encoding="utf-8-sig") as handle:
        lines = [line.rstrip("\r\n") for line in handle]
    if not lines or not lines[0].strip():
        raise ValueError(f"{path}: file is empty; expected a header {list(_PEOPLE_COUNT_COLUMNS)}.")
    header = [column.strip() for column in lines[0].split("\t")]
    missing = [column for column in _REQUIRED_PEOPLE_COUNT_COLUMNS if column not in header]
    if missing:
        raise ValueError(
            f"{path}:1: header is missing column(s) {missing}; expected the tab-separated header "
            f"{list(_PEOPLE_COUNT_COLUMNS)}."
        )
    columns = {column: header.index(column) for column in _PEOPLE_COUNT_COLUMNS if column in header}

    documents: list[PeopleCount] = []
    line_of_id: dict[str, int] = {}
    for line_number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        location = f"{path}:{line_number}"
        fields = line.split("\t")
        needed = max(columns[column] for column in _REQUIRED_PEOPLE_COUNT_COLUMNS)
        if len(fields) <= needed:
            raise ValueError(f"{location}: expected at least {needed + 1} tab-separated fields, found {len(fields)}.")

        def field_of(column: str) -> str:
            index = columns.get(column)
            return fields[index] if index is not None and index < len(fields) else ""

        example_id, raw_count = field_of("ID").strip(), field_of("Count").strip()
        if not raw_count.isdigit():
            raise ValueError(f"{location}: Count must be a non-negative integer, got {raw_count!r}.")
        if example_id in line_of_id:
            raise ValueError(
                f"{location}: duplicate id {example_id!r} (first seen on line {line_of_id[example_id]})."
            )
        line_of_id[example_id] = line_number
        documents.append(
            PeopleCount(example_id, field_of("Text"), int(raw_count), field_of("Additional comments").strip())
        )
    if not documents:
        raise ValueError(f"{path}: no data rows after the header.")
    return documents



def _selected_overwrite_probabilities(
    overwrite_probabilities: ArrayLike, token_mask: ArrayLike | None, what: str
) -> np.ndarray:
    """Flat overwrite probabilities of the tokens kept by ``token_mask``."""
    values = _as_numpy(overwrite_probabilities, dtype=float)
    if values.ndim != 2:
        raise ValueError(
            f"{what} must have shape (num_tokens, num_memory_cells), got shape {values.shape}."
        )
    if token_mask is not None:
        mask = _as_numpy(token_mask)
        if mask.shape != (values.shape[0],):
            raise ValueError(
                f"token_mask for {what} must have shape ({values.shape[0]},) to match its "
                f"tokens, got shape {mask.shape}."
            )
        if mask.dtype != bool:
            # HF attention masks are 0/1 integers; anything else is likely a bug.
            if not np.isin(mask, (0, 1)).all():
                raise ValueError(f"token_mask for {what} must be boolean or 0/1, got {mask}.")
            mask = mask.astype(bool)
        values = values[mask]
    # Only kept tokens are validated: padding rows may hold arbitrary values.
    _check_probabilities(values, what)
    return values.ravel()


def count_unique_people(
    overwrite_probabilities: ArrayLike,
    threshold: float,
    token_mask: ArrayLike | None = None,
) -> int:
    """PeTra's predicted number of unique people in one document.

    Every memory-cell overwrite with probability ``>= threshold`` is counted as
    a new person: ``sum_t sum_i 1[o[t, i] >= threshold]``.

    Args:
        overwrite_probabilities: ``(num_tokens, num_memory_cells)`` overwrite
            probabilities in [0, 1].
        threshold: The counting threshold ``alpha`` in [0, 1].
        token_mask: Optional ``(num_tokens,)`` boolean (or 0/1) mask; False
            tokens (padding) are ignored.

    Returns:
        The predicted count.

    Raises:
        ValueError: On a non-2-D input, a mask of the wrong shape, or
            probabilities / threshold outside [0, 1].

    Example:
        >>> count_unique_people([[0.9, 0.1], [0.6, 0.95]], 0.5, token_mask=[True, False])
        1
    """
    threshold = _check_threshold(threshold)
    values = _selected_overwrite_probabilities(
        overwrite_probabilities, token_mask, "overwrite_probabilities"
    )
    return int(np.count_nonzero(values >= threshold))


@dataclass(frozen=True, eq=False)
class CountingResult:
    """Outcome of PeTra's counting-threshold selection.

    Attributes:
        best_threshold: Smallest ``alpha`` with the minimum total error.
        total_absolute_error: That minimum, ``sum_docs |gold - predicted|``.
        thresholds: Candidate thresholds, sorted ascending (read-only).
        errors: Total absolute error at each threshold (read-only).
    """

    best_threshold: float
    total_absolute_error: int
    thresholds: np.ndarray
    errors: np.ndarray


def _validated_gold_counts(gold_counts: Sequence[int], num_documents: int) -> np.ndarray:
    counts = _as_numpy(gold_counts)
    if counts.shape != (num_documents,):
        raise ValueError(
            f"gold_counts must hold one count per document ({num_documents}), "
            f"got shape {counts.shape}."
        )
    if counts.size and (
        not np.issubdtype(counts.dtype, np.number)
        or (counts != np.round(counts)).any()
        or counts.min() < 0
    ):
        raise ValueError(f"gold_counts must be non-negative integers, got {counts.tolist()}.")
    return counts.astype(np.int64)


def _counts_at_thresholds(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Number of values >= each threshold, for all thresholds at once."""
    sorted_values = np.sort(values)
    # searchsorted(side="left") is the number of values strictly below the threshold.
    return sorted_values.size - np.searchsorted(sorted_values, thresholds, side="left")


def select_counting_threshold(
    overwrite_probabilities_per_doc: Sequence[ArrayLike],
    gold_counts: Sequence[int],
    thresholds: Sequence[float] | None = None,
    token_masks: Sequence[ArrayLike | None] | None = None,
) -> CountingResult:
    """Chooses PeTra's counting threshold ``alpha`` minimising total counting error.

    Args:
        overwrite_probabilities_per_doc: One ``(num_tokens, num_memory_cells)``
            array per annotated document.
        gold_counts: Gold number of unique people per document.
        thresholds: Candidate ``alpha`` values in [0, 1]; defaults to
            ``0.01, 0.02, ..., 1.00``. They are sorted and de-duplicated.
        token_masks: Optional per-document ``(num_tokens,)`` masks (or None
            entries) excluding padding tokens.

    Returns:
        The smallest ``alpha`` achieving the minimum summed absolute error, that
        error, and the error at every candidate.

    Raises:
        ValueError: On no documents, mismatched lengths, invalid gold counts,
            probabilities or thresholds.

    Example:
        >>> result = select_counting_threshold([[[0.9, 0.2], [0.4, 0.7]]], [2])
        >>> result.best_threshold, result.total_absolute_error
        (0.41, 0)
    """
    num_documents = len(overwrite_probabilities_per_doc)
    if num_documents == 0:
        raise ValueError("overwrite_probabilities_per_doc is empty; pass at least one document.")
    counts = _validated_gold_counts(gold_counts, num_documents)
    if token_masks is None:
        token_masks = [None] * num_documents
    elif len(token_masks) != num_documents:
        raise ValueError(
            f"token_masks has {len(token_masks)} entries but there are {num_documents} "
            "documents; pass one mask (or None) per document."
        )
    candidates = _validated_thresholds(
        _default_counting_thresholds() if thresholds is None else thresholds
    )

    errors = np.zeros(candidates.shape, dtype=np.int64)
    for index, (document, mask, gold_count) in enumerate(
        zip(overwrite_probabilities_per_doc, token_masks, counts)
    ):
        values = _selected_overwrite_probabilities(
            document, mask, f"overwrite_probabilities_per_doc[{index}]"
        )
        errors += np.abs(gold_count - _counts_at_thresholds(values, candidates))
    best = int(np.argmin(errors))  # first minimum == smallest alpha, candidates are sorted
    return CountingResult(
        best_threshold=float(candidates[best]),
        total_absolute_error=int(errors[best]),
        thresholds=_read_only(candidates),
        errors=_read_only(errors),
    )
