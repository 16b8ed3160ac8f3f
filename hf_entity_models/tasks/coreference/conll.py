"""CoNLL-2012 coreference files: read them into `CorefDocument` objects and write them back.

* `read_conll_coreference` reads CoNLL-2012 files (LitBank, OntoNotes, the reference scorer's test files) into
  `CorefDocument` objects: words and mentions ``(first word, last word, cluster id)``.
* `coref_documents_from_dataset` builds them from the Hub layout of ``ontonotes/conll2012_ontonotesv5``.
* `write_conll_coreference` writes documents in a minimal CoNLL layout that the reader and the reference scorer
  (conll/reference-coreference-scorers) read back.

Example:
    >>> documents = read_conll_coreference("litbank/conll")  # doctest: +SKIP
    >>> write_conll_coreference(documents, "key.conll")  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from tqdm.auto import tqdm
from transformers.utils import logging

from ..text_files import conll_files_in, named_decode_errors

logger = logging.get_logger(__name__)

__all__ = [
    "CorefDocument",
    "Mention",
    "coref_documents_from_dataset",
    "read_conll_coreference",
    "write_conll_coreference",
]

# A mention: (first word, last word inclusive, cluster id), word indices into `CorefDocument.words`.
Mention = tuple[int, int, int]

# The word of a two-column token line (document id, coreference), which has none: CoNLL's empty field.
UNKNOWN_WORD = "_"

_NO_COREFERENCE = {"", "-", "_"}
# One '|'-separated part of a coreference cell: one or more items written without a separator, as the reference
# scorer reads them ("(1(2", "1)2)", "(1)(2"); "(N+M)" is a double antecedent, which the reference scorer discards.
_COREFERENCE_PART = re.compile(r"(?:\(\d+\+\d+\)|\(\d+\)|\(\d+|\d+\))+")
_COREFERENCE_ITEM = re.compile(r"\((\d+)\+\d+\)|(\()?(\d+)(\))?")
_BEGIN_LINE = re.compile(r"^#\s*begin document\b")
_END_LINE = re.compile(r"^#\s*end document\b")
_BEGIN_DOCUMENT = re.compile(
    r"^#\s*begin document\s*(?P<name>.*?)\s*(?:;\s*(?:part\s+(?P<part>\d+))?)?\s*$"
)
# The reference scorer's own rule (lib/CorScorer.pm, GetCoreference and GetFileNames): a document is identified by the
# text after "begin document " up to the line end, and a response document matches the key document of equal text.
_SCORER_DOCUMENT_ID = re.compile(r"^#\s*begin document (.*)$")
# Column layouts of a file, decided by its first token line.
_TABS, _SPACES = "tab-separated", "space-separated"


# ------------------------------------------------------------------------------------------------ documents
@dataclass
class CorefDocument:
    """One part of a CoNLL-2012 document: its words and its coreference mentions.

    Attributes:
        name: The document name of the ``#begin document (name); part N`` line (a LitBank book).
        part: The part number (0 when the header has none).
        words: The words (4th column), in order.
        mentions: ``(first_word, last_word, cluster_id)`` triples, the last word INCLUSIVE, sorted by first word with
            longer (outer) mentions first. Cluster ids are the file's; they are only unique within a part.
        source: Where the document starts, ``"file:line"`` (for error messages; empty when built by hand).
        sentence_starts: The first word of every sentence after the first (blank lines of the file), increasing;
            empty when sentences are not marked (the document is then one sentence).
        header: The text after ``#begin document `` of the line it was read from, verbatim (``"(book); part 0"``):
            the reference scorer matches key and response documents by this text, so `write_conll_coreference`
            writes it back as read. Empty when built by hand (the writer then builds ``(name); part NNN``).

    Example:
        >>> document = CorefDocument("book", 0, ["Sir", "Walter", "smiled"], [(0, 1, 7)])
        >>> document.label, document.mention_words(document.mentions[0])
        ('book (part 0)', ['Sir', 'Walter'])
    """

    name: str
    part: int
    words: list[str]
    mentions: list[Mention] = field(default_factory=list)
    source: str = ""
    header: str = ""
    sentence_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"CorefDocument.name must be a string, got {type(self.name).__name__}.")
        if not isinstance(self.header, str):
            raise TypeError(f"{self.label}: header must be a string (the text after '#begin document '), got "
                            f"{type(self.header).__name__}.")
        if any(character in self.header for character in "\n\r"):
            raise ValueError(f"{self.label}: the header {self.header!r} holds a line break; a header is one line, the "
                             "text after '#begin document ' (e.g. '(book); part 0').")
        if isinstance(self.words, str) or not all(isinstance(word, str) for word in self.words):
            raise TypeError(f"{self.label}: words must be a list of strings (one per word).")
        self.words = list(self.words)
        self.sentence_starts = [int(start) for start in self.sentence_starts]
        if any(not 0 < start < len(self.words) for start in self.sentence_starts) or any(
            later <= earlier for earlier, later in zip(self.sentence_starts, self.sentence_starts[1:])
        ):
            raise ValueError(
                f"{self.label}: sentence_starts must be increasing word indices inside the document (not 0, which "
                f"always starts one), got {self.sentence_starts[:10]}."
            )
        mentions = [_checked_mention(mention, len(self.words), self.label) for mention in self.mentions]
        self.mentions = sorted(mentions, key=lambda mention: (mention[0], -mention[1], mention[2]))

    def sentence_ids(self) -> list[int]:
        """The sentence of every word (0, 1, ...)."""
        ids, sentence, starts = [], 0, set(self.sentence_starts)
        for index in range(len(self.words)):
            sentence += index in starts
            ids.append(sentence)
        return ids

    @property
    def label(self) -> str:
        """``"name (part N)"``, plus ``" at file:line"`` when the document was read from a file."""
        where = f" at {self.source}" if self.source else ""
        return f"{self.name} (part {self.part}){where}"

    def mention_words(self, mention: Mention) -> list[str]:
        """The words of one mention."""
        return self.words[mention[0] : mention[1] + 1]

    def with_mentions(self, mentions: Sequence[Mention]) -> CorefDocument:
        """A response to this (key) document: its name, part, words, source and ``#begin document`` header, with
        other mentions. The reference scorer matches a response to its key by the header's text, and
        `score_coreference` checks that both hold the same words.

        Example:
            >>> key = CorefDocument("book", 0, ["Ann", "smiled"], [(0, 0, 1)], header="(book); part 0")
            >>> response = key.with_mentions([(0, 1, 4)])
            >>> response.header, response.words, response.mentions
            ('(book); part 0', ['Ann', 'smiled'], [(0, 1, 4)])
        """
        return CorefDocument(
            self.name, self.part, list(self.words), list(mentions), self.source, self.header, list(self.sentence_starts)
        )


def _checked_mention(mention: Any, num_words: int, label: str) -> Mention:
    if not isinstance(mention, Sequence) or len(mention) != 3 or not all(_is_int(value) for value in mention):
        raise TypeError(f"{label}: a mention is (first_word, last_word, cluster_id), three ints; got {mention!r}.")
    start, end, cluster = (int(value) for value in mention)
    if not 0 <= start <= end < num_words:
        raise ValueError(
            f"{label}: mention {mention!r} is outside the document's {num_words} words or ends before it starts "
            "(last_word is inclusive)."
        )
    return start, end, cluster


def read_conll_coreference(path_or_paths: str | Path | Sequence[str | Path]) -> list[CorefDocument]:
    """Read the coreference annotation of CoNLL-2012 files (LitBank, OntoNotes).

    Every ``#begin document (name); part N`` ... ``#end document`` block is one `CorefDocument`. A token line has the
    word in its 4th column and the coreference in its LAST column: ``(12`` opens a mention of cluster 12 on this
    word, ``12)`` closes the innermost open mention of cluster 12, ``(12)`` is a one-word mention, ``-``, ``_`` or an
    empty column means none, and several items are joined by ``|`` (``(3|(7)``) or written one after the other
    (``(3(7)``, ``3)7)``), read left to right. Mentions nest and may span sentences. A file's columns are
    tab-separated when its first token line has a tab (LitBank), else separated by runs of spaces (OntoNotes); a
    file that mixes the two is refused, since a stray tab would otherwise turn a line into another layout. Blank
    lines (sentence ends) are skipped, and a UTF-8 byte-order mark at the start of a file is read as one.

    This reads every file the CoNLL-2012 reference scorer (conll/reference-coreference-scorers v8.01) reads:

    * A two-column line ``document_id coreference`` (the scorer's test files) has no word: its word is
      `UNKNOWN_WORD` (``"_"``).
    * Empty columns at the end of a tab-separated line are dropped, as the scorer's ``split(/\\t/)`` drops them:
      the coreference is the last non-empty column after the word (LitBank ends a line without coreference with an
      empty column, and its other columns are ``_``).
    * A double antecedent ``(12+13)`` is discarded (with a warning), as the scorer discards it.
    * ``#begin document (name);`` without a part is part 0; ``# begin document`` with spaces after ``#`` is read.
      The text after ``#begin document `` is kept verbatim (`CorefDocument.header`): the scorer matches documents
      by it, and `write_conll_coreference` writes it back.

    The one difference: the scorer reads the items of one cell in a fixed order (one-word mentions, then opens,
    then closes), so ``3)|(3`` (a mention of cluster 3 ends on the word where the next one of cluster 3 starts)
    becomes a one-word mention there. This reader reads left to right, as the cell is written.

    Args:
        path_or_paths: A ``.conll`` file, a folder (all its ``*.conll`` and OntoNotes ``*_conll`` files, in sorted
            name order), or a sequence of files and folders (in the given order).

    Returns:
        The documents in file order, then in order within each file.

    Raises:
        FileNotFoundError: If a path does not exist or a folder holds no CoNLL file (naming the patterns searched).
        TypeError: If ``path_or_paths`` is not a path or a sequence of paths.
        ValueError: Naming the file, if it is not UTF-8 text or holds no ``#begin document`` block (empty or
            blank). Naming ``file:line`` and the fix, for unbalanced brackets (a close without an open of that
            cluster, a mention still open at ``#end document``), a document never closed (or a ``#begin`` inside
            one), a token line outside a document or with 1, 3 or 4 columns, a token line whose columns are
            separated otherwise than the file's first (tabs, spaces), an unreadable coreference item, a document
            without words, or the same (name, part) twice.

    Example:
        >>> documents = read_conll_coreference("litbank/conll")  # doctest: +SKIP
        >>> documents[1].words[:3], documents[1].mentions[0]  # doctest: +SKIP
        (['Chapter', '1', 'Sir'], (2, 4, 0))
    """
    documents: list[CorefDocument] = []
    seen: dict[tuple[str, int], str] = {}
    files = _conll_files(path_or_paths)
    for path in tqdm(files, desc="Reading CoNLL files", unit="file", disable=_no_progress(len(files))):
        for document in _read_coreference_file(path):
            key = (document.name, document.part)
            if key in seen:
                raise ValueError(
                    f"{document.source}: document {document.name!r} part {document.part} was already read at "
                    f"{seen[key]}; every (document, part) must occur once. Remove the duplicate file or block."
                )
            seen[key] = document.source
            documents.append(document)
    return documents


def coref_documents_from_dataset(
    source: str | datasets.Dataset, config_name: str | None = "english_v4", split: str = "train"
) -> list[CorefDocument]:
    """OntoNotes (CoNLL-2012) documents from the Hub layout of ``ontonotes/conll2012_ontonotesv5``.

    Each row is a document: ``document_id`` and ``sentences``, every sentence with ``part_id``, ``words`` and
    ``coref_spans``, a list of ``[cluster_id, first_word, last_word]`` (word indices within the sentence, last word
    inclusive). The sentences of one (document, part) become one `CorefDocument`, mentions re-indexed into its words.

    Args:
        source: A Hub dataset id (needs the network; loaded with `datasets.load_dataset`) or a `datasets.Dataset`
            already in that layout (e.g. loaded from a local copy).
        config_name: The Hub config (``english_v4``, ``english_v12``, ...); ignored for a Dataset.
        split: The split to load; ignored for a Dataset.

    Raises:
        ValueError: If a row does not have the layout, or a span lies outside its sentence.

    Example:
        >>> rows = datasets.Dataset.from_list([{"document_id": "nw/wsj/0001", "sentences": [
        ...     {"part_id": 0, "words": ["Pierre", "Vinken", "smiled", "."], "coref_spans": [[3, 0, 1]]},
        ...     {"part_id": 0, "words": ["He", "left", "."], "coref_spans": [[3, 0, 0]]}]}])
        >>> coref_documents_from_dataset(rows)[0].mentions
        [(0, 1, 3), (4, 4, 3)]
    """
    rows = source if isinstance(source, datasets.Dataset) else datasets.load_dataset(source, config_name, split=split)
    missing = {"document_id", "sentences"} - set(rows.column_names)
    if missing:
        raise ValueError(
            f"The dataset has columns {rows.column_names}, not the OntoNotes layout (missing {sorted(missing)}); "
            "expected rows with 'document_id' and 'sentences' (words, coref_spans, part_id), as in "
            "ontonotes/conll2012_ontonotesv5."
        )
    documents: list[CorefDocument] = []
    for row in rows:
        parts: dict[int, tuple[list[str], list[Mention], list[int]]] = {}
        for number, sentence in enumerate(row["sentences"]):
            words, mentions, sentence_starts = parts.setdefault(int(sentence.get("part_id") or 0), ([], [], []))
            if words and sentence["words"]:
                sentence_starts.append(len(words))
            for span in sentence.get("coref_spans") or []:
                cluster, first, last = (int(value) for value in span)
                if not 0 <= first <= last < len(sentence["words"]):
                    raise ValueError(
                        f"{row['document_id']}, sentence {number}: coref span {list(span)} is outside its "
                        f"{len(sentence['words'])} words (spans are [cluster_id, first_word, last_word], inclusive)."
                    )
                mentions.append((len(words) + first, len(words) + last, cluster))
            words.extend(sentence["words"])
        for part, (words, mentions, sentence_starts) in sorted(parts.items()):
            documents.append(
                CorefDocument(str(row["document_id"]), part, words, mentions, sentence_starts=sentence_starts)
            )
    return documents


def write_conll_coreference(
    documents: CorefDocument | Sequence[CorefDocument], path: str | Path, part_digits: int = 3
) -> Path:
    """Write documents as a minimal CoNLL-2012 coreference file that `read_conll_coreference` and the reference
    scorer (conll/reference-coreference-scorers) read back.

    Each document is a ``#begin document`` line, one tab-separated line per word (name, part, word index, word,
    coreference; ``-`` for none) and ``#end document``. A coreference cell lists, joined by ``|``, the
    closes of the mentions ending on the word, its one-word mentions, then the opens of the mentions starting on it,
    longer mentions first. Every document is read back before the file is written: mentions that brackets cannot
    express (two mentions of one cluster that cross, ``(0, 2)`` and ``(1, 3)``) raise instead of changing silently.

    The reference scorer matches key and response documents by the exact text after ``#begin document ``, so a
    document read from a file (`CorefDocument.header` set) gets its ``#begin document`` line back verbatim, and a
    response built from a key document (with the key's header) matches it. A document built by hand (no header)
    gets ``#begin document (name); part NNN``, the part padded to ``part_digits`` digits (OntoNotes ``part 000``:
    3; LitBank ``part 0``: 1). The scorer reads the items of a cell in its own order (one-word mentions, opens,
    closes), so a mention of cluster N that ends on the word where the next mention of cluster N starts
    (``N)|(N``) is misread by it, though not by `read_conll_coreference`.

    Args:
        documents: One `CorefDocument` or a sequence of them, written in the given order.
        path: The file to write (its folder must exist); overwritten.
        part_digits: Zero-padding of the part number of a document without a header (3: ``part 000``,
            OntoNotes; 1: ``part 0``, LitBank).

    Returns:
        The path written.

    Raises:
        TypeError: If ``documents`` are not `CorefDocument` objects.
        ValueError: If a name or word holds a tab or line break, a word is empty or a name is, a cluster id is
            negative, two documents have the same (name, part), mentions of one cluster cross, a header names
            another (name, part) than its document, or ``part_digits`` is not a positive int.

    Example:
        >>> import tempfile, os
        >>> document = CorefDocument("story", 0, ["Ann", "saw", "her", "cat"], [(0, 0, 1), (2, 3, 2), (2, 2, 1)])
        >>> path = write_conll_coreference(document, os.path.join(tempfile.mkdtemp(), "story.conll"))
        >>> print(path.read_text().replace("\\t", " "), end="")  # tab-separated
        #begin document (story); part 000
        story 0 0 Ann (1)
        story 0 1 saw -
        story 0 2 her (1)|(2
        story 0 3 cat 2)
        #end document
        >>> read_conll_coreference(path)[0].mentions == document.mentions
        True
    """
    if isinstance(documents, CorefDocument):
        documents = [documents]
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence) or not all(
        isinstance(document, CorefDocument) for document in documents
    ):
        raise TypeError("write_conll_coreference expects a CorefDocument or a sequence of them.")
    if not _is_int(part_digits) or part_digits < 1:
        raise ValueError(f"part_digits must be a positive int (3 writes 'part 000'), got {part_digits!r}.")
    blocks: list[str] = []
    seen: set[tuple[str, int]] = set()
    for document in documents:
        if (document.name, document.part) in seen:
            raise ValueError(f"{document.label}: this (name, part) is written twice; every document must occur once.")
        seen.add((document.name, document.part))
        blocks.append(_document_block(document, part_digits))
    path = Path(path)
    path.write_text("".join(blocks), encoding="utf-8")
    return path


def _document_block(document: CorefDocument, part_digits: int) -> str:
    for what, text in [("name", document.name)] + [(f"word {i}", word) for i, word in enumerate(document.words)]:
        if not text or any(character in text for character in "\t\n\r"):
            raise ValueError(
                f"{document.label}: the {what} {text!r} is empty or holds a tab or line break, which a CoNLL line "
                "cannot hold; replace it (e.g. by '_') before writing."
            )
    cells: list[list[str]] = [[] for _ in document.words]
    opens: list[list[tuple[int, int]]] = [[] for _ in document.words]
    for start, end, cluster in document.mentions:
        if cluster < 0:
            raise ValueError(f"{document.label}: cluster id {cluster} is negative; CoNLL cluster ids are >= 0.")
        if start == end:
            continue
        cells[end].append(f"{cluster})")
        opens[start].append((end, cluster))
    for start, end, cluster in document.mentions:
        if start == end:
            cells[start].append(f"({cluster})")
    for index, starting in enumerate(opens):
        cells[index].extend(f"({cluster}" for _, cluster in sorted(starting, key=lambda item: -item[0]))
    header = _header_line(document, part_digits)
    lines = [
        f"{document.name}\t{document.part}\t{index}\t{word}\t{'|'.join(cell) or '-'}"
        for index, (word, cell) in enumerate(zip(document.words, cells))
    ]
    reread = _OpenDocument(document.name, document.part, 1)
    for number, line in enumerate(lines, start=2):
        _read_token_line(reread, line, f"{document.label} (as written), line {number}", number, _TABS)
    if sorted(reread.mentions) != sorted(document.mentions):
        lost = sorted(set(document.mentions) - set(reread.mentions))
        raise ValueError(
            f"{document.label}: mentions {lost} cannot be written as CoNLL brackets (two mentions of one cluster "
            "cross, e.g. (0, 2) and (1, 3)); give one of them another cluster id or drop it."
        )
    for start in reversed(document.sentence_starts):  # a blank line ends a sentence, as in the files read
        lines.insert(start, "")
    return "\n".join([header, *lines, "#end document"]) + "\n"


def _header_line(document: CorefDocument, part_digits: int) -> str:
    """The document's own ``#begin document`` line when it was read from one, else ``(name); part NNN``."""
    if not document.header:
        return f"#begin document ({document.name}); part {document.part:0{part_digits}d}"
    line = f"#begin document {document.header}"
    named = _named_part(line)
    if named != (document.name, document.part):
        raise ValueError(
            f"{document.label}: its header {document.header!r} names document {named[0]!r} part {named[1]}, not "
            f"{document.name!r} part {document.part}; set header='' to write '#begin document ({document.name}); "
            "part N', or give the document the name and part of its header."
        )
    return line


