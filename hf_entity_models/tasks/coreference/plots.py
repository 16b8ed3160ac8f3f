"""The memory-log figure of the PeTra paper (Figure 5): tokens on x, two rows per cell (OW, CR), darker = higher."""

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ELLIPSIS = "…"


def plot_memory_log(
    memory_log: Mapping[str, Any],
    path: str | os.PathLike,
    activity_threshold: float = 0.1,
    context: int = 2,
    min_gap: int = 4,
    title: str | None = None,
) -> list[int]:
    """Draw a memory log (from ``pipeline("coreference")(text, return_memory_log=True)["memory_log"]``) to a PNG.

    Columns are tokens; every memory cell has an overwrite row (OW) and a coreference row (CR); darker cells mean
    higher probability. Stretches of more than `min_gap` tokens where no cell is written to with at least
    `activity_threshold` are drawn as one "…" column, keeping `context` tokens on each side of active tokens.

    Args:
        memory_log: ``{"tokens": [...], "overwrite": [[N]...], "coref": [[N]...]}``.
        path: Where to write the PNG.
        activity_threshold: Overwrite or coref probability that makes a token worth showing.
        context: Tokens kept on each side of an active token.
        min_gap: Shortest run of quiet tokens that is elided.
        title: Optional figure title.

    Returns:
        The token indices that were drawn (elided stretches left out), for checking or captions.

    Example:

    ```python
    >>> out = pipe("Zoe met Maggie. She smiled.", return_memory_log=True)  # doctest: +SKIP
    >>> plot_memory_log(out["memory_log"], "memory.png")  # doctest: +SKIP

    ```
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("plot_memory_log needs matplotlib: pip install 'hf-entity-models[viz]'.") from error

    tokens, overwrite, coref = _checked_log(memory_log)
    columns = visible_columns((overwrite + coref).max(axis=1), activity_threshold, context, min_gap)
    labels = [tokens[index] if index >= 0 else ELLIPSIS for index in columns]
    rows = _interleave_rows(overwrite, coref, columns)

    num_cells = overwrite.shape[1]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.32 * len(columns)), 1.0 + 0.45 * rows.shape[0]))
    axes.imshow(rows, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axes.set_xticks(range(len(columns)), labels, rotation=90, fontsize=8)
    axes.set_yticks(
        range(2 * num_cells), [f"{kind} cell {cell + 1}" for cell in range(num_cells) for kind in ("OW", "CR")]
    )
    axes.tick_params(axis="y", labelsize=8)
    for boundary in range(1, num_cells):
        axes.axhline(2 * boundary - 0.5, color="grey", linewidth=0.5)
    if title:
        axes.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return [index for index in columns if index >= 0]


def visible_columns(activity: np.ndarray, threshold: float, context: int, min_gap: int) -> list[int]:
    """Token indices to draw, with -1 standing for an elided stretch of quiet tokens.

    Example:
        >>> visible_columns(np.array([0.9, 0, 0, 0, 0, 0, 0, 0.8]), 0.1, context=1, min_gap=3)
        [0, 1, -1, 6, 7]
    """
    active = np.flatnonzero(np.asarray(activity) >= threshold)
    keep = np.zeros(len(activity), dtype=bool)
    for index in active:
        keep[max(0, index - context) : index + context + 1] = True
    columns: list[int] = []
    position = 0
    while position < len(activity):
        if keep[position]:
            columns.append(position)
            position += 1
            continue
        gap_end = position
        while gap_end < len(activity) and not keep[gap_end]:
            gap_end += 1
        if gap_end - position > min_gap:
            columns.append(-1)
        else:
            columns.extend(range(position, gap_end))
        position = gap_end
    return columns


def _checked_log(memory_log: Mapping[str, Any]) -> tuple[Sequence[str], np.ndarray, np.ndarray]:
    missing = [key for key in ("tokens", "overwrite", "coref") if key not in memory_log]
    if missing:
        raise ValueError(
            f"The memory log lacks {missing}; get one with pipe(text, return_memory_log=True)['memory_log']."
        )
    tokens = list(memory_log["tokens"])
    overwrite = np.asarray(memory_log["overwrite"], dtype=float)
    coref = np.asarray(memory_log["coref"], dtype=float)
    if overwrite.ndim != 2 or overwrite.shape != coref.shape or overwrite.shape[0] != len(tokens):
        raise ValueError(
            f"The memory log must hold (tokens, cells) arrays for {len(tokens)} tokens; got overwrite "
            f"{overwrite.shape} and coref {coref.shape}."
        )
    if not tokens:
        raise ValueError("The memory log is empty.")
    return tokens, overwrite, coref


def _interleave_rows(overwrite: np.ndarray, coref: np.ndarray, columns: list[int]) -> np.ndarray:
    """(2 * cells, columns) image: OW and CR rows of every cell, elided columns left blank."""
    num_cells = overwrite.shape[1]
    image = np.zeros((2 * num_cells, len(columns)))
    for column, index in enumerate(columns):
        if index >= 0:
            image[0::2, column] = overwrite[index]
            image[1::2, column] = coref[index]
    return image
