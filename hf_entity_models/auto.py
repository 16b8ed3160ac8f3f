"""Registration with the transformers Auto classes, and `AutoModelForCoreference`.

`AutoModelForCoreference` is a regular transformers auto class (`from_config` / `from_pretrained`) whose mapping
lives in this package: every coreference model registers its config class here.

Registration also makes saved checkpoints portable: `register_for_auto_class` makes `save_pretrained` write
`auto_map` and copy the model files, and `CHECKPOINT_WRITER.register_pipeline` makes it ship the coreference pipeline, so a saved
folder or Hub repo loads with `trust_remote_code=True` where this package is not installed. There, custom Auto
classes do not exist: coreference heads map to `AutoModel` (and `AutoConfig` to the config class).
"""

from collections import OrderedDict

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForQuestionAnswering
from transformers.models.auto.auto_factory import _BaseAutoModelClass, _LazyAutoMapping
from transformers.pipelines import PIPELINE_REGISTRY

from .hub import CHECKPOINT_WRITER
from .models.definition_emb import DefinitionEmbConfig, DefinitionEmbModel
from .models.forcereader import ForceReaderConfig, ForceReaderForQuestionAnswering, ForceReaderModel
from .models.gpt2e import GPT2EConfig, GPT2EForCausalLM, GPT2EModel
from .models.petra import PetraConfig, PetraForCoreference, PetraModel
from .models.refreader import RefReaderConfig, RefReaderForCausalLM, RefReaderForCoreference, RefReaderModel
from .tasks.coreference.pipeline import CoreferencePipeline
from .tasks.question_answering.pipeline import QuestionAnsweringPipeline

# Task name under which checkpoints declare their own copy of the coreference pipeline (`config.custom_pipelines`).
# It must differ from "coreference": transformers gives a task declared by the checkpoint precedence over the
# registered one and then requires trust_remote_code=True, which would break `pipeline("coreference", model=...)`
# for users of this package. Without the package, `pipeline(model=..., trust_remote_code=True)` infers it.
HUB_COREFERENCE_TASK = "entity-coreference"
# Likewise for the question-answering pipeline that ForceReader checkpoints ship.
HUB_QUESTION_ANSWERING_TASK = "entity-question-answering"


class AutoModelForCoreference(_BaseAutoModelClass):
    """Instantiates the coreference head of any registered entity-memory model (PeTra, Referential Reader).

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
    """Register every model of the package with AutoConfig, AutoModel and its task's Auto class
    (AutoModelForCoreference, AutoModelForCausalLM, AutoModelForQuestionAnswering; DefinitionEMB has only its base
    model, under AutoModel); idempotent.

    Saved checkpoints then name their code in `auto_map` (`AutoConfig` -> the config, `AutoModel` -> the saved
    model class, the coreference head included; `AutoModelForCausalLM` -> the LM head) and carry the code files.
    """
    _register(PetraConfig, base_model=PetraModel, coreference_model=PetraForCoreference)
    _register(RefReaderConfig, base_model=RefReaderModel, coreference_model=RefReaderForCoreference)
    AutoModelForCausalLM.register(RefReaderConfig, RefReaderForCausalLM, exist_ok=True)
    RefReaderForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    _register_base(ForceReaderConfig, ForceReaderModel)
    AutoModelForQuestionAnswering.register(ForceReaderConfig, ForceReaderForQuestionAnswering, exist_ok=True)
    ForceReaderForQuestionAnswering.register_for_auto_class("AutoModelForQuestionAnswering")
    _register_base(GPT2EConfig, GPT2EModel)
    AutoModelForCausalLM.register(GPT2EConfig, GPT2EForCausalLM, exist_ok=True)
    GPT2EForCausalLM.register_for_auto_class("AutoModelForCausalLM")
    _register_base(DefinitionEmbConfig, DefinitionEmbModel)


def register_pipelines() -> None:
    """Register `pipeline("coreference")` and `pipeline("question-answering")` with transformers, and ship the
    coreference pipeline with saved coreference checkpoints.

    Locally the coreference pipeline loads models with `AutoModelForCoreference`. Saved checkpoints declare a copy of
    it in `config.custom_pipelines` under `HUB_COREFERENCE_TASK`, loaded with `AutoModel`, which their `auto_map`
    resolves to the coreference head.

    transformers 5.x has no question-answering pipeline of its own: ours serves every `AutoModelForQuestionAnswering`
    checkpoint (BERT and the like as well as ours); ForceReader checkpoints ship it under
    `HUB_QUESTION_ANSWERING_TASK`.
    """
    PIPELINE_REGISTRY.register_pipeline(
        "coreference", pipeline_class=CoreferencePipeline, pt_model=AutoModelForCoreference, type="text"
    )
    PIPELINE_REGISTRY.register_pipeline(
        "question-answering",
        pipeline_class=QuestionAnsweringPipeline,
        pt_model=AutoModelForQuestionAnswering,
        type="text",
    )
    for coreference_model in (PetraForCoreference, RefReaderForCoreference):
        CHECKPOINT_WRITER.register_pipeline(
            coreference_model, HUB_COREFERENCE_TASK, CoreferencePipeline, model_auto_class="AutoModel"
        )
    CHECKPOINT_WRITER.register_pipeline(
        ForceReaderForQuestionAnswering,
        HUB_QUESTION_ANSWERING_TASK,
        QuestionAnsweringPipeline,
        model_auto_class="AutoModelForQuestionAnswering",
        pipeline_type="text",
    )


def _register(config_class, base_model, coreference_model) -> None:
    _register_base(config_class, base_model)
    AutoModelForCoreference.register(config_class, coreference_model, exist_ok=True)
    # On the Hub the coreference head maps to AutoModel: custom Auto classes do not exist without this package.
    coreference_model.register_for_auto_class("AutoModel")


def _register_base(config_class, base_model) -> None:
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, base_model, exist_ok=True)
    # Portable checkpoints: the names must be transformers Auto classes, which exist without this package.
    config_class.register_for_auto_class("AutoConfig")
    base_model.register_for_auto_class("AutoModel")
