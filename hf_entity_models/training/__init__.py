"""Training helpers: Trainer callbacks."""

from .callbacks import GumbelTemperatureCallback

__all__ = ["GumbelTemperatureCallback"]
