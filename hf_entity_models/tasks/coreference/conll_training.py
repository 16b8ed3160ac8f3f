"""Training and evaluation of the coreference memory models on whole CoNLL-2012 documents (LitBank) with `Trainer`.

`train_on_conll` is `train_on_gap` for corpora that annotate every mention of every entity:

* training rows are chunks of at most `chunk_length` tokens with dense supervision (`conll_coreference_examples`:
  self, positive and negative link pairs and the mention-detection targets), features of the frozen encoder cached
  once;
* evaluation reads every validation document whole (the model encodes it in windows and its memory runs over the
  whole document), turns the memory log into clusters (`clusters_from_memory_log`) and scores them with the
  CoNLL-2012 metrics (`score_coreference`, singletons kept, as LitBank is scored); the mention threshold and the
  new-entity rule are swept on the validation documents, and the best epoch is the one with the best CoNLL F1
  there;
* the chosen thresholds are stored in `config.mention_threshold` and `config.new_entity_threshold` (the
  pipeline's defaults) and the scores in `config.evaluation_results` (the model card); `report_source` documents
  are scored once, at those thresholds.

Example:

```python
>>> result = train_on_conll(model, tokenizer, train_books, selection_books, "runs/petra-litbank")  # doctest: +SKIP
>>> result.validation_metrics["conll_f1"], result.report_metrics["conll_f1"]  # doctest: +SKIP

```
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import EarlyStoppingCallback, EvalPrediction, Trainer
from transformers.utils import logging

from ...hub.evaluation_results import record_evaluation
from ...training import EpochTimerCallback, GumbelTemperatureCallback, check_processes_connected
from .collator import CoreferenceCollator
from .conll import CorefDocument, read_conll_coreference
from .conll_examples import clusters_from_memory_log, conll_coreference_examples
from .conll_metrics import documents_by_name, score_coreference
from .features import cache_encoder_features, uses_frozen_encoder
from .training import gap_training_arguments, gap_training_recipe

logger = logging.get_logger(__name__)

__all__ = [
    "CONLL_BATCH_SIZE",
    "CONLL_CHUNK_LENGTH",
    "CONLL_CONFIG_DEFAULTS",
    "ConllMetrics",
    "ConllTrainingResult",
    "MENTION_THRESHOLDS",
    "conll_evaluation_trainer",
    "conll_responses",
    "evaluate_conll",
    "keep_memory_decisions",
    "mention_scores",
    "predict_memory_decisions",
    "train_on_conll",
]

# Config of a fresh model trained on whole documents (the CLI and the benchmark start from it): positive links 5,
# negative 1 (GAP's negative 50 balances its two candidates per pronoun; a mention here has up to
# `negatives_per_mention` negatives against one positive; 5 / 1 beat 1 / 1 in a pilot: 20 training books, 2 epochs,
# CoNLL F1 29.9 vs 25.6 on 5 selection books) and, for PeTra,
# the bounded coreference update of the authors' code (the paper's MLP update grows without bound on a cell updated
# hundreds of times in a book, until the similarity overflows).
CONLL_CONFIG_DEFAULTS = {
    "petra": {"positive_link_weight": 5.0, "negative_link_weight": 1.0, "coref_update_mlp": "tanh_linear"},
    # Four cells, the top of the paper's range (2 or 4 on GAP): a book has many entities in play at once.
    "refreader": {
        "self_link_weight": 1.0, "positive_link_weight": 5.0, "negative_link_weight": 1.0, "num_memory_cells": 4,
    },
}
# Training rows and batches of `train_on_conll` (piloted on 20 training books: more, shorter rows give more updates
# per epoch at the same cost, the memory being a loop over tokens).
CONLL_CHUNK_LENGTH, CONLL_BATCH_SIZE = 256, 8
# Which earlier mentions of its entity a mention is a positive pair with (`conll_coreference_examples`), per model.
CONLL_ANTECEDENTS = {"petra": "nearest", "refreader": "all"}
# Mention thresholds and new-entity rules (`token_entities`) swept on the validation documents.
MENTION_THRESHOLDS = tuple(round(value, 2) for value in np.arange(0.05, 1.0, 0.05))
NEW_ENTITY_THRESHOLDS = (None, 0.1, 0.2, 0.3, 0.4, 0.5)
# Model outputs the clusters do not need: left out of evaluation so that Trainer gathers only the memory decisions.
_OUTPUTS_NOT_NEEDED = [
    "candidate_scores",
    "entity_probs",
    "reference_probs",
    "usage",
    "memory",
    "salience",
    "memory_gate",
    "coref_loss",
    "entity_loss",
    "mention_loss",
    "lm_loss",
]


def keep_memory_decisions(logits: Any, labels: Any) -> torch.Tensor:
    """`preprocess_logits_for_metrics`: the memory log the clusters are decoded from, overwrite and coref side by
    side, `(B, T, 2N)` (the other outputs, the memory itself above all, are not gathered)."""
    return torch.cat([logits[0], logits[1]], dim=-1)


def _split_log(decisions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    cells = decisions.shape[-1] // 2
    return decisions[:, :cells], decisions[:, cells:]


class ConllMetrics:
    """`compute_metrics` for whole-document coreference: CoNLL-2012 scores of the clusters the memory found.

    The evaluation rows must be whole documents (`conll_coreference_examples(..., chunk_length=None)`), in order.
    With `thresholds=None` the mention threshold and the new-entity rule are swept (`MENTION_THRESHOLDS` x
    `NEW_ENTITY_THRESHOLDS`) and the best CoNLL F1 is reported with its choice; with a pair
    `(mention_threshold, new_entity_threshold)`, only that pair is scored (a report set).

    Reported (percent): ``conll_f1``, ``muc_f1``, ``bcub_f1``, ``ceafe_f1``, ``lea_f1``, ``mention_f1`` /
    ``mention_recall`` / ``mention_precision`` (exact spans) with the model's own mentions; ``gold_conll_f1`` with
    the gold mentions clustered by the model (same new-entity rule); ``mention_threshold`` and
    ``new_entity_threshold`` (-1 for the rule "overwrite >= coref", None in `score`'s result).
    """

    def __init__(
        self,
        documents: Sequence[CorefDocument],
        word_ids: Sequence[Sequence[int]],
        thresholds: tuple[float, float | None] | None = None,
    ):
        if len(documents) != len(word_ids):
            raise ValueError(f"Got {len(word_ids)} evaluation rows for {len(documents)} documents; one row each.")
        self.documents = list(documents)
        self.word_ids = [list(ids) for ids in word_ids]
        self.thresholds = thresholds

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        metrics = self.score(prediction.predictions)
        # Trainer logs numbers only.
        return {**metrics, "new_entity_threshold": _as_number(metrics["new_entity_threshold"])}

    def score(self, decisions: Any) -> dict[str, float]:
        """Metrics of the memory logs `(documents, tokens, 2 x cells)` (`keep_memory_decisions`, padded)."""
        logs = self.logs(decisions)
        pairs = (
            [(m, n) for n in NEW_ENTITY_THRESHOLDS for m in MENTION_THRESHOLDS]
            if self.thresholds is None
            else [self.thresholds]
        )
        best: dict[str, Any] | None = None
        for mention_threshold, new_entity_threshold in pairs:
            responses = self.responses(logs, mention_threshold, new_entity_threshold)
            metrics: dict[str, Any] = _summary(score_coreference(self.documents, responses))
            metrics.update(mention_scores(self.documents, responses))
            metrics.update(mention_threshold=float(mention_threshold), new_entity_threshold=new_entity_threshold)
            if best is None or metrics["conll_f1"] > best["conll_f1"]:
                best = metrics
        gold = self.responses(logs, None, best["new_entity_threshold"])
        best["gold_conll_f1"] = score_coreference(self.documents, gold)["conll_f1"]
        return best

    def responses(
        self, logs: list[tuple[np.ndarray, np.ndarray]], mention_threshold: float | None, new_entity_threshold
    ) -> list[CorefDocument]:
        """The clusters of every document; `mention_threshold=None` clusters the gold mentions."""
        return [
            clusters_from_memory_log(
                document, ids, *log, mention_threshold=mention_threshold or 0.0,
                gold_mentions=mention_threshold is None, new_entity_threshold=new_entity_threshold,
            )  # fmt: skip
            for document, ids, log in zip(self.documents, self.word_ids, logs)
        ]

    def logs(self, decisions: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every document's (overwrite, coref) log `(tokens, cells)` from the padded predictions, padding removed."""
        decisions = np.asarray(decisions[0] if isinstance(decisions, (tuple, list)) else decisions)
        if decisions.ndim != 3 or decisions.shape[0] != len(self.documents) or decisions.shape[-1] % 2:
            raise ValueError(
                f"Expected memory logs of shape ({len(self.documents)}, tokens, 2 x cells), got {decisions.shape}; "
                "evaluate on whole documents, in the order of the documents given to ConllMetrics."
            )
        logs = []
        for row, ids in enumerate(self.word_ids):
            if decisions.shape[1] < len(ids):
                raise ValueError(f"Row {row} has {decisions.shape[1]} token decisions for {len(ids)} tokens.")
            logs.append(_split_log(decisions[row, : len(ids)]))
        return logs


def _as_number(new_entity_threshold: float | None) -> float:
    return -1.0 if new_entity_threshold is None else float(new_entity_threshold)


def _summary(scores: dict[str, Any]) -> dict[str, float]:
    summary = {"conll_f1": float(scores["conll_f1"])}
    for metric in ("muc", "bcub", "ceafe", "lea"):
        summary[f"{metric}_f1"] = float(scores[metric]["f1"])
    return summary


def mention_scores(key: Sequence[CorefDocument], response: Sequence[CorefDocument]) -> dict[str, float]:
    """Mention detection, exact spans, over all documents (percent): ``mention_recall``, ``_precision``, ``_f1``."""
    gold = {(d.name, d.part, first, last) for d in key for first, last, _ in d.mentions}
    found = {(d.name, d.part, first, last) for d in response for first, last, _ in d.mentions}
    correct = len(gold & found)
    recall = 100.0 * correct / len(gold) if gold else 0.0
    precision = 100.0 * correct / len(found) if found else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return {"mention_recall": recall, "mention_precision": precision, "mention_f1": f1}


@dataclass
class ConllTrainingResult:
    """What `train_on_conll` measured: the trainer (best epoch loaded) and the metrics of `ConllMetrics`."""

    trainer: Trainer
    validation_metrics: dict[str, float]
    report_metrics: dict[str, float] | None = None
    epoch_seconds: list[float] = field(default_factory=list)


def _documents(source: str | os.PathLike | Sequence[Any], what: str) -> list[CorefDocument]:
    """The documents of `source` (files, folders or `CorefDocument` objects); `what` names them in errors."""
    if isinstance(source, (str, os.PathLike)):
        return read_conll_coreference(source)
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)) and not source:
        raise ValueError(f"The {what} documents are an empty list; pass at least one CorefDocument, CoNLL file or "
                         "folder.")
    if isinstance(source, Sequence) and source and all(isinstance(item, CorefDocument) for item in source):
        return list(source)
    if isinstance(source, Sequence) and source and all(isinstance(item, (str, Path)) for item in source):
        return read_conll_coreference(source)
    raise TypeError(
        "Pass CoNLL documents as a file, a folder, a list of paths or a non-empty list of CorefDocument, got "
        f"{type(source).__name__}."
    )


