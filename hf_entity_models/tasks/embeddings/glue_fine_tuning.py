"""Fine-tuning on GLUE MRPC and RTE for DefinitionEMB's downstream evaluation (paper Section 6.2, Appendix H).

* `glue_training_arguments`, `compute_glue_metrics`, `build_glue_trainer` and `fine_tune_glue` fine-tune any
  `AutoModelForSequenceClassification` with the stock `Trainer` and the paper's RoBERTa recipe (Table 10, which is
  fairseq's RoBERTa GLUE recipe);
* `sequence_classifier_from` turns a base-model checkpoint (e.g. a `BertModel` whose input embeddings were replaced by
  definition embeddings) into a sequence classifier with those weights and a fresh head.

The data (reading, selection split, features) is in `glue`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    PreTrainedModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.utils import logging

from ...models._shared.checkpoints import loading_problem
from ...training.distributed import check_processes_connected
from .glue import normalise_glue_task, glue_features

logger = logging.get_logger(__name__)

__all__ = [
    "ROBERTA_GLUE_RECIPES",
    "GlueRecipe",
    "build_glue_trainer",
    "compute_glue_metrics",
    "fine_tune_glue",
    "glue_training_arguments",
    "sequence_classifier_from",
]


# ----------------------------------------------------------------------------------------------------- recipe
@dataclass(frozen=True)
class GlueRecipe:
    """One row of the paper's Table 10 (RoBERTa fine-tuning on GLUE, which is fairseq's RoBERTa GLUE recipe).

    Attributes:
        learning_rate: Peak learning rate.
        batch_size: Sentences per update.
        paper_updates: The table's number of updates (fairseq's ``--total-num-update``: the length of the
            polynomial-decay schedule).
        paper_warmup_updates: The table's warm-up updates (6% of `paper_updates`).
        num_train_epochs: Epochs actually trained (fairseq's ``--max-epoch 10``).
    """

    learning_rate: float
    batch_size: int
    paper_updates: int
    paper_warmup_updates: int
    num_train_epochs: float = 10.0

    @property
    def warmup_fraction(self) -> float:
        return self.paper_warmup_updates / self.paper_updates


ROBERTA_GLUE_RECIPES = {
    "mrpc": GlueRecipe(learning_rate=1e-5, batch_size=16, paper_updates=2296, paper_warmup_updates=137),
    "rte": GlueRecipe(learning_rate=2e-5, batch_size=16, paper_updates=2036, paper_warmup_updates=122),
}


def glue_training_arguments(
    output_dir: str | os.PathLike, task: str, seed: int = 0, **overrides: Any
) -> TrainingArguments:
    """`TrainingArguments` with the paper's RoBERTa GLUE recipe (Table 10; Appendix G: Adam, polynomial decay).

    MRPC: learning rate 1e-5, batch 16; RTE: 2e-5, batch 16. The table's updates are expressed as epochs and a
    warm-up fraction so that they carry over to a different training-set size (e.g. RTE train minus a selection
    set): 10 epochs (MRPC: 2,296 updates = 10 epochs of 230 batches) with the first 6% of the updates warming up
    (137/2,296, 122/2,036), then linear ("polynomial", power 1) decay to 0. Adam as in fairseq's recipe: betas
    (0.9, 0.98), eps 1e-6, decoupled weight decay 0.1, no gradient clipping. Evaluation after each epoch, no
    checkpoints saved, no reporting integrations. Every field can be overridden (e.g. ``max_steps=40`` for a CPU
    run; ``max_steps`` wins over the epochs).

    Note: fairseq's RTE recipe schedules the decay over 2,036 updates but stops after 10 epochs (1,560 updates on
    2,490 pairs), so its learning rate never reaches 0; here the decay always spans the run.

    Args:
        output_dir: Where the Trainer writes (logs; checkpoints if you turn saving on).
        task: ``"mrpc"`` or ``"rte"``.
        seed: Seed of the run (model head initialisation, data order, dropout).
        **overrides: Any `TrainingArguments` field.

    Example:
        >>> args = glue_training_arguments("runs/mrpc", "MRPC", max_steps=40)
        >>> args.learning_rate, args.per_device_train_batch_size, args.lr_scheduler_type.value, args.max_steps
        (1e-05, 16, 'polynomial', 40)
    """
    recipe = ROBERTA_GLUE_RECIPES[normalise_glue_task(task)]
    values: dict[str, Any] = dict(
        output_dir=os.fspath(output_dir),
        learning_rate=recipe.learning_rate,
        per_device_train_batch_size=recipe.batch_size,
        per_device_eval_batch_size=64,
        num_train_epochs=recipe.num_train_epochs,
        warmup_steps=recipe.warmup_fraction,  # a float below 1 is a share of the training steps
        lr_scheduler_type="polynomial",
        lr_scheduler_kwargs={"lr_end": 0.0, "power": 1.0},
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-6,
        weight_decay=0.1,
        max_grad_norm=0.0,  # fairseq --clip-norm 0.0: no clipping
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="steps",
        logging_steps=50,
        report_to=[],
        seed=seed,
        use_cpu=not torch.cuda.is_available(),
        # Pinned memory only speeds up copies to a GPU; on a CPU-only machine the DataLoader just warns about it.
        dataloader_pin_memory=torch.cuda.is_available(),
        # A sequence classifier's loss is its batch mean: it ignores the token count the Trainer passes, yet with
        # this True the Trainer multiplies the loss by the number of processes (two processes: doubled losses and
        # gradients). False keeps data-parallel losses and gradients those of one process.
        average_tokens_across_devices=False,
    )
    values.update(overrides)
    return TrainingArguments(**values)


# ----------------------------------------------------------------------------------------------------- metrics
def compute_glue_metrics(eval_prediction: EvalPrediction | tuple) -> dict[str, float]:
    """Accuracy and the F1 of the positive class 1 (MRPC's "equivalent", as GLUE reports F1), as fractions.

    Args:
        eval_prediction: The Trainer's `EvalPrediction` (or a ``(predictions, label_ids)`` pair): logits of shape
            (N, num_labels) (a tuple of outputs: the first) or predicted labels of shape (N,), and gold labels (N,).

    Returns:
        ``{"accuracy": ..., "f1": ...}``; F1 is 0.0 when class 1 is neither predicted nor gold.

    Example:
        >>> logits = np.array([[0.0, 1.0], [2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])  # predictions 1, 0, 1, 0
        >>> compute_glue_metrics((logits, np.array([1, 1, 0, 0])))  # TP 1, FP 1, FN 1
        {'accuracy': 0.5, 'f1': 0.5}
    """
    if isinstance(eval_prediction, EvalPrediction):
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
    else:
        predictions, labels = eval_prediction
    if isinstance(predictions, (tuple, list)):
        predictions = predictions[0]
    predictions = np.asarray(predictions)
    labels = np.asarray(labels).reshape(-1)
    predicted = predictions.argmax(axis=-1) if predictions.ndim == 2 else predictions.reshape(-1)
    if predicted.shape != labels.shape:
        raise ValueError(
            f"compute_glue_metrics got {predicted.shape[0]} predictions for {labels.shape[0]} labels; pass the "
            "logits of shape (N, num_labels) or predicted labels of shape (N,) for N labels."
        )
    if labels.size == 0:
        raise ValueError("compute_glue_metrics got no examples; evaluate on a non-empty dataset.")
    true_positive = int(np.sum((predicted == 1) & (labels == 1)))
    false_positive = int(np.sum((predicted == 1) & (labels != 1)))
    false_negative = int(np.sum((predicted != 1) & (labels == 1)))
    denominator = 2 * true_positive + false_positive + false_negative
    return {
        "accuracy": float(np.mean(predicted == labels)),
        "f1": 2 * true_positive / denominator if denominator else 0.0,
    }


# ----------------------------------------------------------------------------------------------------- training
def build_glue_trainer(
    model: nn.Module,
    tokenizer: Any,
    train_dataset: datasets.Dataset,
    eval_dataset: datasets.Dataset | Mapping[str, datasets.Dataset] | None,
    args: TrainingArguments,
    *,
    max_length: int = 128,
    callbacks: Sequence[TrainerCallback] | None = None,
) -> Trainer:
    """The stock `Trainer` for a GLUE sentence-pair task: dynamic padding, `compute_glue_metrics`.

    Datasets straight from `read_glue` are tokenised with `glue_features` (`max_length`); already tokenised ones
    (with ``input_ids``) are used as they are. `eval_dataset` may be a dict of named sets: the Trainer then reports
    each with the prefix ``eval_<name>_``. `callbacks` go to the Trainer (e.g. `transformers.EarlyStoppingCallback`).

    Data parallel (``accelerate launch``): every process builds and trains the same trainer; the stock Trainer
    shards the pairs and gathers the evaluation predictions, so every process reports the same metrics.

    Raises:
        ValueError: If the model's number of labels cannot hold the dataset's labels, evaluation is scheduled
            (``args.eval_strategy``) without an evaluation set, or N launched processes are not connected
            (`check_processes_connected`).
    """
    check_processes_connected(args)
    train_features = _as_features(train_dataset, tokenizer, max_length)
    eval_features: datasets.Dataset | dict[str, datasets.Dataset] | None
    if eval_dataset is None:
        if str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no":
            raise ValueError(
                f"args.eval_strategy is {args.eval_strategy!r} but no eval_dataset was given; pass one, or "
                "eval_strategy='no'."
            )
        eval_features = None
    elif isinstance(eval_dataset, Mapping):
        eval_features = {name: _as_features(part, tokenizer, max_length) for name, part in eval_dataset.items()}
    else:
        eval_features = _as_features(eval_dataset, tokenizer, max_length)
    for part in [train_features, *(eval_features.values() if isinstance(eval_features, dict) else [eval_features])]:
        if part is not None:
            _check_labels_fit(model, part)
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_features,
        eval_dataset=eval_features,
        data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_glue_metrics,
        callbacks=list(callbacks) if callbacks else None,
    )


def fine_tune_glue(
    model: nn.Module,
    tokenizer: Any,
    train: datasets.Dataset,
    evaluation_sets: Mapping[str, datasets.Dataset],
    args: TrainingArguments,
    *,
    max_length: int = 128,
    callbacks: Sequence[TrainerCallback] | None = None,
) -> dict[str, dict[str, float]]:
    """Fine-tune `model` on `train` and evaluate it on every named evaluation set after training.

    The evaluation sets are also what the Trainer evaluates after each epoch (``args.eval_strategy``), each under its
    own name. The model is trained in place; the last model is evaluated (set ``load_best_model_at_end`` and
    ``metric_for_best_model="eval_<selection set>_accuracy"`` in `args`, with saving on, to evaluate the best epoch
    on a held-out selection set instead).

    Args:
        model: Any sequence classifier (e.g. `AutoModelForSequenceClassification`, ``num_labels=2``).
        tokenizer: Its tokenizer.
        train: Training pairs (`read_glue` layout, or already `glue_features`).
        evaluation_sets: Name -> dataset, e.g. ``{"selection": ..., "dev": ...}``.
        args: e.g. `glue_training_arguments`.
        max_length: Longest tokenised pair (see `glue_features`).
        callbacks: Trainer callbacks (e.g. one that records ``state.log_history``).

    Returns:
        Name -> metrics without prefix: ``{"dev": {"accuracy": ..., "f1": ..., "loss": ..., "runtime": ...}, ...}``.

    Example:
        >>> args = glue_training_arguments("runs/mrpc", "mrpc", max_steps=40)  # doctest: +SKIP
        >>> fine_tune_glue(model, tokenizer, mrpc_train, {"dev": mrpc_dev, "test": mrpc_test}, args)  # doctest: +SKIP
        {'dev': {'loss': 0.59, 'accuracy': 0.70, 'f1': 0.81, ...}, 'test': {...}}
    """
    if not evaluation_sets:
        raise ValueError(
            "fine_tune_glue needs at least one evaluation set, e.g. {'dev': read_glue(folder, task, 'dev')}."
        )
    trainer = build_glue_trainer(
        model, tokenizer, train, dict(evaluation_sets), args, max_length=max_length, callbacks=callbacks
    )
    trainer.train()
    results = {}
    for name, features in trainer.eval_dataset.items():
        metrics = trainer.evaluate(eval_dataset=features, metric_key_prefix=name)
        results[name] = {key.removeprefix(f"{name}_"): value for key, value in metrics.items()}
        logger.info("%s: %s", name, results[name])
    return results


def _as_features(dataset: datasets.Dataset, tokenizer: Any, max_length: int) -> datasets.Dataset:
    return dataset if "input_ids" in dataset.column_names else glue_features(dataset, tokenizer, max_length)


def _check_labels_fit(model: nn.Module, features: datasets.Dataset) -> None:
    num_labels = getattr(getattr(model, "config", None), "num_labels", None)
    if num_labels is None or "label" not in features.column_names or len(features) == 0:
        return
    labels = np.asarray(features["label"])
    if labels.min() < 0 or labels.max() >= num_labels:
        raise ValueError(
            f"The model has num_labels={num_labels} but the data's labels range over {labels.min()}..{labels.max()}; "
            "build the classifier with num_labels=2 for MRPC and RTE."
        )


# ----------------------------------------------------------------------------------------------------- models
def sequence_classifier_from(
    model_or_path: PreTrainedModel | str | os.PathLike, num_labels: int = 2, **config_overrides: Any
) -> PreTrainedModel:
    """A fresh `AutoModelForSequenceClassification` whose base model carries the weights of `model_or_path`.

    This is how a PLM whose token embeddings were rebuilt (e.g. a `BertModel` saved after DefinitionEMB replaced its
    input embeddings) goes to GLUE: the base weights (embeddings, encoder, and the pooler when there is one) are copied
    exactly; the classification head (and a pooler the source lacks) starts fresh.

    Args:
        model_or_path: A checkpoint folder (any model of the family: base model, masked LM, classifier; safetensors)
            or a loaded model; only its base model's weights are used.
        num_labels: Classes of the new head (2 for MRPC and RTE).
        **config_overrides: Config fields to change for fine-tuning (e.g. ``hidden_dropout_prob=0.1``).

    Raises:
        ValueError: If the base weights do not fit the architecture its config describes (a weight of another shape,
            e.g. an embedding matrix replaced without updating ``config.vocab_size``; missing or unexpected weights),
            or the config's model type has no sequence classifier.

    Example:
        >>> from transformers import BertConfig, BertModel
        >>> base = BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        ...                             intermediate_size=16))
        >>> classifier = sequence_classifier_from(base, num_labels=2)
        >>> type(classifier).__name__, bool(torch.equal(classifier.bert.embeddings.word_embeddings.weight,
        ...                                              base.embeddings.word_embeddings.weight))
        ('BertForSequenceClassification', True)
    """
    if isinstance(model_or_path, PreTrainedModel):
        source = model_or_path.base_model
        config = model_or_path.config
        description = f"the given {type(model_or_path).__name__}"
    elif isinstance(model_or_path, (str, os.PathLike)):
        source, config, description = _load_checkpoint_base_model(model_or_path)
    else:
        raise TypeError(
            "sequence_classifier_from takes a PreTrainedModel or a checkpoint folder, got "
            f"{type(model_or_path).__name__}."
        )
    classifier_config = copy.deepcopy(config)
    classifier_config.num_labels = num_labels
    for name, value in config_overrides.items():
        setattr(classifier_config, name, value)
    try:
        classifier = AutoModelForSequenceClassification.from_config(classifier_config)
    except ValueError as error:
        raise ValueError(
            f"No sequence classifier exists for the config of {description} (model_type "
            f"{getattr(config, 'model_type', None)!r}): {error}"
        ) from error
    target = classifier.base_model
    state = source.state_dict()
    target_state = target.state_dict()
    if not any(name.startswith("pooler.") for name in target_state):
        # Some classifiers read the first token without the base model's pooler (RoBERTa's head has its own dense
        # layer): the pooler of the base checkpoint is simply not used.
        state = {name: tensor for name, tensor in state.items() if not name.startswith("pooler.")}
    mismatched = [
        f"{name}: checkpoint {tuple(tensor.shape)} vs config {tuple(target_state[name].shape)}"
        for name, tensor in state.items()
        if name in target_state and tuple(tensor.shape) != tuple(target_state[name].shape)
    ]
    if mismatched:
        raise ValueError(
            f"The base weights of {description} do not fit a {type(classifier).__name__} built from its config "
            f"(weights of another shape than the config describes: {'; '.join(mismatched[:5])}). If the input "
            "embeddings were resized, call `model.resize_token_embeddings(new_size)` (it updates config.vocab_size) "
            "or set the matching config fields before saving."
        )
    with torch.no_grad():
        loaded = target.load_state_dict(state, strict=False)
    loading_info = {"missing_keys": loaded.missing_keys, "unexpected_keys": loaded.unexpected_keys}
    problem = loading_problem(target, loading_info, description, allowed_missing=("pooler.",))
    if problem is not None:
        raise ValueError(problem)
    if any(name.startswith("pooler.") for name in loaded.missing_keys):
        logger.warning(
            "%s has no pooler weights; the %s's pooler starts fresh, like its classification head.",
            description,
            type(classifier).__name__,
        )
    return classifier


def _load_checkpoint_base_model(path: str | os.PathLike) -> tuple[nn.Module, Any, str]:
    """The base model stored in a checkpoint folder, loaded so that nothing is filled in silently."""
    description = f"checkpoint {os.fspath(path)}"
    if not Path(path).is_dir():
        raise ValueError(f"{description} is not a folder; pass a folder written by `save_pretrained`, or a model.")
    config = AutoConfig.from_pretrained(path)
    try:
        base, info = AutoModel.from_pretrained(
            path, config=config, output_loading_info=True, ignore_mismatched_sizes=True, dtype=torch.float32
        )
    except (RuntimeError, ValueError, OSError) as error:
        raise ValueError(f"Could not load the base model of {description}: {error}") from error
    mismatched = [
        f"{name}: checkpoint {tuple(saved)} vs config {tuple(built)}" for name, saved, built in _mismatched(info)
    ]
    if mismatched:
        raise ValueError(
            f"The base weights of {description} do not fit the architecture its config.json describes (weights of "
            f"another shape: {mismatched[:5]}). If the input embeddings were replaced, call "
            "`model.resize_token_embeddings(new_size)` (it updates config.vocab_size) before `save_pretrained`."
        )
    # Weights the config asks for that the file lacks (random values), and weights of layers the config does not
    # have (a config with fewer layers than its weights: from_pretrained drops them with a log line only). A head
    # of the checkpoint (a masked-LM's `cls.*`) is dropped on purpose, and a missing pooler is handled below.
    problem = loading_problem(base, info, path, allowed_missing=("pooler.",))
    if problem is not None:
        raise ValueError(problem)
    pooler_missing = [name for name in info.get("missing_keys", ()) if str(name).startswith("pooler.")]
    if pooler_missing and getattr(base, "pooler", None) is not None:
        # from_pretrained filled the pooler with fresh values; drop it so that the classifier keeps its own fresh
        # pooler and the caller is told (sequence_classifier_from warns).
        base.pooler = None
    return base, config, description


def _mismatched(info: Mapping[str, Any]) -> list[tuple[str, Sequence[int], Sequence[int]]]:
    """(name, checkpoint shape, model shape) of each mismatched weight in `from_pretrained`'s loading info."""
    entries = []
    for entry in info.get("mismatched_keys", ()) or ():
        if isinstance(entry, (tuple, list)) and len(entry) == 3:
            entries.append((str(entry[0]), entry[1], entry[2]))
        else:
            entries.append((str(entry), (), ()))
    return entries
