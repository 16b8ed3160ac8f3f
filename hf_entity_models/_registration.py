"""Registration with transformers on first use, so that `import hf_entity_models` imports neither torch nor
transformers (`hf-entity --help` and `python -m hf_entity_models.cli --help` answer at once).

`import hf_entity_models` promises that the Auto classes and `pipeline()` know the package's models. Registering them
means importing the models, hence torch; instead, the package's model types and tasks are entered in transformers'
tables as pending entries, and the first lookup of one of them (`AutoConfig`/`AutoModel.from_pretrained` of a PeTra
folder, `pipeline("coreference", ...)`) registers everything (`ensure_registered`). Accessing a public name of the
package (`hf_entity_models.PetraModel`) and saving a model registers too. The tables are filled when transformers
creates them: right away when it is already imported, else by an import hook when it is.

The package extends its model code the same way, from above: the shared checkpoint code (`models/_shared/
checkpoints.py`) ships inside checkpoints and so imports nothing of the package, and the package installs its
checkpoint writer and config-error explainer into it as it is imported (`_extend_shared_checkpoints`). A model imported
straight from its folder (`from hf_entity_models.models.petra import PetraForCoreference`) gets them too: Python runs
`hf_entity_models/__init__.py`, which calls `install`, before any module of the package.

Only the standard library is imported here; the hooks import the rest of the package when they run.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

MODEL_TYPES = ("petra", "refreader", "forcereader", "gpt2e", "definition-emb")
PIPELINE_TASKS = ("coreference", "question-answering")
_CONFIG_MODULE = "transformers.models.auto.configuration_auto"
_PIPELINES_MODULE = "transformers.pipelines"
_CHECKPOINTS_MODULE = "hf_entity_models.models._shared.checkpoints"

_lock = threading.RLock()
_state = {"registered": False, "registering": False}


class _Pending:
    """Stands for a class of the package in a transformers table until the package registers it."""

    def __repr__(self) -> str:
        return "<registered by hf_entity_models on first use>"


PENDING = _Pending()


def ensure_registered() -> None:
    """Register every config, model and pipeline of the package with transformers (idempotent, thread-safe)."""
    with _lock:
        if _state["registered"] or _state["registering"]:
            return
        _state["registering"] = True
        try:
            from transformers.pipelines import PIPELINE_REGISTRY

            from .auto import register_auto_classes, register_pipelines

            register_auto_classes()
            _drop_pending(PIPELINE_REGISTRY.supported_tasks)  # else registering says it overwrites a task
            register_pipelines()
            _state["registered"] = True
        finally:
            _state["registering"] = False


class RegisteredOnFirstUse(dict):
    """A transformers table (model type -> config class, task -> pipeline) holding the package's entries as `PENDING`
    until one of them is looked up, which registers the package and returns the real entry."""

    def __getitem__(self, key: Any) -> Any:
        if dict.get(self, key) is PENDING:
            ensure_registered()
        value = dict.__getitem__(self, key)
        if value is PENDING:  # looked up while the package registers itself: not there yet
            raise KeyError(key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def values(self) -> list[Any]:
        self._register_if_pending()
        return [value for value in dict.values(self) if value is not PENDING]

    def items(self) -> list[tuple[Any, Any]]:
        self._register_if_pending()
        return [(key, value) for key, value in dict.items(self) if value is not PENDING]

    def __iter__(self):
        # Defined so that dict(table) and copies read entries through __getitem__, never a PENDING value.
        return iter(list(dict.keys(self)))

    def _register_if_pending(self) -> None:
        if any(value is PENDING for value in dict.values(self)):
            ensure_registered()


def _drop_pending(table: Any) -> None:
    if isinstance(table, dict):
        for key in [key for key, value in dict.items(table) if value is PENDING]:
            dict.pop(table, key)


def _pending_entries(table: Any, keys: tuple[str, ...]) -> Any:
    table = table if isinstance(table, RegisteredOnFirstUse) else RegisteredOnFirstUse(table)
    for key in keys:
        dict.setdefault(table, key, PENDING)
    return table


def _enter_model_types(configuration_auto: ModuleType) -> None:
    mapping = getattr(configuration_auto, "CONFIG_MAPPING", None)
    if not isinstance(getattr(mapping, "_extra_content", None), dict):  # another transformers layout: register now
        ensure_registered()
        return
    mapping._extra_content = _pending_entries(mapping._extra_content, MODEL_TYPES)


def _enter_pipeline_tasks(pipelines: ModuleType) -> None:
    registry = getattr(pipelines, "PIPELINE_REGISTRY", None)
    if not isinstance(getattr(registry, "supported_tasks", None), dict):
        ensure_registered()
        return
    # transformers 5.x removed its question-answering task and refuses the name before it reads the registry.
    removed_tasks = getattr(pipelines, "REMOVED_TASKS", None)
    if isinstance(removed_tasks, dict):
        removed_tasks.pop("question-answering", None)
    registry.supported_tasks = _pending_entries(registry.supported_tasks, PIPELINE_TASKS)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a function on a module right after it is first imported (once)."""

    def __init__(self, module_name: str, callback: Callable[[ModuleType], None]):
        self.module_name = module_name
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)  # one shot; the other finders locate the module
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        execute, callback = loader.exec_module, self.callback

        def exec_module(module: ModuleType) -> None:
            execute(module)
            callback(module)

        loader.exec_module = exec_module  # this spec's own loader instance
        return spec


class _ImportedOnFirstUse:
    """An object of the package as the shared checkpoint code holds it: a stand-in that imports it on first use.
    Importing a model then imports neither the Hub code nor the config diagnostics, and `config_errors`, which imports
    the shared code itself, may be what first imports it: the object is first used once both are fully imported."""

    def __init__(self, module: str, name: str, before_use: Callable[[], None] = lambda: None):
        self._module, self._name, self._before_use = module, name, before_use

    def __getattr__(self, attribute: str) -> Any:
        self._before_use()
        return getattr(getattr(importlib.import_module(self._module, __package__), self._name), attribute)


def _extend_shared_checkpoints(checkpoints: ModuleType) -> None:
    """Install what the package adds to the shared checkpoint code: saving and pushing through the package (portable
    code, declared pipelines, model card; `auto_map` and the pipelines a checkpoint declares come from the
    registration, so a save registers the package first), and one-line config errors."""
    checkpoints.CheckpointMixin._checkpoint_writer = _ImportedOnFirstUse(
        ".hub", "CHECKPOINT_WRITER", before_use=ensure_registered
    )
    checkpoints.CheckpointConfigMixin._error_explainer = _ImportedOnFirstUse(".config_errors", "CONFIG_ERROR_EXPLAINER")


def install() -> None:
    """Enter the package's model types and tasks in transformers' tables, and extend the shared checkpoint code: each
    now when its module is already imported, else right after it is."""
    hooks = (
        (_CONFIG_MODULE, _enter_model_types),
        (_PIPELINES_MODULE, _enter_pipeline_tasks),
        (_CHECKPOINTS_MODULE, _extend_shared_checkpoints),
    )
    for module_name, callback in hooks:
        module = sys.modules.get(module_name)
        if module is not None:
            callback(module)
        elif not any(isinstance(finder, _AfterImport) and finder.module_name == module_name for finder in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(module_name, callback))
