"""Definition data for DefinitionEMB: readers, number words, the prompt dataset and the validation split (Section 6.1).

The paper trains on 1.46M English Wiktionary definitions, holds out 10,000 for validation, and adds a definition for
every number in the vocabulary ("2" -> "two"). Here:

* `read_wordnet_glosses` reads WordNet 3.0 glosses (the data available offline) into ``word, part_of_speech,
  definition`` rows; `load_definitions` reads any file / dataset / Hub dataset with those columns;
* `number_to_words` and `number_word_definitions` give the number definitions for a tokenizer's vocabulary;
* `definition_prompt_dataset` tokenizes every row into a prompt (`prompts.build_definition_prompt`) with its
  corruption spans; `split_definitions` holds out a validation part.

Example:
    >>> glosses = read_wordnet_glosses("../shared/data/wordnet/wordnet30_glosses.tsv")  # doctest: +SKIP
    >>> numbers = number_word_definitions(tokenizer)  # doctest: +SKIP
    >>> splits = split_definitions(datasets.concatenate_datasets([glosses, numbers]), 10_000, seed=0)  # doctest: +SKIP
    >>> train = definition_prompt_dataset(splits["train"], tokenizer)  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import json
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from transformers.utils import logging

from ..text_files import named_decode_errors
from .prompts import WordDefinition, build_definition_prompts

logger = logging.get_logger(__name__)

__all__ = [
    "DEFINITION_COLUMNS",
    "WORDNET_COLUMNS",
    "WORDNET_PARTS_OF_SPEECH",
    "definition_prompt_dataset",
    "load_definitions",
    "number_to_words",
    "number_word_definitions",
    "read_wordnet_glosses",
    "split_definitions",
]

DEFINITION_COLUMNS = ("word", "part_of_speech", "definition")
# The header of ../shared/data/wordnet/wordnet30_glosses.tsv.
WORDNET_COLUMNS = ("lemma", "pos", "offset", "definition", "examples")
WORDNET_PARTS_OF_SPEECH = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
# A model_max_length above this is transformers' "no limit" placeholder (VERY_LARGE_INTEGER), not a real limit.
_NO_REAL_LIMIT = 1_000_000
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def _definition_features() -> datasets.Features:
    return datasets.Features({column: datasets.Value("string") for column in DEFINITION_COLUMNS})


# ------------------------------------------------------------------------------------------------ WordNet
def read_wordnet_glosses(path: str | os.PathLike, single_words_only: bool = True) -> datasets.Dataset:
    """Read WordNet glosses (``lemma, pos, offset, definition, examples``, tab-separated, with a header).

    One row per (lemma, synset), as in the file; ``pos`` is mapped n -> noun, v -> verb, a / s -> adjective,
    r -> adverb. Fields are split on tabs only: glosses contain quotes that are text, not CSV quoting.

    Args:
        path: The ``.tsv`` file (``../shared/data/wordnet/wordnet30_glosses.tsv``).
        single_words_only: Drop lemmas with a space (``"physical entity"``): a token embedding is for one word.
            How many were dropped is logged.

    Returns:
        A `datasets.Dataset` with columns word, part_of_speech, definition.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If the file is not UTF-8 text, is empty or has no gloss to keep, the header is not the WordNet
            layout, or a line has the wrong number of fields, an unknown part of speech or an empty lemma /
            definition (naming ``file:line``).

    Example:
        >>> glosses = read_wordnet_glosses("../shared/data/wordnet/wordnet30_glosses.tsv")  # doctest: +SKIP
        >>> glosses[0]  # doctest: +SKIP
        {'word': 'entity', 'part_of_speech': 'noun', 'definition': 'that which is perceived or known or ...'}
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No WordNet glosses file at {path}.")
    rows: dict[str, list[str]] = {column: [] for column in DEFINITION_COLUMNS}
    multi_word = 0
    with named_decode_errors(path, "WordNet glosses file"), path.open(encoding="utf-8-sig") as handle:
        first_line = handle.readline()
        if not first_line.strip():
            raise ValueError(
                f"The WordNet glosses file {path} is empty; expected a tab-separated header "
                f"{list(WORDNET_COLUMNS)} and one gloss per line."
            )
        header = first_line.rstrip("\n").rstrip("\r").split("\t")
        if tuple(header) != WORDNET_COLUMNS:
            raise ValueError(
                f"{path}: the header is {header}, expected the WordNet glosses layout {list(WORDNET_COLUMNS)} "
                "(tab-separated). Use load_definitions for files with word, part_of_speech, definition columns."
            )
        for line_number, line in enumerate(handle, start=2):
            line = line.rstrip("\n").rstrip("\r")
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != len(WORDNET_COLUMNS):
                raise ValueError(
                    f"{path}:{line_number}: expected {len(WORDNET_COLUMNS)} tab-separated fields "
                    f"({', '.join(WORDNET_COLUMNS)}), got {len(fields)}."
                )
            lemma, pos, _, definition, _ = fields
            if pos not in WORDNET_PARTS_OF_SPEECH:
                raise ValueError(
                    f"{path}:{line_number}: unknown WordNet part of speech {pos!r}; expected one of "
                    f"{sorted(WORDNET_PARTS_OF_SPEECH)}."
                )
            if not lemma.strip() or not definition.strip():
                raise ValueError(f"{path}:{line_number}: empty lemma or definition ({lemma!r}, {definition!r}).")
            if single_words_only and " " in lemma.strip():
                multi_word += 1
                continue
            rows["word"].append(lemma.strip())
            rows["part_of_speech"].append(WORDNET_PARTS_OF_SPEECH[pos])
            rows["definition"].append(definition.strip())
    if not rows["word"]:
        raise ValueError(
            f"The WordNet glosses file {path} has no gloss to keep: "
            + (
                f"all its {multi_word} lemmas have several words; pass single_words_only=False to keep them."
                if multi_word
                else "it has a header only; pass the full glosses file."
            )
        )
    if single_words_only:
        logger.info(
            f"{path.name}: kept {len(rows['word'])} single-word glosses, dropped {multi_word} rows whose lemma has "
            "several words (single_words_only=True)."
        )
    return datasets.Dataset.from_dict(rows, features=_definition_features())


