"""Reader inputs from definition prompts for DefinitionEMB (Section 5.1, Figure 17 b and c): the word slots of a
`DefinitionPrompt` masked or corrupted, with the labels the definition reader is trained on.

* `masked_all_slots` is the encoder-only input of ``word_slots="distinct"`` readers, in training and reading alike;
  `corrupt_for_encoder` the paper's training corruption (50% mask token, 25% random token, 25% unchanged) and
  `masked_one_at_a_time` its inference input (one span token masked per copy).
* `encoder_decoder_example` is the encoder-decoder source/target pair (Figure 17 b, c): each span becomes one
  sentinel in the source, the target lists the spans after their sentinels.

Building the prompts themselves is `prompts`'s job.

Example:
    >>> masked_all_slots(DefinitionPrompt([0, 5, 6, 7, 2], [(1, 2), (3, 4)], "x"), mask_token_id=9)
    [0, 9, 6, 9, 2]
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import torch

from ...models.definition_emb.modeling_definition_emb import IGNORE_INDEX  # the label the loss ignores
from .prompts import DefinitionPrompt, default_decoder_start_token_id, sentinel_token_ids

__all__ = [
    "IGNORE_INDEX",
    "check_corruption_probabilities",
    "corrupt_for_encoder",
    "encoder_decoder_example",
    "masked_all_slots",
    "masked_one_at_a_time",
]


def _as_id_tensor(ids: Sequence[int] | torch.Tensor, name: str) -> torch.Tensor:
    tensor = torch.as_tensor(ids, dtype=torch.long)
    if tensor.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got shape {tuple(tensor.shape)}.")
    return tensor


def corrupt_for_encoder(
    prompt_ids: Sequence[int] | torch.Tensor,
    corruption_spans: Sequence[Sequence[int]],
    mask_token_id: int,
    vocabulary_ids_for_random: Sequence[int] | torch.Tensor,
    generator: torch.Generator | None,
    mask_probability: float = 0.5,
    random_probability: float = 0.25,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoder-only training corruption (Section 5.1): every span token becomes a target.

    Each token inside the corruption spans independently becomes the mask token with `mask_probability`, a token
    drawn uniformly from `vocabulary_ids_for_random` with `random_probability`, and stays as it is otherwise. Tokens
    outside the spans never change.

    Args:
        prompt_ids: The prompt's token ids.
        corruption_spans: ``[start, end)`` positions of the word slots.
        mask_token_id: The tokenizer's mask token id.
        vocabulary_ids_for_random: The ids a random replacement is drawn from (`random_replacement_ids`).
        generator: The random source (a seeded `torch.Generator` gives reproducible corruption).
        mask_probability: Probability of the mask token (paper: 0.5).
        random_probability: Probability of a random token (paper: 0.25).

    Returns:
        ``(input_ids, labels)``, 1-D long tensors; labels are the original ids inside the spans and -100 elsewhere.

    Example:
        >>> generator = torch.Generator().manual_seed(0)
        >>> ids, labels = corrupt_for_encoder([0, 5, 6, 2], [(1, 3)], 9, [5, 6, 7], generator)
        >>> labels.tolist()
        [-100, 5, 6, -100]
    """
    check_corruption_probabilities(mask_probability, random_probability)
    if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, numbers.Integral):
        raise ValueError(
            f"mask_token_id must be an int, got {mask_token_id!r}; the encoder-only reader needs a tokenizer with a "
            "mask token."
        )
    original = _as_id_tensor(prompt_ids, "prompt_ids")
    replacements = _as_id_tensor(vocabulary_ids_for_random, "vocabulary_ids_for_random")
    if replacements.numel() == 0:
        raise ValueError("vocabulary_ids_for_random is empty; give the non-special vocabulary ids.")
    in_span = torch.zeros_like(original, dtype=torch.bool)
    for span in corruption_spans:
        start, end = int(span[0]), int(span[1])
        if not 0 <= start < end <= original.numel():
            raise ValueError(f"Corruption span {tuple(span)} is outside the prompt's {original.numel()} tokens.")
        in_span[start:end] = True
    positions = in_span.nonzero().flatten()
    draws = torch.rand(positions.numel(), generator=generator)
    random_choices = replacements[torch.randint(replacements.numel(), (positions.numel(),), generator=generator)]
    corrupted = original.clone()
    span_ids = original[positions]
    span_ids = torch.where(draws < mask_probability, torch.full_like(span_ids, int(mask_token_id)), span_ids)
    use_random = (draws >= mask_probability) & (draws < mask_probability + random_probability)
    corrupted[positions] = torch.where(use_random, random_choices, span_ids)
    labels = torch.full_like(original, IGNORE_INDEX)
    labels[positions] = original[positions]
    return corrupted, labels


