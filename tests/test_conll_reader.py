"""The CoNLL coreference reader reads every file the reference scorer reads, and the writer writes what both read back.

The reference scorer's test files (tests/fixtures/reference_scorer, from conll/reference-coreference-scorers) use
two-column lines (``nw/xinhua/00/chtb_0009 (10043``), coreference items without ``|`` between them (``(1(3``,
``3)1)``), a header without a part (``#begin document (LuoTestCase); ``) and lines ending in an empty column.
"""

import logging
from pathlib import Path

import pytest

from hf_entity_models.tasks.coreference import CorefDocument, read_conll_coreference, write_conll_coreference
from hf_entity_models.tasks.coreference.conll import UNKNOWN_WORD
from hf_entity_models.tasks.language_modeling import CorefDocument as LanguageModelingCorefDocument
from hf_entity_models.tasks.language_modeling import coref_documents_from_dataset, read_conll_coreference as lm_read

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "reference_scorer"
REFERENCE_FILES = sorted(FIXTURES.glob("TC-*"))


def write(tmp_path: Path, lines: list[str], name: str = "test.conll") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_reader_moved_and_language_modeling_still_exports_it():
    from hf_entity_models.tasks.coreference import conll

    assert LanguageModelingCorefDocument is CorefDocument is conll.CorefDocument
    assert lm_read is read_conll_coreference
    assert coref_documents_from_dataset is conll.coref_documents_from_dataset


@pytest.mark.parametrize("path", REFERENCE_FILES, ids=[path.name for path in REFERENCE_FILES])
def test_every_key_and_response_file_of_the_reference_suite_reads(path):
    documents = read_conll_coreference(path)
    assert len(documents) == 1
    document = documents[0]
    assert document.part == 0 and document.mentions
    assert document.name in {"LuoTestCase", "nw/xinhua/00/chtb_0009"}
    assert len(REFERENCE_FILES) == 50


def test_two_column_lines_have_the_unknown_word():
    document = read_conll_coreference(FIXTURES / "TC-B.key")[0]
    assert document.name == "nw/xinhua/00/chtb_0009" and len(document.words) == 71
    assert set(document.words) == {UNKNOWN_WORD} == {"_"}
    # "(10043" on the 2nd line, "10043)" on the 13th: one mention of cluster 10043.
    assert (1, 12, 10043) in document.mentions


def test_items_without_a_separator_are_read_left_to_right(tmp_path):
    # TC-A-7: "(1(1" on word 3, "1)1)" on word 6: two mentions of cluster 1 over the same words.
    assert read_conll_coreference(FIXTURES / "TC-A-7.response")[0].mentions.count((3, 6, 1)) == 2
    # TC-A-9: "(1(3(3..." ten opens of cluster 3 and "3)3)...1)": ten (3, 6, 3) and one (3, 6, 1).
    mentions = read_conll_coreference(FIXTURES / "TC-A-9.response")[0].mentions
    assert mentions.count((3, 6, 3)) == 10 and mentions.count((3, 6, 1)) == 1
    lines = [
        "#begin document (d); part 0",
        "d\t0\t0\tw0\t(1(2)",
        "d\t0\t1\tw1\t(1)(3|1)",
        "d\t0\t2\tw2\t-",
        "d\t0\t3\tw3\t3)",
        "#end document",
    ]
    document = read_conll_coreference(write(tmp_path, lines))[0]
    assert sorted(document.mentions) == [(0, 0, 2), (0, 1, 1), (1, 1, 1), (1, 3, 3)]


def test_header_variants_and_trailing_empty_columns(tmp_path):
    lines = [
        "#begin document (LuoTestCase); ",  # no part: part 0
        "t\t0\t0\ta\t(0",
        "t\t0\t1\tb\t0)\t",  # an empty column after the coreference, as the reference's files have
        "t\t0\t2\tc\t_\t\t",
        "#end document",
        "# begin document (other); part 002",
        "o\t2\t0\tx\t(4)",
        "# end document",
    ]
    first, second = read_conll_coreference(write(tmp_path, lines))
    assert (first.name, first.part, first.words, first.mentions) == ("LuoTestCase", 0, ["a", "b", "c"], [(0, 1, 0)])
    assert (second.name, second.part, second.mentions) == ("other", 2, [(0, 0, 4)])


def test_litbank_lines_end_in_an_empty_coreference_column(tmp_path):
    lines = [
        "#begin document (book); part 0",
        "book\t0\t0\tCHAPTER\t_\t_\t_\t_\t_\t_\t_\t_\t",
        "book\t0\t1\tLondon\t_\t_\t_\t_\t_\t_\t_\t_\t(1)",
        "#end document",
    ]
    document = read_conll_coreference(write(tmp_path, lines))[0]
    assert document.words == ["CHAPTER", "London"] and document.mentions == [(1, 1, 1)]


