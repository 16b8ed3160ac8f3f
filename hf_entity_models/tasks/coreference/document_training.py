"""Training and evaluation of the document mode of the coreference memory models (`coreference_mode="document"`:
span mentions proposed and scored, clustered by an entity memory, `models/_shared/document_coreference.py`) on whole
CoNLL-2012 documents (LitBank) with the stock `Trainer`.

The recipe measured by `benchmarks/bench_document_coref.py`:

* one training step per document: the whole book, the memory carried across it (`per_device_train_batch_size=1`);
* Adam (AdamW without weight decay), the learning rate decayed linearly from 1e-3 to 0 over `DOCUMENT_EPOCHS` (15)
  epochs (a fine-tuned encoder's layers from `encoder_learning_rate`), gradients clipped at norm 1.0, the loss
  `span_loss_weight * mention_loss + cluster_loss` of the model;
* a frozen encoder's word features computed once per document (`document_word_features`) and cached;
* after every epoch the validation documents are clustered at the span threshold 0.0 and scored by their CoNLL F1
  with the model's own mentions (`score_coreference`); the best epoch's weights are kept and loaded at the end;
* the span threshold is then chosen among `DOCUMENT_SPAN_THRESHOLDS` on the validation documents and stored in
  `config.span_threshold`; the scores are recorded in `config.evaluation_results` (the model card).

Under ``accelerate launch`` every process calls `train_document_coreference`: the Trainer trains data-parallel, the
main process scores the validation documents, and the chosen weights, threshold and scores are sent to every
process, so that all return the same model and result.

Example:

```python
>>> model = PetraForCoreference.from_encoder("bert-base-cased", coreference_mode="document")  # doctest: +SKIP
>>> result = train_document_coreference(model, tokenizer, train_books, selection_books, "runs/petra")  # doctest: +SKIP
>>> result.validation_metrics["conll_f1"], model.config.span_threshold  # doctest: +SKIP

```
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging

from ...hub.evaluation_results import record_evaluation
from ...training import EpochTimerCallback, check_processes_connected
from .conll import CorefDocument
from .conll_metrics import documents_by_name, score_coreference
from .conll_training import _documents, _summary, _warn_about_shared_documents, mention_scores
from .features import _load_cached_features, _save_features, encoder_features_fingerprint, uses_frozen_encoder
from .pipeline import predict_document_batch

logger = logging.get_logger(__name__)

__all__ = [
    "DOCUMENT_EPOCHS",
    "DOCUMENT_SPAN_THRESHOLDS",
    "DocumentCollator",
    "DocumentSelectionCallback",
    "DocumentTrainingResult",
    "add_document_word_features",
    "document_metrics",
    "document_responses",
    "document_rows",
    "document_training_arguments",
    "evaluate_document_coreference",
    "train_document_coreference",
    "without_crossing_mentions",
]

# Span thresholds (mention logits) swept on the validation documents after the best epoch is chosen at 0.0.
DOCUMENT_SPAN_THRESHOLDS = (-1.0, -0.5, 0.0, 0.5, 1.0)
# The span threshold every epoch is selected at (the proposer's own decision boundary).
SELECTION_SPAN_THRESHOLD = 0.0
# Epochs of the measured recipe (benchmarks/bench_document_coref.py); the best of them is kept.
# 15 epochs, the learning rate decayed linearly to 0: chosen on the selection books (own-mention CoNLL F1 64.8 against
# 64.0 for 10 epochs at a constant rate, 3 seeds); report books +0.6 own / +0.8 gold (benchmarks/RESULTS.md).
DOCUMENT_EPOCHS = 15
# Padding value of every column a `DocumentCollator` pads (input_ids: the tokenizer's pad id).
_PADDING = {
    "attention_mask": 0,
    "word_ids": -1,
    "sentence_ids": -1,
    "word_features": 0.0,
    "gold_spans": -1,
    "gold_cluster_ids": -1,
}
_TOKEN_COLUMNS = ("input_ids", "attention_mask", "word_ids")
_WORD_FEATURES_FORMAT = "hf_entity_models.document_word_features.v1"


# ------------------------------------------------------------------------------------------------------ rows
def document_rows(documents: Sequence[CorefDocument], tokenizer: Any) -> list[dict[str, torch.Tensor]]:
    """One model row per document: its tokens, the word of every token, the sentence of every word and its gold
    mentions, as the document mode's `forward` reads them.

    Args:
        documents: The documents (`read_conll_coreference`).
        tokenizer: The encoder's fast tokenizer (it must tell the word of every token, `word_ids()`).

    Returns:
        Per document a dict of tensors: ``input_ids`` and ``attention_mask`` `(T,)` (special tokens added, never
        truncated: the model encodes long documents in windows), ``word_ids`` `(T,)` (-1 for special tokens),
        ``sentence_ids`` `(W,)`, ``gold_spans`` `(G, 2)` (first word, last word inclusive) and ``gold_cluster_ids``
        `(G,)`.

    Raises:
        ValueError: A document without words, a tokenizer that cannot tell the word of a token, or a word that gets
            no token (named, with its document).

    Example:
        >>> document = CorefDocument("d", 0, ["Ann", "smiled", "."], [(0, 0, 1)])
        >>> rows = document_rows([document], tokenizer)  # doctest: +SKIP
        >>> rows[0]["word_ids"].tolist(), rows[0]["gold_spans"].tolist()  # doctest: +SKIP
        ([-1, 0, 1, 2, -1], [[0, 0]])
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            "document_rows needs a fast tokenizer (it reads the word of every token from word_ids()); load it with "
            "AutoTokenizer.from_pretrained(..., use_fast=True)."
        )
    rows = []
    for document in documents:
        if not document.words:
            raise ValueError(f"{document.label} has no words; remove the empty document.")
        encoding = tokenizer(document.words, is_split_into_words=True, truncation=False, add_special_tokens=True)
        word_ids = [-1 if word is None else int(word) for word in encoding.word_ids()]
        _check_every_word_has_a_token(document, word_ids)
        mentions = document.mentions
        rows.append({
            "input_ids": torch.tensor(encoding["input_ids"], dtype=torch.long),
            "attention_mask": torch.tensor(encoding["attention_mask"], dtype=torch.long),
            "word_ids": torch.tensor(word_ids, dtype=torch.long),
            "sentence_ids": torch.tensor(document.sentence_ids(), dtype=torch.long),
            "gold_spans": torch.tensor([[first, last] for first, last, _ in mentions], dtype=torch.long).view(-1, 2),
            "gold_cluster_ids": torch.tensor([cluster for _, _, cluster in mentions], dtype=torch.long),
        })  # fmt: skip
    return rows


