"""Language-model pre-training of the Referential Reader (paper section 3 and appendix A) with the stock
`transformers.Trainer`.

The paper pre-trains "using the same configuration" as coreference training (Adam at 1e-3, the Gumbel temperature
halved every 10 epochs), with early stopping on validation perplexity. Here that is: a constant learning rate (not
the Trainer's default linear decay), no gradient clipping, an evaluation every epoch (or every `eval_steps` steps),
the checkpoint with the lowest validation loss (= perplexity) loaded at the end, and `EarlyStoppingCallback`
stopping after `early_stopping_patience` evaluations without improvement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import EarlyStoppingCallback, Trainer, TrainingArguments

from ...training import GumbelTemperatureCallback, check_processes_connected
from .collator import lm_data_collator

__all__ = [
    "DEFAULT_LM_EARLY_STOPPING_PATIENCE",
    "build_refreader_lm_trainer",
    "refreader_lm_training_arguments",
]

# Evaluations without a lower validation loss before pre-training stops (the paper does not give its patience).
DEFAULT_LM_EARLY_STOPPING_PATIENCE = 3


def refreader_lm_training_arguments(
    output_dir: str,
    batch_size: int = 32,
    num_train_epochs: float = 20.0,
    learning_rate: float = 1e-3,
    eval_steps: int | None = None,
    seed: int = 0,
    **overrides: Any,
) -> TrainingArguments:
    """`TrainingArguments` for Referential Reader LM pre-training, following the paper.

    Adam at `learning_rate` (AdamW with weight decay 0), a constant rate, no gradient clipping; validation loss
    computed every epoch, or every `eval_steps` optimizer steps when given, a checkpoint saved at each evaluation,
    and the one with the lowest validation loss (perplexity) loaded at the end. `num_train_epochs` is an upper
    bound: early stopping (`build_refreader_lm_trainer`) usually ends training first. Any `TrainingArguments` field
    can be overridden.

    Args:
        output_dir: Trainer output folder (the evaluated checkpoints).
        batch_size: Blocks per device and step, for training and evaluation.
        num_train_epochs: Most epochs to train.
        learning_rate: Adam's rate (the paper: 1e-3).
        eval_steps: Evaluate (and save) every this many steps instead of every epoch.
        seed: Seed of the Trainer and of its data order.

    Example:

    ```python
    >>> args = refreader_lm_training_arguments("runs/refreader-lm", eval_steps=500)  # doctest: +SKIP
    >>> args.lr_scheduler_type, args.metric_for_best_model  # doctest: +SKIP
    (<SchedulerType.CONSTANT: 'constant'>, 'eval_loss')

    ```
    """
    if eval_steps is not None and (isinstance(eval_steps, bool) or not isinstance(eval_steps, int) or eval_steps < 1):
        raise ValueError(f"eval_steps must be a positive int (or None to evaluate every epoch), got {eval_steps!r}.")
    strategy = "epoch" if eval_steps is None else "steps"
    options: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        num_train_epochs=num_train_epochs,
        learning_rate=learning_rate,
        weight_decay=0.0,
        max_grad_norm=0.0,
        lr_scheduler_type="constant",
        eval_strategy=strategy,
        save_strategy=strategy,
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        logging_strategy=strategy,
        report_to="none",
        seed=seed,
        data_seed=seed,
        use_cpu=not torch.cuda.is_available(),
        # Pinned memory only speeds up copies to a GPU; on a CPU-only machine the DataLoader just warns about it.
        dataloader_pin_memory=torch.cuda.is_available(),
        dataloader_num_workers=0,
        # Every weight of the reader takes part in every step: spare DDP the search for unused parameters.
        ddp_find_unused_parameters=False,
    )
    if eval_steps is not None:
        options.update(eval_steps=eval_steps, save_steps=eval_steps, logging_steps=eval_steps)
    options.update(overrides)
    return TrainingArguments(**options)


def build_refreader_lm_trainer(
    model: torch.nn.Module,
    tokenizer: Any,
    train_dataset,
    eval_dataset,
    args: TrainingArguments,
    early_stopping_patience: int | None = DEFAULT_LM_EARLY_STOPPING_PATIENCE,
    extra_callbacks: Sequence = (),
) -> Trainer:
    """A stock `Trainer` for LM pre-training: the LM collator, the Gumbel schedule and early stopping on validation
    perplexity.

    Args:
        model: A `RefReaderForCausalLM` (the purely incremental reader).
        tokenizer: The tokenizer the blocks were built with (`build_lm_corpus`).
        train_dataset / eval_dataset: Blocks of `input_ids`, e.g. `corpus["train"]` and `corpus["validation"]`.
        args: From `refreader_lm_training_arguments`.
        early_stopping_patience: Evaluations without a lower validation loss before stopping (None disables it).
        extra_callbacks: More Trainer callbacks.

    Data parallel (``accelerate launch``): every process builds and trains the same trainer; the stock Trainer
    shards the blocks, gathers the validation loss (every process sees the same number, so early stopping and the
    best checkpoint agree) and saves checkpoints from the main process only.

    Raises:
        ValueError: Without `eval_dataset`, with arguments that do not select the lowest validation loss, or when N
            launched processes are not connected (`check_processes_connected`).

    Example:

    ```python
    >>> trainer = build_refreader_lm_trainer(model, tokenizer, corpus["train"], corpus["validation"], args)  # doctest: +SKIP
    >>> trainer.train()  # doctest: +SKIP

    ```
    """
    check_processes_connected(args)
    if eval_dataset is None:
        raise ValueError(
            "LM pre-training selects its checkpoint and stops on validation perplexity: pass eval_dataset "
            "(e.g. corpus['validation'])."
        )
    if args.metric_for_best_model not in ("eval_loss", "loss") or args.greater_is_better:
        raise ValueError(
            "args must select the lowest validation loss (metric_for_best_model='eval_loss', greater_is_better=False); "
            "build them with refreader_lm_training_arguments."
        )
    callbacks = [GumbelTemperatureCallback(), *extra_callbacks]
    if early_stopping_patience is not None:
        if early_stopping_patience < 1:
            raise ValueError(f"early_stopping_patience must be >= 1 (or None), got {early_stopping_patience}.")
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=early_stopping_patience))
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=lm_data_collator(tokenizer),
        callbacks=callbacks,
    )
