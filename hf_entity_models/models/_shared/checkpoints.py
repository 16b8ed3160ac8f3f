"""Loading an entity-model checkpoint strictly, and the one place where the package extends saving.

`PreTrainedModel.from_pretrained` fills a weight the checkpoint lacks with random values, drops a stored weight the
config has no place for, and builds whatever class it is asked for from a folder of another model: only a log line
says so. A PeTra folder loaded as a ForceReader, or a GPT2E `config.json` edited to one layer more, would answer with
random layers. `CheckpointMixin.from_pretrained` refuses such a load with a `CheckpointError` naming the file, from
the loading report transformers returns (`output_loading_info=True`): `loading_problem` is the one weight-fit check
of the package.

Saved next to the weights with every model (a checkpoint must load strictly without the package too), so it imports
only the standard library and transformers. What the package adds to a save (the shared code made importable next to
the weights, the code of the pipelines a checkpoint declares, the model card) lives in the package
(`hf_entity_models.hub`), which installs it as `CheckpointMixin._checkpoint_writer`; in a checkpoint loaded without
the package, saving and pushing are transformers' own.
"""

import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from transformers import PreTrainedConfig

WEIGHT_FILE_NAMES = ("model.safetensors", "model.safetensors.index.json")
# How many weight names a message lists (a missing layer alone has 16 of them).
_NAMES_SHOWN = 3
# `from_pretrained` options that say where to find a config.json, passed on when the stored model type is read.
_CONFIG_LOOKUP_OPTIONS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")


class CheckpointError(OSError):
    """A checkpoint cannot be loaded because its files are damaged or disagree with each other or with the class
    asked to load them (e.g. a truncated `model.safetensors`, a `config.json` whose sizes or layers do not match the
    stored weights, a folder of another model). The message names the file and the fix."""


def loading_problem(
    model: Any,
    loading_info: Mapping[str, Iterable[Any]],
    name_or_path: str | os.PathLike,
    allowed_missing: tuple[str, ...] = (),
) -> str | None:
    """What is wrong with a load (`from_pretrained(..., output_loading_info=True)`) that left weights random or unused,
    in one line; None when every weight found its place.

    transformers has already removed what a class expects to miss (tied weights, `_keys_to_ignore_on_load_missing`,
    `_keys_to_ignore_on_load_unexpected`). A left-over weight counts only when it belongs to a module the model has
    (``encoder.layer.6.*`` with a 6-layer config, ``transformer.h.1.*`` in a one-layer model): the head of a
    checkpoint saved from another task model (``cls.*``, ``qa_outputs.*``, a pooler the model lacks) is dropped on
    purpose when its base model is loaded.

    Args:
        model: The loaded model.
        loading_info: What `from_pretrained` returned with `output_loading_info=True`.
        name_or_path: Where the model was loaded from (named in the message).
        allowed_missing: Prefixes of missing weights that are acceptable (modules the caller never reads, or a new
            head on a checkpoint of another class).

    Example:

    ```python
    >>> from transformers import BertConfig, BertModel
    >>> model = BertModel(BertConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=2, intermediate_size=8))
    >>> print(loading_problem(model, {"missing_keys": [], "unexpected_keys": []}, "runs/encoder"))
    None
    >>> loading_problem(model, {"missing_keys": ["encoder.layer.0.output.dense.bias"]}, "runs/encoder")[:56]
    'the weights of runs/encoder does not fit the config.json o'

    ```
    """
    base_model_prefix = getattr(model, "base_model_prefix", "")
    prefix = f"{base_model_prefix}." if base_model_prefix else ""
    modules = {name for name, _ in model.named_children()}
    # A base model's own modules, for keys stored under the prefix of a head model (``bert.encoder.layer.6.*``).
    base_model = getattr(model, base_model_prefix, model) if base_model_prefix else model
    base_modules = {name for name, _ in base_model.named_children()}
    missing = sorted(str(key) for key in loading_info.get("missing_keys", ()) if not str(key).startswith(allowed_missing))
    unexpected = sorted(
        str(key)
        for key in loading_info.get("unexpected_keys", ())
        if str(key).split(".")[0] in modules or str(key).removeprefix(prefix).split(".")[0] in base_modules
    )
    mismatched = sorted(
        str(entry[0] if isinstance(entry, (tuple, list)) else entry)
        for entry in loading_info.get("mismatched_keys", ()) or ()
    )
    if not (missing or unexpected or mismatched):
        return None
    problems = [
        f"{label} {len(keys)} weight{'s' if len(keys) != 1 else ''} {what} ({_some(keys)})"
        for label, keys, what in (
            ("it lacks", missing, "the config asks for"),
            ("holds", unexpected, "the config has no place for"),
            ("holds", mismatched, "of another shape than the config's"),
        )
        if keys
    ]
    return (
        f"{weights_description(name_or_path)} does not fit {config_description(name_or_path)}: "
        + " and ".join(problems)
        + "; the model would run with random or missing layers. Restore the config.json saved with these weights "
        "(e.g. its number of layers), or give a complete checkpoint."
    )


