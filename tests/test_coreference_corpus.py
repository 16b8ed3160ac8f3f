"""Coreference over a corpus (issue 39): `TextCorpus` (a JSON-lines file or a folder of .txt files), `predict_corpus`
(batches, one JSON line per document, bad documents reported without losing the others, resumable), CoNLL-2012
responses (`conll_corpus_responses`), and `hf-entity predict --texts / --conll / --resolve` in-process."""

import json
from pathlib import Path

import pytest
from conftest import error_line, run_cli, saved_tiny_petra
from transformers import AutoTokenizer, pipeline

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import (
    CorefDocument,
    document_responses,
    document_rows,
    read_conll_coreference,
    write_conll_coreference,
)
from hf_entity_models.tasks.coreference.corpus import (
    TextCorpus,
    conll_corpus_responses,
    predict_corpus,
    resume_output,
)

DOCUMENT = dict(coreference_mode="document", document_hidden_size=16, max_span_width=3, span_width_size=4,
                span_threshold=-1e6)
STORY = "Anna met her brother Tom in Paris. He was late, and she told him so. Tom laughed. "
TEXTS = {"a": STORY, "b": "Bob slept. He dreamt of Ann.", "c": STORY * 3, "d": "It rained.", "e": STORY + "The end."}


@pytest.fixture(scope="module")
def document_checkpoint(tmp_path_factory, one_torch_thread) -> Path:
    return saved_tiny_petra(tmp_path_factory.mktemp("petra-document"), **DOCUMENT)


@pytest.fixture(scope="module")
def token_checkpoint(tmp_path_factory, one_torch_thread) -> Path:
    return saved_tiny_petra(tmp_path_factory.mktemp("petra-tokens"), mention_threshold=0.3)


@pytest.fixture(scope="module")
def pipe(document_checkpoint):
    return pipeline("coreference", model=str(document_checkpoint), device="cpu")


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def records(path: Path) -> dict:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len({json.dumps(line["id"]) for line in lines}) == len(lines), "one line per document"
    return {line["id"]: line for line in lines}


@pytest.fixture
def corpus_file(tmp_path) -> Path:
    """Five good documents (one without an id: its line number), an empty text, a text of no word (the model's
    pipeline refuses it), a line that is not JSON and a text that is not a string."""
    return write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "a", "text": TEXTS["a"]}, {"id": "b", "text": TEXTS["b"]}, {"text": TEXTS["c"]},
        {"id": "empty", "text": "  \n"}, {"id": "d", "text": TEXTS["d"], "source": "ignored"}, "",
        {"id": "noword", "text": "\u200b\u0007"}, '{"id": "broken", "text": "no end', {"id": "e", "text": TEXTS["e"]},
        {"id": "number", "text": 7},
    ])  # fmt: skip


# ------------------------------------------------------------------------------------------------- reading
def test_a_jsonl_corpus_names_documents_by_id_or_line_number(corpus_file):
    corpus = TextCorpus(corpus_file)
    assert corpus.ids == ["a", "b", 3, "empty", "d", "noword", 8, "e", "number"]
    documents = {document.id: document for document in corpus}
    assert documents[3].text == TEXTS["c"] and documents["d"].where == f"{corpus_file}:5"
    assert documents["empty"].error == "the text is empty"
    assert documents[8].error.startswith("line 8 is not JSON")
    assert documents["number"].error == 'line 10 has a int as "text"; give the text as a string'


def test_a_folder_corpus_reads_its_txt_files_by_name(tmp_path):
    (tmp_path / "b.txt").write_text("Bob slept.\r\nHe dreamt.", encoding="utf-8")
    (tmp_path / "a.txt").write_bytes(b"Ann \xff met him.")
    (tmp_path / "notes.md").write_text("not a document")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.txt").write_text("not read")
    corpus = TextCorpus(tmp_path)
    assert corpus.ids == ["a.txt", "b.txt"]
    first, second = corpus
    assert first.text is None and first.error.startswith("not UTF-8 (invalid start byte at byte 4)")
    assert second.text == "Bob slept.\nHe dreamt."  # as Path.read_text gives it: offsets index that text


