"""Checks on what a pipeline reads, shared by the question-answering and the coreference pipelines: a tokenizer
loaded from a folder without its vocabulary, and text that is not valid Unicode.

Saving a checkpoint copies this module next to the pipeline (see `hf_entity_models.hub.portable_code`), so it
imports only the standard library.
"""

import os
from typing import Any

# The files a tokenizer's vocabulary is saved in (tokenizer_config.json alone holds none); sentencepiece and tiktoken
# files may also carry other names ending in .model / .tiktoken.
VOCABULARY_FILES = (
    "tokenizer.json", "vocab.txt", "vocab.json", "merges.txt", "tokenizer.model", "spiece.model",
    "sentencepiece.bpe.model",
)


def check_tokenizer_files(tokenizer: Any) -> None:
    """Refuse a tokenizer loaded from a folder that holds no vocabulary file.

    transformers then builds a tokenizer of the model type's special tokens only (no error), and every word reads
    as the unknown token. A tokenizer built in memory or loaded from a Hub id passes: there is no folder to look at.

    Example:

    ```python
    >>> from types import SimpleNamespace
    >>> check_tokenizer_files(SimpleNamespace(name_or_path="org/model-on-the-hub"))  # not a local folder: passes

    ```
    """
    folder = getattr(tokenizer, "name_or_path", None) or ""
    if not os.path.isdir(folder):
        return  # built in memory, or from a Hub id: nothing to look at
    names = os.listdir(folder)
    if any(name in VOCABULARY_FILES or name.endswith((".model", ".tiktoken")) for name in names):
        return
    raise ValueError(
        f"The tokenizer was loaded from {folder}, which holds none of the files a tokenizer's vocabulary is saved in "
        f"({', '.join(VOCABULARY_FILES)}): transformers built one of {len(tokenizer)} special tokens only, so every "
        "word would read as unknown. Save the tokenizer next to the model (tokenizer.save_pretrained(folder)), or "
        "pass tokenizer=AutoTokenizer.from_pretrained(<the folder or Hub id that holds it>)."
    )


def check_unicode(text: str, what: str) -> None:
    """Refuse a lone surrogate (e.g. ``"\\ud800"``), which the tokenizer rejects with a TypeError naming no input.

    Python strings may hold them (half of an escaped emoji pair in JSON, bytes decoded with
    ``errors="surrogateescape"``); they are not Unicode text and have no UTF-8 encoding.

    Args:
        text: The text a pipeline is about to tokenize.
        what: How the error message names it, e.g. ``"The context (input 1)"``.

    Example:

    ```python
    >>> check_unicode("Zoë met Ann 🙂", "The text")  # valid text passes
    >>> check_unicode("Zoë \\ud800", "The text")
    Traceback (most recent call last):
    ValueError: The text holds a lone surrogate '\\ud800' at character 4, ...

    ```
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{what} holds a lone surrogate {text[error.start]!r} at character {error.start}, which is not valid "
            "Unicode text (it has no UTF-8 encoding, so the tokenizer cannot read it): remove or replace it, e.g. "
            "text.encode('utf-8', 'replace').decode('utf-8'), or decode the source bytes with errors='replace'."
        ) from None
