"""The word-similarity evaluation of DefinitionEMB (Section 6.2, Table 2; Appendix K, Table 28).

A word's embedding is the sum of the input embeddings of its tokens; the similarity of a pair is the dot product
(Table 2) or the cosine (Table 28) of the two word embeddings; the score of a dataset is Spearman's rank correlation
between these similarities and the human ratings (the paper reports it multiplied by 100).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from transformers.utils import logging

from ..text_files import named_decode_errors

logger = logging.get_logger(__name__)

# The four datasets of the paper's Tables 2 and 28, by their file names in mfaruqui/eval-word-vectors.
PAPER_DATASETS = ("EN-RG-65", "EN-RW-STANFORD", "EN-SIMLEX-999", "EN-SimVerb-3500")
Similarity = Literal["dot", "cosine"]


@dataclass(frozen=True)
class WordSimilarityResult:
    """The score of one word-similarity dataset.

    Attributes:
        spearman: Spearman's rank correlation in [-1, 1] over the pairs used (the paper's tables show 100 x this).
        pairs_used: pairs whose two words could be embedded.
        pairs_total: pairs in the dataset.
        skipped: the words that could not be embedded (all their tokens are the unknown token), each once, in order of
            first appearance; every pair containing one of them is left out (pairs_total - pairs_used pairs).
    """

    spearman: float
    pairs_used: int
    pairs_total: int
    skipped: tuple[str, ...] = ()

    @property
    def pairs_skipped(self) -> int:
        return self.pairs_total - self.pairs_used


def read_word_similarity(path: str | Path) -> list[tuple[str, str, float]]:
    """Read a word-similarity file: one `word1 word2 score` per line, separated by tabs or spaces.

    Blank lines and lines starting with "#" are ignored; Windows line ends are accepted.

    Args:
        path: the file (e.g. EN-SIMLEX-999.txt from mfaruqui/eval-word-vectors).

    Returns:
        [(word1, word2, score), ...] in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a file that is not UTF-8 text, a line without exactly three fields or with a non-numeric score,
            or no pair at all.

    Example:

    ```python
    >>> read_word_similarity("EN-RG-65.txt")[0]  # doctest: +SKIP
    ('gem', 'jewel', 3.94)

    ```
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No word-similarity file at {path}.")
    pairs = []
    with named_decode_errors(path, "word-similarity file"), path.open(encoding="utf-8-sig") as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            if len(fields) != 3:
                raise ValueError(
                    f"{path}:{line_number}: expected 'word1 word2 score' (three fields), got {len(fields)}: {line!r}."
                )
            try:
                score = float(fields[2])
            except ValueError as error:
                raise ValueError(f"{path}:{line_number}: the score {fields[2]!r} is not a number.") from error
            if not math.isfinite(score):
                raise ValueError(f"{path}:{line_number}: the score {fields[2]!r} is not finite.")
            pairs.append((fields[0], fields[1], score))
    if not pairs:
        raise ValueError(f"{path} contains no word pairs.")
    return pairs


def word_token_ids(tokenizer: Any, word: str) -> list[int]:
    """The token ids of `word` as it appears after a space, without special tokens.

    The text " word" gives the space-marked form for space-marker tokenizers (byte-level BPE "Ġword", sentencepiece
    "▁word"), and the plain word pieces for WordPiece (BERT's pre-tokenizer drops the space), so no convention has to
    be detected.
    """
    if not isinstance(word, str) or not word.strip():
        raise ValueError(f"A word must be a non-empty string, got {word!r}.")
    return list(tokenizer(" " + word.strip(), add_special_tokens=False)["input_ids"])


def _is_unknown(tokenizer: Any, token_ids: Sequence[int]) -> bool:
    unknown_id = getattr(tokenizer, "unk_token_id", None)
    return not token_ids or (unknown_id is not None and all(token_id == unknown_id for token_id in token_ids))


def _embedding_table(embeddings: Any) -> torch.Tensor:
    if isinstance(embeddings, torch.nn.Embedding):
        embeddings = embeddings.weight
    if not isinstance(embeddings, torch.Tensor):
        embeddings = torch.as_tensor(embeddings)
    if embeddings.dim() != 2 or embeddings.shape[0] == 0:
        raise ValueError(
            f"embeddings must be a (vocab_size, width) matrix, got shape {tuple(embeddings.shape)}. "
            "Pass e.g. model.get_input_embeddings().weight."
        )
    return embeddings.detach().to(device="cpu", dtype=torch.float64)


