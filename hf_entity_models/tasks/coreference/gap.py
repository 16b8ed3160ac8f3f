"""GAP (Webster et al., 2018) reader and PeTra training examples.

A GAP row is a Wikipedia snippet with a pronoun and two candidate names A and B, each given as a string and a
0-based character offset into the text, and two labels: does the pronoun corefer with A? with B?

This module turns rows into the inputs of `PetraForCoreference`:

* `load_gap` reads an official TSV file (or a Hub dataset) into a `datasets.Dataset` with snake_case columns and
  checks that every offset points at its mention;
* `GapExampleBuilder` tokenizes the text (no truncation, no inserted tags), maps the character offsets of the
  three mentions to token spans with the fast tokenizer's `offset_mapping`, and builds PeTra's labelled token
  pairs (section 2.5.1 of the paper, plus the implied self-links and the A-B negative pair);
* `prepare_gap_dataset` does both; `gap_gold` extracts the labels for `score_gap`.

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")  # doctest: +SKIP
    >>> dataset = prepare_gap_dataset("gap-validation.tsv", tokenizer)  # doctest: +SKIP
    >>> dataset[0]["candidate_spans"]  # doctest: +SKIP
    [[45, 50], [52, 55]]
"""

from __future__ import annotations

import csv
import functools
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets.fingerprint import Hasher
from transformers.utils import logging

from ...models.petra import LINK_NEGATIVE, LINK_POSITIVE, LINK_SELF
from ...training.progress import progress_bars_for
from .metrics import GapGold

logger = logging.get_logger(__name__)

__all__ = [
    "GAP_COLUMNS",
    "GapExampleBuilder",
    "build_link_pairs",
    "char_span_to_token_span",
    "check_unique_ids",
    "gap_gold",
    "load_gap",
    "prepare_gap_dataset",
    "shared_ids",
]

# Columns of a loaded GAP dataset, in file order (the official header lower-cased, "-" -> "_").
GAP_COLUMNS = (
    "id", "text", "pronoun", "pronoun_offset", "a", "a_offset", "a_coref", "b", "b_offset", "b_coref", "url",
)
_REQUIRED_COLUMNS = tuple(column for column in GAP_COLUMNS if column != "url")
_GAP_FEATURES = datasets.Features(
    {
        "id": datasets.Value("string"),
        "text": datasets.Value("string"),
        "pronoun": datasets.Value("string"),
        "pronoun_offset": datasets.Value("int64"),
        "a": datasets.Value("string"),
        "a_offset": datasets.Value("int64"),
        "a_coref": datasets.Value("bool"),
        "b": datasets.Value("string"),
        "b_offset": datasets.Value("int64"),
        "b_coref": datasets.Value("bool"),
        "url": datasets.Value("string"),
    }
)
# (mention column, offset column, name used in messages)
_MENTIONS = (("a", "a_offset", "A"), ("b", "b_offset", "B"), ("pronoun", "pronoun_offset", "Pronoun"))
_LABELS = {"true": True, "false": False}
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
_FILE_SUFFIXES = {".tsv", ".csv", ".txt", ".gz", ".bz2", ".xz", ".zip"}

Span = tuple[int, int]
# Which token pairs a model is trained on: PeTra's labelled pairs, or the Referential Reader's (see build_link_pairs).
LINK_SCHEMES = ("petra", "refreader")


# ----------------------------------------------------------------------------------------------------- loading
def load_gap(path_or_dataset_id: str | os.PathLike, split: str | None = None) -> datasets.Dataset:
    """Load GAP rows from an official TSV file or a Hub dataset, checking every mention offset.

    Args:
        path_or_dataset_id: A local GAP TSV file (tab separated, official header ``ID Text Pronoun
            Pronoun-offset A A-offset A-coref B B-offset B-coref URL``), or the id of a Hub dataset with the
            same columns (e.g. ``"google-research-datasets/gap"``; needs the network).
        split: Split to load from a Hub dataset (e.g. ``"validation"``). Ignored for a local file.

    Returns:
        A dataset with columns `GAP_COLUMNS`: ``id, text, pronoun, pronoun_offset, a, a_offset, a_coref (bool),
        b, b_offset, b_coref (bool), url``, one row per GAP row, in file order.

    Raises:
        FileNotFoundError: If a local path does not exist.
        ValueError: On a missing column, a label other than TRUE/FALSE, or an offset where the text does not
            hold the mention (the message names the row id).

    Example:
        >>> rows = load_gap("../shared/data/gap/gap-validation.tsv")  # doctest: +SKIP
        >>> len(rows), rows[1]["a"], rows[1]["a_offset"], rows[1]["a_coref"]  # doctest: +SKIP
        (454, 'Ellen', 110, False)
    """
    source = os.fspath(path_or_dataset_id)
    if os.path.isfile(source):
        raw = _load_gap_tsv(Path(source))
    elif os.path.exists(source) or not _looks_like_hub_id(source):
        raise FileNotFoundError(
            f"GAP file {source!r} does not exist (or is not a file); pass the path of a GAP TSV file such as "
            "gap-development.tsv, or a Hub dataset id."
        )
    else:
        raw = _load_gap_from_hub(source, split)
    return _standardise_rows(raw, source)


