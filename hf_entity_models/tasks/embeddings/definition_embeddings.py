"""Definition embeddings for a model's vocabulary (DefinitionEMB, Section 5.3): one embedding per token, read from
dictionary definitions by a trained definition reader.

`compute_definition_embeddings` reads definitions with a trained `DefinitionEmbModel` and returns one embedding per
token found in a definition prompt's word slots (the first definition that names a token gives its embedding, as
the paper's footnote 8 says), as `TokenDefinitionEmbeddings` (saved to and loaded from safetensors). Writing them
into a model's token embedding matrix is `replacement`'s job.

Example:
    >>> found = compute_definition_embeddings(reader, tokenizer, definitions, token_ids=[2054])  # doctest: +SKIP
    >>> found.save("definition_embeddings.safetensors")  # doctest: +SKIP
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from .collator import pad_sequences
from .corruption import encoder_decoder_example, masked_all_slots, masked_one_at_a_time
from .prompts import DefinitionPrompt

__all__ = [
    "TokenDefinitionEmbeddings",
    "compute_definition_embeddings",
    "definitions_naming",
    "reads_own_definitions_only",
    "word_slots_of",
]


@dataclass
class TokenDefinitionEmbeddings:
    """Embeddings built from definitions, one per token.

    Attributes:
        token_ids: `(n,)` vocabulary ids, in the order they were found.
        embeddings: `(n, embedding_size)` definition embeddings e_d(v).
        words: the word whose definition gave each token's embedding.
    """

    token_ids: torch.Tensor
    embeddings: torch.Tensor
    words: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.token_ids.dim() != 1 or self.embeddings.dim() != 2 or len(self.token_ids) != len(self.embeddings):
            raise ValueError(
                f"token_ids must be (n,) and embeddings (n, width) with the same n; got {tuple(self.token_ids.shape)} "
                f"and {tuple(self.embeddings.shape)}."
            )
        if len(set(self.token_ids.tolist())) != len(self.token_ids):
            raise ValueError("token_ids holds a token twice: each token has one definition embedding.")

    def __len__(self) -> int:
        return len(self.token_ids)

    def as_dict(self) -> dict[int, torch.Tensor]:
        """`{token_id: embedding}`."""
        return dict(zip(self.token_ids.tolist(), self.embeddings))

    def save(self, path: str | Path) -> None:
        """Write the embeddings to a safetensors file (the words go to its metadata)."""
        save_file(
            {"token_ids": self.token_ids.contiguous(), "embeddings": self.embeddings.contiguous()},
            str(path),
            metadata={"words": json.dumps(self.words)},
        )

    @classmethod
    def load(cls, path: str | Path) -> "TokenDefinitionEmbeddings":
        """Read what `save` wrote."""
        from safetensors import safe_open

        tensors = load_file(str(path))
        with safe_open(str(path), framework="pt") as handle:
            words = json.loads((handle.metadata() or {}).get("words", "[]"))
        return cls(tensors["token_ids"], tensors["embeddings"], words)


def compute_definition_embeddings(
    definition_model: PreTrainedModel,
    tokenizer: Any,
    definitions: Any,
    token_ids: Iterable[int] | None = None,
    batch_size: int = 64,
    show_progress: bool = True,
    mask_every_slot: bool | None = None,
) -> TokenDefinitionEmbeddings:
    """Read definitions with a trained definition reader and return the embedding of every token they name.

    A token gets its embedding from the first definition prompt that holds it in a word slot (footnote 8: once a
    token has an embedding it is not replaced again); unless the reader has the paper's settings, only a slot that
    is the token alone counts (the definition is the token's own, not that of a longer word it is a piece of:
    `reads_own_definitions_only`). The encoder-only reader reads each prompt with every slot token masked
    (``word_slots="distinct"``, as it was trained) or masks one slot token at a time and reads the other slots
    uncorrupted (``"paper"``, Figure 17 e); the encoder-decoder reader reads each prompt once, every slot replaced
    by a sentinel, and takes the decoder state before each slot token (Figure 17 b, c).

    Args:
        definition_model: A `DefinitionEmbModel`.
        tokenizer: The tokenizer of the model whose embeddings are rebuilt.
        definitions: A `datasets.Dataset` of definitions (word, part_of_speech, definition) or of prompts already
            built by `definition_prompt_dataset` (input_ids, corruption_spans, word).
        token_ids: Only these tokens (default: every non-special token of the vocabulary). Reading stops once all
            of them have an embedding.
        batch_size: Sequences per forward pass.
        show_progress: Show a progress bar.
        mask_every_slot: Encoder-only readers: read every prompt with all its slot tokens masked (True), or one at a
            time with the other slots visible (False); default as the reader was trained (``config.word_slots``).
            The quality gate passes True: a reader must rebuild the word from its definition, not copy it.

    Returns:
        The embeddings of the requested tokens that some definition names; tokens no definition names are absent.

    Example:

    ```python
    >>> found = compute_definition_embeddings(reader, tokenizer, definitions, token_ids=[2054, 2003])  # doctest: +SKIP
    >>> found.as_dict()[2054].shape  # doctest: +SKIP
    torch.Size([384])

    ```
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    wanted = _wanted_tokens(tokenizer, definition_model, token_ids)
    config = definition_model.config
    own_only = reads_own_definitions_only(config)
    hide_every_slot = word_slots_of(config) == "distinct" if mask_every_slot is None else bool(mask_every_slot)
    if token_ids is not None:
        definitions, _ = definitions_naming(definitions, tokenizer, wanted, config)
        if len(definitions) == 0:  # no definition names a wanted token
            return TokenDefinitionEmbeddings(
                torch.empty(0, dtype=torch.long), torch.empty(0, definition_model.config.embedding_size), []
            )
    prompts = _prompt_dataset(
        definitions, tokenizer, _reader_max_length(definition_model, tokenizer), word_slots_of(config)
    )
    reader_type = definition_model.config.reader_type
    if reader_type == "encoder-only" and tokenizer.mask_token_id is None:
        raise ValueError(
            "The encoder-only definition reader masks one token at a time, but this tokenizer has no mask token: "
            "use the tokenizer of the reader's model (or set tokenizer.mask_token)."
        )
    decoder_start = getattr(definition_model.config.reader_config, "decoder_start_token_id", None)
    found_words: dict[int, str] = {}
    jobs: list[tuple[list[int], list[int], list[int]]] = []  # encoder inputs, target positions, their tokens
    encoder_decoder_jobs: list[dict[str, list[int]]] = []
    for row in tqdm(prompts, desc="definition prompts", disable=not show_progress, leave=False):
        if len(found_words) == len(wanted):
            break
        prompt = DefinitionPrompt.from_features(row)
        new_positions = _newly_named(prompt, wanted, found_words, own_only)
        if not new_positions:
            continue
        if reader_type == "encoder-only" and hide_every_slot:
            positions, tokens = zip(*new_positions)
            jobs.append((masked_all_slots(prompt, tokenizer.mask_token_id), list(positions), list(tokens)))
        elif reader_type == "encoder-only":
            masked = dict((position, ids) for ids, position in masked_one_at_a_time(prompt, tokenizer.mask_token_id))
            jobs += [(masked[position], [position], [token]) for position, token in new_positions]
        else:
            example = encoder_decoder_example(prompt, tokenizer, decoder_start)
            target_position = _target_positions(prompt)
            positions = [target_position[position] for position, _ in new_positions]
            tokens = [token for _, token in new_positions]
            encoder_decoder_jobs.append({**example, "positions": positions, "tokens": tokens})
    embeddings = (
        _read_encoder_jobs(definition_model, tokenizer, jobs, batch_size, show_progress)
        if reader_type == "encoder-only"
        else _read_encoder_decoder_jobs(definition_model, tokenizer, encoder_decoder_jobs, batch_size, show_progress)
    )
    ordered = list(found_words)
    return TokenDefinitionEmbeddings(
        torch.tensor(ordered, dtype=torch.long),
        torch.stack([embeddings[token] for token in ordered]) if ordered else torch.empty(0, definition_model.config.embedding_size),
        [found_words[token] for token in ordered],
    )


