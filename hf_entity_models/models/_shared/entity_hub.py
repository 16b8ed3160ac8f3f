"""Model cards, portable saving and Hub upload for the checkpoints of an entity model.

Model-agnostic: written once here and imported by every model folder. Saving a model copies it next to the weights
with the model's own code (see `portable_code`), and it must also run there, where hf_entity_models is not installed
(a checkpoint loaded with `trust_remote_code=True` and saved or pushed again): it imports only transformers,
huggingface_hub, the standard library and the other shared modules, relatively.

What a card says about one model (overview, configuration table, limitations, citation, usage) comes from the
`_model_card_spec` of the model class, a `ModelCardSpec` kept in the folder's own card file.
"""

import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import transformers
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import PreTrainedConfig
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.utils import logging

from .portable_code import checkpoint_code_files, make_folder_self_contained

logger = logging.get_logger(__name__)

# Modules of a model folder that a pipeline's file must not be named like: `save_pretrained` copies the pipeline's
# file next to the model files and would overwrite one of them.
_MODEL_MODULE_PREFIXES = ("modeling_", "configuration_")


class CheckpointError(OSError):
    """A checkpoint cannot be loaded because its files are damaged or disagree with each other (e.g. a truncated
    `model.safetensors`, or a `config.json` whose sizes do not match the stored weights). The message names the file."""


@dataclass(frozen=True)
class ModelCardSpec:
    """What the model card of one model says that the generic card code cannot know.

    A model class sets it as `_model_card_spec`; `EntityHubMixin.create_model_card` writes everything else (Hub
    metadata, data, results, decision threshold, how to load the checkpoint with and without the package). The
    code files listed in the card are found from the model class's module and its relative imports.

    Attributes:
        tags: Hub tags of every checkpoint of the model, after `"hf-entity-models"`, e.g. `("my-model", "coreference")`.
        pipeline_tag: Hub pipeline tag of the model's checkpoints, e.g. `"token-classification"`.
        citation: BibTeX entry of the paper.
        overview: `(config, class_name) -> str`: the paragraph under the card's title (what the model is and what
            this class returns).
        config_rows: `(config, class_name) -> [(name, value), ...]`: rows of the checkpoint table, written between
            the class row and the parameter count.
        limitations: `(config, dataset ids of the recorded results) -> [item, ...]`: limitation bullets; the
            limitations of known datasets (e.g. GAP's) follow them.
        usage_with_package: `(class_name, model_location) -> str`: a fenced Python block that loads the checkpoint
            with hf-entity-models installed.
        pipeline_examples: Python lines calling `pipe`, the pipeline saved with the checkpoint, shown after it is
            loaded with `trust_remote_code=True` (only when the class ships a pipeline).
        usage_note: Paragraph that closes the usage section (e.g. how offsets and long inputs are handled).
        training_note: What the package's training recipe does with the data, closing the data section.
        frozen_parameter_count: `model -> int`: the parameters that training leaves frozen, decided from the
            config (a loaded model's `requires_grad` flags are not reliable); None when everything is trained.

    Example:

    ```python
    >>> spec = ModelCardSpec(
    ...     tags=("my-model", "coreference"),
    ...     pipeline_tag="token-classification",
    ...     citation="@inproceedings{me2024model, title = {My Model}}",
    ...     overview=lambda config, class_name: f"A `{class_name}` checkpoint.",
    ...     config_rows=lambda config, class_name: [("Hidden size", str(config.hidden_size))],
    ...     limitations=lambda config, datasets: ["Trained on English only."],
    ...     usage_with_package=lambda class_name, location: f"Load `{location}` with `AutoModel`.",
    ... )
    >>> spec.tags
    ('my-model', 'coreference')

    ```
    """

    tags: tuple[str, ...]
    pipeline_tag: str
    citation: str
    overview: Callable[[Any, str], str]
    config_rows: Callable[[Any, str], list[tuple[str, str]]]
    limitations: Callable[[Any, list[str]], list[str]]
    usage_with_package: Callable[[str, str], str]
    pipeline_examples: tuple[str, ...] = ()
    usage_note: str = ""
    training_note: str = ""
    frozen_parameter_count: Callable[[Any], int] | None = None


