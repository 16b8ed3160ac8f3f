"""The quality gate of DefinitionEMB: does a definition reader rebuild embeddings better than the mean vector, on
words it never trained on?

The mean of the model's token embeddings is what a reader that learned nothing converges to under an MSE loss (every
prediction pulled to the mean), and writing it into rows wrecks them. `held_out_comparison` reads held-out
definitions as the replacement does (`compute_definition_embeddings`), but always with every word slot masked (so
that a reader cannot pass by copying a visible form of the word), for the tokens that no training definition named,
and compares the predictions and the mean vector with the true rows; `HeldOutComparison.beats_mean` is the gate the
`definitions` command applies before it writes a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .definition_embeddings import compute_definition_embeddings, reads_own_definitions_only, word_slots_of

__all__ = [
    "HeldOutComparison",
    "definitions_of_single_tokens",
    "held_out_comparison",
    "mean_pairwise_cosine",
    "training_targets",
]


@dataclass(frozen=True)
class HeldOutComparison:
    """Cosine and mean squared error of the reader's predictions and of the mean vector against the true rows.

    Attributes:
        tokens: How many held-out tokens were compared (each named by a held-out definition, by no training one).
        reader_cosine: Mean cosine similarity between the reader's prediction and the true row.
        mean_vector_cosine: Mean cosine similarity between the mean embedding and the true row.
        reader_mse: Mean squared error (per coordinate) of the reader's predictions.
        mean_vector_mse: Mean squared error of the mean embedding.
        reader_spread: Mean pairwise cosine of the predictions (1: every prediction the same vector, as the mean
            vector written into every row would be).
        true_spread: Mean pairwise cosine of the true rows.
    """

    tokens: int
    reader_cosine: float
    mean_vector_cosine: float
    reader_mse: float
    mean_vector_mse: float
    reader_spread: float = float("nan")
    true_spread: float = float("nan")

    @property
    def collapsed(self) -> bool:
        """The predictions are closer to one common vector (pairwise cosine 1, the mean vector's) than to the true
        rows' spread: written in, they would make the rows alike even if each points slightly the right way."""
        return self.reader_spread > (1.0 + self.true_spread) / 2

    @property
    def beats_mean(self) -> bool:
        """The reader points closer to the true rows than the mean vector does (cosine: the rows are written with
        their own norms, so the direction is what the reader contributes), without collapsing."""
        return self.tokens > 0 and self.reader_cosine > self.mean_vector_cosine and not self.collapsed

    def describe(self) -> str:
        return (
            f"on {self.tokens} tokens of the held-out definitions the reader's "
            f"predictions have cosine {self.reader_cosine:.3f} with the true embeddings against "
            f"{self.mean_vector_cosine:.3f} for the mean embedding (MSE {self.reader_mse:.4f} against "
            f"{self.mean_vector_mse:.4f}; pairwise cosine of the predictions {self.reader_spread:.3f} against "
            f"{self.true_spread:.3f} for the true rows{', collapsed' if self.collapsed else ''})"
        )

    def summary(self) -> dict[str, Any]:
        return {**asdict(self), "beats_mean_vector": self.beats_mean}


def training_targets(tokenizer: Any, definitions: Any, config: Any = None) -> set[int]:
    """Every token a training definition holds in a word slot, with the word slots of the reader's `config`: what
    the reader was trained to rebuild (all four slots and their pieces without a config)."""
    return _named_tokens(tokenizer, definitions, config, getattr(config, "readout", None) == "pooled-definition")


def definitions_of_single_tokens(tokenizer: Any, definitions: Any, config: Any) -> Any:
    """The definitions whose word is a single token in some word slot of the reader's prompt (a token with a
    definition of its own); in their order."""
    from .prompts import slot_token_ids

    words = list(definitions["word"])
    keep = [index for index, slots in enumerate(slot_token_ids(tokenizer, words, word_slots_of(config), True)) if slots]
    return definitions.select(keep)


def _named_tokens(tokenizer: Any, definitions: Any, config: Any, single_token_slots_only: bool) -> set[int]:
    from .prompts import slot_token_ids

    named = slot_token_ids(tokenizer, list(definitions["word"]), word_slots_of(config), single_token_slots_only)
    return {token for slots in named for token in slots}


def held_out_comparison(
    definition_model: Any,
    tokenizer: Any,
    embeddings: torch.Tensor,
    held_out_definitions: Any,
    trained_tokens: Iterable[int] = (),
    batch_size: int = 64,
    show_progress: bool = False,
) -> HeldOutComparison:
    """Compare the reader with the mean vector on the slot tokens of `held_out_definitions` outside `trained_tokens`.

    Args:
        definition_model: A trained `DefinitionEmbModel`.
        tokenizer: The tokenizer of the model whose embeddings are rebuilt.
        embeddings: `(vocab_size, width)` the model's token embeddings (the rows the reader learned to rebuild).
        held_out_definitions: Definitions (word, part_of_speech, definition) the reader did not train on.
        trained_tokens: Tokens named by the training definitions (`training_targets`): left out of the comparison.

    Example:
        >>> comparison = held_out_comparison(reader, tokenizer, model.get_input_embeddings().weight, held_out,
        ...                                  training_targets(tokenizer, trained))  # doctest: +SKIP
        >>> comparison.beats_mean  # doctest: +SKIP
        True
    """
    special = set(tokenizer.all_special_ids)
    config = definition_model.config
    named = _named_tokens(tokenizer, held_out_definitions, config, reads_own_definitions_only(config))
    candidates = named - set(trained_tokens) - special
    candidates = {token for token in candidates if token < embeddings.shape[0]}
    if not candidates:
        return HeldOutComparison(0, float("nan"), float("nan"), float("nan"), float("nan"))
    # Every slot hidden whatever the reader's settings: with the paper's, one masked token among visible copies of
    # the word lets a reader that learned nothing from definitions copy its way past the mean.
    found = compute_definition_embeddings(
        definition_model, tokenizer, held_out_definitions, token_ids=sorted(candidates), batch_size=batch_size,
        show_progress=show_progress, mask_every_slot=True,
    )
    weights = embeddings.detach().float().cpu()
    regular = torch.tensor(sorted(set(range(weights.shape[0])) - special))
    mean = weights[regular].mean(0)
    truth = weights[found.token_ids]
    predicted = found.embeddings.float().cpu()
    cosine = torch.nn.functional.cosine_similarity
    return HeldOutComparison(
        tokens=len(found.token_ids),
        reader_cosine=float(cosine(predicted, truth, dim=-1).mean()),
        mean_vector_cosine=float(cosine(mean.expand_as(truth), truth, dim=-1).mean()),
        reader_mse=float((predicted - truth).pow(2).mean()),
        mean_vector_mse=float((mean - truth).pow(2).mean()),
        reader_spread=mean_pairwise_cosine(predicted),
        true_spread=mean_pairwise_cosine(truth),
    )


def mean_pairwise_cosine(rows: torch.Tensor) -> float:
    """The mean cosine over all pairs of distinct rows (1.0 for a single row).

    Example:
        >>> mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))  # (0 + 0.7071 + 0.7071) / 3
        0.4714045207910316
    """
    count = len(rows)
    if count < 2:
        return 1.0
    unit = torch.nn.functional.normalize(rows.double(), dim=-1)
    return float((unit.sum(0).pow(2).sum() - count) / (count * (count - 1)))
