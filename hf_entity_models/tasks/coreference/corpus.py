"""Coreference over a corpus: the clusters of many texts, found in batches by `pipeline("coreference")` and written
as JSON lines while the work goes on (a rerun resumes), and CoNLL-2012 responses for every document of a CoNLL folder.

Inputs (`TextCorpus`):

* a JSON-lines file, one document per line: ``{"id": "chapter-1", "text": "Emma smiled. She ..."}``. ``"id"`` (a
  string or an integer) is optional: a line without one is named by its line number (1 for the first line). Blank
  lines are skipped and other keys ignored. Character offsets index the ``"text"`` value.
* a folder of UTF-8 ``.txt`` files, one document each (sub-folders are not read), named by the file name
  (``"chapter-1.txt"``). Offsets index the text as ``Path(file).read_text(encoding="utf-8")`` returns it.

Output (`predict_corpus`): one JSON object per line, one line per document, in the order they are done:

* ``{"id": ..., "clusters": [[{"start": 0, "end": 4, "text": "Emma"}, ...], ...]}``, with ``"resolved_text"`` and
  ``"replacements"`` when resolving (`resolve_coreferences`);
* ``{"id": ..., "error": "..."}`` for a document that could not be read (bad JSON, not UTF-8, no text) or clustered.

Run again on the same output file, `predict_corpus` skips the documents already written with their clusters and
retries those that failed (`resume_output`).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers.utils import logging

from .conll import CorefDocument

logger = logging.get_logger(__name__)

DocumentId = str | int


@dataclass(frozen=True)
class CorpusDocument:
    """One document of a corpus: its id, where it comes from (``"corpus.jsonl:3"``, ``"texts/a.txt"``) and its text,
    or why it could not be read (`error`; the text is then None)."""

    id: DocumentId
    where: str
    text: str | None = None
    error: str | None = None


class TextCorpus:
    """The documents of a JSON-lines file or a folder of ``.txt`` files (see the module docstring). The ids are read
    when it is built (two documents with one id are refused), the texts only when it is iterated.

    Example:
        >>> corpus = TextCorpus("books.jsonl")  # doctest: +SKIP
        >>> len(corpus), corpus.ids[:2]  # doctest: +SKIP
        (80, ['emma', 'persuasion'])
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            raise ValueError(f"{self.path} does not exist; give a JSON-lines file or a folder of .txt files.")
        self.is_folder = self.path.is_dir()
        if self.is_folder:
            self._files = sorted(entry for entry in self.path.iterdir() if entry.suffix == ".txt" and entry.is_file())
            if not self._files:
                raise ValueError(f"{self.path} holds no .txt file; put one document per .txt file in it.")
            self.ids: list[DocumentId] = [file.name for file in self._files]
        else:
            self.ids = [document.id for document in self._jsonl_documents(keep_text=False)]
            if not self.ids:
                raise ValueError(f"{self.path} holds no document; write one JSON object per line: "
                                 '{"id": "doc-1", "text": "..."}.')
        _refuse_repeated_ids(self.ids, self.path, self.is_folder)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[CorpusDocument]:
        if self.is_folder:
            return (_text_file_document(file) for file in self._files)
        return self._jsonl_documents(keep_text=True)

    def _jsonl_documents(self, keep_text: bool) -> Iterator[CorpusDocument]:
        with self.path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    document = _jsonl_document(line, number, f"{self.path}:{number}")
                    yield document if keep_text else CorpusDocument(document.id, document.where)


def _jsonl_document(line: bytes, number: int, where: str) -> CorpusDocument:
    """The document of one line; a line that cannot be read is a document with an error, named by its line number."""
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as error:
        return CorpusDocument(number, where, error=f"line {number} is not UTF-8 ({error.reason} at byte {error.start})")
    except json.JSONDecodeError as error:
        return CorpusDocument(number, where, error=f"line {number} is not JSON ({error.msg}, column {error.colno})")
    if not isinstance(value, dict):
        return CorpusDocument(number, where, error=f'line {number} is not a JSON object {{"id": ..., "text": ...}}')
    document_id = value.get("id", number)
    if isinstance(document_id, bool) or not isinstance(document_id, (str, int)):
        return CorpusDocument(number, where, error=f"line {number}: the id {document_id!r} is not a string or an "
                                                    "integer")
    text = value.get("text")
    if not isinstance(text, str):
        found = "no" if text is None else f"a {type(text).__name__} as"
        return CorpusDocument(document_id, where, error=f'line {number} has {found} "text"; give the text as a string')
    return _checked_text(CorpusDocument(document_id, where, text))


def _text_file_document(file: Path) -> CorpusDocument:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        return CorpusDocument(file.name, str(file), error=f"not UTF-8 ({error.reason} at byte {error.start})")
    except OSError as error:
        return CorpusDocument(file.name, str(file), error=f"cannot be read ({error.strerror or error})")
    return _checked_text(CorpusDocument(file.name, str(file), text))


