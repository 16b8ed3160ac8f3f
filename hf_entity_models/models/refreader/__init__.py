"""The Referential Reader: a recurrent entity network for anaphora resolution (Liu, Zettlemoyer and Eisenstein, 2019)."""

from .configuration_refreader import RefReaderConfig
from .modeling_refreader import (
    RefReaderCausalLMOutput,
    RefReaderCoreferenceOutput,
    RefReaderForCausalLM,
    RefReaderForCoreference,
    RefReaderLinkLogProbability,
    RefReaderModel,
    RefReaderModelOutput,
    RefReaderPreTrainedModel,
    all_pairs_coreference_loss,
    next_token_loss,
)

__all__ = [
    "RefReaderCausalLMOutput",
    "RefReaderConfig",
    "RefReaderCoreferenceOutput",
    "RefReaderForCausalLM",
    "RefReaderForCoreference",
    "RefReaderLinkLogProbability",
    "RefReaderModel",
    "RefReaderModelOutput",
    "RefReaderPreTrainedModel",
    "all_pairs_coreference_loss",
    "next_token_loss",
]