# ------------------------------------------------------------------------------------------------ number words
_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((10**9, "billion"), (10**6, "million"), (10**3, "thousand"))
_MAX_NUMBER = 10**12 - 1


def _below_thousand(number: int) -> str:
    hundreds, rest = divmod(number, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest:
        if rest < 20:
            words.append(_ONES[rest])
        else:
            tens, ones = divmod(rest, 10)
            words.append(_TENS[tens] + (f"-{_ONES[ones]}" if ones else ""))
    return " ".join(words)


def number_to_words(number: int) -> str:
    """An integer 0 .. 10^12 - 1 in English words (American style: no "and", hyphenated 21-99).

    Raises:
        TypeError: If `number` is not an int.
        ValueError: If it is negative or 10^12 or more.

    Example:
        >>> number_to_words(2024), number_to_words(105), number_to_words(40)
        ('two thousand twenty-four', 'one hundred five', 'forty')
    """
    if isinstance(number, bool) or not isinstance(number, numbers.Integral):
        raise TypeError(f"number_to_words takes an int, got {type(number).__name__} ({number!r}).")
    number = int(number)
    if not 0 <= number <= _MAX_NUMBER:
        raise ValueError(f"number_to_words covers 0 .. {_MAX_NUMBER:,}, got {number:,}.")
    if number == 0:
        return "zero"
    words = []
    for scale, name in _SCALES:
        count, number = divmod(number, scale)
        if count:
            words.append(f"{_below_thousand(count)} {name}")
    if number:
        words.append(_below_thousand(number))
    return " ".join(words)


def _digit_string_in_words(digits: str) -> str:
    """Words for a digit string: its value, or digit by digit when a leading zero or its length makes it a code."""
    if (len(digits) > 1 and digits.startswith("0")) or len(digits) > 12:
        return " ".join(_ONES[int(digit)] for digit in digits)
    return number_to_words(int(digits))


def number_word_definitions(tokenizer: Any) -> datasets.Dataset:
    """A definition for every plain number in the tokenizer's vocabulary (Section 6.1: "2" -> "two").

    A vocabulary token counts when it is ASCII digits only after removing its ``Ġ`` / ``▁`` / ``##`` marker; each
    number appears once (``"2"`` and ``"Ġ2"`` give one row, whose prompt covers both forms), in order of first
    token id. Digit strings with a leading zero (``"007"``) or over 12 digits are read digit by digit.

    Returns:
        A `datasets.Dataset` with word (the digits), part_of_speech ``"numeral"``, definition (the words).

    Example:
        >>> rows = number_word_definitions(tokenizer)  # doctest: +SKIP
        >>> rows.filter(lambda row: row["word"] == "2")[0]  # doctest: +SKIP
        {'word': '2', 'part_of_speech': 'numeral', 'definition': 'two'}
    """
    seen: set[str] = set()
    rows: dict[str, list[str]] = {column: [] for column in DEFINITION_COLUMNS}
    for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        bare = token
        for marker in ("Ġ", "▁", "##"):
            if bare.startswith(marker):
                bare = bare[len(marker) :]
                break
        if not bare or not bare.isascii() or not bare.isdigit() or bare in seen:
            continue
        seen.add(bare)
        rows["word"].append(bare)
        rows["part_of_speech"].append("numeral")
        rows["definition"].append(_digit_string_in_words(bare))
    logger.info(f"{type(tokenizer).__name__}: {len(seen)} number tokens get a number-word definition.")
    return datasets.Dataset.from_dict(rows, features=_definition_features())


# ------------------------------------------------------------------------------------------------ loading
def load_definitions(
    source: str | os.PathLike | datasets.Dataset, split: str = "train", single_words_only: bool = True
) -> datasets.Dataset:
    """Definitions with columns word, part_of_speech, definition from a file, a Dataset or the Hub.

    Args:
        source: A ``.tsv`` / ``.csv`` / ``.json`` / ``.jsonl`` file with word, part_of_speech and definition columns
            (a ``.json`` file is a list of objects; ``.tsv`` fields are split on tabs without quoting, ``.csv`` uses
            CSV quoting); a ``.tsv`` with the WordNet glosses header goes to `read_wordnet_glosses`. Or a
            `datasets.Dataset` with those columns, or a Hub dataset id (loaded with `datasets.load_dataset`; needs
            the network).
        split: The split of a Hub dataset.
        single_words_only: For the WordNet layout: drop multi-word lemmas.

    Returns:
        A `datasets.Dataset` with exactly the three columns (other columns are dropped), strings stripped.

    Raises:
        FileNotFoundError: If a path-like source does not exist.
        ValueError: If a column is missing, a value is empty (naming the row), or the file type is unknown.

    Example:
        >>> rows = load_definitions(datasets.Dataset.from_dict(
        ...     {"word": ["cat"], "part_of_speech": ["noun"], "definition": ["a small pet"], "source": ["me"]}))
        >>> rows.column_names, rows[0]["definition"]
        (['word', 'part_of_speech', 'definition'], 'a small pet')
    """
    if isinstance(source, datasets.DatasetDict):
        if split not in source:
            raise ValueError(f"The DatasetDict has splits {sorted(source)}, not {split!r}.")
        source = source[split]
    if isinstance(source, datasets.Dataset):
        return _checked_definitions(source, "the given Dataset")
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"load_definitions takes a path, a datasets.Dataset or a Hub id, got {type(source).__name__}.")
    path = Path(source)
    suffix = path.suffix.lower()
    if path.exists() or suffix in {".tsv", ".csv", ".json", ".jsonl"}:
        if not path.is_file():
            raise FileNotFoundError(f"No definitions file at {path}.")
        return _load_definitions_file(path, single_words_only)
    if isinstance(source, str) and _HUB_ID.match(source):
        return _checked_definitions(datasets.load_dataset(source, split=split), f"the Hub dataset {source!r}")
    raise FileNotFoundError(f"{source!r} is neither an existing file nor a Hub dataset id.")


