"""Unlabelled text for left-to-right language-model pre-training (Referential Reader, section 3).

The Referential Reader is pre-trained as a language model before coreference training. The paper used the
Wikipedia pages behind GAP; those are not available, so this module builds a stand-in corpus from texts that are,
with NO labels used:

* `read_gap_texts`: the ``Text`` column of a GAP TSV file (use the development file; the validation file is the
  coreference evaluation set and must stay unseen);
* `read_squad_contexts`: the paragraphs (contexts) of SQuAD JSON files, deduplicated across files (v1.1 and v2.0
  share articles);
* `read_litbank_documents`: the books of LitBank's CoNLL files, one string per document.

`LanguageModelingCorpus` (or the shortcut `build_lm_corpus`) splits the documents into train and validation BY
DOCUMENT, per source (so no text appears in both splits and every source is represented in validation), tokenizes
each document without special tokens and without truncation, joins the documents of a split with the tokenizer's
end-of-sequence (or, failing that, separator) token between them, and cuts the result into consecutive blocks of
``block_size`` tokens. The last, shorter block is kept: no token is dropped.
`load_lm_corpus_from_shared_data` reads the three sources from a data folder laid out like the project's shared data.

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")  # doctest: +SKIP
    >>> corpus = load_lm_corpus_from_shared_data("../shared/data", tokenizer, block_size=128)  # doctest: +SKIP
    >>> corpus  # doctest: +SKIP
    DatasetDict({
        train: Dataset({features: ['input_ids', 'attention_mask'], num_rows: ...})
        validation: Dataset({features: ['input_ids', 'attention_mask'], num_rows: ...})
    })
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import numbers
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from datasets.fingerprint import Hasher
from transformers.utils import logging

from ..text_files import conll_files_in, named_decode_errors, not_utf8_error

logger = logging.get_logger(__name__)

__all__ = [
    "DEFAULT_GAP_FILE",
    "DEFAULT_LITBANK_DIR",
    "DEFAULT_SQUAD_FILES",
    "LanguageModelingCorpus",
    "SplitStatistics",
    "build_lm_corpus",
    "load_lm_corpus_from_shared_data",
    "read_gap_texts",
    "read_litbank_documents",
    "read_shared_data_documents",
    "read_squad_contexts",
    "resolve_separator_token_id",
    "split_documents_by_source",
]

# Paths inside a data folder laid out like the project's shared data (see its README.md).
DEFAULT_GAP_FILE = "gap/gap-development.tsv"
DEFAULT_SQUAD_FILES = ("squad/squad-v1.1-dev-public.json.gz", "squad/squad-v2.0-dev-public.json.gz")
DEFAULT_LITBANK_DIR = "litbank/conll"

# Bumped whenever the tokenisation or blocking below changes, so on-disk caches written by an older version are
# never reused.
_CACHE_VERSION = "lm-corpus-v1"


# ------------------------------------------------------------------------------------------------ readers
def read_gap_texts(path: str | Path) -> list[str]:
    """Read the ``Text`` column of a GAP TSV file: one document per row, labels ignored.

    The file is read with `csv` (tab-delimited, quoting off, as the official files are written: texts contain
    quote characters that are not CSV quoting). Rows are returned in file order; a text that occurs on two rows is
    returned twice (`split_documents_by_source` keeps identical texts in the same split).

    Args:
        path: A GAP TSV file with a header row that has a ``Text`` column, e.g. ``gap-development.tsv``. Do not use
            ``gap-validation.tsv`` for pre-training: it is the coreference evaluation set.

    Returns:
        The texts, one per data row.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file is not UTF-8 text, is empty, has no ``Text`` column, a row has the wrong number of
            fields, or a text is empty.

    Example:
        >>> texts = read_gap_texts("gap/gap-development.tsv")  # doctest: +SKIP
        >>> len(texts)  # doctest: +SKIP
        2000
    """
    path = _existing_file(path, "GAP TSV file")
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 24))
    with named_decode_errors(path, "GAP file"), path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"The GAP file {path} is empty; expected a header row with a 'Text' column.")
        header = [name.strip() for name in header]
        if "Text" not in header:
            raise ValueError(
                f"The GAP file {path} has no 'Text' column (header: {header}). Pass an official GAP TSV file "
                "(columns ID, Text, Pronoun, ...)."
            )
        text_column = header.index("Text")
        texts = []
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(
                    f"Line {reader.line_num} of {path} has {len(row)} tab-separated fields, the header has "
                    f"{len(header)}. Is the file tab-separated, with no tabs inside the texts?"
                )
            text = row[text_column]
            if not text.strip():
                raise ValueError(f"Line {reader.line_num} of {path} has an empty Text field.")
            texts.append(text)
    if not texts:
        raise ValueError(f"The GAP file {path} has a header but no data rows.")
    return texts


def read_squad_contexts(path_or_paths: str | Path | Sequence[str | Path]) -> list[str]:
    """Read the unique paragraph contexts of one or more SQuAD JSON files (questions and answers ignored).

    Files may be gzip-compressed (detected from their first bytes) or plain JSON, in the official SQuAD layout
    (``{"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [...]}]}]}``, v1.1 or v2.0). SQuAD v1.1 and
    v2.0 share articles, so contexts are deduplicated by exact text; the first occurrence sets the order.

    Args:
        path_or_paths: One file or a sequence of files.

    Returns:
        The distinct non-empty contexts in first-seen order.

    Raises:
        FileNotFoundError: If a file does not exist.
        TypeError: If ``path_or_paths`` is not a path or a sequence of paths.
        ValueError: If a file is not SQuAD JSON, or no context is found.

    Example:
        >>> contexts = read_squad_contexts(["squad-v1.1-dev.json.gz", "squad-v2.0-dev.json.gz"])  # doctest: +SKIP
        >>> len(contexts) == len(set(contexts))  # doctest: +SKIP
        True
    """
    if isinstance(path_or_paths, (str, Path)):
        paths = [path_or_paths]
    elif isinstance(path_or_paths, Sequence) and all(isinstance(p, (str, Path)) for p in path_or_paths):
        paths = list(path_or_paths)
    else:
        raise TypeError(
            f"read_squad_contexts expects a path or a sequence of paths, got {type(path_or_paths).__name__}."
        )
    if not paths:
        raise ValueError("read_squad_contexts got an empty list of files.")
    seen: set[str] = set()
    contexts: list[str] = []
    for raw_path in paths:
        path = _existing_file(raw_path, "SQuAD JSON file")
        blank = 0
        for context in _iter_squad_contexts(path):
            if not context.strip():
                blank += 1
            elif context not in seen:
                seen.add(context)
                contexts.append(context)
        if blank:
            logger.warning(f"Skipped {blank} empty context(s) in {path}.")
    if not contexts:
        raise ValueError(f"No SQuAD context found in {[str(p) for p in paths]}.")
    return contexts


def read_litbank_documents(conll_dir: str | Path) -> list[str]:
    """Read the documents (books) of a folder of CoNLL-2012 files, such as LitBank's, as plain text.

    Every CoNLL file of the folder (``*.conll``, or OntoNotes' ``*_conll``) is read in sorted file-name order; every ``#begin document`` ...
    ``#end document`` block becomes one string. The word is the 4th column (index 3) of a token line; blank lines
    separate sentences; other columns (coreference included) are ignored.

    The text is the tokens joined by single spaces (sentences too are joined by a single space), with no
    detokenisation: punctuation stays space-separated as in the file (``"Elliot , of Kellynch Hall , in"``). This
    keeps every token of the file, in order, and is what a WordPiece tokenizer would produce anyway; a byte-level
    BPE tokenizer (GPT-2) sees ``" ,"`` instead of ``","``, a small domain shift that we accept for simplicity.

    Args:
        conll_dir: The folder holding the ``.conll`` files (e.g. ``litbank/conll``).

    Returns:
        One string per document, in file order then document order.

    Raises:
        FileNotFoundError: If the folder does not exist or holds no CoNLL file (naming the patterns searched).
        ValueError: If a file is not UTF-8 text, a token line has fewer than 4 columns, a token appears outside a document, or documents are
            not properly opened and closed.

    Example:
        >>> books = read_litbank_documents("litbank/conll")  # doctest: +SKIP
        >>> books[1][:27]  # doctest: +SKIP
        'Chapter 1 Sir Walter Elliot'
    """
    folder = Path(conll_dir)
    if folder.is_file():
        raise FileNotFoundError(
            f"{folder} is a file, but a folder of CoNLL files is expected here: pass the folder ({folder.parent})."
        )
    if not folder.is_dir():
        raise FileNotFoundError(f"The CoNLL folder {folder} does not exist (expected a folder of .conll files).")
    documents = []
    for path in conll_files_in(folder, files_accepted=False):
        documents.extend(_read_conll_documents(path))
    return documents


def read_shared_data_documents(
    data_dir: str | Path,
    *,
    gap_file: str | Path | None = DEFAULT_GAP_FILE,
    squad_files: Sequence[str | Path] | None = DEFAULT_SQUAD_FILES,
    litbank_dir: str | Path | None = DEFAULT_LITBANK_DIR,
) -> dict[str, list[str]]:
    """Read the LM pre-training documents of a data folder: GAP development texts, SQuAD contexts, LitBank books.

    Relative paths are resolved against ``data_dir``; absolute paths are used as given. Pass ``None`` to leave a
    source out. Every path is checked before anything is read.

    Args:
        data_dir: The data folder (e.g. the project's ``../shared/data``).
        gap_file: The GAP TSV file whose texts to use (never the validation file, the evaluation set).
        squad_files: SQuAD JSON files (gzip or plain); their contexts are deduplicated across files.
        litbank_dir: The folder of LitBank ``.conll`` files.

    Returns:
        ``{"gap": [...], "squad": [...], "litbank": [...]}`` (the sources not left out), the input of
        `build_lm_corpus`.

    Raises:
        FileNotFoundError: Naming the first missing file or folder.
        ValueError: If every source is left out, or a file is malformed.

    Example:
        >>> documents = read_shared_data_documents("../shared/data")  # doctest: +SKIP
        >>> {source: len(docs) for source, docs in documents.items()}  # doctest: +SKIP
        {'gap': 2000, 'squad': 1970, 'litbank': 80}
    """
    root = Path(data_dir)

    def resolve(path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else root / path

    gap_path = resolve(gap_file) if gap_file is not None else None
    squad_paths = [resolve(path) for path in squad_files] if squad_files is not None else None
    litbank_path = resolve(litbank_dir) if litbank_dir is not None else None
    if gap_path is None and not squad_paths and litbank_path is None:
        raise ValueError("Every source is left out; pass at least one of gap_file, squad_files, litbank_dir.")
    for name, path in [("GAP", gap_path), *[("SQuAD", p) for p in squad_paths or []]]:
        if path is not None and not path.is_file():
            raise FileNotFoundError(
                f"The {name} file {path} is missing (data folder {root}). Pass the right path, or None to leave "
                "this source out."
            )
    if litbank_path is not None and not litbank_path.is_dir():
        raise FileNotFoundError(
            f"The LitBank folder {litbank_path} is missing (data folder {root}). Pass the right path, or None to "
            "leave this source out."
        )
    documents: dict[str, list[str]] = {}
    if gap_path is not None:
        if "validation" in gap_path.name:
            logger.warning(
                f"{gap_path} looks like GAP's validation file, the coreference evaluation set: pre-training on it "
                "leaks the evaluation texts."
            )
        documents["gap"] = read_gap_texts(gap_path)
    if squad_paths:
        documents["squad"] = read_squad_contexts(squad_paths)
    if litbank_path is not None:
        documents["litbank"] = read_litbank_documents(litbank_path)
    return documents


# ------------------------------------------------------------------------------------------------ splitting
def split_documents_by_source(
    documents: Mapping[str, Sequence[str]], validation_fraction: float = 0.05, seed: int = 0
) -> dict[str, dict[str, list[str]]]:
    """Split documents into train and validation by document, separately for every source.

    For every source, the distinct texts are shuffled with a generator seeded by ``seed`` and the source name (so
    adding a source does not change another source's split) and ``round(validation_fraction * n)`` of them (at
    least 1, at most ``n - 1``) go to validation. Identical texts always land in the same split, also across
    sources, so no text is in both splits. Within a split, documents keep their original order.

    Args:
        documents: Source name -> its documents (non-empty strings).
        validation_fraction: The fraction of every source's distinct documents held out, in (0, 1).
        seed: Seeds the shuffles.

    Returns:
        ``{"train": {source: [...]}, "validation": {source: [...]}}``.

    Raises:
        TypeError: If ``documents`` is not a mapping of source names to lists of strings.
        ValueError: If it is empty, a source has fewer than 2 distinct documents, a document is empty, or
            ``validation_fraction`` is not in (0, 1).

    Example:
        >>> splits = split_documents_by_source({"toy": ["a b", "c d", "e f", "g h"]}, validation_fraction=0.25)
        >>> len(splits["train"]["toy"]), len(splits["validation"]["toy"])
        (3, 1)
        >>> set(splits["train"]["toy"]) & set(splits["validation"]["toy"])
        set()
    """
    _check_fraction(validation_fraction)
    _check_documents(documents)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {seed!r}.")
    validation_texts: set[str] = set()
    for source, docs in documents.items():
        distinct = list(dict.fromkeys(docs))
        if len(distinct) < 2:
            raise ValueError(
                f"Source {source!r} has {len(distinct)} distinct document(s); a document-level train/validation "
                "split needs at least 2 per source. Add documents or leave the source out."
            )
        num_validation = min(len(distinct) - 1, max(1, round(validation_fraction * len(distinct))))
        order = list(range(len(distinct)))
        random.Random(f"{int(seed)}:{source}").shuffle(order)
        validation_texts.update(distinct[index] for index in order[:num_validation])
    splits: dict[str, dict[str, list[str]]] = {"train": {}, "validation": {}}
    for source, docs in documents.items():
        splits["train"][source] = [doc for doc in docs if doc not in validation_texts]
        splits["validation"][source] = [doc for doc in docs if doc in validation_texts]
        if not splits["train"][source]:
            # Only possible when every text of this source was also drawn for validation by another source.
            raise ValueError(
                f"Every document of source {source!r} also occurs in another source's validation split; remove the "
                "duplicates across sources."
            )
    return splits


# ------------------------------------------------------------------------------------------------ corpus
@dataclass(frozen=True)
class SplitStatistics:
    """Sizes of one split of a `LanguageModelingCorpus`.

    Attributes:
        documents: Source name -> number of documents in this split.
        tokens: Source name -> number of tokens of its documents (separators not counted).
        num_separators: Separator tokens inserted between documents (documents - 1).
        num_blocks: Rows of the split (blocks of ``block_size`` tokens, the last possibly shorter).
    """

    documents: dict[str, int]
    tokens: dict[str, int]
    num_separators: int
    num_blocks: int

    @property
    def total_tokens(self) -> int:
        """All tokens of the split's blocks: document tokens plus separators."""
        return sum(self.tokens.values()) + self.num_separators


@dataclass
class LanguageModelingCorpus:
    """Turns documents from several sources into a blocked causal-LM `datasets.DatasetDict` (train, validation).

    1. `split_documents_by_source` holds out ``validation_fraction`` of every source's documents.
    2. Every document is tokenized with ``add_special_tokens=False`` and no truncation (a `datasets.Dataset.map`,
       batched, with a progress bar; fingerprinted, and cached on disk when ``cache_dir`` is given).
    3. The documents of a split are concatenated in order with ``separator_token_id`` between consecutive
       documents (not before the first or after the last), so the model sees document boundaries.
    4. The token stream is cut into consecutive blocks of ``block_size`` tokens. The last block is shorter unless
       the length divides evenly; it is kept, so no token is dropped (`lm_data_collator` pads it).

    Every row has ``input_ids`` and ``attention_mask`` (all ones). Labels are made by the collator; the model shifts
    them internally, as GPT-2 does. After `build`, `statistics` holds the sizes of each split.

    Attributes:
        tokenizer: A transformers tokenizer (fast or slow).
        block_size: Tokens per block, at least 2.
        validation_fraction: Fraction of every source's documents held out, in (0, 1).
        seed: Seeds the document split.
        separator_token_id: The token put between documents. Default: the tokenizer's ``eos_token_id``, else its
            ``sep_token_id`` (see `resolve_separator_token_id`).
        cache_dir: When set, the tokenized and blocked splits are written there as Arrow files named by their
            fingerprint (documents, tokenizer, settings) and reused by later runs.
        statistics: ``{"train": SplitStatistics, "validation": SplitStatistics}`` after `build`, else empty.

    Example:
        >>> corpus = LanguageModelingCorpus(tokenizer, block_size=128)  # doctest: +SKIP
        >>> dataset = corpus.build({"gap": gap_texts, "litbank": books})  # doctest: +SKIP
        >>> corpus.statistics["validation"].documents  # doctest: +SKIP
        {'gap': 100, 'litbank': 4}
    """

    tokenizer: Any
    block_size: int = 128
    validation_fraction: float = 0.05
    seed: int = 0
    separator_token_id: int | None = None
    cache_dir: str | Path | None = None
    statistics: dict[str, SplitStatistics] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, numbers.Integral):
            raise TypeError(f"block_size must be an int, got {self.block_size!r}.")
        if self.block_size < 2:
            raise ValueError(
                f"block_size must be at least 2 (a causal LM predicts token t+1 from tokens up to t), got "
                f"{self.block_size}."
            )
        self.block_size = int(self.block_size)
        _check_fraction(self.validation_fraction)
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise TypeError(f"seed must be an int, got {self.seed!r}.")
        if not callable(self.tokenizer) or not hasattr(self.tokenizer, "convert_tokens_to_ids"):
            raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(self.tokenizer).__name__}.")
        if self.separator_token_id is None:
            self.separator_token_id = resolve_separator_token_id(self.tokenizer)
        elif isinstance(self.separator_token_id, bool) or not isinstance(self.separator_token_id, numbers.Integral):
            raise TypeError(f"separator_token_id must be an int, got {self.separator_token_id!r}.")
        elif not 0 <= self.separator_token_id < len(self.tokenizer):
            raise ValueError(
                f"separator_token_id {self.separator_token_id} is outside the tokenizer's vocabulary "
                f"(0..{len(self.tokenizer) - 1})."
            )
        max_length = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(max_length, int) and max_length < 1_000_000 and self.block_size > max_length:
            logger.warning(
                f"block_size {self.block_size} exceeds the tokenizer's model_max_length {max_length}; a model with "
                "that many positions cannot read a whole block."
            )

    def split(self, documents: Mapping[str, Sequence[str]]) -> dict[str, dict[str, list[str]]]:
        """The document-level split `build` uses (see `split_documents_by_source`)."""
        return split_documents_by_source(documents, self.validation_fraction, self.seed)

    def build(self, documents: Mapping[str, Sequence[str]]) -> datasets.DatasetDict:
        """Split, tokenize, join and block ``documents`` (source name -> texts); see the class docstring.

        Returns:
            A `datasets.DatasetDict` with ``train`` and ``validation`` splits, columns ``input_ids`` and
            ``attention_mask``.
        """
        splits = self.split(documents)
        tokenizer_hash = tokenizer_fingerprint(self.tokenizer)
        result = {}
        self.statistics = {}
        for split_name, by_source in splits.items():
            tokenized = self._tokenize(split_name, by_source, tokenizer_hash)
            result[split_name] = self._blocks(split_name, tokenized)
            self.statistics[split_name] = self._statistics(by_source, tokenized, len(result[split_name]))
            stats = self.statistics[split_name]
            logger.info(
                f"LM corpus {split_name}: {sum(stats.documents.values())} documents, {stats.total_tokens} tokens, "
                f"{stats.num_blocks} blocks of {self.block_size}."
            )
        return datasets.DatasetDict(result)

    # ---------------------------------------------------------------- steps
    def _tokenize(self, split_name: str, by_source: dict[str, list[str]], tokenizer_hash: str) -> datasets.Dataset:
        sources = [source for source, docs in by_source.items() for _ in docs]
        texts = [doc for docs in by_source.values() for doc in docs]
        raw = datasets.Dataset.from_dict({"source": sources, "text": texts})
        tokenizer = self.tokenizer

        def tokenize(batch: dict[str, list]) -> dict[str, list]:
            encoded = tokenizer(
                batch["text"],
                add_special_tokens=False,
                truncation=False,
                verbose=False,
                return_attention_mask=False,
                return_token_type_ids=False,
            )
            return {"input_ids": encoded["input_ids"]}

        fingerprint = Hasher.hash([_CACHE_VERSION, "tokenize", raw._fingerprint, tokenizer_hash])
        return raw.map(
            tokenize,
            batched=True,
            remove_columns=["text"],
            desc=f"Tokenizing {split_name} documents",
            new_fingerprint=fingerprint,
            **self._cache_arguments(f"lm-{split_name}-tokens", fingerprint),
        )

    def _blocks(self, split_name: str, tokenized: datasets.Dataset) -> datasets.Dataset:
        block_size, separator = self.block_size, int(self.separator_token_id)

        def join_and_cut(batch: dict[str, list]) -> dict[str, list]:
            stream: list[int] = []
            for index, ids in enumerate(batch["input_ids"]):
                if index:
                    stream.append(separator)
                stream.extend(ids)
            blocks = [stream[start : start + block_size] for start in range(0, len(stream), block_size)]
            return {"input_ids": blocks, "attention_mask": [[1] * len(block) for block in blocks]}

        fingerprint = Hasher.hash([_CACHE_VERSION, "blocks", tokenized._fingerprint, block_size, separator])
        # One batch holding the whole split: blocks run across document boundaries and only the split's last block
        # may be short (batching in pieces would leave a short block at the end of every piece).
        return tokenized.map(
            join_and_cut,
            batched=True,
            batch_size=None,
            remove_columns=tokenized.column_names,
            desc=f"Cutting {split_name} into blocks of {block_size}",
            new_fingerprint=fingerprint,
            **self._cache_arguments(f"lm-{split_name}-blocks{block_size}", fingerprint),
        )

    def _cache_arguments(self, stem: str, fingerprint: str) -> dict[str, Any]:
        if self.cache_dir is None:
            return {}
        folder = Path(self.cache_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return {"cache_file_name": str(folder / f"{stem}-{fingerprint}.arrow"), "load_from_cache_file": True}

    @staticmethod
    def _statistics(by_source: dict[str, list[str]], tokenized: datasets.Dataset, num_blocks: int) -> SplitStatistics:
        tokens = dict.fromkeys(by_source, 0)
        for source, ids in zip(tokenized["source"], tokenized["input_ids"]):
            tokens[source] += len(ids)
        documents = {source: len(docs) for source, docs in by_source.items()}
        return SplitStatistics(documents, tokens, max(0, sum(documents.values()) - 1), num_blocks)


def build_lm_corpus(
    documents: Mapping[str, Sequence[str]],
    tokenizer: Any,
    block_size: int = 128,
    validation_fraction: float = 0.05,
    seed: int = 0,
    *,
    separator_token_id: int | None = None,
    cache_dir: str | Path | None = None,
) -> datasets.DatasetDict:
    """Build the blocked train/validation LM corpus of ``documents``; shortcut for `LanguageModelingCorpus.build`.

    Args:
        documents: Source name -> its documents, e.g. the output of `read_shared_data_documents`.
        tokenizer: A transformers tokenizer with an ``eos_token_id`` or a ``sep_token_id`` (the document separator).
        block_size: Tokens per block (the last block of a split may be shorter), at least 2.
        validation_fraction: Fraction of every source's documents held out, in (0, 1).
        seed: Seeds the document split.
        separator_token_id: Overrides the separator (see `resolve_separator_token_id`).
        cache_dir: Optional folder for on-disk Arrow caches of the tokenized and blocked splits.

    Returns:
        A `datasets.DatasetDict` with ``train`` and ``validation``, columns ``input_ids`` and ``attention_mask``.

    Raises:
        TypeError: For arguments of the wrong type.
        ValueError: For ``block_size < 2``, ``validation_fraction`` outside (0, 1), an empty ``documents`` mapping,
            a source with fewer than 2 documents or an empty document, or a tokenizer without eos/sep token.

    Example:
        >>> dataset = build_lm_corpus({"gap": gap_texts, "squad": contexts}, tokenizer, block_size=64)  # doctest: +SKIP
        >>> {len(row) for row in dataset["train"]["input_ids"][:-1]}  # doctest: +SKIP
        {64}
    """
    corpus = LanguageModelingCorpus(
        tokenizer,
        block_size=block_size,
        validation_fraction=validation_fraction,
        seed=seed,
        separator_token_id=separator_token_id,
        cache_dir=cache_dir,
    )
    return corpus.build(documents)


def load_lm_corpus_from_shared_data(
    data_dir: str | Path,
    tokenizer: Any,
    block_size: int = 128,
    validation_fraction: float = 0.05,
    seed: int = 0,
    *,
    gap_file: str | Path | None = DEFAULT_GAP_FILE,
    squad_files: Sequence[str | Path] | None = DEFAULT_SQUAD_FILES,
    litbank_dir: str | Path | None = DEFAULT_LITBANK_DIR,
    separator_token_id: int | None = None,
    cache_dir: str | Path | None = None,
) -> datasets.DatasetDict:
    """Read GAP development texts, SQuAD contexts and LitBank books from a data folder and build the LM corpus.

    `read_shared_data_documents` followed by `build_lm_corpus`; see both for the arguments.

    Raises:
        FileNotFoundError: Naming the first missing file or folder.

    Example:
        >>> dataset = load_lm_corpus_from_shared_data("../shared/data", tokenizer, block_size=128)  # doctest: +SKIP
        >>> sorted(dataset)  # doctest: +SKIP
        ['train', 'validation']
    """
    documents = read_shared_data_documents(
        data_dir, gap_file=gap_file, squad_files=squad_files, litbank_dir=litbank_dir
    )
    return build_lm_corpus(
        documents,
        tokenizer,
        block_size=block_size,
        validation_fraction=validation_fraction,
        seed=seed,
        separator_token_id=separator_token_id,
        cache_dir=cache_dir,
    )


def resolve_separator_token_id(tokenizer: Any) -> int:
    """The token put between documents: the tokenizer's ``eos_token_id``, else its ``sep_token_id``.

    End-of-sequence comes first because it is a causal LM's own document boundary (GPT-2's ``<|endoftext|>``);
    BERT-style tokenizers have no eos token and use ``[SEP]``.

    Raises:
        ValueError: If the tokenizer has neither.

    Example:
        >>> class BertLike:
        ...     eos_token_id, sep_token_id = None, 102
        >>> resolve_separator_token_id(BertLike())
        102
    """
    for name in ("eos_token_id", "sep_token_id"):
        token_id = getattr(tokenizer, name, None)
        if token_id is not None:
            return int(token_id)
    raise ValueError(
        f"The tokenizer {type(tokenizer).__name__} has neither an eos nor a sep token to separate documents. Add one "
        "(tokenizer.add_special_tokens({'eos_token': ...})) or pass separator_token_id."
    )


# ------------------------------------------------------------------------------------------------ helpers
def _existing_file(path: str | Path, what: str) -> Path:
    if not isinstance(path, (str, Path)):
        raise TypeError(f"The {what} must be given as a path, got {type(path).__name__}.")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"The {what} {path} does not exist.")
    return path


def _iter_squad_contexts(path: Path):
    with path.open("rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            payload = json.load(handle)
    except UnicodeDecodeError as error:
        raise not_utf8_error(path, "SQuAD JSON file", error) from error
    except (json.JSONDecodeError, OSError) as error:
        raise ValueError(f"{path} is not a (gzipped) SQuAD JSON file: {error}") from error
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise ValueError(f"{path} is not in the SQuAD layout: expected a JSON object with a 'data' list of articles.")
    for article_index, article in enumerate(payload["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ValueError(f"Article {article_index} of {path} has no 'paragraphs' list (SQuAD layout).")
        for paragraph_index, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str):
                raise ValueError(
                    f"Paragraph {paragraph_index} of article {article_index} of {path} has no string 'context'."
                )
            yield context


def _read_conll_documents(path: Path) -> list[str]:
    documents: list[str] = []
    tokens: list[str] | None = None  # the open document's tokens; None outside a document
    name = ""
    with named_decode_errors(path, "CoNLL file"), path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if line.startswith("#begin document"):
                if tokens is not None:
                    raise ValueError(f"{path}:{line_number}: '#begin document' inside the open document {name!r}.")
                tokens, name = [], line[len("#begin document") :].strip()
            elif line.startswith("#end document"):
                if tokens is None:
                    raise ValueError(f"{path}:{line_number}: '#end document' without '#begin document'.")
                if tokens:
                    documents.append(" ".join(tokens))
                else:
                    logger.warning(f"{path}: document {name!r} has no token; skipped.")
                tokens = None
            elif not line.strip():
                continue  # sentence boundary: sentences are joined by a space like tokens
            else:
                columns = line.split("\t") if "\t" in line else line.split()
                if len(columns) < 4:
                    raise ValueError(
                        f"{path}:{line_number}: a token line needs at least 4 columns (the word is the 4th), got "
                        f"{len(columns)}."
                    )
                if tokens is None:
                    raise ValueError(
                        f"{path}:{line_number}: token outside a '#begin document' ... '#end document' block."
                    )
                tokens.append(columns[3])
    if tokens is not None:
        raise ValueError(f"{path}: document {name!r} is not closed by '#end document'.")
    return documents


def _check_fraction(validation_fraction: float) -> None:
    if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, numbers.Real):
        raise TypeError(f"validation_fraction must be a number in (0, 1), got {validation_fraction!r}.")
    if not 0.0 < float(validation_fraction) < 1.0 or math.isnan(validation_fraction):
        raise ValueError(
            f"validation_fraction must be strictly between 0 and 1 (e.g. 0.05), got {validation_fraction}."
        )


def _check_documents(documents: Mapping[str, Sequence[str]]) -> None:
    if not isinstance(documents, Mapping):
        raise TypeError(
            f"documents must be a mapping from source name to a list of texts, got {type(documents).__name__}."
        )
    if not documents:
        raise ValueError("documents is empty; pass at least one source, e.g. {'gap': texts}.")
    for source, docs in documents.items():
        if not isinstance(source, str) or not source:
            raise TypeError(f"Source names must be non-empty strings, got {source!r}.")
        if isinstance(docs, (str, bytes)) or not isinstance(docs, Sequence):
            raise TypeError(
                f"The documents of source {source!r} must be a list of strings, got {type(docs).__name__}"
                + (" (wrap a single text in a list)." if isinstance(docs, str) else ".")
            )
        if not docs:
            raise ValueError(f"Source {source!r} has no documents; leave it out or add documents.")
        for index, doc in enumerate(docs):
            if not isinstance(doc, str):
                raise TypeError(f"Document {index} of source {source!r} is a {type(doc).__name__}, not a string.")
            if not doc.strip():
                raise ValueError(f"Document {index} of source {source!r} is empty; remove empty documents.")


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what decides how `tokenizer` splits text, stable across its calls and processes.

    Hashing the tokenizer object itself is not: calling a fast tokenizer records the padding and truncation of that
    call in its backend (transformers 5.6 does), so a second corpus built in the same process would miss the cache
    of the first. The backend's serialised pipeline (normaliser, pre-tokeniser, model and vocabulary, special
    tokens) without those two call settings, and the wrapper's own settings, are what the fingerprint reads.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (pure Python) tokenizer keeps no per-call state in a backend
        return Hasher.hash(tokenizer)
    pipeline = json.loads(backend.to_str())
    pipeline.pop("padding", None)
    pipeline.pop("truncation", None)
    return Hasher.hash([type(tokenizer).__name__, pipeline, sorted(map(str, tokenizer.all_special_tokens))])
