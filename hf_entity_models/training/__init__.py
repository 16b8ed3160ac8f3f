"""Training helpers: Trainer callbacks and optimizers."""

from .callbacks import EpochTimerCallback, GumbelTemperatureCallback
from .optimizers import two_rate_adamw

__all__ = ["EpochTimerCallback", "GumbelTemperatureCallback", "two_rate_adamw"]