def _check_every_word_has_a_token(document: CorefDocument, word_ids: list[int]) -> None:
    covered = np.zeros(len(document.words), dtype=bool)
    ids = np.asarray([word for word in word_ids if word >= 0], dtype=np.int64)
    covered[ids[ids < len(document.words)]] = True
    if not covered.all():
        missing = int(np.flatnonzero(~covered)[0])
        raise ValueError(
            f"{document.label}: word {missing} ({document.words[missing]!r}) gets no token from the tokenizer (it "
            f"drops it, e.g. a control or zero-width character; {int((~covered).sum())} such word(s) in all); the "
            "document mode reads every word: replace such words in the CoNLL file (e.g. by '_')."
        )


def add_document_word_features(
    model: torch.nn.Module,
    rows: Sequence[dict[str, torch.Tensor]],
    cache_dir: str | os.PathLike | None = None,
    dtype: torch.dtype = torch.float32,
    show_progress: bool = True,
) -> list[dict[str, torch.Tensor]]:
    """The rows of a model with a frozen encoder, with every document's word features computed once (the mean of
    its subwords' encoder features, `model.document_word_features`) in place of its tokens.

    Every document is encoded alone (a batch of one, in windows when it is long) under `torch.no_grad()` on the
    model's device; the features are kept on the CPU. With `cache_dir` they are saved to one safetensors file named
    by a fingerprint of the tokens, their words, the encoder and its settings, and a later call loads them.

    Args:
        model: A document-mode coreference model whose encoder is frozen (`config.encoder_is_frozen`).
        rows: `document_rows` of the documents.
        cache_dir: Folder for the cache file (None: in memory only).
        dtype: Dtype of the stored features.
        show_progress: Show a progress bar over the documents.
        batch_size: Documents read together (`predict_document_batch`: the same clusters, the encoder windows of all
            of them in shared calls and the memories in lockstep); the gold mentions are clustered one by one.
        pad_token_id: The tokenizer's padding id, for the shared encoder calls.

    Returns:
        New rows with ``word_features`` `(W, F)`, ``sentence_ids``, ``gold_spans`` and ``gold_cluster_ids``.

    Raises:
        ValueError: The model's encoder is trained (its features change every step), or it is not in the document
            mode.
    """
    if not uses_frozen_encoder(model):
        raise ValueError(
            "add_document_word_features needs a model whose encoder is frozen (config.encoder_is_frozen): a trained "
            "encoder changes its features every step; train such a model from the rows' input_ids instead."
        )
    if getattr(model.config, "coreference_mode", None) != "document":
        raise ValueError("add_document_word_features needs a model in coreference_mode='document'.")
    rows = list(rows)
    if not rows:
        return []
    cache_file = fingerprint = None
    lengths = [int(row["sentence_ids"].shape[0]) for row in rows]
    if cache_dir is not None:
        fingerprint = _word_features_fingerprint(model, rows, dtype)
        cache_file = Path(cache_dir) / f"document-word-features-{fingerprint[:32]}.safetensors"
        features = _load_cached_features(cache_file, fingerprint, lengths, dtype)
        if features is not None:
            logger.info(f"Loaded the word features of {len(rows)} documents from {cache_file}.")
            return [_with_features(row, tensor) for row, tensor in zip(rows, features)]
    device = next(model.parameters()).device
    features = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for row in tqdm(rows, desc="Encoding documents", unit="doc", disable=not show_progress or len(rows) < 2):
                document_features, _ = model.document_word_features(
                    row["sentence_ids"].unsqueeze(0).to(device),
                    input_ids=row["input_ids"].unsqueeze(0).to(device),
                    attention_mask=row["attention_mask"].unsqueeze(0).to(device),
                    word_ids=row["word_ids"].unsqueeze(0).to(device),
                )
                features.append(document_features[0].to("cpu", dtype).contiguous())
    finally:
        model.train(was_training)
    if cache_file is not None:
        _save_features(cache_file, fingerprint, features)
        logger.info(f"Saved the word features of {len(rows)} documents to {cache_file}.")
    return [_with_features(row, tensor) for row, tensor in zip(rows, features)]


