"""Language-modeling metrics."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["perplexity_from_loss"]


def perplexity_from_loss(mean_loss: Any) -> float:
    """Perplexity ``exp(mean_loss)`` from a mean token-level cross-entropy in nats (e.g. Trainer's ``eval_loss``).

    Args:
        mean_loss: A finite, non-negative number: a Python/NumPy scalar or a one-element tensor.

    Returns:
        The perplexity; ``inf`` if ``exp`` overflows (a loss above ~709 nats).

    Raises:
        TypeError: If ``mean_loss`` is not a number.
        ValueError: If it is NaN, infinite, or negative (a cross-entropy never is).

    Example:
        >>> perplexity_from_loss(0.0)
        1.0
        >>> round(perplexity_from_loss(math.log(50.0)), 6)
        50.0
    """
    if not isinstance(mean_loss, numbers.Real) and hasattr(mean_loss, "item"):
        try:  # a one-element tensor or array
            mean_loss = mean_loss.item()
        except (ValueError, RuntimeError) as error:
            raise TypeError(
                f"mean_loss must be a single number, got a {type(mean_loss).__name__} of many: {error}"
            ) from error
    if isinstance(mean_loss, bool) or not isinstance(mean_loss, numbers.Real):
        raise TypeError(f"mean_loss must be a number (a mean cross-entropy in nats), got {type(mean_loss).__name__}.")
    value = float(mean_loss)
    if not math.isfinite(value):
        raise ValueError(
            f"mean_loss is {value}: the loss diverged or was averaged over zero tokens, so there is no perplexity. "
            "Check the learning rate and that the labels are not all -100."
        )
    if value < 0:
        raise ValueError(f"mean_loss is {value}, but a cross-entropy is never negative; pass the mean loss in nats.")
    try:
        return math.exp(value)
    except OverflowError:
        return math.inf
