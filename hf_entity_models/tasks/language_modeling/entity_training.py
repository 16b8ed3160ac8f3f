"""Training an entity-aware language model (GPT2E) — or, for comparison, a plain causal LM — with the stock
`transformers.Trainer` over consecutive windows of documents.

GPT2E carries each document's entity states from one window to the next. The training rows are therefore ordered
into `batch_size` streams of documents (`order_windows_for_streams`) and read sequentially, and the model keeps the
entity states in its document store (`document_ids` / `window_index` in the batch). With `batch_size=1` this is the
paper's set-up: one window per step, the entity representations updated at the end of every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from transformers import Trainer, TrainingArguments

from .entities import EntityLanguageModelingCollator, order_windows_for_streams
from .entity_evaluation import entity_perplexity, reads_entities

__all__ = [
    "EntityLMCollatorFor",
    "build_entity_lm_trainer",
    "entity_lm_training_arguments",
    "evaluate_entity_lm",
]

# Columns of an entity-LM window that only GPT2E reads.
_ENTITY_FIELDS = ("entity_ids", "document_ids", "window_index")


def entity_lm_training_arguments(
    output_dir: str,
    batch_size: int = 8,
    num_train_epochs: float = 1.0,
    learning_rate: float = 5e-4,
    seed: int = 0,
    **overrides: Any,
) -> TrainingArguments:
    """`TrainingArguments` for entity-LM windows: sequential sampling (the rows are ordered into streams of
    documents), the window columns kept for the collator, AdamW with 10% warm-up and linear decay.

    The paper trains GPT-2 small with a learning rate of 2e-5 from pre-trained-size data; the default here, 5e-4, is
    for small models trained from scratch. Any `TrainingArguments` field can be overridden.

    Example:
        >>> args = entity_lm_training_arguments("runs/gpt2e", batch_size=1, max_steps=100)  # doctest: +SKIP
    """
    options = dict(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        num_train_epochs=num_train_epochs,
        learning_rate=learning_rate,
        weight_decay=0.01,
        warmup_steps=0.1,
        lr_scheduler_type="linear",
        seed=seed,
        data_seed=seed,
        train_sampling_strategy="sequential",
        remove_unused_columns=False,
        dataloader_drop_last=False,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=10,
        report_to=[],
    )
    options.update(overrides)
    return TrainingArguments(**options)


@dataclass
class EntityLMCollatorFor:
    """The entity-LM collator for one model: GPT2E gets the entity columns, a plain causal LM (GPT-2) does not."""

    pad_token_id: int
    with_entities: bool

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        batch = EntityLanguageModelingCollator(pad_token_id=self.pad_token_id)(examples)
        if not self.with_entities:
            for field in _ENTITY_FIELDS:
                batch.pop(field, None)
        return batch


def build_entity_lm_trainer(
    model: torch.nn.Module,
    tokenizer: Any,
    train_windows: datasets.Dataset,
    args: TrainingArguments,
    eval_windows: datasets.Dataset | None = None,
    **trainer_options: Any,
) -> Trainer:
    """A stock `Trainer` over entity-LM windows, with the rows ordered for the per-document entity states.

    Args:
        model: `GPT2EForCausalLM` (entity ids and the document store) or any causal LM (tokens only).
        tokenizer: The tokenizer of the windows (saved with the model).
        train_windows: Rows of `entity_lm_windows` / `load_litbank_entity_lm`.
        args: From `entity_lm_training_arguments`; it must sample sequentially.
        eval_windows: Optional rows for `trainer.evaluate()` (its `eval_loss`; the reported perplexity is
            `evaluate_entity_lm`'s, token-weighted over whole documents).
        trainer_options: Passed to `Trainer` (callbacks, ...).

    Raises:
        ValueError: If the arguments do not sample sequentially or drop the window columns.
    """
    if args.train_sampling_strategy != "sequential":
        raise ValueError(
            "Entity-LM windows must be read in order (each document's windows one after the other): build the "
            "arguments with entity_lm_training_arguments or set train_sampling_strategy='sequential'."
        )
    if args.remove_unused_columns:
        raise ValueError("Set remove_unused_columns=False: the collator needs the document_id column.")
    if args.world_size > 1 or args.n_gpu > 1:
        raise ValueError(
            "Entity-LM training keeps each document's entity states in one process's store; with several processes "
            "(or, with several GPUs in one process, its replicas) the windows of a document would be split between "
            "them. Train on one process and one device (e.g. CUDA_VISIBLE_DEVICES=0)."
        )
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    collator = EntityLMCollatorFor(pad_token_id=int(pad_token_id or 0), with_entities=reads_entities(model))
    if hasattr(model, "reset_entity_stores"):
        model.reset_entity_stores()
    return Trainer(
        model=model,
        args=args,
        data_collator=collator,
        train_dataset=order_windows_for_streams(train_windows, args.per_device_train_batch_size),
        eval_dataset=(
            order_windows_for_streams(eval_windows, args.per_device_eval_batch_size) if eval_windows is not None else None
        ),
        processing_class=tokenizer,
        **trainer_options,
    )


def evaluate_entity_lm(
    model: torch.nn.Module, windows: datasets.Dataset, batch_size: int = 8, progress: bool = True
) -> dict[str, float]:
    """Perplexity of a model over whole documents: with and without entity information for GPT2E (the same model,
    entity ids zeroed), tokens only for a plain causal LM.

    Returns:
        `{"perplexity": ...}` and, for GPT2E, `{"perplexity_without_entities": ...}` too.

    Example:
        >>> evaluate_entity_lm(model, splits["test"])  # doctest: +SKIP
        {'perplexity': 212.4, 'perplexity_without_entities': 219.0}
    """
    scores = {"perplexity": entity_perplexity(model, windows, batch_size=batch_size, progress=progress)}
    if reads_entities(model):
        scores["perplexity_without_entities"] = entity_perplexity(
            model, windows, batch_size=batch_size, use_entities=False, progress=progress
        )
    return scores