def _with_features(row: dict[str, torch.Tensor], features: torch.Tensor) -> dict[str, torch.Tensor]:
    kept = {key: value for key, value in row.items() if key not in _TOKEN_COLUMNS}
    return {"word_features": features, **kept}


def _word_features_fingerprint(model: torch.nn.Module, rows: Sequence[dict[str, torch.Tensor]], dtype) -> str:
    """What the word features depend on: the tokens and the encoder (`encoder_features_fingerprint`), and the word
    of every token."""
    tokens = encoder_features_fingerprint(
        model, [row["input_ids"].tolist() for row in rows], [row["attention_mask"].tolist() for row in rows], dtype
    )
    digest = hashlib.blake2b(digest_size=32)
    digest.update(f"{_WORD_FEATURES_FORMAT}:{tokens}".encode())
    for row in rows:
        word_ids = row["word_ids"].to(torch.int64).numpy()
        digest.update(np.int64(word_ids.shape[0]).tobytes())
        digest.update(word_ids.tobytes())
    return digest.hexdigest()


# -------------------------------------------------------------------------------------------------- collator
class DocumentCollator:
    """Pads a list of `document_rows` (or of their word-feature rows) into one batch of the document mode.

    Padding: ``input_ids`` the tokenizer's pad id, ``attention_mask`` 0, ``word_ids`` -1, ``sentence_ids`` -1,
    ``word_features`` 0, ``gold_spans`` -1 (rows of `(-1, -1)`), ``gold_cluster_ids`` -1. Other keys are refused.

    Args:
        pad_token_id: The tokenizer's padding id.

    Example:
        >>> collator = DocumentCollator(pad_token_id=0)
        >>> batch = collator([{"sentence_ids": torch.tensor([0, 0, 1])}, {"sentence_ids": torch.tensor([0])}])
        >>> batch["sentence_ids"].tolist()
        [[0, 0, 1], [0, -1, -1]]
    """

    def __init__(self, pad_token_id: int = 0):
        self.padding = {"input_ids": int(pad_token_id), **_PADDING}

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if not rows:
            raise ValueError("DocumentCollator got no rows; a batch needs at least one document.")
        keys = list(rows[0])
        for index, row in enumerate(rows):
            if set(row) != set(keys):
                raise ValueError(
                    f"Row {index} of the batch has the columns {sorted(row)} but row 0 has {sorted(keys)}; collate "
                    "rows prepared alike (all with word_features, or all with tokens)."
                )
        unknown = sorted(set(keys) - set(self.padding))
        if unknown:
            raise ValueError(
                f"DocumentCollator cannot pad the column(s) {unknown}; rows hold {sorted(self.padding)} "
                "(see document_rows)."
            )
        return {key: self._pad([torch.as_tensor(row[key]) for row in rows], self.padding[key]) for key in keys}

    @staticmethod
    def _pad(tensors: list[torch.Tensor], value: float) -> torch.Tensor:
        length = max(tensor.shape[0] for tensor in tensors)
        reference = tensors[0]
        padded = reference.new_full((len(tensors), length, *reference.shape[1:]), value)
        for index, tensor in enumerate(tensors):
            padded[index, : tensor.shape[0]] = tensor
        return padded


