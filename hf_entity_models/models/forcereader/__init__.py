"""ForceReader: a BERT-based interactive machine reading comprehension model with attention separation (Chen and
Wu, 2020)."""

from .configuration_forcereader import PRESETS, READING_MODES, ForceReaderConfig
from .modeling_forcereader import (
    MASKED_LOGIT,
    ForceReaderForQuestionAnswering,
    ForceReaderModel,
    ForceReaderModelOutput,
    ForceReaderPreTrainedModel,
    ForceReaderQuestionAnsweringOutput,
    split_packed_input,
)

__all__ = [
    "MASKED_LOGIT",
    "PRESETS",
    "READING_MODES",
    "ForceReaderConfig",
    "ForceReaderForQuestionAnswering",
    "ForceReaderModel",
    "ForceReaderModelOutput",
    "ForceReaderPreTrainedModel",
    "ForceReaderQuestionAnsweringOutput",
    "split_packed_input",
]
