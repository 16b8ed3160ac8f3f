"""LitBank as entity-LM data for GPT2E: CoNLL-2012 files -> train/validation/test windows, split by book.

`load_litbank_entity_lm` reads a folder of CoNLL-2012 files (`read_conll_coreference`), splits the books at random
(seeded) and gives each split's `entity_lm_windows`; `entity_lm_document_names` reads back which documents a split
holds.

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("../shared/data/tokenizers/gpt2")  # doctest: +SKIP
    >>> splits = load_litbank_entity_lm("../shared/data/litbank/conll", tokenizer, window_length=512)  # doctest: +SKIP
    >>> train = order_windows_for_streams(splits["train"], batch_size=8)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import datasets
from transformers.utils import logging

from ..coreference.conll import read_conll_coreference
from ._checks import is_int
from .entity_windows import entity_lm_windows

logger = logging.get_logger(__name__)

__all__ = ["entity_lm_document_names", "load_litbank_entity_lm"]


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
        if not is_int(count) or count < 0:
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
