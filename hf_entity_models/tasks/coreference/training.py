"""Training and evaluation of coreference memory models on GAP with the stock `transformers.Trainer`.

Each model trains with its own authors' optimisation recipe (`GAP_TRAINING_RECIPES`, chosen from
`model.config.model_type`, overridable by the caller):

* PeTra (paper section 3.3, authors' code): AdamW at 1e-3, batch 32, gradient clipping 1.0, the learning rate
  halved when validation F1 has not improved for 5 epochs (down to 1e-4).
* Referential Reader (paper appendix A, authors' code): plain Adam at 1e-3 (AdamW with weight decay 0 is Adam), a
  constant learning rate, no gradient clipping. The paper gives no batch size; 32 is kept.

Both: early stopping on validation F1 (patience 15 epochs), the best epoch by validation F1, the Gumbel temperature
halved every 10 epochs, and the decision threshold chosen on validation.

Two choices where PeTra's paper, its authors' code and this package differ are arguments (the GAP
ablations kept the defaults): `threshold_grid` (`"package"`: 0.00..0.99 with `>=`; `"paper"`: 0.01..1.00 with `>`;
`"authors_code"`: 0.00..0.99 with `>`, see `THRESHOLD_GRIDS`) and `gumbel_epoch_offset` (0: the temperature is
first halved at epoch 11 counting from 1; 1: at epoch 10, as PeTra's authors' code does).
"""

import copy
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import EarlyStoppingCallback, EvalPrediction, Trainer, TrainingArguments
from transformers.utils import logging

from ...hub.evaluation_results import record_evaluation
from ...models.petra import IGNORE_INDEX
from ...training import EpochTimerCallback, GumbelTemperatureCallback, check_processes_connected, two_rate_adamw
from .collator import CoreferenceCollator
from .features import cache_encoder_features, uses_frozen_encoder
from .gap import check_unique_ids, gap_gold, prepare_gap_dataset, shared_ids
from .metrics import GapGold, GapScores, ThresholdSweep, score_gap, score_gap_probabilities, sweep_threshold
from .metrics import threshold_grid as named_threshold_grid

logger = logging.get_logger(__name__)

__all__ = [
    "GapMetrics",
    "GapTrainingResult",
    "train_on_gap",
    "build_gap_trainer",
    "gap_training_arguments",
    "gap_training_recipe",
    "GAP_TRAINING_RECIPES",
    "keep_candidate_scores",
    "tune_threshold",
]


def keep_candidate_scores(logits, labels):
    """`preprocess_logits_for_metrics` that keeps only the span scores (the memory log is not needed for GAP).

    The model's first non-loss output is `candidate_scores`, so this also keeps evaluation memory flat.
    """
    return logits[0] if isinstance(logits, (tuple, list)) else logits


