"""Registration with the transformers Auto classes, and `AutoModelForCoreference`.

`AutoModelForCoreference` is a regular transformers auto class (`from_config` / `from_pretrained`) whose mapping
lives in this package: every coreference model registers its config class here.
"""

from collections import OrderedDict

from transformers import AutoConfig, AutoModel
from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping
from transformers.pipelines import PIPELINE_REGISTRY

from .models.petra import PetraConfig, PetraForCoreference, PetraModel
from .tasks.coreference.pipeline import CoreferencePipeline


class AutoModelForCoreference(_BaseAutoModelClass):
    """Instantiates the coreference head of any registered entity-memory model (PeTra, ...).

    Example:

    ```python
    >>> from hf_entity_models import AutoModelForCoreference, PetraConfig
    >>> model = AutoModelForCoreference.from_config(PetraConfig(hidden_size=16, mlp_hidden_size=16))
    >>> type(model).__name__
    'PetraForCoreference'
    ```
    """

    _model_mapping = _LazyAutoMapping(OrderedDict(), OrderedDict())


def register_auto_classes() -> None:
    """Register every model of the package with AutoConfig, AutoModel and AutoModelForCoreference (idempotent)."""
    _register(PetraConfig, base_model=PetraModel, coreference_model=PetraForCoreference)


def register_pipelines() -> None:
    """Register `pipeline("coreference")` with transformers."""
    PIPELINE_REGISTRY.register_pipeline(
        "coreference", pipeline_class=CoreferencePipeline, pt_model=AutoModelForCoreference, type="text"
    )


def _register(config_class, base_model, coreference_model) -> None:
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, base_model, exist_ok=True)
    AutoModelForCoreference.register(config_class, coreference_model, exist_ok=True)
