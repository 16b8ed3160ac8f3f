"""Loading an entity-model checkpoint strictly, and the one place where the package extends saving.

`PreTrainedModel.from_pretrained` fills a weight the checkpoint lacks with random values, drops a stored weight the
config has no place for, and builds whatever class it is asked for from a folder of another model: only a log line
says so. A coreference folder loaded as a question-answering model, or a `config.json` edited to one layer more, would
answer with random layers. `CheckpointMixin.from_pretrained` refuses such a load with a `CheckpointError` naming the file, from
the loading report transformers returns (`output_loading_info=True`): `loading_problem` is the one weight-fit check
of the package.

Saved next to the weights with every model (a checkpoint must load strictly without the package too), so it imports
only the standard library and transformers. What the package adds to a save (the shared code made importable next to
the weights, the code of the pipelines a checkpoint declares, the model card) lives in the package
(`hf_entity_models.hub`), which installs it as `CheckpointMixin._checkpoint_writer`; in a checkpoint loaded without
the package, saving and pushing are transformers' own.
"""

import contextlib
import logging
import dataclasses
import inspect
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar, NamedTuple

from transformers import PreTrainedConfig
from transformers.utils import logging as transformers_logging

WEIGHT_FILE_NAMES = ("model.safetensors", "model.safetensors.index.json")
# How many weight names a message lists (a missing layer alone has 16 of them).
_NAMES_SHOWN = 3
# `from_pretrained` options that say where to find a config.json, passed on when the stored model type is read.
_logger = transformers_logging.get_logger(__name__)
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
    >>> loading_problem(model, {"missing_keys": ["encoder.layer.0.output.dense.bias"]}, "runs/encoder").split(":")[0]
    'the weights of runs/encoder does not fit the config.json of runs/encoder'

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
    models it starts from, e.g. GPT-2 for a model built on GPT-2's blocks) and override `_after_loading` (e.g. to freeze parameters again:
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

        `strict=False` loads as transformers does (weights left random or dropped, and a folder of another model,
        are only logged), for a checkpoint you mean to complete, e.g. one whose new module you will train.

        Raises:
            CheckpointError: The folder has no config.json or (strictly) holds another model, the weights file is
                truncated or not safetensors, or the config does not fit the stored weights (a layer more or less,
                other sizes: pass `ignore_mismatched_sizes=True` to re-initialise resized tensors instead).
        """
        location = os.fspath(pretrained_model_name_or_path)
        strict = kwargs.pop("strict", True)
        refuse_folder_without_config(location, kwargs)
        stored = _stored_config(location, kwargs)
        if strict:
            cls._refuse_other_model(stored, location)
        wants_loading_info = kwargs.pop("output_loading_info", False)
        try:
            # transformers' load report (a table of missing and unexpected weights) says nothing a strict load does
            # not say better: what does not fit raises below, and what may start untrained is logged in one line.
            with _load_report_hidden(strict):
                model, loading_info = super().from_pretrained(location, *model_args, output_loading_info=True, **kwargs)
        except Exception as error:
            config_fields = getattr(cls.config_class, "__dataclass_fields__", {})
            overrides = {key: value for key, value in kwargs.items() if key in config_fields}
            problem = damaged_checkpoint_problem(error, location, overrides)
            if problem is None:
                raise
            raise CheckpointError(problem) from error
        same_model = stored.get("model_type") == cls.config_class.model_type
        if not stored or (same_model and cls.__name__ in (stored.get("architectures") or ())):
            new_weights: tuple[str, ...] = ()  # saved by this class: every weight must come from the checkpoint
        elif same_model:  # saved by another class of this model: only a head it lacked may start random
            new_weights = _new_head_weights(model, loading_info.get("missing_keys", ()))
        else:  # a compatible model (e.g. GPT-2 under a model built on it): the modules it lacks start random
            new_weights = tuple(name for name, _ in model.named_children())
        problem = loading_problem(model, loading_info, location, allowed_missing=new_weights)
        if problem is not None and strict:
            raise CheckpointError(problem)
        # Modules named two levels down where a weight is that deep ("transformer.entity_memory", "lm_head").
        untrained = sorted({".".join(str(key).split(".")[:-1][:2]) for key in loading_info.get("missing_keys", ())})
        if strict and untrained:
            saved_by = ", ".join(stored.get("architectures") or ()) or "another model"
            _logger.warning(f"{cls.__name__}: {', '.join(untrained)} start untrained ({location} was saved by {saved_by}).")
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


class SizeLimit(NamedTuple):
    """The largest value a size field of a config may take, and why."""

    maximum: int
    reason: str


# What a config may ask for. The limits lie far above every real checkpoint these models are built from or on (the
# widest: BERT-large and GPT-2 XL, hidden sizes 1,024 and 1,600, 1.6 billion parameters), so that they refuse only a
# slip (a digit too many, a byte count for a count of cells), in one line, before torch tries to allocate the weights
# (`hidden_size=10_000_000` asked for 184 GB) or torch.compile to trace the graph.
WIDTH_LIMIT = SizeLimit(
    65_536, "wider than the layers of any real model (BERT-large: 1,024, GPT-2 XL: 1,600, the largest language models "
    "about 16,000)"
)
VOCABULARY_LIMIT = SizeLimit(4_194_304, "larger than any real vocabulary (the largest have about 256,000 tokens)")
LAYERS_LIMIT = SizeLimit(
    1_024, "deeper than any real model (GPT-2 XL: 48 blocks, the deepest language models about 130)"
)
POSITIONS_LIMIT = SizeLimit(
    1_048_576, "longer than the context of any real model, and the position table grows with it"
)
MEMORY_CELLS_LIMIT = SizeLimit(
    256, "the whole memory is read and written at every token, and the papers use 2 to 20 cells"
)
# The compiled recurrence traces every step of a chunk into one graph: 16 steps took about 2 minutes to compile on
# a CPU, compile time and memory grow with the steps (100,000 steps still compiled after 13 minutes, at 5.4 GB,
# deaf to Ctrl-C), and beyond a few dozen steps a longer chunk saves no kernel launch worth having.
MEMORY_CHUNK_LIMIT = SizeLimit(
    128, "the compiled recurrence traces every step of a chunk into one graph, so compile time and memory grow with "
    "it (16 steps: about 2 minutes on a CPU), while past a few dozen steps a longer chunk saves no launch worth having"
)
# 40 GB of float32 weights before a single activation: six times GPT-2 XL.
PARAMETER_LIMIT = 10_000_000_000


def check_size_limits(config: Any, limits: Mapping[str, SizeLimit], parameters: int = 0) -> None:
    """Refuse a size field above its limit, and a model whose estimated parameter count is above `PARAMETER_LIMIT`.

    Args:
        config: The config; each name in `limits` is one of its fields (an int, a list of ints or None).
        limits: The size fields to check and their limits (`WIDTH_LIMIT`, `MEMORY_CHUNK_LIMIT`, ...).
        parameters: The config's estimate of its model's parameter count (its largest matrices are enough).

    Raises:
        ValueError: In one line, naming the field, its value, the limit and why.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> check_size_limits(BertConfig(hidden_size=768), {"hidden_size": WIDTH_LIMIT})
    >>> check_size_limits(BertConfig(hidden_size=10_000_000), {"hidden_size": WIDTH_LIMIT})
    Traceback (most recent call last):
        ...
    ValueError: BertConfig.hidden_size is 10,000,000, above the limit of 65,536: wider than the layers of any real model (BERT-large: 1,024, GPT-2 XL: 1,600, the largest language models about 16,000). Use a smaller value (the default is 768).

    ```
    """
    config_name = type(config).__name__
    for name, limit in limits.items():
        value = getattr(config, name)
        largest = max(value, default=0) if isinstance(value, (list, tuple)) else value
        if isinstance(largest, int) and largest > limit.maximum:
            shown = f"{value!r} (a size of {largest:,})" if isinstance(value, (list, tuple)) else f"{value:,}"
            default = field_default(type(config), name)
            advice = "" if default is None else f" (the default is {default!r})"
            raise ValueError(
                f"{config_name}.{name} is {shown}, above the limit of {limit.maximum:,}: {limit.reason}. Use a smaller "
                f"value{advice}."
            )
    if parameters > PARAMETER_LIMIT:
        sizes = ", ".join(f"{name}={getattr(config, name)!r}" for name in limits)
        raise ValueError(
            f"{config_name} asks for about {parameters:,} parameters ({4 * parameters / 2**30:,.0f} GiB of float32 "
            f"weights), above the limit of {PARAMETER_LIMIT:,} (six times GPT-2 XL; no real checkpoint of these models "
            f"comes near), with {sizes}. Use smaller sizes."
        )


def transformer_parameter_estimate(config: Any) -> int:
    """About how many parameters a Transformer built from `config` (a pretrained encoder's or reader's config) has:
    token and position embeddings and, per layer, the attention's four square matrices and the feed-forward pair."""
    if config is None:
        return 0
    width = _int_attribute(config, "hidden_size") or _int_attribute(config, "d_model")
    inner = _int_attribute(config, "intermediate_size") or _int_attribute(config, "d_ff") or 4 * width
    layers = _int_attribute(config, "num_hidden_layers")
    if getattr(config, "is_encoder_decoder", False):
        layers = max(layers, _int_attribute(config, "encoder_layers") + _int_attribute(config, "decoder_layers"))
    tokens = _int_attribute(config, "vocab_size") + _int_attribute(config, "max_position_embeddings")
    return tokens * width + layers * (4 * width * width + 2 * width * inner)


def _int_attribute(config: Any, name: str) -> int:
    value = getattr(config, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def field_default(config_class: type, name: str) -> Any:
    field = getattr(config_class, "__dataclass_fields__", {}).get(name)
    if field is None or field.default is dataclasses.MISSING:
        return None
    return field.default


class _ExplainedConstruction(type):
    """Metaclass of `CheckpointConfigMixin`: builds a config inside the package's error explainer when the package is
    installed (huggingface_hub's strict dataclasses raise a long chain of validator frames, inside the call that builds
    the config, from `Config(...)`, `from_dict`, `from_pretrained` and the Auto classes alike)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        with _explained(lambda explainer: explainer.building(cls, kwargs)):
            return super().__call__(*args, **kwargs)


def _explained(context: Any) -> Any:
    """`context(explainer)` when the package installed its config error explainer, else nothing."""
    explainer = CheckpointConfigMixin._error_explainer
    return contextlib.nullcontext() if explainer is None else context(explainer)


class CheckpointConfigMixin(metaclass=_ExplainedConstruction):
    """What the package's configs share (put it first in the bases, before `PreTrainedConfig`):

    * fields passed to `from_pretrained` / `from_dict` are built into the config and checked like the stored ones;
    * a key naming a read-only property (e.g. `preset`, which the other fields decide) is accepted when it agrees with
      them and refused with a clear message when not;
    * with the package installed, errors in one line (`hf_entity_models.config_errors`, installed as
      `_error_explainer`), and a config saved on its own carries the code that loads it.
    """

    # Installed by the package: explains wrongly typed or invalid values in one line (None in a bare checkpoint).
    _error_explainer: ClassVar[Any] = None

    def __post_init__(self, **kwargs):
        # A read-only property is not a setting but follows from the fields (a `preset` is the named design the
        # switches make, a `vocab_size` may be the sub-config's). Letting the key set the fields would make two
        # truths in one file (a stored switch and a name that says otherwise) and need a rule for which wins;
        # refusing it outright would refuse a file that merely records what the fields make. So a value that agrees
        # is accepted and dropped, and one that does not is refused with what to do instead.
        derived = {name: kwargs.pop(name) for name in list(kwargs) if _is_read_only_property(type(self), name)}
        super().__post_init__(**kwargs)
        for name, given in derived.items():
            actual = getattr(self, name)
            if given != actual:
                raise ValueError(self._derived_property_problem(name, given, actual))

    def _derived_property_problem(self, name: str, given: Any, actual: Any) -> str:
        cls = type(self).__name__
        message = (
            f"{cls}.{name} is not a setting but follows from the other fields: they make it {actual!r}, not "
            f"{given!r}."
        )
        if name == "preset" and hasattr(type(self), "from_preset"):
            return (
                f"{message} To get the {given!r} preset, build the config with {cls}.from_preset({given!r}, ...) (it "
                f"sets the fields that preset fixes), or set those fields; otherwise remove `{name}`."
            )
        return f"{message} Change those fields instead, or remove `{name}`."

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args, **kwargs):
        location = os.fspath(pretrained_model_name_or_path)
        refuse_folder_without_config(location, kwargs)
        with _explained(lambda explainer: explainer.reading_file(location)):
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        """`PreTrainedConfig.from_dict`, where fields passed as keyword arguments are built into the config with the
        stored ones (transformers sets them afterwards, past every check)."""
        overrides = {key: kwargs.pop(key) for key in list(kwargs) if key in _overridable_fields(cls)}
        with _explained(lambda explainer: explainer.reading_dict(cls, config_dict, overrides, kwargs)):
            return super().from_dict({**config_dict, **overrides}, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        with _explained(lambda explainer: explainer.building(type(self), {})):  # saving runs the class checks again
            writer = CheckpointMixin._checkpoint_writer
            if writer is None:
                return super().save_pretrained(save_directory, *args, **kwargs)
            return writer.save_config(self, super().save_pretrained, save_directory, *args, **kwargs)


def _overridable_fields(config_class: type) -> set[str]:
    """The fields of a config class that `from_dict` builds in from keyword arguments: its own and those of the
    config it extends (GPT-2's for a model built on GPT-2); not transformers' generic ones (dtype,
    output_hidden_states, ...), nor sub-configs, which transformers merges field by field."""
    own = set(getattr(config_class, "__dataclass_fields__", {}))
    generic = set(PreTrainedConfig.__dataclass_fields__)
    return own - generic - set(getattr(config_class, "sub_configs", {}) or {})


def _is_read_only_property(config_class: type, name: str) -> bool:
    attribute = inspect.getattr_static(config_class, name, None)
    return isinstance(attribute, property) and attribute.fset is None


def _new_head_weights(model: Any, missing_keys: Iterable[Any]) -> tuple[str, ...]:
    """The missing weights of the modules a head model adds to its base model and of which the checkpoint holds
    nothing (e.g. the `lm_head` of a coreference checkpoint loaded as a language model). None in a base model, and
    never a weight of the base model: a layer of it missing is a checkpoint that does not fit its config."""
    base_model_prefix = getattr(model, "base_model_prefix", "")
    if not base_model_prefix or getattr(model, base_model_prefix, None) is None:
        return ()  # the model is the base model: whatever it lacks, the saving class had too
    missing = {str(key) for key in missing_keys}
    names_of: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(parameter), []).append(name)
    tied = {name for names in names_of.values() if len(names) > 1 for name in names}  # loaded with their twin
    by_module: dict[str, list[str]] = {}
    for name in model.state_dict():
        if name not in tied:
            by_module.setdefault(name.split(".")[0], []).append(name)
    return tuple(
        name
        for module, names in by_module.items()
        if module != base_model_prefix and all(name in missing for name in names)
        for name in names
    )


@contextlib.contextmanager
def _load_report_hidden(hidden: bool) -> Iterator[None]:
    # A filter, not a level: at WARNING or above, transformers 5.24 logs each layer name its TP plan leaves unsharded.
    report_logger = logging.getLogger("transformers.modeling_utils")

    def keep(record: logging.LogRecord) -> bool:
        return not (hidden and record.funcName == "log_state_dict_report")

    report_logger.addFilter(keep)
    try:
        yield
    finally:
        report_logger.removeFilter(keep)


def refuse_folder_without_config(location: str, options: Mapping[str, Any]) -> None:
    """Refuse a folder without config.json (unless `options` give a config): transformers builds a default one."""
    folder = os.path.join(location, subfolder) if (subfolder := options.get("subfolder")) else location
    if options.get("config") is None and os.path.isdir(folder) and not os.path.isfile(os.path.join(folder, "config.json")):
        raise CheckpointError(f"{folder} has no config.json: it is not a saved checkpoint; give the folder that "
                              "`save_pretrained` wrote (config.json next to the weights), or put back its config.json.")


def _stored_config(location: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The checkpoint's config.json as a dict (also when the caller passed a config object, as the Auto classes do: the
    stored file says which class saved the weights); empty when none can be read (the load itself then says why)."""
    try:
        stored, _ = PreTrainedConfig.get_config_dict(
            location, **{key: options[key] for key in _CONFIG_LOOKUP_OPTIONS if key in options}
        )
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}