class GapMetrics:
    """`compute_metrics` for GAP: sweeps the threshold 0.00..0.99 and reports the best F1 with its gender split.

    Reporting the best-threshold F1 on validation is the paper's model-selection criterion (section 3.6).
    `threshold_grid` names another grid of `THRESHOLD_GRIDS` (e.g. `"paper"`: 0.01..1.00 with `>`); the reported
    `threshold` is then the equivalent threshold for the `>=` rule (`ThresholdSweep.decision_threshold`).

    Example:

    ```python
    >>> metrics = GapMetrics(gap_gold(validation_rows))  # doctest: +SKIP
    >>> trainer = Trainer(..., compute_metrics=metrics, preprocess_logits_for_metrics=keep_candidate_scores)  # doctest: +SKIP

    ```
    """

    def __init__(
        self,
        gold: Sequence[GapGold],
        link_pair_counts: Sequence[int] | None = None,
        threshold_grid: str = "package",
    ):
        self.thresholds, self.comparison = named_threshold_grid(threshold_grid)
        if not gold:
            raise ValueError("GapMetrics needs the gold rows of the evaluation set, in dataset order; got none.")
        # Here, before training, rather than when the first evaluation scores them.
        check_unique_ids([{"id": row.example_id} for row in gold], "the evaluation rows of GapMetrics")
        if link_pair_counts is not None and len(link_pair_counts) != len(gold):
            raise ValueError(f"Got {len(link_pair_counts)} link-pair counts for {len(gold)} gold rows.")
        self.gold = list(gold)
        self.link_pair_counts = None if link_pair_counts is None else np.asarray(link_pair_counts)

    def sweep(self, candidate_scores) -> ThresholdSweep:
        """Threshold sweep over the scores `(num_examples, 2)` of candidates A and B, in gold order."""
        scores = np.asarray(candidate_scores, dtype=np.float64)
        if scores.ndim != 2 or scores.shape[0] != len(self.gold) or scores.shape[1] < 2:
            raise ValueError(
                f"Expected candidate scores of shape ({len(self.gold)}, 2) for the {len(self.gold)} evaluation "
                f"rows, got {scores.shape}; evaluate on the dataset the gold rows came from."
            )
        probabilities = {gold.example_id: (scores[i, 0], scores[i, 1]) for i, gold in enumerate(self.gold)}
        return sweep_threshold(self.gold, probabilities, self.thresholds, self.comparison)

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        self.check_order(prediction.label_ids)
        sweep = self.sweep(keep_candidate_scores(prediction.predictions, None))
        metrics = sweep.best_scores.as_dict()
        metrics["threshold"] = sweep.decision_threshold
        return metrics


    def check_order(self, label_ids) -> None:
        """Predictions are matched to gold rows by position: make sure the evaluation kept the dataset order.

        The number of labelled pairs per row (the `link_labels` that Trainer hands back as `label_ids`) is a
        cheap fingerprint of the order.
        """
        if self.link_pair_counts is None or label_ids is None:
            return
        link_labels = label_ids[0] if isinstance(label_ids, (tuple, list)) else label_ids
        counts = (np.asarray(link_labels) != IGNORE_INDEX).sum(-1)
        if counts.shape != self.link_pair_counts.shape or not np.array_equal(counts, self.link_pair_counts):
            raise ValueError(
                "The evaluation predictions are not in dataset order, so they cannot be matched to the GAP gold "
                "rows. transformers reorders evaluation data when train_sampling_strategy='group_by_length'; use "
                "the default 'random' strategy."
            )


# The optimisation recipe of each model's authors, by `config.model_type` (DESIGN.md, "Facts about the original
# implementations"). Everything else in `gap_training_arguments` is shared.
GAP_TRAINING_RECIPES: dict[str, dict] = {
    # PeTra: AdamW 1e-3, gradient clipping 1.0, learning rate halved on a validation-F1 plateau of 5 epochs.
    "petra": dict(
        learning_rate=1e-3,
        max_grad_norm=1.0,
        weight_decay=0.0,
        lr_scheduler_type="reduce_lr_on_plateau",
        lr_scheduler_kwargs={"mode": "max", "factor": 0.5, "patience": 5, "min_lr": 1e-4},
    ),
    # Referential Reader: plain Adam 1e-3 (AdamW without weight decay), constant rate, no clipping. Its loss is a
    # sum over all token pairs (~50 per document), so a clip at 1.0 would rescale nearly every step.
    "refreader": dict(
        learning_rate=1e-3,
        max_grad_norm=0.0,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        lr_scheduler_kwargs={},
    ),
}
# A coreference model of another type trains with PeTra's recipe, the package's original default.
DEFAULT_GAP_RECIPE = "petra"


def gap_training_recipe(model) -> str:
    """Name of the recipe in `GAP_TRAINING_RECIPES` for a model (or a config, or a `model_type` string).

    Example:

    ```python
    >>> from hf_entity_models import RefReaderConfig
    >>> gap_training_recipe(RefReaderConfig()), gap_training_recipe("petra"), gap_training_recipe("other")
    ('refreader', 'petra', 'petra')

    ```
    """
    if isinstance(model, str):
        model_type = model
    else:
        config = getattr(model, "config", model)
        model_type = getattr(config, "model_type", None)
    return model_type if model_type in GAP_TRAINING_RECIPES else DEFAULT_GAP_RECIPE


