"""SQuAD 1.1 / 2.0 (Rajpurkar et al., 2016, 2018) reader and the split by article.

A SQuAD file is one JSON object ``{"version", "data": [article, ...]}``; an article is
``{"title", "paragraphs": [{"context", "qas": [question, ...]}]}`` and a question is
``{"id", "question", "answers": [{"text", "answer_start"}, ...]}``, plus ``"is_impossible"`` in SQuAD 2.0, where an
unanswerable question has an empty ``answers`` list.

* `load_squad` reads such a file (``.json`` or ``.json.gz``) or a Hub dataset into a flat `datasets.Dataset` in the
  layout of the Hub's ``squad`` / ``squad_v2`` datasets, detects the version, and checks every question (an answer
  offset that does not hold its text would silently train on the wrong tokens);
* `split_by_article` splits it into train and validation parts by article, deterministically, so that no article
  contributes questions to both sides;
* `squad_version` tells which version a loaded dataset holds.

Example:
    >>> squad = load_squad("../shared/data/squad/squad-v2.0-dev-public.json.gz")  # doctest: +SKIP
    >>> squad_version(squad), len(squad), squad[0]["answers"]  # doctest: +SKIP
    ('2.0', 9698, {'text': ['France', 'France', 'France', 'France'], 'answer_start': [159, 159, 159, 159]})
    >>> parts = split_by_article(squad, validation_fraction=0.25, seed=0)  # doctest: +SKIP
    >>> sorted(parts)  # doctest: +SKIP
    ['train', 'validation']
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets.fingerprint import Hasher
from transformers.utils import logging

logger = logging.get_logger(__name__)

__all__ = [
    "SQUAD_COLUMNS",
    "SQUAD_VERSIONS",
    "load_squad",
    "squad_features_schema",
    "squad_version",
    "split_by_article",
]

SQUAD_VERSIONS = ("1.1", "2.0")
# Columns of a loaded SQuAD dataset (the Hub's squad layout); SQuAD 2.0 adds "is_impossible".
SQUAD_COLUMNS = ("id", "title", "context", "question", "answers")
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")
_FILE_SUFFIXES = {".json", ".gz", ".jsonl", ".txt", ".bz2", ".xz", ".zip"}


def squad_features_schema(version: str) -> datasets.Features:
    """The `datasets.Features` of a loaded SQuAD dataset of `version` ("1.1" or "2.0").

    Example:
        >>> list(squad_features_schema("2.0"))
        ['id', 'title', 'context', 'question', 'answers', 'is_impossible']
    """
    version = _normalise_version(version)
    features = {
        "id": datasets.Value("string"),
        "title": datasets.Value("string"),
        "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": {
            "text": datasets.Sequence(datasets.Value("string")),
            "answer_start": datasets.Sequence(datasets.Value("int32")),
        },
    }
    if version == "2.0":
        features["is_impossible"] = datasets.Value("bool")
    return datasets.Features(features)


# ----------------------------------------------------------------------------------------------------- loading
def load_squad(
    source: str | os.PathLike,
    version: str | None = None,
    *,
    split: str | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """Load SQuAD questions from an official JSON file or a Hub dataset, checking every question and answer.

    The version is detected from the content: a file (or dataset) with an ``is_impossible`` field or with a
    question without answers is SQuAD 2.0, otherwise SQuAD 1.1. Passing `version` checks the detection: a SQuAD
    2.0 source with unanswerable questions asked for as ``"1.1"`` is refused (its unanswerable questions are never
    silently dropped); a 1.1 source asked for as ``"2.0"`` is loaded with ``is_impossible`` all False.

    A local file is cached as Arrow under the `datasets` cache, keyed on the bytes of the file (not its path and
    modification time, which `datasets` would use: a file edited in place with its mtime kept would load stale), on
    the version and on this module's code. The dataset is file-backed, so `Dataset.map` over it (e.g.
    `squad_features`) is cached too.

    Args:
        source: A SQuAD JSON file (``.json`` or gzip-compressed ``.json.gz``), or the id of a Hub dataset in the
            Hub's squad layout (e.g. ``"rajpurkar/squad"``, ``"rajpurkar/squad_v2"``; needs the network).
        version: ``"1.1"`` or ``"2.0"`` (``"v1.1"``/``"v2.0"`` also accepted), or None to detect it.
        split: Split to load from a Hub dataset (e.g. ``"validation"``); ignored for a local file.
        cache_dir: Where to cache the Arrow files (default: the `datasets` cache).

    Returns:
        One row per question, in file order, with the columns `SQUAD_COLUMNS`: ``id``, ``title``, ``context``,
        ``question``, ``answers`` (``{"text": [...], "answer_start": [...]}``, empty lists when unanswerable), and
        for SQuAD 2.0 also ``is_impossible`` (bool). See `squad_features_schema`.

    Raises:
        FileNotFoundError: If a local path does not exist.
        ValueError: On a file that is not SQuAD JSON, an unknown version, a 2.0 source asked for as 1.1, an empty
            question or context, a missing or duplicate id, an empty answer text, an ``answer_start`` where the
            context does not hold the answer text, or ``is_impossible`` contradicting the answers. The message
            names the question id and says how to fix it.

    Example:
        >>> squad = load_squad("../shared/data/squad/squad-v1.1-dev-public.json.gz")  # doctest: +SKIP
        >>> squad_version(squad), len(squad), squad.column_names  # doctest: +SKIP
        ('1.1', 8882, ['id', 'title', 'context', 'question', 'answers'])
    """
    requested = None if version is None else _normalise_version(version)
    name = os.fspath(source)
    if os.path.isfile(name):
        return _load_squad_file(Path(name), requested, cache_dir)
    if os.path.exists(name) or not _looks_like_hub_id(name):
        raise FileNotFoundError(
            f"SQuAD file {name!r} does not exist (or is not a file); pass the path of a SQuAD JSON file such as "
            "dev-v1.1.json or dev-v2.0.json.gz, or a Hub dataset id such as 'rajpurkar/squad'."
        )
    return _load_squad_from_hub(name, requested, split, cache_dir)


def squad_version(dataset: datasets.Dataset) -> str:
    """``"2.0"`` if a dataset loaded by `load_squad` is SQuAD 2.0 (it has an ``is_impossible`` column), else ``"1.1"``.

    Example:
        >>> squad_version(datasets.Dataset.from_dict({"id": ["q"], "is_impossible": [True]}))
        '2.0'
    """
    return "2.0" if "is_impossible" in dataset.column_names else "1.1"


def _normalise_version(version: Any) -> str:
    text = str(version).strip().lower().removeprefix("v")
    text = {"1": "1.1", "2": "2.0"}.get(text, text)
    if text not in SQUAD_VERSIONS:
        raise ValueError(f"Unknown SQuAD version {version!r}; pass '1.1', '2.0', or None to detect it from the data.")
    return text


def _looks_like_hub_id(source: str) -> bool:
    """`user/name` or `name`, without a file suffix or path syntax (a typo in a local path stays local)."""
    if source.startswith((".", "~", "/")):
        return False
    return bool(_HUB_ID.match(source)) and Path(source).suffix.lower() not in _FILE_SUFFIXES


def _read_json(path: Path, content: bytes) -> Any:
    if content[:2] == b"\x1f\x8b":  # gzip magic: decide by content, a renamed .gz still loads
        try:
            content = gzip.decompress(content)
        except (OSError, EOFError) as error:
            raise ValueError(f"{path}: the gzip file is damaged ({error}); download it again.") from None
    try:
        return json.loads(content.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{path}: not a SQuAD JSON file ({error}); expected UTF-8 JSON, optionally gzip-compressed, as the "
            "official train-v1.1.json / dev-v2.0.json."
        ) from None


def _load_squad_file(path: Path, requested: str | None, cache_dir: str | os.PathLike | None) -> datasets.Dataset:
    content = path.read_bytes()
    rows, detected = _parse_squad(_read_json(path, content), str(path))
    version = _resolve_version(detected, requested, rows, str(path))
    content_sha = hashlib.sha256(content).hexdigest()
    # `from_generator` keys its cache on a hash of the generator and of gen_kwargs: the content hash (and the code
    # version, as the generator's helpers are hashed by name only) makes the key the file's bytes, not its path.
    return datasets.Dataset.from_generator(
        _generate_file_rows,
        features=squad_features_schema(version),
        gen_kwargs={"path": str(path.resolve()), "content_sha": content_sha, "version": version,
                    "code_version": _code_version()},
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
    )


def _generate_file_rows(path: str, content_sha: str, version: str, code_version: str) -> Iterator[dict[str, Any]]:
    """Rows of a SQuAD file already checked by `_load_squad_file` (run by `datasets` only on a cache miss)."""
    content = Path(path).read_bytes()
    if hashlib.sha256(content).hexdigest() != content_sha:
        raise RuntimeError(f"{path} changed while it was being loaded; load it again.")
    rows, _ = _parse_squad(_read_json(Path(path), content), path)
    for row in rows:
        if version == "1.1":
            row.pop("is_impossible")
        yield row


def _parse_squad(document: Any, source: str) -> tuple[list[dict[str, Any]], str]:
    """Flatten and check a SQuAD JSON document; return the rows (with ``is_impossible``) and the detected version."""
    if not isinstance(document, Mapping) or not isinstance(document.get("data"), list):
        raise ValueError(
            f"{source}: not SQuAD JSON: expected an object with a 'data' list of articles "
            "({'version': ..., 'data': [{'title', 'paragraphs': [{'context', 'qas': [...]}]}]})."
        )
    declared = str(document.get("version", "")).strip().lower().removeprefix("v")
    has_impossible_field = declared.startswith("2")
    rows: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for article_index, article in enumerate(document["data"]):
        if not isinstance(article, Mapping) or not isinstance(article.get("paragraphs"), list):
            raise ValueError(f"{source}: article {article_index} has no 'paragraphs' list.")
        title = str(article.get("title") or "").strip()
        if not title:
            # split_by_article groups questions by title: give each untitled article a title of its own.
            title = f"article-{article_index}"
        for paragraph_index, paragraph in enumerate(article["paragraphs"]):
            where = f"{source}: article {title!r}, paragraph {paragraph_index}"
            if not isinstance(paragraph, Mapping) or not isinstance(paragraph.get("qas"), list):
                raise ValueError(f"{where} has no 'qas' list of questions.")
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise ValueError(f"{where} has no 'context' string.")
            for question_index, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, Mapping):
                    raise ValueError(f"{where}, question {question_index} is not a JSON object.")
                question_id = str(qa.get("id") or "").strip()
                if not question_id:
                    raise ValueError(f"{where}, question {question_index} has no 'id'; every question needs one.")
                if question_id in seen:
                    raise ValueError(
                        f"{source}: question id {question_id!r} occurs twice (articles {seen[question_id]!r} and "
                        f"{title!r}); ids must be unique, as predictions and scores are keyed on them."
                    )
                seen[question_id] = title
                if "answers" not in qa or not isinstance(qa["answers"], list):
                    raise ValueError(
                        f"{source}: question {question_id!r} has no 'answers' list; give an empty list for an "
                        "unanswerable SQuAD 2.0 question."
                    )
                texts, starts = [], []
                for answer in qa["answers"]:
                    if not isinstance(answer, Mapping) or "text" not in answer or "answer_start" not in answer:
                        raise ValueError(
                            f"{source}: question {question_id!r}: every answer needs 'text' and 'answer_start', "
                            f"got {answer!r}."
                        )
                    texts.append(answer["text"])
                    starts.append(answer["answer_start"])
                has_impossible_field = has_impossible_field or "is_impossible" in qa
                row = {
                    "id": question_id,
                    "title": title,
                    "context": context,
                    "question": qa.get("question"),
                    "answers": {"text": texts, "answer_start": starts},
                    "is_impossible": qa.get("is_impossible", not texts),
                }
                _check_question(row)
                rows.append(row)
    if not rows:
        raise ValueError(f"{source}: the file holds no questions; expected SQuAD JSON with at least one question.")
    unanswerable = any(row["is_impossible"] for row in rows)
    return rows, "2.0" if has_impossible_field or unanswerable else "1.1"


def _check_question(row: dict[str, Any]) -> None:
    """Raise unless a row is a valid SQuAD question; normalise its answer offsets to ints in place."""
    question_id, context, question = row["id"], row["context"], row["question"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(
            f"SQuAD question {question_id!r}: the question text is empty; remove the question or fill it in."
        )
    if not isinstance(context, str) or not context.strip():
        raise ValueError(
            f"SQuAD question {question_id!r}: the context is empty; every question needs the paragraph it is about."
        )
    answers = row["answers"]
    starts = []
    for text, start in zip(answers["text"], answers["answer_start"]):
        if not isinstance(text, str) or not text:
            raise ValueError(
                f"SQuAD question {question_id!r}: an answer text is empty; an unanswerable question has an empty "
                "'answers' list (SQuAD 2.0) instead."
            )
        if isinstance(start, bool) or not isinstance(start, int):
            if isinstance(start, str) and start.strip().lstrip("-").isdigit():
                start = int(start)
            else:
                raise ValueError(
                    f"SQuAD question {question_id!r}: answer_start must be an integer character offset, got {start!r}."
                )
        found = context[start : start + len(text)] if 0 <= start <= len(context) else ""
        if found != text:
            first = context.find(text)
            hint = (
                f"the text first occurs at offset {first}" if first >= 0 else "the context does not contain the text"
            )
            raise ValueError(
                f"SQuAD question {question_id!r}: answer {text!r} is not at answer_start {start}; the context holds "
                f"{found!r} there ({hint}). Fix answer_start: it is the 0-based character offset of the answer text "
                "in the context."
            )
        starts.append(start)
    answers["answer_start"] = starts
    impossible = row["is_impossible"]
    if not isinstance(impossible, bool):
        raise ValueError(f"SQuAD question {question_id!r}: is_impossible must be true or false, got {impossible!r}.")
    if impossible and starts:
        raise ValueError(
            f"SQuAD question {question_id!r} is marked is_impossible but has {len(starts)} answer(s); an "
            "unanswerable question has an empty 'answers' list (SQuAD 2.0 keeps candidates in 'plausible_answers')."
        )
    if not impossible and not starts:
        raise ValueError(
            f"SQuAD question {question_id!r} has no answers but is not marked is_impossible; add its answers, or "
            "mark it is_impossible: true (SQuAD 2.0)."
        )


def _resolve_version(detected: str, requested: str | None, rows: Sequence[Mapping[str, Any]], source: str) -> str:
    if requested is None:
        return detected
    if requested == "1.1" and detected == "2.0":
        unanswerable = sum(bool(row["is_impossible"]) for row in rows)
        if unanswerable:
            raise ValueError(
                f"{source} is SQuAD 2.0: {unanswerable} of its {len(rows)} questions are unanswerable, which SQuAD 1.1 "
                "has no place for. Load it with version='2.0' (or version=None), or remove the unanswerable "
                "questions from the file if you really want a 1.1 dataset; they are not dropped silently."
            )
    return requested


def _load_squad_from_hub(
    dataset_id: str, requested: str | None, split: str | None, cache_dir: str | os.PathLike | None
) -> datasets.Dataset:
    cache = None if cache_dir is None else os.fspath(cache_dir)
    loaded = datasets.load_dataset(dataset_id, split=split, cache_dir=cache)
    if isinstance(loaded, datasets.DatasetDict):
        raise ValueError(
            f"{dataset_id!r} has several splits {list(loaded)}; pass one with split=..., e.g. split='validation'."
        )
    missing = [column for column in SQUAD_COLUMNS if column not in loaded.column_names]
    if missing:
        raise ValueError(
            f"{dataset_id!r} lacks the SQuAD column(s) {missing}; it has {loaded.column_names}. Expected the Hub's "
            "squad layout (id, title, context, question, answers {text, answer_start})."
        )
    # list(): datasets 4+ returns a lazy Column.
    answers = list(loaded["answers"])
    has_impossible_field = "is_impossible" in loaded.column_names
    unanswerable = sum(not answer["text"] for answer in answers)
    detected = "2.0" if has_impossible_field or unanswerable else "1.1"
    version = _resolve_version(
        detected, requested, [{"is_impossible": not answer["text"]} for answer in answers], dataset_id
    )
    counts = Counter(str(question_id).strip() for question_id in loaded["id"])
    duplicates = sorted(question_id for question_id, count in counts.items() if count > 1)[:5]
    if duplicates:
        raise ValueError(f"{dataset_id!r}: question ids occur more than once, e.g. {duplicates}; ids must be unique.")
    return loaded.map(
        _standardise_hub_batch,
        batched=True,
        remove_columns=loaded.column_names,
        features=squad_features_schema(version),
        fn_kwargs={"version": version},
        desc="Checking SQuAD questions",
        new_fingerprint=Hasher.hash((loaded._fingerprint, "standardise", version, _code_version())),
    )


def _standardise_hub_batch(batch: dict[str, list], version: str) -> dict[str, list]:
    rows: dict[str, list] = {column: [] for column in squad_features_schema(version)}
    for index in range(len(batch["id"])):
        answers = batch["answers"][index]
        row = {
            "id": str(batch["id"][index]).strip(),
            "title": str(batch["title"][index] or "").strip(),
            "context": batch["context"][index],
            "question": batch["question"][index],
            "answers": {"text": list(answers["text"]), "answer_start": list(answers["answer_start"])},
            "is_impossible": (
                bool(batch["is_impossible"][index]) if "is_impossible" in batch else not answers["text"]
            ),
        }
        _check_question(row)
        for column in rows:
            rows[column].append(row[column])
    return rows


@functools.cache
def _code_version() -> str:
    """Hash of this module's source: cached datasets built by older code of this file are not reused."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------------ split