def _warn_about_shared_documents(train: Sequence[CorefDocument], validation: Sequence[CorefDocument]) -> None:
    """Validation documents that are also training documents overrate the model (`hf-entity train` refuses them)."""
    trained = {(document.name, document.part) for document in train}
    shared = [document.label for document in validation if (document.name, document.part) in trained]
    if shared:
        logger.warning(
            f"{len(shared)} of the {len(validation)} validation documents are also training documents ({shared[:3]}"
            f"{' ...' if len(shared) > 3 else ''}): the epoch and the mention threshold are chosen on documents the "
            "model trains on, and the recorded validation scores overrate it."
        )


def _model_inputs(model, rows, cache_dir, args):
    if not uses_frozen_encoder(model):
        return rows
    with args.main_process_first(desc="encoder features"):
        return cache_encoder_features(model, rows.remove_columns(["document_index", "word_ids"]), cache_dir=cache_dir)


def predict_memory_decisions(
    trainer: Trainer, documents: Sequence[CorefDocument], tokenizer: Any, cache_dir: str | None = None
) -> tuple[Any, list[list[int]]]:
    """Per-token memory decisions (`keep_memory_decisions`, the trainer's `preprocess_logits_for_metrics`) of the
    trainer's model on whole documents, and the word of every token."""
    rows = conll_coreference_examples(documents, tokenizer)
    inputs = _model_inputs(trainer.model, rows, cache_dir, trainer.args)
    compute_metrics, trainer.compute_metrics = trainer.compute_metrics, None
    try:
        prediction = trainer.predict(inputs, ignore_keys=_OUTPUTS_NOT_NEEDED)
    finally:
        trainer.compute_metrics = compute_metrics
    return prediction.predictions, rows["word_ids"]


