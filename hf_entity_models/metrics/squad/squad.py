"""The official SQuAD v1.1 / v2.0 exact match and F1 as an ``evaluate`` metric.

A thin ``evaluate.Metric`` around :func:`hf_entity_models.tasks.question_answering.metrics.score_squad`, the
package's tested re-implementation of the official scripts: this file only checks the rows ``evaluate``
collects, pairs predictions with references by question id and returns the scorer's dict. The version is the
configuration name: ``evaluate.load(metric_path("squad"))`` scores SQuAD 1.1 (like the Hub's ``squad``),
``evaluate.load(metric_path("squad"), "v2.0")`` scores SQuAD 2.0 (like the Hub's ``squad_v2``). A
configuration, not a ``compute`` argument, because the two versions take different inputs (2.0 adds
``no_answer_probability``) and ``evaluate`` fixes a metric's input features when it is loaded.
"""

import math
import numbers
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import datasets
import evaluate

from hf_entity_models.tasks.question_answering.metrics import score_squad

_CITATION = """\
@inproceedings{rajpurkar-etal-2016-squad,
    title = "{SQ}u{AD}: 100,000+ Questions for Machine Comprehension of Text",
    author = "Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and Liang, Percy",
    booktitle = "Proceedings of the 2016 Conference on Empirical Methods in Natural Language Processing",
    year = "2016",
    pages = "2383--2392",
    url = "https://aclanthology.org/D16-1264",
    doi = "10.18653/v1/D16-1264",
}
@inproceedings{rajpurkar-etal-2018-know,
    title = "Know What You Don{'}t Know: Unanswerable Questions for {SQ}u{AD}",
    author = "Rajpurkar, Pranav and Jia, Robin and Liang, Percy",
    booktitle = "Proceedings of the 56th Annual Meeting of the Association for Computational Linguistics
                 (Volume 2: Short Papers)",
    year = "2018",
    pages = "784--789",
    url = "https://aclanthology.org/P18-2124",
    doi = "10.18653/v1/P18-2124",
}
"""

_DESCRIPTION = """\
The official scores of the Stanford Question Answering Dataset (Rajpurkar et al., 2016, 2018), as the
scripts evaluate-v1.1.py and evaluate-v2.0.py compute them. Answers are normalised (lower-cased, ASCII
punctuation removed, the articles a/an/the removed, whitespace collapsed); exact match is 1 when the
normalised prediction equals a normalised gold answer, and F1 is the harmonic mean of the precision and
recall of the shared tokens. A question scores the maximum over its gold answers; the scores are means in
percent over all questions.

Load the SQuAD 1.1 scores with evaluate.load(path) (configuration "v1.1", the default) and the SQuAD 2.0
scores with evaluate.load(path, "v2.0"). In SQuAD 2.0 a question without gold answers is unanswerable: its
only correct answer is the empty string. Version 2.0 reports the scores overall and split into answerable
(HasAns) and unanswerable (NoAns) questions and, from each prediction's no_answer_probability (a no-answer
probability, or the null odds: a no-answer score minus the best span score), the best exact match and F1 one
threshold reaches and that threshold (a question is predicted unanswerable iff its value is > threshold).

Predictions and references are paired by question id, so their orders may differ; every reference needs
exactly one prediction. This metric calls hf_entity_models.tasks.question_answering.metrics.score_squad;
see that module for where it deliberately differs from the scripts (only on input they mishandle).
"""

