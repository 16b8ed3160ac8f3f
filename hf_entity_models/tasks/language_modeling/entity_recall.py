"""A synthetic recall task that shows whether an entity-aware LM carries an entity across a window boundary.

Every document has two windows. Window 0 names two entities, each by one name token drawn from `names`, amid filler
tokens; the name tokens carry their entity id. Window 1 is filler with "he NAME" once for each entity (in a random
order), where "he" and NAME carry the entity's id; neither name occurs in window 1 before. A model that reads window
1 alone can do no better than guessing among the names: ln(names) nats on the NAME tokens. A model whose entity state
remembers the entity reads the name off "he"'s entity id.

Token ids: 0 is "he", 1..`names` the names, then `filler_tokens` filler tokens (`recall_vocab_size`).
"""

from __future__ import annotations

import torch

__all__ = ["HE_TOKEN", "recall_documents", "recall_name_nats", "recall_vocab_size", "recall_window_logits"]

HE_TOKEN = 0


def recall_vocab_size(names: int, filler_tokens: int = 48) -> int:
    return 1 + names + filler_tokens


def recall_documents(
    count: int, names: int, window_length: int, generator: torch.Generator, filler_tokens: int = 48
) -> dict[str, torch.Tensor]:
    """`count` two-window documents.

    Returns:
        `input_ids` and `entity_ids` `(count, 2, window_length)`, `entity_names` `(count, 2)` (the name token of
        entities 1 and 2) and `name_positions` `(count, 2)` (where window 1's two NAME tokens are).

    Example:
        >>> documents = recall_documents(3, names=16, window_length=24, generator=torch.Generator().manual_seed(0))
        >>> documents["input_ids"].shape, documents["name_positions"].shape
        (torch.Size([3, 2, 24]), torch.Size([3, 2]))
    """
    if names < 2:
        raise ValueError(f"names must be at least 2 (two entities with different names per document), got {names}.")
    if window_length < 6:
        raise ValueError(f"window_length must be at least 6 (two 'he NAME' pairs after position 1), got {window_length}.")
    input_ids = torch.randint(names + 1, names + 1 + filler_tokens, (count, 2, window_length), generator=generator)
    entity_ids = torch.zeros(count, 2, window_length, dtype=torch.long)
    first = torch.randint(1, names + 1, (count,), generator=generator)
    second = (first - 1 + torch.randint(1, names, (count,), generator=generator)) % names + 1  # never `first`
    entity_names = torch.stack([first, second], dim=1)
    rows = torch.arange(count)
    half = window_length // 2
    # Window 0: each name once, entity 1 in the first half, entity 2 in the second.
    for entity, (low, high) in enumerate(((1, half), (half, window_length))):
        position = torch.randint(low, high, (count,), generator=generator)
        input_ids[rows, 0, position] = entity_names[:, entity]
        entity_ids[rows, 0, position] = entity + 1
    # Window 1: "he NAME" for each entity in a random order, one pair in each half; never at position 0, so that
    # NAME is always predicted from "he".
    order = torch.randint(0, 2, (count,), generator=generator)
    name_positions = []
    for slot, (low, high) in enumerate(((2, half), (half + 1, window_length))):
        entity = (order + slot) % 2
        position = torch.randint(low, high, (count,), generator=generator)
        input_ids[rows, 1, position - 1] = HE_TOKEN
        input_ids[rows, 1, position] = entity_names[rows, entity]
        entity_ids[rows, 1, position - 1] = entity + 1
        entity_ids[rows, 1, position] = entity + 1
        name_positions.append(position)
    return {
        "input_ids": input_ids,
        "entity_ids": entity_ids,
        "entity_names": entity_names,
        "name_positions": torch.stack(name_positions, dim=1),
    }


def recall_window_logits(
    model: torch.nn.Module, documents: dict, window: int, first_document_id: int = 0, ids_on: bool = True
) -> torch.Tensor:
    """The logits of one window of a batch of documents from a `GPT2EForCausalLM`, reading and writing its document
    store as the Trainer does (`document_ids`, `window_index`); `ids_on=False` zeroes the entity ids."""
    input_ids = documents["input_ids"][:, window]
    entity_ids = documents["entity_ids"][:, window] if ids_on else torch.zeros_like(input_ids)
    count = len(input_ids)
    return model(
        input_ids,
        entity_ids=entity_ids,
        document_ids=torch.arange(first_document_id, first_document_id + count),
        window_index=torch.full((count,), window),
    ).logits


def recall_name_nats(window_1_logits: torch.Tensor, documents: dict) -> float:
    """Mean cross-entropy (nats) of window 1's NAME tokens, each predicted at the position of its "he"."""
    positions = documents["name_positions"]
    rows = torch.arange(len(positions)).unsqueeze(1)
    scores = window_1_logits[rows, positions - 1]
    targets = documents["input_ids"][:, 1].gather(1, positions)
    return torch.nn.functional.cross_entropy(scores.flatten(0, 1).float(), targets.flatten()).item()
