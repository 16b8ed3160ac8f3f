"""Training an entity-aware language model (GPT2E) — or, for comparison, a plain causal LM — with the stock
`transformers.Trainer` over consecutive windows of documents, in one process or data-parallel in many.

GPT2E carries each document's entity states from one window to the next. The training rows are therefore ordered
into `batch_size` streams of documents (`order_windows_for_streams`) and read sequentially, and the model keeps the
entity states in its document store (`document_ids` / `window_index` in the batch). With `batch_size=1` this is the
paper's set-up: one window per step, the entity representations updated at the end of every step.

Data parallel (``accelerate launch --multi_gpu --num_processes N``): the store lives in each process, so a document
must be read, window after window, by ONE process. `order_windows_for_processes` gives each process whole documents
(`assign_documents_to_processes`), orders each process's share into its own streams, and interleaves the processes'
batches so that Accelerate's sharding of the stock Trainer's sequential dataloader (batch ``i`` goes to process
``i % N``) hands every process exactly its own batches, in order. The processes' batch counts are made equal with
one-token padding windows (a fresh document id at window 0: nothing to predict, no gradient), so no process runs
out early and Accelerate never repeats a batch to even them out (a repeated window would break its document's
window order). Each step's loss is the token mean over the batches of ALL processes (``average_tokens_across_devices``),
so the averaged gradient is the one a single process would compute on the same windows. The training loop is the
stock one; `EntityLMTrainer` only replaces `evaluate` with the document-level
perplexity of `evaluate_entity_lm`, each process reading its share of the documents and the sums added up, so every
process reports the same numbers, those one process computes over all documents.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
import torch
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import speed_metrics

from ...training.distributed import check_processes_connected
from .collator import EntityLanguageModelingCollator
from .entity_evaluation import assign_documents_to_processes, entity_nll, entity_nll_sums, reads_entities
from .stream_order import order_windows_for_streams

__all__ = [
    "EntityLMCollatorFor",
    "EntityLMTrainer",
    "build_entity_lm_trainer",
    "entity_lm_training_arguments",
    "evaluate_entity_lm",
    "order_windows_for_processes",
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
    documents), the window columns kept for the collator, AdamW with 10% warm-up and linear decay; the CPU when no
    GPU is visible (so that ``accelerate launch`` processes join one gloo group), pinned memory only with a GPU.

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
        # Without it, `accelerate launch --multi_gpu` on a machine without GPUs starts unconnected single-process runs.
        use_cpu=not torch.cuda.is_available(),
        # Pinned memory only speeds up copies to a GPU; on a CPU-only machine the DataLoader just warns about it.
        dataloader_pin_memory=torch.cuda.is_available(),
        # Every weight of a causal LM (GPT2E's entity memory or attention included) takes part in every step: spare DDP the
        # search for unused parameters (and its warning).
        ddp_find_unused_parameters=False,
        # The loss is summed over each process's tokens and divided by the count over ALL processes: the gradient of
        # the token mean over the whole step, and a process whose batch is all padding adds 0 (not 0/0).
        average_tokens_across_devices=True,
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


def order_windows_for_processes(dataset: datasets.Dataset, batch_size: int, num_processes: int) -> datasets.Dataset:
    """Order windows for a sequential sampler whose batches Accelerate deals out to `num_processes` processes.

    Each process gets whole documents (`assign_documents_to_processes`) and reads them in `batch_size` streams:
    its documents go, longest first, to the stream with the fewest windows so far, and a stream reads its documents
    one after the other (in document id order), window after window; slot ``i`` of each of the process's batches is
    the next window of stream ``i``. Global batch ``t * num_processes + r`` is batch ``t`` of process ``r``: the
    round-robin in which Accelerate's `BatchSamplerShard` (``split_batches=False``) gives the batches of the stock
    Trainer's train dataloader to the processes. Every batch is full and every process has the same number of
    batches: the slots of a stream that has ended (and the batches of a process that has finished) hold padding
    windows, each the first token of a real window with entity id 0, under a fresh document id (larger than every
    real one; one per slot) at window 0. A one-token window has nothing to predict (a causal LM predicts tokens
    2..L of a window), so padding adds no loss and no gradient, and the fresh ids keep it out of every real
    document's entity states. With one process this is `order_windows_for_streams` (no padding).

    Args:
        dataset: Rows of `entity_lm_windows` (``document_id``, ``window_index``, ``input_ids``, ``entity_ids``).
        batch_size: The per-device batch size.
        num_processes: The world size.

    Returns:
        The rows in the new order, with padding rows added when ``num_processes > 1``.

    Raises:
        ValueError: If there are fewer documents than processes, or a document's windows are not 0..L-1, each once.

    Example:
        >>> rows = datasets.Dataset.from_dict({"input_ids": [[5, 6]] * 4, "entity_ids": [[0, 1]] * 4,
        ...                                    "document_id": [0, 0, 1, 2], "window_index": [0, 1, 0, 0]})
        >>> ordered = order_windows_for_processes(rows, batch_size=1, num_processes=2)
        >>> list(zip(ordered["document_id"], ordered["window_index"]))  # process 0: document 0; 1: documents 1, 2
        [(0, 0), (1, 0), (0, 1), (2, 0)]
    """
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes must be a positive int, got {num_processes!r}.")
    if num_processes == 1 or len(dataset) == 0:
        return order_windows_for_streams(dataset, batch_size)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
    rows_by_document = _rows_by_document(dataset)
    counts = {document: len(rows) for document, rows in rows_by_document.items()}
    if len(counts) < num_processes:
        raise ValueError(
            f"{len(counts)} document(s) cannot be shared by {num_processes} processes: each process reads whole "
            "documents (their entity states stay in its store). Use fewer processes or more documents."
        )
    per_process = [
        _stream_slots(documents, rows_by_document, batch_size)
        for documents in assign_documents_to_processes(counts, num_processes)
    ]
    first_padding_row = len(dataset)
    order = []
    for step in range(max(len(batches) for batches in per_process)):
        for batches in per_process:
            slots = batches[step] if step < len(batches) else [None] * batch_size
            order += [first_padding_row + slot if row is None else row for slot, row in enumerate(slots)]
    return datasets.concatenate_datasets([dataset, _padding_windows(dataset, batch_size)]).select(order)


def _rows_by_document(dataset: datasets.Dataset) -> dict[int, list[int]]:
    """document id -> its row numbers in window order; every window 0..L-1 must be there once."""
    found: dict[int, dict[int, int]] = {}
    for row, (document, window) in enumerate(zip(dataset["document_id"], dataset["window_index"])):
        windows = found.setdefault(int(document), {})
        if int(window) in windows:
            raise ValueError(f"Document {document} has window {window} twice (rows {windows[int(window)]} and {row}).")
        windows[int(window)] = row
    for document, windows in found.items():
        if sorted(windows) != list(range(len(windows))):
            raise ValueError(
                f"Document {document} has windows {sorted(windows)[:10]}...: window_index must run 0..L-1. Do not "
                "filter windows out of a document before ordering."
            )
    return {document: [windows[index] for index in range(len(windows))] for document, windows in found.items()}


def _stream_slots(
    documents: list[int], rows_by_document: Mapping[int, list[int]], batch_size: int
) -> list[list[int | None]]:
    """One process's batches: slot i holds the next row of stream i, None once the stream has ended."""
    streams: list[list[int]] = [[] for _ in range(batch_size)]
    totals = [0] * batch_size
    for document in sorted(documents, key=lambda document: (-len(rows_by_document[document]), document)):
        stream = min(range(batch_size), key=lambda index: (totals[index], index))
        streams[stream].append(document)
        totals[stream] += len(rows_by_document[document])
    rows = [[row for document in sorted(stream) for row in rows_by_document[document]] for stream in streams]
    length = max(len(stream_rows) for stream_rows in rows)
    return [[stream_rows[step] if step < len(stream_rows) else None for stream_rows in rows] for step in range(length)]