def check_unique_ids(rows: datasets.Dataset | Sequence[Mapping[str, Any]], where: str) -> None:
    """Refuse GAP rows that hold an id more than once: predictions, gold labels and scores are matched by id, so a
    repeated row would be written twice, or fail scoring at the end of a run.

    Args:
        rows: Rows in the `load_gap` layout (a dataset, or dicts with an ``id``).
        where: What holds the rows, for the message (e.g. ``"--validation gap-validation.tsv"``).

    Raises:
        ValueError: Naming the first repeated id and the rows (1 = the first row) that hold it.

    Example:
        >>> check_unique_ids([{"id": "v-1"}, {"id": "v-2"}], "validation.tsv")
        >>> check_unique_ids([{"id": "v-1"}, {"id": "v-2"}, {"id": "v-1"}], "validation.tsv")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: validation.tsv holds the id 'v-1' twice (rows 1 and 3); every GAP id must appear once ...
    """
    positions: dict[str, list[int]] = {}
    for number, row_id in enumerate(_row_ids(rows), start=1):
        positions.setdefault(row_id, []).append(number)
    repeated = [(row_id, numbers) for row_id, numbers in positions.items() if len(numbers) > 1]
    if not repeated:
        return
    row_id, numbers = repeated[0]
    times = "twice" if len(numbers) == 2 else f"{len(numbers)} times"
    rows_named = f"rows {', '.join(str(number) for number in numbers[:-1])} and {numbers[-1]}"
    others = f"; {len(repeated) - 1} more id(s) repeat too" if len(repeated) > 1 else ""
    raise ValueError(
        f"{where} holds the id {row_id!r} {times} ({rows_named}){others}; every GAP id must appear once "
        "(predictions and scores are matched to rows by id): remove the repeated row or give it an id of its own."
    )


def shared_ids(
    first: datasets.Dataset | Sequence[Mapping[str, Any]], second: datasets.Dataset | Sequence[Mapping[str, Any]]
) -> list[str]:
    """The ids that two sets of GAP rows share, in the order of `second` (e.g. validation rows also trained on).

    Example:
        >>> shared_ids([{"id": "d-1"}, {"id": "d-2"}], [{"id": "v-1"}, {"id": "d-2"}])
        ['d-2']
    """
    known = set(_row_ids(first))
    return list(dict.fromkeys(row_id for row_id in _row_ids(second) if row_id in known))


def _row_ids(rows: datasets.Dataset | Sequence[Mapping[str, Any]]) -> list[str]:
    ids = rows["id"] if isinstance(rows, datasets.Dataset) else [row["id"] for row in rows]
    return [str(row_id) for row_id in ids]


def _looks_like_hub_id(source: str) -> bool:
    """`user/name` or `name`, without a file suffix or path syntax (a typo in a local path stays local)."""
    if source.startswith((".", "~")):
        return False
    return bool(_HUB_ID.match(source)) and Path(source).suffix.lower() not in _FILE_SUFFIXES