class EntityHubMixin:
    """What entity-model checkpoints add to `PreTrainedModel` saving: a model card generated from the config and its
    recorded results, the code of registered pipelines, and a `push_to_hub` that uploads that card.

    Put it before `PreTrainedModel` in the bases of the model's pretrained-model class and set `_model_card_spec`.
    """

    # What the model card says about this model (see `ModelCardSpec`); set by every model class.
    _model_card_spec: ClassVar[ModelCardSpec]
    # Pipelines whose code `save_pretrained` writes next to the weights, per model class: task -> the
    # `custom_pipelines` entry of config.json, and module name -> source file (see `register_hub_pipeline`).
    _hub_pipelines: ClassVar[dict[str, dict[str, Any]]] = {}
    _hub_pipeline_files: ClassVar[dict[str, str]] = {}

    @classmethod
    def register_hub_pipeline(
        cls,
        task: str,
        pipeline_class: type,
        model_auto_class: str = "AutoModel",
        pipeline_type: str = "text",
    ) -> None:
        """Ship a pipeline's code with every checkpoint of this class, so that it runs without our package.

        `save_pretrained` then declares the pipeline in `config.custom_pipelines` and copies the file that defines
        it next to the weights; `pipeline(model=folder_or_repo, trust_remote_code=True)` finds it there. The model
        is loaded remotely through `model_auto_class`, which must be a transformers Auto class that the
        checkpoint's `auto_map` names (custom Auto classes do not exist without our package).

        Args:
            task: Task name written in `custom_pipelines`; with a single declared task, `pipeline()` infers it.
            pipeline_class: A `transformers.Pipeline` subclass whose file imports only torch, transformers and
                files next to it, and is not named like a file of the model folder.
            model_auto_class: Name of the transformers Auto class that loads the model remotely.
            pipeline_type: Input modality reported in `custom_pipelines` ("text").

        Raises:
            ValueError: `model_auto_class` is not a transformers class, the pipeline is defined in `__main__`, or
                its module is named like a model file (saving would overwrite that file).

        Example:

        ```python
        >>> from hf_entity_models.tasks.coreference.pipeline import CoreferencePipeline
        >>> MyModelForCoreference.register_hub_pipeline("entity-coreference", CoreferencePipeline)  # doctest: +SKIP

        ```
        """
        if not hasattr(transformers, model_auto_class):
            raise ValueError(
                f"model_auto_class must name a class of the transformers package (e.g. 'AutoModel'), got "
                f"{model_auto_class!r}: the remote environment resolves it with getattr(transformers, name)."
            )
        source_file = None if pipeline_class.__module__ == "__main__" else inspect.getsourcefile(pipeline_class)
        if source_file is None:
            raise ValueError(
                f"{pipeline_class.__name__} must be defined in an importable module file (not __main__) so that "
                "its code can be saved next to the weights."
            )
        module_name = Path(source_file).stem
        model_modules = {Path(name).stem for name in cls._model_code_files()}
        if module_name.startswith(_MODEL_MODULE_PREFIXES) or module_name in model_modules:
            raise ValueError(
                f"The pipeline module must not be named like a model file, got {module_name!r}: saving copies it "
                "next to the model files and would overwrite one. Rename the file that defines the pipeline."
            )
        entry = {"impl": f"{module_name}.{pipeline_class.__name__}", "pt": [model_auto_class], "type": pipeline_type}
        # Copies, not in-place updates: the class attributes of the parent class must stay untouched.
        cls._hub_pipelines = {**cls.__dict__.get("_hub_pipelines", {}), task: entry}
        cls._hub_pipeline_files = {**cls.__dict__.get("_hub_pipeline_files", {}), module_name: source_file}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *model_args, **kwargs):
        """Load like `PreTrainedModel.from_pretrained`; a damaged checkpoint raises `CheckpointError` naming the file.

        Raises:
            CheckpointError: The weights file is truncated or not safetensors, or the config's sizes do not match the
                stored weights (pass `ignore_mismatched_sizes=True` to re-initialise those tensors instead).
        """
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        except Exception as error:
            config_fields = getattr(cls.config_class, "__dataclass_fields__", {})
            overrides = {key: value for key, value in kwargs.items() if key in config_fields}
            problem = _checkpoint_problem(error, str(pretrained_model_name_or_path), overrides)
            if problem is None:
                raise
            raise CheckpointError(problem) from error

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        push_to_hub: bool = False,
        max_shard_size: int | str = "50GB",
        **kwargs,
    ) -> None:
        """Save the model like `PreTrainedModel.save_pretrained`, plus what makes the folder portable and documented.

        Besides the weights and config, the folder gets a model card (`README.md`, from the config and its
        `evaluation_results`), the code files named by `config.auto_map` (when the class is registered with
        `register_for_auto_class`, as `import hf_entity_models` does) and the code of the pipelines registered with
        `register_hub_pipeline`, declared in `config.custom_pipelines`. With the tokenizer saved next to it, the
        folder loads with `trust_remote_code=True` where hf_entity_models is not installed.

        With `push_to_hub=True` the saved files are uploaded to `repo_id` (default: the folder name), with the card.

        Example:

        ```python
        >>> model.save_pretrained("runs/my-model")  # doctest: +SKIP
        >>> tokenizer.save_pretrained("runs/my-model")  # doctest: +SKIP

        ```
        """
        hub_options = {key: kwargs.pop(key) for key in _SAVE_PUSH_OPTIONS if key in kwargs} if push_to_hub else {}
        save_kwargs = dict(state_dict=state_dict, max_shard_size=max_shard_size, **kwargs)
        if not push_to_hub or not is_main_process:
            self._save_with_card(save_directory, str(save_directory), None, is_main_process, **save_kwargs)
            return
        token = kwargs.get("token")
        api = _hub_api()
        repo_id = api.create_repo(
            hub_options.get("repo_id") or os.path.basename(os.path.normpath(save_directory)),
            private=hub_options.get("private"),
            token=token,
            exist_ok=True,
        ).repo_id
        before = _file_timestamps(save_directory)
        self._save_with_card(save_directory, repo_id, None, True, **save_kwargs)
        after = _file_timestamps(save_directory)
        # Like transformers: upload only what this save wrote, not everything else lying in the folder.
        api.upload_folder(
            repo_id=repo_id,
            folder_path=save_directory,
            allow_patterns=[name for name, stamp in after.items() if before.get(name) != stamp],
            commit_message=hub_options.get("commit_message") or "Upload model",
            commit_description=hub_options.get("commit_description"),
            create_pr=hub_options.get("create_pr", False),
            revision=hub_options.get("revision"),
            token=token,
        )

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
    ) -> str:
        """Upload the model with its generated model card (same signature and return value as transformers).

        transformers' own `push_to_hub` replaces README.md with a generic card after saving; this one uploads the
        card written from the config and its `evaluation_results`, which replaces the README of the repository.

        Returns:
            The commit info (a `str`: the commit URL) of the upload.

        Example:

        ```python
        >>> model.push_to_hub("me/my-model")  # doctest: +SKIP
        >>> tokenizer.push_to_hub("me/my-model")  # doctest: +SKIP

        ```
        """
        api = _hub_api()
        repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as folder:
            self._save_with_card(folder, repo_id, tags, True, max_shard_size=max_shard_size)
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message or "Upload model",
                commit_description=commit_description,
                token=token,
                revision=revision,
                create_pr=create_pr,
            )

    def create_model_card(self, model_location: str | None = None, tags: list[str] | None = None) -> ModelCard:
        """The model card of this checkpoint: Hub metadata (model-index with the recorded results) and text.

        Args:
            model_location: Repo id or folder used in the loading examples (default: a placeholder).
            tags: Extra Hub tags.

        Example:

        ```python
        >>> card = model.create_model_card("me/my-model")  # doctest: +SKIP
        >>> card.data.pipeline_tag  # doctest: +SKIP
        'token-classification'

        ```
        """
        # Each pipeline's file, the files it imports relatively and the shared modules it imports: what saving copies.
        model_files = set(self._model_code_files())
        pipeline_files = sorted(
            {path.name for source in self._hub_pipeline_files.values() for path in checkpoint_code_files(source)}
            - model_files
        )
        return _model_card(
            self._card_spec(),
            self.config,
            class_name=type(self).__name__,
            model_location=model_location or "path/to/this/model",
            tags=[*(self.model_tags or []), *(tags or [])],
            pipelines=self._hub_pipelines,
            code_files=[*self._model_code_files(), *pipeline_files],
            num_parameters=self._parameter_counts(),
        )

    @classmethod
    def _card_spec(cls) -> ModelCardSpec:
        # Not an isinstance check: every model folder has its own copy of this module, hence its own ModelCardSpec.
        spec = getattr(cls, "_model_card_spec", None)
        if spec is None:
            raise TypeError(
                f"{cls.__name__} has no model card spec: set its class attribute `_model_card_spec` to a "
                f"ModelCardSpec (kept in the card file of its model folder), got {spec!r}."
            )
        return spec

    @classmethod
    def _model_code_files(cls) -> list[str]:
        """Names of the code files a checkpoint of this class ships, configuration and modeling files first.

        They are the class's module and, recursively, the modules it imports relatively or from the shared folder:
        what saving copies next to the weights, here or in a remote-code module cache.
        """
        module_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if module_file is None:
            return []
        return sorted({path.name for path in checkpoint_code_files(module_file)}, key=_code_file_order)

    def _parameter_counts(self) -> tuple[int, int]:
        """(all, trained) parameters; the model's card spec counts the frozen ones."""
        total = self.num_parameters()
        count_frozen = self._card_spec().frozen_parameter_count
        return total, total - (count_frozen(self) if count_frozen is not None else 0)

    def _save_with_card(
        self,
        save_directory: str | os.PathLike,
        model_location: str,
        tags: list[str] | None,
        is_main_process: bool,
        **save_kwargs,
    ) -> None:
        with self._declared_hub_pipelines():
            super().save_pretrained(save_directory, is_main_process=is_main_process, push_to_hub=False, **save_kwargs)
        if not is_main_process:
            return
        if self._auto_class is not None:  # the code was saved: the shared modules it imports travel with it
            make_folder_self_contained(save_directory, sys.modules[type(self).__module__].__file__)
        for source_file in self._hub_pipeline_files.values():
            _copy_module_with_relative_imports(source_file, Path(save_directory))
            make_folder_self_contained(save_directory, source_file)  # the shared modules a pipeline imports
        self.create_model_card(model_location, tags).save(os.path.join(save_directory, "README.md"))

    @contextmanager
    def _declared_hub_pipelines(self) -> Iterator[None]:
        """Write exactly the pipelines whose code this save ships into `config.custom_pipelines`, then restore it.

        A declaration without its code file would make `pipeline(model=..., trust_remote_code=True)` fail on
        load, so entries inherited from a loaded config (e.g. a checkpoint re-saved where hf_entity_models is not
        installed) are dropped unless this class ships their code.
        """
        had_attribute = "custom_pipelines" in self.config.__dict__
        previous = self.config.__dict__.get("custom_pipelines")
        dropped = sorted(set(previous or {}) - set(self._hub_pipelines))
        if dropped and self._hub_pipelines:
            # E.g. `Pipeline.save_pretrained`, which declares the task with our custom Auto class name.
            logger.info(f"Saving the portable pipelines {sorted(self._hub_pipelines)} instead of {dropped}.")
        elif dropped:
            logger.warning(
                f"Not saving the custom pipelines {dropped} declared in the config: {type(self).__name__} has no "
                "pipeline code registered in this environment. Save a coreference model with hf-entity-models "
                "imported to ship the pipeline code with it."
            )
        if self._hub_pipelines:
            self.config.custom_pipelines = {task: dict(entry) for task, entry in self._hub_pipelines.items()}
        elif had_attribute:
            del self.config.custom_pipelines
        try:
            yield
        finally:
            if had_attribute:
                self.config.custom_pipelines = previous
            elif "custom_pipelines" in self.config.__dict__:
                del self.config.custom_pipelines


