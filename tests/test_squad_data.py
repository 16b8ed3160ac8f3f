"""SQuAD reader (`load_squad`) and the split by article.

Expected counts come from the shared data's README (8,882 v1.1 and 9,698 v2.0 questions in 38 and 28 articles) and
from reading the JSON here with the standard library, independently of the reader.
"""

import gzip
import json
import os
from pathlib import Path

import datasets
import pytest

from hf_entity_models.tasks.question_answering.data import (
    SQUAD_COLUMNS,
    load_squad,
    split_by_article,
    squad_features_schema,
    squad_version,
)

SQUAD_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad"
V11 = SQUAD_DIR / "squad-v1.1-dev-public.json.gz"
V20 = SQUAD_DIR / "squad-v2.0-dev-public.json.gz"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("squad-cache")


@pytest.fixture(scope="module")
def squad_v11(cache_dir):
    return load_squad(V11, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def squad_v20(cache_dir):
    return load_squad(V20, cache_dir=cache_dir)


def raw_questions(path: Path) -> list[tuple[str, dict]]:
    """(title, question object) of every question, read with json alone."""
    document = json.loads(gzip.decompress(path.read_bytes()))
    return [(article["title"], qa) for article in document["data"] for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def squad_json(questions, version="1.1", title="Article", context="Ada Lovelace wrote the first program in 1843."):
    """A SQuAD document with one paragraph; `questions` are (id, question, answers[, is_impossible])."""
    qas = []
    for question in questions:
        qa = {"id": question[0], "question": question[1], "answers": question[2]}
        if len(question) > 3:
            qa["is_impossible"] = question[3]
        qas.append(qa)
    return {"version": version, "data": [{"title": title, "paragraphs": [{"context": context, "qas": qas}]}]}


def write_json(path: Path, document) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def answer(text, start):
    return {"text": text, "answer_start": start}


# --------------------------------------------------------------------------------------------- the real files
def test_v11_file_counts_version_and_rows(squad_v11):
    raw = raw_questions(V11)
    assert squad_version(squad_v11) == "1.1"
    assert squad_v11.column_names == list(SQUAD_COLUMNS)
    assert squad_v11.features == squad_features_schema("1.1")
    assert len(squad_v11) == len(raw) == 8882  # ../shared/data/README.md
    assert len(set(squad_v11["title"])) == 38
    assert squad_v11["id"] == [qa["id"] for _, qa in raw]
    assert all(len(answers["text"]) >= 1 for answers in squad_v11["answers"])
    first = squad_v11[0]
    assert first["title"] == "Super_Bowl_50"
    assert first["question"] == "Which NFL team represented the AFC at Super Bowl 50?"
    assert first["answers"] == {"text": ["Denver Broncos"] * 3, "answer_start": [177] * 3}
    assert first["context"][177 : 177 + len("Denver Broncos")] == "Denver Broncos"


def test_v20_file_counts_version_and_unanswerable_questions(squad_v20):
    raw = raw_questions(V20)
    assert squad_version(squad_v20) == "2.0"
    assert squad_v20.column_names == [*SQUAD_COLUMNS, "is_impossible"]
    assert len(squad_v20) == len(raw) == 9698  # ../shared/data/README.md
    assert len(set(squad_v20["title"])) == 28
    raw_impossible = [qa["is_impossible"] for _, qa in raw]
    assert squad_v20["is_impossible"] == raw_impossible
    assert sum(raw_impossible) == 4767
    for row_answers, impossible in zip(squad_v20["answers"], squad_v20["is_impossible"]):
        assert (row_answers == {"text": [], "answer_start": []}) == impossible


def test_v20_file_asked_for_as_v11_is_refused(cache_dir):
    with pytest.raises(ValueError, match=r"is SQuAD 2\.0: 4767 of its 9698 questions are unanswerable.*version='2\.0'"):
        load_squad(V20, version="1.1", cache_dir=cache_dir)


def test_explicit_versions(squad_v11, cache_dir, tmp_path):
    assert squad_version(load_squad(V20, version="v2.0", cache_dir=cache_dir)) == "2.0"
    as_v20 = load_squad(V11, version="2.0", cache_dir=cache_dir)  # lossless: every question answerable
    assert squad_version(as_v20) == "2.0" and not any(as_v20["is_impossible"])
    assert as_v20["answers"] == squad_v11["answers"]
    with pytest.raises(ValueError, match="Unknown SQuAD version '3.0'"):
        load_squad(V11, version="3.0", cache_dir=cache_dir)


def test_version_detection_from_the_questions(tmp_path):
    unanswerable = write_json(tmp_path / "no-field.json", squad_json([
        ("q1", "Who wrote it?", [answer("Ada Lovelace", 0)]),
        ("q2", "Who read it?", []),
    ], version="1.1"))
    dataset = load_squad(unanswerable, cache_dir=tmp_path / "cache")
    assert squad_version(dataset) == "2.0" and dataset["is_impossible"] == [False, True]
    field_only = write_json(tmp_path / "field.json", squad_json([("q1", "Who wrote it?", [answer("Ada", 0)], False)]))
    assert squad_version(load_squad(field_only, cache_dir=tmp_path / "cache")) == "2.0"
    # A 2.0-layout file without unanswerable questions loses nothing as 1.1.
    assert squad_version(load_squad(field_only, version="1.1", cache_dir=tmp_path / "cache")) == "1.1"
    with pytest.raises(ValueError, match="1 of its 2 questions are unanswerable"):
        load_squad(unanswerable, version="1.1", cache_dir=tmp_path / "cache")


def test_json_and_json_gz_give_the_same_dataset(squad_v11, tmp_path):
    plain = tmp_path / "dev-v1.1.json"
    plain.write_bytes(gzip.decompress(V11.read_bytes()))
    from_plain = load_squad(plain, cache_dir=tmp_path / "cache")
    assert from_plain.features == squad_v11.features
    assert from_plain.to_list() == squad_v11.to_list()


# ---------------------------------------------------------------------------------------------- refusals
def test_answer_start_that_misses_its_text_is_refused(tmp_path):
    path = write_json(tmp_path / "bad.json", squad_json([
        ("good", "Who wrote it?", [answer("Ada Lovelace", 0)]),
        ("bad-offset", "When?", [answer("1843", 3)]),
    ]))
    with pytest.raises(ValueError, match=r"'bad-offset'.*'1843' is not at answer_start 3.*first occurs at offset 40"):
        load_squad(path, cache_dir=tmp_path / "cache")
    path = write_json(tmp_path / "beyond.json", squad_json([("far", "When?", [answer("1843", 4000)])]))
    with pytest.raises(ValueError, match=r"'far'.*answer_start 4000.*Fix answer_start"):
        load_squad(path, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    "document, message",
    [
        (squad_json([("empty-q", "   ", [answer("Ada", 0)])]), r"'empty-q': the question text is empty"),
        (squad_json([("empty-c", "Who?", [])], context=" \n"), r"'empty-c': the context is empty"),
        (squad_json([("dup", "Who?", [answer("Ada", 0)]), ("dup", "When?", [answer("1843", 40)])]),
         r"question id 'dup' occurs twice"),
        (squad_json([("", "Who?", [answer("Ada", 0)])]), r"question 0 has no 'id'"),
        (squad_json([("empty-a", "Who?", [answer("", 0)])]), r"'empty-a': an answer text is empty"),
        (squad_json([("contradiction", "Who?", [answer("Ada", 0)], True)]), r"'contradiction' is marked is_impossible"),
        (squad_json([("unmarked", "Who?", [], False)]), r"'unmarked' has no answers but is not marked is_impossible"),
        ({"version": "1.1", "articles": []}, r"not SQuAD JSON: expected an object with a 'data' list"),
        ({"version": "1.1", "data": []}, r"holds no questions"),
    ],
)
def test_bad_questions_are_refused_with_their_id(tmp_path, document, message):
    path = write_json(tmp_path / "bad.json", document)
    with pytest.raises(ValueError, match=message):
        load_squad(path, cache_dir=tmp_path / "cache")


def test_missing_and_non_json_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_squad(tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_squad("data/dev-v1.1.json")  # a path typo is not taken for a Hub id
    (tmp_path / "notes.json").write_text("Ada Lovelace\n")
    with pytest.raises(ValueError, match="not a SQuAD JSON file"):
        load_squad(tmp_path / "notes.json")


def test_cache_is_keyed_on_the_content_not_the_modification_time(tmp_path):
    path = tmp_path / "dev.json"
    cache = tmp_path / "cache"
    write_json(path, squad_json([("q1", "Who wrote the first program?", [answer("Ada Lovelace", 0)])]))
    os.utime(path, (1_000_000_000, 1_000_000_000))
    first = load_squad(path, cache_dir=cache)
    assert load_squad(path, cache_dir=cache).cache_files == first.cache_files  # unchanged: loaded from the cache
    # Rewritten in place, same size and modification time (as `cp -p` or `rsync -t` can leave it).
    size = path.stat().st_size
    write_json(path, squad_json([("q1", "Who wrote the first problem?", [answer("Ada Lovelace", 0)])]))
    os.utime(path, (1_000_000_000, 1_000_000_000))
    assert path.stat().st_size == size
    second = load_squad(path, cache_dir=cache)
    assert second[0]["question"] == "Who wrote the first problem?"
    assert second.cache_files != first.cache_files


# -------------------------------------------------------------------------------------------------- split
def test_split_by_article_is_disjoint_complete_and_deterministic(squad_v20):
    parts = split_by_article(squad_v20, validation_fraction=0.25, seed=3)
    train_titles, validation_titles = set(parts["train"]["title"]), set(parts["validation"]["title"])
    assert not train_titles & validation_titles
    assert train_titles | validation_titles == set(squad_v20["title"])
    assert len(validation_titles) == 7  # round(0.25 * 28)
    assert len(parts["train"]) + len(parts["validation"]) == len(squad_v20)
    assert not set(parts["train"]["id"]) & set(parts["validation"]["id"])
    again = split_by_article(squad_v20, validation_fraction=0.25, seed=3)
    assert again["validation"]["id"] == parts["validation"]["id"] and again["train"]["id"] == parts["train"]["id"]
    # The split depends on the titles and the seed, not on the row order.
    shuffled = split_by_article(squad_v20.shuffle(seed=1), validation_fraction=0.25, seed=3)
    assert set(shuffled["validation"]["title"]) == validation_titles
    other_seed = split_by_article(squad_v20, validation_fraction=0.25, seed=4)
    assert set(other_seed["validation"]["title"]) != validation_titles
    # Rows keep dataset order on each side.
    order = {question_id: index for index, question_id in enumerate(squad_v20["id"])}
    assert [order[i] for i in parts["train"]["id"]] == sorted(order[i] for i in parts["train"]["id"])


def test_split_by_article_counts(squad_v11):
    parts = split_by_article(squad_v11, num_validation_articles=10, num_train_articles=5, seed=0)
    train_titles, validation_titles = set(parts["train"]["title"]), set(parts["validation"]["title"])
    assert (len(train_titles), len(validation_titles)) == (5, 10)
    assert not train_titles & validation_titles
    # The same validation articles as with all the other articles for training.
    all_others = split_by_article(squad_v11, num_validation_articles=10, seed=0)
    assert set(all_others["validation"]["title"]) == validation_titles


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"validation_fraction": 1.0}, r"validation_fraction must be in \(0, 1\)"),
        ({"validation_fraction": None}, r"validation_fraction must be in \(0, 1\)"),
        ({"num_validation_articles": 4}, "Cannot take 4 validation"),
        ({"num_validation_articles": 2, "num_train_articles": 3}, "Cannot take 2 validation and 3 training"),
    ],
)
def test_split_by_article_refuses_impossible_splits(kwargs, message):
    questions = datasets.Dataset.from_dict({"title": ["A", "B", "C", "D"], "id": ["a", "b", "c", "d"]})
    with pytest.raises(ValueError, match=message):
        split_by_article(questions, **kwargs)
    with pytest.raises(ValueError, match="at least two"):
        split_by_article(questions.select([0]))