def _checked_text(document: CorpusDocument) -> CorpusDocument:
    """Refuse what would fail a whole batch of the pipeline: an empty text and a lone surrogate."""
    text = document.text
    if not text.strip():
        return CorpusDocument(document.id, document.where, error="the text is empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return CorpusDocument(
            document.id, document.where, error=f"the text holds a lone surrogate at character {error.start}"
        )
    return document


def _refuse_repeated_ids(ids: Sequence[DocumentId], path: Path, is_folder: bool) -> None:
    seen: dict[str, int] = {}
    for position, document_id in enumerate(ids, start=1):
        key = json.dumps(document_id)
        if key in seen:
            raise ValueError(
                f"{path}: the id {document_id!r} names two documents (documents {seen[key]} and {position}); every "
                "document needs its own id (a line without an \"id\" is named by its line number)."
            )
        seen[key] = position


# ----------------------------------------------------------------------------------------------- resuming
@dataclass
class ResumeState:
    """What an earlier run left in the output file: the ids done (written with clusters), the ids that failed (to
    retry), and the number of lines dropped (failures and a line cut short by an interrupted run)."""

    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    dropped_lines: int = 0


def resume_output(output: str | os.PathLike) -> ResumeState:
    """Read what an earlier run wrote to `output` and keep only its successful lines (the file is rewritten through
    a new file renamed into place): those documents are skipped, the failed ones done again. Ids are keyed by their
    JSON form (the id ``"3"`` is not the id ``3``). A missing file is a fresh start."""
    output = Path(output)
    state = ResumeState()
    if not output.exists():
        return state
    kept = []
    with output.open("rb") as handle:
        for line in handle:
            try:
                record = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                record = None
            if not (isinstance(record, dict) and "id" in record):
                state.dropped_lines += bool(line.strip())
                continue
            key = json.dumps(record["id"])
            if "clusters" in record and "error" not in record and key not in state.done:
                state.done.add(key)
                kept.append(line)
            else:
                state.failed.add(key)
                state.dropped_lines += 1
    state.failed -= state.done
    if state.dropped_lines or (kept and not kept[-1].endswith(b"\n")):  # new lines must start on a line of their own
        _replace_file(output, b"".join(line if line.endswith(b"\n") else line + b"\n" for line in kept))
    return state


def start_output(
    output: str | os.PathLike, ids: Sequence[DocumentId], fresh: bool = False
) -> tuple[ResumeState, str | None]:
    """Open the output of a run over the documents `ids`: empty it (`fresh`, or a new file), or read what an earlier
    run left there (`resume_output`). Returns the state to pass to `predict_corpus` and, when resuming, a line that
    says how many documents are skipped and retried."""
    output = Path(output)
    if fresh or not output.exists():
        output.write_bytes(b"")
        return ResumeState(), None
    state = resume_output(output)
    keys = [json.dumps(document_id) for document_id in ids]
    done, retried = sum(key in state.done for key in keys), sum(key in state.failed for key in keys)
    others = len(state.done - set(keys))
    message = (f"resuming {output}: skipping {done} of the {len(keys)} documents, done before; retrying {retried} "
               f"that failed" + (f"; keeping the lines of {others} documents that are not in this corpus" if others
                                 else ""))
    return state, message


