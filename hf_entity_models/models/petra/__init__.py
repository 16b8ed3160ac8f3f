"""PeTra: a sparsely supervised memory model for people tracking (Toshniwal et al., 2020)."""

from . import modeling_petra
from .configuration_petra import PetraConfig
from .modeling_petra import *  # noqa: F403  (the names of modeling_petra.__all__)

__all__ = ["PetraConfig", *modeling_petra.__all__]
