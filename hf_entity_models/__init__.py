"""hf-entity-models: entity-aware research models as HuggingFace transformers models.

Importing the package registers every config and model with the transformers Auto classes.
"""

from .auto import AutoModelForCoreference, register_auto_classes, register_pipelines
from .models._shared.entity_hub import CheckpointError
from .models.definition_emb import DefinitionEmbConfig, DefinitionEmbModel, DefinitionEmbOutput
from .models.forcereader import ForceReaderConfig, ForceReaderForQuestionAnswering, ForceReaderModel
from .models.gpt2e import GPT2EConfig, GPT2EForCausalLM, GPT2EModel
from .models.petra import PetraConfig, PetraForCoreference, PetraModel
from .models.refreader import RefReaderConfig, RefReaderForCausalLM, RefReaderForCoreference, RefReaderModel

register_auto_classes()
register_pipelines()

__version__ = "0.1.0"

__all__ = [
    "AutoModelForCoreference",
    "CheckpointError",
    "DefinitionEmbConfig",
    "DefinitionEmbModel",
    "DefinitionEmbOutput",
    "ForceReaderConfig",
    "ForceReaderForQuestionAnswering",
    "ForceReaderModel",
    "GPT2EConfig",
    "GPT2EForCausalLM",
    "GPT2EModel",
    "PetraConfig",
    "PetraForCoreference",
    "PetraModel",
    "RefReaderConfig",
    "RefReaderForCausalLM",
    "RefReaderForCoreference",
    "RefReaderModel",
    "__version__",
]
