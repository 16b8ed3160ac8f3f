"""Reading the unlabelled texts of the language-model pre-training corpus (Referential Reader, section 3).

The paper pre-trained on the Wikipedia pages behind GAP; those are not available, so the corpus is built from texts
that are, with NO labels used. This module's one job is to read them as plain documents (one string each):

* `read_gap_texts`: the ``Text`` column of a GAP TSV file (use the development file; the validation file is the
  coreference evaluation set and must stay unseen);
* `read_squad_contexts`: the paragraphs (contexts) of SQuAD JSON files, deduplicated across files (v1.1 and v2.0
  share articles);
* `read_litbank_documents`: the books of LitBank's CoNLL files, one string per document;
* `read_shared_data_documents`: all three from a data folder laid out like the project's shared data.

Splitting, tokenizing and blocking the documents is `corpus`'s job.

Example:
    >>> documents = read_shared_data_documents("../shared/data")  # doctest: +SKIP
    >>> sorted(documents)  # doctest: +SKIP
    ['gap', 'litbank', 'squad']
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Sequence
from pathlib import Path

from transformers.utils import logging

from ..coreference.conll import UNKNOWN_WORD, read_conll_coreference
from ..text_files import conll_files_in, named_decode_errors, not_utf8_error

logger = logging.get_logger(__name__)

__all__ = [
    "DEFAULT_GAP_FILE",
    "DEFAULT_LITBANK_DIR",
    "DEFAULT_SQUAD_FILES",
    "read_gap_texts",
    "read_litbank_documents",
    "read_shared_data_documents",
    "read_squad_contexts",
]

# Paths inside a data folder laid out like the project's shared data (see its README.md).
DEFAULT_GAP_FILE = "gap/gap-development.tsv"
DEFAULT_SQUAD_FILES = ("squad/squad-v1.1-dev-public.json.gz", "squad/squad-v2.0-dev-public.json.gz")
DEFAULT_LITBANK_DIR = "litbank/conll"


def read_gap_texts(path: str | Path) -> list[str]:
    """Read the ``Text`` column of a GAP TSV file: one document per row, labels ignored.

    The file is read with `csv` (tab-delimited, quoting off, as the official files are written: texts contain
    quote characters that are not CSV quoting). Rows are returned in file order; a text that occurs on two rows is
    returned twice (`split_documents_by_source` keeps identical texts in the same split).

    Args:
        path: A GAP TSV file with a header row that has a ``Text`` column, e.g. ``gap-development.tsv``. Do not use
            ``gap-validation.tsv`` for pre-training: it is the coreference evaluation set.

    Returns:
        The texts, one per data row.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file is not UTF-8 text, is empty, has no ``Text`` column, a row has the wrong number of
            fields, or a text is empty.

    Example:
        >>> texts = read_gap_texts("gap/gap-development.tsv")  # doctest: +SKIP
        >>> len(texts)  # doctest: +SKIP
        2000
    """
    path = _existing_file(path, "GAP TSV file")
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 24))
    with named_decode_errors(path, "GAP file"), path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"The GAP file {path} is empty; expected a header row with a 'Text' column.")
        header = [name.strip() for name in header]
        if "Text" not in header:
            raise ValueError(
                f"The GAP file {path} has no 'Text' column (header: {header}). Pass an official GAP TSV file "
                "(columns ID, Text, Pronoun, ...)."
            )
        text_column = header.index("Text")
        texts = []
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(
                    f"Line {reader.line_num} of {path} has {len(row)} tab-separated fields, the header has "
                    f"{len(header)}. Is the file tab-separated, with no tabs inside the texts?"
                )
            text = row[text_column]
            if not text.strip():
                raise ValueError(f"Line {reader.line_num} of {path} has an empty Text field.")
            texts.append(text)
    if not texts:
        raise ValueError(f"The GAP file {path} has a header but no data rows.")
    return texts


def read_squad_contexts(path_or_paths: str | Path | Sequence[str | Path]) -> list[str]:
    """Read the unique paragraph contexts of one or more SQuAD JSON files (questions and answers ignored).

    Files may be gzip-compressed (detected from their first bytes) or plain JSON, in the official SQuAD layout
    (``{"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [...]}]}]}``, v1.1 or v2.0). SQuAD v1.1 and
    v2.0 share articles, so contexts are deduplicated by exact text; the first occurrence sets the order.

    Args:
        path_or_paths: One file or a sequence of files.

    Returns:
        The distinct non-empty contexts in first-seen order.

    Raises:
        FileNotFoundError: If a file does not exist.
        TypeError: If ``path_or_paths`` is not a path or a sequence of paths.
        ValueError: If a file is not SQuAD JSON, or no context is found.

    Example:
        >>> contexts = read_squad_contexts(["squad-v1.1-dev.json.gz", "squad-v2.0-dev.json.gz"])  # doctest: +SKIP
        >>> len(contexts) == len(set(contexts))  # doctest: +SKIP
        True
    """
    if isinstance(path_or_paths, (str, Path)):
        paths = [path_or_paths]
    elif isinstance(path_or_paths, Sequence) and all(isinstance(p, (str, Path)) for p in path_or_paths):
        paths = list(path_or_paths)
    else:
        raise TypeError(
            f"read_squad_contexts expects a path or a sequence of paths, got {type(path_or_paths).__name__}."
        )
    if not paths:
        raise ValueError("read_squad_contexts got an empty list of files.")
    seen: set[str] = set()
    contexts: list[str] = []
    for raw_path in paths:
        path = _existing_file(raw_path, "SQuAD JSON file")
        blank = 0
        for context in _iter_squad_contexts(path):
            if not context.strip():
                blank += 1
            elif context not in seen:
                seen.add(context)
                contexts.append(context)
        if blank:
            logger.warning(f"Skipped {blank} empty context(s) in {path}.")
    if not contexts:
        raise ValueError(f"No SQuAD context found in {[str(p) for p in paths]}.")
    return contexts


def read_litbank_documents(conll_dir: str | Path) -> list[str]:
    """Read the documents (books) of a folder of CoNLL-2012 files, such as LitBank's, as plain text.

    Every CoNLL file of the folder (``*.conll``, or OntoNotes' ``*_conll``) is read in sorted file-name order; every ``#begin document`` ...
    ``#end document`` block becomes one string. The word is the 4th column (index 3) of a token line; blank lines
    separate sentences; other columns (coreference included) are ignored.

    The text is the tokens joined by single spaces (sentences too are joined by a single space), with no
    detokenisation: punctuation stays space-separated as in the file (``"Elliot , of Kellynch Hall , in"``). This
    keeps every token of the file, in order, and is what a WordPiece tokenizer would produce anyway; a byte-level
    BPE tokenizer (GPT-2) sees ``" ,"`` instead of ``","``, a small domain shift that we accept for simplicity.

    Args:
        conll_dir: The folder holding the ``.conll`` files (e.g. ``litbank/conll``).

    Returns:
        One string per document, in file order then document order.

    Raises:
        FileNotFoundError: If the folder does not exist or holds no CoNLL file (naming the patterns searched).
        ValueError: What `read_conll_coreference` refuses (a file that is not UTF-8 text or holds no document, a
            token line of another column count or layout, a token outside a document, unbalanced brackets), and a
            document without words (the two-column layout).

    Example:
        >>> books = read_litbank_documents("litbank/conll")  # doctest: +SKIP
        >>> books[1][:27]  # doctest: +SKIP
        'Chapter 1 Sir Walter Elliot'
    """
    folder = Path(conll_dir)
    if folder.is_file():
        raise FileNotFoundError(
            f"{folder} is a file, but a folder of CoNLL files is expected here: pass the folder ({folder.parent})."
        )
    if not folder.is_dir():
        raise FileNotFoundError(f"The CoNLL folder {folder} does not exist (expected a folder of .conll files).")
    documents = []
    for path in conll_files_in(folder, files_accepted=False):
        documents.extend(_read_conll_documents(path))
    return documents


def read_shared_data_documents(
    data_dir: str | Path,
    *,
    gap_file: str | Path | None = DEFAULT_GAP_FILE,
    squad_files: Sequence[str | Path] | None = DEFAULT_SQUAD_FILES,
    litbank_dir: str | Path | None = DEFAULT_LITBANK_DIR,
) -> dict[str, list[str]]:
    """Read the LM pre-training documents of a data folder: GAP development texts, SQuAD contexts, LitBank books.

    Relative paths are resolved against ``data_dir``; absolute paths are used as given. Pass ``None`` to leave a
    source out. Every path is checked before anything is read.

    Args:
        data_dir: The data folder (e.g. the project's ``../shared/data``).
        gap_file: The GAP TSV file whose texts to use (never the validation file, the evaluation set).
        squad_files: SQuAD JSON files (gzip or plain); their contexts are deduplicated across files.
        litbank_dir: The folder of LitBank ``.conll`` files.

    Returns:
        ``{"gap": [...], "squad": [...], "litbank": [...]}`` (the sources not left out), the input of
        `build_lm_corpus`.

    Raises:
        FileNotFoundError: Naming the first missing file or folder.
        ValueError: If every source is left out, or a file is malformed.

    Example:
        >>> documents = read_shared_data_documents("../shared/data")  # doctest: +SKIP
        >>> {source: len(docs) for source, docs in documents.items()}  # doctest: +SKIP
        {'gap': 2000, 'squad': 1970, 'litbank': 80}
    """
    root = Path(data_dir)

    def resolve(path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else root / path

    gap_path = resolve(gap_file) if gap_file is not None else None
    squad_paths = [resolve(path) for path in squad_files] if squad_files is not None else None
    litbank_path = resolve(litbank_dir) if litbank_dir is not None else None
    if gap_path is None and not squad_paths and litbank_path is None:
        raise ValueError("Every source is left out; pass at least one of gap_file, squad_files, litbank_dir.")
    for name, path in [("GAP", gap_path), *[("SQuAD", p) for p in squad_paths or []]]:
        if path is not None and not path.is_file():
            raise FileNotFoundError(
                f"The {name} file {path} is missing (data folder {root}). Pass the right path, or None to leave "
                "this source out."
            )
    if litbank_path is not None and not litbank_path.is_dir():
        raise FileNotFoundError(
            f"The LitBank folder {litbank_path} is missing (data folder {root}). Pass the right path, or None to "
            "leave this source out."
        )
    documents: dict[str, list[str]] = {}
    if gap_path is not None:
        if "validation" in gap_path.name:
            logger.warning(
                f"{gap_path} looks like GAP's validation file, the coreference evaluation set: pre-training on it "
                "leaks the evaluation texts."
            )
        documents["gap"] = read_gap_texts(gap_path)
    if squad_paths:
        documents["squad"] = read_squad_contexts(squad_paths)
    if litbank_path is not None:
        documents["litbank"] = read_litbank_documents(litbank_path)
    return documents


# ------------------------------------------------------------------------------------------------ helpers
def _existing_file(path: str | Path, what: str) -> Path:
    if not isinstance(path, (str, Path)):
        raise TypeError(f"The {what} must be given as a path, got {type(path).__name__}.")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"The {what} {path} does not exist.")
    return path


def _iter_squad_contexts(path: Path):
    with path.open("rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rt", encoding="utf-8-sig") as handle:
            payload = json.load(handle)
    except UnicodeDecodeError as error:
        raise not_utf8_error(path, "SQuAD JSON file", error) from error
    except (json.JSONDecodeError, OSError) as error:
        raise ValueError(f"{path} is not a (gzipped) SQuAD JSON file: {error}") from error
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise ValueError(f"{path} is not in the SQuAD layout: expected a JSON object with a 'data' list of articles.")
    for article_index, article in enumerate(payload["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ValueError(f"Article {article_index} of {path} has no 'paragraphs' list (SQuAD layout).")
        for paragraph_index, paragraph in enumerate(paragraphs):
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str):
                raise ValueError(
                    f"Paragraph {paragraph_index} of article {article_index} of {path} has no string 'context'."
                )
            yield context


def _read_conll_documents(path: Path) -> list[str]:
    """The documents of one CoNLL file as text, read by the coreference reader (one reader, one set of rules: BOM,
    a file's column layout, brackets), refusing a file without words (the two-column layout has none)."""
    documents = read_conll_coreference(path)
    for document in documents:
        if all(word == UNKNOWN_WORD for word in document.words):
            raise ValueError(
                f"{document.label}: the document has no words (only '{UNKNOWN_WORD}', as in the two-column layout "
                "'document_id coreference'); a text corpus needs CoNLL files with the word in the 4th column."
            )
    return [" ".join(document.words) for document in documents]