def _load_definitions_file(path: Path, single_words_only: bool) -> datasets.Dataset:
    with named_decode_errors(path, "definitions file"):
        return _read_definitions_file(path, single_words_only)


def _read_definitions_file(path: Path, single_words_only: bool) -> datasets.Dataset:
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        with path.open(encoding="utf-8-sig") as handle:
            header = handle.readline().rstrip("\r\n").split("\t")
        if tuple(header) == WORDNET_COLUMNS:
            return read_wordnet_glosses(path, single_words_only=single_words_only)
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
            _check_header(path, reader.fieldnames, "tab")
            records = list(reader)
    elif suffix == ".csv":
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            _check_header(path, reader.fieldnames, "comma")
            records = list(reader)
    elif suffix == ".json":
        records = json.loads(path.read_text(encoding="utf-8-sig"))
        if not isinstance(records, list):
            raise ValueError(f"{path}: a .json definitions file is a list of objects, got {type(records).__name__}.")
    elif suffix == ".jsonl":
        records = []
        with path.open(encoding="utf-8-sig") as handle:
            for line_number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{path}:{line_number}: not a JSON object ({error}).") from error
    else:
        raise ValueError(f"{path}: unknown definitions file type {suffix!r}; use .tsv, .csv, .json or .jsonl.")
    columns: dict[str, list[Any]] = {column: [] for column in DEFINITION_COLUMNS}
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise ValueError(f"{path}: row {index} is not an object with {list(DEFINITION_COLUMNS)}.")
        missing = [column for column in DEFINITION_COLUMNS if column not in record]
        if missing:
            raise ValueError(
                f"{path}: row {index} has no {missing} column(s); a definitions file needs "
                f"{list(DEFINITION_COLUMNS)} (found {sorted(record)})."
            )
        for column in DEFINITION_COLUMNS:
            columns[column].append(record[column])
    return _checked_definitions(datasets.Dataset.from_dict(columns, features=_definition_features()), str(path))


