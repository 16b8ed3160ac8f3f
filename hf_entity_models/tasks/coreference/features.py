"""Frozen-encoder feature caching: run the encoder once, then train the memory on cached features.

PeTra keeps its pretrained encoder frozen (paper section 3.2), so the encoder features of a document are the
same every epoch. `cache_encoder_features` computes them once (optionally saving them to one safetensors file
keyed by a fingerprint of the data, the encoder and the feature settings) and returns a `CachedFeatureDataset`
whose items carry ``encoder_features``; `CoreferenceCollator` pads them and the model skips its encoder.

Example:
    >>> train = prepare_gap_dataset("gap-development.tsv", tokenizer)  # doctest: +SKIP
    >>> cached = cache_encoder_features(model, train, cache_dir="feature_cache")  # doctest: +SKIP
    >>> collator = CoreferenceCollator.from_tokenizer(tokenizer)  # doctest: +SKIP
    >>> trainer = Trainer(model, args, train_dataset=cached, data_collator=collator)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm
from transformers.utils import logging

logger = logging.get_logger(__name__)

__all__ = ["CachedFeatureDataset", "cache_encoder_features", "encoder_features_fingerprint", "uses_frozen_encoder"]

# Columns of a prepared GAP dataset that `CoreferenceCollator` turns into model inputs.
MODEL_COLUMNS = (
    "input_ids",
    "attention_mask",
    "special_tokens_mask",
    "pronoun_spans",
    "candidate_spans",
    "link_pairs",
    "link_labels",
    "gap_labels",
    "mention_targets",
)
_CACHE_FORMAT = "hf_entity_models.encoder_features.v1"
# Config entries that do not change what the encoder computes.
_IRRELEVANT_CONFIG_KEYS = ("transformers_version", "_name_or_path", "architectures", "name_or_path")


class CachedFeatureDataset(torch.utils.data.Dataset):
    """A prepared coreference dataset whose items carry precomputed ``encoder_features``.

    Every item has the model columns of the row that `CoreferenceCollator` understands (``attention_mask``,
    ``special_tokens_mask``, ``pronoun_spans``, ``candidate_spans``, ``link_pairs``, ``link_labels``,
    ``gap_labels``, where present) plus ``encoder_features`` of shape ``(tokens, encoder_feature_size)``.

    Items also keep ``input_ids``: the Trainer's ``group_by_length`` measures ``len(item["input_ids"])`` for a
    torch dataset. The model refuses ``input_ids`` together with ``encoder_features``, so `CoreferenceCollator`
    drops ``input_ids`` from batches that have features (``drop_input_ids_with_features=True``, its default).
    The columns are read out of Arrow once, so an item is a few list look-ups (measuring every item's length
    for ``group_by_length`` does not copy features).

    Args:
        dataset: The prepared rows (e.g. from `prepare_gap_dataset`); kept as `.dataset` for scoring.
        features: One tensor ``(tokens_i, F)`` per row, in row order.

    Raises:
        ValueError: If the number of feature tensors or their lengths do not match the rows.

    Example:
        >>> cached = CachedFeatureDataset(dataset, features)  # doctest: +SKIP
        >>> cached[0]["encoder_features"].shape  # doctest: +SKIP
        torch.Size([97, 1536])
    """

    def __init__(self, dataset: datasets.Dataset, features: Sequence[torch.Tensor]):
        if len(features) != len(dataset):
            raise ValueError(f"Got {len(features)} feature tensors for {len(dataset)} rows; pass one per row.")
        columns = [column for column in MODEL_COLUMNS if column in dataset.column_names]
        if "input_ids" not in columns:
            raise ValueError("The dataset has no input_ids column; prepare it with prepare_gap_dataset first.")
        self.dataset = dataset
        self.features = list(features)
        self._columns: dict[str, list] = dataset.select_columns(columns).to_dict()
        self._lengths = [len(ids) for ids in self._columns["input_ids"]]
        for index, (tensor, length) in enumerate(zip(self.features, self._lengths)):
            if tensor.dim() != 2 or tensor.shape[0] != length:
                raise ValueError(
                    f"Features of row {index} have shape {tuple(tensor.shape)} but the row has {length} tokens; "
                    "expected (tokens, encoder_feature_size). Recompute them with cache_encoder_features."
                )

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = {column: values[index] for column, values in self._columns.items()}
        item["encoder_features"] = self.features[index]
        return item

    @property
    def lengths(self) -> list[int]:
        """Token count of every row (e.g. for a custom length-grouped sampler)."""
        return list(self._lengths)


def cache_encoder_features(
    model: torch.nn.Module,
    dataset: datasets.Dataset,
    batch_size: int = 32,
    cache_dir: str | os.PathLike | None = None,
    dtype: torch.dtype = torch.float32,
    show_progress: bool = True,
) -> CachedFeatureDataset:
    """Run ``model.get_encoder_features`` once over a prepared dataset and wrap the rows with the features.

    Rows are encoded longest first in batches (similar lengths waste little padding) under ``torch.no_grad()``
    with the model in eval mode (its mode is restored afterwards); padding is stripped and the result keeps the
    dataset's order. Rows longer than the encoder window are encoded in overlapping windows by the model.

    With `cache_dir`, the features are saved to one safetensors file named by `encoder_features_fingerprint`
    (the token ids, the encoder's config and weights, the layers, window and dtype); a later call with the same
    inputs loads it without running the encoder. A cache file that cannot be read or does not match the data is
    rebuilt, with a logged warning (writes go through a temporary file, so an interrupted run leaves no partial
    file under the final name).

    Args:
        model: A coreference model that reads a frozen encoder (`uses_frozen_encoder`): PeTra with
            ``config.freeze_encoder=True``, or a Referential Reader built with an encoder.
        dataset: Rows with ``input_ids`` (and ``attention_mask``), e.g. from `prepare_gap_dataset`.
        batch_size: Rows per encoder call.
        cache_dir: Folder for the cache file; None keeps the features in memory only.
        dtype: Dtype of the stored features (``torch.float16`` halves memory; the model casts them back).
        show_progress: Show a progress bar while encoding.

    Returns:
        A `CachedFeatureDataset` over `dataset`.

    Raises:
        ValueError: If the encoder is not frozen (the cached features would go stale as it trains), the dataset
            is empty or has no ``input_ids``, or `batch_size` < 1.

    Example:
        >>> validation = prepare_gap_dataset("gap-validation.tsv", tokenizer)  # doctest: +SKIP
        >>> cached = cache_encoder_features(model, validation, cache_dir="feature_cache")  # doctest: +SKIP
        >>> len(cached)  # doctest: +SKIP
        454
    """
    _check_arguments(model, dataset, batch_size)
    input_ids, attention_mask = _token_columns(dataset)
    cache_file = None
    if cache_dir is not None:
        fingerprint = encoder_features_fingerprint(model, input_ids, attention_mask, dtype)
        cache_file = Path(cache_dir) / f"encoder-features-{fingerprint[:32]}.safetensors"
        features = _load_cached_features(cache_file, fingerprint, [len(ids) for ids in input_ids], dtype)
        if features is not None:
            logger.info(f"Loaded encoder features of {len(features)} rows from {cache_file}.")
            return CachedFeatureDataset(dataset, features)
    features = _compute_features(model, input_ids, attention_mask, batch_size, dtype, show_progress)
    if cache_file is not None:
        _save_features(cache_file, fingerprint, features)
        logger.info(f"Saved encoder features of {len(features)} rows to {cache_file}.")
    return CachedFeatureDataset(dataset, features)


def _check_arguments(model: torch.nn.Module, dataset: datasets.Dataset, batch_size: int) -> None:
    if not uses_frozen_encoder(model):
        raise ValueError(
            "cache_encoder_features needs a model that reads a frozen encoder (PeTra with freeze_encoder=True, or a "
            "Referential Reader with an encoder_config): a trained encoder changes its features every step, and an "
            "incremental reader has no encoder. Train from input_ids instead."
        )
    if not isinstance(dataset, datasets.Dataset) or "input_ids" not in dataset.column_names:
        raise ValueError("dataset must be a datasets.Dataset with an input_ids column (see prepare_gap_dataset).")
    if len(dataset) == 0:
        raise ValueError("dataset is empty; there is nothing to encode.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")


def _token_columns(dataset: datasets.Dataset) -> tuple[list[list[int]], list[list[int]]]:
    columns = [column for column in ("input_ids", "attention_mask") if column in dataset.column_names]
    rows = dataset.select_columns(columns).to_dict()
    input_ids = rows["input_ids"]
    attention_mask = rows.get("attention_mask") or [[1] * len(ids) for ids in input_ids]
    return input_ids, attention_mask


# ------------------------------------------------------------------------------------------------ fingerprint
def encoder_features_fingerprint(
    model: torch.nn.Module,
    input_ids: Sequence[Sequence[int]],
    attention_mask: Sequence[Sequence[int]],
    dtype: torch.dtype,
) -> str:
    """Hex digest of everything the cached features depend on.

    The token ids and attention masks are hashed directly (a dataset's ``_fingerprint`` is random for in-memory
    datasets, and a hash of the ids is exact); the encoder weights are hashed whole (a few hundred MB per second:
    well under a second for BERT-base, negligible next to encoding).

    Example:
        >>> encoder_features_fingerprint(model, [[101, 102]], [[1, 1]], torch.float32)[:8]  # doctest: +SKIP
        '3f9c2a71'
    """
    config = model.config
    encoder_config = {
        key: value for key, value in config.encoder_config.to_dict().items() if key not in _IRRELEVANT_CONFIG_KEYS
    }
    settings = {
        "format": _CACHE_FORMAT,
        "encoder_config": encoder_config,
        "encoder_layers": list(config.encoder_layers),
        "window": config.max_encoder_window,
        "window_overlap": config.effective_window_overlap,
        "dtype": str(dtype),
    }
    digest = hashlib.blake2b(digest_size=32)
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    _hash_token_rows(digest, input_ids)
    _hash_token_rows(digest, attention_mask)
    _hash_weights(digest, _encoder_of(model))
    return digest.hexdigest()


def _hash_token_rows(digest: Any, rows: Sequence[Sequence[int]]) -> None:
    lengths = np.asarray([len(row) for row in rows], dtype=np.int64)
    digest.update(lengths.tobytes())
    tokens = np.fromiter((token for row in rows for token in row), dtype=np.int64, count=int(lengths.sum()))
    digest.update(tokens.tobytes())


def _hash_weights(digest: Any, encoder: torch.nn.Module) -> None:
    for name, tensor in sorted(encoder.state_dict().items()):
        tensor = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        # A byte view works for every dtype, including bfloat16 that numpy lacks.
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())


def uses_frozen_encoder(model: torch.nn.Module) -> bool:
    """True when the model reads a frozen encoder whose features can be cached (`config.encoder_is_frozen`)."""
    return bool(getattr(model.config, "encoder_is_frozen", False))


def _encoder_of(model: torch.nn.Module) -> torch.nn.Module:
    base = getattr(model, model.base_model_prefix, model)
    return base.encoder


# ------------------------------------------------------------------------------------------------- encoding
def _compute_features(
    model: torch.nn.Module,
    input_ids: list[list[int]],
    attention_mask: list[list[int]],
    batch_size: int,
    dtype: torch.dtype,
    show_progress: bool,
) -> list[torch.Tensor]:
    lengths = [len(ids) for ids in input_ids]
    device = next(model.parameters()).device
    features: list[torch.Tensor | None] = [None] * len(input_ids)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), tqdm(
            # A bar over one document shows nothing until it is done.
            total=len(input_ids), desc="Encoding", unit="doc", disable=not show_progress or len(input_ids) < 2
        ) as progress:
            for batch in _length_sorted_batches(lengths, batch_size):
                ids, mask = _padded_batch(batch, input_ids, attention_mask, device)
                batch_features = model.get_encoder_features(ids, mask)
                for row, index in enumerate(batch):
                    # clone: a slice would keep the whole padded batch tensor alive.
                    features[index] = batch_features[row, : lengths[index]].to("cpu", dtype).clone()
                progress.update(len(batch))
    finally:
        model.train(was_training)
    return features


def _length_sorted_batches(lengths: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Longest rows first: similar lengths waste little padding, and an out-of-memory error shows at once."""
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def _padded_batch(
    batch: Sequence[int], input_ids: list[list[int]], attention_mask: list[list[int]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(input_ids[index]) for index in batch)
    ids = torch.zeros(len(batch), length, dtype=torch.long)  # the pad id does not matter: it is masked
    mask = torch.zeros(len(batch), length, dtype=torch.long)
    for row, index in enumerate(batch):
        ids[row, : len(input_ids[index])] = torch.tensor(input_ids[index], dtype=torch.long)
        mask[row, : len(attention_mask[index])] = torch.tensor(attention_mask[index], dtype=torch.long)
    return ids.to(device), mask.to(device)


# ------------------------------------------------------------------------------------------------ cache file
def _save_features(cache_file: Path, fingerprint: str, features: Sequence[torch.Tensor]) -> None:
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    tensors = {
        "features": torch.cat(list(features)).contiguous(),
        "lengths": torch.tensor([tensor.shape[0] for tensor in features], dtype=torch.long),
    }
    metadata = {"format": _CACHE_FORMAT, "fingerprint": fingerprint, "num_rows": str(len(features))}
    handle, temporary = tempfile.mkstemp(dir=cache_file.parent, prefix=cache_file.name, suffix=".tmp")
    os.close(handle)
    try:
        save_file(tensors, temporary, metadata=metadata)
        os.replace(temporary, cache_file)  # atomic: readers never see a half-written file
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _load_cached_features(
    cache_file: Path, fingerprint: str, lengths: Sequence[int], dtype: torch.dtype
) -> list[torch.Tensor] | None:
    """The cached features, or None (with a warning if a file exists but is unusable) to recompute them."""
    if not cache_file.is_file():
        return None
    try:
        with safe_open(str(cache_file), framework="pt") as handle:
            metadata = handle.metadata() or {}
            stored_lengths = handle.get_tensor("lengths")
            stored = handle.get_tensor("features")
        problem = _cache_mismatch(metadata, fingerprint, stored_lengths, stored, lengths, dtype)
    except (SafetensorError, OSError, RuntimeError, ValueError, KeyError) as error:
        problem = f"it cannot be read ({type(error).__name__}: {error})"
    if problem is not None:
        logger.warning(f"Ignoring the encoder feature cache {cache_file}: {problem}. Recomputing and overwriting it.")
        return None
    return list(torch.split(stored, list(lengths)))


def _cache_mismatch(
    metadata: dict[str, str],
    fingerprint: str,
    stored_lengths: torch.Tensor,
    stored: torch.Tensor,
    lengths: Sequence[int],
    dtype: torch.dtype,
) -> str | None:
    if metadata.get("format") != _CACHE_FORMAT or metadata.get("fingerprint") != fingerprint:
        return "its metadata does not match these inputs"
    if stored_lengths.tolist() != list(lengths):
        return "its row lengths differ from the dataset's"
    if stored.dim() != 2 or stored.shape[0] != sum(lengths) or stored.dtype != dtype:
        return f"its feature tensor has shape {tuple(stored.shape)} and dtype {stored.dtype}"
    return None