def check_corruption_probabilities(mask_probability: float, random_probability: float) -> None:
    """Raise ValueError unless both probabilities are in [0, 1] and sum to at most 1."""
    if not (0.0 <= mask_probability <= 1.0 and 0.0 <= random_probability <= 1.0) or (
        mask_probability + random_probability > 1.0
    ):
        raise ValueError(
            f"mask_probability ({mask_probability}) and random_probability ({random_probability}) must be in [0, 1] "
            "and sum to at most 1 (the remaining span tokens stay unchanged); the paper uses 0.5 and 0.25."
        )


def masked_one_at_a_time(prompt: DefinitionPrompt, mask_token_id: int) -> list[tuple[list[int], int]]:
    """Encoder-only inference inputs (Section 5.1): one copy of the prompt per span token, only that token masked.

    Returns:
        ``(input_ids, position)`` for every span token in prompt order; ``input_ids[position] == mask_token_id``.

    Example:
        >>> copies = masked_one_at_a_time(DefinitionPrompt([0, 5, 6, 2], [(1, 3)], "x"), 9)
        >>> copies
        [([0, 9, 6, 2], 1), ([0, 5, 9, 2], 2)]
    """
    if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, numbers.Integral):
        raise ValueError(
            f"mask_token_id must be an int, got {mask_token_id!r}; the encoder-only reader needs a mask token."
        )
    copies = []
    for position in prompt.span_positions():
        input_ids = list(prompt.input_ids)
        input_ids[position] = int(mask_token_id)
        copies.append((input_ids, position))
    return copies


def masked_all_slots(prompt: DefinitionPrompt, mask_token_id: int) -> list[int]:
    """Encoder-only input of ``word_slots="distinct"`` readers, in training and reading alike: every word-slot token
    masked at once, so no slot shows the answer.

    Example:
        >>> masked_all_slots(DefinitionPrompt([0, 5, 6, 7, 2], [(1, 2), (3, 4)], "x"), 9)
        [0, 9, 6, 9, 2]
    """
    if isinstance(mask_token_id, bool) or not isinstance(mask_token_id, numbers.Integral):
        raise ValueError(
            f"mask_token_id must be an int, got {mask_token_id!r}; the encoder-only reader needs a mask token."
        )
    input_ids = list(prompt.input_ids)
    for position in prompt.span_positions():
        input_ids[position] = int(mask_token_id)
    return input_ids


def encoder_decoder_example(
    prompt: DefinitionPrompt, tokenizer: Any, decoder_start_token_id: int | None = None
) -> dict[str, list[int]]:
    """The encoder-decoder reader's source and target (Section 5.1, Figure 17 b and c).

    source = the prompt with each corruption span replaced by ONE sentinel (`sentinel_token_ids`);
    target = ``sentinel_1 span_1 sentinel_2 span_2 ... eos``; ``decoder_input_ids = [decoder_start] + target[:-1]``;
    labels = target with the sentinel and eos positions set to -100 (only the word-slot tokens are targets).

    Args:
        prompt: A prompt from `build_definition_prompt`.
        tokenizer: The tokenizer it was built with (sentinels, eos).
        decoder_start_token_id: The model config's ``decoder_start_token_id``; default
            `default_decoder_start_token_id` (eos for BART, pad for T5).

    Returns:
        ``{"input_ids", "decoder_input_ids", "labels"}`` as lists of ints; the last two have the same length.

    Raises:
        ValueError: If the tokenizer has no sentinel / mask token or no eos token.

    Example:
        >>> example = encoder_decoder_example(prompt, bart_tokenizer)  # doctest: +SKIP
        >>> bart_tokenizer.decode(example["decoder_input_ids"][1:])  # doctest: +SKIP
        '<mask> discomfort<mask>discomfort<mask> Discomfort<mask> DISCOMFORT'
    """
    if not isinstance(prompt, DefinitionPrompt):
        raise TypeError(f"Expected a DefinitionPrompt, got {type(prompt).__name__}.")
    sentinels = sentinel_token_ids(tokenizer, len(prompt.corruption_spans))
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{type(tokenizer).__name__} has no eos token to end the encoder-decoder target with.")
    if decoder_start_token_id is None:
        decoder_start_token_id = default_decoder_start_token_id(tokenizer)
    source: list[int] = []
    target: list[int] = []
    labels: list[int] = []
    cursor = 0
    for sentinel, (start, end) in zip(sentinels, prompt.corruption_spans):
        source.extend(prompt.input_ids[cursor:start])
        source.append(sentinel)
        cursor = end
        span = prompt.input_ids[start:end]
        target.append(sentinel)
        target.extend(span)
        labels.append(IGNORE_INDEX)
        labels.extend(span)
    source.extend(prompt.input_ids[cursor:])
    target.append(int(tokenizer.eos_token_id))
    labels.append(IGNORE_INDEX)
    return {"input_ids": source, "decoder_input_ids": [int(decoder_start_token_id), *target[:-1]], "labels": labels}
