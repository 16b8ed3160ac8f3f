"""hf-entity-models: entity-aware research models as HuggingFace transformers models.

Importing the package registers every config and model with the transformers Auto classes.
"""

import importlib
import os
import sys

__version__ = "0.1.0"

# Where each public name lives: read on first access when the eager imports below were skipped.
_PUBLIC_MODULES = {
    "AutoModelForCoreference": ".auto",
    "CheckpointError": ".models._shared.checkpoints",
    **dict.fromkeys(("DefinitionEmbConfig", "DefinitionEmbModel", "DefinitionEmbOutput"), ".models.definition_emb"),
    **dict.fromkeys(("ForceReaderConfig", "ForceReaderForQuestionAnswering", "ForceReaderModel"), ".models.forcereader"),
    **dict.fromkeys(("GPT2EConfig", "GPT2EForCausalLM", "GPT2EModel"), ".models.gpt2e"),
    **dict.fromkeys(("PetraConfig", "PetraForCoreference", "PetraModel"), ".models.petra"),
    **dict.fromkeys(
        ("RefReaderConfig", "RefReaderForCausalLM", "RefReaderForCoreference", "RefReaderModel"), ".models.refreader"
    ),
}


def _started_as_the_console_script() -> bool:
    """`hf-entity` imports this package only to reach `hf_entity_models.cli`, whose --help must not wait seconds for
    torch and transformers; its commands register the models themselves before they run."""
    return bool(sys.argv) and os.path.basename(sys.argv[0]) in ("hf-entity", "hf-entity.exe", "hf-entity-script.py")


def __getattr__(name: str):
    if name not in _PUBLIC_MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC_MODULES[name], __name__), name)
    globals()[name] = value
    return value


if not _started_as_the_console_script():
    from .auto import AutoModelForCoreference, register_auto_classes, register_pipelines
    from .models._shared.checkpoints import CheckpointError
    from .models.definition_emb import DefinitionEmbConfig, DefinitionEmbModel, DefinitionEmbOutput
    from .models.forcereader import ForceReaderConfig, ForceReaderForQuestionAnswering, ForceReaderModel
    from .models.gpt2e import GPT2EConfig, GPT2EForCausalLM, GPT2EModel
    from .models.petra import PetraConfig, PetraForCoreference, PetraModel
    from .models.refreader import RefReaderConfig, RefReaderForCausalLM, RefReaderForCoreference, RefReaderModel

    register_auto_classes()
    register_pipelines()

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