def _padding_windows(dataset: datasets.Dataset, batch_size: int) -> datasets.Dataset:
    """One padding window per batch slot: a single token, entity id 0, a fresh document id, window 0."""
    template = dict(dataset.with_format(None)[0])  # python lists, whatever format the rows are read in
    length = len(template["input_ids"])
    first_free = max(int(document) for document in dataset["document_id"]) + 1
    rows = []
    for slot in range(batch_size):
        # Every per-token column (input_ids, entity_ids, an attention_mask, ...) is cut to the first token.
        row = {key: value[:1] if isinstance(value, list) and len(value) == length else value
               for key, value in template.items()}
        row.update(entity_ids=[0], document_id=first_free + slot, window_index=0)
        rows.append(row)
    return datasets.Dataset.from_list(rows, features=dataset.features)


class EntityLMTrainer(Trainer):
    """The stock `Trainer` whose `evaluate` is the document-level perplexity of `evaluate_entity_lm`.

    The stock evaluation loop averages per-batch losses, so its number depends on how the windows are batched (and,
    data-parallel, on how they are dealt out); and a process would need whole documents for GPT2E's entity states.
    Here every process reads its share of the evaluation documents, window after window, and the token sums are
    added up: ``eval_loss`` is the mean negative log-likelihood per predicted token over all documents,
    ``eval_perplexity`` its exponential and, for GPT2E, ``eval_perplexity_without_entities`` the same with the entity
    ids zeroed; one process or many, the numbers are the same (up to float rounding). Training is untouched.
    """

    def evaluate(
        self,
        eval_dataset: datasets.Dataset | dict[str, datasets.Dataset] | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Document-level loss and perplexity of `eval_dataset` (default: the trainer's), logged and returned.

        Every process of a data-parallel run must call it (the Trainer's own evaluations do). A dict of datasets is
        evaluated set by set, each under ``{metric_key_prefix}_{name}``. `ignore_keys` is accepted for the
        `Trainer` interface and unused.
        """
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if dataset is None:
            raise ValueError(
                "Trainer: evaluation requires an eval_dataset (pass eval_windows to build_entity_lm_trainer)."
            )
        if isinstance(dataset, Mapping):
            metrics: dict[str, float] = {}
            for name, part in dataset.items():
                metrics.update(self.evaluate(part, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        self._memory_tracker.start()
        start = time.time()
        metrics = {f"{metric_key_prefix}_{key}": value for key, value in self._document_scores(dataset).items()}
        metrics.update(speed_metrics(metric_key_prefix, start, num_samples=len(dataset)))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def _document_scores(self, windows: datasets.Dataset) -> dict[str, float]:
        # The unwrapped model: evaluation runs no backward pass, so DDP's wrapper has nothing to synchronise.
        options = dict(
            batch_size=self.args.per_device_eval_batch_size,
            progress=not self.args.disable_tqdm,
            distributed=self.args.world_size > 1,
        )
        total_loss, tokens = entity_nll(self.model, windows, **options)
        scores = {"loss": total_loss / tokens, "perplexity": _exp(total_loss / tokens)}
        if reads_entities(self.model):
            total_loss, tokens = entity_nll(self.model, windows, use_entities=False, **options)
            scores["perplexity_without_entities"] = _exp(total_loss / tokens)
        return scores


def _exp(value: float) -> float:
    """exp, with an overflowing perplexity (an untrained model) reported as inf instead of raising."""
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf


def build_entity_lm_trainer(
    model: torch.nn.Module,
    tokenizer: Any,
    train_windows: datasets.Dataset,
    args: TrainingArguments,
    eval_windows: datasets.Dataset | Mapping[str, datasets.Dataset] | None = None,
    **trainer_options: Any,
) -> EntityLMTrainer:
    """A `Trainer` over entity-LM windows, with the rows ordered for the per-document entity states; in one process
    or data-parallel (``accelerate launch``: each process reads whole documents, see `order_windows_for_processes`).

    Args:
        model: `GPT2EForCausalLM` (entity ids and the document store) or any causal LM (tokens only).
        tokenizer: The tokenizer of the windows (saved with the model).
        train_windows: Rows of `entity_lm_windows` / `load_litbank_entity_lm`.
        args: From `entity_lm_training_arguments`; it must sample sequentially.
        eval_windows: Optional rows (or a dict of named sets) for `trainer.evaluate()`: `evaluate_entity_lm`'s
            document-level loss and perplexity, the same whatever the number of processes (`EntityLMTrainer`).
        trainer_options: Passed to `Trainer` (callbacks, ...).

    Raises:
        ValueError: If the arguments do not sample sequentially, drop the window columns, split or dispatch batches
            across processes, use several GPUs in one process, or the documents cannot be shared by the processes.

    Example:
        >>> args = entity_lm_training_arguments("runs/gpt2e", batch_size=2, max_steps=100)  # doctest: +SKIP
        >>> splits = load_litbank_entity_lm(conll, tokenizer, 256)  # doctest: +SKIP
        >>> trainer = build_entity_lm_trainer(model, tokenizer, splits["train"], args, splits["validation"])  # doctest: +SKIP
        >>> trainer.train(); trainer.evaluate()["eval_perplexity"]  # doctest: +SKIP
    """
    _check_entity_lm_arguments(args)
    # Ordered into streams (and so checked now, not after training): `evaluate` regroups the windows by document
    # itself, but the stock `predict` loop reads them in dataset order through the model's store.
    eval_dataset = _ordered_for_streams(eval_windows, args.per_device_eval_batch_size)
    pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    collator = EntityLMCollatorFor(pad_token_id=int(pad_token_id or 0), with_entities=reads_entities(model))
    if hasattr(model, "reset_entity_stores"):
        model.reset_entity_stores()
    return EntityLMTrainer(
        model=model,
        args=args,
        data_collator=collator,
        train_dataset=order_windows_for_processes(train_windows, args.per_device_train_batch_size, args.world_size),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        **trainer_options,
    )


def _ordered_for_streams(
    eval_windows: datasets.Dataset | Mapping[str, datasets.Dataset] | None, batch_size: int
) -> datasets.Dataset | dict[str, datasets.Dataset] | None:
    if eval_windows is None:
        return None
    if isinstance(eval_windows, Mapping):
        return {name: order_windows_for_streams(windows, batch_size) for name, windows in eval_windows.items()}
    return order_windows_for_streams(eval_windows, batch_size)


def _check_entity_lm_arguments(args: TrainingArguments) -> None:
    """Refuse arguments under which some process would read a document's windows out of order."""
    check_processes_connected(args)
    if args.train_sampling_strategy != "sequential":
        raise ValueError(
            "Entity-LM windows must be read in order (each document's windows one after the other): build the "
            "arguments with entity_lm_training_arguments or set train_sampling_strategy='sequential'."
        )
    if args.remove_unused_columns:
        raise ValueError("Set remove_unused_columns=False: the collator needs the document_id column.")
    if args.n_gpu > 1:
        raise ValueError(
            "Entity-LM training keeps each document's entity states in one store; torch.nn.DataParallel over "
            f"{args.n_gpu} GPUs in one process would split every batch between replicas. Run one process per GPU "
            "(accelerate launch --multi_gpu --num_processes N), or make one GPU visible (CUDA_VISIBLE_DEVICES=0)."
        )
    if args.auto_find_batch_size:
        raise ValueError(
            "auto_find_batch_size would change the batch size the windows were ordered for; set "
            "per_device_train_batch_size yourself."
        )
    if args.world_size > 1 and not args.average_tokens_across_devices:
        raise ValueError(
            "Set average_tokens_across_devices=True: with several processes a process's batch may be all padding "
            "windows (no token to predict), and its own token mean would be 0/0."
        )
    accelerator_config = args.accelerator_config
    if args.world_size > 1 and (accelerator_config.split_batches or accelerator_config.dispatch_batches):
        raise ValueError(
            "With several processes each one must get whole batches of its own documents: leave "
            "accelerator_config split_batches and dispatch_batches off (False/None)."
        )


def evaluate_entity_lm(
    model: torch.nn.Module,
    windows: datasets.Dataset,
    batch_size: int = 8,
    progress: bool = True,
    distributed: bool = False,
) -> dict[str, float]:
    """Perplexity of a model over whole documents: with and without entity information for GPT2E (the same model,
    entity ids zeroed), tokens only for a plain causal LM.

    By default this process reads every document (call it on one process or on all: the numbers are the same).
    With ``distributed=True`` in a data-parallel run the processes share the work: EVERY process must call it, each
    reads its share of the documents and the sums are added up, so every process returns the numbers over all
    documents (those of one process, up to float rounding). `EntityLMTrainer.evaluate` does that.

    Returns:
        `{"perplexity": ..., "mention_perplexity": ...}` (the second over the predicted tokens that belong to an
        entity mention, where the paper expects the entities to help; NaN when there is none) and, for GPT2E, the
        same two `..._without_entities` too.

    Example:
        >>> evaluate_entity_lm(model, splits["test"])  # doctest: +SKIP
        {'perplexity': 212.4, 'mention_perplexity': 301.2, 'perplexity_without_entities': 219.0, ...}
    """
    options = dict(batch_size=batch_size, progress=progress, distributed=distributed)
    variants = {"": True, "_without_entities": False} if reads_entities(model) else {"": True}
    scores = {}
    for suffix, use_entities in variants.items():
        sums = entity_nll_sums(model, windows, use_entities=use_entities, **options)
        scores[f"perplexity{suffix}"] = _exp(sums.total_nll / sums.tokens)
        scores[f"mention_perplexity{suffix}"] = (
            _exp(sums.mention_nll / sums.mention_tokens) if sums.mention_tokens else math.nan
        )
    return scores
