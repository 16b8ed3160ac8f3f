"""LAMBADA for causal LMs: read the test texts and split each into context and target word, as BPE ids.

Entity ids are all Ø (0) for LAMBADA, as in the Entity-Transformers paper; scoring the examples is
`lambada_scores`'s job (`entity_evaluation`).

Example:
    >>> texts = read_lambada("../shared/data/lambada/lambada_test.jsonl")  # doctest: +SKIP
    >>> examples = lambada_examples(texts, gpt2_tokenizer)  # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..text_files import named_decode_errors

__all__ = ["lambada_examples", "read_lambada"]


def read_lambada(path: str | Path) -> list[str]:
    """Read LAMBADA texts from a jsonl file, one ``{"text": ...}`` object per line (OpenAI's ``lambada_test.jsonl``).

    Args:
        path: The jsonl file.

    Returns:
        The texts, in file order.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: Naming ``file:line``: a blank line, a line that is not a JSON object, a missing or non-string
            ``"text"``, or an empty text; or an empty file.

    Example:
        >>> texts = read_lambada("../shared/data/lambada/lambada_test.jsonl")  # doctest: +SKIP
        >>> len(texts)  # doctest: +SKIP
        5153
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"The LAMBADA file {path} does not exist.")
    texts = []
    with named_decode_errors(path, "LAMBADA file"), path.open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            where = f"{path}:{line_number}"
            if not line.strip():
                raise ValueError(f"{where}: blank line; every line must be a JSON object with a 'text'. Remove it.")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not JSON ({error.msg}); expected {{\"text\": ...}}.") from error
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise ValueError(f"{where}: expected a JSON object with a string 'text', got {line.strip()[:80]!r}.")
            if not text.strip():
                raise ValueError(f"{where}: the text is empty.")
            texts.append(text)
    if not texts:
        raise ValueError(f"The LAMBADA file {path} is empty; expected one {{\"text\": ...}} per line.")
    return texts


def lambada_examples(texts: Sequence[str], tokenizer: Any) -> list[dict[str, list[int]]]:
    """Split every LAMBADA text into context and target word, as BPE ids.

    The target is the last whitespace-delimited word; ``target_ids`` is the BPE of ``" " + word`` (GPT-2's token of
    a word after a space), ``context_ids`` the BPE of the text before the word, without the whitespace in between.
    So ``decode(context_ids) + decode(target_ids) == text`` wherever a single space precedes the last word (all but
    7 of the 5,153 test texts; in those a newline precedes it, and the pair reads as if it were a space). A model
    scores the target after the context; entity ids are all Ø (0), as in the paper.

    Args:
        texts: The texts (`read_lambada`).
        tokenizer: The LM's tokenizer (no special tokens are added).

    Returns:
        ``[{"context_ids": [...], "target_ids": [...]}, ...]``, one per text.

    Raises:
        ValueError: If a text is not a string, is empty, or is a single word (no context).

    Example:
        >>> example = lambada_examples(["He said hello to Anna"], gpt2_tokenizer)[0]  # doctest: +SKIP
        >>> gpt2_tokenizer.decode(example["target_ids"])  # doctest: +SKIP
        ' Anna'
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"lambada_examples expects a list of texts, got {type(texts).__name__}.")
    contexts, targets = [], []
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"Text {index} is empty or not a string ({text!r}); every text needs a context and a word."
            )
        stripped = text.rstrip()
        word = stripped.split()[-1]
        context = stripped[: len(stripped) - len(word)].rstrip()
        if not context:
            raise ValueError(f"Text {index} ({text!r}) is a single word: there is no context to predict it from.")
        contexts.append(context)
        targets.append(" " + word)
    if not contexts:
        return []
    encode = {"add_special_tokens": False, "return_attention_mask": False, "verbose": False}
    context_ids = tokenizer(contexts, **encode)["input_ids"]
    target_ids = tokenizer(targets, **encode)["input_ids"]
    return [
        {"context_ids": list(context), "target_ids": list(target)} for context, target in zip(context_ids, target_ids)
    ]
