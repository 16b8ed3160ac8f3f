"""The projected token embeddings of DefinitionEMB's Figures 1, 9-12 and 18, to PNG.

Each panel projects one model's token embedding matrix E on the right singular vectors of E's two largest singular
values (x: largest, y: second largest; E is not centred, as in the paper) and colours the tokens by frequency group.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging

from .isotropy import isotropy

logger = logging.get_logger(__name__)

# The paper's colours (Figure 13): frequent blue, medium green, rare red, non-appearing black.
GROUP_COLOURS = {"frequent": "tab:blue", "medium": "tab:green", "rare": "tab:red", "non-appearing": "black"}
_OTHER_COLOURS = ("tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")


def top_singular_projection(embeddings: torch.Tensor) -> torch.Tensor:
    """E projected on its top-2 right singular vectors: a (tokens, 2) float64 tensor.

    Singular vectors have arbitrary signs; each is flipped so that its largest-magnitude coordinate is positive,
    which makes repeated plots of the same matrix identical.
    """
    matrix = embeddings.detach().to(device="cpu", dtype=torch.float64)
    # The right singular vectors of E are the eigenvectors of E^T E (width x width: cheap for large vocabularies).
    _, eigenvectors = torch.linalg.eigh(matrix.T @ matrix)
    directions = eigenvectors[:, -2:].flip(-1)
    largest = directions.abs().argmax(dim=0)
    signs = torch.sign(directions[largest, torch.arange(2)])
    signs[signs == 0] = 1.0
    return matrix @ (directions * signs)


def _group_order(names: list[str]) -> list[str]:
    """Other groups (e.g. non-appearing) first as background, then frequent, medium, rare on top."""
    known = [name for name in ("frequent", "medium", "rare") if name in names]
    return [name for name in names if name not in known] + known


def plot_embedding_projections(
    named_embeddings: Mapping[str, torch.Tensor],
    groups: Mapping[str, Any],
    path: str | Path,
    title: str | None = None,
    show_isotropy: bool = True,
    point_size: float = 2.0,
) -> Path:
    """One panel per model: its token embeddings projected on the top-2 right singular vectors, coloured by group.

    Only the tokens listed in `groups` are drawn (the projection itself uses the whole matrix).

    Args:
        named_embeddings: {panel name: (vocab_size, width) embedding matrix}, e.g. {"BERT": E, "+ DelDirection": E'}.
        groups: {group name: token ids}, e.g. `frequency_groups(...)` plus {"non-appearing": ids}; frequent, medium
            and rare get the paper's colours and are drawn last (on top).
        path: the PNG file to write (folders are created).
        title: an optional figure title.
        show_isotropy: add I(E) of each whole matrix to its panel title (as in Figure 1).
        point_size: marker size.

    Returns:
        The path written.

    Raises:
        ImportError: matplotlib is missing (pip install 'hf-entity-models[viz]').
        ValueError: no embeddings or groups, a matrix that is not 2-D with at least two columns, or token ids outside
            a matrix.

    Example:

    ```python
    >>> from hf_entity_models.tasks.embeddings.isotropy import frequency_groups
    >>> plot_embedding_projections({"BERT": embeddings}, frequency_groups(vocab_size=len(embeddings)),
    ...                            "projection.png")  # doctest: +SKIP

    ```
    """
    if not named_embeddings:
        raise ValueError("plot_embedding_projections needs at least one embedding matrix.")
    if not groups:
        raise ValueError("plot_embedding_projections needs at least one group of token ids to draw.")
    group_ids = {name: torch.as_tensor(ids, dtype=torch.long).reshape(-1) for name, ids in groups.items()}
    for panel_name, embeddings in named_embeddings.items():
        if not isinstance(embeddings, torch.Tensor):
            raise TypeError(f"The embeddings of {panel_name!r} must be a tensor, got {type(embeddings).__name__}.")
        if embeddings.dim() != 2 or embeddings.shape[1] < 2:
            raise ValueError(
                f"The embeddings of {panel_name!r} must be a (tokens, width >= 2) matrix, "
                f"got {tuple(embeddings.shape)}."
            )
        for group_name, ids in group_ids.items():
            if ids.numel() and (ids.min() < 0 or ids.max() >= embeddings.shape[0]):
                raise ValueError(
                    f"Group {group_name!r} has token ids outside [0, {embeddings.shape[0]}) of {panel_name!r}."
                )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "plot_embedding_projections needs matplotlib: pip install 'hf-entity-models[viz]'."
        ) from error

    colours = dict(GROUP_COLOURS)
    other_colours = iter(_OTHER_COLOURS * (1 + len(group_ids) // len(_OTHER_COLOURS)))
    for name in group_ids:
        colours.setdefault(name, next(other_colours))
    order = _group_order(list(group_ids))

    panels = len(named_embeddings)
    figure, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 4.2), squeeze=False)
    try:
        for axis, (panel_name, embeddings) in zip(axes[0], named_embeddings.items()):
            projection = top_singular_projection(embeddings).numpy()
            for group_name in order:
                ids = group_ids[group_name].numpy()
                if ids.size == 0:
                    continue
                axis.scatter(
                    projection[ids, 0],
                    projection[ids, 1],
                    s=point_size,
                    c=colours[group_name],
                    label=group_name,
                    alpha=0.6,
                    linewidths=0,
                    rasterized=True,
                )
            panel_title = panel_name
            if show_isotropy:
                panel_title += f"\nI(E) = {isotropy(embeddings):.3f}"
            axis.set_title(panel_title, fontsize=10)
            axis.set_xlabel("1st right singular vector")
            axis.set_ylabel("2nd right singular vector")
            axis.legend(loc="best", fontsize=8, markerscale=4)
        if title:
            figure.suptitle(title)
        figure.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=120)
    finally:
        plt.close(figure)
    logger.info("Wrote the embedding projections of %d model(s) to %s", panels, path)
    return path
