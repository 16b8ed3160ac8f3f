"""`pipeline("question-answering")`: extractive question answering with any `AutoModelForQuestionAnswering` model.

transformers 5.x no longer ships a question-answering pipeline; this one answers like the old one did
(``{"score", "start", "end", "answer"}`` with character offsets into the context) and reads contexts of any length in
overlapping windows.

This file imports only torch, transformers, the standard library, ``postprocess.py`` next to it (relatively) and the
shared ``pipeline_inputs`` module, which saving copies next to it (the import made relative), so that the three
files can be saved next to a checkpoint and loaded with ``pipeline(model=..., trust_remote_code=True)``
on a machine without hf_entity_models.
"""

import math
import numbers
from typing import Any

import torch
from transformers.pipelines.base import ChunkPipeline

from hf_entity_models.models._shared.pipeline_inputs import check_tokenizer_files, check_unicode
from .answer_spans import rank_answer_spans

DEFAULT_MAX_SEQ_LEN = 384
DEFAULT_DOC_STRIDE = 128
DEFAULT_MAX_ANSWER_LEN = 15
# Tokenizers without a length limit report a huge model_max_length (int(1e30)).
_NO_LENGTH_LIMIT = 1_000_000


class _Window:
    """What the post-processing needs to know about one window; a plain object, so the pipeline machinery passes it
    through untouched (it recurses into dicts, lists and tuples)."""

    __slots__ = ("context", "offsets", "null_index", "length")

    def __init__(self, context: str, offsets: list, null_index: int | None, length: int):
        self.context = context
        self.offsets = offsets
        self.null_index = null_index
        self.length = length