def _target_positions(prompt: DefinitionPrompt) -> dict[int, int]:
    """Prompt position of each slot token -> its position in the encoder-decoder target (`encoder_decoder_example`:
    sentinel_1 slot_1 sentinel_2 slot_2 ...), so that a token is read from the slot that named it."""
    mapping, target = {}, 0
    for start, end in prompt.corruption_spans:
        target += 1  # the span's sentinel
        for position in range(start, end):
            mapping[position] = target
            target += 1
    return mapping


def reads_own_definitions_only(config: Any) -> bool:
    """Whether a reader's embedding of a token comes only from a definition of that token alone (a slot that is the
    token by itself): always except with the paper's settings (word slots "paper" and the mask-slot readout), which
    also read the pieces of longer words (``##for`` from a definition of "therefor")."""
    return word_slots_of(config) != "paper" or getattr(config, "readout", "mask-slot") == "pooled-definition"


def word_slots_of(config: Any) -> str:
    """A reader config's `word_slots`; "paper" for configs that predate it (or none)."""
    return getattr(config, "word_slots", None) or "paper"


def _reader_max_length(definition_model: PreTrainedModel, tokenizer: Any) -> int | None:
    """The longest prompt the reader can read: its position limit (RoBERTa-style position ids start past the
    padding id), or the tokenizer's limit when that is smaller."""
    reader_config = definition_model.config.reader_config
    positions = getattr(reader_config, "max_position_embeddings", None)
    if positions is None:
        return None
    if "roberta" in reader_config.model_type:
        positions -= (reader_config.pad_token_id or 0) + 1
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    return min(positions, tokenizer_limit) if isinstance(tokenizer_limit, int) else positions


