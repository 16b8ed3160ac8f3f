"""What the package adds when it saves or pushes an entity model: portable code, declared pipelines, a model card.

A checkpoint carries only the code that runs its model (configuration, modeling, the shared modeling modules they
import, the pipeline it declares). Everything else happens here, in the package: the package installs, as the
models' `CheckpointMixin._checkpoint_writer`, a stand-in that registers the package and hands over to
`CHECKPOINT_WRITER` (see `_registration`), so that `model.save_pretrained(folder)` (also through `Trainer` and the
CLI) and `model.push_to_hub(repo)`

- make the saved code importable without the package (`portable_code`: the shared modules it imports are copied next
  to it and imported relatively),
- copy the code of the pipelines registered for the model's class and declare them in `config.custom_pipelines`, so
  that `pipeline(model=folder_or_repo, trust_remote_code=True)` runs them,
- write the model card (`README.md`, see `model_cards`) from the config and its recorded `evaluation_results`, which
  `push_to_hub` uploads instead of transformers' generic card.

Where the package is not installed, a checkpoint's models save and push as transformers' own do.
"""

import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import transformers
from huggingface_hub import HfApi, ModelCard
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.utils import logging

from .cards import CARD_SPECS
from .evaluation_results import check_evaluation_results
from .model_cards import ModelCardSpec, model_card
from .portable_code import files_to_ship, make_folder_self_contained

logger = logging.get_logger(__name__)

# Modules of a model folder that a pipeline's file must not be named like: saving copies the pipeline's file next to
# the model files and would overwrite one of them.
_MODEL_MODULE_PREFIXES = ("modeling_", "configuration_")
# `save_pretrained(push_to_hub=True, ...)` options that belong to the upload, not to the save.
_SAVE_PUSH_OPTIONS = ("repo_id", "commit_message", "commit_description", "private", "create_pr", "revision")


