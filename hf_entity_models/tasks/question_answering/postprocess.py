"""From start/end logits of windowed question-answering features to answers with character offsets.

The standard extractive recipe (SQuAD 1.1 / 2.0): a context longer than the model's window is read in overlapping
windows ("features"); every window scores each of its context tokens as the start and as the end of the answer; a
span's score is ``start_logit + end_logit``; the best spans of all windows of a question compete together; the
no-answer ("null") score is the ``[CLS]`` position's ``start_logit + end_logit``, minimised over the windows.

`postprocess_predictions` turns a whole evaluation set (features from ``prepare_validation_features``, logits from
``Trainer.predict``) into the predictions, no-answer odds and n-best lists that the SQuAD metrics read; the span search
over the windows of one question is `answer_spans.rank_answer_spans`, which the pipeline uses too.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from .answer_spans import Offset, rank_answer_spans




class SquadPredictions(NamedTuple):
    """Output of `postprocess_predictions` (a tuple: ``predictions, null_odds, nbest = postprocess_predictions(...)``).

    Attributes:
        predictions: Example id -> answer text (``""`` for no answer).
        null_odds: Example id -> ``null_score - best_span_score`` (logits). Higher means "more likely no answer";
            SQuAD 2.0 answers ``""`` when it exceeds ``null_score_diff_threshold``, so the threshold can be tuned on
            validation from these values. ``inf`` when the example has no valid span.
        nbest: Example id -> the n-best candidates, best first: dicts with ``text``, character ``start`` / ``end``
            into the original context, ``score`` (``start_logit + end_logit``), ``start_logit``, ``end_logit``
            and ``probability`` (softmax of the scores over this list). For SQuAD 2.0 the null answer (``text ""``,
            ``start = end = 0``, its score the null score) is one of them, placed by its score.
    """

    predictions: dict[str, str]
    null_odds: dict[str, float]
    nbest: dict[str, list[dict[str, Any]]]


def postprocess_predictions(
    examples: Iterable[Mapping[str, Any]],
    features: Iterable[Mapping[str, Any]],
    start_logits: Any,
    end_logits: Any,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
    cls_token_id: int | None = None,
) -> SquadPredictions:
    """Answers for a SQuAD evaluation set from the start/end logits of its windowed features.

    For every example, over all its features: the ``n_best_size`` best valid spans (context tokens only, end not
    before start, at most ``max_answer_length`` tokens; score ``start_logit + end_logit``; exact search, see
    `answer_spans.top_spans`), and the null score: the null (``[CLS]``) position's ``start_logit + end_logit``, minimised over
    the example's features. The answer text is ``context[start:end]`` with the character offsets of the features
    into the ORIGINAL context. SQuAD 2.0 (``version_2=True``) answers ``""`` when
    ``null_score - best_span_score > null_score_diff_threshold``; SQuAD 1.1 always answers the best span. An
    example without any valid span answers ``""``.

    Args:
        examples: The examples (a `datasets.Dataset` or a list of dicts) with ``id`` and ``context``.
        features: Their features, as ``prepare_validation_features`` builds them: ``example_id`` and
            ``offset_mapping`` (a ``(start, end)`` pair for context tokens, ``None`` for every other token), and
            ``input_ids`` when ``cls_token_id`` is given. Any order; several features per example.
        start_logits: Start logits of the features, in the order of ``features``: a ``(features, length)`` array or
            tensor (e.g. ``Trainer.predict(...).predictions[0]``; rows may be padded, e.g. with -100, beyond the
            feature's tokens), or a list of 1-D rows, or a list of ``(batch, length)`` batches.
        end_logits: The same for the end logits.
        n_best_size: Number of candidates kept per example (and in ``nbest``).
        max_answer_length: Longest answer in tokens.
        version_2: SQuAD 2.0: allow the no-answer prediction ``""``.
        null_score_diff_threshold: SQuAD 2.0 threshold on ``null_score - best_span_score`` (tune it on validation
            from ``null_odds``).
        cls_token_id: Id of the null token; when given, each feature's null position is where it occurs in its
            ``input_ids``; default: position 0 (BERT-like models put ``[CLS]`` first).

    Returns:
        `SquadPredictions` ``(predictions, null_odds, nbest)``, each a dict keyed by example id.

    Raises:
        ValueError: Logits and features disagree in number or length, a feature names an unknown example, an
            example has no feature, or the offsets do not index the context.

    Example:
        >>> examples = [{"id": "q1", "context": "Paris is in France."}]
        >>> features = [{"example_id": "q1", "offset_mapping": [None, None, (0, 5), (6, 8), (9, 11), (12, 18), None]}]
        >>> start = [[0.0, 0.0, 5.0, 0.0, 0.0, 1.0, 0.0]]
        >>> end = [[0.0, 0.0, 4.0, 0.0, 0.0, 2.0, 0.0]]
        >>> predictions, null_odds, nbest = postprocess_predictions(examples, features, start, end)
        >>> predictions, null_odds
        ({'q1': 'Paris'}, {'q1': -9.0})
    """
    if n_best_size < 1 or max_answer_length < 1:
        raise ValueError(
            f"n_best_size and max_answer_length must be at least 1, got {n_best_size} and {max_answer_length}."
        )
    example_ids = [str(value) for value in _column(examples, "id")]
    contexts = _column(examples, "context")
    feature_example_ids = [str(value) for value in _column(features, "example_id")]
    feature_offsets = _column(features, "offset_mapping")
    feature_input_ids = _column(features, "input_ids") if cls_token_id is not None else None
    start_rows = _rows(start_logits, "start_logits")
    end_rows = _rows(end_logits, "end_logits")
    if not len(start_rows) == len(end_rows) == len(feature_offsets):
        raise ValueError(
            f"Got {len(start_rows)} start and {len(end_rows)} end logit rows for {len(feature_offsets)} features; "
            "pass the logits of exactly these features, in their order (Trainer.predict(...).predictions is the "
            "pair (start_logits, end_logits): unpack it)."
        )

    features_of: dict[str, list[int]] = {example_id: [] for example_id in example_ids}
    if len(features_of) != len(example_ids):
        raise ValueError("The examples' ids are not unique; every example needs its own id.")
    for index, example_id in enumerate(feature_example_ids):
        if example_id not in features_of:
            raise ValueError(
                f"Feature {index} belongs to example {example_id!r}, which is not among the examples; pass the "
                "examples the features were built from."
            )
        features_of[example_id].append(index)

    predictions: dict[str, str] = {}
    null_odds: dict[str, float] = {}
    nbest: dict[str, list[dict[str, Any]]] = {}
    for example_id, context in zip(example_ids, contexts):
        indices = features_of[example_id]
        if not indices:
            raise ValueError(
                f"Example {example_id!r} has no feature; build the features from the same examples (every "
                "example gets at least one)."
            )
        null_indices = None
        if feature_input_ids is not None:
            null_indices = [_position(feature_input_ids[index], cls_token_id) for index in indices]
        found = rank_answer_spans(
            [start_rows[index] for index in indices],
            [end_rows[index] for index in indices],
            [_offsets(feature_offsets[index], index) for index in indices],
            context,
            null_indices=null_indices,
            n_best_size=n_best_size,
            max_answer_length=max_answer_length,
        )
        best = found.spans[0] if found.spans else None
        null_score = found.null_score if found.null_score is not None else -math.inf
        odds = math.inf if best is None else null_score - best.score
        null_odds[example_id] = odds
        answer_is_null = best is None or (version_2 and odds > null_score_diff_threshold)
        predictions[example_id] = "" if answer_is_null else context[best.start : best.end]
        candidates = [
            {
                "text": context[span.start : span.end],
                "start": span.start,
                "end": span.end,
                "score": span.score,
                "start_logit": span.start_logit,
                "end_logit": span.end_logit,
            }
            for span in found.spans
        ]
        if version_2 and found.null_score is not None:
            candidates.append(
                {
                    "text": "",
                    "start": 0,
                    "end": 0,
                    "score": found.null_score,
                    "start_logit": found.null_start_logit,
                    "end_logit": found.null_end_logit,
                }
            )
            candidates.sort(key=lambda candidate: -candidate["score"])
            candidates = candidates[:n_best_size]
        nbest[example_id] = _with_probabilities(candidates)
    return SquadPredictions(predictions, null_odds, nbest)


def _rows(logits: Any, name: str) -> list[Any]:
    """One 1-D row per feature from a 2-D array/tensor, a list of rows or a list of 2-D batches."""
    if hasattr(logits, "ndim") and hasattr(logits, "shape"):  # numpy array or tensor, without importing numpy
        if logits.ndim != 2:
            raise ValueError(f"{name} must be 2-D (features, length), got shape {tuple(logits.shape)}.")
        return list(logits)
    rows: list[Any] = []
    for item in logits:
        if hasattr(item, "ndim") and item.ndim == 2:
            rows.extend(list(item))
        else:
            rows.append(item)
    return rows


def _column(rows: Any, name: str) -> list[Any]:
    """A column of a `datasets.Dataset` (read at once) or of a list of dicts."""
    column_names = getattr(rows, "column_names", None)
    if column_names is not None:
        if name not in column_names:
            raise ValueError(f"The dataset has no column {name!r}; its columns are {column_names}.")
        return list(rows[name])
    values = []
    for index, row in enumerate(rows):
        if name not in row:
            raise ValueError(f"Row {index} has no {name!r}; its keys are {sorted(row)}.")
        values.append(row[name])
    return values


def _offsets(offsets: Sequence[Any], feature: int) -> list[Offset]:
    result: list[Offset] = []
    for offset in offsets:
        if offset is None:
            result.append(None)
        elif len(offset) == 2:
            result.append((int(offset[0]), int(offset[1])))
        else:
            raise ValueError(
                f"Feature {feature} has the offset {offset!r}; every offset is a (start, end) pair or None."
            )
    return result


def _position(input_ids: Sequence[int], token_id: int) -> int | None:
    ids = list(input_ids)
    return ids.index(token_id) if token_id in ids else None


def _with_probabilities(candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not candidates:
        return []
    scores = torch.tensor([candidate["score"] for candidate in candidates], dtype=torch.float64)
    probabilities = torch.softmax(scores, dim=0).tolist()
    return [{**candidate, "probability": probability} for candidate, probability in zip(candidates, probabilities)]
