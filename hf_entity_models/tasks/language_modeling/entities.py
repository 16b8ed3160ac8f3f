"""Entity-annotated language-modelling data for GPT2E (Entity-Transformers, section 4.2 and Table 1).

GPT2E reads, next to every BPE token, the id of the entity the token is part of (Ø = 0 for tokens outside every
mention). This module turns coreference annotations into those ids and the ids into training data:

* `read_conll_coreference` (from `hf_entity_models.tasks.coreference.conll`, re-exported here) reads CoNLL-2012 files
  (LitBank, OntoNotes) into `CorefDocument` objects: words and mentions ``(first word, last word, cluster id)``.
* `entity_ids_for_document` gives a document's GPT-2 ``input_ids`` and ``entity_ids``: clusters renumbered 1..K
  per document in order of first mention, 0 outside mentions, the innermost mention winning where mentions nest.
* `entity_lm_windows` cuts every document into consecutive windows (a `datasets.Dataset` with ``document_id`` and
  ``window_index``), `order_windows_for_streams` orders them so that a sequential sampler feeds every document's
  windows in order (the model carries a document's entity states from one window to the next), and
  `EntityLanguageModelingCollator` pads a batch.
* `load_litbank_entity_lm` does all of it for LitBank, split by book.
* `read_lambada` / `lambada_examples` give the LAMBADA evaluation (all entity ids Ø, as in the paper).
* `entity_ids_from_clusters` / `entity_ids_from_text` give entity ids from a coreference resolver's clusters (our
  ``pipeline("coreference")``) instead of gold annotation, the paper's future work.

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("../shared/data/tokenizers/gpt2")  # doctest: +SKIP
    >>> splits = load_litbank_entity_lm("../shared/data/litbank/conll", tokenizer, window_length=512)  # doctest: +SKIP
    >>> train = order_windows_for_streams(splits["train"], batch_size=8)  # doctest: +SKIP
    >>> collator = EntityLanguageModelingCollator(pad_token_id=tokenizer.eos_token_id)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import numbers
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from tqdm.auto import tqdm
from transformers.utils import logging

from ..coreference.conll import CorefDocument, coref_documents_from_dataset, read_conll_coreference
from ..text_files import named_decode_errors
from .collator import LanguageModelingCollator

logger = logging.get_logger(__name__)

__all__ = [
    "CorefDocument",
    "EntityLanguageModelingCollator",
    "document_windows",
    "entity_ids_for_document",
    "entity_ids_from_clusters",
    "entity_ids_from_text",
    "entity_lm_document_names",
    "entity_lm_windows",
    "lambada_examples",
    "load_litbank_entity_lm",
    "order_windows_for_streams",
    "coref_documents_from_dataset",
    "read_conll_coreference",
    "read_lambada",
]

# A mention in characters of a text: (start, end exclusive, cluster key).
_CharMention = tuple[int, int, Any]


# ------------------------------------------------------------------------------------------------ entity ids
def entity_ids_for_document(document: CorefDocument, tokenizer: Any) -> dict[str, Any]:
    """GPT-2 BPE of a document with the entity id of every token (Table 1 of the paper).

    The text is the words joined by single spaces (no detokenisation, as `read_litbank_documents` does), tokenized
    without special tokens and without truncation. A BPE token belongs to the word its non-space characters are in
    (GPT-2's tokens carry the space before a word; found with the fast tokenizer's offset mapping); a token of
    spaces only (GPT-2 splits ``" urchin"`` into ``"Ġ"``, ``"urch"``, ``"in"``) belongs to the word after it.

    Entity ids are per document: cluster ids are renumbered 1..K in order of first mention (mentions ordered by first
    word, the longer (outer) one first when two start on the same word); tokens outside every mention get 0 (Ø).
    Every BPE piece of a mention's words carries the mention's entity. Where mentions nest, a token takes the entity
    of the INNERMOST (shortest) mention covering its word, e.g. LitBank's ``[a man who ... for [his] own amusement
    ...]``: ``his`` carries the entity of ``his`` (Sir Walter), the other words the entity of ``a man who ...``. Of
    two mentions of different clusters with the same words, the lower entity id wins. K counts every cluster of the
    document, also one whose words are all covered by shorter mentions (none in LitBank).

    Args:
        document: The document (`read_conll_coreference`). Its words must be non-empty and contain no whitespace
            (joining by spaces must be undone by splitting on spaces).
        tokenizer: A fast tokenizer (offset mapping), e.g. ``AutoTokenizer.from_pretrained(".../gpt2")``.

    Returns:
        A dict with ``input_ids`` and ``entity_ids`` (lists of ints, one per token), ``word_ids`` (the word of every
        token), ``offsets`` (``(start, end)`` character offsets of every token into ``text``, GPT-2 counting the
        leading space), ``text`` and ``num_entities`` (K).

    Raises:
        TypeError: If the tokenizer is not a fast one or ``document`` is not a `CorefDocument`.
        ValueError: If a word is empty or contains whitespace, or the tokenizer gives a word no token.

    Example:
        >>> words = ["Sir", "Walter", "saw", "his", "sister"]
        >>> document = CorefDocument("d", 0, words, [(0, 1, 9), (3, 4, 4), (3, 3, 9)])
        >>> encoded = entity_ids_for_document(document, gpt2_tokenizer)  # doctest: +SKIP
        >>> tokens = gpt2_tokenizer.convert_ids_to_tokens(encoded["input_ids"])  # doctest: +SKIP
        >>> list(zip(tokens, encoded["entity_ids"]))  # doctest: +SKIP
        [('Sir', 1), ('ĠWalter', 1), ('Ġsaw', 0), ('Ġhis', 1), ('Ġsister', 2)]
    """
    if not isinstance(document, CorefDocument):
        raise TypeError(f"entity_ids_for_document expects a CorefDocument, got {type(document).__name__}.")
    text, word_spans = _joined_words(document)
    char_mentions = [(word_spans[start][0], word_spans[end][1], cluster) for start, end, cluster in document.mentions]
    encoded = _encode_with_entities(text, char_mentions, tokenizer)
    encoded["word_ids"] = _token_words(document, text, word_spans, encoded["offsets"])
    return encoded


def _joined_words(document: CorefDocument) -> tuple[str, list[tuple[int, int]]]:
    spans, position = [], 0
    for index, word in enumerate(document.words):
        if not word or any(character.isspace() for character in word):
            raise ValueError(
                f"{document.label}: word {index} is {word!r}; words must be non-empty and contain no whitespace "
                "(the text joins them with single spaces). Fix the word column of the file."
            )
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return " ".join(document.words), spans


def _token_words(
    document: CorefDocument, text: str, word_spans: list[tuple[int, int]], offsets: list[tuple[int, int]]
) -> list[int]:
    word_of_character = [-1] * len(text)
    for index, (start, end) in enumerate(word_spans):
        word_of_character[start:end] = [index] * (end - start)
    word_ids = []
    for token, (start, end) in enumerate(offsets):
        words = {word_of_character[position] for position in _token_characters(text, start, end)}
        if len(words) != 1:
            raise ValueError(
                f"{document.label}: BPE token {token} (characters {start}..{end}, {text[start:end]!r}) spans words "
                f"{sorted(words)}; a token must lie inside one word (or be the spaces before one). Use a tokenizer "
                "that splits at spaces (GPT-2)."
            )
        word_ids.append(words.pop())
    missing = sorted(set(range(len(document.words))) - set(word_ids))
    if missing:
        raise ValueError(
            f"{document.label}: the tokenizer gives word {missing[0]} ({document.words[missing[0]]!r}) no token, so "
            "its entity would be lost; use a byte-level tokenizer (GPT-2) or fix the word."
        )
    return word_ids


def _encode_with_entities(text: str, mentions: list[_CharMention], tokenizer: Any) -> dict[str, Any]:
    """Tokenize ``text`` and give every token the entity of the innermost mention its non-space characters touch."""
    _check_fast_tokenizer(tokenizer)
    numbering = _number_entities(mentions)
    encoding = tokenizer(
        text,
        add_special_tokens=False,
        return_offsets_mapping=True,
        return_attention_mask=False,
        return_token_type_ids=False,
        truncation=False,
        verbose=False,
    )
    offsets = [(int(start), int(end)) for start, end in encoding["offset_mapping"]]
    # Paint characters from the longest mention to the shortest: a character keeps the innermost mention over it.
    ranked = sorted(mentions, key=lambda mention: (-(mention[1] - mention[0]), -numbering[mention[2]]))
    rank_of_character = [-1] * len(text)
    for rank, (start, end, _) in enumerate(ranked):
        rank_of_character[start:end] = [rank] * (end - start)
    entity_ids = []
    for start, end in offsets:
        rank = max((rank_of_character[p] for p in _token_characters(text, start, end)), default=-1)
        entity_ids.append(numbering[ranked[rank][2]] if rank >= 0 else 0)
    return {
        "input_ids": list(encoding["input_ids"]),
        "entity_ids": entity_ids,
        "offsets": offsets,
        "text": text,
        "num_entities": len(numbering),
    }


def _token_characters(text: str, start: int, end: int) -> list[int]:
    """The characters that decide a token's word and entity: its non-space characters; for a token of spaces only
    (GPT-2 splits " urchin" into "Ġ", "urch", "in"), the first character of the word it precedes."""
    characters = [position for position in range(start, end) if not text[position].isspace()]
    if characters:
        return characters
    position = end
    while position < len(text) and text[position].isspace():
        position += 1
    return [position] if position < len(text) else []


def _number_entities(mentions: Iterable[_CharMention]) -> dict[Any, int]:
    """Cluster key -> 1..K in order of first mention (by start, the longer mention first on a tie)."""
    numbering: dict[Any, int] = {}
    for _, _, cluster in sorted(mentions, key=lambda mention: (mention[0], -mention[1])):
        numbering.setdefault(cluster, len(numbering) + 1)
    return numbering


def _check_fast_tokenizer(tokenizer: Any) -> None:
    if not callable(tokenizer) or not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"A fast tokenizer is needed (its offset mapping ties tokens to characters), got "
            f"{type(tokenizer).__name__}; load it with AutoTokenizer.from_pretrained(path) (use_fast is the default)."
        )


# ------------------------------------------------------------------------------------------------ windows
def document_windows(
    input_ids: Sequence[int], entity_ids: Sequence[int], window_length: int
) -> list[dict[str, list[int]]]:
    """Cut one document's tokens into consecutive, non-overlapping windows; the last one may be shorter.

    Args:
        input_ids: The document's token ids.
        entity_ids: Its entity ids, one per token.
        window_length: Tokens per window, at least 2.

    Returns:
        ``[{"input_ids": [...], "entity_ids": [...]}, ...]``; their concatenation is the document (no token dropped).

    Raises:
        ValueError: If the two lists differ in length, the document is empty or ``window_length < 2``.

    Example:
        >>> [window["input_ids"] for window in document_windows([1, 2, 3, 4, 5], [0, 1, 1, 0, 2], 2)]
        [[1, 2], [3, 4], [5]]
    """
    window_length = _checked_window_length(window_length)
    if len(input_ids) != len(entity_ids):
        raise ValueError(
            f"input_ids has {len(input_ids)} tokens but entity_ids {len(entity_ids)}; give one entity id per token."
        )
    if not input_ids:
        raise ValueError("The document has no token; remove empty documents.")
    return [
        {
            "input_ids": list(input_ids[start : start + window_length]),
            "entity_ids": list(entity_ids[start : start + window_length]),
        }
        for start in range(0, len(input_ids), window_length)
    ]


def entity_lm_windows(
    documents: Sequence[CorefDocument], tokenizer: Any, window_length: int, max_entities: int | None = None
) -> datasets.Dataset:
    """Entity-annotated causal-LM windows of documents: `entity_ids_for_document`, then `document_windows`.

    Rows come in document order, then window order. Entity ids stay the document's (1..K over the whole document,
    not per window), so a model that carries entity states from window to window (GPT2E with ``document_ids``)
    meets the same entity under the same id. Order the rows with `order_windows_for_streams` before training with
    a sequential sampler.

    Args:
        documents: The documents (`read_conll_coreference`).
        tokenizer: A fast tokenizer (GPT-2's).
        window_length: Tokens per window (the last window of a document may be shorter), at least 2; at most the
            model's ``n_positions``.
        max_entities: The model's entity capacity (``config.max_entities``); a document with more entities raises.

    Returns:
        A `datasets.Dataset` with ``input_ids``, ``entity_ids`` (lists of ints), ``document_id`` (the document's
        index in ``documents``), ``window_index`` (0, 1, ... within the document) and ``num_entities`` (K of the
        document).

    Raises:
        TypeError: For a document that is not a `CorefDocument` or a slow tokenizer.
        ValueError: For an empty ``documents``, ``window_length < 2``, or a document with more than
            ``max_entities`` entities (naming it and its count).

    Example:
        >>> windows = entity_lm_windows(read_conll_coreference("litbank/conll"), tokenizer, 512)  # doctest: +SKIP
        >>> windows.column_names  # doctest: +SKIP
        ['input_ids', 'entity_ids', 'document_id', 'window_index', 'num_entities']
    """
    window_length = _checked_window_length(window_length)
    if max_entities is not None and (not _is_int(max_entities) or max_entities < 1):
        raise ValueError(f"max_entities must be a positive int or None, got {max_entities!r}.")
    if isinstance(documents, CorefDocument) or not isinstance(documents, Sequence) or not documents:
        raise ValueError("entity_lm_windows needs a non-empty list of CorefDocument (see read_conll_coreference).")
    _warn_if_longer_than_model(tokenizer, window_length)
    columns: dict[str, list] = {name: [] for name in _WINDOW_COLUMNS}
    for document_id, document in enumerate(
        tqdm(documents, desc="Encoding documents", unit="doc", disable=_no_progress(len(documents)))
    ):
        encoded = entity_ids_for_document(document, tokenizer)
        if max_entities is not None and encoded["num_entities"] > max_entities:
            raise ValueError(
                f"Document {document_id}, {document.label}, has {encoded['num_entities']} entities, more than "
                f"max_entities={max_entities}; raise config.max_entities to at least {encoded['num_entities']}."
            )
        windows = document_windows(encoded["input_ids"], encoded["entity_ids"], window_length)
        for window_index, window in enumerate(windows):
            columns["input_ids"].append(window["input_ids"])
            columns["entity_ids"].append(window["entity_ids"])
            columns["document_id"].append(document_id)
            columns["window_index"].append(window_index)
            columns["num_entities"].append(encoded["num_entities"])
    return datasets.Dataset.from_dict(columns)


_WINDOW_COLUMNS = ("input_ids", "entity_ids", "document_id", "window_index", "num_entities")


def _checked_window_length(window_length: Any) -> int:
    if not _is_int(window_length):
        raise TypeError(f"window_length must be an int, got {window_length!r}.")
    if window_length < 2:
        raise ValueError(
            f"window_length must be at least 2 (a causal LM predicts token t+1 from tokens up to t), got "
            f"{window_length}."
        )
    return int(window_length)


def _warn_if_longer_than_model(tokenizer: Any, window_length: int) -> None:
    max_length = getattr(tokenizer, "model_max_length", None)
    if isinstance(max_length, int) and max_length < 1_000_000 and window_length > max_length:
        logger.warning(
            f"window_length {window_length} exceeds the tokenizer's model_max_length {max_length}; a model with that "
            "many positions cannot read a whole window."
        )


# ------------------------------------------------------------------------------------------------ stream order
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
    if not _is_int(batch_size):
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


# ------------------------------------------------------------------------------------------------ collator
@dataclass
class EntityLanguageModelingCollator(LanguageModelingCollator):
    """Pad entity-LM windows: `LanguageModelingCollator`'s batch plus ``entity_ids``, ``document_ids`` and
    ``window_index``.

    ``input_ids``, ``attention_mask`` and ``labels`` are exactly `LanguageModelingCollator`'s (right padding, labels
    -100 on padding, unshifted). ``entity_ids`` is padded with 0 (Ø) to the same length. When the examples have
    ``document_id`` and ``window_index`` (rows of `entity_lm_windows`), the batch gets ``document_ids`` and
    ``window_index`` as LongTensors of shape ``(batch_size,)``, unchanged; two windows of one document in one batch
    raise (order the rows with `order_windows_for_streams` and sample sequentially). Other keys (``num_entities``)
    are ignored.

    Attributes:
        pad_token_id: The id written at padded positions (never seen by the loss).
        pad_to_multiple_of: If set, the padded length is rounded up to a multiple of it.

    Example:
        >>> collator = EntityLanguageModelingCollator(pad_token_id=0)
        >>> batch = collator([
        ...     {"input_ids": [5, 6, 7], "entity_ids": [1, 1, 0], "document_id": 0, "window_index": 2},
        ...     {"input_ids": [8], "entity_ids": [3], "document_id": 4, "window_index": 0},
        ... ])
        >>> batch["entity_ids"].tolist(), batch["document_ids"].tolist(), batch["labels"].tolist()
        ([[1, 1, 0], [3, 0, 0]], [0, 4], [[5, 6, 7], [8, -100, -100]])
    """

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = super().__call__(examples)
        batch["entity_ids"] = self._padded_entity_ids(examples, batch["input_ids"].shape[1])
        for key, name in (("document_id", "document_ids"), ("window_index", "window_index")):
            values = self._per_example(examples, key)
            if values is not None:
                batch[name] = values
        document_ids = batch.get("document_ids")
        if document_ids is not None and len(set(document_ids.tolist())) != len(document_ids):
            repeated = [d for d, n in Counter(document_ids.tolist()).items() if n > 1]
            raise ValueError(
                f"The batch holds several windows of document(s) {repeated}; the entity states of a document move "
                "from one window to the next, so order the rows with order_windows_for_streams(dataset, batch_size) "
                "and use a sequential sampler (train_sampling_strategy='sequential')."
            )
        return batch

    @staticmethod
    def _padded_entity_ids(examples: Sequence[Mapping[str, Any]], length: int) -> torch.Tensor:
        entity_ids = torch.zeros((len(examples), length), dtype=torch.long)
        for index, example in enumerate(examples):
            if "entity_ids" not in example:
                raise ValueError(
                    f"Example {index} has no 'entity_ids'; give one entity id per token (0 outside mentions, e.g. "
                    "[0] * len(input_ids) for LAMBADA)."
                )
            ids = torch.as_tensor(example["entity_ids"])
            num_tokens = torch.as_tensor(example["input_ids"]).numel()
            if ids.ndim != 1 or ids.numel() != num_tokens:
                raise ValueError(
                    f"Example {index}: entity_ids has shape {tuple(ids.shape)} but input_ids has {num_tokens} tokens; "
                    "give exactly one entity id per token."
                )
            if ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise TypeError(f"Example {index}: entity_ids must be integers, got {ids.dtype}.")
            if ids.numel() and int(ids.min()) < 0:
                raise ValueError(f"Example {index}: entity_ids must be >= 0 (0 = no entity), got {int(ids.min())}.")
            entity_ids[index, :num_tokens] = ids.long()
        return entity_ids

    @staticmethod
    def _per_example(examples: Sequence[Mapping[str, Any]], key: str) -> torch.Tensor | None:
        present = [key in example for example in examples]
        if not any(present):
            return None
        if not all(present):
            raise ValueError(
                f"Example {present.index(False)} has no {key!r} but others have; give it to every example."
            )
        values = [example[key] for example in examples]
        for index, value in enumerate(values):
            if not _is_int(value) and not (isinstance(value, torch.Tensor) and value.numel() == 1):
                raise TypeError(f"Example {index}: {key} must be an int, got {value!r}.")
        return torch.tensor([int(value) for value in values], dtype=torch.long)


# ------------------------------------------------------------------------------------------------ LitBank
def load_litbank_entity_lm(
    conll_dir: str | Path,
    tokenizer: Any,
    window_length: int = 512,
    validation_books: int = 8,
    test_books: int = 8,
    seed: int = 0,
    max_entities: int | None = None,
) -> datasets.DatasetDict:
    """LitBank (or any folder of CoNLL-2012 files) as entity-LM windows, split BY BOOK into train/validation/test.

    The distinct document names (books; all parts of a name stay together) are shuffled with ``random.Random(seed)``:
    the first ``validation_books`` go to validation, the next ``test_books`` to test, the rest to train. Within a split
    the documents keep file order; each split is `entity_lm_windows` of its documents, so ``document_id`` indexes
    that split's own list of documents. Which documents went where is recorded in every split's
    ``dataset.info.description`` (JSON; read it back with `entity_lm_document_names`).

    Only local files are read here. OntoNotes users with the network: ``coref_documents_from_dataset(
    "ontonotes/conll2012_ontonotesv5", "english_v4", split)`` gives the documents of a Hub split, and
    `entity_lm_windows` turns them into windows.

    Args:
        conll_dir: A folder of ``.conll`` files (e.g. ``../shared/data/litbank/conll``), a file, or a list of them.
        tokenizer: A fast tokenizer (GPT-2's).
        window_length: Tokens per window (the last of a document may be shorter).
        validation_books: Books held out for validation (0 leaves the split out).
        test_books: Books held out for test (0 leaves the split out).
        seed: Seeds the book split.
        max_entities: The model's ``config.max_entities``: a document with more entities raises.

    Returns:
        A `datasets.DatasetDict` with ``train`` (and ``validation``, ``test`` when asked for), columns as in
        `entity_lm_windows`.

    Raises:
        FileNotFoundError: If ``conll_dir`` does not exist (e.g. a Hub dataset id was passed).
        ValueError: If the held-out books leave no book for training, or as `read_conll_coreference` and
            `entity_lm_windows` raise.

    Example:
        >>> splits = load_litbank_entity_lm("../shared/data/litbank/conll", tokenizer)  # doctest: +SKIP
        >>> {name: len(entity_lm_document_names(split)) for name, split in splits.items()}  # doctest: +SKIP
        {'train': 64, 'validation': 8, 'test': 8}
    """
    if isinstance(conll_dir, (str, Path)) and not Path(conll_dir).exists():
        raise FileNotFoundError(
            f"{conll_dir} is not an existing file or folder. load_litbank_entity_lm reads local CoNLL-2012 files only "
            "(for a Hub dataset such as ontonotes/conll2012_ontonotesv5, use coref_documents_from_dataset(id, config, "
            "split) and entity_lm_windows)."
        )
    for name, count in (("validation_books", validation_books), ("test_books", test_books)):
        if not _is_int(count) or count < 0:
            raise ValueError(f"{name} must be an int >= 0, got {count!r}.")
    documents = read_conll_coreference(conll_dir)
    books = list(dict.fromkeys(document.name for document in documents))
    if validation_books + test_books >= len(books):
        raise ValueError(
            f"validation_books={validation_books} + test_books={test_books} leave none of the {len(books)} books for "
            "training; hold out fewer books."
        )
    shuffled = list(books)
    random.Random(seed).shuffle(shuffled)
    split_of = {book: "validation" for book in shuffled[:validation_books]}
    split_of.update({book: "test" for book in shuffled[validation_books : validation_books + test_books]})
    result = {}
    for split in ("train", "validation", "test"):
        members = [document for document in documents if split_of.get(document.name, "train") == split]
        if not members:
            continue
        dataset = entity_lm_windows(members, tokenizer, window_length, max_entities=max_entities)
        dataset.info.description = json.dumps(
            {
                "split": split,
                "seed": seed,
                "documents": [f"{document.name}; part {document.part}" for document in members],
                "books": sorted({document.name for document in members}),
            }
        )
        result[split] = dataset
        logger.info(f"LitBank entity LM {split}: {len(members)} documents, {len(dataset)} windows of {window_length}.")
    return datasets.DatasetDict(result)


def entity_lm_document_names(dataset: datasets.Dataset) -> list[str]:
    """The documents of a `load_litbank_entity_lm` split, by ``document_id`` (``"name; part N"``).

    Raises:
        ValueError: If the dataset's ``info.description`` was not written by `load_litbank_entity_lm`.

    Example:
        >>> names = entity_lm_document_names(splits["validation"])  # doctest: +SKIP
        >>> names[splits["validation"][0]["document_id"]]  # doctest: +SKIP
        '1023_bleak_house_brat; part 0'
    """
    try:
        record = json.loads(dataset.info.description or "")
        return list(record["documents"])
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError("This dataset does not record its documents; build it with load_litbank_entity_lm.") from error


# ------------------------------------------------------------------------------------------------ LAMBADA
def read_lambada(path: str | Path) -> list[str]:
    """Read LAMBADA texts from a jsonl file, one ``{"text": ...}`` object per line (OpenAI's ``lambada_test.jsonl``).

    Args:
        path: The jsonl file.

    Returns:
        The texts, in file order.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: Naming ``file:line``: a blank line, a line that is not a JSON object, a missing or non-string
            ``"text"``, or an empty text; or an empty file.

    Example:
        >>> texts = read_lambada("../shared/data/lambada/lambada_test.jsonl")  # doctest: +SKIP
        >>> len(texts)  # doctest: +SKIP
        5153
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"The LAMBADA file {path} does not exist.")
    texts = []
    with named_decode_errors(path, "LAMBADA file"), path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            where = f"{path}:{line_number}"
            if not line.strip():
                raise ValueError(f"{where}: blank line; every line must be a JSON object with a 'text'. Remove it.")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not JSON ({error.msg}); expected {{\"text\": ...}}.") from error
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise ValueError(f"{where}: expected a JSON object with a string 'text', got {line.strip()[:80]!r}.")
            if not text.strip():
                raise ValueError(f"{where}: the text is empty.")
            texts.append(text)
    if not texts:
        raise ValueError(f"The LAMBADA file {path} is empty; expected one {{\"text\": ...}} per line.")
    return texts


def lambada_examples(texts: Sequence[str], tokenizer: Any) -> list[dict[str, list[int]]]:
    """Split every LAMBADA text into context and target word, as BPE ids.

    The target is the last whitespace-delimited word; ``target_ids`` is the BPE of ``" " + word`` (GPT-2's token of
    a word after a space), ``context_ids`` the BPE of the text before the word, without the whitespace in between.
    So ``decode(context_ids) + decode(target_ids) == text`` wherever a single space precedes the last word (all but
    7 of the 5,153 test texts; in those a newline precedes it, and the pair reads as if it were a space). A model
    scores the target after the context; entity ids are all Ø (0), as in the paper.

    Args:
        texts: The texts (`read_lambada`).
        tokenizer: The LM's tokenizer (no special tokens are added).

    Returns:
        ``[{"context_ids": [...], "target_ids": [...]}, ...]``, one per text.

    Raises:
        ValueError: If a text is not a string, is empty, or is a single word (no context).

    Example:
        >>> example = lambada_examples(["He said hello to Anna"], gpt2_tokenizer)[0]  # doctest: +SKIP
        >>> gpt2_tokenizer.decode(example["target_ids"])  # doctest: +SKIP
        ' Anna'
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"lambada_examples expects a list of texts, got {type(texts).__name__}.")
    contexts, targets = [], []
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"Text {index} is empty or not a string ({text!r}); every text needs a context and a word."
            )
        stripped = text.rstrip()
        word = stripped.split()[-1]
        context = stripped[: len(stripped) - len(word)].rstrip()
        if not context:
            raise ValueError(f"Text {index} ({text!r}) is a single word: there is no context to predict it from.")
        contexts.append(context)
        targets.append(" " + word)
    if not contexts:
        return []
    encode = {"add_special_tokens": False, "return_attention_mask": False, "verbose": False}
    context_ids = tokenizer(contexts, **encode)["input_ids"]
    target_ids = tokenizer(targets, **encode)["input_ids"]
    return [
        {"context_ids": list(context), "target_ids": list(target)} for context, target in zip(context_ids, target_ids)
    ]


# ------------------------------------------------------------------------------------------------ resolver output
def entity_ids_from_clusters(
    text: str, clusters: Sequence[Sequence[Mapping[str, Any]]] | Mapping[str, Any], tokenizer: Any
) -> dict[str, Any]:
    """Entity ids of the BPE tokens of a raw text, from coreference clusters with character offsets.

    ``clusters`` is what ``pipeline("coreference")`` returns (``{"clusters": [[{"start", "end", "text"}, ...],
    ...]}``, or just its list). Entities are numbered 1..K in order of first mention in the text (by start, the
    longer mention first on a tie), whatever the order of the clusters; tokens outside every mention get 0. A token
    takes the entity of the innermost (shortest, in characters) mention that any of its non-space characters lies in
    (overlapping mentions: the shorter wins; equally long: the lower id), so every BPE piece of a mention word carries
    it; a token of spaces only takes the entity of the character after it (GPT-2 attaches a space to the next word).

    Args:
        text: The text the offsets point into.
        clusters: The clusters: lists of mentions ``{"start": int, "end": int}`` (``end`` exclusive), with an
            optional ``"text"`` that must equal ``text[start:end]``.
        tokenizer: A fast tokenizer (GPT-2's); it need not be the resolver's.

    Returns:
        A dict with ``input_ids``, ``entity_ids``, ``offsets`` (of each token into ``text``), ``text`` and
        ``num_entities`` (K, the number of clusters) and ``cluster_entity_ids`` (the entity id of each cluster, in the
        order given).

    Raises:
        TypeError: For a slow tokenizer or clusters of the wrong shape.
        ValueError: For an empty text, an empty cluster, offsets outside the text or empty, or a mention ``text``
            that differs from ``text[start:end]``.

    Example:
        >>> text = "Zoe met Maggie. She smiled."
        >>> clusters = [[{"start": 8, "end": 14, "text": "Maggie"}, {"start": 16, "end": 19, "text": "She"}]]
        >>> encoded = entity_ids_from_clusters(text, clusters, gpt2_tokenizer)  # doctest: +SKIP
        >>> tokens = gpt2_tokenizer.convert_ids_to_tokens(encoded["input_ids"])  # doctest: +SKIP
        >>> list(zip(tokens, encoded["entity_ids"]))  # doctest: +SKIP
        [('Z', 0), ('oe', 0), ('Ġmet', 0), ('ĠMaggie', 1), ('.', 0), ('ĠShe', 1), ('Ġsmiled', 0), ('.', 0)]
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"The text must be a non-empty string, got {text!r}.")
    if isinstance(clusters, Mapping):
        if "clusters" not in clusters:
            raise TypeError(
                f"Expected the coreference pipeline's output {{'clusters': [...]}}, got keys {sorted(clusters)}."
            )
        clusters = clusters["clusters"]
    if isinstance(clusters, (str, bytes)) or not isinstance(clusters, Sequence):
        raise TypeError(f"clusters must be a list of lists of mentions, got {type(clusters).__name__}.")
    mentions = [
        _checked_char_mention(text, mention, cluster_index, mention_index)
        for cluster_index, cluster in enumerate(_checked_clusters(clusters))
        for mention_index, mention in enumerate(cluster)
    ]
    encoded = _encode_with_entities(text, mentions, tokenizer)
    numbering = _number_entities(mentions)
    encoded["cluster_entity_ids"] = [numbering[index] for index in range(len(clusters))]
    return encoded


def _checked_clusters(clusters: Sequence[Any]) -> list[Sequence[Any]]:
    for index, cluster in enumerate(clusters):
        if isinstance(cluster, (str, bytes, Mapping)) or not isinstance(cluster, Sequence):
            raise TypeError(f"Cluster {index} must be a list of mentions, got {type(cluster).__name__}.")
        if not cluster:
            raise ValueError(f"Cluster {index} has no mention; remove empty clusters.")
    return list(clusters)


def _checked_char_mention(text: str, mention: Any, cluster_index: int, mention_index: int) -> _CharMention:
    where = f"Mention {mention_index} of cluster {cluster_index}"
    if not isinstance(mention, Mapping) or not _is_int(mention.get("start")) or not _is_int(mention.get("end")):
        raise TypeError(f"{where} must be a dict with int 'start' and 'end' character offsets, got {mention!r}.")
    start, end = int(mention["start"]), int(mention["end"])
    if not 0 <= start < end <= len(text):
        raise ValueError(
            f"{where} has offsets ({start}, {end}) outside the text of {len(text)} characters or empty; offsets are "
            "character positions, end exclusive."
        )
    if "text" in mention and mention["text"] != text[start:end]:
        raise ValueError(
            f"{where} says {mention['text']!r} but text[{start}:{end}] is {text[start:end]!r}; the clusters belong to "
            "another text."
        )
    return start, end, cluster_index


def entity_ids_from_text(
    text: str, coreference_pipeline: Any, tokenizer: Any, **pipeline_kwargs: Any
) -> dict[str, Any]:
    """From raw text to ``input_ids`` + ``entity_ids``: run a coreference resolver, then `entity_ids_from_clusters`.

    Noisy entity annotation from a pretrained resolver instead of gold coreference (the paper's future work).

    Args:
        text: The raw text.
        coreference_pipeline: Our ``pipeline("coreference", model=...)`` (any callable returning
            ``{"clusters": [[{"start", "end", "text"}, ...], ...]}``).
        tokenizer: The language model's fast tokenizer (GPT-2's), not necessarily the resolver's.
        **pipeline_kwargs: Passed to the pipeline, e.g. ``mention_threshold=0.5``.

    Returns:
        `entity_ids_from_clusters`'s dict, plus ``clusters`` (the resolver's clusters).

    Raises:
        TypeError: If the pipeline is not callable or returns something else than ``{"clusters": [...]}``.

    Example:
        >>> from transformers import pipeline  # doctest: +SKIP
        >>> resolver = pipeline("coreference", model="runs/petra-gap")  # doctest: +SKIP
        >>> encoded = entity_ids_from_text("Zoe met Maggie. She smiled.", resolver, gpt2_tokenizer)  # doctest: +SKIP
        >>> encoded["num_entities"] == len(encoded["clusters"])  # doctest: +SKIP
        True
    """
    if not callable(coreference_pipeline):
        raise TypeError(
            f"coreference_pipeline must be a pipeline('coreference', model=...) object, got "
            f"{type(coreference_pipeline).__name__}."
        )
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"The text must be a non-empty string, got {text!r}.")
    output = coreference_pipeline(text, **pipeline_kwargs)
    if not isinstance(output, Mapping) or "clusters" not in output:
        raise TypeError(
            f"The coreference pipeline returned {type(output).__name__}, not {{'clusters': [...]}}; pass a "
            "pipeline('coreference') in clusters mode (no pronoun/candidates query)."
        )
    result = entity_ids_from_clusters(text, output["clusters"], tokenizer)
    result["clusters"] = output["clusters"]
    return result


# ------------------------------------------------------------------------------------------------ helpers
def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _no_progress(count: int) -> bool:
    return count < 2 or not logging.is_progress_bar_enabled()