class QuestionAnsweringPipeline(ChunkPipeline):
    """Answer questions with spans of a context, using any extractive question-answering model.

    Works with every model whose output has ``start_logits`` and ``end_logits`` over the packed
    ``question [SEP] context`` input (any ``AutoModelForQuestionAnswering``: BERT, ForceReader, ...); the tokenizer
    must be a fast one (character offsets).

    **Inputs**, like the old transformers pipeline: ``pipe(question=..., context=...)``, ``pipe(question, context)``,
    ``pipe({"question": ..., "context": ...})``, or lists: ``pipe(question=[...], context=[...])`` (one context for
    all questions, or one question for all contexts, is broadcast), ``pipe([{...}, {...}])``. A single question gives
    a single result, a list gives a list of results (an empty list gives ``[]``); ``batch_size=`` batches the
    windows of all questions together.

    **Long contexts** are split into windows of ``max_seq_len`` tokens (question included) that overlap by
    ``doc_stride`` tokens; every token of the context is read, nothing is truncated. The best spans of all windows
    compete together.

    **Answers**: ``{"score", "start", "end", "answer"}`` with ``context[start:end] == answer``; with ``top_k > 1`` a
    list of up to ``top_k`` distinct answers, best first (``top_k=1``, the default, gives the dict itself). A span
    is valid when it covers context tokens only, ends after it starts and has at most ``max_answer_len`` tokens.

    **Score**: the probability of the span, ``p_start(first token) * p_end(last token)``, where the start and end
    distributions are softmaxes over the context tokens and the null (``[CLS]``) token. For a context that fits in one
    window this is exactly the old transformers pipeline's score; a longer context is normalised over all its
    windows together (rather than window by window), so answers from different windows are ranked exactly as the
    SQuAD post-processing ranks them (by ``start_logit + end_logit``, see `postprocess.rank_answer_spans`).

    **No answer** (SQuAD 2.0): with ``handle_impossible_answer=True`` the null answer ``{"answer": "", "start": 0,
    "end": 0}`` competes with the spans, scored with the null token's probability (its window: the one with the
    lowest null logits, as in SQuAD post-processing). It ranks above the best span when ``null_score -
    best_span_score > null_score_diff_threshold`` (logits); the threshold defaults to the model config's
    ``null_score_diff_threshold`` (e.g. tuned on validation) or 0, where the ranking simply follows the scores. A
    tokenizer without a ``[CLS]`` token gives no null position, hence no null answer.

    Args (per call or at construction):
        top_k: Number of answers (default 1).
        max_answer_len: Longest answer in tokens (default 15).
        max_seq_len: Window length in tokens, question and special tokens included (default: 384, or the model's
            maximum if smaller).
        doc_stride: Tokens shared by consecutive windows (default: 128, less when the question leaves less room).
        handle_impossible_answer: Allow the null answer (default False).
        null_score_diff_threshold: See above.
        align_to_words: Widen answers to whole words (default True, as the old pipeline): a span that starts or ends
            inside a word (``"##ford"``) answers the whole word (``"Telford"``). With False the answer is the exact
            token span, as in the SQuAD post-processing.

    Raises:
        ValueError: When built, a slow tokenizer or one whose files are missing. When called, an empty question or
            context, a question that leaves no room for the context in ``max_seq_len``, a ``max_seq_len`` beyond the
            model's positions, or invalid parameter values.
        TypeError: Non-string questions or contexts, or unknown arguments.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> pipe = pipeline("question-answering", model="runs/forcereader-squad")  # doctest: +SKIP
    >>> pipe(question="Where is the Eiffel Tower?", context="The Eiffel Tower is in Paris.")  # doctest: +SKIP
    {'score': 0.93, 'start': 23, 'end': 28, 'answer': 'Paris'}

    ```
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        check_tokenizer_files(self.tokenizer)
        if self.tokenizer is None or not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(
                "The question-answering pipeline needs the model's fast tokenizer (it maps answers back to character "
                "offsets); pass tokenizer=AutoTokenizer.from_pretrained(...) or save it next to the model."
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Answer one question (a dict, or a list of dicts for ``top_k > 1``) or a list of questions; see the class
        docstring for the accepted input forms."""
        question, context = kwargs.pop("question", None), kwargs.pop("context", None)
        if question is not None or context is not None:
            if args:
                raise TypeError("Pass the inputs either positionally or as question=/context=, not both.")
            inputs = _inputs_from_pairs(question, context)
        elif len(args) == 2:
            inputs = _inputs_from_pairs(*args)
        elif len(args) == 1:
            inputs = args[0]
            if isinstance(inputs, dict):
                inputs = _checked_input(inputs)
            elif isinstance(inputs, (list, tuple)):
                inputs = [_checked_input(item, index) for index, item in enumerate(inputs)]
        else:
            raise TypeError(
                "Call the pipeline with question=... and context=... (strings or lists), or with a dict "
                '{"question": ..., "context": ...} or a list of them.'
            )
        if isinstance(inputs, list) and not inputs:
            # The base class looks at inputs[0] first; an empty list has an empty list of answers. The arguments are
            # still checked so that a typo does not go unnoticed until the list is non-empty.
            self._sanitize_parameters(**{k: v for k, v in kwargs.items() if k not in ("batch_size", "num_workers")})
            return []
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(
        self,
        top_k: int | None = None,
        max_answer_len: int | None = None,
        max_seq_len: int | None = None,
        doc_stride: int | None = None,
        handle_impossible_answer: bool | None = None,
        null_score_diff_threshold: float | None = None,
        align_to_words: bool | None = None,
        **kwargs: Any,
    ):
        if kwargs:
            raise TypeError(f"Unknown arguments for the question-answering pipeline: {sorted(kwargs)}.")
        preprocess_parameters: dict[str, Any] = {}
        if align_to_words is not None:
            preprocess_parameters["align_to_words"] = bool(align_to_words)
        if max_seq_len is not None:
            preprocess_parameters["max_seq_len"] = _positive_int(max_seq_len, "max_seq_len")
        if doc_stride is not None:
            preprocess_parameters["doc_stride"] = _positive_int(doc_stride, "doc_stride", minimum=0)
        postprocess_parameters: dict[str, Any] = {}
        if top_k is not None:
            postprocess_parameters["top_k"] = _positive_int(top_k, "top_k")
        if max_answer_len is not None:
            postprocess_parameters["max_answer_len"] = _positive_int(max_answer_len, "max_answer_len")
        if handle_impossible_answer is not None:
            postprocess_parameters["handle_impossible_answer"] = bool(handle_impossible_answer)
        if null_score_diff_threshold is not None:
            threshold = null_score_diff_threshold
            if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold):
                raise ValueError(f"null_score_diff_threshold must be a finite number, got {threshold!r}.")
            postprocess_parameters["null_score_diff_threshold"] = float(threshold)
        return preprocess_parameters, {}, postprocess_parameters

    # ------------------------------------------------------------------------------------------------ preprocess
    def preprocess(
        self,
        inputs: Any,
        max_seq_len: int | None = None,
        doc_stride: int | None = None,
        align_to_words: bool = True,
    ):
        checked = _checked_input(inputs)
        question, context = checked["question"], checked["context"]
        # Leading spaces of questions (frequent in SQuAD) only cost window room; the SQuAD features strip them too.
        question = question.lstrip()
        limit = self._model_max_length()
        if max_seq_len is None:
            max_seq_len = min(DEFAULT_MAX_SEQ_LEN, limit) if limit is not None else DEFAULT_MAX_SEQ_LEN
        elif limit is not None and max_seq_len > limit:
            raise ValueError(
                f"max_seq_len={max_seq_len} is longer than the {limit} positions the model reads; use "
                f"max_seq_len <= {limit} (long contexts are split into windows anyway)."
            )
        tokenizer = self.tokenizer
        question_first = tokenizer.padding_side != "left"
        question_tokens = len(tokenizer(question, add_special_tokens=False, verbose=False)["input_ids"])
        room = max_seq_len - question_tokens - tokenizer.num_special_tokens_to_add(pair=True)
        if room < 1:
            raise ValueError(
                f"The question is {question_tokens} tokens long, which with the special tokens leaves no room for the "
                f"context in windows of max_seq_len={max_seq_len} tokens; shorten the question or raise max_seq_len"
                + (f" (the model reads at most {limit} tokens)." if limit is not None else ".")
            )
        if doc_stride is None:
            doc_stride = min(DEFAULT_DOC_STRIDE, max_seq_len // 2, room // 2)
        elif doc_stride >= room:
            raise ValueError(
                f"doc_stride={doc_stride} must be smaller than the {room} context tokens a window holds next to this "
                f"question (max_seq_len={max_seq_len}); lower doc_stride or raise max_seq_len."
            )
        encoding = tokenizer(
            question if question_first else context,
            context if question_first else question,
            truncation="only_second" if question_first else "only_first",
            max_length=max_seq_len,
            stride=doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=False,
            verbose=False,
        )
        context_sequence = 1 if question_first else 0
        model_input_names = [name for name in tokenizer.model_input_names if name in encoding]
        windows = len(encoding["input_ids"])
        window_offsets = [
            [
                tuple(offset) if sequence == context_sequence else None
                for sequence, offset in zip(encoding.sequence_ids(window), encoding["offset_mapping"][window])
            ]
            for window in range(windows)
        ]
        if align_to_words:
            window_offsets = [
                _word_offsets(encoding, window, offsets, context_sequence)
                for window, offsets in enumerate(window_offsets)
            ]
        if not any(offset is not None and offset[1] > offset[0] for offsets in window_offsets for offset in offsets):
            raise ValueError(
                f"The context {context[:50]!r} has no token the tokenizer keeps (only spaces or ignored characters); "
                "pass a context with text."
            )
        cls_token_id = tokenizer.cls_token_id
        for window, offsets in enumerate(window_offsets):
            input_ids = encoding["input_ids"][window]
            # The null answer is read at [CLS]; a tokenizer without one gives the model no null position.
            null_index = input_ids.index(cls_token_id) if cls_token_id in input_ids else None
            item: dict[str, Any] = {
                name: torch.tensor([encoding[name][window]], dtype=torch.long) for name in model_input_names
            }
            item["window"] = _Window(context, offsets, null_index, len(input_ids))
            item["is_last"] = window == windows - 1
            yield item

    def _model_max_length(self) -> int | None:
        """The longest input the model reads: the smaller of the tokenizer's and the position embeddings' limits."""
        limits = []
        tokenizer_limit = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < _NO_LENGTH_LIMIT:
            limits.append(tokenizer_limit)
        config = self.model.config
        encoder_config = getattr(config, "encoder_config", None)  # models that wrap an encoder (ForceReader)
        if isinstance(encoder_config, dict):
            encoder_config = type("EncoderConfig", (), encoder_config)
        for source in (config, encoder_config):
            positions = getattr(source, "max_position_embeddings", None)
            if isinstance(positions, int) and positions > 0:
                limits.append(positions)
        return min(limits) if limits else None

    # --------------------------------------------------------------------------------------------------- forward
    def _forward(self, inputs: dict[str, Any]) -> dict[str, Any]:
        model_inputs = {
            name: inputs[name].to(self.model.device) for name in self.tokenizer.model_input_names if name in inputs
        }
        outputs = self.model(**model_inputs)
        if isinstance(outputs, tuple):
            start_logits, end_logits = outputs[0], outputs[1]
        else:
            start_logits, end_logits = outputs["start_logits"], outputs["end_logits"]
        # "start_logits" first: the batching machinery reads the batch size from the first entry.
        return {
            "start_logits": start_logits,
            "end_logits": end_logits,
            "window": inputs["window"],
            "is_last": inputs["is_last"],
        }

    # ----------------------------------------------------------------------------------------------- postprocess
    def postprocess(
        self,
        model_outputs: list[dict[str, Any]],
        top_k: int = 1,
        max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
        handle_impossible_answer: bool = False,
        null_score_diff_threshold: float | None = None,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        if null_score_diff_threshold is None:
            configured = getattr(self.model.config, "null_score_diff_threshold", None)
            null_score_diff_threshold = float(configured) if isinstance(configured, numbers.Real) else 0.0
        windows = [output["window"] for output in model_outputs]
        context = windows[0].context
        left_padded = self.tokenizer.padding_side == "left"  # batches pad the windows on the tokenizer's side
        start_logits, end_logits = [], []
        for output, window in zip(model_outputs, windows):
            start_logits.append(_unpadded(output["start_logits"][0], window.length, left_padded))
            end_logits.append(_unpadded(output["end_logits"][0], window.length, left_padded))
        found = rank_answer_spans(
            start_logits,
            end_logits,
            [window.offsets for window in windows],
            context,
            null_indices=[window.null_index for window in windows],
            n_best_size=top_k,
            max_answer_length=max_answer_len,
        )
        ranked = [
            (
                span.score,
                {
                    "score": found.probability(span.score),
                    "start": span.start,
                    "end": span.end,
                    "answer": context[span.start : span.end],
                },
            )
            for span in found.spans
        ]
        if handle_impossible_answer and found.null_score is not None:
            null_answer = {"score": found.probability(found.null_score), "start": 0, "end": 0, "answer": ""}
            # A stable sort after the spans: on a tie the span stays first, since the null answer must beat the best
            # span by MORE than the threshold.
            ranked.append((found.null_score - null_score_diff_threshold, null_answer))
            ranked.sort(key=lambda pair: -pair[0])
        answers = [answer for _, answer in ranked[:top_k]]
        return answers[0] if top_k == 1 else answers


# ------------------------------------------------------------------------------------------------------- inputs
def _inputs_from_pairs(question: Any, context: Any) -> dict[str, str] | list[dict[str, str]]:
    """question=/context= as strings or lists (a single string is broadcast over the other list)."""
    if question is None or context is None:
        raise ValueError("Pass both a question and a context (question=..., context=...).")
    question_list, context_list = isinstance(question, (list, tuple)), isinstance(context, (list, tuple))
    if not question_list and not context_list:
        return _checked_input({"question": question, "context": context})
    questions = list(question) if question_list else [question] * len(context)
    contexts = list(context) if context_list else [context] * len(question)
    if len(questions) != len(contexts):
        raise ValueError(
            f"Got {len(questions)} questions and {len(contexts)} contexts; pass as many of each, or a single "
            "question or context for all."
        )
    return [
        _checked_input({"question": q, "context": c}, index) for index, (q, c) in enumerate(zip(questions, contexts))
    ]


def _checked_input(item: Any, index: int | None = None) -> dict[str, str]:
    where = "" if index is None else f" (input {index})"
    if not isinstance(item, dict):
        raise TypeError(
            f'Each input must be a dict {{"question": ..., "context": ...}}{where}, got {type(item).__name__}.'
        )
    if set(item) != {"question", "context"}:
        raise ValueError(f'An input dict needs exactly the keys "question" and "context"{where}; got {sorted(item)}.')
    for key in ("question", "context"):
        value = item[key]
        if not isinstance(value, str):
            raise TypeError(f"The {key}{where} must be a string, got {type(value).__name__}: {value!r:.80}.")
        if not value.strip():
            raise ValueError(f"The {key}{where} is empty; pass a non-empty string.")
        check_unicode(value, f"The {key}{where}")
    return {"question": item["question"], "context": item["context"]}


def _word_offsets(encoding: Any, window: int, offsets: list, context_sequence: int) -> list:
    """Every context token's offsets widened to its whole word (as the tokenizer's pre-tokenizer splits words), so
    that answers never start or end inside a word; tokens without a word keep their own offsets."""
    word_ids = encoding.word_ids(window)
    word_spans: dict[int, tuple[int, int]] = {}
    aligned = []
    for offset, word in zip(offsets, word_ids):
        if offset is None or word is None:
            aligned.append(offset)
            continue
        if word not in word_spans:
            span = encoding.word_to_chars(window, word, sequence_index=context_sequence)
            word_spans[word] = (span.start, span.end) if span is not None else offset
        aligned.append(word_spans[word])
    return aligned


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def _unpadded(row: torch.Tensor, length: int, left_padded: bool) -> torch.Tensor:
    if row.shape[-1] < length:
        raise ValueError(f"The model returned {row.shape[-1]} logits for a window of {length} tokens.")
    return row[-length:] if left_padded else row[:length]