def _load_gap_tsv(path: Path) -> datasets.Dataset:
    content = path.read_bytes()
    lines = _read_lines(path, content)
    header = lines[0].split("\t")
    missing = [column for column in _REQUIRED_COLUMNS if column not in {_snake_case(name) for name in header}]
    if missing:
        raise ValueError(
            f"{path}: the header {header} lacks the GAP column(s) {missing}; expected the official tab-separated "
            "header 'ID Text Pronoun Pronoun-offset A A-offset A-coref B B-offset B-coref URL'."
        )
    _check_field_counts(path, header, lines)
    return datasets.load_dataset(
        "csv",
        # `datasets` keys its cache on the path and modification time only: a file edited in place with its mtime
        # restored (`cp -p`, `rsync -t`, `tar`) would be read stale. A config name holding a hash of the bytes
        # keys the cache on the content; unchanged files still load from the cache.
        name=f"gap-{hashlib.sha256(content).hexdigest()[:32]}",
        data_files={"train": str(path.resolve())},
        split="train",
        delimiter="\t",
        # GAP texts contain unbalanced quote characters: any quoting would merge rows.
        quoting=csv.QUOTE_NONE,
        # Read every field as a string: pandas would otherwise turn a name like "Nan" or "NA" into a missing value.
        keep_default_na=False,
        na_filter=False,
        features=datasets.Features({name: datasets.Value("string") for name in header}),
        encoding="utf-8-sig",
    )


def _read_lines(path: Path, content: bytes) -> list[str]:
    """The lines of the file (the header first), after checking that it has a header and at least one row."""
    try:
        # Rows end at "\n" only, as for the CSV reader; str.splitlines would also split at characters such as
        # U+2028 that may occur inside a text.
        lines = [line.rstrip("\r") for line in content.decode("utf-8-sig").split("\n")]
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: the file is not UTF-8 text ({error}); GAP files are UTF-8 TSV files.") from None
    if not lines[0].strip():
        raise ValueError(f"{path}: the file is empty; expected a GAP TSV file with a header row.")
    if not any(line.strip() for line in lines[1:]):
        # `datasets` would only say "Instruction 'train' corresponds to no data".
        raise ValueError(
            f"{path}: the file has a header but no rows; a GAP TSV file needs at least one tab-separated row under "
            "the header (is it a truncated copy?)."
        )
    return lines


def _check_field_counts(path: Path, header: list[str], lines: list[str]) -> None:
    """Every row has the fields of the header (a row may lack only a last, empty URL field): the CSV reader would fill
    a truncated row with empty fields, reported later as a bad label of a row of no file, and refuse a row with more
    fields without naming the file."""
    columns = [_snake_case(name) for name in header]
    needed = max(columns.index(column) for column in _REQUIRED_COLUMNS) + 1
    id_column = columns.index("id")
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if not line or needed <= len(fields) <= len(header):  # the reader skips blank lines
            continue
        row_id = fields[id_column].strip() if id_column < len(fields) else ""
        row = f"the row {row_id!r}" if row_id else "the row"
        if len(fields) < needed:
            problem = f"{row} has {len(fields)} of the {len(header)} tab-separated fields of the header (truncated?)"
        else:
            problem = f"{row} has {len(fields)} tab-separated fields, the header {len(header)} (a tab inside a field?)"
        raise ValueError(
            f"{path}, line {number}: {problem}; every row needs the fields {', '.join(header)}, separated by tabs: "
            "repair or remove the row."
        )


def _load_gap_from_hub(dataset_id: str, split: str | None) -> datasets.Dataset:
    loaded = datasets.load_dataset(dataset_id, split=split)
    if isinstance(loaded, datasets.DatasetDict):
        raise ValueError(
            f"{dataset_id!r} has several splits {list(loaded)}; pass one with split=..., e.g. split='validation'."
        )
    return loaded


def _snake_case(column: str) -> str:
    return column.strip().lower().replace("-", "_").replace(" ", "_")


def _standardise_rows(raw: datasets.Dataset, source: str) -> datasets.Dataset:
    """Rename to `GAP_COLUMNS`, parse labels and offsets, and check every mention offset."""
    raw = raw.rename_columns({name: _snake_case(name) for name in raw.column_names if name != _snake_case(name)})
    missing = [column for column in _REQUIRED_COLUMNS if column not in raw.column_names]
    if missing:
        raise ValueError(f"{source}: the dataset lacks the GAP column(s) {missing}; it has {raw.column_names}.")
    with progress_bars_for(len(raw)):
        return raw.map(
            _standardise_batch,
            batched=True,
            remove_columns=raw.column_names,
            features=_GAP_FEATURES,
            desc="Checking GAP rows",
            new_fingerprint=_map_fingerprint(raw, "standardise"),
        )


