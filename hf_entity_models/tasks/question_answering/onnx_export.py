"""ONNX export of extractive question-answering models (ForceReader and any `AutoModelForQuestionAnswering`, e.g.
BERT), int8 weights for ONNX Runtime, and answering with the exported graph through the package's own SQuAD code.

* `export_onnx` writes ``model.onnx`` (inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` as the model
  reads them, outputs ``start_logits`` and ``end_logits``, dynamic batch and sequence axes), the config and the
  tokenizer into a folder, and checks ONNX Runtime against PyTorch on sample inputs before it keeps the file.
* `quantize_onnx_int8` writes ``model.int8.onnx``: dynamic int8 quantisation of the weights of the matrix products
  and of the embedding tables (`onnxruntime.quantization.quantize_dynamic`).
* `OnnxQuestionAnswering` runs such a folder with ONNX Runtime and answers like the PyTorch model: it is called like
  one (``model(**features) -> .start_logits, .end_logits``), so `squad_logits`, `answer_squad` and `evaluate_squad`
  take it in place of the model, and `answer` returns the pipeline's ``{"answer", "start", "end", "score"}``.
* `BFloat16Autocast`: the PyTorch model run in bfloat16 autocast, the CPU alternative to int8 that needs no export.

The exporter is torch's ``torch.export``-based one (``torch.onnx.export(..., dynamo=True)``, which writes the graph
through onnxscript). The TorchScript exporter cannot export ForceReader: tracing records the lengths of the question
and passage sequences that the model rebuilds from the packed input (``int(question_length.max())``) as constants of
the example, so a graph traced on one batch would cut every other batch at the example's lengths (and the graph it
wrote gave NaN logits even at the example's shape, with torch 2.13). ``torch.export`` keeps those lengths as
symbolic values computed in the graph (``ReduceMax`` -> ``Slice``/``Range``), once the two data-dependent branches
of `split_packed_input` are taken out (its input check, which `OnnxQuestionAnswering` does instead on the host, and
a slice whose length it could not bound): `export_onnx` swaps in an equivalent split while it exports, and checks
the exported graph against the model.

onnx, onnxruntime and onnxscript are optional (``pip install "hf-entity-models[onnx]"``): they are imported only
inside the functions that need them.

Example:

```python
>>> from hf_entity_models.tasks.question_answering.onnx_export import (  # doctest: +SKIP
...     OnnxQuestionAnswering, export_onnx, quantize_onnx_int8)
>>> export = export_onnx(model, tokenizer, "runs/forcereader-onnx")  # doctest: +SKIP
>>> quantize_onnx_int8(export.path)  # doctest: +SKIP
>>> onnx_model = OnnxQuestionAnswering("runs/forcereader-onnx")  # doctest: +SKIP
>>> onnx_model.answer("Who founded Microsoft?", "Bill Gates founded Microsoft in 1975.")  # doctest: +SKIP
{'answer': 'Bill Gates', 'start': 0, 'end': 10, 'score': 0.93}

```
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn
from transformers.modeling_outputs import QuestionAnsweringModelOutput
from transformers.utils import logging

from ..onnx_runtime import onnxruntime_session, quiet_exporter, require_onnx_module

logger = logging.get_logger(__name__)

ONNX_FILE_NAME = "model.onnx"
INT8_FILE_NAME = "model.int8.onnx"
# What the export wrote and checked, next to the graph (read by `OnnxQuestionAnswering`).
EXPORT_INFO_FILE_NAME = "onnx_export.json"
MODEL_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAMES = ("start_logits", "end_logits")
DEFAULT_OPSET = 20
MIN_OPSET = 18  # the ONNX written for `cdist` (ReduceL1 / ReduceL2 with their axes as an input)
# What `export_onnx` accepts on its check inputs, per logit: |ONNX Runtime - PyTorch| <= ATOL + RTOL * |PyTorch|.
# float32 graphs differ by rounding only: about 3e-5 for the tiny test ForceReader (logits of order 10), 2e-4 for a
# MiniLM-L6 ForceReader on 256-token windows (three encoder passes; logits of order 30), 1e-7 for a tiny BERT.
DEFAULT_ATOL = 1e-4
DEFAULT_RTOL = 1e-4
WEIGHT_TYPES = ("qint8", "quint8")
# Two packed question-passage pairs of different lengths: the batch `export_onnx` traces and checks with when it is
# given none (two rows and padding, so that neither axis is specialised to its example size).
SAMPLE_PAIRS = (
    ("Who founded Microsoft?", "Bill Gates founded Microsoft in Albuquerque in 1975, with Paul Allen."),
    (
        "Where does the river that flows through the capital of France rise, and how long is it?",
        "The Seine rises at Source-Seine in Burgundy and flows 777 kilometres through Paris to the English Channel.",
    ),
)


# ------------------------------------------------------------------------------------------------------ export
@dataclass
class OnnxExport:
    """What `export_onnx` wrote.

    Attributes:
        path: The ONNX graph (``<output_dir>/model.onnx``).
        input_names: Its inputs, in order (a subset of ``input_ids``, ``attention_mask``, ``token_type_ids``).
        max_abs_difference: Largest |ONNX Runtime - PyTorch| of a start or end logit on the check inputs (None when
            not checked).
        opset: The ONNX opset of the graph.
    """

    path: Path
    input_names: tuple[str, ...]
    max_abs_difference: float | None
    opset: int

    @property
    def output_dir(self) -> Path:
        return self.path.parent


def export_onnx(
    model: nn.Module,
    tokenizer: Any,
    output_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    opset: int = DEFAULT_OPSET,
    check: bool = True,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    sample_inputs: Mapping[str, torch.Tensor] | None = None,
) -> OnnxExport:
    """Export a question-answering model to ``<output_dir>/model.onnx`` for ONNX Runtime, with its config and
    tokenizer beside it.

    The graph takes ``input_ids``, ``attention_mask`` and (when the model reads them) ``token_type_ids``, int64 of
    shape ``(batch, sequence)`` with both axes dynamic, and returns ``start_logits`` and ``end_logits`` of that shape:
    the packed features of `squad_features` / the pipeline, as the PyTorch model takes them. Inference mode
    (dropout off); the model must be float32 (on any device: the export runs where the model is).

    Before the graph is kept, ONNX Runtime runs it on the sample inputs and on a batch of another size and length,
    and every logit must equal the model's within ``atol + rtol * |logit|`` (else a `RuntimeError`, and nothing is
    written).

    Args:
        model: `ForceReaderForQuestionAnswering` (any rung of the ladder) or another `...ForQuestionAnswering` model
            whose forward returns ``start_logits`` and ``end_logits`` (e.g. `BertForQuestionAnswering`).
        tokenizer: The model's tokenizer; saved beside the graph and used for the sample inputs.
        output_dir: Folder to write into (created if needed).
        overwrite: Replace a ``model.onnx`` that is already there (without it, a `FileExistsError`).
        opset: ONNX opset of the graph (at least 18).
        check: Compare ONNX Runtime with PyTorch before keeping the graph.
        atol: Absolute part of the accepted |ONNX Runtime - PyTorch| of a logit.
        rtol: Relative part (times |PyTorch logit|).
        sample_inputs: The batch to export with (tensors of shape ``(batch, sequence)``, batch >= 2 and rows of
            different lengths); default: two short question-passage pairs encoded by `tokenizer`.

    Returns:
        `OnnxExport`: the path of the graph, its input names and the measured largest difference.

    Raises:
        TypeError: `model` is not a question-answering model (a coreference or language model, a ForceReader body).
        ValueError: `output_dir` is a file, the model is not float32, `opset` is below 18, the tokenizer does not
            give the inputs the model needs, or the sample inputs have the wrong shape.
        FileExistsError: ``model.onnx`` exists and `overwrite` is False.
        ImportError: onnx, onnxruntime or onnxscript is not installed.
        RuntimeError: The exported graph does not reproduce the model's logits.

    Example:

    ```python
    >>> export = export_onnx(model, tokenizer, "runs/forcereader-onnx")  # doctest: +SKIP
    >>> export.path, export.input_names  # doctest: +SKIP
    (PosixPath('runs/forcereader-onnx/model.onnx'), ('input_ids', 'attention_mask', 'token_type_ids'))

    ```
    """
    check_question_answering_model(model)
    parameter = next(model.parameters(), None)
    if parameter is not None and parameter.dtype != torch.float32:
        raise ValueError(
            f"The model's weights are {parameter.dtype}: export the float32 model (model.float()); int8 comes after, "
            "from the float graph (quantize_onnx_int8)."
        )
    if not isinstance(opset, int) or opset < MIN_OPSET:
        raise ValueError(f"opset must be an integer >= {MIN_OPSET}, got {opset!r}.")
    output_dir = Path(output_dir)
    target = output_dir / ONNX_FILE_NAME
    _check_output(target, overwrite)
    for module in ("onnx", "onnxscript", "onnxruntime"):
        require_onnx_module(module)
    input_names = model_input_names(model)
    if sample_inputs is None:
        sample_inputs = sample_batch(tokenizer, input_names, _position_limit(model))
    device = parameter.device if parameter is not None else torch.device("cpu")
    sample = {name: tensor.to(device) for name, tensor in _checked_sample(sample_inputs, input_names).items()}
    output_dir.mkdir(parents=True, exist_ok=True)
    partial = output_dir / f".{ONNX_FILE_NAME}.writing-{os.getpid()}-{secrets.token_hex(4)}"
    was_training = model.training
    model.eval()
    try:
        _export_graph(model, sample, input_names, partial, opset)
        difference = _check_against_pytorch(model, partial, sample, atol, rtol) if check else None
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        model.train(was_training)
    if getattr(model, "config", None) is not None:
        model.config.save_pretrained(output_dir)
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(output_dir)
    info = {
        "file": ONNX_FILE_NAME,
        "inputs": list(input_names),
        "outputs": list(OUTPUT_NAMES),
        "dynamic_axes": {name: ["batch", "sequence"] for name in (*input_names, *OUTPUT_NAMES)},
        "architecture": type(model).__name__,
        "opset": opset,
        "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}",
        "max_abs_difference": difference,
    }
    (output_dir / EXPORT_INFO_FILE_NAME).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    logger.info(f"Exported {type(model).__name__} to {target} (largest |ONNX Runtime - PyTorch| logit {difference}).")
    return OnnxExport(target, input_names, difference, opset)


def check_question_answering_model(model: Any) -> None:
    """Refuse what `export_onnx` cannot export, saying what it can.

    Raises:
        TypeError: `model` is not a torch module with a question-answering head.
    """
    name = type(model).__name__
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(
            "export_onnx exports a question-answering model (ForceReaderForQuestionAnswering, "
            f"BertForQuestionAnswering or another AutoModelForQuestionAnswering), got a {name}; load one with "
            "AutoModelForQuestionAnswering.from_pretrained(folder)."
        )
    if name.endswith("ForQuestionAnswering"):
        return
    if name.endswith("ForCoreference") or name in ("PetraModel", "RefReaderModel"):
        raise TypeError(f"{name} is a coreference model, which is not exported to ONNX: {COREFERENCE_NOT_EXPORTED}")
    if name == "ForceReaderModel":
        raise TypeError(
            "ForceReaderModel is the ForceReader body without its answer head: export the "
            "ForceReaderForQuestionAnswering that holds it (AutoModelForQuestionAnswering.from_pretrained(folder))."
        )
    raise TypeError(
        f"export_onnx exports question-answering models only (ForceReaderForQuestionAnswering, "
        f"BertForQuestionAnswering and other ...ForQuestionAnswering classes, whose forward returns start_logits and "
        f"end_logits), got a {name}."
    )


# Why the coreference models stay in PyTorch (said by `check_question_answering_model` and `hf-entity export`).
COREFERENCE_NOT_EXPORTED = (
    "its entity memory is a recurrence that runs in Python, one token (document mode: one mention) at a time, with "
    "control flow that depends on the data (the batch shrinks as each document ends, from lengths read with "
    ".tolist(); document mode decides each mention's entity before it reads the next). A traced graph would hold one "
    "copy of the step per token of the example document and fix its length, so it has no dynamic sequence axis; run "
    "these models with PyTorch."
)


def model_input_names(model: nn.Module) -> tuple[str, ...]:
    """The packed-feature inputs that the model's forward takes, in `MODEL_INPUT_NAMES` order."""
    import inspect

    parameters = inspect.signature(model.forward).parameters
    names = tuple(name for name in MODEL_INPUT_NAMES if name in parameters)
    if "input_ids" not in names:
        raise TypeError(f"{type(model).__name__}.forward takes no input_ids: it is not an extractive QA model.")
    return names