def test_a_double_antecedent_is_discarded_with_a_warning(tmp_path, caplog):
    lines = ["#begin document (d); part 0", "d\t0\t0\tthey\t(3+4)|(5)", "#end document"]
    with caplog.at_level(logging.WARNING):
        document = read_conll_coreference(write(tmp_path, lines))[0]
    assert document.mentions == [(0, 0, 5)]
    assert "double antecedent (3+4)" in caplog.text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("d\t0\tw", "at least 5 columns .* or 2 .* got 3"),
        ("d 0 0 w", "got 4"),
        ("d\t0\t0\tw\t(1)x", "unreadable coreference item '\\(1\\)x'"),
        ("d\t0\t0\tw\t(1||(2)", "unreadable coreference item ''"),
        ("d (1)2", "unreadable coreference item '\\(1\\)2'"),
        ("d\t0\t0\tw\t(1)1)", "'1\\)' closes a mention of cluster 1, but none is open"),
    ],
)
def test_malformed_lines_still_raise_naming_file_and_line(tmp_path, line, message):
    path = write(tmp_path, ["#begin document (d); part 0", line, "#end document"])
    with pytest.raises(ValueError, match=message) as error:
        read_conll_coreference(path)
    assert f"{path}:2:" in str(error.value)


def test_an_unclosed_mention_written_without_separators_is_reported(tmp_path):
    path = write(tmp_path, ["#begin document (d); part 0", "d\t0\t0\tw\t(1(2", "d\t0\t1\tv\t2)", "#end document"])
    with pytest.raises(ValueError, match="cluster 1 opened here is never closed"):
        read_conll_coreference(path)


# ------------------------------------------------------------------------------------------------ writing
def test_writing_and_reading_back_gives_the_same_documents(tmp_path):
    documents = [
        CorefDocument("a", 0, ["Ann", "saw", "her", "own", "cat", "."], [(0, 0, 1), (2, 2, 1), (2, 4, 2), (2, 3, 2)]),
        # Nested mentions of one cluster, a mention starting where another of its cluster ends is one-word, repeats.
        CorefDocument("a", 1, ["x", "y", "z", "q"], [(0, 3, 7), (1, 2, 7), (2, 2, 7), (3, 3, 7), (3, 3, 7), (0, 0, 8)]),
        CorefDocument("b/c d", 12, ["only"], []),
    ]
    path = write_conll_coreference(documents, tmp_path / "out.conll")
    back = read_conll_coreference(path)
    assert [(d.name, d.part, d.words, d.mentions) for d in back] == [
        (d.name, d.part, d.words, d.mentions) for d in documents
    ]
    assert path.read_text().splitlines()[0] == "#begin document (a); part 000"
    write_conll_coreference(documents[0], tmp_path / "litbank.conll", part_digits=1)
    assert (tmp_path / "litbank.conll").read_text().splitlines()[0] == "#begin document (a); part 0"


@pytest.mark.parametrize("path", REFERENCE_FILES[::7], ids=[path.name for path in REFERENCE_FILES[::7]])
def test_the_reference_files_round_trip(tmp_path, path):
    documents = read_conll_coreference(path)
    back = read_conll_coreference(write_conll_coreference(documents, tmp_path / path.name))
    assert [(d.name, d.part, d.words, d.mentions) for d in back] == [
        (d.name, d.part, d.words, d.mentions) for d in documents
    ]


def test_litbank_books_round_trip(tmp_path, shared_data):
    books = read_conll_coreference(sorted((shared_data / "litbank" / "conll").glob("*.conll"))[:6])
    back = read_conll_coreference(write_conll_coreference(books, tmp_path / "books.conll", part_digits=1))
    assert [(d.name, d.part, d.words, d.mentions) for d in back] == [
        (d.name, d.part, d.words, d.mentions) for d in books
    ]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (CorefDocument("d", 0, ["a", "b", "c", "d"], [(0, 2, 1), (1, 3, 1)]), r"mentions \[.*\] cannot be written"),
        (CorefDocument("d", 0, ["a\tb"], []), "holds a tab or line break"),
        (CorefDocument("d", 0, [""], []), "is empty"),
        (CorefDocument("d\ne", 0, ["a"], []), "the name"),
        (CorefDocument("d", 0, ["a"], [(0, 0, -1)]), "negative"),
    ],
)
def test_the_writer_refuses_what_a_conll_file_cannot_hold(tmp_path, document, message):
    with pytest.raises(ValueError, match=message):
        write_conll_coreference(document, tmp_path / "out.conll")
    assert not (tmp_path / "out.conll").exists()


def test_the_writer_checks_its_arguments(tmp_path):
    document = CorefDocument("d", 0, ["a"], [])
    with pytest.raises(ValueError, match="written twice"):
        write_conll_coreference([document, document], tmp_path / "out.conll")
    with pytest.raises(ValueError, match="part_digits"):
        write_conll_coreference(document, tmp_path / "out.conll", part_digits=0)
    with pytest.raises(TypeError, match="CorefDocument"):
        write_conll_coreference(["d"], tmp_path / "out.conll")
