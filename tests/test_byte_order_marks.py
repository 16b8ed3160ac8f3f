"""Every reader of a user's text file reads a UTF-8 byte-order mark (which Windows editors write) as the mark it is,
not as part of the first line: the file gives what the same file without the mark gives."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hf_entity_models.tasks.coreference import read_conll_coreference
from hf_entity_models.tasks.embeddings.definitions import load_definitions
from hf_entity_models.tasks.embeddings.replacement import read_task_texts
from hf_entity_models.tasks.embeddings.word_similarity import read_word_similarity
from hf_entity_models.tasks.language_modeling.corpus_readers import (
    read_gap_texts,
    read_litbank_documents,
    read_squad_contexts,
)
from hf_entity_models.tasks.language_modeling.lambada import read_lambada
from hf_entity_models.tasks.question_answering.metrics import read_squad_gold

BOM = "\ufeff"


def _head(path: Path, lines: int) -> str:
    with path.open(encoding="utf-8") as handle:
        return "".join(line for _, line in zip(range(lines), handle))


def _plain_and_marked(folder: Path, name: str, text: str) -> tuple[Path, Path]:
    """The same text twice: as is, and after a byte-order mark (each in a folder of its own, same file name)."""
    paths = []
    for variant, prefix in (("plain", ""), ("marked", BOM)):
        (folder / variant).mkdir()
        path = folder / variant / name
        data = (prefix + text).encode("utf-8")
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        paths.append(path)
    return paths[0], paths[1]


def _first_litbank_book(data: Path) -> str:
    book = sorted((data / "litbank" / "conll").glob("*.conll"))[0]
    return book.read_text(encoding="utf-8")


def _small_squad(data: Path) -> str:
    with gzip.open(data / "squad" / "squad-v1.1-dev-public.json.gz", "rt", encoding="utf-8") as handle:
        squad = json.load(handle)
    return json.dumps({"version": squad.get("version", "1.1"), "data": squad["data"][:1]})


# (reader, file name, the text it reads from the shared data)
READERS: dict[str, tuple[Callable[[Path], object], str, Callable[[Path], str]]] = {
    "conll coreference": (read_conll_coreference, "book.conll", _first_litbank_book),
    "litbank text": (lambda path: read_litbank_documents(path.parent), "book.conll", _first_litbank_book),
    "gap texts": (read_gap_texts, "gap.tsv", lambda data: _head(data / "gap" / "gap-development.tsv", 20)),
    "lambada": (read_lambada, "lambada.jsonl", lambda data: _head(data / "lambada" / "lambada_test.jsonl", 5)),
    "word similarity": (
        read_word_similarity, "EN-MC-30.txt", lambda data: _head(data / "word_similarity" / "EN-MC-30.txt", 10)
    ),
    "wordnet glosses": (
        lambda path: load_definitions(str(path)).to_list(),
        "glosses.tsv",
        lambda data: _head(data / "wordnet" / "wordnet30_glosses.tsv", 30),
    ),
    "task texts": (read_task_texts, "texts.txt", lambda data: "Ann met Bob.\nShe waved.\n"),
    "squad contexts": (read_squad_contexts, "squad.json.gz", _small_squad),
    "squad gold": (read_squad_gold, "squad.json.gz", _small_squad),
}


@pytest.mark.parametrize("reader_name", sorted(READERS))
def test_a_byte_order_mark_reads_as_the_same_file_without_it(reader_name, shared_data, tmp_path):
    reader, file_name, text_of = READERS[reader_name]
    plain, marked = _plain_and_marked(tmp_path, file_name, text_of(shared_data))
    expected = reader(plain)
    read = reader(marked)
    if reader_name == "conll coreference":  # where each document was read from differs: the folder's name
        expected = [(d.name, d.part, d.header, d.words, d.mentions) for d in expected]
        read = [(d.name, d.part, d.header, d.words, d.mentions) for d in read]
    assert read == expected
    assert BOM not in repr(read)
