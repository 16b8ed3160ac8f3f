"""PeTra: a sparsely supervised memory model for people tracking (Toshniwal et al., 2020)."""

from .configuration_petra import PetraConfig
from .modeling_petra import (
    IGNORE_INDEX,
    LINK_NEGATIVE,
    LINK_POSITIVE,
    LINK_SELF,
    LinkLogProbability,
    PetraCoreferenceOutput,
    PetraForCoreference,
    PetraModel,
    PetraModelOutput,
    PetraPreTrainedModel,
    pair_coref_loss,
    span_link_probabilities,
)

__all__ = [
    "IGNORE_INDEX",
    "LINK_NEGATIVE",
    "LINK_POSITIVE",
    "LINK_SELF",
    "LinkLogProbability",
    "PetraConfig",
    "PetraCoreferenceOutput",
    "PetraForCoreference",
    "PetraModel",
    "PetraModelOutput",
    "PetraPreTrainedModel",
    "pair_coref_loss",
    "span_link_probabilities",
]