def conll_responses(
    trainer: Trainer,
    documents: Sequence[CorefDocument],
    tokenizer: Any,
    mention_threshold: float | None = None,
    gold_mentions: bool = False,
    cache_dir: str | os.PathLike | None = None,
) -> list[CorefDocument]:
    """The clusters the trainer's model finds in every document (`clusters_from_memory_log`), as response documents.

    `mention_threshold` defaults to the model's `config.mention_threshold`, and the new-entity rule is the model's
    `config.new_entity_threshold` (both chosen by `train_on_conll`); with `gold_mentions=True` the gold mentions are
    clustered instead. Score them with `score_coreference(documents, responses)` or write them with
    `write_conll_coreference`.
    """
    config = trainer.model.config
    if mention_threshold is None:
        mention_threshold = float(getattr(config, "mention_threshold", 0.5))
    decisions, word_ids = predict_memory_decisions(trainer, documents, tokenizer, cache_dir)
    metrics = ConllMetrics(documents, word_ids)
    return metrics.responses(
        metrics.logs(decisions),
        None if gold_mentions else mention_threshold,
        getattr(config, "new_entity_threshold", None),
    )


def train_on_conll(
    model,
    tokenizer,
    train_source,
    validation_source,
    output_dir: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    chunk_length: int | None = CONLL_CHUNK_LENGTH,
    negatives_per_mention: int = 5,
    antecedents: str | None = None,
    early_stopping_patience: int | None = 5,
    dataset: str = "litbank",
    dataset_name: str | None = "LitBank",
    report_source=None,
    report_split: str = "test",
    recipe: str | None = None,
    **training_overrides,
) -> ConllTrainingResult:
    """Train a coreference memory model on CoNLL-2012 documents with the stock Trainer; select on validation.

    Args:
        model: e.g. `PetraForCoreference.from_encoder(...)` (or a GAP-trained checkpoint to fine-tune).
        tokenizer: The encoder's fast tokenizer.
        train_source / validation_source: CoNLL files, folders, lists of them, or lists of `CorefDocument`.
        output_dir: Trainer output folder (checkpoints).
        cache_dir: Folder for cached encoder features (None keeps them in memory).
        chunk_length: Tokens per training row (None: whole documents). Validation always reads whole documents.
        negatives_per_mention: Earlier other-entity mentions each mention is paired with as a negative.
        antecedents: Positive pairs with the `"nearest"` or `"all"` earlier mentions of the entity (None: the
            model's own, `CONLL_ANTECEDENTS`).
        early_stopping_patience: Epochs without a better validation CoNLL F1 before stopping.
        dataset / dataset_name: Id and display name the scores are recorded under (model card).
        report_source: Documents scored once, at the threshold and epoch chosen on validation.
        report_split: Split name of the report scores in `config.evaluation_results`.
        recipe: Optimisation recipe of `GAP_TRAINING_RECIPES` (None: the model's own).
        **training_overrides: Any `TrainingArguments` field, e.g. `num_train_epochs=5`.
    """
    if getattr(model.config, "coref_update_mlp", None) == "mlp":
        logger.warning(
            "PeTra's coreference update is the unbounded MLP (coref_update_mlp='mlp'): on long documents a cell "
            "updated hundreds of times can grow until the similarity overflows (NaN losses on LitBank). "
            "coref_update_mlp='tanh_linear' (the authors' code) keeps the memory bounded."
        )
    train_documents = _documents(train_source, "training")
    validation_documents = _documents(validation_source, "validation")
    documents_by_name(validation_documents, "validation")  # a document given twice: refused before training
    _warn_about_shared_documents(train_documents, validation_documents)
    if antecedents is None:
        antecedents = CONLL_ANTECEDENTS.get(getattr(model.config, "model_type", None), "nearest")
    train_rows = conll_coreference_examples(
        train_documents, tokenizer, chunk_length, negatives_per_mention, antecedents
    )
    validation_rows = conll_coreference_examples(
        validation_documents, tokenizer, None, negatives_per_mention, antecedents
    )
    values = dict(
        metric_for_best_model="conll_f1",
        per_device_train_batch_size=CONLL_BATCH_SIZE,
        per_device_eval_batch_size=4,
        num_train_epochs=20,
    )
    values.update(training_overrides)
    args = gap_training_arguments(str(output_dir), recipe or gap_training_recipe(model), **values)
    model.to(args.device)
    train_inputs = _model_inputs(model, train_rows, cache_dir, args)
    validation_inputs = _model_inputs(model, validation_rows, cache_dir, args)
    check_processes_connected(args)
    timer = EpochTimerCallback()
    callbacks = [GumbelTemperatureCallback(), timer]
    if early_stopping_patience is not None:
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=early_stopping_patience))
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_inputs,
        eval_dataset=validation_inputs,
        data_collator=CoreferenceCollator(pad_token_id=tokenizer.pad_token_id or 0),
        compute_metrics=ConllMetrics(validation_documents, validation_rows["word_ids"]),
        preprocess_logits_for_metrics=keep_memory_decisions,
        callbacks=callbacks,
    )
    trainer.train(ignore_keys_for_eval=_OUTPUTS_NOT_NEEDED)
    validation_metrics = evaluate_conll(trainer, validation_documents, tokenizer, cache_dir=cache_dir)
    model.config.mention_threshold = validation_metrics["mention_threshold"]
    model.config.new_entity_threshold = validation_metrics["new_entity_threshold"]
    _record_conll_scores(model.config, validation_metrics, dataset, dataset_name, "validation")
    report_metrics = None
    if report_source is not None:
        chosen = (validation_metrics["mention_threshold"], validation_metrics["new_entity_threshold"])
        report_metrics = evaluate_conll(trainer, _documents(report_source, report_split), tokenizer, chosen, cache_dir)
        _record_conll_scores(model.config, report_metrics, dataset, dataset_name, report_split)
    return ConllTrainingResult(trainer, validation_metrics, report_metrics, timer.epoch_seconds)


