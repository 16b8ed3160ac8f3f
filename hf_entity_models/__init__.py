"""hf-entity-models: entity-aware research models as HuggingFace transformers models.

Importing the package registers every config, model and pipeline with transformers: on first use, so that the import
itself loads neither torch nor transformers (see `_registration`). `AutoModel.from_pretrained` of a PeTra folder,
`pipeline("coreference", ...)` and `hf_entity_models.PetraModel` all work right after `import hf_entity_models`.
"""

import importlib

from ._registration import ensure_registered, install

__version__ = "0.1.0"

# Where each public name lives: imported on first access.
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


def __getattr__(name: str):
    # PEP 562: a public name is imported on first access (as transformers' own `_LazyModule` does), and registers the
    # package with transformers.
    if name not in _PUBLIC_MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC_MODULES[name], __name__), name)
    ensure_registered()
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC_MODULES))


# Registers with transformers on first use, and extends the model code (writer, config errors) as it is imported: the
# package reaches into its models, never the reverse (see `_registration`).
install()

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