_KWARGS_DESCRIPTION = """
Computes the official SQuAD exact match and F1 (v1.1, or v2.0 with the configuration "v2.0").

Args:
    predictions (`list` of `dict`): One dict per question:
        - **id** (`str`): the question id.
        - **prediction_text** (`str`): the predicted answer; "" predicts "unanswerable" (v2.0).
        - **no_answer_probability** (`float`, v2.0 only, optional): how sure the system is that there is no
          answer (a probability, or the null odds of our post-processing); larger means surer. Give it for
          every prediction or for none; with it the result has the best_* keys.
    references (`list` of `dict`, or a `datasets.Dataset`): One dict per question (other keys are ignored,
        so the rows of a SQuAD dataset can be passed as they are):
        - **id** (`str`): the question id.
        - **answers**: the gold answers, as in the Hub's squad datasets, `{"text": [str, ...],
          "answer_start": [int, ...]}` (`answer_start` is optional and unused), or as in the official JSON,
          `[{"text": str, "answer_start": int}, ...]`. Empty for an unanswerable v2.0 question; never empty
          in v1.1.
    no_answer_threshold (`float`, optional, v2.0 only): before scoring, predict "unanswerable" for every
        question whose no_answer_probability is > no_answer_threshold (the script's --na-prob-thresh). By
        default the predictions are scored as given (the Hub's squad_v2 default, 1.0, is the same for
        probabilities but not for null odds, which can exceed 1).

Returns:
    v1.1, a dict of floats in percent:
        - **exact_match**, **f1**: over all questions.
    v2.0, a dict of floats in percent and counts (HasAns_* / NoAns_* only when there are such questions,
    best_* only with no_answer_probability):
        - **exact**, **f1**, **total**: over all questions.
        - **HasAns_exact**, **HasAns_f1**, **HasAns_total**: over the answerable questions.
        - **NoAns_exact**, **NoAns_f1**, **NoAns_total**: over the unanswerable questions.
        - **best_exact**, **best_exact_thresh**, **best_f1**, **best_f1_thresh**: the best scores one threshold
          on no_answer_probability reaches, and the thresholds (evaluate-v2.0.py's find_best_thresh).

Raises:
    ValueError: If predictions and references differ in length or ids, an id occurs twice, a row is not a
        dict with the keys above, a text is not a string, a v1.1 reference has no answer (a SQuAD 2.0
        question: load the "v2.0" configuration), a v1.1 prediction has a no_answer_probability, some v2.0
        predictions have a no_answer_probability and others not, a probability is not a number, or there
        are no rows.

Examples:
    >>> import evaluate
    >>> from hf_entity_models.metrics import metric_path
    >>> squad = evaluate.load(metric_path("squad"))
    >>> squad.compute(
    ...     predictions=[{"id": "q1", "prediction_text": "the Broncos"}],
    ...     references=[{"id": "q1", "answers": {"text": ["Denver Broncos"], "answer_start": [177]}}],
    ... )
    {'exact_match': 0.0, 'f1': 66.66666666666666}
    >>> squad_v2 = evaluate.load(metric_path("squad"), "v2.0")
    >>> results = squad_v2.compute(
    ...     predictions=[
    ...         {"id": "q1", "prediction_text": "Denver Broncos", "no_answer_probability": -3.0},
    ...         {"id": "q2", "prediction_text": "", "no_answer_probability": 2.0},
    ...     ],
    ...     references=[
    ...         {"id": "q1", "answers": {"text": ["Denver Broncos"], "answer_start": [177]}},
    ...         {"id": "q2", "answers": {"text": [], "answer_start": []}},
    ...     ],
    ... )
    >>> results["exact"], results["HasAns_total"], results["NoAns_exact"], results["best_f1_thresh"]
    (100.0, 1, 100.0, -3.0)
"""

_CONFIGURATIONS = {"default": "v1.1", "v1.1": "v1.1", "v2.0": "v2.0"}
_PROBABILITY = "no_answer_probability"


def _rows(values: Any, name: str) -> list[Any]:
    if values is None:
        raise ValueError(
            f"{name} is missing: SQuAD needs predictions ({{'id', 'prediction_text'}} per question) and "
            "references ({'id', 'answers': {'text': [...]}} per question)."
        )
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a list with one dict per question, got a {type(values).__name__}.")
    return list(values)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {type(value).__name__} {value!r}.")
    return value


def _probability(value: Any, where: str) -> float:
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        value = value.item()  # numpy / torch scalars
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ValueError(f"{where} must be a number (a probability or null odds), got {value!r}.")
    return float(value)


