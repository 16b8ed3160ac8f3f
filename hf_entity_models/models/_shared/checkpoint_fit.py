"""Refuse, when a pipeline is built, a model whose config does not fit the weights file it was loaded from.

`from_pretrained` builds the model its config.json describes and fills it from the weights file; a weight the config
asks for that the file lacks gets random values, a weight of the file the config has no place for is dropped, and
only a log line says so. A config.json edited to 8 layers over weights saved with 6 loads with 2 random layers, and a
pipeline would answer with them. `pipeline()` loads the model itself, so a pipeline never sees that loading report:
`check_weights_fit_config` rebuilds it from the tensor NAMES of the file (the safetensors header, or the index of a
sharded checkpoint; no tensor is read), renamed the way `from_pretrained` renames them.

Shared by the question-answering and the coreference pipelines; saving a checkpoint copies it next to the pipeline
(see `portable_code`), so it imports only the standard library, torch, transformers and two of transformers' own
dependencies (safetensors, huggingface_hub).
"""

import json
import os
from types import SimpleNamespace
from typing import Any

import torch
from transformers import PreTrainedModel

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
# How many weight names the message lists (a missing layer alone has 16 of them).
_NAMES_SHOWN = 3


def check_weights_fit_config(model: Any) -> None:
    """Refuse a model that `from_pretrained` loaded with weights left random or dropped.

    Compares the model's weights with the tensor names of the safetensors file at ``model.name_or_path`` (a local
    folder, or a Hub id whose files are in the local cache), as `from_pretrained` does: names renamed by the
    conversions it applied (old ``LayerNorm.gamma``/``beta`` names, a ``key_mapping``), the base-model prefix added
    or stripped, tied weights and tensors that share storage counted once, and the class's
    ``_keys_to_ignore_on_load_missing`` / ``_keys_to_ignore_on_load_unexpected`` patterns honoured (non-persistent
    buffers are never saved). A left-over weight counts only when it belongs to a module the model has (a layer the
    config dropped): the heads of a checkpoint saved from another task model (``cls.*``, ``lm_head.*``) are dropped
    on purpose.

    Nothing is checked, and nothing refused, where the file cannot be known or read: a model built in memory, a
    pickle checkpoint, a quantized model or one with adapters, a conversion that merges or splits tensors.

    Args:
        model: The model a pipeline was given or loaded.

    Raises:
        ValueError: In one line: the config.json, the weights file, the missing and left-over weights, and the fix.

    Example:

    ```python
    >>> model = AutoModelForQuestionAnswering.from_pretrained("runs/reader")  # doctest: +SKIP
    >>> check_weights_fit_config(model)  # doctest: +SKIP
    ValueError: runs/reader/config.json does not fit runs/reader/model.safetensors: the weights file lacks 16
    weights the config asks for (bert.encoder.layer.6.attention.output.LayerNorm.bias, ...) ...

    ```
    """
    if not _loaded_plainly(model):
        return
    location, weights_file = _weights_file(model)
    if weights_file is None:
        return
    checkpoint_names = _tensor_names(weights_file)
    if checkpoint_names is None:
        return
    missing, unexpected = weights_config_mismatch(model, checkpoint_names)
    if not missing and not unexpected:
        return
    if os.path.isdir(location):
        config_file = os.path.join(location, "config.json")
    else:
        config_file = f"the config.json of {location}"
    problems = []
    if missing:
        problems.append(f"lacks {_count(missing)} the config asks for ({_some(missing)})")
    if unexpected:
        problems.append(f"holds {_count(unexpected)} the config has no place for ({_some(unexpected)})")
    raise ValueError(
        f"{config_file} does not fit {weights_file}: the weights file " + " and ".join(problems) + ", so the model "
        "would answer with random or dropped layers. Use the config.json saved with these weights (e.g. its number "
        "of layers), or a complete checkpoint."
    )


def weights_config_mismatch(model: Any, checkpoint_names: set[str]) -> tuple[list[str], list[str]]:
    """The model's weights the checkpoint lacks, and the checkpoint's weights the model has no place for.

    Both sorted, after the renaming and the exceptions `from_pretrained` applies (see `check_weights_fit_config`);
    two empty lists when the names cannot be mapped as `from_pretrained` maps them.
    """
    state = model.state_dict()
    loaded = _loaded_names(model, checkpoint_names, state)
    if loaded is None:
        return [], []
    missing = set(state) - loaded
    # A tied weight is saved once; tensors that share storage (modules tied in custom code) load together.
    for group in _tied_groups(model, state):
        if group & loaded:
            missing -= group
    modules = {name for name, _ in model.named_modules()}
    unexpected = {name for name in loaded - set(state) if _left_over(name, modules, model.base_model_prefix)}
    report = SimpleNamespace(missing_keys=missing, unexpected_keys=unexpected)
    adjust = getattr(model, "_adjust_missing_and_unexpected_keys", None)
    if callable(adjust):
        adjust(report)  # the class's _keys_to_ignore_on_load_* patterns, as from_pretrained applies them
    return sorted(report.missing_keys), sorted(report.unexpected_keys)


def _loaded_plainly(model: Any) -> bool:
    """Whether the model's state dict should hold exactly the weights of its file."""
    if not isinstance(model, PreTrainedModel):
        return False  # wrapped (torch.compile, PEFT): its state dict names differ from the file's
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return False  # quantized layers carry extra state
    if getattr(model, "_hf_peft_config_loaded", False):
        return False  # adapter weights live in other files
    return True


