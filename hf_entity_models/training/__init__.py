"""Training helpers: Trainer callbacks, optimizers and what data-parallel runs share."""

from .callbacks import EpochTimerCallback, GumbelTemperatureCallback
from .distributed import (
    all_reduce_sums,
    check_processes_connected,
    gather_rows,
    is_main_process,
    process_rank_and_count,
    process_shard,
)
from .optimizers import two_rate_adamw

__all__ = [
    "EpochTimerCallback",
    "GumbelTemperatureCallback",
    "all_reduce_sums",
    "check_processes_connected",
    "gather_rows",
    "is_main_process",
    "process_rank_and_count",
    "process_shard",
    "two_rate_adamw",
]
