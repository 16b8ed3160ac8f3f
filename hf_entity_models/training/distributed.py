"""Small helpers for data-parallel runs (``accelerate launch``, ``torchrun``) that the task modules share.

Every process of a data-parallel run executes the same script. These helpers let a function that several processes
call find its share of the work (`process_shard`), combine what the processes computed (`all_reduce_sums`,
`gather_rows`), refuse a launch whose processes are not connected (`check_processes_connected`), and tell the main
process from the others (`is_main_process`). Outside a distributed run they are cheap no-ops: one process, rank 0.

Example:
    >>> rank, world_size = process_rank_and_count()
    >>> (rank, world_size)  # a plain `python` run
    (0, 1)
    >>> list(process_shard(10, rank=1, world_size=3))
    [4, 5, 6]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "all_reduce_sums",
    "check_processes_connected",
    "gather_rows",
    "is_main_process",
    "process_rank_and_count",
    "process_shard",
]


def process_rank_and_count() -> tuple[int, int]:
    """``(rank, world size)`` of the initialised default process group, else ``(0, 1)``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """Whether this process is rank 0 (always True outside a distributed run): the one that saves and reports."""
    return process_rank_and_count()[0] == 0


def process_shard(count: int, rank: int | None = None, world_size: int | None = None) -> range:
    """The contiguous block of ``range(count)`` that one process handles: the first ``count % world_size`` processes
    take one item more. Blocks are in rank order, so concatenating them gives ``range(count)`` back."""
    if rank is None or world_size is None:
        rank, world_size = process_rank_and_count()
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}.")
    base, extra = divmod(count, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


def all_reduce_sums(values: Sequence[float], device: torch.device | str = "cpu") -> list[float]:
    """Sum numbers over all processes (in float64); every process gets the totals. One process: the values.

    `device` must be one the process group's backend reduces on (the model's device: CUDA for NCCL, CPU for gloo).
    """
    if process_rank_and_count()[1] == 1:
        return [float(value) for value in values]
    totals = torch.tensor([float(value) for value in values], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(totals, op=torch.distributed.ReduceOp.SUM)
    return totals.tolist()


def gather_rows(rows: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """Concatenate, in rank order, the rows (dim 0) that each process computed; every process gets the whole.

    The processes may hold different numbers of rows (e.g. `process_shard` blocks); the other dimensions and the
    dtype must agree. The result is on the CPU. One process: `rows` itself (on the CPU).
    """
    if process_rank_and_count()[1] == 1:
        return rows.cpu()
    counts = _gathered(torch.tensor([rows.shape[0]], device=device))
    longest = int(counts.max())
    # all_gather needs one shape on every process: pad to the longest block, then cut the padding away again.
    padded = torch.zeros((longest, *rows.shape[1:]), dtype=rows.dtype, device=device)
    padded[: rows.shape[0]] = rows.to(device)
    blocks = _gathered(padded.unsqueeze(0)).cpu()
    return torch.cat([block[: int(count)] for block, count in zip(blocks, counts.tolist())])


def _gathered(tensor: torch.Tensor) -> torch.Tensor:
    """all_gather of one same-shaped tensor per process, stacked in rank order along a new dim 0."""
    world_size = process_rank_and_count()[1]
    parts = [torch.empty_like(tensor) for _ in range(world_size)]
    torch.distributed.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def check_processes_connected(args: Any) -> None:
    """Refuse N launched processes that would each train alone, all writing the same `output_dir`.

    ``accelerate launch --multi_gpu --num_processes N`` on a machine without GPUs starts N processes; unless the
    `TrainingArguments` have ``use_cpu=True`` (or ``ACCELERATE_USE_CPU=true`` is set) each of them builds its own
    single-process Trainer: N unconnected copies of one training run.

    Raises:
        ValueError: If the launcher started more processes (``WORLD_SIZE``) than the Trainer sees.
    """
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and args.world_size == 1:
        raise ValueError(
            f"{launched} processes were launched but the Trainer sees one: each would train alone and write the "
            "same output_dir. On a machine without GPUs pass use_cpu=True (or set ACCELERATE_USE_CPU=true) so the "
            "processes join one gloo group."
        )