def _sum_of_token_embeddings(table: torch.Tensor, token_ids: Sequence[int], word: str) -> torch.Tensor:
    if max(token_ids) >= table.shape[0] or min(token_ids) < 0:
        raise ValueError(
            f"The tokenizer gives {word!r} token id {max(token_ids)}, outside the embedding matrix of "
            f"{table.shape[0]} rows: the tokenizer and the embeddings do not belong together."
        )
    return table[torch.tensor(token_ids)].sum(dim=0)


def word_embedding(embeddings: Any, tokenizer: Any, word: str) -> torch.Tensor:
    """The embedding of a word: the sum of the input embeddings of its tokens (as it appears after a space).

    Args:
        embeddings: (vocab_size, width) input embedding matrix matching the tokenizer.
        tokenizer: a transformers tokenizer.
        word: the word.

    Returns:
        A (width,) float64 tensor.

    Raises:
        ValueError: the word is only unknown tokens (its embedding would be the unknown token's, not the word's), or
            an id outside the matrix.

    Example:

    ```python
    >>> vector = word_embedding(model.get_input_embeddings().weight, tokenizer, "jewel")  # doctest: +SKIP

    ```
    """
    table = _embedding_table(embeddings)
    token_ids = word_token_ids(tokenizer, word)
    if _is_unknown(tokenizer, token_ids):
        raise ValueError(f"{word!r} is tokenized to the unknown token only; it has no embedding of its own.")
    return _sum_of_token_embeddings(table, token_ids, word)


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = torch.argsort(values, stable=True)
    sorted_values = values[order]
    ranks = torch.empty_like(values)
    count = values.numel()
    start = 0
    while start < count:
        end = start
        while end + 1 < count and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        # positions start..end (0-based) hold ranks start+1..end+1, whose mean is (start + end) / 2 + 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(x: Sequence[float] | torch.Tensor, y: Sequence[float] | torch.Tensor) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks, tied values getting their average rank.

    Args:
        x: first sample.
        y: second sample, same length.

    Returns:
        The correlation in [-1, 1]; NaN (with a warning) when either sample is constant, where it is undefined.

    Raises:
        ValueError: different lengths, fewer than two values, or non-finite values.

    Example:

    ```python
    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40])
    1.0
    >>> spearman([1, 2, 2, 3], [3, 2, 2, 1])
    -1.0

    ```
    """
    x_values = torch.as_tensor(x, dtype=torch.float64).reshape(-1)
    y_values = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    if x_values.numel() != y_values.numel():
        raise ValueError(f"spearman needs samples of the same length, got {x_values.numel()} and {y_values.numel()}.")
    if x_values.numel() < 2:
        raise ValueError(f"spearman needs at least two values, got {x_values.numel()}.")
    if not (torch.isfinite(x_values).all() and torch.isfinite(y_values).all()):
        raise ValueError("spearman needs finite values (found inf or NaN).")
    x_ranks = _average_ranks(x_values)
    y_ranks = _average_ranks(y_values)
    x_centred = x_ranks - x_ranks.mean()
    y_centred = y_ranks - y_ranks.mean()
    denominator = torch.sqrt((x_centred**2).sum() * (y_centred**2).sum())
    if denominator == 0:
        logger.warning("spearman: one sample is constant, so the rank correlation is undefined (NaN).")
        return float("nan")
    return float(((x_centred * y_centred).sum() / denominator).clamp(-1.0, 1.0))


def word_similarity_spearman(
    embeddings: Any,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str, float]],
    similarity: Similarity = "dot",
) -> WordSimilarityResult:
    """Spearman's correlation between embedding similarities and human scores for word pairs.

    A word whose tokens are all the unknown token is skipped (with every pair it is in) and reported in `skipped`.

    Args:
        embeddings: (vocab_size, width) input embedding matrix matching the tokenizer.
        tokenizer: a transformers tokenizer.
        pairs: [(word1, word2, human score), ...], e.g. from `read_word_similarity`.
        similarity: "dot" (the paper's Table 2) or "cosine" (Table 28). A zero word vector has cosine 0.

    Returns:
        WordSimilarityResult(spearman, pairs_used, pairs_total, skipped).

    Raises:
        ValueError: unknown similarity, no pairs, or fewer than two usable pairs.

    Example:

    ```python
    >>> pairs = read_word_similarity("EN-SIMLEX-999.txt")  # doctest: +SKIP
    >>> word_similarity_spearman(model.get_input_embeddings().weight, tokenizer, pairs).spearman  # doctest: +SKIP

    ```
    """
    if similarity not in ("dot", "cosine"):
        raise ValueError(f"similarity must be 'dot' or 'cosine', got {similarity!r}.")
    if not pairs:
        raise ValueError("word_similarity_spearman needs at least one word pair.")
    table = _embedding_table(embeddings)
    vectors: dict[str, torch.Tensor | None] = {}
    skipped: list[str] = []

    def vector_of(word: str) -> torch.Tensor | None:
        if word not in vectors:
            token_ids = word_token_ids(tokenizer, word)
            if _is_unknown(tokenizer, token_ids):
                vectors[word] = None
                skipped.append(word)
            else:
                vectors[word] = _sum_of_token_embeddings(table, token_ids, word)
        return vectors[word]

    model_scores, human_scores = [], []
    for pair in pairs:
        if len(pair) != 3:
            raise ValueError(f"Each pair must be (word1, word2, score), got {pair!r}.")
        first_word, second_word, human_score = pair
        first, second = vector_of(first_word), vector_of(second_word)
        if first is None or second is None:
            continue
        score = torch.dot(first, second)
        if similarity == "cosine":
            norms = first.norm() * second.norm()
            score = score / norms if norms > 0 else torch.zeros((), dtype=torch.float64)
        model_scores.append(float(score))
        human_scores.append(float(human_score))
    if skipped:
        logger.warning(
            "%d of %d pairs skipped: %d word(s) tokenize to the unknown token only (%s%s).",
            len(pairs) - len(model_scores),
            len(pairs),
            len(skipped),
            ", ".join(skipped[:5]),
            ", ..." if len(skipped) > 5 else "",
        )
    if len(model_scores) < 2:
        raise ValueError(
            f"Only {len(model_scores)} of {len(pairs)} pairs could be embedded; a correlation needs at least two."
        )
    return WordSimilarityResult(
        spearman=spearman(model_scores, human_scores),
        pairs_used=len(model_scores),
        pairs_total=len(pairs),
        skipped=tuple(skipped),
    )


def evaluate_word_similarity(
    embeddings: Any,
    tokenizer: Any,
    folder: str | Path,
    datasets: Sequence[str] = PAPER_DATASETS,
    similarity: Similarity = "dot",
) -> dict[str, WordSimilarityResult]:
    """Score embeddings on several word-similarity datasets of a folder (`{name}.txt` each).

    Args:
        embeddings: (vocab_size, width) input embedding matrix matching the tokenizer.
        tokenizer: a transformers tokenizer.
        folder: the folder with the files (e.g. shared/data/word_similarity).
        datasets: file names without ".txt"; the default is the paper's RG65, RW, SimLex-999 and SimVerb-3500.
        similarity: "dot" (Table 2) or "cosine" (Table 28).

    Returns:
        {dataset name: WordSimilarityResult}, in the order given.

    Raises:
        FileNotFoundError: a dataset file is missing from the folder.

    Example:

    ```python
    >>> results = evaluate_word_similarity(embeddings, tokenizer, "data/word_similarity")  # doctest: +SKIP
    >>> {name: round(100 * result.spearman, 2) for name, result in results.items()}  # doctest: +SKIP

    ```
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"No word-similarity folder at {folder}.")
    if isinstance(datasets, str):
        datasets = (datasets,)
    results = {}
    for name in datasets:
        file_name = name if name.endswith(".txt") else f"{name}.txt"
        path = folder / file_name
        if not path.is_file():
            available = sorted(candidate.stem for candidate in folder.glob("*.txt"))
            raise FileNotFoundError(f"No {file_name} in {folder}; available: {available}.")
        results[name] = word_similarity_spearman(embeddings, tokenizer, read_word_similarity(path), similarity)
        logger.info(
            "%s: Spearman %.4f (%s, %d of %d pairs)",
            name,
            results[name].spearman,
            similarity,
            results[name].pairs_used,
            results[name].pairs_total,
        )
    return results
