"""The memory-log figure of the PeTra paper (Figure 5): tokens on x, rows per memory cell (overwrite OW, coreference
CR, and salience SAL for models that track it, like the Referential Reader's Figure 3), darker = higher."""

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

    Columns are tokens; every memory cell has an overwrite row (OW) and a coreference row (CR: PeTra's coreference
    gate, the Referential Reader's update gate) and, when the log has a ``salience`` entry (Referential Reader), a
    salience row (SAL); darker cells mean higher values. Stretches of more than `min_gap` tokens where no cell is
    written to with at least `activity_threshold` are drawn as one "…" column, keeping `context` tokens on each
    side of active tokens (salience decays slowly everywhere, so it does not count as activity).

    Args:
        memory_log: ``{"tokens": [...], "overwrite": [[N]...], "coref": [[N]...]}``, optionally with
            ``"salience": [[N]...]``.
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
    import matplotlib.pyplot as plt

    figure, columns = memory_log_figure(memory_log, activity_threshold, context, min_gap, title)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return [index for index in columns if index >= 0]


def memory_log_figure(
    memory_log: Mapping[str, Any],
    activity_threshold: float = 0.1,
    context: int = 2,
    min_gap: int = 4,
    title: str | None = None,
):
    """The figure of `plot_memory_log` (not saved, not closed) and its columns (-1 for an elided stretch).

    Example:

    ```python
    >>> figure, columns = memory_log_figure(pipe(text, return_memory_log=True)["memory_log"])  # doctest: +SKIP
    >>> [label.get_text() for label in figure.axes[0].get_yticklabels()][:3]  # doctest: +SKIP
    ['OW cell 1', 'CR cell 1', 'SAL cell 1']

    ```
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("plot_memory_log needs matplotlib: pip install 'hf-entity-models[viz]'.") from error

    tokens, per_cell = _checked_log(memory_log)
    columns = visible_columns((per_cell["OW"] + per_cell["CR"]).max(axis=1), activity_threshold, context, min_gap)
    labels = [tokens[index] if index >= 0 else ELLIPSIS for index in columns]
    rows = _interleave_rows(list(per_cell.values()), columns)

    num_cells, rows_per_cell = per_cell["OW"].shape[1], len(per_cell)
    figure, axes = plt.subplots(figsize=(max(6.0, 0.32 * len(columns)), 1.0 + 0.45 * rows.shape[0]))
    axes.imshow(rows, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    axes.set_xticks(range(len(columns)), labels, rotation=90, fontsize=8)
    axes.set_yticks(
        range(rows_per_cell * num_cells), [f"{kind} cell {cell + 1}" for cell in range(num_cells) for kind in per_cell]
    )
    axes.tick_params(axis="y", labelsize=8)
    for boundary in range(1, num_cells):
        axes.axhline(rows_per_cell * boundary - 0.5, color="grey", linewidth=0.5)
    if title:
        axes.set_title(title)
    figure.tight_layout()
    return figure, columns


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


# Row label of every per-cell entry of the memory log, in drawing order; salience is optional.
_CELL_ROWS = {"overwrite": "OW", "coref": "CR", "salience": "SAL"}


def _checked_log(memory_log: Mapping[str, Any]) -> tuple[Sequence[str], dict[str, np.ndarray]]:
    """The tokens and the (tokens, cells) arrays to draw, by row label."""
    missing = [key for key in ("tokens", "overwrite", "coref") if key not in memory_log]
    if missing:
        raise ValueError(
            f"The memory log lacks {missing}; get one with pipe(text, return_memory_log=True)['memory_log']."
        )
    tokens = list(memory_log["tokens"])
    per_cell = {
        label: np.asarray(memory_log[key], dtype=float) for key, label in _CELL_ROWS.items() if key in memory_log
    }
    shapes = {key: per_cell[label].shape for key, label in _CELL_ROWS.items() if label in per_cell}
    overwrite = per_cell["OW"]
    if overwrite.ndim != 2 or overwrite.shape[0] != len(tokens) or len(set(shapes.values())) != 1:
        described = ", ".join(f"{key} {shape}" for key, shape in shapes.items())
        raise ValueError(
            f"The memory log must hold (tokens, cells) arrays for {len(tokens)} tokens; got {described}."
        )
    if not tokens:
        raise ValueError("The memory log is empty.")
    return tokens, per_cell


def _interleave_rows(per_cell: list[np.ndarray], columns: list[int]) -> np.ndarray:
    """(rows * cells, columns) image: the rows of every cell in turn (OW, CR[, SAL]), elided columns left blank."""
    rows_per_cell, num_cells = len(per_cell), per_cell[0].shape[1]
    image = np.zeros((rows_per_cell * num_cells, len(columns)))
    for column, index in enumerate(columns):
        if index >= 0:
            for row, values in enumerate(per_cell):
                image[row::rows_per_cell, column] = values[index]
    return image