def sample_batch(tokenizer: Any, input_names: Sequence[str], max_length: int | None = None) -> dict[str, torch.Tensor]:
    """Two question-passage pairs of different lengths, packed and right-padded as `squad_features` packs them."""
    if tokenizer is None or not callable(tokenizer):
        raise ValueError("export_onnx needs the model's tokenizer (to save it beside the graph and to build samples).")
    questions, contexts = zip(*SAMPLE_PAIRS)
    length = min(max_length or 128, 128)
    encoded = tokenizer(
        list(questions), list(contexts), truncation="only_second", max_length=length, padding=True,
        return_token_type_ids="token_type_ids" in input_names, return_tensors="pt",
    )
    missing = [name for name in input_names if name not in encoded]
    if missing:
        raise ValueError(
            f"The tokenizer gives no {', '.join(missing)}, which the model reads: pass the model's own tokenizer."
        )
    return {name: encoded[name] for name in input_names}


def _position_limit(model: nn.Module) -> int | None:
    config = getattr(model.config, "encoder_config", None) or model.config
    positions = getattr(config, "max_position_embeddings", None)
    return positions if isinstance(positions, int) else None


def _checked_sample(sample_inputs: Mapping[str, torch.Tensor], input_names: Sequence[str]) -> dict[str, torch.Tensor]:
    missing = [name for name in input_names if name not in sample_inputs]
    if missing:
        raise ValueError(f"sample_inputs lacks {', '.join(missing)}, which the model reads.")
    sample = {name: torch.as_tensor(sample_inputs[name]).long().cpu() for name in input_names}
    shapes = {tuple(tensor.shape) for tensor in sample.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"sample_inputs must all have one shape (batch, sequence); got {sorted(shapes)}.")
    batch, length = next(iter(shapes))
    if batch < 2 or length < 2:
        # torch.export fixes an axis whose example size is 0 or 1: the graph would take no other size.
        raise ValueError(
            f"sample_inputs of shape {(batch, length)}: export with at least two rows of at least two tokens, so "
            "that the batch and sequence axes stay dynamic."
        )
    return sample


