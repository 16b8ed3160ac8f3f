"""Argument checks shared by the entity language-modeling modules."""

from __future__ import annotations

import numbers
from typing import Any


def is_int(value: Any) -> bool:
    """True for an integer (Python, numpy or other `numbers.Integral`) that is not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
