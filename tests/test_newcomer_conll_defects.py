"""The CoNLL defects a newcomer found ("a newcomer's review", items 1-3, 6-8, 11 and 12): responses the reference
scorer could not match to their key, responses of other words scored 100, a stray tab that turned every word into
``_``, responses written into the key folder, empty files and byte-order marks that ended in tracebacks or unnamed
errors, and a metric input that asked for terabytes. Each is either read right or refused in one line naming the
file."""

import json
import re
from pathlib import Path

import evaluate
import pytest
from conftest import error_line, run_cli
from test_cli_conll import QUICK, TINY_PETRA, data, story, trained  # noqa: F401 (module fixtures reused)

from hf_entity_models.metrics import metric_path
from hf_entity_models.tasks.coreference import (
    CorefDocument,
    load_gap,
    read_conll_coreference,
    score_coreference,
    write_conll_coreference,
)
from hf_entity_models.tasks.coreference.conll import UNKNOWN_WORD
from hf_entity_models.tasks.coreference.conll_metrics import CONLL_METRICS
from hf_entity_models.tasks.coreference.synthetic import write_people_corpus_tsv

REFERENCE_SCORER_FILES = Path(__file__).resolve().parent / "fixtures" / "reference_scorer"
# lib/CorScorer.pm (conll/reference-coreference-scorers v8.01), GetCoreference and GetFileNames: after `chomp` and
# `s/\r$//`, a document is the text this captures; key and response documents are matched by equal text.
PERL_BEGIN_DOCUMENT = re.compile(r"^\#\s*begin document (.*?)$")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def perl_document_ids(path: Path) -> list[str]:
    """The document ids the reference scorer reads in a file, in file order (its matching rule, transcribed)."""
    ids = []
    for line in path.read_bytes().decode("utf-8").split("\n"):
        match = PERL_BEGIN_DOCUMENT.match(line.removesuffix("\r"))
        if match:
            ids.append(match.group(1))
    return ids


def write_lines(folder: Path, lines: list[str], name: str = "story.conll") -> Path:
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------ 1. the key's header, written back verbatim
def test_a_litbank_book_written_back_keeps_the_document_id_the_reference_scorer_matches(shared_data, tmp_path):
    key = sorted((shared_data / "litbank" / "conll").glob("*.conll"))[0]
    documents = read_conll_coreference(key)
    written = write_conll_coreference(documents, tmp_path / "written.conll")
    assert perl_document_ids(key) == [f"({documents[0].name}); part 0"]
    assert perl_document_ids(written) == perl_document_ids(key)
    assert [(d.name, d.part, d.words, d.mentions) for d in read_conll_coreference(written)] == [
        (d.name, d.part, d.words, d.mentions) for d in documents
    ]


def test_a_header_without_a_part_is_written_back_as_read(tmp_path):
    key = REFERENCE_SCORER_FILES / "TC-A.key"  # "#begin document (LuoTestCase); " (no part, a trailing space)
    written = write_conll_coreference(read_conll_coreference(key), tmp_path / "written.conll")
    assert perl_document_ids(written) == perl_document_ids(key) == ["(LuoTestCase); "]


def test_a_document_built_by_hand_keeps_todays_header_and_a_stale_header_is_refused(tmp_path):
    built = CorefDocument("story", 0, ["Ann", "smiled"], [(0, 0, 1)])
    assert perl_document_ids(write_conll_coreference(built, tmp_path / "built.conll")) == ["(story); part 000"]
    renamed = CorefDocument("other", 0, ["Ann", "smiled"], [(0, 0, 1)], header="(story); part 0")
    with pytest.raises(ValueError, match=r"header '\(story\); part 0' names document 'story' part 0, not 'other'"):
        write_conll_coreference(renamed, tmp_path / "renamed.conll")
    with pytest.raises(ValueError, match="line break"):
        CorefDocument("story", 0, ["Ann"], header="(story); part 0\n#end document")