# `save_pretrained(push_to_hub=True, ...)` options that belong to the upload, not to the save.
_SAVE_PUSH_OPTIONS = ("repo_id", "commit_message", "commit_description", "private", "create_pr", "revision")

# The Hub has no coreference task type. Its task taxonomy files coreference resolution under token-classification
# (the `coreference-resolution` task id of datasets such as GAP).
_HUB_TASK_TYPES = {
    "coreference": ("token-classification", "Coreference resolution"),
    "question-answering": ("question-answering", "Question answering"),
}
_DATASET_NAMES = {"gap": "GAP", "squad": "SQuAD 1.1", "squad_v2": "SQuAD 2.0"}
# How the scores of a dataset are computed, after the results table.
_DATASET_RESULT_NOTES = {
    "gap": (
        "GAP scores are computed by the official rule (two binary decisions per row, A and B); bias is F1 feminine "
        "/ F1 masculine (1.0 is balanced)."
    ),
    "squad": "SQuAD scores are the official exact match and token F1 (normalised answers, best over gold answers).",
    "squad_v2": (
        "SQuAD 2.0 scores are the official exact match and F1, unanswerable questions included (answering \"\" is "
        "correct for them)."
    ),
}
_METRIC_NAMES = {
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "masculine_f1": "F1 (masculine)",
    "feminine_f1": "F1 (feminine)",
    "bias": "Bias (F1 feminine / F1 masculine)",
}
_DATASET_DESCRIPTIONS = {
    "squad": (
        "[SQuAD 1.1](https://rajpurkar.github.io/SQuAD-explorer/) (Rajpurkar et al., 2016): questions on Wikipedia "
        "paragraphs whose answer is a span of the paragraph."
    ),
    "squad_v2": (
        "[SQuAD 2.0](https://rajpurkar.github.io/SQuAD-explorer/) (Rajpurkar et al., 2018): SQuAD 1.1 plus "
        "unanswerable questions written to look answerable."
    ),
    "gap": (
        "[GAP](https://github.com/google-research-datasets/gap-coreference) (Webster et al., 2018) is a "
        "gender-balanced set of ambiguous pronoun-name pairs from English Wikipedia: each example asks whether a "
        "pronoun refers to name A, name B or neither (development 2,000 rows, validation 454, test 2,000)."
    ),
}
# Limitations that come with the data rather than the model, listed after the model's own.
_DATASET_LIMITATIONS = {
    "gap": (
        "GAP is English Wikipedia text: expect lower scores on other domains and languages. GAP balances "
        "pronoun gender; read the bias row before using the model where gender fairness matters."
    ),
}