def _check_output(target: Path, overwrite: bool) -> None:
    folder = target.parent
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir {folder} is a file, not a folder: give the folder to write {target.name} into.")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists: pass overwrite=True to replace it, or choose another folder.")


class _LogitsOnly(nn.Module):
    """The model as a function of its packed inputs to (start_logits, end_logits): what the graph computes."""

    def __init__(self, model: nn.Module, input_names: Sequence[str]):
        super().__init__()
        self.model = model
        self.input_names = tuple(input_names)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        output = self.model(**{name: inputs[name] for name in self.input_names})
        return output.start_logits, output.end_logits


def _export_graph(model: nn.Module, sample: dict[str, torch.Tensor], input_names: Sequence[str], path: Path,
                  opset: int) -> None:
    batch = torch.export.Dim("batch")
    limit = _position_limit(model)
    sequence = torch.export.Dim("sequence", max=limit) if limit else torch.export.Dim("sequence")
    with _export_friendly(model), quiet_exporter(), torch.no_grad():
        torch.onnx.export(
            _LogitsOnly(model, input_names),
            (),
            str(path),
            kwargs={name: sample[name] for name in input_names},
            dynamo=True,
            input_names=list(input_names),
            output_names=list(OUTPUT_NAMES),
            dynamic_shapes={name: {0: batch, 1: sequence} for name in input_names},
            custom_translation_table=_translations(),
            opset_version=opset,
            external_data=_parameter_bytes(model) > 1_800_000_000,  # protobuf's 2 GB limit
            verbose=False,
        )


