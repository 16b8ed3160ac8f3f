"""Training DefinitionEMB with the stock `transformers.Trainer` (paper Appendix G, Table 12).

The paper trains the definition reader with Adam, learning rate 1e-4 and an inverse-square-root schedule after a
linear warm-up (24,000 of 400,000 updates for RoBERTa, 20,000 of 250,000 for BART), on batches of 4,096 tokens.
`definition_training_arguments` gives those settings (warm-up as the fraction 0.06 of the run, RoBERTa's ratio) plus
what our data path needs; `build_definition_trainer` wires model, collator and datasets together.

Example:
    >>> args = definition_training_arguments("runs/definition-emb", max_steps=1000)  # doctest: +SKIP
    >>> trainer = build_definition_trainer(model, tokenizer, train, validation, args)  # doctest: +SKIP
    >>> trainer.train()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import transformers
from transformers import TrainingArguments
from transformers.utils import logging

from ...training.distributed import check_processes_connected
from .collator import READER_TYPES, DefinitionCollator
from .corruption import IGNORE_INDEX

logger = logging.get_logger(__name__)

__all__ = [
    "DEFINITION_TRAINING_DEFAULTS",
    "build_definition_trainer",
    "definition_collator",
    "definition_training_arguments",
    "fit_projection_by_least_squares",
]

DEFINITION_TRAINING_DEFAULTS: dict[str, Any] = {
    # Adam: AdamW without weight decay is exactly Adam.
    "optim": "adamw_torch",
    "weight_decay": 0.0,
    "learning_rate": 1e-4,
    "lr_scheduler_type": "inverse_sqrt",
    # A value below 1 is a fraction of the run: 24,000 / 400,000 warm-up updates in the paper (RoBERTa).
    "warmup_steps": 0.06,
    # The collator needs corruption_spans, which is not a forward argument: keep every column.
    "remove_unused_columns": False,
    "label_names": ["labels"],
    # The model's outputs are per-token embeddings: evaluation only needs the loss, not gathered predictions.
    "prediction_loss_only": True,
    "report_to": [],
}


def definition_training_arguments(output_dir: str, **overrides: Any) -> TrainingArguments:
    """`TrainingArguments` with the paper's DefinitionEMB settings; any field can be overridden.

    Defaults: Adam (``adamw_torch``, weight decay 0), learning rate 1e-4, ``lr_scheduler_type="inverse_sqrt"``,
    ``warmup_steps=0.06`` (a fraction of the run), ``remove_unused_columns=False`` (the collator reads
    ``corruption_spans``), ``label_names=["labels"]``, ``prediction_loss_only=True``, ``report_to=[]``; and, from
    the machine, ``use_cpu`` when no GPU is visible (so that ``accelerate launch`` processes join one gloo group)
    and ``dataloader_pin_memory`` only with a GPU.
    Batch size, steps and epochs are left to the caller (the paper: 4,096 tokens per batch, roughly 90 prompts).

    Example:
        >>> args = definition_training_arguments("/tmp/definition-emb", max_steps=10, use_cpu=True)
        >>> args.learning_rate, args.lr_scheduler_type.value, args.remove_unused_columns
        (0.0001, 'inverse_sqrt', False)
    """
    machine = {
        # Without it, `accelerate launch --multi_gpu` on a machine without GPUs starts unconnected single-process runs.
        "use_cpu": not torch.cuda.is_available(),
        # Pinned memory only speeds up copies to a GPU; on a CPU-only machine the DataLoader just warns about it.
        "dataloader_pin_memory": torch.cuda.is_available(),
    }
    settings = {**DEFINITION_TRAINING_DEFAULTS, **machine, **overrides}
    return TrainingArguments(output_dir=output_dir, **settings)


def _config_value(config: Any, name: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(name)
    return getattr(config, name, None)


def build_definition_trainer(
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    eval_dataset: Any | None = None,
    args: TrainingArguments | None = None,
    seed: int = 0,
) -> transformers.Trainer:
    """A `transformers.Trainer` for a `DefinitionEmbModel` on definition prompts.

    Args:
        model: A `DefinitionEmbModel` (its ``config.reader_type`` picks the collator).
        tokenizer: The PLM's tokenizer, the one the prompts were built with (saved with checkpoints).
        train_dataset: Rows of `definitions.definition_prompt_dataset`.
        eval_dataset: Optional validation rows (loss only; every evaluation reads the same inputs).
        args: Training arguments; default `definition_training_arguments("definition_emb_output")`. They must keep
            ``remove_unused_columns=False``.
        seed: Seed of the collator's corruption generator. Data parallel (``accelerate launch``), process ``r``
            corrupts its training batches from ``seed + r * PROCESS_SEED_STRIDE``: with one seed for all, every
            process would draw the same corruption for its own batches. Evaluation uses one seed everywhere.

    Raises:
        ValueError: If the model has no known reader type, the tokenizer has more tokens than the reader's
            vocabulary, ``args.remove_unused_columns`` is True, or N launched processes are not connected
            (`check_processes_connected`).

    Example:
        >>> trainer = build_definition_trainer(model, tokenizer, train_prompts)  # doctest: +SKIP
        >>> trainer.train().training_loss  # doctest: +SKIP
    """
    config = getattr(model, "config", None)
    reader_type = _config_value(config, "reader_type")
    if reader_type not in READER_TYPES:
        raise ValueError(
            f"model.config.reader_type is {reader_type!r}; expected one of {READER_TYPES}. Pass a DefinitionEmbModel."
        )
    reader_config = _config_value(config, "reader_config")
    vocab_size = _config_value(reader_config, "vocab_size")
    if isinstance(vocab_size, int) and len(tokenizer) > vocab_size:
        raise ValueError(
            f"The tokenizer has {len(tokenizer)} tokens but the reader's vocabulary has {vocab_size}: the prompts "
            "would contain ids the model cannot embed. Use the PLM's own tokenizer."
        )
    if args is None:
        args = definition_training_arguments("definition_emb_output")
    check_processes_connected(args)
    if args.remove_unused_columns:
        raise ValueError(
            "args.remove_unused_columns is True, so the Trainer would drop corruption_spans before the collator "
            "sees them. Build the arguments with definition_training_arguments(...) or set "
            "remove_unused_columns=False."
        )

    def collator(collator_seed: int) -> DefinitionCollator:
        return definition_collator(model, tokenizer, collator_seed)

    return DefinitionTrainer(
        model=model,
        args=args,
        data_collator=collator(seed + args.process_index * PROCESS_SEED_STRIDE),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        eval_collator_factory=lambda: collator(seed + EVAL_SEED_OFFSET),
    )


def definition_collator(model: Any, tokenizer: Any, seed: int = 0) -> DefinitionCollator:
    """The collator that builds `model`'s training batches as its config says (reader type, word slots; a
    pooled-definition reader labels single-token slots only)."""
    config = model.config
    reader_type = _config_value(config, "reader_type")
    decoder_start = (
        _config_value(_config_value(config, "reader_config"), "decoder_start_token_id")
        if reader_type == "encoder-decoder"
        else None
    )
    return DefinitionCollator(
        tokenizer, reader_type, seed=seed, decoder_start_token_id=decoder_start,
        word_slots=_config_value(config, "word_slots") or "paper",
        single_token_slots_only=_config_value(config, "readout") == "pooled-definition",
    )


# Prompts the least-squares start of A reads: enough for a 384-wide map not to overfit, and ~40 s of MiniLM on 2 cores.
LEAST_SQUARES_PROMPTS = 4096


@torch.no_grad()
def fit_projection_by_least_squares(
    model: Any, tokenizer: Any, prompts: Any, max_prompts: int = LEAST_SQUARES_PROMPTS, batch_size: int = 64,
    ridge: float = 0.1,
) -> int:
    """Start the linear map A from the ridge least-squares fit of the targets on the frozen reader's states.

    The reader reads `prompts` (at most `max_prompts`) exactly as its training batches are built, and A becomes
    argmin_A sum_j ||A s_j - t_j||^2 + ridge * (mean diagonal of S^T S) * ||A||^2 over the labelled positions, with
    t_j the target embedding (unit-normalised when ``config.loss == "cosine"``). It takes seconds and replaces the
    first hundreds of steps of a random A. (MiniLM-L6, pooled readout, cosine on 1,000 held-out words: 0.13 from
    640 prompts at ridge 1e-3, 0.29 from 2,000 at 0.1, 0.33 from 6,000 at 0.1; the mean embedding 0.09.)

    Returns:
        The number of labelled positions the fit used (0: nothing labelled, A left as it was).

    Example:
        >>> fit_projection_by_least_squares(reader, tokenizer, prompts)  # doctest: +SKIP
        1987
    """
    collator = definition_collator(model, tokenizer, seed=0)
    states: list[torch.Tensor] = []
    capture = model.embedding_projection.register_forward_pre_hook(lambda module, inputs: states.append(inputs[0]))
    was_training = model.training
    model.eval()
    labels_seen: list[torch.Tensor] = []
    try:
        rows = prompts.select(range(min(max_prompts, len(prompts))))
        for start in range(0, len(rows), batch_size):
            batch = collator([rows[index] for index in range(start, min(start + batch_size, len(rows)))])
            batch = {key: value.to(model.device) for key, value in batch.items()}
            labels = batch.pop("labels")
            model(**batch)
            labelled = labels != IGNORE_INDEX
            states[-1] = states[-1][labelled].double().cpu()
            labels_seen.append(labels[labelled].cpu())
    finally:
        capture.remove()
        model.train(was_training)
    if not labels_seen or sum(len(labels) for labels in labels_seen) == 0:
        return 0
    features = torch.cat(states)
    targets = model.target_embeddings[torch.cat(labels_seen).to(model.target_embeddings.device)].double().cpu()
    if model.config.loss == "cosine":
        targets = targets / targets.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    gram = features.T @ features
    gram += ridge * gram.diagonal().mean() * torch.eye(gram.shape[0], dtype=gram.dtype)
    solution = torch.linalg.solve(gram, features.T @ targets)  # (H_s, H_e)
    weight = model.embedding_projection.weight
    weight.copy_(solution.T.to(weight.device, weight.dtype))
    return features.shape[0]


# Evaluation corruption comes from its own seed, apart from the training stream.
EVAL_SEED_OFFSET = 1_000_003
# Apart from the evaluation seed, so that no process's training stream is another's evaluation stream.
PROCESS_SEED_STRIDE = 7_919


class DefinitionTrainer(transformers.Trainer):
    """A `transformers.Trainer` whose every evaluation reads the same corruption of the evaluation prompts.

    The encoder-only corruption is random; with one collator, an evaluation would see other corrupted inputs each
    time (and shift the training stream). Here each evaluation builds a fresh collator from the same seed, so the
    losses before and after training, or of two checkpoints, are measured on identical inputs.

    Args:
        eval_collator_factory: Returns the collator of one evaluation (called once per evaluation).
        *args, **kwargs: Those of `transformers.Trainer`.
    """

    def __init__(self, *args, eval_collator_factory: Callable[[], Any], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._eval_collator_factory = eval_collator_factory

    def get_eval_dataloader(self, eval_dataset: Any = None):
        training_collator = self.data_collator
        self.data_collator = self._eval_collator_factory()
        try:
            return super().get_eval_dataloader(eval_dataset)
        finally:
            self.data_collator = training_collator
