"""Pretrained encoders inside the package's models: the nested encoder config, and loading an encoder's weights.

Model-agnostic: written once here and imported by every model built around a pretrained encoder (frozen features or
fine-tuned); saving a model copies it next to the weights (see `portable_code`). It imports only torch and
transformers.
"""

import torch
from transformers import AutoConfig, AutoModel, PreTrainedConfig, PreTrainedModel


def load_pretrained_encoder(encoder_name_or_path: str) -> PreTrainedModel:
    """The pretrained encoder a model is built around (`from_encoder`)."""
    return AutoModel.from_pretrained(encoder_name_or_path)


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
