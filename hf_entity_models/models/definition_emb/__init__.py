"""DefinitionEMB: token embeddings for a pre-trained language model constructed from dictionary definitions (Zhang,
Li and Okumura, "Reconsidering Token Embeddings with the Definitions for Pre-trained Language Models")."""

from .configuration_definition_emb import (
    DISTINCT_SLOTS,
    MASK_SLOT,
    PAPER_SETTINGS,
    PAPER_SLOTS,
    POOLED_DEFINITION,
    ENCODER_DECODER,
    ENCODER_ONLY,
    READER_TYPES,
    DefinitionEmbConfig,
    default_readout,
    plm_embedding_width,
)
from .modeling_definition_emb import (
    DROPPED_PLM_WEIGHT_PREFIXES,
    IGNORE_INDEX,
    DefinitionEmbModel,
    DefinitionEmbOutput,
    DefinitionEmbPreTrainedModel,
    copy_reader_weights,
    definition_embedding_loss,
    reader_initializer_range,
)

__all__ = [
    "DISTINCT_SLOTS",
    "MASK_SLOT",
    "PAPER_SETTINGS",
    "PAPER_SLOTS",
    "POOLED_DEFINITION",
    "default_readout",
    "DROPPED_PLM_WEIGHT_PREFIXES",
    "ENCODER_DECODER",
    "ENCODER_ONLY",
    "IGNORE_INDEX",
    "READER_TYPES",
    "DefinitionEmbConfig",
    "DefinitionEmbModel",
    "DefinitionEmbOutput",
    "DefinitionEmbPreTrainedModel",
    "copy_reader_weights",
    "definition_embedding_loss",
    "plm_embedding_width",
    "reader_initializer_range",
]