def _conll_files(path_or_paths: str | Path | Sequence[str | Path]) -> list[Path]:
    if isinstance(path_or_paths, (str, Path)):
        entries = [path_or_paths]
    elif isinstance(path_or_paths, Sequence) and all(isinstance(p, (str, Path)) for p in path_or_paths):
        entries = list(path_or_paths)
    else:
        raise TypeError(
            "read_conll_coreference expects a file, a folder or a sequence of them, got "
            f"{type(path_or_paths).__name__}."
        )
    if not entries:
        raise ValueError(
            "No CoNLL file was given (an empty list): pass a folder of CoNLL files, a file, or a list of them."
        )
    files: list[Path] = []
    for entry in map(Path, entries):
        if entry.is_dir():
            files.extend(conll_files_in(entry))
        elif entry.is_file():
            files.append(entry)
        else:
            raise FileNotFoundError(f"{entry} does not exist (expected a .conll file or a folder of them).")
    return files


@dataclass
class _OpenDocument:
    name: str
    part: int
    begin_line: int
    header: str = ""
    words: list[str] = field(default_factory=list)
    sentence_starts: list[int] = field(default_factory=list)
    words_at_blank: int = 0
    mentions: list[Mention] = field(default_factory=list)
    # cluster id -> stack of (first word, line) of its open mentions
    open_mentions: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