def _standardise_batch(batch: dict[str, list]) -> dict[str, list]:
    size = len(batch["id"])
    rows = {
        "id": [str(value).strip() for value in batch["id"]],
        "text": batch["text"],
        "url": batch["url"] if "url" in batch else [""] * size,
    }
    for column in ("pronoun", "a", "b"):
        rows[column] = batch[column]
    for column in ("a_coref", "b_coref"):
        rows[column] = [_parse_label(value, column, row_id) for value, row_id in zip(batch[column], rows["id"])]
    for column in ("pronoun_offset", "a_offset", "b_offset"):
        rows[column] = [_parse_offset(value, column, row_id) for value, row_id in zip(batch[column], rows["id"])]
    for index in range(size):
        for mention_column, offset_column, name in _MENTIONS:
            _check_mention(
                rows["id"][index], rows["text"][index], rows[mention_column][index], rows[offset_column][index], name
            )
    return rows


def _parse_label(value: Any, column: str, row_id: str) -> bool:
    if isinstance(value, bool):
        return value
    label = _LABELS.get(str(value).strip().lower())
    if label is None:
        raise ValueError(f"GAP row {row_id!r}: column {column} must be TRUE or FALSE, got {value!r}.")
    return label


def _parse_offset(value: Any, column: str, row_id: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"GAP row {row_id!r}: column {column} must be a 0-based character offset (an integer), got {value!r}."
        ) from None


def _check_mention(row_id: str, text: str, mention: str, offset: int, name: str) -> None:
    """Raise unless `text` holds `mention` at `offset`: a wrong offset would silently train on the wrong tokens."""
    if not mention:
        raise ValueError(f"GAP row {row_id!r}: the {name} mention is empty; every row needs A, B and a pronoun.")
    found = text[offset : offset + len(mention)] if 0 <= offset <= len(text) else ""
    if found != mention:
        raise ValueError(
            f"GAP row {row_id!r}: {name} mention {mention!r} is not at character offset {offset}; the text holds "
            f"{found!r} there (text length {len(text)}). Fix the {name}-offset column: offsets are 0-based "
            "character offsets into Text."
        )


# ------------------------------------------------------------------------------------------------ token spans
def char_span_to_token_span(offset_mapping: Sequence[Sequence[int]], char_start: int, char_end: int) -> Span:
    """Token span ``[start, end)`` of every token that overlaps the characters ``[char_start, char_end)``.

    Special tokens have the offsets ``(0, 0)`` and, being empty, never overlap anything; a word piece that is only
    partly inside the span (e.g. ``"leach"`` of ``"Leach's"``) is included.

    Args:
        offset_mapping: ``(start, end)`` character offsets of every token, as returned by a fast tokenizer with
            ``return_offsets_mapping=True`` (a list of pairs, an array or a tensor of shape ``(T, 2)``).
        char_start: First character of the span.
        char_end: One past the last character of the span (``char_start + len(mention)``).

    Returns:
        ``(first_token, last_token + 1)``.

    Raises:
        ValueError: If the character span is empty or no token overlaps it (e.g. it was truncated away).

    Example:
        >>> char_span_to_token_span([(0, 0), (0, 7), (8, 13), (14, 17), (0, 0)], 0, 13)
        (1, 3)
    """
    if char_end <= char_start:
        raise ValueError(f"The character span [{char_start}, {char_end}) is empty; char_end must exceed char_start.")
    overlapping = [
        index
        for index, (token_start, token_end) in enumerate(_offset_pairs(offset_mapping))
        if token_start < char_end and token_end > char_start
    ]
    if not overlapping:
        raise ValueError(
            f"No token overlaps the characters [{char_start}, {char_end}); the text was probably truncated before "
            "them. Tokenize without truncation (long documents are encoded in windows by the model)."
        )
    return overlapping[0], overlapping[-1] + 1


