"""Batching definition prompts for DefinitionEMB training (Section 5.1).

`DefinitionCollator` turns rows of `definitions.definition_prompt_dataset` (``input_ids``, ``corruption_spans``)
into exactly what `DefinitionEmbModel.forward` takes:

* ``"encoder-only"``: with ``word_slots="distinct"`` every word-slot token masked (`corruption.masked_all_slots`, as
  the reader is read); with ``"paper"`` every prompt freshly corrupted (`corruption.corrupt_for_encoder`: 50% mask,
  25% random token, 25% unchanged inside the word slots); ``labels`` are the original ids of the word-slot tokens
  (with ``single_token_slots_only``, only of slots that are one token), -100 elsewhere.
* ``"encoder-decoder"``: source with one sentinel per word slot, decoder input and labels
  (`corruption.encoder_decoder_example`), plus ``decoder_attention_mask``.

Padding is on the right with the tokenizer's pad id; labels are padded with -100.

Example:
    >>> collator = DefinitionCollator(tokenizer, "encoder-only", seed=0)  # doctest: +SKIP
    >>> batch = collator([prompts[0], prompts[1]])  # doctest: +SKIP
    >>> sorted(batch)  # doctest: +SKIP
    ['attention_mask', 'input_ids', 'labels']
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...models.definition_emb.configuration_definition_emb import READER_TYPES
from .corruption import (
    IGNORE_INDEX,
    check_corruption_probabilities,
    corrupt_for_encoder,
    encoder_decoder_example,
    masked_all_slots,
)
from .prompts import (
    DefinitionPrompt,
    default_decoder_start_token_id,
    WORD_SLOT_CHOICES,
    random_replacement_ids,
    sentinel_token_ids,
)

__all__ = ["READER_TYPES", "DefinitionCollator", "pad_sequences"]



def pad_sequences(sequences: Sequence[Sequence[int] | torch.Tensor], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-D id sequences into ``(ids, attention_mask)`` long tensors.

    Example:
        >>> ids, mask = pad_sequences([[5, 6, 7], [8]], value=1)
        >>> ids.tolist(), mask.tolist()
        ([[5, 6, 7], [8, 1, 1]], [[1, 1, 1], [1, 0, 0]])
    """
    tensors = [torch.as_tensor(sequence, dtype=torch.long) for sequence in sequences]
    length = max(tensor.numel() for tensor in tensors)
    ids = torch.full((len(tensors), length), int(value), dtype=torch.long)
    mask = torch.zeros((len(tensors), length), dtype=torch.long)
    for row, tensor in enumerate(tensors):
        ids[row, : tensor.numel()] = tensor
        mask[row, : tensor.numel()] = 1
    return ids, mask