def _read_coreference_file(path: Path) -> list[CorefDocument]:
    documents: list[CorefDocument] = []
    current: _OpenDocument | None = None
    line_number = 0
    layout: _Layout | None = None
    # "utf-8-sig": a byte-order mark (Windows editors write one) is not part of the first line.
    with named_decode_errors(path, "CoNLL file"), path.open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\n").rstrip("\r")
            where = f"{path}:{line_number}"
            if _BEGIN_LINE.match(line):
                if current is not None:
                    raise ValueError(
                        f"{where}: '#begin document' while document {current.name!r} part {current.part} (opened at "
                        f"line {current.begin_line}) is still open; add '#end document' before this line."
                    )
                current = _begin_document(line, where, line_number)
            elif _END_LINE.match(line):
                if current is None:
                    raise ValueError(f"{where}: '#end document' without a '#begin document' before it.")
                documents.append(_end_document(current, path, line_number))
                current = None
            elif not line.strip():
                if current is not None and current.words and current.words_at_blank != len(current.words):
                    current.sentence_starts.append(len(current.words))  # the next word, if any, starts a sentence
                    current.words_at_blank = len(current.words)
                continue
            else:
                if current is None:
                    raise ValueError(
                        f"{where}: a line outside a '#begin document' ... '#end document' block; every token line "
                        "must be inside a document."
                    )
                layout = layout or _Layout(_TABS if "\t" in line else _SPACES, line_number)
                _read_token_line(current, line, where, line_number, layout.check(line, where))
    if current is not None:
        raise ValueError(
            f"{path}:{current.begin_line}: document {current.name!r} part {current.part} begins here but is never "
            f"closed (the file ends at line {line_number}); add '#end document' after its last token."
        )
    if not documents:
        content = "it is empty" if not line_number else f"its {line_number} line(s) are blank"
        raise ValueError(
            f"{path}: the CoNLL file holds no '#begin document' block ({content}); give a CoNLL-2012 file of "
            "'#begin document (name); part 0' ... '#end document' blocks, or remove it."
        )
    return documents


