"""Pretrained encoders inside the package's models: the nested encoder config, and loading an encoder's weights.

Model-agnostic: written once here and imported by every model built around a pretrained encoder (frozen features or
fine-tuned); saving a model copies it next to the weights (see `portable_code`). It imports only the standard
library, torch and transformers.
"""

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from transformers import AutoConfig, AutoModel, PreTrainedConfig, PreTrainedModel

# A base model built from its config has a pooler that many checkpoints lack (one saved from a masked-LM head, or
# without the pooler): transformers fills it with fresh values. The readers never use the pooler's output.
UNUSED_ENCODER_WEIGHTS = ("pooler.",)
# How many weight names an error message lists (a missing layer alone has 16 of them).
_NAMES_SHOWN = 3


def load_pretrained_encoder(
    encoder_name_or_path: str | os.PathLike, unused_prefixes: tuple[str, ...] = UNUSED_ENCODER_WEIGHTS
) -> PreTrainedModel:
    """The pretrained encoder a model is built around (`from_encoder`), refusing weights that do not fit its config.

    `from_pretrained` alone fills weights the checkpoint lacks with random values and drops weights the config has no
    place for (only a log line says so): a config edited to 8 layers over weights of 6 would give 2 random layers.

    Args:
        encoder_name_or_path: A Hub id or a folder written by `save_pretrained`.
        unused_prefixes: Weights that may be missing because the caller never reads them.

    Raises:
        ValueError: Naming the weights file, when weights are missing or left over (see `check_loading_info`).

    Example:

    ```python
    >>> encoder = load_pretrained_encoder("bert-base-uncased")  # doctest: +SKIP

    ```
    """
    encoder, loading_info = AutoModel.from_pretrained(encoder_name_or_path, output_loading_info=True)
    check_loading_info(encoder, loading_info, encoder_name_or_path, unused_prefixes)
    return encoder


def check_loading_info(
    model: PreTrainedModel,
    loading_info: Mapping[str, Iterable[Any]],
    name_or_path: str | os.PathLike,
    unused_prefixes: tuple[str, ...] = (),
) -> None:
    """Refuse a load (`from_pretrained(..., output_loading_info=True)`) that left weights random or unused.

    transformers has already removed what a class expects to miss (tied weights, `_keys_to_ignore_on_load_missing`,
    `_keys_to_ignore_on_load_unexpected`). A left-over weight counts only when it belongs to a module the model has
    (``encoder.layer.6.*`` with a 6-layer config, ``transformer.h.1.*`` in a one-layer head model): the heads of a
    checkpoint saved from a task model (``cls.*``,
    ``qa_outputs.*``, a pooler the model lacks) are dropped on purpose when its base model is loaded.

    Args:
        model: The loaded model.
        loading_info: What `from_pretrained` returned with `output_loading_info=True`.
        name_or_path: Where the model was loaded from (named in the message).
        unused_prefixes: Missing weights that are acceptable (modules the caller never reads).

    Raises:
        ValueError: In one line: the weights file, the config, the missing and left-over weights, and the fix.
    """
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""
    modules = {name for name, _ in model.named_children()}
    # A base model's own modules, for keys stored under the prefix of a head model (``bert.encoder.layer.6.*``).
    base_model = getattr(model, model.base_model_prefix, model) if model.base_model_prefix else model
    base_modules = {name for name, _ in base_model.named_children()}
    missing = sorted(
        str(key) for key in loading_info.get("missing_keys", ()) if not str(key).startswith(unused_prefixes)
    )
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
        return
    location = os.fspath(name_or_path)
    if os.path.isdir(location):
        weights = next(
            (
                os.path.join(location, name)
                for name in ("model.safetensors", "model.safetensors.index.json")
                if os.path.isfile(os.path.join(location, name))
            ),
            f"the weights in {location}",
        )
        config = os.path.join(location, "config.json")
    else:
        weights, config = f"the weights of {location}", f"the config.json of {location}"
    problems = [
        f"{label} {len(keys)} weight{'s' if len(keys) != 1 else ''} {what} ({_some(keys)})"
        for label, keys, what in (
            ("it lacks", missing, "the config asks for"),
            ("holds", unexpected, "the config has no place for"),
            ("holds", mismatched, "of another shape than the config's"),
        )
        if keys
    ]
    raise ValueError(
        f"{weights} does not fit {config}: " + " and ".join(problems) + "; the model would run with random or "
        "missing layers. Restore the config.json saved with these weights (e.g. its num_hidden_layers), or give a "
        "complete checkpoint."
    )


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    return shown if len(names) <= _NAMES_SHOWN else f"{shown}, ... {len(names) - _NAMES_SHOWN} more"


def copy_encoder_weights(target: torch.nn.Module, source: PreTrainedModel, encoder_name_or_path: str) -> None:
    """Load `source`'s weights into the model's encoder, built from the same config; refuse any mismatch."""
    missing, unexpected = target.load_state_dict(source.state_dict(), strict=False)
    if missing or unexpected:
        raise ValueError(
            f"The encoder weights of {encoder_name_or_path!r} do not fit the encoder built from its config "
            f"(missing: {missing}, unexpected: {unexpected})."
        )


def build_encoder_config(
    encoder_config: PreTrainedConfig | dict | None, default_model_type: str | None
) -> PreTrainedConfig | None:
    """The encoder's config from a config, a dict (as read from config.json) or None.

    None gives the default configuration of `default_model_type` (e.g. BERT-base for "bert"), or no encoder when
    `default_model_type` is None (a model that can also read without an encoder).

    Example:

    ```python
    >>> build_encoder_config({"model_type": "bert", "hidden_size": 32}, default_model_type="bert").hidden_size
    32

    ```
    """
    if encoder_config is None:
        return None if default_model_type is None else AutoConfig.for_model(default_model_type)
    if isinstance(encoder_config, PreTrainedConfig):
        return encoder_config
    if not isinstance(encoder_config, dict):
        raise TypeError(
            f"encoder_config must be a PreTrainedConfig, a dict or None, got {type(encoder_config).__name__}."
        )
    fields = dict(encoder_config)
    model_type = fields.pop("model_type", None) or default_model_type
    if model_type is None:
        raise ValueError(
            "encoder_config has no 'model_type': give the encoder's config (e.g. AutoConfig.from_pretrained(name)) "
            "or a dict with its model_type."
        )
    return AutoConfig.for_model(model_type, **fields)
