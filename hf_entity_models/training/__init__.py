"""Training helpers: Trainer callbacks."""

from .callbacks import EpochTimerCallback, GumbelTemperatureCallback

__all__ = ["EpochTimerCallback", "GumbelTemperatureCallback"]