@dataclass
class _Layout:
    """How the columns of a file are separated, decided by its first token line (`first_line`)."""

    separator: str
    first_line: int

    def check(self, line: str, where: str) -> str:
        """The layout of `line`, refused when it is not the file's: one stray tab in a space-separated line would
        make it a tab-separated line of other columns (``story 0 0 Ann<TAB>(1)``: two columns, the word lost)."""
        has_tab = "\t" in line
        if has_tab != (self.separator == _TABS):
            first = "has tabs" if self.separator == _TABS else "has none"
            raise ValueError(
                f"{where}: this token line has {'a tab' if has_tab else 'no tab'}, but the file's first token line "
                f"(line {self.first_line}) {first}, so its columns are {self.separator}; separate the columns of "
                "every line by tabs, or of every line by spaces."
            )
        return self.separator


def _begin_document(line: str, where: str, line_number: int) -> _OpenDocument:
    name, part = _named_part(line)
    if not name:
        raise ValueError(f"{where}: '#begin document' without a name; write '#begin document (name); part 0'.")
    scorer_id = _SCORER_DOCUMENT_ID.match(line)
    # A line the scorer does not read as a begin ("#begin document(x)") has no header: it is written the usual way.
    header = scorer_id.group(1) if scorer_id else ""
    return _OpenDocument(name, part, line_number, header=header)


