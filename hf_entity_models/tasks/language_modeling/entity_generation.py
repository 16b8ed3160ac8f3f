"""Generation that uses a prompt's entities, with the semantics of training.

In training, a window reads the entity states left by the earlier windows of its document (fresh states for the
first window), and the entity memory (the default design) updates an entity's state at every mention as it reads.
`generate_with_entities` does the same with a prompt: the prompt is a window, `entity_states` are those of the text
before it (none: the start of a document), and generation continues that window. With the entity memory, the
prompt's mentions write their entities' states and later mentions (in the prompt or generated with an
`entity_id_policy`) read them. With the paper's design, a window's entities keep the states of the earlier windows
until the window ends, so a prompt's entity ids matter only through states passed in (within a first window every
entity is the same vector of ones); the prompt is not read twice to give it states computed from itself, which
training never does.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["generate_with_entities"]


@torch.no_grad()
def generate_with_entities(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    entity_ids: torch.Tensor,
    entity_states: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    **generate_kwargs: Any,
) -> Any:
    """Continue a prompt with GPT2E as a window of a document, its entities read as in training.

    Args:
        model: A `GPT2EForCausalLM`.
        input_ids: `(batch, length)` prompt tokens.
        entity_ids: `(batch, length)` their entity ids (e.g. from `entity_ids_from_text`).
        entity_states: The entity states after the text before the prompt (the `entity_states` returned for the
            previous window of the document), if any; None starts a document.
        attention_mask: The prompt's attention mask (left padding for a batch of prompts).
        generate_kwargs: Passed to `model.generate` (`max_new_tokens`, `do_sample`, `entity_id_policy`, ...).

    Returns:
        What `model.generate` returns.

    Example:
        >>> prompt = entity_ids_from_text("Anna met Tom. She", coref, tokenizer)  # doctest: +SKIP
        >>> ids, entities = torch.tensor([prompt["input_ids"]]), torch.tensor([prompt["entity_ids"]])  # doctest: +SKIP
        >>> generate_with_entities(model, ids, entities, max_new_tokens=20)  # doctest: +SKIP
    """
    if entity_ids.shape != input_ids.shape:
        raise ValueError(
            f"entity_ids has shape {tuple(entity_ids.shape)} but input_ids {tuple(input_ids.shape)}: give one entity "
            "id per prompt token (0 outside mentions)."
        )
    if attention_mask is not None:
        generate_kwargs["attention_mask"] = attention_mask
    return model.generate(input_ids, entity_ids=entity_ids, entity_states=entity_states, **generate_kwargs)
