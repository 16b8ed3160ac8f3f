"""The Referential Reader: a recurrent entity network for anaphora resolution (Liu, Zettlemoyer and Eisenstein, 2019)."""

from . import modeling_refreader
from .configuration_refreader import RefReaderConfig
from .modeling_refreader import *  # noqa: F403  (the names of modeling_refreader.__all__)

__all__ = ["RefReaderConfig", *modeling_refreader.__all__]