class DefinitionCollator:
    """Pad and corrupt definition prompts into a DefinitionEMB training batch.

    Args:
        tokenizer: The tokenizer the prompts were built with (pad, mask / sentinel and eos ids; the vocabulary for
            random replacements).
        reader_type: ``"encoder-only"`` or ``"encoder-decoder"`` (``model.config.reader_type``).
        mask_probability: Encoder-only: probability that a word-slot token becomes the mask token (paper 0.5).
        random_probability: Encoder-only: probability that it becomes a random non-special token (paper 0.25).
        seed: Seed of the collator's own `torch.Generator`: every call draws a fresh corruption from it, and two
            collators with the same seed produce the same sequence of batches.
        decoder_start_token_id: Encoder-decoder: the model config's ``decoder_start_token_id``; default eos (BART) or
            pad (T5-style tokenizers).
        word_slots: Encoder-only: the reader's ``config.word_slots``; ``"distinct"`` masks every slot token (the
            probabilities are not used), ``"paper"`` corrupts with them.
        single_token_slots_only: Encoder-only: label only the slots that are one token (a pooled-definition reader
            gives one vector per prompt, which can be the embedding of a whole word, not of its pieces).

    Raises:
        ValueError: For an unknown reader type, an encoder-only tokenizer without a mask token, an encoder-decoder
            tokenizer without sentinel / mask tokens, or probabilities outside [0, 1].

    Example:
        >>> collator = DefinitionCollator(bart_tokenizer, "encoder-decoder")  # doctest: +SKIP
        >>> sorted(collator([prompt_row]))  # doctest: +SKIP
        ['attention_mask', 'decoder_attention_mask', 'decoder_input_ids', 'input_ids', 'labels']
    """

    def __init__(
        self,
        tokenizer: Any,
        reader_type: str,
        mask_probability: float = 0.5,
        random_probability: float = 0.25,
        seed: int = 0,
        decoder_start_token_id: int | None = None,
        word_slots: str = "distinct",
        single_token_slots_only: bool = False,
    ) -> None:
        if word_slots not in WORD_SLOT_CHOICES:
            raise ValueError(f"word_slots must be one of {WORD_SLOT_CHOICES}, got {word_slots!r}.")
        if reader_type not in READER_TYPES:
            raise ValueError(f"reader_type must be one of {READER_TYPES}, got {reader_type!r}.")
        check_corruption_probabilities(mask_probability, random_probability)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int, got {seed!r}.")
        self.tokenizer = tokenizer
        self.reader_type = reader_type
        self.mask_probability = float(mask_probability)
        self.random_probability = float(random_probability)
        self.seed = int(seed)
        self.word_slots = word_slots
        self.single_token_slots_only = bool(single_token_slots_only)
        self.generator = torch.Generator().manual_seed(self.seed)
        # Padding is masked out and ignored by the loss, so any id works when the tokenizer has no pad token.
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad) if pad is not None else 0
        if reader_type == "encoder-only":
            if tokenizer.mask_token_id is None:
                raise ValueError(
                    f"The encoder-only reader needs a tokenizer with a mask token ({type(tokenizer).__name__} has "
                    "none): corrupted word-slot tokens are replaced by it. Use the PLM's own tokenizer (BERT: [MASK], "
                    "RoBERTa: <mask>)."
                )
            self.mask_token_id = int(tokenizer.mask_token_id)
            self.random_ids = torch.tensor(random_replacement_ids(tokenizer), dtype=torch.long)
        else:
            sentinel_token_ids(tokenizer)  # fail now, not at the first batch, when there is no sentinel/mask token
            self.decoder_start_token_id = (
                int(decoder_start_token_id)
                if decoder_start_token_id is not None
                else default_decoder_start_token_id(tokenizer)
            )

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("Cannot collate an empty list of definition prompts.")
        self._reseed_in_worker()
        prompts = [DefinitionPrompt.from_features(feature) for feature in features]
        if self.reader_type == "encoder-only":
            return self._encoder_only_batch(prompts)
        return self._encoder_decoder_batch(prompts)

    def _reseed_in_worker(self) -> None:
        # DataLoader workers each get a copy of this collator; without reseeding they would all draw the same
        # corruptions. The worker seed changes every epoch, so corruption stays fresh across epochs too.
        worker = torch.utils.data.get_worker_info()
        if worker is not None and getattr(self, "_worker_seed", None) != worker.seed:
            self._worker_seed = worker.seed
            self.generator.manual_seed((self.seed * 1_000_003 + worker.seed) % (2**63))

    def _encoder_only_batch(self, prompts: list[DefinitionPrompt]) -> dict[str, torch.Tensor]:
        corrupted, labels = [], []
        for prompt in prompts:
            spans = prompt.corruption_spans
            if self.single_token_slots_only:
                spans = [(start, end) for start, end in spans if end - start == 1]
            if self.word_slots == "distinct":  # every slot hidden, labelled or not: as the reader is read
                ids = torch.tensor(masked_all_slots(prompt, self.mask_token_id))
                prompt_labels = torch.full_like(ids, IGNORE_INDEX)
                for start, end in spans:
                    prompt_labels[start:end] = torch.tensor(prompt.input_ids[start:end])
            else:
                ids, prompt_labels = corrupt_for_encoder(
                    prompt.input_ids,
                    spans,
                    self.mask_token_id,
                    self.random_ids,
                    self.generator,
                    mask_probability=self.mask_probability,
                    random_probability=self.random_probability,
                )
            corrupted.append(ids)
            labels.append(prompt_labels)
        input_ids, attention_mask = pad_sequences(corrupted, self.pad_token_id)
        padded_labels, _ = pad_sequences(labels, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": padded_labels}

    def _encoder_decoder_batch(self, prompts: list[DefinitionPrompt]) -> dict[str, torch.Tensor]:
        examples = [encoder_decoder_example(prompt, self.tokenizer, self.decoder_start_token_id) for prompt in prompts]
        input_ids, attention_mask = pad_sequences([example["input_ids"] for example in examples], self.pad_token_id)
        decoder_input_ids, decoder_attention_mask = pad_sequences(
            [example["decoder_input_ids"] for example in examples], self.pad_token_id
        )
        labels, _ = pad_sequences([example["labels"] for example in examples], IGNORE_INDEX)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_attention_mask,
            "labels": labels,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(reader_type={self.reader_type!r}, mask_probability={self.mask_probability}, "
            f"random_probability={self.random_probability}, seed={self.seed}, word_slots={self.word_slots!r}, "
            f"single_token_slots_only={self.single_token_slots_only})"
        )