def gap_training_arguments(output_dir: str, recipe: str = DEFAULT_GAP_RECIPE, **overrides) -> TrainingArguments:
    """`TrainingArguments` for GAP with a model's recipe (`GAP_TRAINING_RECIPES`); any argument can be overridden.

    Args:
        output_dir: Trainer output folder.
        recipe: `"petra"` (default) or `"refreader"`; `gap_training_recipe(model)` picks the model's own.
        **overrides: Any `TrainingArguments` field; it wins over the recipe.

    Example:

    ```python
    >>> args = gap_training_arguments("runs/refreader", recipe="refreader")  # doctest: +SKIP
    >>> args.max_grad_norm, args.lr_scheduler_type  # doctest: +SKIP
    (0.0, <SchedulerType.CONSTANT: 'constant'>)

    ```
    """
    if recipe not in GAP_TRAINING_RECIPES:
        raise ValueError(f"Unknown GAP training recipe {recipe!r}; choose one of {sorted(GAP_TRAINING_RECIPES)}.")
    values = dict(
        output_dir=output_dir,
        **copy.deepcopy(GAP_TRAINING_RECIPES[recipe]),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        num_train_epochs=100,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="f1",
        greater_is_better=True,
        # Random batches: the memory skips padding, so grouping by length buys little, and transformers 5.x
        # reorders evaluation data too when it groups by length.
        train_sampling_strategy="random",
        logging_strategy="epoch",
        report_to="none",
        # On a machine without GPUs, use_cpu lets `accelerate launch --multi_gpu` processes join one gloo group.
        use_cpu=not torch.cuda.is_available(),
        # Pinned memory only speeds up copies to a GPU; on a CPU-only machine the DataLoader just warns about it.
        dataloader_pin_memory=torch.cuda.is_available(),
        # Every trainable parameter takes part in every step (the encoder is frozen): skip DDP's extra search.
        ddp_find_unused_parameters=False,
        dataloader_num_workers=0,
    )
    values.update(overrides)
    return TrainingArguments(**values)


def build_gap_trainer(
    model,
    args: TrainingArguments,
    train_dataset,
    eval_dataset,
    eval_gold: Sequence[GapGold],
    pad_token_id: int = 0,
    early_stopping_patience: int | None = 15,
    extra_callbacks: Sequence = (),
    threshold_grid: str = "package",
    gumbel_epoch_offset: int = 0,
    optimizers: tuple = (None, None),
) -> Trainer:
    """A stock `Trainer` wired for GAP: collator, GAP metrics, Gumbel schedule and early stopping.

    Args:
        model: A coreference memory model (e.g. `PetraForCoreference`).
        args: Training arguments, e.g. from `gap_training_arguments`.
        train_dataset / eval_dataset: Prepared GAP examples (`prepare_gap_dataset`), or their cached-feature
            versions (`cache_encoder_features`).
        eval_gold: Gold rows of `eval_dataset`, in the same order (`gap_gold`).
        pad_token_id: Padding id of the tokenizer.
        early_stopping_patience: Evaluations without improvement before stopping (None disables it).
        threshold_grid: Validation threshold grid of the GAP metrics (`THRESHOLD_GRIDS`; default `"package"`).
        gumbel_epoch_offset: `GumbelTemperatureCallback(epoch_offset=...)`: 0 (default) halves the temperature
            first at epoch 11 counting from 1, 1 at epoch 10 (PeTra's authors' code).
        optimizers: `Trainer(optimizers=...)`, e.g. `(two_rate_adamw(...), None)` for a fine-tuned encoder.
    """
    check_processes_connected(args)
    callbacks = [GumbelTemperatureCallback(epoch_offset=gumbel_epoch_offset), *extra_callbacks]
    if early_stopping_patience is not None and eval_dataset is not None:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=early_stopping_patience))
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=CoreferenceCollator(pad_token_id=pad_token_id),
        compute_metrics=(
            GapMetrics(eval_gold, _link_pair_counts(eval_dataset), threshold_grid=threshold_grid)
            if eval_dataset is not None
            else None
        ),
        preprocess_logits_for_metrics=keep_candidate_scores,
        callbacks=callbacks,
        optimizers=optimizers,
    )