def _prompt_dataset(definitions: Any, tokenizer: Any, max_length: int | None, word_slots: str):
    from .definitions import definition_prompt_dataset

    columns = set(getattr(definitions, "column_names", None) or [])
    if {"input_ids", "corruption_spans", "word"} <= columns:
        return definitions
    if {"word", "part_of_speech", "definition"} <= columns:
        return definition_prompt_dataset(definitions, tokenizer, max_length=max_length, word_slots=word_slots)
    raise TypeError(
        "definitions must be a datasets.Dataset with columns word, part_of_speech, definition (e.g. from "
        "read_wordnet_glosses or load_definitions) or with the prompt columns input_ids, corruption_spans, word; "
        f"got {type(definitions).__name__} with columns {sorted(columns)}."
    )


def definitions_naming(
    definitions: Any, tokenizer: Any, wanted: set[int], config: Any, batch_size: int = 2000
) -> tuple[Any, set[int] | None]:
    """The raw definitions that are the FIRST to hold some wanted token in a word slot, in their order: the only
    ones whose embeddings are read (a token takes the first definition that names it), so the only ones built into
    prompts (tokenizing all of WordNet's definitions takes minutes; their words alone, seconds). Also the wanted
    tokens they name (None for prompts already built)."""
    from .prompts import slot_token_ids

    columns = set(getattr(definitions, "column_names", None) or [])
    if "definition" not in columns or "word" not in columns:
        return definitions, None  # prompts already built (or not a dataset: _prompt_dataset says what is wrong)
    words, unnamed, kept = definitions["word"], set(wanted), []
    for start in range(0, len(words), batch_size):
        slots_of_batch = slot_token_ids(
            tokenizer, words[start : start + batch_size], word_slots_of(config), reads_own_definitions_only(config)
        )
        for index, slots in enumerate(slots_of_batch, start):
            if slots & unnamed:
                kept.append(index)
                unnamed -= slots
        if not unnamed:
            break
    return definitions.select(kept), set(wanted) - unnamed


def _wanted_tokens(tokenizer: Any, definition_model: PreTrainedModel, token_ids: Iterable[int] | None) -> set[int]:
    vocab_size = definition_model.config.vocab_size
    if token_ids is None:
        return set(range(vocab_size)) - set(tokenizer.all_special_ids)
    wanted = {int(token) for token in token_ids}
    outside = sorted(token for token in wanted if not 0 <= token < vocab_size)
    if outside:
        raise ValueError(f"token_ids {outside[:5]} lie outside the reader's vocabulary of {vocab_size} tokens.")
    return wanted


def _newly_named(
    prompt: DefinitionPrompt, wanted: set[int], found_words: dict[int, str], own_only: bool
) -> list[tuple[int, int]]:
    """(position, token) of the slot tokens of this prompt that still need an embedding (with `own_only`, of slots
    that are one token); marks them found."""
    new = []
    for start, end in prompt.corruption_spans:
        if own_only and end - start != 1:
            continue
        for position in range(start, end):
            token = prompt.input_ids[position]
            if token in wanted and token not in found_words:
                found_words[token] = prompt.word
                new.append((position, token))
    return new


def _pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0


@torch.inference_mode()
def _read_encoder_jobs(model, tokenizer, jobs, batch_size: int, show_progress: bool) -> dict[int, torch.Tensor]:
    model.eval()
    device = model.device
    # Sorting by length keeps padding small; the result is keyed by token, so the order does not matter.
    jobs = sorted(jobs, key=lambda job: len(job[0]))
    embeddings: dict[int, torch.Tensor] = {}
    for start in tqdm(range(0, len(jobs), batch_size), desc="definition embeddings", disable=not show_progress):
        batch = jobs[start : start + batch_size]
        input_ids, attention_mask = pad_sequences([job[0] for job in batch], _pad_id(tokenizer))
        output = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device))
        for row, (_, positions, tokens) in enumerate(batch):
            for position, token in zip(positions, tokens):
                embeddings[token] = output.definition_embeddings[row, position].float().cpu()
    return embeddings


@torch.inference_mode()
def _read_encoder_decoder_jobs(model, tokenizer, jobs, batch_size: int, show_progress: bool) -> dict[int, torch.Tensor]:
    model.eval()
    device = model.device
    embeddings: dict[int, torch.Tensor] = {}
    pad_id = _pad_id(tokenizer)
    for start in tqdm(range(0, len(jobs), batch_size), desc="definition embeddings", disable=not show_progress):
        batch = jobs[start : start + batch_size]
        input_ids, attention_mask = pad_sequences([job["input_ids"] for job in batch], pad_id)
        decoder_input_ids, decoder_attention_mask = pad_sequences([job["decoder_input_ids"] for job in batch], pad_id)
        output = model(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            decoder_input_ids=decoder_input_ids.to(device),
            decoder_attention_mask=decoder_attention_mask.to(device),
        )
        for row, job in enumerate(batch):
            for position, token in zip(job["positions"], job["tokens"]):
                embeddings[token] = output.definition_embeddings[row, position].float().cpu()
    return embeddings