def _parameter_bytes(model: nn.Module) -> int:
    return sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())


@contextlib.contextmanager
def _export_friendly(model: nn.Module) -> Iterator[None]:
    """While it exports: ForceReader's `split_packed_input` replaced by `_traceable_split` (in the namespace the
    model's code reads it from: the package's module or a checkpoint's own copy). Other models are left as they are.

    Not thread-safe: another thread running a ForceReader of the same code meanwhile would skip the input check.
    """
    body = getattr(model, "forcereader", None)
    namespace = getattr(type(body).forward, "__globals__", None) if body is not None else None
    original = namespace.get("split_packed_input") if namespace is not None else None
    if original is None:
        yield
        return
    namespace["split_packed_input"] = _traceable_split(original, namespace["SeparateSequences"])
    try:
        yield
    finally:
        namespace["split_packed_input"] = original


def _traceable_split(original: Any, separate_sequences: type) -> Any:
    """`split_packed_input` for `torch.export`: the same sequences, without its two data-dependent Python branches.

    The original refuses a row without a question or passage segment (`bool(tensor.any())`, which a graph cannot
    branch on: `OnnxQuestionAnswering` checks its inputs instead) and slices the question with `[:, :span]`, whose
    length `min(sequence, span)` the exporter cannot bound (the encoder then branches on it); here the spans are
    declared to lie in [2, sequence] (`torch._check`: every row has [CLS] and [SEP]) and taken with `narrow`. On
    valid inputs it returns what the original returns; `export_onnx` checks the graph against the model, which
    runs the original.
    """

    def split(input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        valid = attention_mask.bool()
        question_mask = valid & (token_type_ids == 0)
        passage_tokens = valid & (token_type_ids == 1)
        question_length = question_mask.sum(dim=1)
        passage_length = passage_tokens.sum(dim=1) + 1  # + the leading [CLS]
        length = input_ids.shape[1]
        question_span = question_length.max().item()
        torch._check(question_span >= 2)
        torch._check(question_span <= length)
        passage_span = passage_length.max().item()
        torch._check(passage_span >= 2)
        torch._check(passage_span <= length)
        steps = torch.arange(passage_span, device=input_ids.device)
        passage_positions = torch.where(steps == 0, 0, question_length[:, None] + steps - 1)
        passage_mask = steps < passage_length[:, None]
        passage_positions = passage_positions.masked_fill(~passage_mask, 0).clamp(max=length - 1)
        question_mask = question_mask.narrow(1, 0, question_span)
        return separate_sequences(
            question_ids=input_ids.narrow(1, 0, question_span).masked_fill(~question_mask, 0),
            question_mask=question_mask,
            passage_ids=input_ids.gather(1, passage_positions).masked_fill(~passage_mask, 0),
            passage_mask=passage_mask,
            passage_positions=passage_positions.masked_fill(~passage_mask, -1),
        )

    return split


def _translations() -> dict[Any, Any]:
    """ONNX for the aten operators that torch's ONNX library lacks: `cdist` (Interactive Reasoning's L1 distance)."""
    from onnxscript import opset18 as op
    from onnxscript.function_libs.torch_lib.tensor_typing import TFloat

    def cdist(x1, x2, p=2.0, compute_mode=None):
        # (B, P, 1, H) - (B, 1, Q, H), reduced over H: the P x Q x H differences are materialised (torch does not).
        difference = op.Sub(op.Unsqueeze(x1, [-2]), op.Unsqueeze(x2, [-3]))
        if p == 1.0:
            return op.ReduceL1(difference, [-1], keepdims=0)
        if p == 2.0:
            return op.ReduceL2(difference, [-1], keepdims=0)
        raise NotImplementedError(f"cdist with p={p} has no ONNX translation here (p=1 and p=2 have).")

    # Real objects, not the strings of this module's postponed annotations: the exporter reads the signature from them.
    cdist.__annotations__ = {"x1": TFloat, "x2": TFloat, "p": float, "compute_mode": Optional[int], "return": TFloat}
    return {torch.ops.aten._cdist_forward.default: cdist}


def _check_against_pytorch(
    model: nn.Module, path: Path, sample: dict[str, torch.Tensor], atol: float, rtol: float
) -> float:
    """Largest |ONNX Runtime - PyTorch| logit on the sample and on a batch of another size and length (`_reshaped`),
    refused where a logit differs by more than ``atol + rtol * |PyTorch logit|``."""
    session = onnxruntime_session(path)
    batches = [sample, _reshaped(sample)]
    largest, excess = 0.0, 0.0
    for batch in batches:
        with torch.no_grad():
            expected = model(**batch)
        produced = session.run(list(OUTPUT_NAMES), {name: tensor.cpu().numpy() for name, tensor in batch.items()})
        for name, values in zip(OUTPUT_NAMES, produced):
            reference = getattr(expected, name).float().cpu()
            if tuple(values.shape) != tuple(reference.shape):
                raise RuntimeError(
                    f"The exported graph gives {name} of shape {tuple(values.shape)} for inputs of shape "
                    f"{tuple(batch['input_ids'].shape)}, PyTorch {tuple(reference.shape)}: the export is wrong."
                )
            difference = (torch.from_numpy(values) - reference).abs()
            largest = max(largest, float(difference.max()))
            excess = max(excess, float((difference - atol - rtol * reference.abs()).max()))
    if not excess <= 0.0:  # NaN fails too
        raise RuntimeError(
            f"The exported graph's logits differ from PyTorch's by up to {largest:.3g} on the sample inputs, beyond "
            f"atol={atol:g} + rtol={rtol:g} * |logit|; the graph was not kept. Report this with the model's config."
        )
    return largest


def _reshaped(sample: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The sample as a batch of another size and length: its first row once more, every row padded by three
    tokens."""
    padded = {}
    for name, tensor in sample.items():
        rows = torch.cat([tensor, tensor[:1]])
        padded[name] = torch.cat([rows, rows.new_zeros(rows.shape[0], 3)], dim=1)
    return padded


# ------------------------------------------------------------------------------------------------------- int8
def quantize_onnx_int8(
    onnx_path: str | os.PathLike,
    output_path: str | os.PathLike | None = None,
    *,
    weight_type: str = "qint8",
    per_channel: bool = True,
    overwrite: bool = False,
) -> Path:
    """Dynamic int8 quantisation of an exported graph (`onnxruntime.quantization.quantize_dynamic`): the weights of
    the matrix products (``MatMul``) and the embedding tables (``Gather``) are stored in 8 bits, activations are
    quantised at run time. The convolutions of Interactive Reasoning stay float: ONNX Runtime's CPU ``ConvInteger``
    takes unsigned weights only, and they hold a few hundred weights.

    The graph is pre-processed first (`quant_pre_process`: ONNX Runtime's basic optimisations): the exporter feeds
    the linear layers' weights to ``MatMul`` through a ``Transpose`` (ForceReader's encoder weights serve three
    passes), which `quantize_dynamic` skips, as it quantises initializers only; folded, they are quantised (a
    MiniLM-L6 ForceReader: 0.61 of the float size without it, 0.24 with it).

    Signed weights (``qint8``, the default) with one scale per output channel: activations are quantised to uint8
    at run time, so the products are u8 x s8, the combination ONNX Runtime's x86 CPU kernels are fastest at
    (``VPMADDUBSW``; weights kept to 7 bits against its saturation). Measured on a MiniLM-L6 ForceReader (random
    head, 24 SQuAD windows of 256 tokens, one thread): per-channel weights keep the logits closer to the float
    graph's than per-tensor ones (largest start-logit change 6.7 vs 17 on logits of order 30; the same top start
    on 79 % vs 71 % of the windows) at the same size and speed (about 1.45x the float graph's speed); ``quint8``
    per tensor moved the top start on two thirds of the windows.

    Args:
        onnx_path: The float graph (``model.onnx`` of `export_onnx`).
        output_path: Where to write (default: ``model.int8.onnx`` beside `onnx_path`).
        weight_type: ``"qint8"`` or ``"quint8"``.
        per_channel: One scale per output channel (default) instead of one per tensor.
        overwrite: Replace an existing `output_path` (without it, a `FileExistsError`).

    Returns:
        The path of the int8 graph.

    Raises:
        FileNotFoundError: `onnx_path` does not exist.
        ValueError: `onnx_path` is not a file, `output_path` is `onnx_path` or a folder, or `weight_type` is unknown.
        FileExistsError: `output_path` exists and `overwrite` is False.
        ImportError: onnxruntime is not installed.

    Example:

    ```python
    >>> quantize_onnx_int8("runs/forcereader-onnx/model.onnx")  # doctest: +SKIP
    PosixPath('runs/forcereader-onnx/model.int8.onnx')

    ```
    """
    source = Path(onnx_path)
    if not source.exists():
        raise FileNotFoundError(f"{source} does not exist: pass the model.onnx that export_onnx wrote.")
    if not source.is_file():
        raise ValueError(f"{source} is a folder: pass the ONNX file in it ({source / ONNX_FILE_NAME}).")
    target = Path(output_path) if output_path is not None else source.with_name(INT8_FILE_NAME)
    if target.is_dir():
        raise ValueError(f"output_path {target} is a folder: give the path of the .onnx file to write.")
    if target.exists() and target.resolve() == source.resolve():
        raise ValueError(f"output_path {target} is the graph to quantise: write the int8 graph to another file.")
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} already exists: pass overwrite=True to replace it, or choose another file.")
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {WEIGHT_TYPES}, got {weight_type!r}.")
    quantization = require_onnx_module("onnxruntime.quantization")
    quant_type = quantization.QuantType.QInt8 if weight_type == "qint8" else quantization.QuantType.QUInt8
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target.parent.mkdir(parents=True, exist_ok=True)
    hidden = f"{os.getpid()}-{secrets.token_hex(4)}"
    folded = target.with_name(f".{target.name}.folded-{hidden}")
    partial = target.with_name(f".{target.name}.writing-{hidden}")
    try:
        with warnings.catch_warnings(), _without_preprocessing_advice():
            warnings.simplefilter("ignore")
            # Symbolic shape inference is for transformer fusions; the exported graph's shapes are already known.
            quant_pre_process(source, folded, skip_symbolic_shape=True)
            quantization.quantize_dynamic(
                folded, partial, op_types_to_quantize=["MatMul", "Gather"], per_channel=per_channel,
                weight_type=quant_type,
            )
        os.replace(partial, target)
    finally:
        folded.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return target


@contextlib.contextmanager
def _without_preprocessing_advice() -> Iterator[None]:
    """`quantize_dynamic` logs on the root logger that the model could be pre-processed (shape inference and graph
    optimisation, for static quantisation of convolutional models); the exported graph is already optimised."""
    import logging

    class Advice(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "pre-processing before quantization" not in record.getMessage()

    root, advice = logging.getLogger(), Advice()
    root.addFilter(advice)
    try:
        yield
    finally:
        root.removeFilter(advice)


class BFloat16Autocast(nn.Module):
    """A model run under ``torch.autocast(dtype=torch.bfloat16)``: the CPU alternative to int8 that needs no export.
    Matrix products and convolutions run in bfloat16 (faster on CPUs with bfloat16 instructions, AVX512-BF16 or AMX;
    slower elsewhere), what needs float32 stays float32 (autocast's own lists; ForceReader's ``cdist`` among them,
    which has no bfloat16 CPU kernel, so a model cast with ``.to(torch.bfloat16)`` fails). The weights stay float32
    and are shared with `model`. Called like the model; `squad_logits` / `evaluate_squad` take it as they take the
    model (they convert the logits to float32).

    Example:

    ```python
    >>> evaluation = evaluate_squad(BFloat16Autocast(model), tokenizer, examples)  # doctest: +SKIP

    ```
    """

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"BFloat16Autocast takes a torch model, got a {type(model).__name__}.")
        super().__init__()
        self.model = model
        self.config = getattr(model, "config", None)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        device_type = next(self.model.parameters()).device.type
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            return self.model(*args, **kwargs)


# ------------------------------------------------------------------------------------------ running the graph
class OnnxQuestionAnswering(nn.Module):
    """An exported question-answering graph run with ONNX Runtime, called like the PyTorch model.

    ``model(input_ids=..., attention_mask=..., token_type_ids=...)`` returns a `QuestionAnsweringModelOutput` with
    ``start_logits`` and ``end_logits`` (float32 CPU tensors), so the package's evaluation code takes it in place of
    the model: `squad_logits(onnx_model, features)`, `answer_squad(onnx_model, tokenizer, examples)`,
    `evaluate_squad(onnx_model, tokenizer, examples)` (SQuAD 2.0: the exported config's no-answer threshold). It is
    an `nn.Module` with no weights of its own (one empty parameter, which tells those functions to pass CPU inputs).

    Args:
        path: An export folder (``model.onnx`` with config and tokenizer beside it) or an ``.onnx`` file (e.g.
            ``model.int8.onnx``; its folder's config and tokenizer are read when there).
        threads: ONNX Runtime intra-op threads (default: its own choice, all cores).
        providers: ONNX Runtime execution providers (default: ``["CPUExecutionProvider"]``).

    Attributes:
        config: The exported model's config (None when the folder holds no config.json).
        tokenizer: The tokenizer saved beside the graph (None when there is none).
        input_names: The graph's inputs.

    Raises:
        FileNotFoundError: No such folder or file, or a folder without ``model.onnx``.
        ImportError: onnxruntime is not installed.

    Example:

    ```python
    >>> onnx_model = OnnxQuestionAnswering("runs/forcereader-onnx/model.int8.onnx")  # doctest: +SKIP
    >>> evaluate_squad(onnx_model, onnx_model.tokenizer, load_squad("dev-v1.1.json")).f1  # doctest: +SKIP

    ```
    """

    def __init__(
        self, path: str | os.PathLike, *, threads: int | None = None, providers: Sequence[str] | None = None
    ) -> None:
        super().__init__()
        location = Path(path)
        if location.is_dir():
            graph = location / ONNX_FILE_NAME
            if not graph.is_file():
                raise FileNotFoundError(
                    f"{location} holds no {ONNX_FILE_NAME}: pass the folder export_onnx (`hf-entity export --onnx`) "
                    "wrote, or the .onnx file itself."
                )
        elif location.is_file():
            graph = location
        else:
            raise FileNotFoundError(f"{location} does not exist: pass an export folder or an .onnx file.")
        self.path = graph
        self.session = onnxruntime_session(graph, threads, providers)
        self.input_names = tuple(entry.name for entry in self.session.get_inputs())
        unknown = [name for name in self.input_names if name not in MODEL_INPUT_NAMES]
        outputs = [entry.name for entry in self.session.get_outputs()]
        if unknown or "input_ids" not in self.input_names or not set(OUTPUT_NAMES) <= set(outputs):
            raise ValueError(
                f"{graph} is not a question-answering graph of export_onnx: its inputs are {list(self.input_names)} "
                f"and its outputs {outputs} (expected inputs among {list(MODEL_INPUT_NAMES)} and outputs "
                f"{list(OUTPUT_NAMES)})."
            )
        self.config = _saved_config(graph.parent)
        self.tokenizer = _saved_tokenizer(graph.parent)
        # Where the evaluation code puts its inputs (`next(model.parameters()).device`): the CPU, for ONNX Runtime.
        self.cpu_marker = nn.Parameter(torch.empty(0), requires_grad=False)

    @property
    def reads_separate_segments(self) -> bool:
        """Whether the graph rebuilds question and passage from the packed input (a separate-encoding ForceReader),
        which needs both segments in every row."""
        return getattr(self.config, "model_type", None) == "forcereader" and bool(
            getattr(self.config, "separate_encoding", False)
        )

    def forward(
        self,
        input_ids: Any,
        attention_mask: Any = None,
        token_type_ids: Any = None,
        **ignored: Any,
    ) -> QuestionAnsweringModelOutput:
        """Start and end logits of packed features (tensors or arrays of shape ``(batch, sequence)``); other
        arguments (labels, `output_head_logits`) are ignored: the graph computes the logits only."""
        start_logits, end_logits = self.logits(
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        )
        return QuestionAnsweringModelOutput(
            start_logits=torch.from_numpy(start_logits), end_logits=torch.from_numpy(end_logits)
        )

    def logits(self, inputs: Mapping[str, Any]) -> tuple[Any, Any]:
        """(start_logits, end_logits) as float32 numpy arrays for a batch of packed features.

        Raises:
            ValueError: An input the graph reads is missing or not 2-D, the inputs differ in shape, or (ForceReader)
                a row has no question or no passage segment.
        """
        import numpy as np

        arrays = {}
        if inputs.get("attention_mask") is None and inputs.get("input_ids") is not None:
            inputs = {**inputs, "attention_mask": torch.ones_like(torch.as_tensor(inputs["input_ids"]))}
        for name in self.input_names:
            value = inputs.get(name)
            if value is None:
                raise ValueError(
                    f"The graph reads {name}, which was not given: pass packed features with "
                    f"{', '.join(self.input_names)} (e.g. tokenizer(question, context, return_token_type_ids=True))."
                )
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            arrays[name] = array.astype(np.int64, copy=False)
        shapes = {tuple(array.shape) for array in arrays.values()}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2 or 0 in next(iter(shapes)):
            raise ValueError(
                f"The inputs must share one non-empty shape (batch_size, sequence_length); got "
                f"{ {name: tuple(array.shape) for name, array in arrays.items()} }."
            )
        if self.reads_separate_segments:
            _check_segments(arrays)
        start_logits, end_logits = self.session.run(list(OUTPUT_NAMES), arrays)
        return start_logits, end_logits

    def answer(
        self,
        question: str | Sequence[str],
        context: str | Sequence[str],
        *,
        max_length: int = 384,
        doc_stride: int = 128,
        max_answer_length: int = 30,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        """The best span of `context` for `question` (lists: one answer per pair): ``{"answer", "start", "end",
        "score"}`` with character offsets (``context[start:end] == answer``) and the span's probability among the
        n-best spans; long contexts are read in windows, as `evaluate_squad` reads them."""
        from .features import prepare_validation_features
        from .postprocess import postprocess_predictions

        if self.tokenizer is None:
            raise ValueError(f"{self.path.parent} holds no tokenizer: export_onnx saves it beside the graph.")
        single = isinstance(question, str)
        questions = [question] if single else list(question)
        contexts = [context] * len(questions) if isinstance(context, str) else list(context)
        if len(questions) != len(contexts):
            raise ValueError(f"Got {len(questions)} questions and {len(contexts)} contexts; pass one context each.")
        examples = {
            "id": [str(index) for index in range(len(questions))], "question": questions, "context": contexts
        }
        features = prepare_validation_features(examples, self.tokenizer, max_length, doc_stride, padding=True)
        starts, ends = self.logits(features)
        rows = [
            {"example_id": example_id, "offset_mapping": offsets}
            for example_id, offsets in zip(features["example_id"], features["offset_mapping"])
        ]
        found = postprocess_predictions(
            [{"id": i, "context": c} for i, c in zip(examples["id"], contexts)], rows, starts, ends,
            max_answer_length=max_answer_length,
        )
        answers = []
        for example_id in examples["id"]:
            best = found.nbest[example_id][0] if found.nbest[example_id] else None
            answers.append(
                {"answer": "", "start": 0, "end": 0, "score": 0.0} if best is None else
                {"answer": best["text"], "start": best["start"], "end": best["end"], "score": best["probability"]}
            )
        return answers[0] if single else answers


def _check_segments(arrays: Mapping[str, Any]) -> None:
    """What ForceReader's `split_packed_input` refuses in PyTorch, refused before the graph runs (it cannot raise)."""
    if "token_type_ids" not in arrays:
        raise ValueError("ForceReader needs token_type_ids (0 = question, 1 = passage) to find the passage.")
    valid = arrays["attention_mask"].astype(bool)
    question = (valid & (arrays["token_type_ids"] == 0)).sum(axis=1)
    passage = (valid & (arrays["token_type_ids"] == 1)).sum(axis=1)
    bad = [int(row) for row in ((question < 2) | (passage < 1)).nonzero()[0]]
    if bad:
        raise ValueError(
            f"Rows {bad[:5]} lack a question segment (token_type_ids 0) or a passage segment (token_type_ids 1): pass "
            "packed question-passage features, e.g. tokenizer(question, context, return_token_type_ids=True)."
        )


def _saved_config(folder: Path) -> Any:
    if not (folder / "config.json").is_file():
        return None
    from transformers import AutoConfig

    from ..._registration import ensure_registered

    ensure_registered()
    return AutoConfig.from_pretrained(folder)


def _saved_tokenizer(folder: Path) -> Any:
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    from ..._registration import ensure_registered

    ensure_registered()  # AutoTokenizer reads config.json, whose model type may be the package's
    return AutoTokenizer.from_pretrained(folder)


__all__ = [
    "BFloat16Autocast",
    "COREFERENCE_NOT_EXPORTED",
    "EXPORT_INFO_FILE_NAME",
    "INT8_FILE_NAME",
    "ONNX_FILE_NAME",
    "OnnxExport",
    "OnnxQuestionAnswering",
    "check_question_answering_model",
    "export_onnx",
    "model_input_names",
    "quantize_onnx_int8",
    "sample_batch",
]