def _checked_prediction(row: Any, where: str, version: str) -> dict[str, Any]:
    if not isinstance(row, Mapping) or "id" not in row or "prediction_text" not in row:
        raise ValueError(
            f"{where} must be a dict with the keys 'id' and 'prediction_text'"
            + (f" (and optionally '{_PROBABILITY}')" if version == "v2.0" else "")
            + f", got {row!r}."
        )
    checked = {
        "id": _text(row["id"], f"{where}['id']"),
        "prediction_text": _text(row["prediction_text"], f"{where}['prediction_text']"),
    }
    if version == "v1.1":
        if _PROBABILITY in row:
            raise ValueError(
                f"{where} has a {_PROBABILITY!r}, which only SQuAD 2.0 scores: load the metric with "
                'evaluate.load(metric_path("squad"), "v2.0") for SQuAD 2.0 data, or leave the key out.'
            )
        return checked
    value = row.get(_PROBABILITY)
    checked[_PROBABILITY] = None if value is None else _probability(value, f"{where}[{_PROBABILITY!r}]")
    return checked


def _gold_texts(answers: Any, where: str) -> list[str]:
    if isinstance(answers, Mapping):  # the Hub datasets' layout: {"text": [...], "answer_start": [...]}
        if "text" not in answers:
            raise ValueError(f"{where} must have a 'text' list of gold answers, got {answers!r}.")
        texts = answers["text"]
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise ValueError(f"{where}['text'] must be a list of answer strings, got {texts!r}.")
        texts = [_text(text, f"{where}['text'][{index}]") for index, text in enumerate(texts)]
        starts = answers.get("answer_start")
        if starts is not None and (
            isinstance(starts, (str, bytes)) or not isinstance(starts, Iterable) or len(list(starts)) != len(texts)
        ):
            raise ValueError(f"{where}['answer_start'] must be a list with one offset per answer text, got {starts!r}.")
        return texts
    if isinstance(answers, (list, tuple)):  # the official JSON layout: [{"text": ..., "answer_start": ...}]
        texts = []
        for index, answer in enumerate(answers):
            if not isinstance(answer, Mapping) or "text" not in answer:
                raise ValueError(f"{where}[{index}] must be a dict with a 'text', got {answer!r}.")
            texts.append(_text(answer["text"], f"{where}[{index}]['text']"))
        return texts
    raise ValueError(
        f"{where} must be {{'text': [...], 'answer_start': [...]}} or a list of {{'text': ...}} dicts, got {answers!r}."
    )


def _checked_reference(row: Any, where: str, version: str) -> dict[str, Any]:
    if not isinstance(row, Mapping) or "id" not in row or "answers" not in row:
        raise ValueError(f"{where} must be a dict with the keys 'id' and 'answers', got {row!r}.")
    texts = _gold_texts(row["answers"], f"{where}['answers']")
    if version == "v1.1" and not texts:
        raise ValueError(
            f"{where} (id {row['id']!r}) has no gold answer: every SQuAD 1.1 question has one. An unanswerable "
            'question is SQuAD 2.0: load the metric with evaluate.load(metric_path("squad"), "v2.0").'
        )
    return {"id": _text(row["id"], f"{where}['id']"), "answers": {"text": texts}}


def _duplicate(ids: list[str]) -> str | None:
    seen = set()
    for qid in ids:
        if qid in seen:
            return qid
        seen.add(qid)
    return None


def _check_ids_and_probabilities(predictions: list[dict[str, Any]], references: list[dict[str, Any]]) -> None:
    for name, rows in (("predictions", predictions), ("references", references)):
        twice = _duplicate([row["id"] for row in rows])
        if twice is not None:
            raise ValueError(f"The question id {twice!r} occurs twice in the {name}: give one row per question.")
    given = [row.get(_PROBABILITY) is not None for row in predictions]
    if any(given) and not all(given):
        raise ValueError(
            f"{given.count(False)} of {len(given)} predictions have no {_PROBABILITY!r}: give it for every "
            "prediction (to get the best_* thresholds) or for none."
        )


