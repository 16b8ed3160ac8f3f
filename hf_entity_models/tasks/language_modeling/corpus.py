"""Unlabelled text for left-to-right language-model pre-training (Referential Reader, section 3).

The Referential Reader is pre-trained as a language model before coreference training. The paper used the
Wikipedia pages behind GAP; those are not available, so this module builds a stand-in corpus from texts that are
(GAP development texts, SQuAD contexts, LitBank books, read by `corpus_readers`), with NO labels used.

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

from .corpus_readers import DEFAULT_GAP_FILE, DEFAULT_LITBANK_DIR, DEFAULT_SQUAD_FILES, read_shared_data_documents

logger = logging.get_logger(__name__)

__all__ = [
    "LanguageModelingCorpus",
    "SplitStatistics",
    "build_lm_corpus",
    "load_lm_corpus_from_shared_data",
    "resolve_separator_token_id",
    "split_documents_by_source",
]

# Bumped whenever the tokenisation or blocking below changes, so on-disk caches written by an older version are
# never reused.
_CACHE_VERSION = "lm-corpus-v1"


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