def _offset_pairs(offset_mapping: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    if hasattr(offset_mapping, "tolist"):  # numpy array or torch tensor
        offset_mapping = offset_mapping.tolist()
    return [(int(start), int(end)) for start, end in offset_mapping]


# ----------------------------------------------------------------------------------------------- link pairs
def build_link_pairs(
    a_span: Span, b_span: Span, pronoun_span: Span, a_coref: bool, b_coref: bool, scheme: str = "petra"
) -> tuple[list[list[int]], list[int]]:
    """The labelled token pairs of one GAP row, for PeTra or the Referential Reader (authors' code of each).

    With ``scheme="petra"`` (PeTra section 2.5.1), in this order:

    1. self-links: for A, B and the pronoun, (first token, every later token of the span) with `LINK_SELF`;
    2. every (A token, pronoun token) pair: `LINK_POSITIVE` if `a_coref` else `LINK_NEGATIVE`;
    3. every (B token, pronoun token) pair, likewise with `b_coref`;
    4. every (A token, B token) pair: `LINK_NEGATIVE` (the two names are different people by design).

    With ``scheme="refreader"`` (Referential Reader section 2.4): self-links join EVERY two tokens of a span
    ("both part of the same mention span"), then steps 2 and 3; A-B pairs are not labelled, because the reader's
    loss already counts every unlabelled pair as a low-weight negative.

    Every pair is ordered (earlier token, later token): the pronoun may come before the names (cataphora).

    Args:
        a_span, b_span, pronoun_span: Token spans ``[start, end)``.
        a_coref, b_coref: GAP labels of the pronoun with A and with B.
        scheme: ``"petra"`` or ``"refreader"`` (`LINK_SCHEMES`); a model names its own in `gap_link_scheme`.

    Returns:
        ``(link_pairs, link_labels)``: ``[[t1, t2], ...]`` with ``t1 < t2`` and one label per pair.

    Raises:
        ValueError: If a span is empty or two spans share a token (a pair (t, t) has no meaning).

    Example:
        >>> build_link_pairs((1, 3), (4, 5), (6, 7), a_coref=True, b_coref=False)
        ([[1, 2], [1, 6], [2, 6], [4, 6], [1, 4], [2, 4]], [2, 1, 1, 0, 0, 0])
        >>> build_link_pairs((1, 4), (5, 6), (7, 8), a_coref=True, b_coref=False, scheme="refreader")
        ([[1, 2], [1, 3], [2, 3], [1, 7], [2, 7], [3, 7], [5, 7]], [2, 2, 2, 1, 1, 1, 0])
    """
    if scheme not in LINK_SCHEMES:
        raise ValueError(f"scheme must be one of {LINK_SCHEMES}, got {scheme!r}.")
    spans = {
        "A": _checked_span(a_span, "A"),
        "B": _checked_span(b_span, "B"),
        "Pronoun": _checked_span(pronoun_span, "Pronoun"),
    }
    _check_disjoint(spans)
    pairs: list[list[int]] = []
    labels: list[int] = []

    def add_span_pairs(first: Span, second: Span, label: int) -> None:
        for first_token in range(*first):
            for second_token in range(*second):
                pairs.append(sorted((first_token, second_token)))
                labels.append(label)

    for start, end in spans.values():
        # PeTra links the first token to the later ones; the Referential Reader links every two tokens.
        earlier_tokens = range(start, end) if scheme == "refreader" else range(start, start + 1)
        for earlier_token in earlier_tokens:
            for later_token in range(earlier_token + 1, end):
                pairs.append([earlier_token, later_token])
                labels.append(LINK_SELF)
    add_span_pairs(spans["A"], spans["Pronoun"], LINK_POSITIVE if a_coref else LINK_NEGATIVE)
    add_span_pairs(spans["B"], spans["Pronoun"], LINK_POSITIVE if b_coref else LINK_NEGATIVE)
    if scheme == "petra":
        add_span_pairs(spans["A"], spans["B"], LINK_NEGATIVE)
    return pairs, labels


def _checked_span(span: Sequence[int], name: str) -> Span:
    start, end = (int(value) for value in span)
    if not 0 <= start < end:
        raise ValueError(f"The {name} token span {[start, end]} is not a non-empty span [start, end) with start >= 0.")
    return start, end


def _check_disjoint(spans: Mapping[str, Span]) -> None:
    names = list(spans)
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            (start_1, end_1), (start_2, end_2) = spans[first], spans[second]
            if start_1 < end_2 and start_2 < end_1:
                raise ValueError(
                    f"The {first} token span {[start_1, end_1]} and the {second} token span {[start_2, end_2]} share "
                    "a token, so their link would pair a token with itself; the mentions overlap in the text or "
                    "fall inside one word piece."
                )


# ------------------------------------------------------------------------------------------------- examples
class GapExampleBuilder:
    """Turn GAP rows into `PetraForCoreference` inputs; use with ``dataset.map(builder, batched=True)``.

    Each row's text is tokenized with special tokens and without truncation (the model encodes long documents in
    windows). The mentions' character offsets are mapped to token spans with the tokenizer's ``offset_mapping``
    (no tags are inserted into the text), so a name split into several words or word pieces gets all its tokens.

    Added columns: ``input_ids``, ``attention_mask``, ``special_tokens_mask``, ``pronoun_spans`` ``[s, e]``,
    ``candidate_spans`` ``[[sA, eA], [sB, eB]]``, ``link_pairs``, ``link_labels`` (see `build_link_pairs`) and
    ``gap_labels`` ``[a_coref, b_coref]`` as ints. The original columns are kept (scoring and the pipeline need
    them; the Trainer drops columns that are not forward arguments).

    Args:
        tokenizer: A fast tokenizer (it must return offset mappings) of the model's encoder.
        link_scheme: Which labelled pairs to build (`build_link_pairs`): ``"petra"`` or ``"refreader"``; use the
            model's ``gap_link_scheme``.

    Raises:
        TypeError: If the tokenizer is not a fast tokenizer.
        ValueError: If the link scheme is unknown.

    Example:
        >>> builder = GapExampleBuilder(tokenizer)  # doctest: +SKIP
        >>> examples = load_gap("gap-validation.tsv").map(builder, batched=True)  # doctest: +SKIP
    """

    def __init__(self, tokenizer: Any, link_scheme: str = "petra"):
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(
                f"GapExampleBuilder needs a fast tokenizer (for offset mappings), got {type(tokenizer).__name__}; "
                "load it with AutoTokenizer.from_pretrained(..., use_fast=True)."
            )
        if link_scheme not in LINK_SCHEMES:
            raise ValueError(f"link_scheme must be one of {LINK_SCHEMES}, got {link_scheme!r}.")
        self.tokenizer = tokenizer
        self.link_scheme = link_scheme

    def __call__(self, rows: Mapping[str, Any]) -> dict[str, list]:
        """Build the model columns for a batch of rows (dict of lists) or a single row (dict of values)."""
        if isinstance(rows["text"], str):
            batch = self({column: [value] for column, value in rows.items()})
            return {column: values[0] for column, values in batch.items()}
        encodings = self.tokenizer(
            list(rows["text"]),
            add_special_tokens=True,
            truncation=False,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            # The "longer than the model's maximum length" warning does not apply: PeTra encodes in windows.
            verbose=False,
        )
        columns: dict[str, list] = {
            "input_ids": encodings["input_ids"],
            "attention_mask": encodings["attention_mask"],
            "special_tokens_mask": encodings["special_tokens_mask"],
        }
        examples = [
            self._example({column: rows[column][index] for column in _REQUIRED_COLUMNS}, offsets, self.link_scheme)
            for index, offsets in enumerate(encodings["offset_mapping"])
        ]
        for column in ("pronoun_spans", "candidate_spans", "link_pairs", "link_labels", "gap_labels"):
            columns[column] = [example[column] for example in examples]
        return columns

    @staticmethod
    def _example(row: Mapping[str, Any], offsets: Sequence[Sequence[int]], link_scheme: str) -> dict[str, list]:
        row_id = str(row["id"])
        spans = {}
        for mention_column, offset_column, name in _MENTIONS:
            mention, offset = row[mention_column], int(row[offset_column])
            # Rows may come from a user's dataset that skipped load_gap: check here too.
            _check_mention(row_id, row["text"], mention, offset, name)
            try:
                spans[name] = char_span_to_token_span(offsets, offset, offset + len(mention))
            except ValueError as error:
                raise ValueError(f"GAP row {row_id!r}, {name} mention {mention!r}: {error}") from None
        a_coref, b_coref = bool(row["a_coref"]), bool(row["b_coref"])
        try:
            link_pairs, link_labels = build_link_pairs(
                spans["A"], spans["B"], spans["Pronoun"], a_coref, b_coref, scheme=link_scheme
            )
        except ValueError as error:
            raise ValueError(
                f"GAP row {row_id!r} (A {row['a']!r} at {row['a_offset']}, B {row['b']!r} at {row['b_offset']}, "
                f"Pronoun {row['pronoun']!r} at {row['pronoun_offset']}): {error}"
            ) from None
        return {
            "pronoun_spans": list(spans["Pronoun"]),
            "candidate_spans": [list(spans["A"]), list(spans["B"])],
            "link_pairs": link_pairs,
            "link_labels": link_labels,
            "gap_labels": [int(a_coref), int(b_coref)],
        }


def hold_out_gap_rows(
    path_or_dataset: str | os.PathLike | datasets.Dataset, num_held_out: int = 400, seed: int = 0
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Split GAP rows at random into a training part and a held-out part for model and threshold selection.

    Choosing the best epoch and the decision threshold on GAP validation and then reporting validation F1 scores
    the selection itself. Holding out part of GAP development for selection leaves validation as a clean test.

    Args:
        path_or_dataset: A GAP TSV path or Hub id (see `load_gap`), or rows in the `load_gap` layout.
        num_held_out: Rows in the held-out part (default 400 of development's 2,000).
        seed: Seed of the random split (the same seed always gives the same parts).

    Returns:
        `(training_rows, held_out_rows)`, both in the `load_gap` layout.

    Example:
        >>> train, selection = hold_out_gap_rows("gap-development.tsv", num_held_out=400)  # doctest: +SKIP
        >>> len(train), len(selection)  # doctest: +SKIP
        (1600, 400)
    """
    rows = path_or_dataset if isinstance(path_or_dataset, datasets.Dataset) else load_gap(path_or_dataset)
    if not 0 < num_held_out < len(rows):
        raise ValueError(
            f"num_held_out must be between 1 and {len(rows) - 1} (the rows minus one), got {num_held_out}."
        )
    parts = rows.train_test_split(test_size=num_held_out, shuffle=True, seed=seed)
    return parts["train"], parts["test"]


def prepare_gap_dataset(
    path_or_dataset: str | os.PathLike | datasets.Dataset,
    tokenizer: Any,
    split: str | None = None,
    link_scheme: str = "petra",
) -> datasets.Dataset:
    """Load GAP rows (unless given a dataset) and add the model columns of `GapExampleBuilder`.

    Args:
        path_or_dataset: A GAP TSV path or Hub id (see `load_gap`), or a dataset already in the `load_gap` layout.
        tokenizer: A fast tokenizer of the model's encoder.
        split: Split of a Hub dataset.
        link_scheme: Labelled pairs to build: ``"petra"`` or ``"refreader"`` (the model's ``gap_link_scheme``).

    Returns:
        The rows with their original columns plus the model columns.

    Example:
        >>> train = prepare_gap_dataset("gap-development.tsv", tokenizer)  # doctest: +SKIP
        >>> len(train)  # doctest: +SKIP
        2000
    """
    builder = GapExampleBuilder(tokenizer, link_scheme=link_scheme)
    rows = path_or_dataset if isinstance(path_or_dataset, datasets.Dataset) else load_gap(path_or_dataset, split)
    with progress_bars_for(len(rows)):  # GAP's 2,000 rows tokenise in a second or two: no bar
        return rows.map(
            builder, batched=True, desc="Tokenizing GAP", new_fingerprint=_map_fingerprint(rows, "build", builder)
        )


@functools.cache
def _code_version() -> str:
    """Hash of this module's source and the link labels it writes.

    `datasets` fingerprints a map by pickling the function, which refers to module-level helpers by name only:
    after a change to this file it would reuse examples cached by the old code. Hashing the source prevents that.
    """
    source = Path(__file__).read_bytes() + repr((LINK_NEGATIVE, LINK_POSITIVE, LINK_SELF)).encode()
    return hashlib.sha256(source).hexdigest()


def _map_fingerprint(rows: datasets.Dataset, step: str, *parts: Any) -> str:
    return Hasher.hash((rows._fingerprint, step, _code_version(), *parts))


def gap_gold(dataset: datasets.Dataset | Sequence[Mapping[str, Any]]) -> list[GapGold]:
    """Gold labels of GAP rows for `score_gap` / `sweep_threshold`.

    Args:
        dataset: Rows with the columns ``id``, ``pronoun``, ``a_coref`` and ``b_coref`` (e.g. from `load_gap` or
            `prepare_gap_dataset`), or a list of such dicts.

    Returns:
        One `GapGold` per row, in order.

    Example:
        >>> gap_gold([{"id": "v-1", "pronoun": "She", "a_coref": False, "b_coref": True}])
        [GapGold(example_id='v-1', pronoun='She', a_coref=False, b_coref=True)]
    """
    if isinstance(dataset, datasets.Dataset):
        columns = dataset.select_columns(["id", "pronoun", "a_coref", "b_coref"]).to_dict()
        rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    else:
        rows = dataset
    return [
        GapGold(
            example_id=str(row["id"]),
            pronoun=row["pronoun"],
            a_coref=bool(row["a_coref"]),
            b_coref=bool(row["b_coref"]),
        )
        for row in rows
    ]