def _record_gap_scores(
    config,
    scores: GapScores,
    threshold: float,
    gold: Sequence[GapGold],
    dataset: str,
    dataset_name: str | None,
    split: str = "validation",
) -> None:
    """Store the scores at the chosen threshold in the config, where the saved model card reads them, and the F1 of
    calling every candidate coreferent on the same rows: the baseline the model's F1 must beat."""
    if not hasattr(config, "evaluation_results"):  # a config without an evaluation_results field
        return
    all_positive = score_gap(gold, {row.example_id: (True, True) for row in gold})
    record_evaluation(config, "coreference", dataset, split, "all_positive_f1", all_positive.f1, dataset_name=dataset_name)
    values = {
        "f1": scores.f1,
        "precision": scores.overall.precision,
        "recall": scores.overall.recall,
        "masculine_f1": scores.masculine_f1,
        "feminine_f1": scores.feminine_f1,
        "bias": scores.bias,
    }
    for metric, value in values.items():
        if math.isfinite(value):  # bias is NaN when masculine F1 is 0: an undefined ratio is not a result
            record_evaluation(
                config,
                "coreference",
                dataset,
                split,
                metric,
                float(value),
                threshold=float(threshold),
                dataset_name=dataset_name,
            )


def _two_rate_optimizer(model, args: TrainingArguments, encoder_learning_rate: float):
    """AdamW with `encoder_learning_rate` for a fine-tuned encoder and the recipe's rate for the memory model."""
    if uses_frozen_encoder(model) or not hasattr(model, "get_encoder_features"):
        raise ValueError(
            "encoder_learning_rate needs a model that fine-tunes its encoder (PeTra with freeze_encoder=False)."
        )
    encoder = model.base_model.encoder
    return two_rate_adamw(model, encoder, encoder_learning_rate, args.learning_rate, args.weight_decay)


def _link_pair_counts(dataset) -> list[int] | None:
    rows = getattr(dataset, "dataset", dataset)  # a CachedFeatureDataset keeps its rows in `.dataset`
    if "link_labels" not in getattr(rows, "column_names", ()):
        return None
    return [len(labels) for labels in rows["link_labels"]]


def _rows_description(split: str, source) -> str:
    """The rows of a split for a message, with their file or Hub id when they came as one."""
    return f"the {split} rows ({os.fspath(source)})" if isinstance(source, (str, os.PathLike)) else f"the {split} rows"


def _warn_about_shared_rows(train, validation) -> None:
    """Validation rows that are also training rows overrate the model (`hf-entity train` refuses them)."""
    shared = shared_ids(train, validation)
    if shared:
        logger.warning(
            f"{len(shared)} of the {len(validation)} validation rows are also training rows (ids {shared[:3]}"
            f"{' ...' if len(shared) > 3 else ''}): the epoch and the threshold are chosen on rows the model trains "
            "on, and the recorded validation F1 overrates it. Validate on rows it does not train on "
            "(`hold_out_gap_rows` splits a file)."
        )


def gap_link_scheme(model) -> str:
    """The GAP token pairs a coreference model trains on (`build_link_pairs`): the model's `gap_link_scheme`."""
    return getattr(model, "gap_link_scheme", "petra")


def tune_threshold(
    trainer: Trainer,
    eval_dataset,
    eval_gold: Sequence[GapGold],
    dataset: str = "gap",
    dataset_name: str | None = "GAP",
    threshold_grid: str = "package",
) -> ThresholdSweep:
    """Choose the decision threshold on validation (0.00..0.99) and store it in `model.config.coref_threshold`.

    The scores at that threshold are recorded in `config.evaluation_results` under `dataset` (the model card
    reports them). `threshold_grid` names another grid of `THRESHOLD_GRIDS`; with a strict (`>`) grid the stored
    threshold is `sweep.decision_threshold`, the equivalent threshold for the `>=` rule of the pipeline.
    """
    prediction = trainer.predict(eval_dataset)
    metrics = GapMetrics(eval_gold, _link_pair_counts(eval_dataset), threshold_grid=threshold_grid)
    metrics.check_order(prediction.label_ids)
    sweep = metrics.sweep(keep_candidate_scores(prediction.predictions, None))
    trainer.model.config.coref_threshold = float(sweep.decision_threshold)
    _record_gap_scores(
        trainer.model.config, sweep.best_scores, sweep.decision_threshold, eval_gold, dataset, dataset_name
    )
    logger.info(f"Decision threshold {sweep.best_threshold:.2f} gives validation F1 {sweep.best_f1:.4f}")
    return sweep