def test_evaluate_writes_responses_the_reference_scorer_matches_and_scores_as_reported(trained, data, tmp_path,
                                                                                       capsys):
    key = write_conll_coreference(story(4), tmp_path / "key.conll", part_digits=1)  # LitBank's "part 0"
    responses = tmp_path / "responses.conll"
    status, out, err = run_cli(capsys, "evaluate", trained["folder"], "--conll", key, "--responses", responses,
                               "--json")
    assert status == 0, err[-3000:]
    assert perl_document_ids(responses) == perl_document_ids(key) == ["(story_4); part 0"]
    reported, rescored = json.loads(out), score_coreference(key, responses)
    for metric in CONLL_METRICS:
        assert rescored[metric] == pytest.approx(reported[metric]), metric
    assert rescored["conll_f1"] == pytest.approx(reported["conll_f1"])


# ------------------------------------------------------------------------------- 2. key and response: the same words
WORDS = ["Ann", "saw", "her", "cat"]
MENTIONS = [(0, 0, 1), (2, 2, 1), (3, 3, 2)]


def test_a_response_of_other_words_is_refused_naming_the_first_difference():
    key = CorefDocument("story", 0, WORDS, MENTIONS)
    response = CorefDocument("story", 0, ["Ann", "saw", "his", "dog"], MENTIONS)
    with pytest.raises(ValueError, match=r"'story' part 0: word 2 is 'her' in the key but 'his' in the response"):
        score_coreference([key], [response])


def test_the_conll_files_metric_refuses_a_response_of_other_words(tmp_path):
    key = write_conll_coreference(CorefDocument("story", 0, WORDS, MENTIONS), tmp_path / "key.conll")
    response = write_conll_coreference(CorefDocument("story", 0, ["Bob", *WORDS[1:]], MENTIONS), tmp_path / "r.conll")
    files = evaluate.load(metric_path("coreference"), "conll_files")
    with pytest.raises(ValueError, match=r"word 0 is 'Ann' in the key but 'Bob' in the response"):
        files.compute(predictions=[str(response)], references=[str(key)])


def test_a_side_without_words_still_scores_against_words():
    with_words = CorefDocument("story", 0, WORDS, MENTIONS)
    two_columns = CorefDocument("story", 0, [UNKNOWN_WORD] * len(WORDS), MENTIONS)  # the scorer's test files
    assert score_coreference([with_words], [two_columns])["conll_f1"] == 100.0
    assert score_coreference([two_columns], [with_words])["conll_f1"] == 100.0


# ------------------------------------------------------------------------------------- 3. one column layout per file
@pytest.mark.parametrize(
    "token_lines, line",
    [
        (["story 0 0 Ann (1)", "story 0 1 saw -", "story 0 2 her\t(1)"], 4),
        (["story\t0\t0\tAnn\t(1)", "story 0 1 saw -"], 3),
        (["story 0 0 Ann\t(1)", "story 0 1 saw\t-"], 2),
    ],
    ids=["tab-in-a-space-file", "spaces-in-a-tab-file", "tab-before-the-last-column-everywhere"],
)
def test_a_file_that_mixes_tabs_and_spaces_is_refused_naming_the_line(token_lines, line, tmp_path):
    path = write_lines(tmp_path, ["#begin document (story); part 0", *token_lines, "#end document"])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:{line}: "):
        read_conll_coreference(path)


def test_space_and_tab_files_still_read(tmp_path):
    spaces = write_lines(tmp_path, ["#begin document (s); part 0", "s 0 0 Ann  (1)", "s 0 1 saw -", "#end document"])
    tabs = write_lines(tmp_path, ["#begin document (t); part 0", "t\t0\t0\tAnn\t(1)\t", "#end document"], "t.conll")
    assert read_conll_coreference(spaces)[0].words == ["Ann", "saw"]
    assert read_conll_coreference(tabs)[0].words == ["Ann"]


# --------------------------------------------------------------------------------- 6. no output inside an input folder
@pytest.mark.parametrize("option", ["--responses", "--output"])
def test_evaluate_refuses_an_output_inside_the_conll_folder(option, trained, tmp_path, capsys):
    books = tmp_path / "books"  # a folder of its own: a defect must not leave a file in the shared one
    books.mkdir()
    write_conll_coreference(story(4), books / "story_4.conll")
    inside = books / ("responses.conll" if option == "--responses" else "result.json")
    status, out, err = run_cli(capsys, "evaluate", trained["folder"], "--conll", books, option, inside)
    assert status == 1 and out == ""
    assert f"{option} {inside} is inside --conll {books}" in error_line(err, "evaluate")
    assert not inside.exists()
    assert len(read_conll_coreference(books)) == 1