class CheckpointWriter:
    """Saving and pushing of the package's models and configs (what `CheckpointMixin._checkpoint_writer` hands over
    to), and the pipelines their checkpoints ship."""

    def __init__(self) -> None:
        # Per model class: task -> the `custom_pipelines` entry of config.json, and module name -> source file.
        self._pipelines: dict[type, dict[str, dict[str, Any]]] = {}
        self._pipeline_files: dict[type, dict[str, str]] = {}

    def register_pipeline(
        self,
        model_class: type,
        task: str,
        pipeline_class: type,
        model_auto_class: str = "AutoModel",
        pipeline_type: str = "text",
    ) -> None:
        """Ship a pipeline's code with every checkpoint of `model_class` (and its subclasses).

        Saving then declares the pipeline in `config.custom_pipelines` and copies the file that defines it next to the
        weights; `pipeline(model=folder_or_repo, trust_remote_code=True)` finds it there. The model is loaded remotely
        through `model_auto_class`, which must be a transformers Auto class that the checkpoint's `auto_map` names
        (custom Auto classes do not exist without the package).

        Args:
            model_class: The model class whose checkpoints ship the pipeline.
            task: Task name written in `custom_pipelines`; with a single declared task, `pipeline()` infers it.
            pipeline_class: A `transformers.Pipeline` subclass whose file imports only torch, transformers, files next
                to it and the shared model code, and is not named like a file of the model.
            model_auto_class: Name of the transformers Auto class that loads the model remotely.
            pipeline_type: Input modality reported in `custom_pipelines` ("text").

        Raises:
            ValueError: `model_auto_class` is not a transformers class, the pipeline is defined in `__main__`, or
                its module is named like a model file (saving would overwrite that file).

        Example:

        ```python
        >>> from hf_entity_models.tasks.coreference.pipeline import CoreferencePipeline
        >>> CHECKPOINT_WRITER.register_pipeline(MyModel, "entity-coreference", CoreferencePipeline)  # doctest: +SKIP

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
        model_modules = {Path(name).stem for name in model_code_files(model_class)}
        if module_name.startswith(_MODEL_MODULE_PREFIXES) or module_name in model_modules:
            raise ValueError(
                f"The pipeline module must not be named like a model file, got {module_name!r}: saving copies it "
                "next to the model files and would overwrite one. Rename the file that defines the pipeline."
            )
        entry = {"impl": f"{module_name}.{pipeline_class.__name__}", "pt": [model_auto_class], "type": pipeline_type}
        self._pipelines[model_class] = {**self._pipelines.get(model_class, {}), task: entry}
        self._pipeline_files[model_class] = {**self._pipeline_files.get(model_class, {}), module_name: source_file}

    def pipelines(self, model_class: type) -> dict[str, dict[str, Any]]:
        """The pipelines the checkpoints of `model_class` declare (those of its closest registered class)."""
        return next((self._pipelines[base] for base in model_class.__mro__ if base in self._pipelines), {})

    def pipeline_files(self, model_class: type) -> dict[str, str]:
        return next((self._pipeline_files[base] for base in model_class.__mro__ if base in self._pipeline_files), {})

    def save_model(
        self,
        model: Any,
        save: Callable[..., None],
        save_directory: str | os.PathLike,
        is_main_process: bool = True,
        push_to_hub: bool = False,
        **kwargs,
    ) -> None:
        """`save_pretrained` of a package model: transformers' save (`save`), then the portable code, the pipelines
        and the card. With `push_to_hub=True` the files this save wrote are uploaded to `repo_id` (default: the
        folder name), with the card."""
        hub_options = {key: kwargs.pop(key) for key in _SAVE_PUSH_OPTIONS if key in kwargs} if push_to_hub else {}
        if not push_to_hub or not is_main_process:
            self._save_with_card(model, save, save_directory, str(save_directory), None, is_main_process, **kwargs)
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
        self._save_with_card(model, save, save_directory, repo_id, None, True, **kwargs)
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

    def push_model(
        self,
        model: Any,
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
        """`push_to_hub` of a package model (transformers' signature and return value): uploads the card written
        from the config and its `evaluation_results`, which replaces the README of the repository (transformers'
        own `push_to_hub` would replace it with a generic card)."""
        api = _hub_api()
        repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as folder:
            self._save_with_card(model, _transformers_save(model), folder, repo_id, tags, True, max_shard_size=max_shard_size)
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message or "Upload model",
                commit_description=commit_description,
                token=token,
                revision=revision,
                create_pr=create_pr,
            )

    def save_config(self, config: Any, save: Callable[..., None], save_directory: str | os.PathLike, **kwargs) -> None:
        """`save_pretrained` of a package config: a config saved (or pushed) on its own loads with
        `AutoConfig.from_pretrained(folder, trust_remote_code=True)` where the package is not installed."""
        push_to_hub = kwargs.pop("push_to_hub", False)
        hub_options = {key: kwargs.pop(key) for key in _SAVE_PUSH_OPTIONS if key in kwargs}
        save(save_directory, push_to_hub=False, **kwargs)
        if config._auto_class is not None:  # the code was saved: the shared modules it imports travel with it
            make_folder_self_contained(save_directory, sys.modules[type(config).__module__].__file__)
        if push_to_hub:  # uploads a fresh save of the same files, made self-contained by the line above
            repo_id = hub_options.pop("repo_id", None) or Path(save_directory).name
            config.push_to_hub(repo_id, token=kwargs.get("token"), **hub_options)

    def create_model_card(self, model: Any, model_location: str | None = None, tags: list[str] | None = None) -> ModelCard:
        """The model card of a checkpoint of `model`: Hub metadata (model-index with the recorded results) and text.

        Args:
            model: A model of the package.
            model_location: Repo id or folder used in the loading examples (default: a placeholder).
            tags: Extra Hub tags.

        Example:

        ```python
        >>> card = CHECKPOINT_WRITER.create_model_card(model, "me/my-model")  # doctest: +SKIP
        >>> card.data.tags[:2]  # doctest: +SKIP
        ['hf-entity-models', 'petra']

        ```
        """
        check_evaluation_results(getattr(model.config, "evaluation_results", None))
        model_files = model_code_files(type(model))
        pipeline_files = sorted(
            {
                path.name
                for source in self.pipeline_files(type(model)).values()
                for path in files_to_ship(source)
            }
            - set(model_files)
        )
        spec = card_spec(model.config)
        return model_card(
            spec,
            model.config,
            class_name=type(model).__name__,
            model_location=model_location or "path/to/this/model",
            tags=[*(model.model_tags or []), *(tags or [])],
            pipelines=self.pipelines(type(model)),
            code_files=[*model_files, *pipeline_files],
            num_parameters=_parameter_counts(model, spec),
        )

    def _save_with_card(
        self,
        model: Any,
        save: Callable[..., None],
        save_directory: str | os.PathLike,
        model_location: str,
        tags: list[str] | None,
        is_main_process: bool,
        **save_kwargs,
    ) -> None:
        check_evaluation_results(getattr(model.config, "evaluation_results", None))  # before anything is written
        with self._declared_pipelines(model):
            save(save_directory, is_main_process=is_main_process, push_to_hub=False, **save_kwargs)
        if not is_main_process:
            return
        if model._auto_class is not None:  # the code was saved: the shared modules it imports travel with it
            make_folder_self_contained(save_directory, sys.modules[type(model).__module__].__file__)
        for source_file in self.pipeline_files(type(model)).values():
            _copy_module_with_relative_imports(source_file, Path(save_directory))
            make_folder_self_contained(save_directory, source_file)  # the shared modules a pipeline imports
        self.create_model_card(model, model_location, tags).save(os.path.join(save_directory, "README.md"))

    @contextmanager
    def _declared_pipelines(self, model: Any) -> Iterator[None]:
        """Write exactly the pipelines whose code this save ships into `config.custom_pipelines`, then restore it.

        A declaration without its code file would make `pipeline(model=..., trust_remote_code=True)` fail on load,
        so entries inherited from a loaded config are dropped unless this class ships their code.
        """
        config = model.config
        pipelines = self.pipelines(type(model))
        had_attribute = "custom_pipelines" in config.__dict__
        previous = config.__dict__.get("custom_pipelines")
        dropped = sorted(set(previous or {}) - set(pipelines))
        if dropped and pipelines:
            # E.g. `Pipeline.save_pretrained`, which declares the task with our custom Auto class name.
            logger.info(f"Saving the portable pipelines {sorted(pipelines)} instead of {dropped}.")
        elif dropped:
            logger.warning(
                f"Not saving the custom pipelines {dropped} declared in the config: {type(model).__name__} has no "
                "pipeline code registered in this environment."
            )
        if pipelines:
            config.custom_pipelines = {task: dict(entry) for task, entry in pipelines.items()}
        elif had_attribute:
            del config.custom_pipelines
        try:
            yield
        finally:
            if had_attribute:
                config.custom_pipelines = previous
            elif "custom_pipelines" in config.__dict__:
                del config.custom_pipelines


CHECKPOINT_WRITER = CheckpointWriter()


def card_spec(config: Any) -> ModelCardSpec:
    """What the model card says about the model of `config` (its class's `model_type`, which saving writes: a config
    read from another model's config.json, e.g. a GPT-2 one for GPT2E, keeps that model's type as an attribute)."""
    model_type = getattr(type(config), "model_type", None) or getattr(config, "model_type", None)
    spec = CARD_SPECS.get(model_type)
    if spec is None:
        raise TypeError(
            f"No model card spec for model_type {model_type!r}: add a ModelCardSpec for it to "
            f"hf_entity_models/hub/cards/ (known: {sorted(CARD_SPECS)})."
        )
    return spec


def model_code_files(model_class: type) -> list[str]:
    """Names of the code files a checkpoint of `model_class` ships, configuration and modeling files first: the
    class's module and, recursively, the modules it imports relatively or from the shared folder."""
    module_file = getattr(sys.modules.get(model_class.__module__), "__file__", None)
    if module_file is None:
        return []
    return sorted({path.name for path in files_to_ship(module_file)}, key=_code_file_order)


def _transformers_save(model: Any) -> Callable[..., None]:
    """transformers' own `save_pretrained` of `model` (the one the package's extends)."""
    from ..models._shared.checkpoints import CheckpointMixin

    return super(CheckpointMixin, model).save_pretrained


def _parameter_counts(model: Any, spec: ModelCardSpec) -> tuple[int, int]:
    """(all, trained) parameters; the model's card spec counts the frozen ones."""
    total = model.num_parameters()
    count_frozen = spec.frozen_parameter_count
    return total, total - (count_frozen(model) if count_frozen is not None else 0)


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
