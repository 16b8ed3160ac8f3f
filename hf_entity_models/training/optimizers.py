"""Optimizers for models that fine-tune a pretrained encoder under new layers."""

import torch
from torch import nn


def two_rate_adamw(
    model: nn.Module,
    pretrained: nn.Module,
    pretrained_lr: float = 3e-5,
    new_lr: float = 1e-4,
    weight_decay: float = 1e-4,
    new_weight_decay: float | None = None,
) -> torch.optim.AdamW:
    """AdamW with one learning rate for the pretrained encoder and another for the layers trained from scratch.

    ForceReader's recipe (section 4.3): 3e-5 for BERT, 1e-4 for the new layers, L2 regularisation with
    lambda = 1e-4 on all parameters (Eq. 8), warm-up. AdamW's decoupled weight decay stands in for the L2 term; give
    the warm-up to the Trainer (`TrainingArguments(warmup_steps=...)`), which schedules both groups: pass the
    optimizer as `Trainer(..., optimizers=(optimizer, None))`.

    Args:
        model: The whole model; every trainable parameter goes in exactly one group.
        pretrained: The submodule holding the pretrained weights (e.g. `model.forcereader.encoder`, or
            `model.base_model` for `BertForQuestionAnswering`).
        pretrained_lr: Learning rate of `pretrained`'s parameters.
        new_lr: Learning rate of every other parameter.
        weight_decay: Decoupled weight decay of all parameters.
        new_weight_decay: Decoupled weight decay of the new layers instead (default: `weight_decay`), e.g. a
            stronger one for heads that fit their training questions faster than the encoder learns to read.

    Raises:
        ValueError: `pretrained` is not a submodule of `model`, or holds all of its trainable parameters.

    Example:

    ```python
    >>> from transformers import BertConfig, BertForQuestionAnswering
    >>> model = BertForQuestionAnswering(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
    ...                                              intermediate_size=8))
    >>> optimizer = two_rate_adamw(model, model.base_model)
    >>> [group["lr"] for group in optimizer.param_groups]
    [3e-05, 0.0001]

    ```
    """
    pretrained_ids = {id(parameter) for parameter in pretrained.parameters()}
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    pretrained_params = [parameter for parameter in trainable if id(parameter) in pretrained_ids]
    new_params = [parameter for parameter in trainable if id(parameter) not in pretrained_ids]
    if not pretrained_params:
        raise ValueError("`pretrained` shares no trainable parameter with `model`: pass a submodule of the model.")
    if not new_params:
        raise ValueError("`pretrained` holds every trainable parameter of `model`: there are no new layers to train.")
    return torch.optim.AdamW(
        [
            {"params": pretrained_params, "lr": pretrained_lr},
            {
                "params": new_params,
                "lr": new_lr,
                "weight_decay": weight_decay if new_weight_decay is None else new_weight_decay,
            },
        ],
        weight_decay=weight_decay,
    )