def _named_part(line: str) -> tuple[str, int]:
    """(name, part) of a ``#begin document (name); part N`` line; the name is "" when it has none."""
    match = _BEGIN_DOCUMENT.match(line)
    name = match.group("name") if match else ""
    if name.startswith("(") and name.endswith(")"):
        name = name[1:-1]
    return name, int(match.group("part") or 0) if match else 0


def _read_token_line(document: _OpenDocument, line: str, where: str, line_number: int, layout: str) -> None:
    if layout == _TABS:
        columns = line.split("\t")
        width = len(columns)
        while len(columns) > 1 and not columns[-1].strip():
            columns.pop()
        _refuse_spaced_document_id(columns, where)
    else:
        columns = line.split()
        width = len(columns)
    if width >= 5:
        word = columns[3] if len(columns) > 3 else ""
        # The coreference is the last non-empty column after the word; none when every column after it is empty.
        coreference = columns[-1].strip() if len(columns) > 4 else ""
    elif len(columns) == 2:
        word, coreference = UNKNOWN_WORD, columns[-1].strip()
    else:
        raise ValueError(
            f"{where}: a token line needs at least 5 columns (the word 4th, the coreference last), or 2 (a document id "
            f"and the coreference), got {width}: {line!r}."
        )
    word_index = len(document.words)
    document.words.append(word)
    if coreference in _NO_COREFERENCE:
        return
    for part in coreference.split("|"):
        if _COREFERENCE_PART.fullmatch(part) is None:
            raise ValueError(
                f"{where}: unreadable coreference item {part!r} in {coreference!r}; items are '(N', 'N)' or '(N)', "
                "joined by '|' or written one after the other ('(1(2', '1)2)'), or '-' / '_' for none."
            )
        for match in _COREFERENCE_ITEM.finditer(part):
            if match.group(1) is not None:
                logger.warning(
                    f"{where}: discarded the double antecedent {match.group(0)}, as the reference scorer does."
                )
                continue
            opens, cluster, closes = bool(match.group(2)), int(match.group(3)), bool(match.group(4))
            _read_item(document, opens, cluster, closes, word_index, where, line_number)