def _check_header(path: Path, header: Sequence[str] | None, separator: str) -> None:
    """Refuse a table whose first line does not name the definition columns: its rows would be read under the wrong
    names (or, without a header line, its first row taken for one)."""
    if header is None:  # an empty file: `_checked_definitions` says it holds no definitions
        return
    missing = [column for column in DEFINITION_COLUMNS if column not in header]
    if missing:
        raise ValueError(
            f"{path}: the header (its first line) is wrong: expected the {separator}-separated columns "
            f"{', '.join(DEFINITION_COLUMNS)} (or the WordNet glosses layout {', '.join(WORDNET_COLUMNS)}), found "
            f"{', '.join(header)}; {', '.join(missing)} missing. Add or rename the header line."
        )


def _checked_definitions(dataset: datasets.Dataset, source: str) -> datasets.Dataset:
    if len(dataset) == 0:
        # Nothing to learn from: a DefinitionEMB reader trained on no definitions replaces no embedding.
        raise ValueError(
            f"{source} holds no definitions (it is empty, or has a header only); give one row per word with the "
            f"columns {list(DEFINITION_COLUMNS)}."
        )
    missing = [column for column in DEFINITION_COLUMNS if column not in dataset.column_names]
    if missing:
        raise ValueError(
            f"{source} has no {missing} column(s); definitions need {list(DEFINITION_COLUMNS)} "
            f"(found {dataset.column_names}). Rename the columns (Dataset.rename_column) first."
        )
    columns = {column: dataset[column] for column in DEFINITION_COLUMNS}
    for column, values in columns.items():
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"{source}: row {index} (word {columns['word'][index]!r}) has an empty or non-text {column} "
                    f"({value!r}); fill it in or drop the row."
                )
    stripped = {column: [value.strip() for value in values] for column, values in columns.items()}
    return datasets.Dataset.from_dict(stripped, features=_definition_features())


# ------------------------------------------------------------------------------------------------ prompts
def _default_max_length(tokenizer: Any) -> int | None:
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, numbers.Integral) and 0 < limit <= _NO_REAL_LIMIT:
        return int(limit)
    return None


