"""The attention pictures of the ForceReader paper, to PNG.

* Figure 1: in the joint (packed) encoding, how chosen question words attend over the whole packed input (attention
  deconcentration: part of it goes to the passage).
* Figure 3: in the separate question encoding, how they attend over the question.
* Figure 4: Q2P, how question words read the passage (the reading-mode attention of Eqs. 2-3).
* Figure 5: P2Q, how passage words read the question.

Encoder attentions are the last layer's, averaged over heads, as in the paper.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# Figure number of the paper -> what it shows.
FIGURES = {
    1: "joint encoding: question words over the packed input",
    3: "separate encoding: question words over the question",
    4: "Q2P: question words over the passage",
    5: "P2Q: passage words over the question",
}


@dataclass
class AttentionMap:
    """One attention picture: `weights[i, j]` is how much row token i attends to column token j."""

    figure: int
    row_tokens: list[str]
    column_tokens: list[str]
    weights: torch.Tensor

    def select_rows(self, words: Sequence[str] | None) -> "AttentionMap":
        """Keep the rows of the given tokens (all rows when None), in the order given."""
        if not words:
            return self
        indices = [self.row_tokens.index(word) for word in words if word in self.row_tokens]
        missing = [word for word in words if word not in self.row_tokens]
        if missing:
            raise ValueError(f"{missing} are not tokens of the rows of figure {self.figure}: {self.row_tokens}")
        return AttentionMap(self.figure, [self.row_tokens[i] for i in indices], self.column_tokens, self.weights[indices])


@torch.no_grad()
def attention_maps(model: Any, tokenizer: Any, question: str, context: str) -> dict[int, AttentionMap]:
    """The attention maps of Figures 1 and 3-5 for one question and passage (a window of at most the encoder's
    maximum length; longer passages are refused rather than cut).

    Figures 4 and 5 need a reader with the Q2P / P2Q modes (the MultiModeReader rung and above).

    Example:

    ```python
    >>> maps = attention_maps(model, tokenizer, "Who founded Microsoft?", "Bill Gates founded Microsoft.")  # doctest: +SKIP
    >>> maps[4].weights.shape  # question tokens x passage tokens  # doctest: +SKIP

    ```
    """
    if not question.strip() or not context.strip():
        raise ValueError("attention_maps needs a non-empty question and context.")
    encoding = tokenizer(question, context, return_tensors="pt", return_token_type_ids=True)
    limit = model.config.encoder_config.max_position_embeddings
    if encoding["input_ids"].shape[1] > limit:
        raise ValueError(
            f"The question and context take {encoding['input_ids'].shape[1]} tokens; the encoder reads at most "
            f"{limit}. Pass the window of the context you want to look at."
        )
    device = next(model.parameters()).device
    encoding = {key: value.to(device) for key, value in encoding.items()}
    ids = encoding["input_ids"][0].tolist()
    types = encoding["token_type_ids"][0].tolist()
    tokens = tokenizer.convert_ids_to_tokens(ids)
    question_tokens = [token for token, kind in zip(tokens, types) if kind == 0]
    passage_tokens = [tokens[0]] + [token for token, kind in zip(tokens, types) if kind == 1]
    question_ids = [token_id for token_id, kind in zip(ids, types) if kind == 0]

    body = model.forcereader if hasattr(model, "forcereader") else model
    encoder = body.encoder
    previous = encoder.config._attn_implementation
    encoder.set_attn_implementation("eager")  # sdpa kernels do not return attention weights
    try:
        joint = encoder(**encoding, output_attentions=True).attentions[-1][0].mean(dim=0)
        alone = encoder(input_ids=torch.tensor([question_ids], device=device), output_attentions=True)
        separate = alone.attentions[-1][0].mean(dim=0)
    finally:
        encoder.set_attn_implementation(previous)
    maps = {
        1: AttentionMap(1, question_tokens, tokens, joint[: len(question_tokens)].cpu()),
        3: AttentionMap(3, question_tokens, question_tokens, separate.cpu()),
    }
    if getattr(body.config, "separate_encoding", False):
        out = body(**encoding)
        if out.question_to_passage_attentions is not None:
            maps[4] = AttentionMap(4, question_tokens, passage_tokens, out.question_to_passage_attentions[0].cpu())
        if out.passage_to_question_attentions is not None:
            maps[5] = AttentionMap(5, passage_tokens, question_tokens, out.passage_to_question_attentions[0].cpu())
    return maps


def plot_attention_map(attention: AttentionMap, path: str | Path, title: str | None = None) -> Path:
    """Draw one attention map as a heatmap (rows: attending tokens, columns: attended tokens) to a PNG file.

    Example:

    ```python
    >>> maps = attention_maps(model, tokenizer, "Who founded Microsoft?", "Bill Gates founded Microsoft.")  # doctest: +SKIP
    >>> plot_attention_map(maps[4].select_rows(["who", "founded"]), "q2p.png")  # doctest: +SKIP

    ```
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("plot_attention_map needs matplotlib: pip install 'hf-entity-models[viz]'.") from error
    weights = attention.weights.float().numpy()
    rows, columns = weights.shape
    figure, axes = plt.subplots(figsize=(max(4.0, 0.35 * columns + 1.5), max(1.8, 0.4 * rows + 1.2)))
    image = axes.imshow(weights, cmap="Reds", aspect="auto", interpolation="nearest", vmin=0.0)
    axes.set_xticks(range(columns), attention.column_tokens, rotation=90, fontsize=8)
    axes.set_yticks(range(rows), attention.row_tokens, fontsize=8)
    axes.set_title(title or f"Figure {attention.figure}: {FIGURES[attention.figure]}", fontsize=9)
    figure.colorbar(image, ax=axes, fraction=0.03)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def plot_attention_figures(
    model: Any,
    tokenizer: Any,
    question: str,
    context: str,
    output_dir: str | Path,
    question_words: Sequence[str] | None = None,
    passage_words: Sequence[str] | None = None,
) -> dict[int, Path]:
    """Write the paper's Figures 1 and 3-5 for one example to `output_dir/figure_<n>.png`.

    Args:
        question_words: Word pieces of the question to show as rows (default: all), e.g. `["who", "founder"]`.
        passage_words: Word pieces of the passage to show as rows of Figure 5 (default: all).

    Returns:
        The written file of every figure, by figure number.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for number, attention in attention_maps(model, tokenizer, question, context).items():
        rows = passage_words if number == 5 else question_words
        written[number] = plot_attention_map(attention.select_rows(rows), output_dir / f"figure_{number}.png")
    return written