def _checked_batch(
    predictions: Any, references: Any, version: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    prediction_rows = _rows(predictions, "predictions")
    reference_rows = _rows(references, "references")
    if len(prediction_rows) != len(reference_rows):
        raise ValueError(
            f"Mismatch in the number of predictions ({len(prediction_rows)}) and references ({len(reference_rows)}): "
            "pass one prediction per question (prediction_text '' for a question left unanswered)."
        )
    prediction_rows = [
        _checked_prediction(row, f"predictions[{index}]", version) for index, row in enumerate(prediction_rows)
    ]
    reference_rows = [
        _checked_reference(row, f"references[{index}]", version) for index, row in enumerate(reference_rows)
    ]
    _check_ids_and_probabilities(prediction_rows, reference_rows)
    return prediction_rows, reference_rows


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Squad(evaluate.Metric):
    """SQuAD exact match and F1: configuration "v1.1" (default) or "v2.0" (with HasAns / NoAns and best thresholds)."""

    @property
    def squad_version(self) -> str:
        """``"v1.1"`` or ``"v2.0"``, from the configuration name the metric was loaded with."""
        if self.config_name not in _CONFIGURATIONS:
            raise ValueError(
                f"Unknown configuration {self.config_name!r} for the SQuAD metric: use "
                'evaluate.load(metric_path("squad")) for SQuAD 1.1 or evaluate.load(metric_path("squad"), "v2.0") '
                "for SQuAD 2.0."
            )
        return _CONFIGURATIONS[self.config_name]

    def _info(self) -> evaluate.MetricInfo:
        predictions = {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")}
        if self.squad_version == "v2.0":
            # float64, not the Hub's float32: a best threshold is one of these values, returned unrounded.
            predictions[_PROBABILITY] = datasets.Value("float64")
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": predictions,
                    "references": {
                        "id": datasets.Value("string"),
                        "answers": {"text": datasets.Sequence(datasets.Value("string"))},
                    },
                }
            ),
            homepage="https://rajpurkar.github.io/SQuAD-explorer/",
            reference_urls=[
                "https://aclanthology.org/D16-1264",
                "https://aclanthology.org/P18-2124",
                "https://rajpurkar.github.io/SQuAD-explorer/",
            ],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Adds questions; see the class docstring for their format. Invalid rows raise ValueError here."""
        predictions, references = _checked_batch(predictions, references, self.squad_version)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Adds one question; see the class docstring for its format. An invalid row raises ValueError here."""
        predictions, references = _checked_batch(
            None if prediction is None else [prediction], None if reference is None else [reference], self.squad_version
        )
        super().add(prediction=predictions[0], reference=references[0], **kwargs)

    def _compute(
        self,
        predictions: list[dict[str, Any]],
        references: list[dict[str, Any]],
        no_answer_threshold: float | None = None,
    ) -> dict[str, float]:
        if len(references) == 0:
            raise ValueError("No SQuAD questions to score: pass at least one prediction and reference.")
        _check_ids_and_probabilities(predictions, references)  # across batches too
        if no_answer_threshold is not None:
            if self.squad_version == "v1.1":
                raise ValueError(
                    "no_answer_threshold is a SQuAD 2.0 argument: load the metric with "
                    'evaluate.load(metric_path("squad"), "v2.0").'
                )
            no_answer_threshold = _probability(no_answer_threshold, "no_answer_threshold")
        texts = {row["id"]: row["prediction_text"] for row in predictions}
        gold = {row["id"]: list(row["answers"]["text"]) for row in references}
        null_odds = None
        if self.squad_version == "v2.0" and predictions and predictions[0].get(_PROBABILITY) is not None:
            null_odds = {row["id"]: row[_PROBABILITY] for row in predictions}
        if no_answer_threshold is not None and null_odds is None:
            raise ValueError(f"no_answer_threshold needs a {_PROBABILITY!r} in every prediction.")
        return score_squad(
            texts, gold, null_odds, version=self.squad_version, no_answer_threshold=no_answer_threshold
        )