def copy_weights(target: Any, source_state: Mapping[str, Any], description: str, allowed_missing: tuple[str, ...] = ()) -> None:
    """Load `source_state` into `target` (a module built from the same config), refusing what `loading_problem`
    refuses: weights of another shape, weights `target` needs that the source lacks (unless under `allowed_missing`),
    and source weights of modules `target` has that it has no place for.

    Raises:
        ValueError: In one line, naming `description`, the weights and the fix.
    """
    target_state = target.state_dict()
    mismatched = [
        f"{name}: {tuple(tensor.shape)} vs {tuple(target_state[name].shape)}"
        for name, tensor in source_state.items()
        if name in target_state and tuple(tensor.shape) != tuple(target_state[name].shape)
    ]
    loading_info: dict[str, list[str]] = {"mismatched_keys": mismatched}
    if not mismatched:  # load_state_dict raises on a shape mismatch even when not strict
        loaded = target.load_state_dict(source_state, strict=False)
        loading_info.update(missing_keys=loaded.missing_keys, unexpected_keys=loaded.unexpected_keys)
    problem = loading_problem(target, loading_info, description, allowed_missing)
    if problem is not None:
        raise ValueError(problem)


def weights_description(location: str | os.PathLike) -> str:
    """How a message names the weights of a checkpoint: its weight files, or the Hub id."""
    location = os.fspath(location)
    if not os.path.isdir(location):
        return f"the weights of {location}"
    present = [os.path.join(location, name) for name in WEIGHT_FILE_NAMES if os.path.isfile(os.path.join(location, name))]
    return " / ".join(present) or f"the weights in {location}"


def config_description(location: str | os.PathLike) -> str:
    location = os.fspath(location)
    return os.path.join(location, "config.json") if os.path.isdir(location) else f"the config.json of {location}"


def damaged_checkpoint_problem(error: BaseException, location: str, overrides: Mapping[str, Any]) -> str | None:
    """What is wrong with a checkpoint, from the error its loading raised; None for any other error."""
    if type(error).__name__ == "SafetensorError":  # safetensors' Rust error type, not importable by a stable path
        return (
            f"{weights_description(location)}: a weights file is damaged ({' '.join(str(error).split())}): it is "
            "empty, truncated or not a safetensors file. Save or download the checkpoint again."
        )
    if isinstance(error, RuntimeError) and "ignore_mismatched_sizes" in str(error):
        config = config_description(location)
        if overrides:
            config += f" with the overrides {sorted(overrides)}"
        return (
            f"{config} does not match the weights in {weights_description(location)}: some tensor sizes differ. "
            "Restore the config saved with these weights (or drop the overrides that change sizes), or pass "
            "ignore_mismatched_sizes=True to re-initialise those tensors."
        )
    return None


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown if len(names) <= _NAMES_SHOWN else f"{shown}, ... {len(names) - _NAMES_SHOWN} more"