def hub_model_id(name_or_path: str | None) -> str | None:
    """The Hub id an encoder was loaded from, or None for a local folder (a path means nothing on the Hub).

    Example:

    ```python
    >>> hub_model_id("google-bert/bert-base-uncased"), hub_model_id("./runs/encoder"), hub_model_id(None)
    ('google-bert/bert-base-uncased', None, None)

    ```
    """
    if not name_or_path or os.path.isabs(name_or_path) or name_or_path.startswith((".", "~")):
        return None
    if os.path.exists(name_or_path):
        return None
    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        return None
    return name_or_path


def encoder_summary(encoder_config: PreTrainedConfig) -> str:
    """How a card names a model's pretrained encoder: a Hub link when it came from the Hub, its size.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> encoder_summary(BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2))
    '`bert`, 2 layers, hidden size 32'

    ```
    """
    encoder_id = hub_model_id(getattr(encoder_config, "name_or_path", None))
    name = f"[`{encoder_id}`](https://huggingface.co/{encoder_id})" if encoder_id else f"`{encoder_config.model_type}`"
    layers = getattr(encoder_config, "num_hidden_layers", "?")
    return f"{name}, {layers} layers, hidden size {getattr(encoder_config, 'hidden_size', '?')}"


def _checkpoint_problem(error: Exception, location: str, overrides: dict[str, Any]) -> str | None:
    """What is wrong with a checkpoint, from the error its loading raised; None for any other error."""
    weights = _weights_description(location)
    if type(error).__name__ == "SafetensorError":  # safetensors' Rust error type, not importable by a stable path
        return (
            f"{weights}: a weights file is damaged ({error}): it is empty, truncated or not a safetensors file. Save "
            "or download the checkpoint again."
        )
    if isinstance(error, RuntimeError) and "ignore_mismatched_sizes" in str(error):
        config = os.path.join(location, "config.json") if os.path.isdir(location) else f"the config.json of {location}"
        if overrides:
            config += f" with the overrides {sorted(overrides)}"
        return (
            f"{config} does not match the weights in {weights}: some tensor sizes differ (transformers' load report "
            "lists them). Restore the config saved with these weights (or drop the overrides that change sizes), or "
            "pass ignore_mismatched_sizes=True to re-initialise those tensors."
        )
    return None


