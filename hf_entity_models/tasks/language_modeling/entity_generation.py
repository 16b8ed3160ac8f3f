"""Generation that uses a prompt's entities.

GPT2E's entity attention reads the representations of entities from EARLIER windows: within one window every
entity still has its starting representation (a vector of ones, the same for every entity), so the entity ids of a
prompt read on its own change nothing. `generate_with_entities` therefore reads the prompt once as the previous
window — each entity then holds the final hidden state of its last mention in the prompt — and generates a
continuation of the prompt with those entity states.
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
    """Continue a prompt with GPT2E, its entities represented by their mentions in the prompt.

    Args:
        model: A `GPT2EForCausalLM`.
        input_ids: `(batch, length)` prompt tokens.
        entity_ids: `(batch, length)` their entity ids (e.g. from `entity_ids_from_text`).
        entity_states: The states before the prompt (earlier windows of the document), if any.
        attention_mask: The prompt's attention mask (left padding for a batch of prompts).
        generate_kwargs: Passed to `model.generate` (`max_new_tokens`, `do_sample`, `entity_id_policy`, ...).

    Returns:
        What `model.generate` returns.

    Example:
        >>> prompt = entity_ids_from_text("Anna met Tom. She", coref, tokenizer)  # doctest: +SKIP
        >>> ids, entities = torch.tensor([prompt["input_ids"]]), torch.tensor([prompt["entity_ids"]])  # doctest: +SKIP
        >>> generate_with_entities(model, ids, entities, max_new_tokens=20)  # doctest: +SKIP
    """
    was_training = model.training
    model.eval()
    states = model(
        input_ids, entity_ids=entity_ids, entity_states=entity_states, attention_mask=attention_mask, use_cache=False
    ).entity_states
    model.train(was_training)
    if attention_mask is not None:
        generate_kwargs["attention_mask"] = attention_mask
    return model.generate(input_ids, entity_ids=entity_ids, entity_states=states, **generate_kwargs)