# ------------------------------------------------------------------------ 7, 12. empty files: one line naming the file
@pytest.mark.parametrize("content", ["", "  \n\n\t\n"], ids=["empty", "blank"])
def test_a_conll_file_without_a_document_is_refused_naming_it(content, tmp_path):
    path = tmp_path / "empty.conll"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: .*holds no '#begin document' block"):
        read_conll_coreference(path)


def test_train_refuses_an_empty_conll_validation_file_in_one_line(data, tmp_path, capsys):
    empty = tmp_path / "validation.conll"
    empty.write_text(" \n", encoding="utf-8")
    status, out, err = run_cli(capsys, "train", "petra", "--conll", data["books"], "--validation", empty,
                               "--encoder", data["encoder"], *TINY_PETRA, *QUICK, "--output-dir", tmp_path / "out")
    assert status == 1
    assert f"{empty}: the CoNLL file holds no '#begin document' block" in error_line(err, "train petra")


def test_train_refuses_an_empty_gap_validation_file_in_one_line(data, tmp_path, capsys):
    train = write_people_corpus_tsv(tmp_path / "train.tsv", 4, seed=1, id_prefix="t")
    empty = tmp_path / "validation.tsv"
    empty.write_text("\n \n", encoding="utf-8")
    status, out, err = run_cli(capsys, "train", "petra", "--train", train, "--validation", empty,
                               "--encoder", data["encoder"], *TINY_PETRA, *QUICK[:2], "--output-dir", tmp_path / "out")
    assert status == 1
    assert f"{empty}: the file is empty" in error_line(err, "train petra")


def test_train_on_conll_refuses_an_empty_list_of_validation_documents():
    from types import SimpleNamespace

    from hf_entity_models.tasks.coreference.conll_training import train_on_conll

    model = SimpleNamespace(config=SimpleNamespace())  # refused before the model is used
    with pytest.raises(ValueError, match="The validation documents are an empty list"):
        train_on_conll(model, None, [story(0)], [], "unused")


def test_evaluate_refuses_an_empty_conll_file_naming_it(trained, tmp_path, capsys):
    empty = tmp_path / "empty.conll"
    empty.write_text("", encoding="utf-8")
    status, out, err = run_cli(capsys, "evaluate", trained["folder"], "--conll", empty)
    assert status == 1 and out == ""
    assert f"{empty}: the CoNLL file holds no '#begin document' block" in error_line(err, "evaluate")


# -------------------------------------------------------------------------- 8. the metric's word indices are bounded
def test_the_coreference_metric_refuses_a_word_index_past_its_limit():
    coreference = evaluate.load(metric_path("coreference"))
    with pytest.raises(ValueError, match=r"predictions\[0\]\[0\]\[1\] = \[1000000000000, 1000000000000\]: word index "
                                         r"1000000000000 is past the limit of 999999"):
        coreference.compute(predictions=[[[[0, 0], [10**12, 10**12]]]], references=[[]])


# ------------------------------------------------------------------------------------- 11. a byte-order mark is read
def test_a_conll_file_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.conll"
    path.write_bytes("\ufeff#begin document (story); part 0\nstory\t0\t0\tAnn\t(1)\n#end document\n".encode())
    document = read_conll_coreference(path)[0]
    assert (document.name, document.words, document.mentions) == ("story", ["Ann"], [(0, 0, 1)])
    assert perl_document_ids(write_conll_coreference(document, tmp_path / "out.conll")) == ["(story); part 0"]


def test_a_gap_file_with_a_byte_order_mark_reads(tmp_path):
    plain = write_people_corpus_tsv(tmp_path / "plain.tsv", 2, seed=3, id_prefix="b")
    marked = tmp_path / "marked.tsv"
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert load_gap(str(marked))["id"] == load_gap(str(plain))["id"]
