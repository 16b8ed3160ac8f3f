"""GAP pronoun-resolution scores (Webster et al., 2018) as an ``evaluate`` metric.

A thin ``evaluate.Metric`` around :func:`hf_entity_models.tasks.coreference.metrics.score_gap`, the
package's tested GAP scorer: this file only turns the rows ``evaluate`` collected into that scorer's
inputs and its :class:`GapScores` into a flat dict. Load it offline with
``evaluate.load(hf_entity_models.metrics.metric_path("gap"))``.
"""

from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import datasets
import evaluate

from hf_entity_models.tasks.coreference.metrics import GapGold
from hf_entity_models.tasks.coreference.metrics import GapScores
from hf_entity_models.tasks.coreference.metrics import score_gap

_CITATION = """\
@article{webster-etal-2018-mind,
    title = "Mind the {GAP}: A Balanced Corpus of Gendered Ambiguous Pronouns",
    author = "Webster, Kellie and Recasens, Marta and Axelrod, Vera and Baldridge, Jason",
    journal = "Transactions of the Association for Computational Linguistics",
    volume = "6",
    year = "2018",
    pages = "605--617",
    url = "https://aclanthology.org/Q18-1042",
    doi = "10.1162/tacl_a_00240",
}
"""

_DESCRIPTION = """\
GAP (Webster et al., 2018) is a gender-balanced corpus of ambiguous pronouns: every row holds a text, a
pronoun and two candidate names A and B, and asks whether the pronoun refers to A and whether it refers
to B (at most one is true). The official scorer turns every row into two binary decisions (A and B) and
computes precision, recall and F1 of the positive class ("coreferent") over all decisions; the same
scores over the rows whose pronoun is masculine (he, him, his, himself) and feminine (she, her, hers,
herself); and the bias, F1_feminine / F1_masculine (1.0 is balanced, below 1.0 favours masculine
pronouns). The gender of a row is read from its pronoun text, case-insensitively. Every row needs an
answer here. The official scorer counts a gold row missing from the system output as two false
negatives, whatever its gold labels, while a row answered False/False makes its gold-negative decisions
true negatives: so do not fill unanswered rows with False (that overstates recall); score such a system
with score_gap, leaving the unanswered rows out of its predictions.

This metric calls hf_entity_models.tasks.coreference.metrics.score_gap, which counts as the official
scorer does; see that module for threshold sweeps over probabilities (PeTra's protocol).
"""

_KWARGS_DESCRIPTION = """
Scores GAP pronoun-resolution decisions against gold annotations, overall and per pronoun gender.

Args:
    predictions (`list` of `dict`): One dict per GAP row with the system's two decisions:
        - **a_coref** (`bool`): the pronoun refers to name A.
        - **b_coref** (`bool`): the pronoun refers to name B.
        Every row needs an answer. For a system that skipped rows, do not pass False for them: the
        official scorer counts both decisions of a missing row as false negatives, whereas False makes its
        gold-negative decisions true negatives. Use `score_gap` with those rows left out instead.
    references (`list` of `dict`, or a `datasets.Dataset`): One dict per row, in the same order, with
        the gold annotation. The rows of `hf_entity_models.tasks.coreference.load_gap(path)` have these
        keys, so that dataset can be passed as it is (other keys are ignored):
        - **pronoun** (`str`): the pronoun's text, e.g. "His"; its gender is derived from it. One of
          he/him/his/himself/she/her/hers/herself, case-insensitive.
        - **a_coref** (`bool`): gold label for name A.
        - **b_coref** (`bool`): gold label for name B (never true together with a_coref).
    Decisions and labels are booleans, or the integers 0/1 (numpy and torch scalars too); anything else
    is refused rather than cast.

Returns:
    A dict of floats:
        - **precision**, **recall**, **f1**: over both decisions of every row, positive class.
        - **masculine_precision**, **masculine_recall**, **masculine_f1**: over rows with a masculine pronoun.
        - **feminine_precision**, **feminine_recall**, **feminine_f1**: over rows with a feminine pronoun.
        - **bias**: feminine_f1 / masculine_f1; NaN when either F1 is 0 (the official scorer prints "-").
    A precision, recall or F1 whose denominator is zero (nothing predicted, or nothing gold) is 0.0.

Raises:
    ValueError: If predictions and references differ in length, a row is not a dict with the keys
        above, a decision or label is not a boolean (or 0/1), a pronoun is not one of the eight GAP
        pronouns, a gold row has both a_coref and b_coref true, or there are no rows.

Examples:
    >>> import evaluate
    >>> from hf_entity_models.metrics import metric_path
    >>> gap = evaluate.load(metric_path("gap"))
    >>> results = gap.compute(
    ...     predictions=[
    ...         {"a_coref": True, "b_coref": False},
    ...         {"a_coref": True, "b_coref": False},
    ...     ],
    ...     references=[
    ...         {"pronoun": "He", "a_coref": True, "b_coref": False},
    ...         {"pronoun": "her", "a_coref": False, "b_coref": True},
    ...     ],
    ... )
    >>> results["f1"], results["masculine_f1"], results["feminine_f1"]
    (0.5, 1.0, 0.0)
    >>> results["bias"]
    nan
"""