def _replace_file(path: Path, content: bytes) -> None:
    partial = path.with_name(f".{path.name}.writing-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        partial.write_bytes(content)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------------------------- predicting
@dataclass
class CorpusSummary:
    """What `predict_corpus` did: documents written with clusters, failed (their ids), and skipped as already done."""

    written: int = 0
    failed: list[DocumentId] = field(default_factory=list)
    skipped: int = 0
    retried: int = 0


def predict_corpus(
    pipe: Any,
    corpus: Iterable[CorpusDocument],
    output: str | os.PathLike,
    batch_size: int = 8,
    resolve: bool = False,
    pipeline_options: dict[str, Any] | None = None,
    resume: bool | ResumeState = True,
    on_error: Callable[[CorpusDocument, str], None] | None = None,
    show_progress: bool = True,
) -> CorpusSummary:
    """Find the clusters of every document of `corpus` with `pipe` (`pipeline("coreference")`), `batch_size`
    documents per call, and append one JSON line per document to `output`, flushed after every batch.

    A document that cannot be read or clustered gets an ``{"id", "error"}`` line and is reported to `on_error`
    (default: a logged warning); the others are not lost (a batch that fails is done again one document at a time).
    With `resume`, the documents an earlier run wrote to `output` with their clusters are skipped and those that
    failed done again (`resume_output`); without it the output starts empty.

    Args:
        pipe: A coreference pipeline.
        corpus: The documents (a `TextCorpus`, or any iterable of `CorpusDocument`).
        output: The JSON-lines file to write (see the module docstring).
        batch_size: Documents per pipeline call.
        resolve: Add each text with its pronouns replaced (``resolve=True`` of the pipeline).
        pipeline_options: Other options of the pipeline's call (e.g. ``{"span_threshold": 0.5}``), checked before
            any document is read.
        resume: Keep what an earlier run wrote to `output` (True: read it with `resume_output`; a `ResumeState`: what
            the caller read with it); False: start `output` empty.
        on_error: Called with every document that fails and its error message.
        show_progress: Show a progress bar over the documents to do.

    Example:
        >>> summary = predict_corpus(pipeline("coreference", model="runs/petra-litbank"), TextCorpus("books/"),
        ...                          "clusters.jsonl", batch_size=8)  # doctest: +SKIP
        >>> summary.written, summary.failed  # doctest: +SKIP
        (80, [])
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size is a number of documents, at least 1; got {batch_size}.")
    options = {**(pipeline_options or {}), **({"resolve": True} if resolve else {})}
    pipe([], **options)  # checks the options (a typo, a mode's option on the other mode) before any work
    output = Path(output)
    if isinstance(resume, ResumeState):
        state = resume
    elif resume:
        state = resume_output(output)
    else:
        state = ResumeState()
        output.write_bytes(b"")
    summary = CorpusSummary()
    report = on_error or (lambda document, error: logger.warning(f"{document.id}: {error}"))
    total = len(corpus) if hasattr(corpus, "__len__") else None
    with output.open("a", encoding="utf-8") as handle, tqdm(
        total=total, desc="Clustering", unit="doc", disable=not show_progress
    ) as progress:
        batch: list[CorpusDocument] = []
        for document in _with_last(corpus):
            if document is not None:
                key = json.dumps(document.id)
                if key in state.done:
                    summary.skipped += 1
                    progress.update(1)
                    continue
                summary.retried += key in state.failed
                batch.append(document)
            if batch and (len(batch) == batch_size or document is None):
                for done, record in zip(batch, _batch_records(pipe, batch, options)):
                    if "error" in record:
                        summary.failed.append(done.id)
                        report(done, record["error"])
                    else:
                        summary.written += 1
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
                progress.update(len(batch))
                batch = []
    return summary


def _with_last(documents: Iterable[CorpusDocument]) -> Iterator[CorpusDocument | None]:
    """The documents, then None: the end, where the last batch is done."""
    yield from documents
    yield None


def _batch_records(pipe: Any, batch: Sequence[CorpusDocument], options: dict[str, Any]) -> list[dict[str, Any]]:
    """One output record per document of the batch, in order."""
    readable = [document for document in batch if document.error is None]
    answers: dict[int, dict[str, Any]] = {}
    if readable:
        try:
            found = pipe([document.text for document in readable], batch_size=len(readable), **options)
            answers = {id(document): answer for document, answer in zip(readable, found)}
        except Exception as error:  # noqa: BLE001 - one bad document must not cost the others
            if len(readable) == 1:
                answers = {id(readable[0]): {"error": _message(error)}}
            else:
                logger.info(f"a batch of {len(readable)} documents failed ({_message(error)}); reading them one by one")
                answers = {id(document): _one_answer(pipe, document, options) for document in readable}
    records = []
    for document in batch:
        answer = answers.get(id(document), {"error": document.error})
        records.append({"id": document.id, **answer})
    return records


def _one_answer(pipe: Any, document: CorpusDocument, options: dict[str, Any]) -> dict[str, Any]:
    try:
        return pipe(document.text, **options)
    except Exception as error:  # noqa: BLE001
        return {"error": _message(error)}


def _message(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# ------------------------------------------------------------------------------------------------- CoNLL
def conll_corpus_responses(
    model: Any,
    tokenizer: Any,
    documents: Sequence[CorefDocument],
    batch_size: int = 8,
    span_threshold: float | None = None,
    mention_threshold: float | None = None,
    show_progress: bool = True,
) -> list[CorefDocument]:
    """The clusters a coreference checkpoint finds in every CoNLL-2012 document, as responses that keep each
    document's name, part, words and header (`CorefDocument.with_mentions`), ready for `write_conll_coreference` and
    the reference scorer. The documents' own words and sentences are read (not a re-tokenised text), as
    ``hf-entity evaluate --conll`` reads them.

    A document-mode checkpoint reads `batch_size` documents at a time (`document_responses` with `batch_size`: the
    clusters found one by one); a token-mode one goes through `conll_responses` (at `mention_threshold`,
    default ``config.mention_threshold``).

    Example:
        >>> documents = read_conll_coreference("litbank/test/")  # doctest: +SKIP
        >>> responses = conll_corpus_responses(model, tokenizer, documents)  # doctest: +SKIP
        >>> write_conll_coreference(responses, "responses.conll")  # doctest: +SKIP
    """
    if model.config.coreference_mode != "document":
        from .conll_training import conll_evaluation_trainer, conll_responses

        threshold = mention_threshold
        if threshold is None:
            threshold = float(getattr(model.config, "mention_threshold", 0.5))
        with tempfile.TemporaryDirectory(prefix="hf-entity-conll-") as folder:
            trainer = conll_evaluation_trainer(model, tokenizer, folder, batch_size=batch_size)
            return conll_responses(trainer, documents, tokenizer, threshold)
    from .document_training import document_responses, document_rows

    return document_responses(
        model, documents, document_rows(documents, tokenizer), span_threshold=span_threshold,
        show_progress=show_progress, batch_size=batch_size, pad_token_id=tokenizer.pad_token_id or 0,
    )
