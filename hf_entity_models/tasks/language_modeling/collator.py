"""Batching for causal language modeling: right padding, labels = input_ids with padding set to -100.

transformers' `DataCollatorForLanguageModeling(tokenizer, mlm=False)` does the same for most tokenizers, but it finds
padding by comparing ids with ``pad_token_id``. GPT-2 has no pad token and is usually given ``pad_token = eos_token``;
the stock collator then also sets to -100 every real ``<|endoftext|>`` — exactly the document separators of our
corpus, which the model should learn to predict. `LanguageModelingCollator` finds padding from the attention mask
instead, so separators stay in the labels whatever the pad token is. For tokenizers whose pad token differs from
every real token (BERT: ``[PAD]``) the two give identical batches.

`EntityLanguageModelingCollator` pads GPT2E's entity-LM windows the same way and adds ``entity_ids`` (padded with
Ø = 0), ``document_ids`` and ``window_index``.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._checks import is_int

__all__ = ["IGNORE_INDEX", "EntityLanguageModelingCollator", "LanguageModelingCollator", "lm_data_collator"]

# The label the loss ignores (torch.nn.CrossEntropyLoss's default ignore_index).
IGNORE_INDEX = -100


@dataclass
class LanguageModelingCollator:
    """Pad causal-LM examples on the right and make labels.

    Each example is a mapping with ``input_ids`` (a list or 1-D tensor) and optionally ``attention_mask``. The batch
    has ``input_ids`` (padded with ``pad_token_id``), ``attention_mask`` (0 on padding) and ``labels``: a copy of
    ``input_ids`` with -100 wherever the attention mask is 0. Labels are NOT shifted: the model shifts them
    internally, as GPT-2's ``labels`` argument does (the logits at position t are scored against the token at t+1).

    Attributes:
        pad_token_id: The id written at padded positions (never seen by the loss).
        pad_to_multiple_of: If set, the padded length is rounded up to a multiple of it.

    Example:
        >>> collator = LanguageModelingCollator(pad_token_id=0)
        >>> batch = collator([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
        >>> batch["input_ids"].tolist(), batch["labels"].tolist()
        ([[5, 6, 7], [8, 0, 0]], [[5, 6, 7], [8, -100, -100]])
        >>> batch["attention_mask"].tolist()
        [[1, 1, 1], [1, 0, 0]]
    """

    pad_token_id: int = 0
    pad_to_multiple_of: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pad_token_id, bool) or not isinstance(self.pad_token_id, numbers.Integral):
            raise TypeError(f"pad_token_id must be an int, got {self.pad_token_id!r}.")
        if self.pad_to_multiple_of is not None and (
            isinstance(self.pad_to_multiple_of, bool)
            or not isinstance(self.pad_to_multiple_of, numbers.Integral)
            or self.pad_to_multiple_of < 1
        ):
            raise ValueError(f"pad_to_multiple_of must be a positive int or None, got {self.pad_to_multiple_of!r}.")

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("Cannot collate an empty list of examples.")
        ids_list, masks = [], []
        for index, example in enumerate(examples):
            if not isinstance(example, Mapping) or "input_ids" not in example:
                raise TypeError(f"Example {index} must be a mapping with 'input_ids', got {type(example).__name__}.")
            ids = torch.as_tensor(example["input_ids"], dtype=torch.long)
            if ids.ndim != 1 or ids.numel() == 0:
                raise ValueError(
                    f"Example {index}: input_ids must be a non-empty 1-D sequence, got shape {tuple(ids.shape)}."
                )
            mask = example.get("attention_mask")
            mask = torch.ones_like(ids) if mask is None else torch.as_tensor(mask, dtype=torch.long)
            if mask.shape != ids.shape:
                raise ValueError(
                    f"Example {index}: attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}."
                )
            ids_list.append(ids)
            masks.append(mask)
        length = max(len(ids) for ids in ids_list)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        input_ids = torch.full((len(ids_list), length), int(self.pad_token_id), dtype=torch.long)
        attention_mask = torch.zeros((len(ids_list), length), dtype=torch.long)
        for row, (ids, mask) in enumerate(zip(ids_list, masks)):
            input_ids[row, : len(ids)] = ids
            attention_mask[row, : len(ids)] = mask
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def lm_data_collator(tokenizer: Any, pad_to_multiple_of: int | None = None) -> LanguageModelingCollator:
    """The collator for `LanguageModelingCorpus` rows and the stock `transformers.Trainer`.

    Equivalent to ``DataCollatorForLanguageModeling(tokenizer, mlm=False)`` (right padding, labels = input_ids with
    padding set to -100, unshifted), except that padding is found from the attention mask, so a pad token equal to
    the eos/separator token (GPT-2's usual setup) does not hide the document separators from the loss. A tokenizer
    without a pad token pads with its eos (else sep, else 0) id: the value is masked out anyway.

    Args:
        tokenizer: The tokenizer the corpus was built with.
        pad_to_multiple_of: Optional rounding of the padded length.

    Example:
        >>> collator = lm_data_collator(tokenizer)  # doctest: +SKIP
        >>> trainer = Trainer(model=model, args=args, data_collator=collator, train_dataset=dataset["train"])  # doctest: +SKIP
    """
    for name in ("pad_token_id", "eos_token_id", "sep_token_id"):
        token_id = getattr(tokenizer, name, None)
        if token_id is not None:
            return LanguageModelingCollator(pad_token_id=int(token_id), pad_to_multiple_of=pad_to_multiple_of)
    return LanguageModelingCollator(pad_token_id=0, pad_to_multiple_of=pad_to_multiple_of)


@dataclass
class EntityLanguageModelingCollator(LanguageModelingCollator):
    """Pad entity-LM windows: `LanguageModelingCollator`'s batch plus ``entity_ids``, ``document_ids`` and
    ``window_index``.

    ``input_ids``, ``attention_mask`` and ``labels`` are exactly `LanguageModelingCollator`'s (right padding, labels
    -100 on padding, unshifted). ``entity_ids`` is padded with 0 (Ø) to the same length. When the examples have
    ``document_id`` and ``window_index`` (rows of `entity_lm_windows`), the batch gets ``document_ids`` and
    ``window_index`` as LongTensors of shape ``(batch_size,)``, unchanged; two windows of one document in one batch
    raise (order the rows with `order_windows_for_streams` and sample sequentially). Other keys (``num_entities``)
    are ignored.

    Attributes:
        pad_token_id: The id written at padded positions (never seen by the loss).
        pad_to_multiple_of: If set, the padded length is rounded up to a multiple of it.

    Example:
        >>> collator = EntityLanguageModelingCollator(pad_token_id=0)
        >>> batch = collator([
        ...     {"input_ids": [5, 6, 7], "entity_ids": [1, 1, 0], "document_id": 0, "window_index": 2},
        ...     {"input_ids": [8], "entity_ids": [3], "document_id": 4, "window_index": 0},
        ... ])
        >>> batch["entity_ids"].tolist(), batch["document_ids"].tolist(), batch["labels"].tolist()
        ([[1, 1, 0], [3, 0, 0]], [0, 4], [[5, 6, 7], [8, -100, -100]])
    """

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = super().__call__(examples)
        batch["entity_ids"] = self._padded_entity_ids(examples, batch["input_ids"].shape[1])
        for key, name in (("document_id", "document_ids"), ("window_index", "window_index")):
            values = self._per_example(examples, key)
            if values is not None:
                batch[name] = values
        document_ids = batch.get("document_ids")
        if document_ids is not None and len(set(document_ids.tolist())) != len(document_ids):
            repeated = [d for d, n in Counter(document_ids.tolist()).items() if n > 1]
            raise ValueError(
                f"The batch holds several windows of document(s) {repeated}; the entity states of a document move "
                "from one window to the next, so order the rows with order_windows_for_streams(dataset, batch_size) "
                "and use a sequential sampler (train_sampling_strategy='sequential')."
            )
        return batch

    @staticmethod
    def _padded_entity_ids(examples: Sequence[Mapping[str, Any]], length: int) -> torch.Tensor:
        entity_ids = torch.zeros((len(examples), length), dtype=torch.long)
        for index, example in enumerate(examples):
            if "entity_ids" not in example:
                raise ValueError(
                    f"Example {index} has no 'entity_ids'; give one entity id per token (0 outside mentions, e.g. "
                    "[0] * len(input_ids) for LAMBADA)."
                )
            ids = torch.as_tensor(example["entity_ids"])
            num_tokens = torch.as_tensor(example["input_ids"]).numel()
            if ids.ndim != 1 or ids.numel() != num_tokens:
                raise ValueError(
                    f"Example {index}: entity_ids has shape {tuple(ids.shape)} but input_ids has {num_tokens} tokens; "
                    "give exactly one entity id per token."
                )
            if ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise TypeError(f"Example {index}: entity_ids must be integers, got {ids.dtype}.")
            if ids.numel() and int(ids.min()) < 0:
                raise ValueError(f"Example {index}: entity_ids must be >= 0 (0 = no entity), got {int(ids.min())}.")
            entity_ids[index, :num_tokens] = ids.long()
        return entity_ids

    @staticmethod
    def _per_example(examples: Sequence[Mapping[str, Any]], key: str) -> torch.Tensor | None:
        present = [key in example for example in examples]
        if not any(present):
            return None
        if not all(present):
            raise ValueError(
                f"Example {present.index(False)} has no {key!r} but others have; give it to every example."
            )
        values = [example[key] for example in examples]
        for index, value in enumerate(values):
            if not is_int(value) and not (isinstance(value, torch.Tensor) and value.numel() == 1):
                raise TypeError(f"Example {index}: {key} must be an int, got {value!r}.")
        return torch.tensor([int(value) for value in values], dtype=torch.long)