_PREDICTION_FIELDS = ("a_coref", "b_coref")
_REFERENCE_FIELDS = ("pronoun", "a_coref", "b_coref")


def _decision(value: Any, where: str) -> bool:
    # Checked before Arrow sees it: Arrow would turn "no" or 2 into True without a word.
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # numpy / torch scalars
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{where} must be a boolean (True/False, or 0/1), got {value!r}.")


def _rows(values: Any, name: str, fields: tuple[str, ...]) -> list[Any]:
    if values is None:
        raise ValueError(
            f"{name} is missing: GAP needs both predictions (keys {list(_PREDICTION_FIELDS)}) and "
            f"references (keys {list(_REFERENCE_FIELDS)}), one dict per row."
        )
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ValueError(
            f"{name} must be a list with one dict per GAP row (keys {list(fields)}), "
            f"got a {type(values).__name__}."
        )
    return list(values)


def _checked_row(row: Any, where: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """The row's fields, validated; other keys (e.g. the rest of a load_gap row) are dropped."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where} must be a dict with keys {list(fields)}, got {row!r}.")
    missing = [name for name in fields if name not in row]
    if missing:
        raise ValueError(f"{where} has no {missing}: every row needs the keys {list(fields)}, got {sorted(row)}.")
    checked = {}
    for name in fields:
        value = row[name]
        if name == "pronoun":
            if not isinstance(value, str):
                raise ValueError(f"{where}['pronoun'] must be the pronoun's text, e.g. 'His', got {value!r}.")
            checked[name] = value
        else:
            checked[name] = _decision(value, f"{where}[{name!r}]")
    return checked


def _checked_batch(predictions: Any, references: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    prediction_rows = _rows(predictions, "predictions", _PREDICTION_FIELDS)
    reference_rows = _rows(references, "references", _REFERENCE_FIELDS)
    if len(prediction_rows) != len(reference_rows):
        raise ValueError(
            f"Mismatch in the number of predictions ({len(prediction_rows)}) and references "
            f"({len(reference_rows)}): pass one prediction per GAP row, in the order of the references "
            "(for a system that skipped rows, use score_gap with those rows left out: a missing row counts "
            "as two false negatives, a False answer does not)."
        )
    prediction_rows = [
        _checked_row(row, f"predictions[{index}]", _PREDICTION_FIELDS) for index, row in enumerate(prediction_rows)
    ]
    reference_rows = [
        _checked_row(row, f"references[{index}]", _REFERENCE_FIELDS) for index, row in enumerate(reference_rows)
    ]
    _gold_rows(reference_rows)  # the scorer's own checks (pronoun, labels), at the batch that breaks them
    return prediction_rows, reference_rows


def _gold_rows(references: list[dict[str, Any]]) -> list[GapGold]:
    gold = []
    for index, reference in enumerate(references):
        try:
            gold.append(
                GapGold(
                    example_id=f"#{index}",
                    pronoun=reference["pronoun"],
                    a_coref=reference["a_coref"],
                    b_coref=reference["b_coref"],
                )
            )
        except ValueError as error:
            raise ValueError(f"references[{index}]: {error}") from error
    return gold


def _flat_scores(scores: GapScores) -> dict[str, float]:
    results = {}
    for prefix, counts in (("", scores.overall), ("masculine_", scores.masculine), ("feminine_", scores.feminine)):
        results[f"{prefix}precision"] = float(counts.precision)
        results[f"{prefix}recall"] = float(counts.recall)
        results[f"{prefix}f1"] = float(counts.f1)
    results["bias"] = float(scores.bias)
    return results


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Gap(evaluate.Metric):
    """GAP precision / recall / F1, overall and per pronoun gender, and the gender bias."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": {
                        "a_coref": datasets.Value("bool"),
                        "b_coref": datasets.Value("bool"),
                    },
                    "references": {
                        "pronoun": datasets.Value("string"),
                        "a_coref": datasets.Value("bool"),
                        "b_coref": datasets.Value("bool"),
                    },
                }
            ),
            homepage="https://github.com/google-research-datasets/gap-coreference",
            reference_urls=[
                "https://aclanthology.org/Q18-1042",
                "https://github.com/google-research-datasets/gap-coreference/blob/master/gap_scorer.py",
            ],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Adds GAP rows; see the class docstring for their format. Invalid rows raise ValueError here."""
        predictions, references = _checked_batch(predictions, references)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Adds one GAP row; see the class docstring for its format. An invalid row raises ValueError here."""
        predictions, references = _checked_batch(
            None if prediction is None else [prediction], None if reference is None else [reference]
        )
        super().add(prediction=predictions[0], reference=references[0], **kwargs)

    def _compute(self, predictions: list[dict[str, Any]], references: list[dict[str, Any]]) -> dict[str, float]:
        if len(references) == 0:
            raise ValueError("No GAP rows to score: pass at least one prediction and reference.")
        gold = _gold_rows(references)
        decisions = {
            row.example_id: (prediction["a_coref"], prediction["b_coref"])
            for row, prediction in zip(gold, predictions)
        }
        return _flat_scores(score_gap(gold, decisions))
