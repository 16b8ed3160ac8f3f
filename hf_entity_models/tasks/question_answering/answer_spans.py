"""The span search of extractive question answering over the windows of ONE question: the best answer spans with
character offsets and the no-answer score.

A context longer than the model's window is read in overlapping windows ("features"); every window scores each of its
context tokens as the start and as the end of the answer; a span's score is ``start_logit + end_logit``; the best spans
of all windows of a question compete together; the no-answer ("null") score is the ``[CLS]`` position's
``start_logit + end_logit``, minimised over the windows.

This file imports only torch and the standard library: it is saved next to checkpoints together with the
question-answering pipeline, which imports it relatively, so that both run where hf_entity_models is not installed.
`postprocess.postprocess_predictions` applies it to a whole evaluation set.
"""

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

Offset = tuple[int, int] | None

# Upper bound on the number of (window, start, length) scores materialised at once by `top_spans`.
_MAX_SCORES_PER_CHUNK = 1 << 22


class SpanCandidate(NamedTuple):
    """One answer span of one question: character offsets ``[start, end)`` into the context and its logits."""

    start: int
    end: int
    score: float  # start_logit + end_logit
    start_logit: float
    end_logit: float
    window: int  # index (among the question's windows) of the window that scored it best
    start_token: int  # token positions inside that window, end inclusive
    end_token: int

class QuestionSpans(NamedTuple):
    """What `rank_answer_spans` finds for one question.

    Attributes:
        spans: The best answer spans, best first, at most ``n_best_size``, distinct character spans.
        null_score: ``start_logit + end_logit`` of the null position (``[CLS]``), minimised over the windows;
            ``None`` when no window has a null position.
        null_start_logit: The start logit of that null position (``None`` with ``null_score``).
        null_end_logit: Its end logit.
        start_log_normaliser: ``logsumexp`` of the start logits over every candidate position of every window and
            every window's null position: ``exp(score - start_log_normaliser - end_log_normaliser)`` is a span's (or
            the null answer's) probability under the start and end distributions over the whole context.
        end_log_normaliser: The same for the end logits.
    """

    spans: list[SpanCandidate]
    null_score: float | None
    null_start_logit: float | None
    null_end_logit: float | None
    start_log_normaliser: float
    end_log_normaliser: float

    def probability(self, score: float) -> float:
        """Probability of a span (or the null answer) with this ``start_logit + end_logit``."""
        return math.exp(score - self.start_log_normaliser - self.end_log_normaliser)