def definition_prompt_dataset(
    definitions: datasets.Dataset,
    tokenizer: Any,
    max_length: int | None = None,
    batch_size: int = 1000,
    word_slots: str = "distinct",
) -> datasets.Dataset:
    """Tokenize every definition into its prompt: columns input_ids, corruption_spans, word.

    Args:
        definitions: Rows with word, part_of_speech, definition (`load_definitions`, `read_wordnet_glosses`,
            `number_word_definitions`).
        tokenizer: The PLM's tokenizer.
        max_length: The longest prompt in tokens; default the tokenizer's ``model_max_length`` when it is a real
            limit, else none. A longer prompt keeps its word slots and has its DEFINITION shortened token-wise;
            how many were shortened is logged as a warning. Pass the reader's position limit if it is smaller.
        batch_size: Rows per `datasets.Dataset.map` batch.
        word_slots: The reader's ``config.word_slots``: ``"distinct"`` (only the forms that differ for this
            tokenizer) or ``"paper"`` (Figure 17's four slots).

    Returns:
        A `datasets.Dataset` with input_ids (list of ints), corruption_spans (one ``[start, end)`` pair per word
        slot) and word.

    Raises:
        ValueError: If a column is missing or a row is empty, or a word's prompt cannot fit `max_length`.

    Example:
        >>> prompts = definition_prompt_dataset(definitions, tokenizer, max_length=128)  # doctest: +SKIP
        >>> prompts.column_names  # doctest: +SKIP
        ['input_ids', 'corruption_spans', 'word']
    """
    if not isinstance(definitions, datasets.Dataset):
        raise TypeError(f"definitions must be a datasets.Dataset, got {type(definitions).__name__}.")
    missing = [column for column in DEFINITION_COLUMNS if column not in definitions.column_names]
    if missing:
        raise ValueError(
            f"definitions has no {missing} column(s); expected {list(DEFINITION_COLUMNS)} (see load_definitions)."
        )
    if max_length is None:
        max_length = _default_max_length(tokenizer)
    elif isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral) or max_length < 1:
        raise ValueError(f"max_length must be a positive int or None, got {max_length!r}.")

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        entries = [
            WordDefinition(word, part_of_speech, definition)
            for word, part_of_speech, definition in zip(batch["word"], batch["part_of_speech"], batch["definition"])
        ]
        built = build_definition_prompts(tokenizer, entries, max_length, word_slots)
        return {
            "input_ids": [prompt.input_ids for prompt, _ in built],
            "corruption_spans": [[list(span) for span in prompt.corruption_spans] for prompt, _ in built],
            "word": [prompt.word for prompt, _ in built],
            "definition_tokens_cut": [cut for _, cut in built],
        }

    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "corruption_spans": datasets.Sequence(datasets.Sequence(datasets.Value("int32"), length=2)),
            "word": datasets.Value("string"),
            "definition_tokens_cut": datasets.Value("int32"),
        }
    )
    prompts = definitions.map(
        tokenize,
        batched=True,
        batch_size=batch_size,
        remove_columns=definitions.column_names,
        features=features,
        desc="Building definition prompts",
    )
    # Counted from a column, not a closure, so that the warning is right when `map` answers from its cache.
    cuts = prompts["definition_tokens_cut"]
    shortened = sum(1 for cut in cuts if cut)
    if shortened:
        logger.warning(
            f"{shortened} of {len(prompts)} definitions were longer than max_length={max_length} tokens as prompts "
            f"and had their definition text shortened ({sum(cuts)} tokens cut in all); the word slots are intact."
        )
    return prompts.remove_columns("definition_tokens_cut")


def split_definitions(
    dataset: datasets.Dataset, validation_size: int | float = 10_000, seed: int = 0
) -> datasets.DatasetDict:
    """Hold out a random validation part (the paper holds out 10,000 definitions).

    Args:
        dataset: Any dataset (definitions or prompts).
        validation_size: A number of rows, or a fraction in (0, 1).
        seed: The shuffle seed (same seed, same split).

    Returns:
        A `datasets.DatasetDict` with "train" and "validation".

    Raises:
        ValueError: If the validation part would be empty or the whole dataset.

    Example:
        >>> rows = datasets.Dataset.from_dict({"word": [str(n) for n in range(10)]})
        >>> parts = split_definitions(rows, validation_size=3, seed=0)
        >>> len(parts["train"]), len(parts["validation"])
        (7, 3)
    """
    size = len(dataset)
    if isinstance(validation_size, bool) or not isinstance(validation_size, (numbers.Integral, float)):
        raise TypeError(f"validation_size must be an int or a float fraction, got {validation_size!r}.")
    count = round(validation_size * size) if isinstance(validation_size, float) else int(validation_size)
    if isinstance(validation_size, float) and not 0.0 < validation_size < 1.0:
        raise ValueError(f"A fractional validation_size must be in (0, 1), got {validation_size}.")
    if not 0 < count < size:
        raise ValueError(
            f"validation_size={validation_size!r} gives {count} validation rows out of {size}; both parts must be "
            "non-empty."
        )
    parts = dataset.train_test_split(test_size=count, seed=seed, shuffle=True)
    return datasets.DatasetDict({"train": parts["train"], "validation": parts["test"]})
