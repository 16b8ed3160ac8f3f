"""Batching of coreference examples (GAP rows from `GapExampleBuilder`, cached encoder features) for PeTra.

Example:
    >>> collator = CoreferenceCollator(pad_token_id=0)
    >>> batch = collator([
    ...     {"input_ids": [101, 7, 102], "pronoun_spans": [1, 2]},
    ...     {"input_ids": [101, 102], "pronoun_spans": [1, 2]},
    ... ])
    >>> batch["input_ids"].tolist()
    [[101, 7, 102], [101, 102, 0]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.utils import logging

from ...models.petra import IGNORE_INDEX

logger = logging.get_logger(__name__)

__all__ = ["CoreferenceCollator"]

# Per-token columns and the value that pads them on the right. Padding counts as special so that no loss or
# entity probability is ever computed there.
_TOKEN_PADDING = {"attention_mask": 0, "special_tokens_mask": 1, "mention_targets": IGNORE_INDEX}
# Variable-length lists of (start, end) rows, padded with (-1, -1) rows.
_ROW_PADDED = ("candidate_spans", "link_pairs")
# Fixed-shape columns stacked as they are.
_STACKED = ("pronoun_spans", "gap_labels")


@dataclass
class CoreferenceCollator:
    """Pad coreference examples to the longest in the batch (right padding) and stack them into tensors.

    Padding values: ``input_ids`` -> `pad_token_id`, ``attention_mask`` -> 0, ``special_tokens_mask`` -> 1,
    ``mention_targets`` (CoNLL examples) -> -100,
    ``encoder_features`` -> zero rows, ``link_pairs`` / ``candidate_spans`` -> ``(-1, -1)`` rows, ``link_labels``
    -> -100. ``pronoun_spans`` and ``gap_labels`` are stacked. ``link_pairs`` always has at least one row (all
    padding when no example has pairs) so that the loss is defined. Only these keys (those present) are output:
    the other columns of a prepared GAP row (``id``, ``text``, the offsets, ``a_coref``, ...) are dropped, so that
    apart from ``gap_labels`` (not a forward argument: pop it, or let the Trainer drop it) a batch can be passed
    to the model as ``model(**batch)``. Name numeric columns to keep in `extra_keys`; they are stacked.

    When ``encoder_features`` are present, ``input_ids`` are dropped (with `drop_input_ids_with_features`, the
    default): the model accepts exactly one of the two, and `CachedFeatureDataset` keeps ``input_ids`` in its items
    only so that the Trainer's ``group_by_length`` can measure them.

    Args:
        pad_token_id: Id that pads ``input_ids`` (the tokenizer's ``pad_token_id``).
        drop_input_ids_with_features: Drop ``input_ids`` from batches that have ``encoder_features``.
        extra_keys: Further keys to output, stacked (every example must hold a number or an array of one shape).

    Raises:
        ValueError (on call): If examples have different keys, or an example's columns disagree in length.

    Example:
        >>> collator = CoreferenceCollator()
        >>> batch = collator([
        ...     {"link_pairs": [[1, 2], [1, 3]], "link_labels": [2, 1]},
        ...     {"link_pairs": [[2, 4]], "link_labels": [0]},
        ... ])
        >>> batch["link_labels"].tolist()
        [[2, 1], [0, -100]]
    """

    pad_token_id: int = 0
    drop_input_ids_with_features: bool = True
    extra_keys: tuple[str, ...] = ()

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, **kwargs: Any) -> CoreferenceCollator:
        """Collator padding ``input_ids`` with the tokenizer's pad token (0 if it has none).

        Example:
            >>> collator = CoreferenceCollator.from_tokenizer(tokenizer)  # doctest: +SKIP
        """
        pad_token_id = tokenizer.pad_token_id
        if pad_token_id is None:
            logger.warning(f"{type(tokenizer).__name__} has no pad token; padding input_ids with 0 (masked anyway).")
            pad_token_id = 0
        return cls(pad_token_id=pad_token_id, **kwargs)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """Collate a list of examples into a batch of tensors."""
        if not features:
            raise ValueError("CoreferenceCollator got an empty list of examples.")
        keys = _common_keys(features)
        if self.drop_input_ids_with_features and "encoder_features" in keys and "input_ids" in keys:
            keys.remove("input_ids")
        length = _batch_length(features, keys)

        batch: dict[str, torch.Tensor] = {}
        for key in keys:
            values = [feature[key] for feature in features]
            if key == "input_ids":
                batch[key] = _pad_tokens(values, length, self.pad_token_id, key)
            elif key in _TOKEN_PADDING:
                batch[key] = _pad_tokens(values, length, _TOKEN_PADDING[key], key)
            elif key == "encoder_features":
                batch[key] = _pad_features(values, length)
            elif key in _ROW_PADDED:
                batch[key] = _pad_rows(values, key, minimum_rows=1 if key == "link_pairs" else 0)
            elif key == "link_labels":
                pairs = [feature["link_pairs"] for feature in features] if "link_pairs" in keys else None
                batch[key] = _pad_labels(values, pairs, batch.get("link_pairs"))
            elif key in _STACKED:
                batch[key] = _stack(values, key)
            elif key in self.extra_keys:
                batch[key] = _stack(values, key)
        return batch


def _common_keys(features: Sequence[Mapping[str, Any]]) -> list[str]:
    keys = list(features[0].keys())
    for index, feature in enumerate(features[1:], start=1):
        if set(feature.keys()) != set(keys):
            raise ValueError(
                f"Example {index} has keys {sorted(feature.keys())} but example 0 has {sorted(keys)}; every example "
                "of a batch needs the same columns (e.g. all with or all without encoder_features)."
            )
    # link_labels is padded to the width of link_pairs: collate the pairs first.
    if "link_labels" in keys and "link_pairs" in keys:
        keys.remove("link_labels")
        keys.insert(keys.index("link_pairs") + 1, "link_labels")
    return keys


def _token_count(value: Any) -> int:
    return int(value.shape[0]) if hasattr(value, "shape") else len(value)


def _batch_length(features: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> int:
    """Longest example, after checking that every per-token column of an example has the same length."""
    token_keys = [key for key in ("input_ids", "encoder_features", *_TOKEN_PADDING) if key in keys]
    longest = 0
    for index, feature in enumerate(features):
        lengths = {key: _token_count(feature[key]) for key in token_keys}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"Example {index} has per-token columns of different lengths: {lengths}.")
        longest = max([longest, *lengths.values()])
    return longest


def _as_tensor(value: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value if dtype is None else value.to(dtype)
    return torch.as_tensor(np.asarray(value), dtype=dtype)


def _pad_tokens(values: Sequence[Any], length: int, padding_value: int, key: str) -> torch.Tensor:
    padded = torch.full((len(values), length), padding_value, dtype=torch.long)
    for row, value in enumerate(values):
        tokens = _as_tensor(value, torch.long)
        if tokens.dim() != 1:
            raise ValueError(f"{key} of example {row} must be a list of token values, got shape {tuple(tokens.shape)}.")
        padded[row, : tokens.shape[0]] = tokens
    return padded


def _pad_features(values: Sequence[Any], length: int) -> torch.Tensor:
    tensors = [_as_tensor(value) for value in values]
    for row, tensor in enumerate(tensors):
        if tensor.dim() != 2 or tensor.shape[-1] != tensors[0].shape[-1]:
            raise ValueError(
                f"encoder_features of example {row} must have shape (tokens, {tensors[0].shape[-1]}), got "
                f"{tuple(tensor.shape)}."
            )
    dtype = tensors[0].dtype if tensors[0].is_floating_point() else torch.float32
    padded = torch.zeros(len(tensors), length, tensors[0].shape[-1], dtype=dtype)
    for row, tensor in enumerate(tensors):
        padded[row, : tensor.shape[0]] = tensor
    return padded


def _rows(value: Any, key: str, index: int) -> torch.Tensor:
    rows = _as_tensor(value, torch.long)
    if rows.numel() == 0:
        return rows.reshape(0, 2)  # an example without pairs arrives as [] (shape (0,))
    if rows.dim() != 2 or rows.shape[-1] != 2:
        raise ValueError(
            f"{key} of example {index} must be a list of [start, end] pairs, got shape {tuple(rows.shape)}."
        )
    return rows


def _pad_rows(values: Sequence[Any], key: str, minimum_rows: int) -> torch.Tensor:
    tensors = [_rows(value, key, index) for index, value in enumerate(values)]
    width = max([minimum_rows, *(tensor.shape[0] for tensor in tensors)])
    padded = torch.full((len(tensors), width, 2), -1, dtype=torch.long)
    for row, tensor in enumerate(tensors):
        padded[row, : tensor.shape[0]] = tensor
    return padded


def _pad_labels(
    values: Sequence[Any], pairs: Sequence[Any] | None, padded_pairs: torch.Tensor | None
) -> torch.Tensor:
    """Pad labels with -100 to the width of the padded pairs, checking one label per pair."""
    labels = [_as_tensor(value, torch.long).reshape(-1) for value in values]
    width = max(label.shape[0] for label in labels) if padded_pairs is None else padded_pairs.shape[1]
    padded = torch.full((len(labels), width), IGNORE_INDEX, dtype=torch.long)
    for row, label in enumerate(labels):
        num_pairs = None if pairs is None else _rows(pairs[row], "link_pairs", row).shape[0]
        if num_pairs is not None and label.shape[0] != num_pairs:
            raise ValueError(
                f"Example {row} has {label.shape[0]} link_labels but {num_pairs} link_pairs; give one label per pair."
            )
        padded[row, : label.shape[0]] = label
    return padded


def _stack(values: Sequence[Any], key: str) -> torch.Tensor:
    try:
        tensors = [_as_tensor(value) for value in values]
    except (TypeError, ValueError) as error:
        raise ValueError(f"{key} must hold numbers or numeric arrays in every example: {error}") from None
    shapes = {tuple(tensor.shape) for tensor in tensors}
    if len(shapes) > 1:
        raise ValueError(f"{key} must have the same shape in every example, got shapes {sorted(shapes)}.")
    return torch.stack(tensors)