def conll_evaluation_trainer(model, tokenizer: Any, output_dir: str | os.PathLike, batch_size: int = 4) -> Trainer:
    """A `Trainer` that only predicts, wired like `train_on_conll`'s, for evaluating a trained checkpoint."""
    args = gap_training_arguments(
        str(output_dir), gap_training_recipe(model), per_device_eval_batch_size=batch_size, eval_strategy="no",
        save_strategy="no", load_best_model_at_end=False, lr_scheduler_type="constant", lr_scheduler_kwargs={},
    )  # fmt: skip
    return Trainer(
        model=model,
        args=args,
        data_collator=CoreferenceCollator(pad_token_id=tokenizer.pad_token_id or 0),
        preprocess_logits_for_metrics=keep_memory_decisions,
    )


def evaluate_conll(
    trainer: Trainer,
    documents: Sequence[CorefDocument],
    tokenizer: Any,
    thresholds: tuple[float, float | None] | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """`ConllMetrics` of the trainer's model on whole documents: at `thresholds` (mention threshold, new-entity
    threshold), or with both swept when None (then the result says which were best)."""
    decisions, word_ids = predict_memory_decisions(trainer, documents, tokenizer, cache_dir)
    return ConllMetrics(documents, word_ids, thresholds).score(decisions)


def _record_conll_scores(config, metrics: dict[str, float], dataset: str, dataset_name: str | None, split: str):
    if not hasattr(config, "evaluation_results"):
        return
    for metric in ("conll_f1", "gold_conll_f1", "mention_f1"):
        record_evaluation(
            config, "coreference", dataset, split, metric, float(metrics[metric]),
            threshold=float(metrics["mention_threshold"]), dataset_name=dataset_name,
        )  # fmt: skip
