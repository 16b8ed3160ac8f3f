"""Stream order: reorder entity-LM windows so that a sequential sampler feeds every document's windows in order.

GPT2E carries a document's entity states from one window to the next, so a batch must never hold two windows of one
document and every document's windows must come in order, one per batch. `order_windows_for_streams` arranges the
rows of `entity_lm_windows` that way for one process (the classic language-model "batchify", with a Gale-Ryser /
Ryser arrangement of the windows left when the streams end unevenly); the private helpers below are its steps.

Example:
    >>> rows = datasets.Dataset.from_dict({"document_id": [0, 0, 1], "window_index": [0, 1, 0]})
    >>> list(order_windows_for_streams(rows, batch_size=2)["document_id"])
    [0, 1, 0]
"""

from __future__ import annotations

import math

import datasets

from ._checks import is_int

__all__ = ["order_windows_for_streams"]


def order_windows_for_streams(dataset: datasets.Dataset, batch_size: int) -> datasets.Dataset:
    """Reorder windows so that a SEQUENTIAL sampler feeds every document's windows in order, one per batch.

    Like the classic language-model "batchify": documents are assigned, in ``document_id`` order, greedily to the
    stream with the fewest windows so far (ties: the lowest stream); stream i is the concatenation of its documents'
    windows. Batch t holds, in slot i, the t-th window of stream i. With ``batch_size=1`` this is every document's
    windows consecutively and in order (the paper trains with batch size 1).

    Streams rarely end together, and the rows are not padded with fake windows: every batch but the last has exactly
    ``batch_size`` rows (what a sequential sampler cuts). So the slot layout holds for the first h batches, h the
    length of the shortest stream; the windows the longer streams have left (the tail) fill the remaining batches,
    each batch taking the next window of the documents with the most windows left (ties: stream, then position in
    the stream), ordered by stream within the batch. That keeps, for every document, its windows in increasing
    ``window_index`` order in strictly increasing batches (never two windows of a document in one batch), and it
    succeeds whenever any such arrangement of the tail exists (the Gale-Ryser condition, checked first; Ryser's
    construction). If none exists (one document holds most of the tail's windows), h is lowered until one does; if
    even h = 0 (the whole dataset as tail) has none, a `ValueError` says so. In the tail a document may change slot,
    so a model should key its entity states by ``document_id`` (as GPT2E does), not by slot.

    Train with ``TrainingArguments(train_sampling_strategy="sequential", per_device_train_batch_size=batch_size)``
    and one process; every epoch starts every document again at window 0.

    Args:
        dataset: Rows with ``document_id`` and ``window_index`` (e.g. `entity_lm_windows`); each document's windows
            must be 0..L-1, each once.
        batch_size: The batch size the sequential sampler will use.

    Returns:
        The same rows (all of them, all columns, ``info`` kept) in the new order (`datasets.Dataset.select`).

    Raises:
        TypeError: If ``dataset`` is not a `datasets.Dataset` or ``batch_size`` not an int.
        ValueError: If a column is missing, a document's windows are not 0..L-1, ``batch_size < 1``, or the windows
            cannot be arranged (a document has more windows than there are batches).

    Example:
        >>> rows = datasets.Dataset.from_dict({"document_id": [0, 0, 0, 1, 1, 2], "window_index": [0, 1, 2, 0, 1, 0]})
        >>> ordered = order_windows_for_streams(rows, batch_size=2)
        >>> list(zip(ordered["document_id"], ordered["window_index"]))
        [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (2, 0)]
    """
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"order_windows_for_streams expects a datasets.Dataset, got {type(dataset).__name__}.")
    if not is_int(batch_size):
        raise TypeError(f"batch_size must be an int, got {batch_size!r}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    missing = [name for name in ("document_id", "window_index") if name not in dataset.column_names]
    if missing:
        raise ValueError(f"The dataset has no {missing} column(s); build it with entity_lm_windows.")
    if len(dataset) == 0:
        return dataset
    row_of = _rows_by_window(dataset["document_id"], dataset["window_index"])
    lengths = {document: len(rows) for document, rows in row_of.items()}
    batches = _stream_batches(lengths, int(batch_size))
    _check_batches(batches, lengths, int(batch_size))
    return dataset.select([row_of[document][window] for batch in batches for document, window in batch])


def _rows_by_window(document_ids: list[int], window_indices: list[int]) -> dict[int, list[int]]:
    """document_id -> row of each window, in window order (documents in increasing document_id)."""
    found: dict[int, dict[int, int]] = {}
    for row, (document, window) in enumerate(zip(document_ids, window_indices)):
        windows = found.setdefault(int(document), {})
        if int(window) in windows:
            raise ValueError(
                f"Document {document} has window {window} twice (rows {windows[int(window)]} and {row}); every window "
                "must occur once."
            )
        windows[int(window)] = row
    for document, windows in found.items():
        if sorted(windows) != list(range(len(windows))):
            gaps = sorted(set(range(max(windows) + 1)) - set(windows))
            raise ValueError(
                f"Document {document} has windows {sorted(windows)[:10]}..., missing {gaps[:10]}: window_index must "
                "run 0..L-1. Do not filter windows out of a document before ordering."
            )
    return {document: [found[document][w] for w in range(len(found[document]))] for document in sorted(found)}


def _stream_batches(lengths: dict[int, int], batch_size: int) -> list[list[tuple[int, int]]]:
    """Batches of (document, window): the stream layout for the first h batches, then the tail (see the caller)."""
    streams = _assign_streams(lengths, batch_size)
    stream_lengths = [sum(lengths[document] for document in stream) for stream in streams]
    for body in range(min(stream_lengths), -1, -1):
        remaining, order = _tail_after_body(streams, lengths, body)
        if _tail_is_arrangeable(list(remaining.values()), batch_size):
            slots = [_stream_windows(stream, lengths) for stream in streams]
            head = [[slot[t] for slot in slots] for t in range(body)]
            return head + _tail_batches(remaining, order, lengths, batch_size)
    longest = max(lengths, key=lengths.get)
    num_batches = math.ceil(sum(lengths.values()) / batch_size)
    raise ValueError(
        f"The {sum(lengths.values())} windows make {num_batches} batches of {batch_size}, too few to put the windows "
        f"of every document in different batches (document {longest} alone has {lengths[longest]} windows). Use a "
        "smaller batch_size, a longer window_length, or more documents."
    )


def _assign_streams(lengths: dict[int, int], batch_size: int) -> list[list[int]]:
    streams: list[list[int]] = [[] for _ in range(batch_size)]
    totals = [0] * batch_size
    for document, length in lengths.items():
        stream = min(range(batch_size), key=lambda index: (totals[index], index))
        streams[stream].append(document)
        totals[stream] += length
    return streams


def _stream_windows(stream: list[int], lengths: dict[int, int]) -> list[tuple[int, int]]:
    return [(document, window) for document in stream for window in range(lengths[document])]


def _tail_after_body(
    streams: list[list[int]], lengths: dict[int, int], body: int
) -> tuple[dict[int, int], dict[int, tuple[int, int]]]:
    """Windows left per document after the first ``body`` batches, and each document's (stream, position)."""
    remaining: dict[int, int] = {}
    order: dict[int, tuple[int, int]] = {}
    for stream_index, stream in enumerate(streams):
        consumed = body
        for position, document in enumerate(stream):
            used = min(consumed, lengths[document])
            consumed -= used
            if lengths[document] - used:
                remaining[document] = lengths[document] - used
                order[document] = (stream_index, position)
    return remaining, order


def _tail_is_arrangeable(remaining: list[int], batch_size: int) -> bool:
    """Gale-Ryser: can documents with these window counts fill batches of ``batch_size`` (the last one short), each
    document at most once per batch?"""
    total = sum(remaining)
    if total == 0:
        return True
    full_batches, last = divmod(total, batch_size)
    if last == 0:
        full_batches, last = full_batches - 1, batch_size
    prefix = 0
    for k, count in enumerate(sorted(remaining, reverse=True), start=1):
        prefix += count
        if prefix > full_batches * min(batch_size, k) + min(last, k):
            return False
    return True


def _tail_batches(
    remaining: dict[int, int], order: dict[int, tuple[int, int]], lengths: dict[int, int], batch_size: int
) -> list[list[tuple[int, int]]]:
    """Fill batches with the next window of the documents with most windows left (Ryser's construction)."""
    remaining = dict(remaining)
    batches = []
    while remaining:
        size = min(batch_size, sum(remaining.values()))
        chosen = sorted(remaining, key=lambda document: (-remaining[document], order[document]))[:size]
        batch = []
        for document in sorted(chosen, key=order.get):
            batch.append((document, lengths[document] - remaining[document]))
            remaining[document] -= 1
            if not remaining[document]:
                del remaining[document]
        batches.append(batch)
    return batches


def _check_batches(batches: list[list[tuple[int, int]]], lengths: dict[int, int], batch_size: int) -> None:
    """The promises of `order_windows_for_streams`; a failure here is a bug in this module."""
    next_window = dict.fromkeys(lengths, 0)
    for number, batch in enumerate(batches):
        documents = [document for document, _ in batch]
        if len(set(documents)) != len(documents) or (len(batch) != batch_size and number != len(batches) - 1):
            raise RuntimeError(f"order_windows_for_streams built a wrong batch {number}: {batch}.")
        for document, window in batch:
            if window != next_window[document]:
                raise RuntimeError(
                    f"order_windows_for_streams put window {window} of document {document} out of order."
                )
            next_window[document] += 1
    if next_window != lengths:
        raise RuntimeError("order_windows_for_streams lost windows.")