# ------------------------------------------------------------------------------------------ Hub dataset ids
def hub_rows(answers_and_starts, ids=None):
    context = "Ada Lovelace wrote the first program in 1843."
    rows = []
    for index, (texts, starts) in enumerate(answers_and_starts):
        rows.append({"id": ids[index] if ids else f"h{index}", "title": "Ada", "context": context,
                     "question": f"Question {index}?", "answers": {"text": texts, "answer_start": starts}})
    features = datasets.Features({
        "id": datasets.Value("string"), "title": datasets.Value("string"), "context": datasets.Value("string"),
        "question": datasets.Value("string"),
        "answers": {"text": datasets.Sequence(datasets.Value("string")),
                    "answer_start": datasets.Sequence(datasets.Value("int32"))},
    })
    return datasets.Dataset.from_list(rows, features=features)


def test_hub_dataset_ids_go_through_load_dataset_and_the_same_checks(monkeypatch):
    calls = []

    def fake_load_dataset(dataset_id, split=None, cache_dir=None):
        calls.append((dataset_id, split))
        if split is None:
            return datasets.DatasetDict({"train": served, "validation": served})
        return served

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    served = hub_rows([(["Ada Lovelace"], [0]), ([], [])])
    loaded = load_squad("rajpurkar/squad_v2", split="validation")
    assert calls == [("rajpurkar/squad_v2", "validation")]
    assert squad_version(loaded) == "2.0" and loaded["is_impossible"] == [False, True]
    assert loaded.features == squad_features_schema("2.0")
    with pytest.raises(ValueError, match="several splits"):
        load_squad("rajpurkar/squad_v2")
    with pytest.raises(ValueError, match="1 of its 2 questions are unanswerable"):
        load_squad("rajpurkar/squad_v2", version="1.1", split="validation")
    served = hub_rows([(["Ada Lovelace"], [0]), (["1843"], [40])])
    assert squad_version(load_squad("rajpurkar/squad", split="validation")) == "1.1"
    served = hub_rows([(["Ada Lovelace"], [0]), (["1843"], [2])])
    with pytest.raises(ValueError, match=r"'h1': answer '1843' is not at answer_start 2"):
        load_squad("rajpurkar/squad", split="validation")
    served = hub_rows([(["Ada Lovelace"], [0]), (["1843"], [40])], ids=["same", "same"])
    with pytest.raises(ValueError, match=r"ids occur more than once, e.g. \['same'\]"):
        load_squad("rajpurkar/squad", split="validation")