@pytest.mark.parametrize(
    "lines, message",
    [
        ([{"id": "x", "text": "A."}, {"id": "x", "text": "B."}],
         r"the id 'x' names two documents \(documents 1 and 2\)"),
        ([{"id": 2, "text": "A."}, {"text": "B."}], "the id 2 names two documents"),  # line 2 has no id: 2
        ([], "holds no document"),
    ],
)
def test_repeated_ids_and_empty_corpora_are_refused(tmp_path, lines, message):
    with pytest.raises(ValueError, match=message):
        TextCorpus(write_jsonl(tmp_path / "corpus.jsonl", lines))


# ---------------------------------------------------------------------------------------------- predicting
def test_predict_corpus_writes_every_document_and_reports_the_bad_ones(pipe, corpus_file, tmp_path):
    output, reported = tmp_path / "clusters.jsonl", []
    summary = predict_corpus(pipe, TextCorpus(corpus_file), output, batch_size=3,
                             on_error=lambda document, error: reported.append(document.id), show_progress=False)
    written = records(output)
    assert set(written) == {"a", "b", 3, "empty", "d", "noword", 8, "e", "number"}
    for key, text in [("a", TEXTS["a"]), ("b", TEXTS["b"]), (3, TEXTS["c"]), ("d", TEXTS["d"]), ("e", TEXTS["e"])]:
        assert written[key]["clusters"] == pipe(text)["clusters"], key
    # "noword" fails inside the pipeline: its batch is read again one document at a time.
    assert written["noword"]["error"].startswith("ValueError: The text has no word")
    assert written["empty"] == {"id": "empty", "error": "the text is empty"}
    assert reported == summary.failed == ["empty", "noword", 8, "number"]
    assert (summary.written, summary.skipped) == (5, 0)


def test_a_rerun_skips_what_is_done_and_retries_what_failed(pipe, tmp_path):
    corpus_file = write_jsonl(tmp_path / "corpus.jsonl", [{"id": key, "text": text} for key, text in TEXTS.items()]
                              + [{"id": "empty", "text": ""}])
    output = tmp_path / "clusters.jsonl"
    first = predict_corpus(pipe, TextCorpus(corpus_file), output, batch_size=2, show_progress=False)
    assert (first.written, first.failed) == (5, ["empty"])
    before = records(output)

    again = predict_corpus(pipe, TextCorpus(corpus_file), output, batch_size=2, show_progress=False)
    assert (again.written, again.skipped, again.retried, again.failed) == (0, 5, 1, ["empty"])
    assert records(output) == before  # the failed line was replaced by its retry's

    # A line removed (or cut short by an interrupted run) is done again; nothing else is.
    lines = output.read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["id"] not in ("c", "e")]
    output.write_text("\n".join(kept) + '\n{"id": "e", "clus')
    state = resume_output(output)
    assert "c" not in {json.loads(key) for key in state.done} and state.dropped_lines == 2
    third = predict_corpus(pipe, TextCorpus(corpus_file), output, batch_size=2, show_progress=False)
    assert (third.written, third.skipped) == (2, 3)  # c and e (its line was cut short)
    assert records(output) == before


# ----------------------------------------------------------------------------------------------------- CoNLL
def conll_documents() -> list[CorefDocument]:
    words = "Anna met her brother Tom . He was late and she told him so .".split()
    return [
        CorefDocument("story_one", 0, words, [(0, 0, 1), (2, 2, 1), (2, 3, 2), (6, 6, 2), (10, 10, 1)],
                      sentence_starts=[6]),
        CorefDocument("story_two", 0, words[6:], [(0, 0, 1)]),
    ]


