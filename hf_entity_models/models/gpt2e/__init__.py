"""GPT2E: GPT-2 with Entity-Transformer blocks that attend to coreference entities (Stylianou and Vlahavas, 2021)."""

from .configuration_gpt2e import ENTITY_ATTENTION_VALUES, ENTITY_STATES, PRESETS, GPT2EConfig
from .modeling_gpt2e import (
    NO_ENTITY,
    DocumentEntityStore,
    EntityTransformerBlock,
    GPT2ECausalLMOutput,
    GPT2EEntityMemory,
    GPT2EForCausalLM,
    GPT2EModel,
    GPT2EModelOutput,
    GPT2EPreTrainedModel,
    entity_memory_states,
    initial_entity_states,
    update_entity_states,
)

__all__ = [
    "ENTITY_ATTENTION_VALUES",
    "ENTITY_STATES",
    "PRESETS",
    "NO_ENTITY",
    "DocumentEntityStore",
    "EntityTransformerBlock",
    "GPT2ECausalLMOutput",
    "GPT2EConfig",
    "GPT2EEntityMemory",
    "GPT2EForCausalLM",
    "GPT2EModel",
    "GPT2EModelOutput",
    "GPT2EPreTrainedModel",
    "entity_memory_states",
    "initial_entity_states",
    "update_entity_states",
]
