"""GLUE MRPC and RTE for DefinitionEMB's downstream evaluation (paper Section 6.2, Appendices B, G, H).

* `read_glue` reads the GLUE TSV files (MRPC: ``train.tsv``, ``dev.tsv`` and the labelled
  ``msr_paraphrase_test.txt``; RTE: ``train.tsv``, ``dev.tsv``) into a `datasets.Dataset` with the columns
  ``sentence1``, ``sentence2``, ``label`` and ``idx``, checking every row;
* `split_off_selection` holds out a seeded, label-stratified part of a training set for choosing hyper-parameters
  (alpha, the epoch): RTE's test labels are not public, so its dev set is the test set and the selection set comes
  out of train;
* `task_texts` gives every sentence of a dataset, what the task vocabulary V_task is built from;
* `glue_features` tokenises the sentence pairs (truncation is counted and logged, never silent).
* fine-tuning (the paper's RoBERTa recipe) and turning a base-model checkpoint into a classifier are in
  `glue_fine_tuning`.

Example:
    >>> mrpc = read_glue("../shared/data/glue", "mrpc", "train")  # doctest: +SKIP
    >>> len(mrpc), mrpc.column_names  # doctest: +SKIP
    (3668, ['sentence1', 'sentence2', 'label', 'idx'])
    >>> rte = read_glue("../shared/data/glue", "rte", "train")  # doctest: +SKIP
    >>> train, selection = split_off_selection(rte, 0.1, seed=0)  # doctest: +SKIP
    >>> len(train), len(selection)  # doctest: +SKIP
    (2241, 249)
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers.utils import logging

from ...training.progress import progress_bars_for


logger = logging.get_logger(__name__)

__all__ = [
    "GLUE_LABEL_NAMES",
    "GLUE_TASKS",
    "glue_features",
    "glue_features_schema",
    "pair_lengths",
    "read_glue",
    "split_off_selection",
    "task_texts",
]

GLUE_TASKS = ("mrpc", "rte")
# Label names in GLUE's (and the Hub's `glue` dataset's) order: the label id is the index.
GLUE_LABEL_NAMES = {
    "mrpc": ("not_equivalent", "equivalent"),
    "rte": ("entailment", "not_entailment"),
}
_MRPC_HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
_RTE_HEADER = ("index", "sentence1", "sentence2", "label")
_MRPC_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "msr_paraphrase_test.txt"}
_RTE_FILES = {"train": "train.tsv", "dev": "dev.tsv"}
_SPLIT_ALIASES = {"train": "train", "dev": "dev", "validation": "dev", "test": "test"}
_TEXT_COLUMNS = ("sentence1", "sentence2")


def glue_features_schema(task: str) -> datasets.Features:
    """The `datasets.Features` of a dataset read by `read_glue` for `task` ("mrpc" or "rte").

    Example:
        >>> schema = glue_features_schema("RTE")
        >>> list(schema), schema["label"].names
        (['sentence1', 'sentence2', 'label', 'idx'], ['entailment', 'not_entailment'])
    """
    task = normalise_glue_task(task)
    return datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(GLUE_LABEL_NAMES[task])),
            "idx": datasets.Value("int32"),
        }
    )


# ----------------------------------------------------------------------------------------------------- reading
def read_glue(folder: str | os.PathLike, task: str, split: str) -> datasets.Dataset:
    """Read one split of GLUE MRPC or RTE from its TSV files, checking every row.

    The files are read as GLUE's own readers do: tab-separated, UTF-8 with or without a byte-order mark, and quotes
    are ordinary characters (``csv.QUOTE_NONE``: a sentence that starts with ``"`` keeps it, and no row swallows the
    next one).

    * MRPC: ``train.tsv`` (3,668 pairs) and ``dev.tsv`` (408) in GLUE's layout (``Quality``, ``#1 ID``, ``#2 ID``,
      ``#1 String``, ``#2 String``); split ``"test"`` reads the LABELLED ``msr_paraphrase_test.txt`` (1,725 pairs,
      the same layout), because GLUE's ``test.tsv`` has no labels. Label 1 = paraphrase ("equivalent").
    * RTE: ``train.tsv`` (2,490) and ``dev.tsv`` (277) with ``index``, ``sentence1``, ``sentence2``, ``label``;
      ``entailment`` -> 0 and ``not_entailment`` -> 1 (GLUE's label order). There is no labelled RTE test set.

    Args:
        folder: The GLUE folder holding ``MRPC/`` and ``RTE/`` (any capitalisation), or the task's own folder.
        task: ``"mrpc"`` or ``"rte"`` (case-insensitive).
        split: ``"train"``, ``"dev"`` (or ``"validation"``) or ``"test"``.

    Returns:
        One row per sentence pair, in file order: ``sentence1``, ``sentence2`` (str), ``label`` (int, a
        `datasets.ClassLabel` whose names are `GLUE_LABEL_NAMES[task]`) and ``idx`` (the row's position in the file
        for MRPC, the ``index`` column for RTE).

    Raises:
        ValueError: On an unknown task or split, on RTE ``"test"`` (its labels are not public), or on a malformed
            file: a wrong header, a row with the wrong number of fields, an unknown label, an empty sentence or a
            non-integer index. The message names the file and line.
        FileNotFoundError: If the split's file is not in the folder.

    Example:
        >>> dev = read_glue("../shared/data/glue", "rte", "dev")  # doctest: +SKIP
        >>> dev[0]["label"], dev.features["label"].int2str(dev[0]["label"])  # doctest: +SKIP
        (1, 'not_entailment')
    """
    task = normalise_glue_task(task)
    split_name = _SPLIT_ALIASES.get(str(split).lower())
    if split_name is None:
        raise ValueError(f"Unknown GLUE split {split!r}; use 'train', 'dev' (or 'validation') or 'test'.")
    if task == "rte" and split_name == "test":
        raise ValueError(
            "The GLUE test labels for RTE are not public (its test.tsv has no label column), so RTE has no labelled "
            "test split. Use RTE dev as the test set and hold out part of train for choosing hyper-parameters "
            "instead: `train, selection = split_off_selection(read_glue(folder, 'rte', 'train'), 0.1, seed=0)`."
        )
    task_folder = _task_folder(Path(folder), task)
    files = _MRPC_FILES if task == "mrpc" else _RTE_FILES
    path = task_folder / files[split_name]
    if not path.is_file():
        raise FileNotFoundError(
            f"GLUE {task.upper()} {split_name} file {path} does not exist; pass the folder that holds the GLUE "
            f"{task.upper()} files ({', '.join(files.values())}) or its parent."
        )
    rows = _read_mrpc_rows(path) if task == "mrpc" else _read_rte_rows(path)
    names = ("sentence1", "sentence2", "label", "idx")
    columns = {name: [row[position] for row in rows] for position, name in enumerate(names)}
    logger.info("Read %d %s %s pairs from %s", len(rows), task.upper(), split_name, path)
    return datasets.Dataset.from_dict(columns, features=glue_features_schema(task))


def normalise_glue_task(task: str) -> str:
    name = str(task).lower()
    if name not in GLUE_TASKS:
        raise ValueError(f"Unknown GLUE task {task!r}; this reader knows {', '.join(GLUE_TASKS)} (case-insensitive).")
    return name


def _task_folder(folder: Path, task: str) -> Path:
    """The folder holding the task's files: `folder/<TASK>` in any capitalisation, else `folder` itself."""
    if folder.is_dir():
        for child in folder.iterdir():
            if child.is_dir() and child.name.lower() == task:
                return child
    return folder


def _tsv_rows(path: Path):
    """(line number, fields) of every line of a GLUE TSV file, header included; a BOM is dropped."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        # QUOTE_NONE: GLUE's quotes are literal text, and with it one record is exactly one line, so line_num is
        # the line a person finds in an editor.
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        for fields in reader:
            yield reader.line_num, fields


def _check_header(path: Path, line: int, fields: list[str], expected: tuple[str, ...]) -> None:
    if tuple(field.strip() for field in fields) != expected:
        raise ValueError(
            f"{path}:{line}: the header is {fields!r}, expected the GLUE columns {list(expected)!r}; is this the "
            "right file for the task?"
        )


def _check_fields(path: Path, line: int, fields: list[str], expected: tuple[str, ...]) -> None:
    if len(fields) != len(expected):
        raise ValueError(
            f"{path}:{line}: expected {len(expected)} tab-separated fields ({', '.join(expected)}), found "
            f"{len(fields)}; a stray tab or a line break inside a sentence breaks the row, fix the file."
        )


def _sentence(path: Path, line: int, value: str, column: str) -> str:
    if not value.strip():
        raise ValueError(f"{path}:{line}: the {column} field is empty; every GLUE pair needs two sentences.")
    return value


def _read_mrpc_rows(path: Path) -> list[tuple[str, str, int, int]]:
    rows = []
    for line, fields in _tsv_rows(path):
        if line == 1:
            _check_header(path, line, fields, _MRPC_HEADER)
            continue
        if not fields:
            continue  # a trailing empty line
        _check_fields(path, line, fields, _MRPC_HEADER)
        quality, _, _, first, second = fields
        if quality not in ("0", "1"):
            raise ValueError(f"{path}:{line}: the Quality (label) field is {quality!r}; MRPC labels are 0 or 1.")
        first = _sentence(path, line, first, "#1 String")
        second = _sentence(path, line, second, "#2 String")
        rows.append((first, second, int(quality), len(rows)))
    return rows


def _read_rte_rows(path: Path) -> list[tuple[str, str, int, int]]:
    label_ids = {name: label for label, name in enumerate(GLUE_LABEL_NAMES["rte"])}
    rows = []
    for line, fields in _tsv_rows(path):
        if line == 1:
            if tuple(fields) == _RTE_HEADER[:3]:
                raise ValueError(
                    f"{path}:{line}: this RTE file has no label column (GLUE's test.tsv); its labels are not public. "
                    "Hold out part of train for choosing hyper-parameters (`split_off_selection`)."
                )
            _check_header(path, line, fields, _RTE_HEADER)
            continue
        if not fields:
            continue
        _check_fields(path, line, fields, _RTE_HEADER)
        index, first, second, label = fields
        if label not in label_ids:
            raise ValueError(
                f"{path}:{line}: the label is {label!r}; RTE labels are {' or '.join(GLUE_LABEL_NAMES['rte'])}."
            )
        try:
            row_index = int(index)
        except ValueError:
            raise ValueError(f"{path}:{line}: the index field is {index!r}, not an integer.") from None
        first = _sentence(path, line, first, "sentence1")
        second = _sentence(path, line, second, "sentence2")
        rows.append((first, second, label_ids[label], row_index))
    return rows


# ----------------------------------------------------------------------------------------------------- selection
def split_off_selection(
    dataset: datasets.Dataset, fraction_or_size: float | int, seed: int = 0, *, stratify: bool = True
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Hold out a seeded part of a training set for choosing hyper-parameters (alpha, the epoch).

    The paper tuned alpha on the validation set and reported dev results (Appendix H); here the dev set serves as the
    test set where no labelled test set exists (RTE), so the selection set has to come out of train. Both parts keep
    file order; the same dataset, size and seed always give the same parts.

    Args:
        dataset: A dataset with a ``label`` column (e.g. from `read_glue`).
        fraction_or_size: A float in (0, 1): the share of rows to hold out (rounded to the nearest row, at least 1);
            an int >= 1: the number of rows.
        seed: Seed of the random choice.
        stratify: Keep the label proportions of `dataset` in both parts (largest-remainder rounding per label).

    Returns:
        ``(train, selection)``: disjoint, together exactly `dataset`.

    Raises:
        ValueError: If the size is not in range (both parts must keep at least one row) or there is no label column
            while `stratify` is set.
        TypeError: If `fraction_or_size` is not a number (or is a bool).

    Example:
        >>> toy = datasets.Dataset.from_dict({"sentence1": list("abcdefghij"), "sentence2": list("ABCDEFGHIJ"),
        ...                                  "label": [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]})
        >>> train, selection = split_off_selection(toy, 0.5, seed=0)
        >>> len(train), len(selection), sorted(selection["label"])
        (5, 5, [0, 0, 0, 1, 1])
    """
    total = len(dataset)
    size = _selection_size(fraction_or_size, total)
    rng = np.random.default_rng(seed)
    order = rng.permutation(total)
    if stratify:
        if "label" not in dataset.column_names:
            raise ValueError("split_off_selection(stratify=True) needs a 'label' column; pass stratify=False.")
        labels = np.asarray(dataset["label"])[order]
        chosen = _stratified_choice(order, labels, size)
    else:
        chosen = order[:size]
    in_selection = np.zeros(total, dtype=bool)
    in_selection[chosen] = True
    selection_indices = np.flatnonzero(in_selection).tolist()
    train_indices = np.flatnonzero(~in_selection).tolist()
    return dataset.select(train_indices), dataset.select(selection_indices)


def _selection_size(fraction_or_size: float | int, total: int) -> int:
    if isinstance(fraction_or_size, bool) or not isinstance(fraction_or_size, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"fraction_or_size must be a float in (0, 1) or an int number of rows, got {fraction_or_size!r}."
        )
    if isinstance(fraction_or_size, (float, np.floating)):
        if not 0.0 < fraction_or_size < 1.0:
            raise ValueError(
                f"A selection fraction must lie in (0, 1), got {fraction_or_size}; pass an int for a number of rows."
            )
        size = max(1, int(round(fraction_or_size * total)))
    else:
        size = int(fraction_or_size)
    if not 1 <= size < total:
        raise ValueError(
            f"Cannot hold out {size} of {total} rows: both the training part and the selection part need at least "
            "one row."
        )
    return size


def _stratified_choice(order: np.ndarray, labels: np.ndarray, size: int) -> np.ndarray:
    """`size` positions from `order`, each label's share matching its share in `labels` (largest remainder)."""
    values, counts = np.unique(labels, return_counts=True)
    exact = counts * size / len(labels)
    quotas = np.floor(exact).astype(int)
    # Hand the rows lost to rounding down to the labels with the largest remainders (ties: the more frequent label).
    for position in np.lexsort((-counts, -(exact - quotas)))[: size - quotas.sum()]:
        quotas[position] += 1
    chosen = [order[labels == value][:quota] for value, quota in zip(values, quotas)]
    return np.concatenate(chosen)


# ----------------------------------------------------------------------------------------------------- features
def task_texts(dataset: datasets.Dataset) -> list[str]:
    """Every sentence of a GLUE dataset, both columns, pair by pair: the text the task vocabulary V_task (the tokens
    that appear in the fine-tuning data, Section 5) is built from.

    Example:
        >>> pairs = datasets.Dataset.from_dict({"sentence1": ["A cat sat.", "Rain"], "sentence2": ["It sat.", "Sun"],
        ...                                     "label": [1, 0]})
        >>> task_texts(pairs)
        ['A cat sat.', 'It sat.', 'Rain', 'Sun']
    """
    missing = [name for name in _TEXT_COLUMNS if name not in dataset.column_names]
    if missing:
        raise ValueError(
            f"task_texts needs the columns {list(_TEXT_COLUMNS)}, the dataset lacks {missing} (it has "
            f"{dataset.column_names}); read it with `read_glue`."
        )
    return [text for pair in zip(dataset["sentence1"], dataset["sentence2"]) for text in pair]


def pair_lengths(dataset: datasets.Dataset, tokenizer: Any, batch_size: int = 1000) -> list[int]:
    """The untruncated length in tokens (special tokens included) of every sentence pair of `dataset`.

    Example:
        >>> from hf_entity_models.tasks.embeddings.glue import pair_lengths  # doctest: +SKIP
        >>> sum(pair_lengths(read_glue("../shared/data/glue", "mrpc", "train"), tokenizer)) / 3668  # doctest: +SKIP
    """
    lengths: list[int] = []
    for start in range(0, len(dataset), batch_size):
        batch = dataset[start : start + batch_size]
        encoded = tokenizer(batch["sentence1"], batch["sentence2"], truncation=False, verbose=False)
        lengths.extend(len(ids) for ids in encoded["input_ids"])
    return lengths


def glue_features(dataset: datasets.Dataset, tokenizer: Any, max_length: int = 128) -> datasets.Dataset:
    """Tokenise the sentence pairs of a GLUE dataset for a sequence classifier.

    Pairs longer than `max_length` tokens are truncated ``"longest_first"`` (tokens come off the longer sentence),
    as every GLUE recipe does; how many were truncated is logged as a warning, never silent. Padding is left to the
    collator (`DataCollatorWithPadding`), so batches are only as long as their longest pair.

    Args:
        dataset: Columns ``sentence1``, ``sentence2`` and ``label`` (from `read_glue`).
        tokenizer: The model's tokenizer (it adds the special tokens and, for BERT, ``token_type_ids``).
        max_length: Longest pair in tokens, special tokens included.

    Returns:
        The tokenizer's columns (``input_ids``, ``attention_mask``, ...) plus ``label`` and ``idx``; the sentence
        columns are dropped.

    Raises:
        ValueError: If a text column is missing or `max_length` cannot hold the special tokens of a pair.
    """
    missing = [name for name in (*_TEXT_COLUMNS, "label") if name not in dataset.column_names]
    if missing:
        raise ValueError(f"glue_features needs the columns sentence1, sentence2, label; the dataset lacks {missing}.")
    special = tokenizer.num_special_tokens_to_add(pair=True)
    if max_length <= special + 1:
        raise ValueError(
            f"max_length={max_length} cannot hold a sentence pair: the tokenizer adds {special} special tokens; "
            "use at least 128 as GLUE recipes do."
        )
    truncated = sum(length > max_length for length in pair_lengths(dataset, tokenizer))
    if truncated:
        logger.warning(
            "%d of %d sentence pairs are longer than max_length=%d tokens and are truncated 'longest_first' (as GLUE "
            "recipes do); pass a larger max_length to keep them whole.",
            truncated,
            len(dataset),
            max_length,
        )
    else:
        logger.info("No sentence pair of %d is longer than max_length=%d tokens.", len(dataset), max_length)

    def tokenize(batch: Mapping[str, list]) -> Any:
        return tokenizer(batch["sentence1"], batch["sentence2"], truncation="longest_first", max_length=max_length)

    with progress_bars_for(len(dataset)):
        return dataset.map(
            tokenize, batched=True, remove_columns=list(_TEXT_COLUMNS), desc="Tokenising sentence pairs"
        )

