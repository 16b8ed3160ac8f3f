"""Packed extractive-QA features with doc stride, for training and for evaluation.

Every question is encoded with its context as one packed sequence ``[CLS] question [SEP] context [SEP]`` (question
first, `truncation="only_second"`). A context longer than the window is split into several windows ("features")
that overlap by `doc_stride` tokens, so that every part of the context is seen and nothing is truncated away.
These are the inputs `BertForQuestionAnswering` takes, and `ForceReaderForQuestionAnswering` takes the same.

* `prepare_train_features`: ``input_ids``, ``token_type_ids`` (when the tokenizer has them), ``attention_mask``,
  ``start_positions``, ``end_positions``. The labels are the first and last token of the first gold answer in a
  window that holds the whole answer; in a window that does not, and for an unanswerable (SQuAD 2.0) question, both
  point at the CLS token (index 0 for BERT-like tokenizers), as in BERT's SQuAD recipe.
* `prepare_validation_features`: the same windows with ``example_id`` (the question's id) and ``offset_mapping``
  (character offsets into the context for context tokens, None for every other token) for post-processing.
* `squad_features`: either of them over a whole dataset with `Dataset.map` (progress bar, cached on disk when the
  dataset is file-backed, e.g. from `load_squad`).

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")  # doctest: +SKIP
    >>> squad = load_squad("dev-v1.1.json")  # doctest: +SKIP
    >>> train_features = squad_features(squad, tokenizer, training=True)  # doctest: +SKIP
    >>> train_features.column_names  # doctest: +SKIP
    ['input_ids', 'token_type_ids', 'attention_mask', 'start_positions', 'end_positions']
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from datasets.fingerprint import Hasher
from transformers.utils import logging

logger = logging.get_logger(__name__)

__all__ = [
    "TRAIN_FEATURE_COLUMNS",
    "VALIDATION_FEATURE_COLUMNS",
    "prepare_train_features",
    "prepare_validation_features",
    "squad_features",
    "tokenizer_fingerprint",
]

# Columns of the features (``token_type_ids`` only when the tokenizer returns them).
TRAIN_FEATURE_COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions")
VALIDATION_FEATURE_COLUMNS = ("input_ids", "token_type_ids", "attention_mask", "example_id", "offset_mapping")
_CONTEXT_SEQUENCE = 1  # the context is the second sequence of the pair


def prepare_train_features(
    examples: Mapping[str, Sequence[Any]],
    tokenizer: Any,
    max_length: int = 384,
    doc_stride: int = 128,
    padding: bool | str = "max_length",
) -> dict[str, list]:
    """Training features of a batch of SQuAD questions; use with ``Dataset.map(..., batched=True)``.

    One question gives one feature per window of its context. Labels (BERT's SQuAD recipe): the first gold answer
    (``answers["answer_start"][0]``) is labelled in every window that holds all of it, with the first and last
    token that overlap its characters; in the other windows, and for a question without answers, both labels are
    the index of the CLS token (0 for BERT-like tokenizers), which the model learns as "no answer here".

    Args:
        examples: A batch in the `load_squad` layout: lists under ``id``, ``question``, ``context`` and ``answers``
            (``{"text": [...], "answer_start": [...]}`` per question; empty lists when unanswerable).
        tokenizer: A fast tokenizer (it must return offset mappings) of the model's encoder.
        max_length: Tokens per window, special tokens included (at most the tokenizer's ``model_max_length``).
        doc_stride: Tokens of context shared by two consecutive windows of one question.
        padding: Passed to the tokenizer: ``"max_length"`` (fixed-size features, for `default_data_collator`) or
            False (pad per batch, e.g. with `DataCollatorWithPadding`).

    Returns:
        Columns ``input_ids``, ``token_type_ids`` (when the tokenizer returns them), ``attention_mask``,
        ``start_positions`` and ``end_positions``: one entry per window, windows of a question in order.

    Raises:
        TypeError: If the tokenizer is not a fast tokenizer.
        ValueError: If `max_length` / `doc_stride` do not fit the tokenizer, a question or context is empty, a
            question is so long that a window keeps no more than `doc_stride` context tokens, or an answer's
            ``answer_start`` does not hold its text (the message names the question id).

    Example:
        >>> train = squad.map(  # doctest: +SKIP
        ...     prepare_train_features, batched=True, remove_columns=squad.column_names,
        ...     fn_kwargs={"tokenizer": tokenizer, "max_length": 384, "doc_stride": 128},
        ... )
    """
    encodings = _encode(examples, tokenizer, max_length, doc_stride, padding)
    sample_mapping = encodings.pop("overflow_to_sample_mapping")
    offset_mapping = encodings.pop("offset_mapping")
    start_positions: list[int] = []
    end_positions: list[int] = []
    for feature_index, offsets in enumerate(offset_mapping):
        example_index = sample_mapping[feature_index]
        cls_index = _cls_index(encodings["input_ids"][feature_index], tokenizer)
        answers = examples["answers"][example_index]
        if not answers["text"]:
            start_positions.append(cls_index)
            end_positions.append(cls_index)
            continue
        start_char = int(answers["answer_start"][0])
        end_char = start_char + len(answers["text"][0])
        span = _answer_token_span(
            offsets, encodings.sequence_ids(feature_index), start_char, end_char, examples["id"][example_index]
        )
        start_positions.append(cls_index if span is None else span[0])
        end_positions.append(cls_index if span is None else span[1])
    _warn_unlabelled(examples, sample_mapping, start_positions, encodings["input_ids"], tokenizer, doc_stride)
    features = dict(encodings)
    features["start_positions"] = start_positions
    features["end_positions"] = end_positions
    return features


def prepare_validation_features(
    examples: Mapping[str, Sequence[Any]],
    tokenizer: Any,
    max_length: int = 384,
    doc_stride: int = 128,
    padding: bool | str = "max_length",
) -> dict[str, list]:
    """Evaluation features of a batch of SQuAD questions; use with ``Dataset.map(..., batched=True)``.

    The same windows as `prepare_train_features`, without labels, keeping what post-processing needs to turn
    start/end logits of every window back into an answer string of the question's context.

    Args:
        examples: A batch with lists under ``id``, ``question`` and ``context`` (``answers`` is not needed).
        tokenizer: A fast tokenizer of the model's encoder.
        max_length: Tokens per window, special tokens included.
        doc_stride: Tokens of context shared by two consecutive windows of one question.
        padding: Passed to the tokenizer (``"max_length"`` or False).

    Returns:
        Columns ``input_ids``, ``token_type_ids`` (when the tokenizer returns them), ``attention_mask``,
        ``example_id`` (the ``id`` of the window's question) and ``offset_mapping``: per token, ``[start, end]``
        character offsets into the context for a context token, None for the question, special and padding tokens
        (``context[start:end]`` is the token's text).

    Raises:
        TypeError: If the tokenizer is not a fast tokenizer.
        ValueError: As `prepare_train_features` (apart from the answer checks).

    Example:
        >>> evaluation = squad.map(  # doctest: +SKIP
        ...     prepare_validation_features, batched=True, remove_columns=squad.column_names,
        ...     fn_kwargs={"tokenizer": tokenizer},
        ... )
    """
    encodings = _encode(examples, tokenizer, max_length, doc_stride, padding, check_answers=False)
    sample_mapping = encodings.pop("overflow_to_sample_mapping")
    offset_mapping = encodings.pop("offset_mapping")
    example_ids: list[str] = []
    context_offsets: list[list[list[int] | None]] = []
    for feature_index, offsets in enumerate(offset_mapping):
        example_ids.append(examples["id"][sample_mapping[feature_index]])
        sequence_ids = encodings.sequence_ids(feature_index)
        context_offsets.append(
            [
                [int(offset[0]), int(offset[1])] if sequence_id == _CONTEXT_SEQUENCE else None
                for offset, sequence_id in zip(offsets, sequence_ids)
            ]
        )
    features = dict(encodings)
    features["example_id"] = example_ids
    features["offset_mapping"] = context_offsets
    return features


def squad_features(
    dataset: datasets.Dataset,
    tokenizer: Any,
    max_length: int = 384,
    doc_stride: int = 128,
    training: bool = True,
    *,
    padding: bool | str = "max_length",
    batch_size: int = 1000,
    num_proc: int | None = None,
    load_from_cache_file: bool | None = None,
) -> datasets.Dataset:
    """Features of every question of a dataset, with a progress bar: `prepare_train_features` if `training`, else
    `prepare_validation_features`.

    The result replaces the question columns (a feature is a window, not a question; validation features keep the
    question's id in ``example_id``). It is cached by `datasets` next to a file-backed dataset (e.g. from
    `load_squad`), keyed on the dataset's fingerprint, the tokenizer, the arguments and this module's code.

    Args:
        dataset: Questions in the `load_squad` layout.
        tokenizer: A fast tokenizer of the model's encoder.
        max_length: Tokens per window, special tokens included.
        doc_stride: Tokens of context shared by two consecutive windows of one question.
        training: Training features (with labels) or evaluation features (with ``example_id``, ``offset_mapping``).
        padding: Passed to the tokenizer (``"max_length"`` or False).
        batch_size: Questions per `Dataset.map` batch.
        num_proc: Processes for `Dataset.map`.
        load_from_cache_file: Passed to `Dataset.map` (None: the `datasets` default).

    Returns:
        The features; see `prepare_train_features` and `prepare_validation_features` for the columns.

    Example:
        >>> features = squad_features(squad, tokenizer, 256, doc_stride=128, training=False)  # doctest: +SKIP
        >>> features.column_names  # doctest: +SKIP
        ['input_ids', 'token_type_ids', 'attention_mask', 'example_id', 'offset_mapping']
    """
    _check_tokenizer(tokenizer, max_length, doc_stride)
    function = prepare_train_features if training else prepare_validation_features
    step = "train" if training else "validation"
    fingerprint = Hasher.hash(
        (dataset._fingerprint, step, _code_version(), tokenizer_fingerprint(tokenizer), max_length, doc_stride, padding)
    )
    return dataset.map(
        function,
        batched=True,
        batch_size=batch_size,
        num_proc=num_proc,
        remove_columns=dataset.column_names,
        fn_kwargs={"tokenizer": tokenizer, "max_length": max_length, "doc_stride": doc_stride, "padding": padding},
        load_from_cache_file=load_from_cache_file,
        new_fingerprint=fingerprint,
        desc=f"Building SQuAD {step} features",
    )


# --------------------------------------------------------------------------------------------------- helpers
def _check_tokenizer(tokenizer: Any, max_length: int, doc_stride: int) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"SQuAD features need a fast tokenizer (for offset mappings), got {type(tokenizer).__name__}; load it "
            "with AutoTokenizer.from_pretrained(..., use_fast=True)."
        )
    special = tokenizer.num_special_tokens_to_add(pair=True)
    if not isinstance(max_length, int) or max_length <= special + 1:
        raise ValueError(f"max_length must be an integer above {special + 1} (the special tokens), got {max_length!r}.")
    model_max_length = getattr(tokenizer, "model_max_length", None)
    if isinstance(model_max_length, int) and max_length > model_max_length:
        raise ValueError(
            f"max_length={max_length} exceeds the tokenizer's model_max_length={model_max_length}: the model has no "
            "position embeddings beyond it. Use a smaller max_length (windows with doc_stride cover long contexts)."
        )
    if not isinstance(doc_stride, int) or not 0 <= doc_stride < max_length - special:
        raise ValueError(
            f"doc_stride must be an integer in [0, {max_length - special}) for max_length={max_length}, got "
            f"{doc_stride!r}; it is the number of context tokens two consecutive windows share."
        )


def _encode(
    examples: Mapping[str, Sequence[Any]],
    tokenizer: Any,
    max_length: int,
    doc_stride: int,
    padding: bool | str,
    check_answers: bool = True,
) -> Any:
    """Tokenize question/context pairs into overlapping windows, after refusing what the tokenizer cannot do."""
    _check_tokenizer(tokenizer, max_length, doc_stride)
    ids = [str(question_id) for question_id in examples["id"]]
    # Leading spaces of a question would only take window room (some SQuAD questions have many).
    questions = [question.lstrip() if isinstance(question, str) else question for question in examples["question"]]
    contexts = list(examples["context"])
    for index, question_id in enumerate(ids):
        if not isinstance(questions[index], str) or not questions[index].strip():
            raise ValueError(f"SQuAD question {question_id!r}: the question text is empty.")
        if not isinstance(contexts[index], str) or not contexts[index].strip():
            raise ValueError(f"SQuAD question {question_id!r}: the context is empty.")
        if check_answers:
            _check_answers(question_id, contexts[index], examples["answers"][index])
    # A question that leaves no more than doc_stride context tokens per window cannot be windowed (the tokenizer
    # would panic, or keep no context at all): refuse it with its id instead.
    room = max_length - tokenizer.num_special_tokens_to_add(pair=True)
    question_lengths = [len(ids_) for ids_ in tokenizer(questions, add_special_tokens=False)["input_ids"]]
    for question_id, length in zip(ids, question_lengths):
        if room - length <= doc_stride:
            raise ValueError(
                f"SQuAD question {question_id!r} has {length} tokens, which leaves {max(room - length, 0)} context "
                f"tokens per window of max_length={max_length}, not more than doc_stride={doc_stride}. Raise "
                "max_length, lower doc_stride, or shorten the question."
            )
    return tokenizer(
        questions,
        contexts,
        truncation="only_second",
        max_length=max_length,
        stride=doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=padding,
    )


def _check_answers(question_id: str, context: str, answers: Mapping[str, Sequence[Any]]) -> None:
    """An answer offset that misses its text would label the wrong tokens: refuse it (data not from `load_squad`)."""
    for text, start in zip(answers["text"], answers["answer_start"]):
        start = int(start)
        if not text or context[start : start + len(text)] != text or start < 0:
            raise ValueError(
                f"SQuAD question {question_id!r}: answer {text!r} is not at answer_start {start} of the context "
                f"(the context holds {context[max(start, 0) : max(start, 0) + len(text)]!r} there); fix "
                "answer_start, or load the data with load_squad, which checks every answer."
            )


def _warn_unlabelled(
    examples: Mapping[str, Sequence[Any]],
    sample_mapping: Sequence[int],
    start_positions: Sequence[int],
    input_ids: Sequence[Sequence[int]],
    tokenizer: Any,
    doc_stride: int,
) -> None:
    """Say which answerable questions got no labelled window (their answer straddles every window boundary): they
    train as "no answer here" everywhere, which a user should know rather than find out from the scores."""
    labelled = {
        sample_mapping[index]
        for index, start in enumerate(start_positions)
        if start != _cls_index(input_ids[index], tokenizer)
    }
    missed = [
        str(examples["id"][index])
        for index, answers in enumerate(examples["answers"])
        if answers["text"] and index not in labelled
    ]
    if missed:
        logger.warning(
            "%d answerable SQuAD question(s) have no window that holds their whole first answer (e.g. %s): the "
            "answer is longer than the overlap of two windows (doc_stride=%d tokens), so every window labels it as "
            "no answer (CLS). Raise max_length or doc_stride to keep them.",
            len(missed), ", ".join(missed[:3]), doc_stride,
        )


def _cls_index(input_ids: Sequence[int], tokenizer: Any) -> int:
    cls_token_id = getattr(tokenizer, "cls_token_id", None)
    if cls_token_id is not None and cls_token_id in input_ids:
        return list(input_ids).index(cls_token_id)
    return 0


def _answer_token_span(
    offsets: Sequence[Sequence[int]],
    sequence_ids: Sequence[int | None],
    start_char: int,
    end_char: int,
    question_id: str,
) -> tuple[int, int] | None:
    """First and last token of a window that overlap the characters ``[start_char, end_char)``, or None if the
    window does not hold all of them."""
    context_tokens = [index for index, sequence_id in enumerate(sequence_ids) if sequence_id == _CONTEXT_SEQUENCE]
    if not context_tokens:
        raise ValueError(
            f"SQuAD question {question_id!r}: the tokenizer keeps no token of the context (only characters it drops), "
            "so its answer cannot be labelled. Fix or remove the question."
        )
    window_start, window_end = offsets[context_tokens[0]][0], offsets[context_tokens[-1]][1]
    if start_char < window_start or end_char > window_end:
        return None
    overlapping = [
        index for index in context_tokens if offsets[index][0] < end_char and offsets[index][1] > start_char
    ]
    if not overlapping:
        # Only characters the tokenizer drops (e.g. control characters) would get here: no token can be labelled.
        raise ValueError(
            f"SQuAD question {question_id!r}: no token of the context covers the answer characters "
            f"[{start_char}, {end_char}); the tokenizer drops them. Fix or remove the answer."
        )
    return overlapping[0], overlapping[-1]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what decides how a fast tokenizer encodes, stable across calls.

    Hashing the tokenizer object itself is not: a fast tokenizer keeps the truncation and padding settings of its
    last call in its backend, so the hash (and the `datasets` cache key) would change with whatever was tokenized
    before. This leaves those settings out.

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> backend = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
        >>> tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[UNK]")
        >>> before = tokenizer_fingerprint(tokenizer)
        >>> _ = tokenizer(["a b"], truncation=True, max_length=4, padding="max_length")
        >>> tokenizer_fingerprint(tokenizer) == before
        True
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return Hasher.hash(tokenizer)
    state = json.loads(backend.to_str())
    state.pop("truncation", None)
    state.pop("padding", None)
    return Hasher.hash(
        (
            type(tokenizer).__name__,
            json.dumps(state, sort_keys=True),
            list(getattr(tokenizer, "model_input_names", [])),
            getattr(tokenizer, "padding_side", None),
            getattr(tokenizer, "truncation_side", None),
            getattr(tokenizer, "model_max_length", None),
            str(getattr(tokenizer, "all_special_tokens", None)),
        )
    )


@functools.cache
def _code_version() -> str:
    """Hash of this module's source: features cached by older code of this file are not reused."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