def _weights_description(location: str) -> str:
    """The weight files of a checkpoint folder (the shard index of a sharded one), or the repo id."""
    if not os.path.isdir(location):
        return f"the weights of {location}"
    for name in ("model.safetensors", "model.safetensors.index.json"):
        if os.path.isfile(os.path.join(location, name)):
            return os.path.join(location, name)
    return f"the weights in {location}"


def _hub_api() -> HfApi:
    return HfApi(library_name="transformers", library_version=transformers.__version__)


def _code_file_order(name: str) -> tuple[bool, bool, str]:
    """Sort key listing the configuration file, then the modeling file, then the rest by name."""
    return not name.startswith("configuration_"), not name.startswith("modeling_"), name


def _file_timestamps(folder: str | os.PathLike) -> dict[str, float]:
    if not os.path.isdir(folder):
        return {}
    return {name: os.path.getmtime(os.path.join(folder, name)) for name in os.listdir(folder)}


def _copy_module_with_relative_imports(source_file: str, folder: Path) -> None:
    """Copy a module and the modules it imports relatively, as transformers' `custom_object_save` does."""
    for path in [source_file, *get_relative_import_files(source_file)]:
        shutil.copyfile(path, folder / Path(path).name)


# The card's text; `ModelCard.from_template` renders it with Jinja2 (a dependency of torch) and writes the metadata
# header from the ModelCardData. What a card says about one model comes from its ModelCardSpec.
_CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ model_name }}