# ------------------------------------------------------------------------------------------------ responses
def _model_inputs(row: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch of one document for `predict_clusters`: its sentence ids and its word features or tokens."""
    batch = DocumentCollator()([{key: value for key, value in row.items() if not key.startswith("gold_")}])
    return {key: value.to(device) for key, value in batch.items()}


def document_responses(
    model: torch.nn.Module,
    documents: Sequence[CorefDocument],
    rows: Sequence[dict[str, torch.Tensor]],
    gold_mentions: bool = False,
    span_threshold: float | None = None,
    show_progress: bool = True,
    batch_size: int = 1,
    pad_token_id: int = 0,
) -> list[CorefDocument]:
    """The clusters a document-mode model finds in every document (`model.predict_clusters`), as responses that keep
    each key document's name, part, words and header (`CorefDocument.with_mentions`).

    Args:
        model: A document-mode coreference model (on any device; the rows are moved to it).
        documents: The key documents.
        rows: Their `document_rows` (or `add_document_word_features` rows), in the same order.
        gold_mentions: Cluster the gold mentions instead of the model's own.
        span_threshold: Smallest mention logit of a proposed mention (default: `config.span_threshold`).
        show_progress: Show a progress bar over the documents.
        batch_size: Documents read together (`predict_document_batch`: the same clusters, the encoder windows of all
            of them in shared calls and the memories in lockstep); the gold mentions are clustered one by one.
        pad_token_id: The tokenizer's padding id, for the shared encoder calls.

    Returns:
        One response per document; score it with `score_coreference(documents, responses)` or write it with
        `write_conll_coreference`. A proposed mention that crosses an earlier mention of its own entity is left out
        (`without_crossing_mentions`): CoNLL brackets cannot express it.

    Example:
        >>> responses = document_responses(model, documents, document_rows(documents, tokenizer))  # doctest: +SKIP
        >>> score_coreference(documents, responses)["conll_f1"]  # doctest: +SKIP
    """
    if len(rows) != len(documents):
        raise ValueError(f"Got {len(rows)} rows for {len(documents)} documents; pass one row per document, in order.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    device = next(model.parameters()).device
    responses, dropped = [], 0
    with tqdm(total=len(documents), desc="Clustering", unit="doc", disable=not show_progress or len(documents) < 2
              ) as progress:
        for first in range(0, len(documents), batch_size):
            chunk = rows[first : first + batch_size]
            for document, mentions in zip(documents[first : first + batch_size], _found_mentions(
                model, chunk, device, gold_mentions, span_threshold, pad_token_id
            )):
                kept = without_crossing_mentions(mentions)
                dropped += len(mentions) - len(kept)
                responses.append(document.with_mentions(kept))
            progress.update(len(chunk))
    if dropped:
        logger.info(f"Dropped {dropped} proposed mention(s) that cross an earlier mention of their own entity.")
    return responses


def _found_mentions(
    model: torch.nn.Module, rows: Sequence[dict[str, torch.Tensor]], device: torch.device, gold_mentions: bool,
    span_threshold: float | None, pad_token_id: int,
) -> list[list[tuple[int, int, int]]]:
    """The mentions of each row's document: read together when there are several and the model proposes them."""
    if len(rows) == 1 or gold_mentions:
        return [
            model.predict_clusters(**_model_inputs(row, device), span_threshold=span_threshold,
                                   mention_spans=[row["gold_spans"]] if gold_mentions else None)[0]
            for row in rows
        ]
    return predict_document_batch(
        model, *([row[key].to(device) for row in rows] for key in ("input_ids", "word_ids", "sentence_ids")),
        span_threshold, pad_token_id,
    )


def without_crossing_mentions(mentions: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The mentions without those that cross an earlier mention of the same entity (in document order: by first
    word, longer first), e.g. (1, 3) after (0, 2). CoNLL brackets cannot express two crossing mentions of one
    entity, so a response holding them could not be written (`write_conll_coreference`) and scored by the reference
    scorer; nested mentions of one entity stay.

    Example:
        >>> without_crossing_mentions([(0, 2, 0), (1, 3, 0), (1, 1, 0), (2, 4, 1)])
        [(0, 2, 0), (1, 1, 0), (2, 4, 1)]
    """
    ordered = sorted(mentions, key=lambda mention: (mention[0], -mention[1]))
    open_by_entity: dict[int, list[tuple[int, int]]] = {}
    kept = []
    for first, last, entity in ordered:
        # Kept mentions of the entity that end before this one starts can cross no later mention: forget them.
        earlier = [span for span in open_by_entity.get(entity, []) if span[1] >= first]
        if any(start < first <= end < last for start, end in earlier):
            open_by_entity[entity] = earlier
            continue
        open_by_entity[entity] = [*earlier, (first, last)]
        kept.append((first, last, entity))
    return kept


def document_metrics(
    documents: Sequence[CorefDocument],
    responses: Sequence[CorefDocument],
    gold_responses: Sequence[CorefDocument] | None = None,
) -> dict[str, float]:
    """The scores of responses (percent): ``conll_f1``, ``muc_f1``, ``bcub_f1``, ``ceafe_f1``, ``lea_f1``,
    ``mention_precision`` / ``_recall`` / ``_f1`` (exact spans), ``entities_per_document`` (of the responses), and
    with `gold_responses` (the gold mentions clustered by the model) ``gold_conll_f1``."""
    metrics: dict[str, float] = _summary(score_coreference(documents, responses))
    metrics.update(mention_scores(documents, responses))
    entities = sum(len({cluster for *_, cluster in response.mentions}) for response in responses)
    metrics["entities_per_document"] = entities / max(1, len(responses))
    if gold_responses is not None:
        metrics["gold_conll_f1"] = float(score_coreference(documents, gold_responses)["conll_f1"])
    return metrics


def evaluate_document_coreference(
    model: torch.nn.Module,
    documents: Sequence[CorefDocument],
    rows: Sequence[dict[str, torch.Tensor]],
    span_thresholds: Sequence[float] | None = None,
    show_progress: bool = True,
) -> dict[str, float]:
    """Scores of a document-mode model on documents (`document_metrics`, with ``gold_conll_f1``): at
    `config.span_threshold` when `span_thresholds` is None, else at the best of them by CoNLL F1 (the result's
    ``span_threshold`` says which)."""
    if span_thresholds is None:
        span_thresholds = [model.config.span_threshold]
    thresholds = [float(threshold) for threshold in span_thresholds]
    if not thresholds:
        raise ValueError("span_thresholds is empty; give at least one span threshold (a mention logit).")
    best: dict[str, float] | None = None
    for threshold in thresholds:
        responses = document_responses(model, documents, rows, span_threshold=threshold, show_progress=show_progress)
        metrics = document_metrics(documents, responses)
        metrics["span_threshold"] = threshold
        if best is None or metrics["conll_f1"] > best["conll_f1"]:
            best = metrics
    gold = document_responses(model, documents, rows, gold_mentions=True, show_progress=show_progress)
    best["gold_conll_f1"] = float(score_coreference(documents, gold)["conll_f1"])
    return best


# ---------------------------------------------------------------------------------------------------- training
def document_training_arguments(output_dir: str, **overrides) -> TrainingArguments:
    """`TrainingArguments` of the measured recipe: one document per step and process, a learning rate of 1e-3 decayed
    linearly to 0, gradients clipped at norm 1.0, no weight decay, `DOCUMENT_EPOCHS` epochs; the Trainer neither
    evaluates nor saves (`DocumentSelectionCallback` scores and keeps the best epoch). Any field can be overridden."""
    values = dict(
        output_dir=output_dir,
        per_device_train_batch_size=1,
        learning_rate=1e-3,
        weight_decay=0.0,
        max_grad_norm=1.0,
        lr_scheduler_type="linear",
        warmup_steps=0,
        num_train_epochs=DOCUMENT_EPOCHS,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="epoch",
        report_to="none",
        # Rows carry tensors of their own shapes, padded by DocumentCollator: nothing to remove.
        remove_unused_columns=False,
        use_cpu=not torch.cuda.is_available(),
        dataloader_pin_memory=torch.cuda.is_available(),
        # A document without a mention of a reused entity leaves the memory's update unused for that step.
        ddp_find_unused_parameters=True,
        dataloader_num_workers=0,
    )
    values.update(overrides)
    return TrainingArguments(**values)


def _parameter_groups(model: torch.nn.Module, learning_rate: float, encoder_learning_rate: float) -> list[dict]:
    """The head's trainable parameters at `learning_rate`, a fine-tuned encoder's at `encoder_learning_rate`."""
    encoder = getattr(model.base_model, "encoder", None)
    encoder_ids = {id(parameter) for parameter in encoder.parameters()} if encoder is not None else set()
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    head = [parameter for parameter in trainable if id(parameter) not in encoder_ids]
    encoder_parameters = [parameter for parameter in trainable if id(parameter) in encoder_ids]
    groups = [{"params": head, "lr": learning_rate}]
    if encoder_parameters:
        groups.append({"params": encoder_parameters, "lr": encoder_learning_rate})
    return groups


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies (on the CPU) of the parameters that training changes: all the best epoch needs to be restored."""
    return {name: parameter.detach().to("cpu", copy=True) for name, parameter in model.named_parameters()
            if parameter.requires_grad}


def _load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            parameters[name].copy_(value.to(parameters[name].device))


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def _process_count() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1


def _from_main_process(value: Any) -> Any:
    """`value` of the main process, on every process (a no-op in a single-process run)."""
    if _process_count() == 1:
        return value
    holder = [value]
    torch.distributed.broadcast_object_list(holder, src=0)
    return holder[0]


class DocumentSelectionCallback(TrainerCallback):
    """Scores the validation documents after every epoch (on the main process, at `span_threshold`, by the CoNLL F1
    with the model's own mentions) and keeps a copy of the best epoch's trainable weights.

    Every epoch's scores are appended to `history` and to the Trainer's log history (``validation_conll_f1``,
    ``validation_mention_f1``, ``validation_gold_conll_f1``). With `early_stopping_patience`, training stops after
    that many epochs without a better CoNLL F1 (the decision is the main process's, sent to every process).

    Args:
        documents: The validation documents.
        rows: Their rows (`document_rows` / `add_document_word_features`).
        span_threshold: The span threshold every epoch is scored at.
        early_stopping_patience: Epochs without improvement before stopping (None: every epoch runs).
        show_progress: Progress bars while clustering.
    """

    def __init__(
        self,
        documents: Sequence[CorefDocument],
        rows: Sequence[dict[str, torch.Tensor]],
        span_threshold: float = SELECTION_SPAN_THRESHOLD,
        early_stopping_patience: int | None = None,
        show_progress: bool = True,
    ):
        if early_stopping_patience is not None and early_stopping_patience < 1:
            raise ValueError(f"early_stopping_patience must be >= 1 epoch, got {early_stopping_patience}.")
        self.documents, self.rows = list(documents), list(rows)
        self.span_threshold = float(span_threshold)
        self.early_stopping_patience = early_stopping_patience
        self.show_progress = show_progress
        self.history: list[dict[str, float]] = []
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_epoch: int | None = None
        self.best_conll_f1: float | None = None
        self.evaluation_seconds: list[float] = []
        self._evaluated_step = -1

    def score(self, model: torch.nn.Module) -> dict[str, float]:
        """`document_metrics` of the model on the validation documents at the selection threshold."""
        gold = document_responses(model, self.documents, self.rows, gold_mentions=True,
                                  show_progress=self.show_progress)
        own = document_responses(model, self.documents, self.rows, span_threshold=self.span_threshold,
                                 show_progress=self.show_progress)
        return document_metrics(self.documents, own, gold)

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        self._select(args, state, control, model)
        return control

    def on_train_end(self, args, state, control, model=None, **kwargs):
        # A fractional last epoch that ended on max_steps: score what was trained after the last evaluation.
        if state.global_step != self._evaluated_step:
            self._select(args, state, control, model)
        return control

    def _select(self, args, state, control, model) -> None:
        self._evaluated_step = state.global_step
        epoch = len(self.history) + 1
        row = None
        if state.is_world_process_zero:
            started = time.perf_counter()
            model = _unwrapped(model)
            metrics = self.score(model)
            self.evaluation_seconds.append(time.perf_counter() - started)
            row = {"epoch": epoch, "step": state.global_step, **metrics}
            if self.best_conll_f1 is None or metrics["conll_f1"] > self.best_conll_f1:
                self.best_conll_f1, self.best_epoch = metrics["conll_f1"], epoch
                self.best_state = _trainable_state(model)
            logger.info(
                f"Epoch {epoch}: validation CoNLL F1 {metrics['conll_f1']:.2f}, mention F1 {metrics['mention_f1']:.2f}"
                f", gold-mention CoNLL F1 {metrics['gold_conll_f1']:.2f} (best: epoch {self.best_epoch})"
            )
        row, self.best_epoch = _from_main_process((row, self.best_epoch))
        self.history.append(row)
        state.log_history.append({
            "epoch": state.epoch, "step": state.global_step, "validation_conll_f1": row["conll_f1"],
            "validation_mention_f1": row["mention_f1"], "validation_gold_conll_f1": row["gold_conll_f1"],
        })  # fmt: skip
        patience = self.early_stopping_patience
        if patience is not None and epoch - self.best_epoch >= patience:
            logger.info(f"No better validation CoNLL F1 for {patience} epoch(s): training stops.")
            control.should_training_stop = True


@dataclass
class DocumentTrainingResult:
    """What `train_document_coreference` measured.

    Attributes:
        trainer: The Trainer; its model holds the best epoch's weights and the chosen `config.span_threshold`.
        validation_metrics: `document_metrics` on the validation documents at the chosen threshold, with
            ``span_threshold``, ``gold_conll_f1``, ``best_epoch`` and ``seconds_per_epoch``.
        report_metrics: The same on the report documents (at the threshold chosen on validation), or None.
        epoch_seconds: Training seconds of every epoch (evaluation excluded).
        history: Every epoch's validation scores at the selection threshold (0.0).
        threshold_sweep: The validation CoNLL F1 of every swept span threshold.
    """

    trainer: Trainer
    validation_metrics: dict[str, float]
    report_metrics: dict[str, float] | None = None
    epoch_seconds: list[float] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    threshold_sweep: dict[float, float] = field(default_factory=dict)


def train_document_coreference(
    model: torch.nn.Module,
    tokenizer: Any,
    train_documents,
    validation_documents,
    output_dir: str | os.PathLike,
    epochs: float = DOCUMENT_EPOCHS,
    learning_rate: float = 1e-3,
    encoder_learning_rate: float = 2e-5,
    report_documents=None,
    report_split: str = "test",
    span_thresholds: Sequence[float] = DOCUMENT_SPAN_THRESHOLDS,
    early_stopping_patience: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    dataset: str = "litbank",
    dataset_name: str | None = "LitBank",
    show_progress: bool = True,
    callbacks: Sequence[TrainerCallback] = (),
    **training_overrides,
) -> DocumentTrainingResult:
    """Train the document mode of a coreference memory model on CoNLL-2012 documents with the stock Trainer, keep
    the best epoch by validation CoNLL F1 and choose the span threshold there (the recipe of the module docstring).

    Args:
        model: A model in `coreference_mode="document"`, e.g.
            `PetraForCoreference.from_encoder(name, coreference_mode="document")`.
        tokenizer: The encoder's fast tokenizer.
        train_documents / validation_documents: CoNLL files, folders, lists of them, or lists of `CorefDocument`.
        output_dir: The Trainer's output folder (it saves nothing there but logs: the best epoch is kept in memory).
        epochs: Training epochs (`num_train_epochs`).
        learning_rate: Adam learning rate of the head (the encoder excluded).
        encoder_learning_rate: Learning rate of a fine-tuned encoder's trainable layers (PeTra with
            `freeze_encoder=False`); unused with a frozen encoder.
        report_documents: Documents scored once, at the epoch and threshold chosen on validation.
        report_split: The split name of the report scores in `config.evaluation_results`.
        span_thresholds: The span thresholds (mention logits) swept on validation after training.
        early_stopping_patience: Epochs without a better validation CoNLL F1 before stopping (None: all run).
        cache_dir: Folder for the cached word features of a frozen encoder (None: in memory only).
        dataset / dataset_name: Id and display name the scores are recorded under (model card).
        show_progress: Progress bars while encoding and clustering.
        callbacks: Further Trainer callbacks (they run after the epoch's selection).
        **training_overrides: Any `TrainingArguments` field (`document_training_arguments`), e.g. `seed=1`.

    Returns:
        A `DocumentTrainingResult`; `model` (also `result.trainer.model`) holds the best epoch's weights and the
        chosen `config.span_threshold`, and its `config.evaluation_results` the scores.

    Raises:
        ValueError: A model that is not in the document mode, empty document lists, a validation document given
            twice, or a word the tokenizer gives no token.
    """
    if getattr(model.config, "coreference_mode", None) != "document":
        raise ValueError(
            "train_document_coreference trains coreference_mode='document' models; build one with "
            "from_encoder(name, coreference_mode='document'), or train the token mode with train_on_conll."
        )
    if not span_thresholds:
        raise ValueError("span_thresholds is empty; give the span thresholds (mention logits) to choose from.")
    train_documents = _documents(train_documents, "training")
    validation_documents = _documents(validation_documents, "validation")
    documents_by_name(validation_documents, "validation")  # a document given twice: refused before training
    _warn_about_shared_documents(train_documents, validation_documents)
    reports = _documents(report_documents, report_split) if report_documents is not None else None
    args = document_training_arguments(
        str(output_dir), num_train_epochs=epochs, learning_rate=learning_rate, **training_overrides
    )
    check_processes_connected(args)
    model.to(args.device)
    train_rows = document_rows(train_documents, tokenizer)
    validation_rows = document_rows(validation_documents, tokenizer)
    report_rows = document_rows(reports, tokenizer) if reports is not None else None
    if uses_frozen_encoder(model):
        # The main process writes the cache first (when there is one); the others then read it.
        with args.main_process_first(desc="word features"):
            train_rows = add_document_word_features(model, train_rows, cache_dir, show_progress=show_progress)
            validation_rows = add_document_word_features(model, validation_rows, cache_dir,
                                                         show_progress=show_progress)
            if report_rows is not None:
                report_rows = add_document_word_features(model, report_rows, cache_dir, show_progress=show_progress)
    optimizer = torch.optim.AdamW(
        _parameter_groups(model, args.learning_rate, encoder_learning_rate), lr=args.learning_rate, weight_decay=0.0
    )
    timer = EpochTimerCallback()
    selection = DocumentSelectionCallback(
        validation_documents, validation_rows, SELECTION_SPAN_THRESHOLD, early_stopping_patience, show_progress
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_rows,
        data_collator=DocumentCollator(pad_token_id=tokenizer.pad_token_id or 0),
        callbacks=[timer, selection, *callbacks],  # the timer first: its epoch ends before the evaluation starts
        optimizers=(optimizer, None),
    )
    trainer.train()

    chosen = None
    if trainer.is_world_process_zero():
        _load_trainable_state(model, selection.best_state)
        chosen = _choose_threshold(model, validation_documents, validation_rows, reports, report_rows, span_thresholds,
                                   show_progress)
        chosen.update(best_state=selection.best_state, epoch_seconds=list(timer.epoch_seconds))
    chosen = _from_main_process(chosen)  # every process returns the main process's choices and times
    if not trainer.is_world_process_zero():
        _load_trainable_state(model, chosen["best_state"])
    validation_metrics, report_metrics = chosen["validation"], chosen["report"]
    model.config.span_threshold = float(validation_metrics["span_threshold"])
    epoch_seconds = chosen["epoch_seconds"]
    seconds = float(np.mean(epoch_seconds)) if epoch_seconds else math.nan
    for metrics in filter(None, (validation_metrics, report_metrics)):
        metrics.update(best_epoch=selection.best_epoch, seconds_per_epoch=seconds)
    _record_document_scores(model.config, validation_metrics, dataset, dataset_name, "validation")
    if report_metrics is not None:
        _record_document_scores(model.config, report_metrics, dataset, dataset_name, report_split)
    return DocumentTrainingResult(
        trainer, validation_metrics, report_metrics, epoch_seconds, list(selection.history), chosen["sweep"]
    )


def _choose_threshold(model, documents, rows, reports, report_rows, thresholds, show_progress) -> dict[str, Any]:
    """The span threshold with the best validation CoNLL F1 (the first of equals), its scores, and the report's."""
    gold = document_responses(model, documents, rows, gold_mentions=True, show_progress=show_progress)
    sweep, best = {}, None
    for threshold in thresholds:
        responses = document_responses(model, documents, rows, span_threshold=threshold, show_progress=show_progress)
        metrics = {**document_metrics(documents, responses, gold), "span_threshold": float(threshold)}
        sweep[float(threshold)] = metrics["conll_f1"]
        if best is None or metrics["conll_f1"] > best["conll_f1"]:
            best = metrics
    report = None
    if reports is not None:
        report = evaluate_document_coreference(model, reports, report_rows, [best["span_threshold"]], show_progress)
    return {"validation": best, "report": report, "sweep": sweep}


def _record_document_scores(config, metrics: dict[str, float], dataset: str, dataset_name: str | None, split: str):
    """The CoNLL F1 (own mentions), gold-mention CoNLL F1 and mention F1 in `config.evaluation_results`. The span
    threshold is a logit, not a probability: it is in `config.span_threshold`, not in the recorded rows."""
    if not hasattr(config, "evaluation_results"):
        return
    for metric in ("conll_f1", "gold_conll_f1", "mention_f1"):
        record_evaluation(config, "coreference", dataset, split, metric, float(metrics[metric]),
                          dataset_name=dataset_name)
