"""Reading the text files task data comes in, with errors that name the file and say how to fix it.

Python's own errors name neither the file nor the fix: a binary or Latin-1 file read as UTF-8 raises a bare
`UnicodeDecodeError` ("'utf-8' codec can't decode byte 0xb5 in position 2"), and a folder without the expected files
only shows up later, as an empty dataset. The readers of `tasks/` wrap their reading in `named_decode_errors` and
find CoNLL files with `conll_files_in`.

Example:
    >>> with named_decode_errors("texts.txt", "task-text file"):  # doctest: +SKIP
    ...     texts = Path("texts.txt").read_text(encoding="utf-8").splitlines()
    Traceback (most recent call last):
    ValueError: The task-text file texts.txt is not UTF-8 text: byte 0xe9 at line 1, column 4 cannot be decoded ...
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CONLL_PATTERNS", "conll_files_in", "named_decode_errors", "not_utf8_error"]

# CoNLL-2012 file names: LitBank's "<book>.conll", OntoNotes' "<document>.v4_gold_conll" (and *_auto_conll).
CONLL_PATTERNS = ("*.conll", "*_conll")
# Bytes read back to locate the first undecodable one (the error of a streamed read counts from its last chunk).
_LOCATE_LIMIT = 256 * 1024 * 1024


@contextmanager
def named_decode_errors(path: str | Path, what: str) -> Iterator[None]:
    """Turn a `UnicodeDecodeError` raised inside the block into a `ValueError` naming `path` (see `not_utf8_error`).

    Args:
        path: The file the block reads.
        what: What the file should be, for the message (``"CoNLL file"``, ``"definitions file"``).
    """
    try:
        yield
    except UnicodeDecodeError as error:
        raise not_utf8_error(path, what, error) from error


def not_utf8_error(path: str | Path, what: str, error: UnicodeDecodeError | None = None) -> ValueError:
    """The error for a file that is not UTF-8 text: the file, where its first undecodable byte is, and the fix.

    The position is found by reading the file's bytes again (decompressed for ``.gz`` files), since a streamed
    read reports offsets into its last chunk only; files larger than 256 MiB are not read again.
    """
    path = Path(path)
    where = _first_undecodable_byte(path)
    if where is None and error is not None:
        where = f"byte 0x{error.object[error.start]:02x} cannot be decoded ({error.reason})"
    return ValueError(
        f"The {what} {path} is not UTF-8 text: {where or 'it cannot be decoded'}. It is a binary file, or text in "
        "another encoding: pass the right file, or convert it to UTF-8 first (e.g. `iconv -f latin1 -t utf-8`)."
    )


def conll_files_in(
    folder: str | Path, patterns: Sequence[str] = CONLL_PATTERNS, files_accepted: bool = True
) -> list[Path]:
    """The CoNLL files directly inside `folder`, sorted by name; refused in one line when there are none.

    Args:
        folder: An existing folder.
        patterns: The file-name patterns of CoNLL files.
        files_accepted: Whether the caller also reads files given one by one (the message then offers that).

    Raises:
        FileNotFoundError: Naming the folder, the patterns searched, subfolders that do hold CoNLL files, and the fix.
    """
    folder = Path(folder)
    files = sorted({path for pattern in patterns for path in folder.glob(pattern) if path.is_file()})
    if files:
        return files
    nested = sorted({path.parent for pattern in patterns for path in folder.rglob(pattern) if path.is_file()})
    or_files = ", or the files themselves" if files_accepted else ""
    if nested:
        several = len(nested) > 1
        fix = (
            f"its subfolder{'s' if several else ''} {', '.join(str(path) for path in nested[:3])} "
            f"{'hold' if several else 'holds'} some: pass {'one of them' if several else 'that one'}{or_files}."
        )
    else:
        fix = f"pass the folder that holds the CoNLL-2012 files (LitBank: litbank/conll){or_files}."
    raise FileNotFoundError(
        f"The folder {folder} holds no CoNLL file: none of its files is named {' or '.join(patterns)} (subfolders "
        f"are not searched); {fix}"
    )


def _first_undecodable_byte(path: Path) -> str | None:
    """``"byte 0xb5 at line 3, column 7 cannot be decoded (invalid start byte)"``, or None if it cannot be told."""
    try:
        with path.open("rb") as handle:
            compressed = handle.read(2) == b"\x1f\x8b"
        opener = gzip.open if compressed else open
        with opener(path, "rb") as handle:
            data = handle.read(_LOCATE_LIMIT + 1)
    except OSError:
        return None
    if len(data) > _LOCATE_LIMIT:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_start = data.rfind(b"\n", 0, error.start) + 1
        line = data.count(b"\n", 0, error.start) + 1
        column = len(data[line_start : error.start].decode("utf-8", errors="replace")) + 1
        return f"byte 0x{data[error.start]:02x} at line {line}, column {column} cannot be decoded ({error.reason})"
    return None