{{ overview }}

| | |
|---|---|
{% for name, value in rows -%}
| {{ name }} | {{ value }} |
{% endfor %}
## Data

{% for description in dataset_descriptions -%}
{{ description }}

{% endfor -%}
{% if dataset_descriptions -%}
{{ data_closing }}
{%- else -%}
No evaluation results are recorded with this checkpoint (`config.evaluation_results` is empty), so nothing here says \
how well it works: evaluate it before use.
{%- endif %}

## Results

{% if results -%}
| Task | Dataset | Split | Metric | Value | Threshold |
|---|---|---|---|---|---|
{% for row in results -%}
| {{ row.task }} | {{ row.dataset }} | {{ row.split }} | {{ row.metric }} | {{ "%.4f" | format(row.value) }} | \
{{ row.threshold }} |
{% endfor %}
Scores come from `config.evaluation_results`, recorded when the model was evaluated.{% for note in result_notes %} \
{{ note }}{% endfor %} A score measured on the split a threshold was chosen on is optimistic.
{%- else -%}
No results recorded.
{%- endif %}
{% if threshold is not none %}
## Decision threshold

A candidate is linked to the pronoun when its link probability is at least `config.coref_threshold` = \
**{{ threshold }}**. The pipeline applies it and returns it with every answer (`"threshold"`); the model itself \
returns the probabilities (`candidate_scores`), so you can apply your own. To choose it on your validation data, use \
`hf_entity_models.tasks.coreference.sweep_threshold` (or `tune_threshold` after training) and store the result in \
`model.config.coref_threshold`.
{% endif %}
## How to use

With the `hf-entity-models` package installed:

{{ usage_with_package }}
Without it, transformers runs the code stored next to the weights ({{ code_files }}; read it first, \
`trust_remote_code=True` executes it):

```python
from transformers import AutoModel, pipeline

model = AutoModel.from_pretrained("{{ location }}", trust_remote_code=True)  # {{ class_name }}
{% if pipeline_examples -%}
pipe = pipeline(model="{{ location }}", trust_remote_code=True)  # the pipeline saved with the model
{% for line in pipeline_examples -%}
{{ line }}
{% endfor -%}
{% endif -%}
```
{% if usage_note %}
{{ usage_note }}
{% endif %}
## Limitations