class CheckpointMixin:
    """Strict `from_pretrained` and package-extensible saving for the pretrained-model class of an entity model.

    Put it before `PreTrainedModel` in the bases. A subclass may set `_compatible_model_types` (checkpoints of other
    models it starts from, e.g. GPT-2 for GPT2E) and override `_after_loading` (e.g. to freeze parameters again:
    loading replaces the parameters that `__init__` froze).
    """

    # Model types besides the class's own whose checkpoints the class may start from, their new modules random.
    _compatible_model_types: ClassVar[tuple[str, ...]] = ()
    # Installed by `import hf_entity_models`: what the package adds to saving and pushing (see the module docstring).
    _checkpoint_writer: ClassVar[Any] = None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *model_args, **kwargs):
        """Load like `PreTrainedModel.from_pretrained`, refusing a checkpoint that does not fit the class.

        A checkpoint saved by the same class must fill every weight; one saved by another class of the same model
        (e.g. a pre-trained language model loaded into the coreference head) may leave the weights of modules it
        lacks random, as transformers' fine-tuning does.

        Raises:
            CheckpointError: The folder holds another model, the weights file is truncated or not safetensors, or
                the config does not fit the stored weights (a layer more or less, other sizes: pass
                `ignore_mismatched_sizes=True` to re-initialise resized tensors instead).
        """
        location = os.fspath(pretrained_model_name_or_path)
        stored = _stored_config(location, kwargs)
        cls._refuse_other_model(stored, location)
        wants_loading_info = kwargs.pop("output_loading_info", False)
        try:
            model, loading_info = super().from_pretrained(location, *model_args, output_loading_info=True, **kwargs)
        except Exception as error:
            config_fields = getattr(cls.config_class, "__dataclass_fields__", {})
            overrides = {key: value for key, value in kwargs.items() if key in config_fields}
            problem = damaged_checkpoint_problem(error, location, overrides)
            if problem is None:
                raise
            raise CheckpointError(problem) from error
        same_class = cls.__name__ in (stored.get("architectures") or ()) and stored.get("model_type") == cls.config_class.model_type
        new_modules = () if same_class or not stored else tuple(name for name, _ in model.named_children())
        problem = loading_problem(model, loading_info, location, allowed_missing=new_modules)
        if problem is not None:
            raise CheckpointError(problem)
        model._after_loading()
        return (model, loading_info) if wants_loading_info else model

    @classmethod
    def _refuse_other_model(cls, stored: Mapping[str, Any], location: str) -> None:
        stored_type = stored.get("model_type")
        accepted = (cls.config_class.model_type, *cls._compatible_model_types)
        if stored_type is not None and stored_type not in accepted:
            architectures = ", ".join(stored.get("architectures") or ()) or f"model_type {stored_type!r}"
            raise CheckpointError(
                f"{config_description(location)} holds a {architectures} checkpoint, not a {cls.config_class.model_type} "
                f"model: {cls.__name__} would start from random weights. Load it with the class that saved it, or with "
                "transformers.AutoModel."
            )

    def _after_loading(self) -> None:
        """Called on every model `from_pretrained` returns; nothing by default."""

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        writer = CheckpointMixin._checkpoint_writer
        if writer is None:
            return super().save_pretrained(save_directory, *args, **kwargs)
        return writer.save_model(self, super().save_pretrained, save_directory, *args, **kwargs)

    def push_to_hub(self, repo_id: str, *args, **kwargs) -> Any:
        writer = CheckpointMixin._checkpoint_writer
        if writer is None:
            return super().push_to_hub(repo_id, *args, **kwargs)
        return writer.push_model(self, repo_id, *args, **kwargs)


class CheckpointConfigMixin:
    """Package-extensible `save_pretrained` for the config of an entity model (put it before `PreTrainedConfig`): a
    config saved on its own carries the code that loads it."""

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        writer = CheckpointMixin._checkpoint_writer
        if writer is None:
            return super().save_pretrained(save_directory, *args, **kwargs)
        return writer.save_config(self, super().save_pretrained, save_directory, *args, **kwargs)


def _stored_config(location: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's config.json as a dict; empty when the caller passed a config object or none can be read (the
    load itself then says why)."""
    if isinstance(options.get("config"), PreTrainedConfig):
        return {}
    try:
        stored, _ = PreTrainedConfig.get_config_dict(
            location, **{key: options[key] for key in _CONFIG_LOOKUP_OPTIONS if key in options}
        )
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}