@dataclass
class GapTrainingResult:
    """What `train_on_gap` measured: the trainer (with the best model loaded), the threshold sweep, epoch times."""

    trainer: Trainer
    threshold_sweep: ThresholdSweep
    epoch_seconds: list[float] = field(default_factory=list)

    report_scores: GapScores | None = None

    @property
    def validation_scores(self) -> GapScores:
        """GAP scores on the selection data (`validation_source`) at the threshold selected on it."""
        return self.threshold_sweep.best_scores


def score_gap_at_threshold(
    trainer: Trainer, eval_dataset, eval_gold: Sequence[GapGold], threshold: float
) -> GapScores:
    """GAP scores of the trainer's model on `eval_dataset` with a fixed decision threshold (`>=`).

    The threshold comes from elsewhere (e.g. `tune_threshold` on held-out data), so nothing is selected here.
    """
    # The trainer's own compute_metrics belongs to its evaluation set, not to these rows.
    compute_metrics, trainer.compute_metrics = trainer.compute_metrics, None
    try:
        prediction = trainer.predict(eval_dataset)
    finally:
        trainer.compute_metrics = compute_metrics
    metrics = GapMetrics(eval_gold, _link_pair_counts(eval_dataset))
    metrics.check_order(prediction.label_ids)
    scores = np.asarray(keep_candidate_scores(prediction.predictions, None), dtype=np.float64)
    probabilities = {gold.example_id: (scores[i, 0], scores[i, 1]) for i, gold in enumerate(metrics.gold)}
    return score_gap_probabilities(metrics.gold, probabilities, threshold)


