"""Entity-LM windows: cut entity-annotated documents into consecutive causal-LM windows for GPT2E.

`document_windows` cuts one document's ``input_ids`` + ``entity_ids`` into consecutive, non-overlapping windows;
`entity_lm_windows` encodes documents (`entity_ids_for_document`) and gives all their windows as a
`datasets.Dataset` with ``document_id`` and ``window_index``. Entity ids stay the document's, so a model that carries
a document's entity states from one window to the next meets the same entity under the same id. Ordering the windows
for training is `order_windows_for_streams`'s job (`stream_order`).

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("../shared/data/tokenizers/gpt2")  # doctest: +SKIP
    >>> documents = read_conll_coreference("../shared/data/litbank/conll")  # doctest: +SKIP
    >>> windows = entity_lm_windows(documents, tokenizer, window_length=512)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import datasets
from tqdm.auto import tqdm
from transformers.utils import logging

from ..coreference.conll import CorefDocument
from ._checks import is_int
from .entity_alignment import entity_ids_for_document

logger = logging.get_logger(__name__)

__all__ = ["document_windows", "entity_lm_windows"]


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
    if max_entities is not None and (not is_int(max_entities) or max_entities < 1):
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
    if not is_int(window_length):
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


def _no_progress(count: int) -> bool:
    return count < 2 or not logging.is_progress_bar_enabled()