def test_conll_responses_of_a_document_checkpoint_are_its_document_responses(document_checkpoint):
    model = PetraForCoreference.from_pretrained(document_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(document_checkpoint)
    documents = conll_documents()
    responses = conll_corpus_responses(model, tokenizer, documents, batch_size=2, show_progress=False)
    expected = document_responses(model, documents, document_rows(documents, tokenizer), show_progress=False)
    assert [(r.name, r.words, r.mentions) for r in responses] == [(r.name, r.words, r.mentions) for r in expected]
    assert all(response.mentions for response in responses)


# -------------------------------------------------------------------------------------------------------- CLI
def test_predict_text_resolve_prints_the_resolved_text(document_checkpoint, pipe, capsys):
    status, out, err = run_cli(capsys, "predict", document_checkpoint, "--text", STORY, "--resolve")
    assert status == 0, err
    assert json.loads(out) == json.loads(json.dumps(pipe(STORY, resolve=True)))
    assert set(json.loads(out)) == {"clusters", "resolved_text", "replacements"}


def test_predict_texts_writes_resumes_and_names_the_failures(document_checkpoint, pipe, tmp_path, capsys):
    folder = tmp_path / "texts"
    folder.mkdir()
    for key, text in TEXTS.items():
        (folder / f"{key}.txt").write_text(text, encoding="utf-8")
    (folder / "latin1.txt").write_bytes("Zo\xe9 smiled.".encode("latin-1"))
    output = tmp_path / "clusters.jsonl"
    argv = ["predict", document_checkpoint, "--texts", folder, "--output", output, "--batch-size", 4, "--resolve"]
    status, out, err = run_cli(capsys, *argv)
    assert status == 1 and out == ""
    assert "latin1.txt (" in err and "not UTF-8" in err  # named on stderr as it happens
    assert "1 of the 6 documents failed: latin1.txt" in error_line(err, "predict")
    written = records(output)
    assert written["latin1.txt"]["error"].startswith("not UTF-8")
    assert written["a.txt"] == {"id": "a.txt", **json.loads(json.dumps(pipe(TEXTS["a"], resolve=True)))}

    (folder / "latin1.txt").write_text("Zoé smiled.", encoding="utf-8")  # fixed: the rerun retries it
    status, _, err = run_cli(capsys, *argv)
    assert status == 0, err
    assert "skipping 5 of the 6 documents, done before; retrying 1 that failed" in err
    assert records(output)["latin1.txt"]["clusters"] == pipe("Zoé smiled.")["clusters"]
    assert records(output).keys() == written.keys()


def test_predict_texts_refuses_repeated_ids_before_the_model_loads(document_checkpoint, tmp_path, capsys):
    corpus_file = write_jsonl(tmp_path / "corpus.jsonl", [{"id": "x", "text": "A."}, {"id": "x", "text": "B."}])
    status, _, err = run_cli(capsys, "predict", document_checkpoint, "--texts", corpus_file, "--output",
                             tmp_path / "out.jsonl")
    assert status == 1 and "the id 'x' names two documents" in error_line(err, "predict")
    assert not (tmp_path / "out.jsonl").exists()


def test_predict_conll_writes_responses_the_reader_reads_back(document_checkpoint, token_checkpoint, tmp_path, capsys):
    key = write_conll_coreference(conll_documents(), tmp_path / "key.conll")
    for checkpoint in (document_checkpoint, token_checkpoint):
        responses = tmp_path / f"{checkpoint.name}.conll"
        status, _, err = run_cli(capsys, "predict", checkpoint, "--conll", key, "--responses", responses,
                                 "--batch-size", 2)
        assert status == 0, err
        assert f"wrote the clusters of 2 documents to {responses}" in err
        read = read_conll_coreference(responses)
        assert [(d.name, d.words) for d in read] == [(d.name, d.words) for d in conll_documents()]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--text", STORY, "--resolve", "--pronoun", 35, 37, "--candidate", 0, 4], "--resolve rewrites the text"),
        (["--texts", "corpus.jsonl"], "add --output clusters.jsonl"),
        (["--conll", "key.conll"], "add --responses FILE.conll"),
        (["--text", STORY, "--responses", "out.conll"], "--responses only applies with --conll, not with --text"),
        (["--conll", "key.conll", "--responses", "out.conll", "--resolve"], "--resolve only applies with --text or "
         "--texts, not with --conll"),
        (["--texts", "corpus.jsonl", "--output", "out.jsonl", "--pronoun", 1, 2], "--pronoun only applies with --text"),
        (["--texts", "missing", "--output", "out.jsonl"], "missing does not exist"),
    ],
)
def test_predict_corpus_option_errors_are_one_line(token_checkpoint, tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "corpus.jsonl", [{"id": 1, "text": "A."}])
    write_conll_coreference(conll_documents(), tmp_path / "key.conll")
    status, out, err = run_cli(capsys, "predict", token_checkpoint, *argv)
    assert status == 1 and out == ""
    assert message in error_line(err, "predict")
