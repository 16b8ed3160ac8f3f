"""Trainer callbacks shared by the memory models."""

import time

from transformers import TrainerCallback
from transformers.utils import logging

logger = logging.get_logger(__name__)


class GumbelTemperatureCallback(TrainerCallback):
    """Anneal the Gumbel-softmax temperature of the overwrite operation: halve it every `halve_every` epochs.

    PeTra (section 3.3) and the Referential Reader start at tau = 1 and halve it every 10 epochs. The temperature
    is a runtime attribute of the model (set through its `set_gumbel_temperature`), not a config field, so a
    saved checkpoint keeps its initial temperature and resumed training recomputes the schedule from the epoch.

    The temperature of the 0-based epoch `e` is `initial * 0.5 ** ((e + epoch_offset) // halve_every)`. The default
    `epoch_offset=0` trains epochs 1-10 (counting from 1) at tau = 1 and halves at epoch 11, as the Referential
    Reader's code does (`0.5 ** ((epoch - 1) // 10)`). PeTra's authors halve at the start of epoch 10 counting
    from 1 (epochs 1-9 at tau = 1): pass `epoch_offset=1` for their schedule (the GAP ablation kept 0).

    Example:

    ```python
    >>> from transformers import Trainer
    >>> trainer = Trainer(model=model, args=args, callbacks=[GumbelTemperatureCallback()])  # doctest: +SKIP

    ```
    """

    def __init__(self, halve_every: int = 10, initial_temperature: float | None = None, epoch_offset: int = 0):
        if halve_every < 1:
            raise ValueError(f"halve_every must be a positive number of epochs, got {halve_every}.")
        if epoch_offset < 0:
            raise ValueError(f"epoch_offset must be >= 0, got {epoch_offset}.")
        if initial_temperature is not None and not initial_temperature > 0:
            raise ValueError(f"initial_temperature must be > 0, got {initial_temperature}.")
        self.halve_every = halve_every
        self.initial_temperature = initial_temperature
        self.epoch_offset = int(epoch_offset)

    def temperature_at(self, epoch: int, initial_temperature: float) -> float:
        """Temperature for a 0-based epoch index."""
        return initial_temperature * 0.5 ** ((epoch + self.epoch_offset) // self.halve_every)

    def on_epoch_begin(self, args, state, control, model=None, **kwargs):
        if model is None or not hasattr(model, "set_gumbel_temperature"):
            raise TypeError(
                "GumbelTemperatureCallback needs a model with `set_gumbel_temperature` (PeTra, Referential Reader)."
            )
        initial = self.initial_temperature
        if initial is None:
            initial = float(model.config.gumbel_temperature)
        epoch = int(round(state.epoch or 0))
        temperature = self.temperature_at(epoch, initial)
        model.set_gumbel_temperature(temperature)
        logger.info(f"Epoch {epoch}: Gumbel temperature {temperature:g}")
        return control


class EpochTimerCallback(TrainerCallback):
    """Record the wall-clock seconds of every training epoch (evaluation excluded) in `epoch_seconds`."""

    def __init__(self):
        self.epoch_seconds: list[float] = []
        self._started: float | None = None

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._started = time.perf_counter()
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        # on_epoch_end runs before the epoch's evaluation, so evaluation time is not counted.
        if self._started is not None:
            self.epoch_seconds.append(time.perf_counter() - self._started)
            self._started = None
        return control