def _refuse_spaced_document_id(columns: list[str], where: str) -> None:
    """A tab-separated two-column line is ``document_id<TAB>coreference``; an id with spaces in it is a line of
    space-separated columns with a tab before the last (``story 0 0 Ann<TAB>(1)``), whose word would be lost."""
    if len(columns) == 2 and len(columns[0].split()) > 1:
        raise ValueError(
            f"{where}: the first of this line's 2 tab-separated columns, {columns[0]!r}, holds spaces: its columns "
            "look separated by spaces, with a tab before the last one; separate the columns of every line by tabs, "
            "or of every line by spaces."
        )


def _read_item(
    document: _OpenDocument, opens: bool, cluster: int, closes: bool, word_index: int, where: str, line_number: int
) -> None:
    if opens and closes:
        document.mentions.append((word_index, word_index, cluster))
    elif opens:
        document.open_mentions.setdefault(cluster, []).append((word_index, line_number))
    else:
        stack = document.open_mentions.get(cluster)
        if not stack:
            raise ValueError(
                f"{where}: '{cluster})' closes a mention of cluster {cluster}, but none is open in document "
                f"{document.name!r} part {document.part}; add '({cluster}' on the mention's first word or remove "
                "this close."
            )
        start, _ = stack.pop()
        document.mentions.append((start, word_index, cluster))


def _end_document(document: _OpenDocument, path: Path, line_number: int) -> CorefDocument:
    still_open = [(line, cluster) for cluster, stack in document.open_mentions.items() for _, line in stack]
    if still_open:
        line, cluster = min(still_open)
        raise ValueError(
            f"{path}:{line}: the mention of cluster {cluster} opened here is never closed before '#end document' at "
            f"line {line_number} (document {document.name!r} part {document.part}); add '{cluster})' on its last word."
        )
    if not document.words:
        raise ValueError(
            f"{path}:{document.begin_line}: document {document.name!r} part {document.part} has no token line; "
            "remove the empty block."
        )
    return CorefDocument(
        document.name, document.part, document.words, document.mentions, source=f"{path}:{document.begin_line}",
        header=document.header,
        sentence_starts=[start for start in document.sentence_starts if start < len(document.words)],
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _no_progress(count: int) -> bool:
    return count < 2 or not logging.is_progress_bar_enabled()