def _weights_file(model: Any) -> tuple[str, str | None]:
    """(where the model came from, its safetensors file or index), the file None when there is none to read."""
    location = str(getattr(model, "name_or_path", "") or "")
    if not location:
        return location, None
    if os.path.isdir(location):
        for name in (WEIGHTS_NAME, WEIGHTS_INDEX_NAME):  # the order in which from_pretrained looks for them
            path = os.path.join(location, name)
            if os.path.isfile(path):
                return location, path
        return location, None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return location, None
    revision = getattr(model.config, "_commit_hash", None)
    for name in (WEIGHTS_NAME, WEIGHTS_INDEX_NAME):
        try:
            path = try_to_load_from_cache(location, name, revision=revision)
        except (ValueError, OSError):  # not a repo id (e.g. a folder that no longer exists): nothing to compare with
            return location, None
        if isinstance(path, str) and os.path.isfile(path):
            return location, path
    return location, None


def _tensor_names(weights_file: str) -> set[str] | None:
    """The tensor names of a safetensors file (its header only) or of a sharded checkpoint (its index); None for a
    file that cannot be read (from_pretrained, which read it, would have refused a damaged one already)."""
    from safetensors import SafetensorError, safe_open

    try:
        if weights_file.endswith(".json"):
            with open(weights_file, encoding="utf-8") as index:
                return set(json.load(index)["weight_map"])
        with safe_open(weights_file, framework="pt") as weights:
            return set(weights.keys())
    except (OSError, ValueError, KeyError, TypeError, SafetensorError):
        return None


def _loaded_names(model: Any, checkpoint_names: set[str], state: dict[str, torch.Tensor]) -> set[str] | None:
    """The model names `from_pretrained` loads the checkpoint names into; None when a conversion merges or splits
    tensors (their names alone do not tell which weights they fill)."""
    try:
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:
        WeightConverter = WeightRenaming = rename_source_key = None
    conversions = getattr(model, "_weight_conversions", None)  # those the loading applied
    if conversions is None and rename_source_key is not None:
        try:
            from transformers.conversion_mapping import get_model_conversion_mapping

            conversions = get_model_conversion_mapping(model)
        except (ImportError, AttributeError, KeyError, TypeError, ValueError):  # another transformers release
            return None
    prefix = model.base_model_prefix or None
    if not conversions:
        return {_with_prefix_as_loaded(name, prefix, state) for name in checkpoint_names}
    if rename_source_key is None:
        return None  # names were converted, by code this transformers release does not expose
    renamings = [entry for entry in conversions if isinstance(entry, WeightRenaming)]
    converters = [entry for entry in conversions if isinstance(entry, WeightConverter)]
    if len(renamings) + len(converters) != len(conversions):
        return None  # a kind of conversion this file does not know
    loaded = set()
    for name in checkpoint_names:
        renamed, converted_by = rename_source_key(name, renamings, converters, prefix, state)
        if renamed not in state and name in state:
            renamed, converted_by = rename_source_key(name, [], [], prefix, state)
        if converted_by is not None:
            return None
        loaded.add(renamed)
    return loaded


def _with_prefix_as_loaded(name: str, prefix: str | None, state: dict[str, torch.Tensor]) -> str:
    """A head model loads a base-model checkpoint by adding its prefix; a base model, a head checkpoint by removing
    it."""
    if prefix is None or name in state:
        return name
    if name.startswith(f"{prefix}.") and name[len(prefix) + 1 :] in state:
        return name[len(prefix) + 1 :]
    if f"{prefix}.{name}" in state:
        return f"{prefix}.{name}"
    return name


def _tied_groups(model: Any, state: dict[str, torch.Tensor]) -> list[set[str]]:
    """Names that load together: the tied weights of the model (as its config ties them) and tensors that share
    storage."""
    groups = [{target, source} for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items()]
    sharing: dict[tuple, set[str]] = {}
    for name, tensor in state.items():
        if tensor.device.type != "meta" and tensor.numel() > 0:
            key = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))
            sharing.setdefault(key, set()).add(name)
    return groups + [names for names in sharing.values() if len(names) > 1]


def _left_over(name: str, modules: set[str], prefix: str) -> bool:
    """Whether a weight the model has no place for belongs to a module the model has (``encoder.layer.6.*`` with 6
    layers), rather than to the head of another task model (``cls.*``), which loading drops on purpose.

    A pooler the model does not build is dropped on purpose too: transformers' question-answering and token heads
    leave the base model's pooler out, and many checkpoints of those heads (saved by older releases) still hold it.
    """
    parts = name.split(".")
    if parts[0] not in modules and prefix and parts[0] == prefix:
        parts = parts[1:]  # a head checkpoint's name that a base model could not place
    if "pooler" in parts[:-1] and ".".join(parts[: parts.index("pooler") + 1]) not in modules:
        return False
    return parts[0] in modules


def _count(names: list[str]) -> str:
    return f"{len(names)} weight{'s' if len(names) != 1 else ''}"


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown if len(names) <= _NAMES_SHOWN else f"{shown}, ... {len(names) - _NAMES_SHOWN} more"