def train_on_gap(
    model,
    tokenizer,
    train_source,
    validation_source,
    output_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    max_train_rows: int | None = None,
    max_validation_rows: int | None = None,
    early_stopping_patience: int | None = 15,
    dataset: str = "gap",
    dataset_name: str | None = "GAP",
    recipe: str | None = None,
    threshold_grid: str = "package",
    gumbel_epoch_offset: int = 0,
    report_source=None,
    report_split: str = "test",
    encoder_learning_rate: float | None = None,
    **training_overrides,
) -> GapTrainingResult:
    """Train a coreference memory model on GAP with the stock Trainer and pick its threshold on validation.

    With a frozen encoder the encoder features of both splits are computed once (and cached on disk under
    `cache_dir`), so no epoch runs the encoder. The chosen threshold is stored in `model.config.coref_threshold`.

    Under ``accelerate launch`` every process calls it: the Trainer trains data-parallel and saves its checkpoints
    from the main process only, the main process writes the feature cache first (the others then read it), and the
    predictions of the threshold sweep and the report are gathered from all processes, so every process chooses the
    same threshold and returns the same scores. Save the final model on the main process only
    (`result.trainer.save_model(...)` does that by itself).

    Args:
        model: e.g. `PetraForCoreference.from_encoder(...)`.
        tokenizer: The encoder's fast tokenizer.
        train_source / validation_source: GAP TSV paths, Hub dataset ids, or datasets in the `load_gap` layout.
        output_dir: Trainer output folder (checkpoints).
        cache_dir: Folder for cached encoder features (None keeps them in memory).
        max_train_rows: Train on the first rows only (quick runs).
        max_validation_rows: Select the epoch and threshold on the first validation rows only (quick runs; the
            scores recorded then describe those rows).
        early_stopping_patience: Epochs without validation improvement before stopping.
        dataset / dataset_name: Id and display name the validation scores are recorded under (model card).
        recipe: Optimisation recipe (`GAP_TRAINING_RECIPES`); None takes the model's own (`gap_training_recipe`).
        threshold_grid: Validation threshold grid (`THRESHOLD_GRIDS`): `"package"` (default, 0.00..0.99 with
            `>=`), `"paper"` (0.01..1.00 with `>`) or `"authors_code"` (0.00..0.99 with `>`).
        gumbel_epoch_offset: 0 (default) halves the Gumbel temperature first at epoch 11 counting from 1; 1 at
            epoch 10, as PeTra's authors' code does.
        report_source: GAP rows used for nothing but the report (e.g. GAP validation, when `validation_source` is
            a held-out part of development from `hold_out_gap_rows`): scored once, at the threshold chosen on
            `validation_source`, with the best epoch chosen there; recorded under `report_split`.
        report_split: Split name the report scores are recorded under in `config.evaluation_results`.
        encoder_learning_rate: Learning rate of the encoder's trainable parameters when the model fine-tunes its
            encoder (PeTra with `freeze_encoder=False`); the rest keeps the recipe's rate (`two_rate_adamw`).
        **training_overrides: Any `TrainingArguments` field, e.g. `num_train_epochs=20`; wins over the recipe.

    Example:

    ```python
    >>> result = train_on_gap(model, tokenizer, "gap-development.tsv", "gap-validation.tsv", "runs/petra")  # doctest: +SKIP
    >>> result.validation_scores.f1  # doctest: +SKIP

    ```
    """
    link_scheme = gap_link_scheme(model)
    for name, limit in (("max_train_rows", max_train_rows), ("max_validation_rows", max_validation_rows)):
        if limit is not None and limit < 1:
            raise ValueError(f"{name} must be >= 1, got {limit}.")
    # Validation first: its ids are checked before anything is trained (the metrics match predictions by id).
    validation = prepare_gap_dataset(validation_source, tokenizer, link_scheme=link_scheme)
    if max_validation_rows is not None:
        validation = validation.select(range(min(max_validation_rows, len(validation))))
    check_unique_ids(validation, _rows_description("validation", validation_source))
    train = prepare_gap_dataset(train_source, tokenizer, link_scheme=link_scheme)
    if max_train_rows is not None:
        train = train.select(range(min(max_train_rows, len(train))))
    _warn_about_shared_rows(train, validation)
    args = gap_training_arguments(str(output_dir), recipe or gap_training_recipe(model), **training_overrides)
    validation_inputs = validation
    if uses_frozen_encoder(model):
        model.to(args.device)  # encode on the training device
        # One process encodes and writes the cache; the others then load it.
        with args.main_process_first(desc="encoder features"):
            train = cache_encoder_features(model, train, cache_dir=cache_dir)
            validation_inputs = cache_encoder_features(model, validation, cache_dir=cache_dir)
    gold = gap_gold(validation)
    optimizer = None
    if encoder_learning_rate is not None:
        optimizer = _two_rate_optimizer(model, args, encoder_learning_rate)
    timer = EpochTimerCallback()
    trainer = build_gap_trainer(
        model,
        args,
        train,
        validation_inputs,
        gold,
        pad_token_id=tokenizer.pad_token_id or 0,
        early_stopping_patience=early_stopping_patience,
        extra_callbacks=[timer],
        threshold_grid=threshold_grid,
        gumbel_epoch_offset=gumbel_epoch_offset,
        optimizers=(optimizer, None),
    )
    trainer.train()
    sweep = tune_threshold(trainer, validation_inputs, gold, dataset, dataset_name, threshold_grid=threshold_grid)
    report_scores = None
    if report_source is not None:
        report = prepare_gap_dataset(report_source, tokenizer, link_scheme=link_scheme)
        report_inputs = report
        if uses_frozen_encoder(model):
            with args.main_process_first(desc="encoder features"):
                report_inputs = cache_encoder_features(model, report, cache_dir=cache_dir)
        report_gold = gap_gold(report)
        report_scores = score_gap_at_threshold(trainer, report_inputs, report_gold, sweep.decision_threshold)
        _record_gap_scores(
            model.config, report_scores, sweep.decision_threshold, report_gold, dataset, dataset_name, split=report_split
        )
    return GapTrainingResult(
        trainer=trainer, threshold_sweep=sweep, epoch_seconds=timer.epoch_seconds, report_scores=report_scores
    )