def split_by_article(
    dataset: datasets.Dataset,
    validation_fraction: float | None = 0.2,
    *,
    num_validation_articles: int | None = None,
    num_train_articles: int | None = None,
    seed: int = 0,
) -> datasets.DatasetDict:
    """Split questions into ``"train"`` and ``"validation"`` by article, so that no article is on both sides.

    The articles (distinct ``title`` values) are sorted by title and shuffled with ``random.Random(seed)``; the
    first ones of that order form the validation part, the next ones the training part. The split therefore depends
    only on the set of titles and the seed, not on the row order, the machine or the Python version; each part keeps
    its rows in dataset order.

    Give either `validation_fraction` (a fraction of the ARTICLES, not of the questions: rounded, at least one
    article on each side) or article counts. With `num_validation_articles` alone the rest is training data; with
    `num_train_articles` too, only that many of the remaining articles are used for training and the other
    articles are left out (to size a small training run).

    Args:
        dataset: Questions with a ``title`` column (e.g. from `load_squad`).
        validation_fraction: Fraction of the articles in the validation part, in (0, 1). Ignored when
            `num_validation_articles` is given.
        num_validation_articles: Number of articles in the validation part.
        num_train_articles: Number of articles in the training part (default: all the others).
        seed: Seed of the shuffle.

    Returns:
        A `datasets.DatasetDict` with ``"train"`` and ``"validation"``.

    Raises:
        ValueError: If the dataset has no ``title`` column or fewer than two articles, or the fraction or counts do
            not leave at least one article on each side.

    Example:
        >>> questions = datasets.Dataset.from_dict({"title": ["A", "A", "B", "C", "C", "D"], "id": list("uvwxyz")})
        >>> parts = split_by_article(questions, num_validation_articles=1, seed=0)
        >>> sorted(set(parts["validation"]["title"])), sorted(set(parts["train"]["title"]))
        (['C'], ['A', 'B', 'D'])
    """
    if "title" not in dataset.column_names:
        raise ValueError(
            f"split_by_article needs a 'title' column naming each question's article; the dataset has "
            f"{dataset.column_names}."
        )
    titles = list(dataset["title"])
    articles = sorted(set(titles))
    if len(articles) < 2:
        raise ValueError(f"The dataset holds {len(articles)} article(s); a split by article needs at least two.")
    if num_validation_articles is None:
        if validation_fraction is None or not 0 < validation_fraction < 1:
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {validation_fraction!r}; or pass num_validation_articles."
            )
        num_validation_articles = min(max(round(validation_fraction * len(articles)), 1), len(articles) - 1)
    available = len(articles) - num_validation_articles
    if num_train_articles is None:
        num_train_articles = available
    if not 1 <= num_validation_articles < len(articles) or not 1 <= num_train_articles <= available:
        raise ValueError(
            f"Cannot take {num_validation_articles} validation and {num_train_articles} training article(s) from "
            f"{len(articles)} articles; each part needs at least one article and together at most {len(articles)}."
        )
    order = list(articles)
    random.Random(seed).shuffle(order)
    validation_titles = set(order[:num_validation_articles])
    train_titles = set(order[num_validation_articles : num_validation_articles + num_train_articles])
    logger.info(
        "Split by article (seed %d): %d training and %d validation articles of %d.",
        seed, len(train_titles), len(validation_titles), len(articles),
    )
    return datasets.DatasetDict(
        {
            "train": dataset.select([index for index, title in enumerate(titles) if title in train_titles]),
            "validation": dataset.select([index for index, title in enumerate(titles) if title in validation_titles]),
        }
    )
