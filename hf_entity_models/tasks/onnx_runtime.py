"""What the ONNX exports of the package share: the optional dependencies of the [onnx] extra imported on use, an
onnxruntime session, and a quiet exporter."""

from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

INSTALL_HINT = 'install the optional dependencies: pip install "hf-entity-models[onnx]"'


def require_onnx_module(module: str) -> Any:
    """Import an optional dependency of the [onnx] extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"ONNX export needs the {module} package, which is not installed: {INSTALL_HINT}.") from error


def onnxruntime_session(path: str | os.PathLike, threads: int | None = None, providers: Sequence[str] | None = None
                        ) -> Any:
    """An onnxruntime inference session of the graph at `path` (CPU unless `providers` say otherwise)."""
    ort = require_onnx_module("onnxruntime")
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=list(providers or ["CPUExecutionProvider"]))


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Without the exporter's notes that say nothing about this graph: renamed axes, deprecated pytree classes, and
    the torchvision operators it skips when torchvision is not installed."""
    import logging

    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (UserWarning, FutureWarning, DeprecationWarning))
            yield
    finally:
        registration.setLevel(level)