{% for limit in limitations -%}
* {{ limit }}
{% endfor %}
## Citation

```bibtex
{{ citation }}
```

"""  # Jinja2 drops the template's last newline: the card ends with one


def _model_card(
    spec: ModelCardSpec,
    config: PreTrainedConfig,
    class_name: str,
    model_location: str,
    tags: list[str],
    pipelines: dict[str, dict[str, Any]],
    code_files: list[str],
    num_parameters: tuple[int, int],
) -> ModelCard:
    """Hub metadata + text of a checkpoint, from its config, its recorded evaluation results and the model's spec."""
    results = list(getattr(config, "evaluation_results", None) or [])
    # `model_type` names the model when the location has no last component (e.g. a save into ".").
    model_name = Path(model_location.rstrip("/")).name or config.model_type
    datasets = list(dict.fromkeys(result["dataset"] for result in results))
    encoder_config = getattr(config, "encoder_config", None)
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag=spec.pipeline_tag,
        tags=list(dict.fromkeys(["hf-entity-models", *spec.tags, *tags])),
        base_model=hub_model_id(getattr(encoder_config, "name_or_path", None)),
        datasets=datasets or None,
        model_name=model_name if results else None,
        eval_results=[_eval_result(result) for result in results] or None,
    )
    total, trainable = num_parameters
    threshold = getattr(config, "coref_threshold", None)
    return ModelCard.from_template(
        card_data,
        template_str=_CARD_TEMPLATE,
        model_name=model_name,
        overview=spec.overview(config, class_name),
        rows=[
            ("Class", f"`{class_name}` (`model_type=\"{config.model_type}\"`)"),
            *spec.config_rows(config, class_name),
            ("Parameters", f"{total:,} ({trainable:,} trained)"),
        ],
        dataset_descriptions=[_DATASET_DESCRIPTIONS.get(dataset, f"`{dataset}`.") for dataset in datasets],
        data_closing=" ".join(filter(None, ["The checkpoint does not store its training data.", spec.training_note])),
        results=[_result_row(result) for result in results],
        result_notes=[_DATASET_RESULT_NOTES[dataset] for dataset in datasets if dataset in _DATASET_RESULT_NOTES],
        threshold=None if threshold is None else f"{float(threshold):g}",
        usage_with_package=spec.usage_with_package(class_name, model_location),
        code_files=", ".join(f"`{name}`" for name in code_files),
        location=model_location,
        class_name=class_name,
        pipeline_examples=list(spec.pipeline_examples) if pipelines else [],
        usage_note=spec.usage_note,
        limitations=[
            *spec.limitations(config, datasets),
            *(_DATASET_LIMITATIONS[dataset] for dataset in datasets if dataset in _DATASET_LIMITATIONS),
        ],
        citation=spec.citation,
    )


def _eval_result(result: dict[str, Any]) -> EvalResult:
    task_type, task_name = _HUB_TASK_TYPES.get(result["task"], (result["task"], None))
    return EvalResult(
        task_type=task_type,
        task_name=task_name,
        dataset_type=result["dataset"],
        dataset_name=result.get("dataset_name") or _DATASET_NAMES.get(result["dataset"], result["dataset"]),
        dataset_split=result["split"],
        metric_type=result["metric"],
        metric_name=result.get("metric_name") or _METRIC_NAMES.get(result["metric"]),
        metric_value=result["value"],
        metric_args={"threshold": result["threshold"]} if "threshold" in result else None,
    )


def _result_row(result: dict[str, Any]) -> dict[str, Any]:
    """One row of the card's results table, with display names."""
    return {
        "task": result["task"],
        "dataset": result.get("dataset_name") or _DATASET_NAMES.get(result["dataset"], result["dataset"]),
        "split": result["split"],
        "metric": result.get("metric_name") or _METRIC_NAMES.get(result["metric"], result["metric"]),
        "value": result["value"],
        "threshold": f"{result['threshold']:g}" if "threshold" in result else "-",
    }
