"""Pretrained encoders inside the package's models: the nested encoder config, and loading an encoder's weights.

Model-agnostic: written once here and imported by every model built around a pretrained encoder (frozen features or
fine-tuned); saving a model copies it next to the weights (see `hub.portable_code`). It imports only the standard
library, torch and transformers.
"""

import os

import torch
from transformers import AutoConfig, AutoModel, PreTrainedConfig, PreTrainedModel

from .checkpoints import CheckpointError, copy_weights, loading_problem

# A base model built from its config has a pooler that many checkpoints lack (one saved from a masked-LM head, or
# without the pooler): transformers fills it with fresh values. The readers never use the pooler's output.
UNUSED_ENCODER_WEIGHTS = ("pooler.",)


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
        CheckpointError: Naming the weights file, when weights are missing or left over (see `loading_problem`).

    Example:

    ```python
    >>> encoder = load_pretrained_encoder("bert-base-uncased")  # doctest: +SKIP

    ```
    """
    # Never the code of a folder: a pretrained encoder is a transformers model (no prompt, no import).
    encoder, loading_info = AutoModel.from_pretrained(
        encoder_name_or_path, output_loading_info=True, trust_remote_code=False
    )
    problem = loading_problem(encoder, loading_info, encoder_name_or_path, allowed_missing=unused_prefixes)
    if problem is not None:
        raise CheckpointError(problem)
    return encoder


def copy_encoder_weights(target: torch.nn.Module, source: PreTrainedModel, encoder_name_or_path: str) -> None:
    """Load `source`'s weights into the model's encoder, built from the same config; refuse any mismatch."""
    copy_weights(target, source.state_dict(), encoder_name_or_path)


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
