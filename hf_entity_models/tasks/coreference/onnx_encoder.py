"""The encoder of a coreference checkpoint as an ONNX graph, run by onnxruntime in place of the PyTorch encoder.

The memory of PeTra and the Referential Reader is not exported: it is a Python loop over tokens (the document mode:
over proposed mentions, each joining an entity or starting one before the next is read) whose length and branches
change with every document, which a traced graph would fix to one document. The encoder holds most of the
arithmetic (`benchmarks/RESULTS.md`, "Inference"), and it is a stock transformers encoder: it exports, and the rest
of the model reads its hidden states as before.

    >>> export = export_coreference_encoder(model, "petra-encoder-onnx")  # doctest: +SKIP
    >>> use_onnx_encoder(model, export)  # the model now encodes with onnxruntime  # doctest: +SKIP
    >>> use_onnx_encoder(model, quantize_onnx_int8(export))  # or its int8 quantisation  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from ..onnx_runtime import onnxruntime_session, quiet_exporter, require_onnx_module
from ..question_answering.onnx_export import DEFAULT_OPSET

INPUT_NAMES = ("input_ids", "attention_mask")
GRAPH_FILE = "encoder.onnx"


class _HiddenStates(nn.Module):
    """The encoder as a function of (input_ids, attention_mask) to its hidden states, embeddings first."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
                     .hidden_states)


def coreference_encoder(model: nn.Module) -> nn.Module:
    """The encoder a PeTra or Referential Reader model (any head) reads its features from."""
    body = getattr(model, getattr(model, "base_model_prefix", ""), None)
    encoder = getattr(body, "encoder", None)
    if not isinstance(encoder, nn.Module) or getattr(model.config, "model_type", None) not in ("petra", "refreader"):
        raise TypeError(
            f"{type(model).__name__} is not a PeTra or Referential Reader model: export a question-answering model "
            "with export_onnx instead."
        )
    return encoder


def export_coreference_encoder(
    model: nn.Module, output_dir: str | os.PathLike, *, overwrite: bool = False, opset: int = DEFAULT_OPSET,
    atol: float = 1e-4,
) -> Path:
    """Write the model's encoder to ``<output_dir>/encoder.onnx`` (batch and length dynamic, every hidden state an
    output) and check it against PyTorch on two shapes: a hidden state off by more than `atol` raises and nothing
    is kept. Returns the graph's path."""
    encoder = coreference_encoder(model).eval()
    output_dir = Path(output_dir)
    path = output_dir / GRAPH_FILE
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists: pass overwrite=True to replace it.")
    if output_dir.exists() and not output_dir.is_dir():
        raise NotADirectoryError(f"{output_dir} is a file: give export_coreference_encoder a folder.")
    output_dir.mkdir(parents=True, exist_ok=True)
    require_onnx_module("onnxscript")
    sample = _sample(encoder, batch=2, length=17)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("sequence", max=encoder.config.max_position_embeddings)
    staged = output_dir / f".{GRAPH_FILE}.partial"
    with quiet_exporter(), torch.no_grad():
        torch.onnx.export(
            _HiddenStates(encoder), (), str(staged), kwargs=sample, dynamo=True, input_names=list(INPUT_NAMES),
            output_names=[f"hidden_state_{layer}" for layer in range(encoder.config.num_hidden_layers + 1)],
            dynamic_shapes={name: {0: batch, 1: length} for name in INPUT_NAMES}, opset_version=opset, verbose=False,
            external_data=False,  # one file, renamed into place below (an encoder is far below protobuf's 2 GB)
        )
    try:
        _check_against_pytorch(encoder, staged, atol)
    except Exception:
        staged.unlink(missing_ok=True)
        raise
    staged.replace(path)
    return path


def _sample(encoder: nn.Module, batch: int, length: int) -> dict[str, torch.Tensor]:
    """Token ids drawn from the vocabulary (seed 0) and a mask with the last rows padded."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, encoder.config.vocab_size, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[1:, length - 5:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _check_against_pytorch(encoder: nn.Module, path: Path, atol: float) -> None:
    session = onnxruntime_session(path)
    for batch, length in ((2, 17), (3, 41)):  # the export's shape, and another
        sample = _sample(encoder, batch, length)
        with torch.no_grad():
            expected = encoder(**sample, output_hidden_states=True).hidden_states
        produced = session.run(None, {name: tensor.numpy() for name, tensor in sample.items()})
        kept = sample["attention_mask"].bool()
        largest = max(float((torch.from_numpy(values) - reference)[kept].abs().max())
                      for values, reference in zip(produced, expected, strict=True))
        if not largest <= atol:  # NaN fails too
            raise RuntimeError(
                f"The exported encoder's hidden states differ from PyTorch's by {largest:.3g} (> {atol:g}) on a "
                f"{batch} x {length} batch; the graph was not kept."
            )


class OnnxEncoder(nn.Module):
    """An exported encoder (`export_coreference_encoder`, or its `quantize_onnx_int8` file) in onnxruntime, called
    as the PyTorch encoder is by the coreference models: ``encoder(input_ids=..., attention_mask=...,
    output_hidden_states=True).hidden_states``."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None):
        super().__init__()
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"No ONNX graph at {self.path}: export one with export_coreference_encoder.")
        self.session = onnxruntime_session(self.path, threads=threads)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **unused: Any
                ) -> BaseModelOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        inputs = {"input_ids": input_ids.cpu().long().numpy(), "attention_mask": attention_mask.cpu().long().numpy()}
        hidden_states = tuple(torch.from_numpy(values).to(input_ids.device) for values in self.session.run(None, inputs))
        return BaseModelOutput(last_hidden_state=hidden_states[-1], hidden_states=hidden_states)


def use_onnx_encoder(model: nn.Module, path: str | os.PathLike, threads: int | None = None) -> nn.Module:
    """Replace the model's PyTorch encoder with the ONNX graph at `path` (in place; the model is returned)."""
    coreference_encoder(model)  # refuses other models
    getattr(model, model.base_model_prefix).encoder = OnnxEncoder(path, threads=threads)
    return model