def top_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    candidate_mask: torch.Tensor,
    max_answer_length: int,
    n_best_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``n_best_size`` best valid spans of every window, found exactly with tensor operations.

    A span ``(i, j)`` of a window is valid when both tokens are candidates (context tokens), ``i <= j`` and
    ``j - i + 1 <= max_answer_length``; its score is ``start_logits[i] + end_logits[j]``. All valid spans are scored
    at once as a band of width ``max_answer_length`` (not only the top-n starts x top-n ends of the usual recipe,
    which can miss the best valid span when the best starts lie after the best ends).

    Args:
        start_logits: ``(windows, length)`` start logits.
        end_logits: ``(windows, length)`` end logits.
        candidate_mask: ``(windows, length)`` booleans, True where a token may start or end an answer.
        max_answer_length: Longest answer in tokens (>= 1).
        n_best_size: How many spans to return per window (>= 1).

    Returns:
        ``(starts, ends, scores)``, each ``(windows, k)`` with ``k = min(n_best_size, length * max_answer_length)``,
        best first; token positions are inclusive; invalid entries (fewer valid spans than ``k``) score ``-inf``.

    Example:
        >>> starts, ends, scores = top_spans(
        ...     torch.tensor([[9.0, 1.0, 5.0, 0.0]]), torch.tensor([[9.0, 0.0, 1.0, 4.0]]),
        ...     torch.tensor([[False, True, True, True]]), max_answer_length=2, n_best_size=1)
        >>> starts.tolist(), ends.tolist(), scores.tolist()
        ([[2]], [[3]], [[9.0]])
    """
    if max_answer_length < 1 or n_best_size < 1:
        raise ValueError(
            f"max_answer_length and n_best_size must be at least 1, got {max_answer_length} and {n_best_size}."
        )
    if start_logits.shape != end_logits.shape or start_logits.shape != candidate_mask.shape or start_logits.dim() != 2:
        raise ValueError(
            "start_logits, end_logits and candidate_mask must all have the shape (windows, length); got "
            f"{tuple(start_logits.shape)}, {tuple(end_logits.shape)} and {tuple(candidate_mask.shape)}."
        )
    windows, length = start_logits.shape
    width = min(max_answer_length, length)
    k = min(n_best_size, length * width)
    if windows == 0 or length == 0:
        empty = torch.empty(windows, 0, dtype=torch.long)
        return empty, empty.clone(), torch.empty(windows, 0)
    mask = candidate_mask.to(torch.bool)
    start = start_logits.float().masked_fill(~mask, -math.inf)
    end = end_logits.float().masked_fill(~mask, -math.inf)
    if torch.isnan(start).any() or torch.isnan(end).any():
        raise ValueError("The start/end logits of the context tokens contain NaN; the model's output is broken.")

    chunk = max(1, _MAX_SCORES_PER_CHUNK // (length * width))
    starts, ends, scores = [], [], []
    for first in range(0, windows, chunk):
        window_start, window_end = start[first : first + chunk], end[first : first + chunk]
        # band[w, i, d] = end[w, i + d]: every end at most `width - 1` tokens after the start i.
        band = torch.nn.functional.pad(window_end, (0, width - 1), value=-math.inf).unfold(1, width, 1)
        span_scores = (window_start.unsqueeze(-1) + band).reshape(len(window_start), -1)
        # A stable sort, not topk: among equal scores (an untrained head scores every span alike) the earliest
        # start and then the shortest span come first, whatever k is, so top_k=1 is the first of top_k=3.
        flat = torch.argsort(span_scores, dim=1, descending=True, stable=True)[:, :k]
        best = span_scores.gather(1, flat)
        span_start = torch.div(flat, width, rounding_mode="floor")
        starts.append(span_start)
        ends.append(span_start + flat % width)
        scores.append(best)
    return torch.cat(starts), torch.cat(ends), torch.cat(scores)

def rank_answer_spans(
    start_logits: Sequence[Any],
    end_logits: Sequence[Any],
    offsets: Sequence[Sequence[Offset]],
    context: str,
    null_indices: Sequence[int | None] | None = None,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> QuestionSpans:
    """The best answer spans of one question over all its windows, with character offsets into ``context``.

    Args:
        start_logits: One 1-D sequence (tensor, numpy array or list) of start logits per window; it may be longer
            than the window's ``offsets`` (padding), never shorter.
        end_logits: The same for the end logits.
        offsets: Per window, per token, the ``(start, end)`` character span of a context token in ``context``, or
            ``None`` for every other token (question, special tokens, padding). Tokens with an empty span never
            start or end an answer. A span runs from its first token's start to its last token's end, so giving
            every token the span of its whole word aligns the answers to words.
        context: The text the offsets index (the original context, not a stripped or normalised copy).
        null_indices: Per window, the position of the null token (``[CLS]``), or ``None`` when it has none;
            default: position 0 of every window.
        n_best_size: How many distinct spans to return.
        max_answer_length: Longest answer in tokens.

    Returns:
        `QuestionSpans`: the spans (best first; a span found in several overlapping windows appears once, with its
        best score), the null score and the log-normalisers of the start/end distributions.

    Raises:
        ValueError: The numbers of windows disagree, logits are shorter than their offsets, or a chosen offset does
            not lie inside ``context``.

    Example:
        >>> context = "The cat sat"
        >>> result = rank_answer_spans(
        ...     [[0.0, 1.0, 6.0, 0.0]], [[0.0, 0.0, 1.0, 5.0]], [[None, (0, 3), (4, 7), (8, 11)]], context, n_best_size=2)
        >>> [(context[span.start : span.end], span.score) for span in result.spans]
        [('cat sat', 11.0), ('cat', 7.0)]
        >>> round(result.probability(result.null_score), 4)  # the null answer ([CLS] at position 0)
        0.0
    """
    windows = len(offsets)
    if len(start_logits) != windows or len(end_logits) != windows:
        raise ValueError(
            f"Got {len(start_logits)} start and {len(end_logits)} end logit rows for {windows} windows of offsets; "
            "pass one row per window."
        )
    if windows == 0:
        raise ValueError("The question has no windows (features); build at least one feature per question.")
    if null_indices is None:
        null_indices = [0] * windows
    length = max(len(window) for window in offsets)
    start = torch.full((windows, length), -math.inf)
    end = torch.full((windows, length), -math.inf)
    mask = torch.zeros(windows, length, dtype=torch.bool)
    for row, (window_offsets, window_start, window_end) in enumerate(zip(offsets, start_logits, end_logits)):
        size = len(window_offsets)
        window_start, window_end = _as_vector(window_start), _as_vector(window_end)
        if len(window_start) < size or len(window_end) < size:
            raise ValueError(
                f"Window {row} has {size} tokens in its offsets but only {len(window_start)} start and "
                f"{len(window_end)} end logits; the logits must cover every token."
            )
        start[row, :size] = window_start[:size]
        end[row, :size] = window_end[:size]
        mask[row, :size] = torch.tensor([_is_span(offset) for offset in window_offsets], dtype=torch.bool)

    null_rows = [row for row, index in enumerate(null_indices) if index is not None]
    null_columns = [null_indices[row] for row in null_rows]
    null_score = null_start_logit = null_end_logit = None
    if null_rows:
        null_starts, null_ends = start[null_rows, null_columns], end[null_rows, null_columns]
        lowest = int(torch.argmin(null_starts + null_ends))
        null_start_logit, null_end_logit = float(null_starts[lowest]), float(null_ends[lowest])
        null_score = float(null_starts[lowest] + null_ends[lowest])
    normaliser_mask = mask.clone()
    normaliser_mask[null_rows, null_columns] = True
    start_log_normaliser = float(torch.logsumexp(start[normaliser_mask], dim=0)) if normaliser_mask.any() else 0.0
    end_log_normaliser = float(torch.logsumexp(end[normaliser_mask], dim=0)) if normaliser_mask.any() else 0.0

    # More candidates per window than answers: several token spans can give one character span (a span found again
    # in an overlapping window, or offsets widened to whole words), and each character span counts once.
    starts, ends, scores = top_spans(start, end, mask, max_answer_length, 4 * n_best_size + 16)
    flat_scores = scores.reshape(-1)
    order = torch.argsort(flat_scores, descending=True, stable=True).tolist()
    flat_scores = flat_scores.tolist()
    per_window = scores.shape[1]
    flat_starts, flat_ends = starts.reshape(-1).tolist(), ends.reshape(-1).tolist()
    spans: list[SpanCandidate] = []
    seen: set[tuple[int, int]] = set()
    for index in order:
        score = flat_scores[index]
        if score == -math.inf or len(spans) == n_best_size:
            break
        row = index // per_window
        start_token, end_token = flat_starts[index], flat_ends[index]
        char_start, char_end = offsets[row][start_token][0], offsets[row][end_token][1]
        if not 0 <= char_start < char_end <= len(context):
            raise ValueError(
                f"The offsets ({char_start}, {char_end}) of the span of tokens {start_token}..{end_token} in window "
                f"{row} do not lie inside the context of {len(context)} characters; the offsets must index the "
                "original context string (build the features from the same, unstripped context)."
            )
        if (char_start, char_end) in seen:  # the same text span, found again in an overlapping window
            continue
        seen.add((char_start, char_end))
        spans.append(
            SpanCandidate(
                start=int(char_start),
                end=int(char_end),
                score=score,
                start_logit=float(start[row, start_token]),
                end_logit=float(end[row, end_token]),
                window=row,
                start_token=start_token,
                end_token=end_token,
            )
        )
    return QuestionSpans(
        spans, null_score, null_start_logit, null_end_logit, start_log_normaliser, end_log_normaliser
    )

# ----------------------------------------------------------------------------------------------------- helpers
def _is_span(offset: Any) -> bool:
    return offset is not None and offset[1] > offset[0]

def _as_vector(values: Any) -> torch.Tensor:
    vector = torch.as_tensor(values).float() if not isinstance(values, torch.Tensor) else values.detach().float().cpu()
    if vector.dim() != 1:
        raise ValueError(f"Each window's logits must be a 1-D row, got shape {tuple(vector.shape)}.")
    return vector
