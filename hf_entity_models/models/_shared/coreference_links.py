"""Model-agnostic helpers of the entity-memory coreference models: link labels, span link probabilities, batching
of the left-to-right memory over documents of different lengths, and windowed encoding of long documents.

Written once here and imported by the models that use it; saving a model copies it next to the weights (see
`hf_entity_models.hub.portable_code`), so it imports only torch, transformers, the standard library and the other
shared modules.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from transformers import PreTrainedConfig

from .checkpoints import MEMORY_CELLS_LIMIT, MEMORY_CHUNK_LIMIT, SizeLimit, check_size_limits

# Values of `link_labels`: the kind of every labelled token pair decides its target and its loss weight.
LINK_NEGATIVE = 0  # the pronoun and a name it does not refer to: target 0
LINK_POSITIVE = 1  # the pronoun and the name it refers to: target 1
LINK_SELF = 2  # two tokens of one mention span: target 1
IGNORE_INDEX = -100  # padding pairs

# Clamp used inside logarithms of probabilities, as in the authors' code.
LOG_EPSILON = 1e-7


def candidate_scores_if_asked(
    link_log_probs: Callable[[torch.LongTensor], torch.Tensor],
    pronoun_spans: torch.LongTensor | None,
    candidate_spans: torch.LongTensor | None,
    length: int,
) -> torch.Tensor | None:
    """`span_link_probabilities` when the forward call got both spans, None when it got neither."""
    if (pronoun_spans is None) != (candidate_spans is None):
        raise ValueError("Pass `pronoun_spans` and `candidate_spans` together to get `candidate_scores`.")
    if pronoun_spans is None:
        return None
    return span_link_probabilities(link_log_probs, pronoun_spans, candidate_spans, length)


def span_link_probabilities(
    link_log_probs: Callable[[torch.LongTensor], torch.Tensor],
    pronoun_spans: torch.LongTensor,
    candidate_spans: torch.LongTensor,
    length: int,
) -> torch.Tensor:
    """Link probability of every candidate span with the pronoun: the maximum over their token pairs (earlier token
    first) of the model's token link probability, so a name is linked if any of its tokens is. `(B, C)`.

    Args:
        link_log_probs: Maps token pairs `(B, P, 2)` with `t1 < t2` to log link probabilities `(B, P)`.
        pronoun_spans: `(B, 2)` token span `[start, end)` of each document's pronoun.
        candidate_spans: `(B, C, 2)` candidate spans; rows of `-1` are padding (score 0).
        length: Sequence length, to check the spans.
    """
    if pronoun_spans.dim() != 2 or pronoun_spans.shape[-1] != 2:
        raise ValueError(f"pronoun_spans must have shape (batch, 2), got {tuple(pronoun_spans.shape)}.")
    if candidate_spans.dim() != 3 or candidate_spans.shape[-1] != 2:
        raise ValueError(f"candidate_spans must have shape (batch, candidates, 2), got {tuple(candidate_spans.shape)}.")
    if candidate_spans.shape[0] != pronoun_spans.shape[0]:
        raise ValueError("pronoun_spans and candidate_spans must have the same batch size.")
    check_spans(pronoun_spans, length, "pronoun_spans", allow_padding=False)
    check_spans(candidate_spans, length, "candidate_spans", allow_padding=True)

    batch_size = candidate_spans.shape[0]
    pronoun_tokens, pronoun_valid = _span_tokens(pronoun_spans.unsqueeze(1))  # (B, 1, Lp)
    candidate_tokens, candidate_valid = _span_tokens(candidate_spans)  # (B, C, Lc)
    pronoun_tokens = pronoun_tokens.unsqueeze(2)  # (B, 1, 1, Lp)
    candidate_tokens = candidate_tokens.unsqueeze(3)  # (B, C, Lc, 1)
    first = torch.minimum(pronoun_tokens, candidate_tokens)
    second = torch.maximum(pronoun_tokens, candidate_tokens)
    valid = pronoun_valid.unsqueeze(2) & candidate_valid.unsqueeze(3) & (first != second)
    shape = valid.shape
    pairs = torch.stack([first.expand(shape), torch.where(valid, second.expand(shape), first.expand(shape) + 1)], -1)
    pairs = pairs.clamp(0, length - 1)
    log_probs = link_log_probs(pairs.reshape(batch_size, -1, 2)).view(shape)
    log_probs = log_probs.masked_fill(~valid, float("-inf"))
    best = log_probs.flatten(2).max(dim=-1).values
    return torch.where(torch.isfinite(best), best.exp(), torch.zeros_like(best))


# Values of `mention_targets`: outside every mention, inside one (continuing an entity), or the first token of an
# entity's first mention (a new entity: the memory should overwrite a cell).
MENTION_OUTSIDE = 0
MENTION_INSIDE = 1
MENTION_NEW_ENTITY = 2


def mention_detection_loss(
    entity_probs: torch.Tensor,
    mention_targets: torch.LongTensor,
    overwrite_probs: torch.Tensor,
    coref_probs: torch.Tensor,
    reduction: str = "mean",
) -> torch.Tensor:
    """Dense supervision of the memory's two decisions on every token, for corpora that annotate every mention
    (CoNLL-2012, LitBank; GAP labels three spans per text and does not use it):

    * mention detection: binary cross-entropy between the entity probability and whether the token lies inside a
      gold mention;
    * new entity or not, on tokens inside a mention: binary cross-entropy between the share of the token's write
      that overwrites (overwrite / (overwrite + coref), summed over cells) and whether the token starts an entity's
      first mention. Without it nothing tells the memory when to overwrite: link pairs alone leave a book's
      mentions merged into a few cells.

    Args:
        entity_probs: `(B, T)` probability that the token is part of an entity mention (e_t, or an entity gate).
        mention_targets: `(B, T)` `MENTION_OUTSIDE` (0), `MENTION_INSIDE` (1), `MENTION_NEW_ENTITY` (2), or -100
            where not scored (special tokens, padding).
        overwrite_probs, coref_probs: `(B, T, N)` the memory log (update gates count as coref).
        reduction: `"mean"` over the scored tokens of the batch (for a model whose link loss is a weighted mean)
            or `"sum_per_document"`, summed over each document's tokens and averaged over documents (for a link loss
            summed over each document's pairs). 0 when no token is scored.
    """
    if mention_targets.shape != entity_probs.shape:
        raise ValueError(
            f"mention_targets must have the shape of the tokens {tuple(entity_probs.shape)}, got "
            f"{tuple(mention_targets.shape)}."
        )
    if reduction not in ("mean", "sum_per_document"):
        raise ValueError(f"reduction must be 'mean' or 'sum_per_document', got {reduction!r}.")
    scored = mention_targets != IGNORE_INDEX
    if bool(((mention_targets < MENTION_OUTSIDE) & scored).any() | (mention_targets > MENTION_NEW_ENTITY).any()):
        raise ValueError(
            "mention_targets must hold 0 (outside a mention), 1 (inside), 2 (first token of an entity's first "
            "mention) or -100 (not scored)."
        )
    if not bool(scored.any()):
        return entity_probs.sum() * 0.0
    inside = (mention_targets >= MENTION_INSIDE) & scored
    detection = _binary_cross_entropy(entity_probs, inside.to(entity_probs.dtype)) * scored
    overwritten = overwrite_probs.sum(-1)
    new_share = overwritten / (overwritten + coref_probs.sum(-1)).clamp_min(LOG_EPSILON)
    new_entity = _binary_cross_entropy(new_share, (mention_targets == MENTION_NEW_ENTITY).to(new_share.dtype)) * inside
    per_token = detection + new_entity
    if reduction == "mean":
        return per_token.sum() / scored.sum()
    return per_token.sum(-1).mean()


def _binary_cross_entropy(probabilities: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    clamped = probabilities.clamp(LOG_EPSILON, 1 - LOG_EPSILON)
    return torch.nn.functional.binary_cross_entropy(clamped, targets, reduction="none")


def gather_tokens(values: torch.Tensor, positions: torch.LongTensor) -> torch.Tensor:
    """values `(B, T, N)`, positions `(B, P)` -> `(B, P, N)`."""
    index = positions.unsqueeze(-1).expand(-1, -1, values.shape[-1])
    return torch.gather(values, 1, index)


def _span_tokens(spans: torch.LongTensor) -> tuple[torch.LongTensor, torch.Tensor]:
    """Token positions of spans `(B, C, 2)` padded to the longest span: positions `(B, C, L)` and validity."""
    widths = (spans[..., 1] - spans[..., 0]).clamp_min(0)
    longest = max(int(widths.max()), 1)
    offsets = torch.arange(longest, device=spans.device)
    positions = spans[..., :1] + offsets
    valid = (offsets < widths.unsqueeze(-1)) & (spans[..., :1] >= 0)
    return positions.clamp_min(0), valid


# ------------------------------------------------------------------------------------ shrinking-batch reading
def active_documents_per_step(sorted_lengths: list[int]) -> list[int]:
    """Number of documents still being read at every step, for lengths sorted longest first."""
    longest = sorted_lengths[0] if sorted_lengths else 0
    active, per_step = len(sorted_lengths), []
    for step in range(longest):
        while active and sorted_lengths[active - 1] <= step:
            active -= 1
        per_step.append(active)
    return per_step


def packed_positions(active_per_step: list[int], padded_length: int, device: torch.device) -> torch.LongTensor:
    """Flat (document * padded_length + step) position of every row produced by the shrinking-batch loop."""
    if not active_per_step:
        return torch.zeros(0, dtype=torch.long, device=device)
    return torch.cat(
        [torch.arange(active, device=device) * padded_length + step for step, active in enumerate(active_per_step)]
    )


def unpack_steps(
    steps: list[torch.Tensor], positions: torch.LongTensor, batch_size: int, padded_length: int
) -> torch.Tensor:
    """Place per-step rows `(active_t, D)` into a zero-padded `(B, T, D)` tensor (differentiable)."""
    if not steps:
        raise ValueError("Every document in the batch is empty (attention_mask is all zeros).")
    values = torch.cat(steps, dim=0)
    flat = values.new_zeros(batch_size * padded_length, values.shape[-1]).index_copy(0, positions, values)
    return flat.view(batch_size, padded_length, -1)


# ------------------------------------------------------------------------------------------- windowed encoding
def encode_in_windows(
    encode: Callable[[torch.LongTensor, torch.Tensor], torch.Tensor],
    input_ids: torch.LongTensor,
    attention_mask: torch.Tensor,
    window: int,
    overlap: int,
) -> torch.Tensor:
    """Encoder features `(B, T, F)` of a batch whose documents may be longer than the encoder window.

    Documents that fit are encoded together; a longer document is encoded on its own in overlapping windows placed
    over its real length (so its features never depend on the rest of the batch), and each token takes the
    features of the window where it has the most context on both sides.

    Args:
        encode: `encode(input_ids, attention_mask)` of at most `window` tokens -> features `(b, t, F)`.
        input_ids, attention_mask: `(B, T)`, right-padded.
        window: Longest input of `encode`.
        overlap: Tokens shared by consecutive windows.
    """
    if input_ids.shape[1] <= window:
        return encode(input_ids, attention_mask)
    batch_size, padded_length = input_ids.shape
    lengths = attention_mask.sum(-1).tolist()
    features = None
    short = [row for row, length in enumerate(lengths) if length <= window]
    if short:
        # Right padding: a short document lies entirely in the first `window` positions.
        short_features = encode(input_ids[short, :window], attention_mask[short, :window])
        features = short_features.new_zeros(batch_size, padded_length, short_features.shape[-1])
        features[short, :window] = short_features
    for row, length in enumerate(lengths):
        if length > window:
            document = _encode_long_document(encode, input_ids[row : row + 1, :length], window, overlap)
            if features is None:
                features = document.new_zeros(batch_size, padded_length, document.shape[-1])
            features[row, :length] = document[0]
    return features


def _encode_long_document(
    encode: Callable[[torch.LongTensor, torch.Tensor], torch.Tensor],
    input_ids: torch.LongTensor,
    window: int,
    overlap: int,
) -> torch.Tensor:
    length = input_ids.shape[1]
    starts = _window_starts(length, window, overlap)
    windows_ids = torch.cat([input_ids[:, start : start + window] for start in starts], dim=0)
    features = encode(windows_ids, torch.ones_like(windows_ids))
    best_window, offset_in_window = _best_window_per_token(starts, window, length, input_ids.device)
    return features[best_window, offset_in_window].unsqueeze(0)


def _window_starts(length: int, window: int, overlap: int) -> list[int]:
    stride = window - overlap
    starts = list(range(0, max(length - window, 0) + 1, stride))
    if starts[-1] + window < length:
        starts.append(length - window)
    return starts


def _best_window_per_token(
    starts: list[int], window: int, length: int, device: torch.device
) -> tuple[torch.LongTensor, torch.LongTensor]:
    """For every token, the window where its smaller distance to a window edge is largest."""
    positions = torch.arange(length, device=device)
    window_starts = torch.tensor(starts, device=device).unsqueeze(1)
    offsets = positions.unsqueeze(0) - window_starts  # (W, T)
    inside = (offsets >= 0) & (offsets < window)
    context = torch.minimum(offsets, window - 1 - offsets).masked_fill(~inside, -1)
    best_window = context.argmax(dim=0)
    return best_window, positions - window_starts.squeeze(1)[best_window]


class EncoderWindowMixin:
    """Encoder-window settings of a config with `encoder_config`, `encoder_layers`, `encoder_window_size` and
    `encoder_window_overlap` fields: the effective window and overlap, and their validation."""

    @property
    def max_encoder_window(self) -> int:
        """Longest token window the encoder is given at once (default: its `max_position_embeddings`)."""
        if self.encoder_window_size is not None:
            return self.encoder_window_size
        return getattr(self.encoder_config, "max_position_embeddings", 512)

    @property
    def effective_window_overlap(self) -> int:
        """Tokens shared by consecutive encoder windows (default: a quarter of the window)."""
        if self.encoder_window_overlap is not None:
            return self.encoder_window_overlap
        return self.max_encoder_window // 4

    def _check_encoder_fields(self) -> None:
        check_encoder_settings(
            self.encoder_config, self.encoder_layers, self.max_encoder_window, self.effective_window_overlap
        )


def check_encoder_settings(
    encoder_config: PreTrainedConfig, encoder_layers: Sequence[int], window: int, overlap: int
) -> None:
    """Validate the encoder fields of a config: the layers read exist and the encoder windows are well formed."""
    if len(encoder_layers) < 1:
        raise ValueError("encoder_layers must name at least one encoder layer, e.g. [-1].")
    if len(set(encoder_layers)) != len(encoder_layers):
        raise ValueError(f"encoder_layers must not repeat a layer, got {list(encoder_layers)}.")
    num_layers = getattr(encoder_config, "num_hidden_layers", None)
    if num_layers is not None:
        # hidden_states has num_layers + 1 entries: the embeddings, then one per layer.
        valid = range(-(num_layers + 1), num_layers + 1)
        bad = [layer for layer in encoder_layers if layer not in valid]
        if bad:
            raise ValueError(
                f"encoder_layers {bad} do not exist in an encoder with {num_layers} layers; use indices in "
                f"[-{num_layers + 1}, {num_layers}] (0 = embeddings, -1 = last layer)."
            )
    if window < 2:
        raise ValueError(f"encoder_window_size must be >= 2, got {window}.")
    if not 0 <= overlap < window:
        raise ValueError(f"encoder_window_overlap must be in [0, encoder window size {window}), got {overlap}.")


# The loss weights of the labelled link kinds, fields of every entity-memory coreference config.
LINK_LOSS_WEIGHTS = ("self_link_weight", "positive_link_weight", "negative_link_weight")


def check_memory_reader_values(
    config: Any,
    sizes: Mapping[str, SizeLimit],
    other_loss_weights: Sequence[str],
    choices: Mapping[str, Sequence[str]],
    cells_advice: str,
    parameters: int,
) -> None:
    """Validate the fields every entity-memory coreference config has, and what it may ask for: its sizes, memory
    cells, dropout, loss weights, Gumbel temperature, decision thresholds, choices (e.g. the memory implementation)
    and compiled chunk length.

    Args:
        config: The config.
        sizes: Its size fields (each >= 1) and their upper limits (`checkpoints.WIDTH_LIMIT`, ...).
        other_loss_weights: Its loss-weight fields (each >= 0) besides those of the links and the mention loss.
        choices: Its fields that take one of a few values, and those values.
        cells_advice: How many memory cells the paper uses, said when `num_memory_cells` < 1.
        parameters: The config's estimate of its model's parameter count (`checkpoints.check_size_limits`).

    Raises:
        ValueError: What is wrong and the fix, in one line.
    """
    for name in sizes:
        _require(getattr(config, name) >= 1, f"{name} must be >= 1, got {getattr(config, name)}.")
    _require(
        config.num_memory_cells >= 1, f"num_memory_cells must be >= 1, got {config.num_memory_cells}; {cells_advice}."
    )
    _require(0.0 <= config.dropout < 1.0, f"dropout must be in [0, 1), got {config.dropout}.")
    for name in (*LINK_LOSS_WEIGHTS, "mention_loss_weight", *other_loss_weights):
        _require(getattr(config, name) >= 0, f"{name} must be >= 0, got {getattr(config, name)}.")
    _require(config.gumbel_temperature > 0, f"gumbel_temperature must be > 0, got {config.gumbel_temperature}.")
    for name in ("coref_threshold", "mention_threshold"):
        _require(
            0.0 <= getattr(config, name) <= 1.0,
            f"{name} is a probability and must be in [0, 1], got {getattr(config, name)}.",
        )
    _require(
        config.new_entity_threshold is None or 0.0 <= config.new_entity_threshold <= 1.0,
        f"new_entity_threshold is a share in [0, 1] or None, got {config.new_entity_threshold}.",
    )
    for name, values in choices.items():
        _require(getattr(config, name) in values, f"{name} must be one of {values}, got {getattr(config, name)!r}.")
    _require(config.memory_chunk_size >= 1, f"memory_chunk_size must be >= 1, got {config.memory_chunk_size}.")
    limits = {**sizes, "num_memory_cells": MEMORY_CELLS_LIMIT, "memory_chunk_size": MEMORY_CHUNK_LIMIT}
    check_size_limits(config, limits, parameters)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# ----------------------------------------------------------------------------------------------- input checks
def check_right_padding(attention_mask: torch.Tensor) -> None:
    mask = attention_mask.bool()
    if (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError(
            "attention_mask has padding before real tokens; the memory reads documents left to right, so pad on the "
            "right (tokenizer.padding_side = 'right')."
        )


def check_spans(spans: torch.LongTensor, length: int, name: str, allow_padding: bool) -> None:
    padding = (spans == -1).all(-1)
    real = spans[~padding] if allow_padding else spans.reshape(-1, 2)
    if not allow_padding and padding.any():
        raise ValueError(f"{name} contains a padding row (-1, -1); every document needs its span.")
    bad = (real[:, 0] < 0) | (real[:, 1] <= real[:, 0]) | (real[:, 1] > length)
    if bad.any():
        example = real[bad][0].tolist()
        raise ValueError(
            f"{name} must hold token spans [start, end) with 0 <= start < end <= {length} (the sequence length), "
            f"got {example}."
        )


def check_link_inputs(link_pairs: torch.LongTensor, link_labels: torch.LongTensor, length: int) -> None:
    if link_pairs.dim() != 3 or link_pairs.shape[-1] != 2 or link_pairs.shape[:2] != link_labels.shape:
        raise ValueError(
            f"link_pairs must have shape (batch, pairs, 2) and link_labels (batch, pairs); got "
            f"{tuple(link_pairs.shape)} and {tuple(link_labels.shape)}."
        )
    known = (link_labels == IGNORE_INDEX) | (link_labels == LINK_NEGATIVE)
    known |= (link_labels == LINK_POSITIVE) | (link_labels == LINK_SELF)
    if not known.all():
        raise ValueError(
            f"link_labels must be LINK_NEGATIVE (0), LINK_POSITIVE (1), LINK_SELF (2) or -100, got "
            f"{sorted(set(link_labels[~known].tolist()))}."
        )
    real = link_pairs[link_labels != IGNORE_INDEX]
    if ((real < 0) | (real >= length)).any() or (real[:, 0] == real[:, 1]).any():
        raise ValueError(
            f"link_pairs must hold two different token positions in [0, {length}) for every labelled pair."
        )
