"""Modeling code that several model folders share, written once. Saving a model copies what its code imports from
here into the checkpoint folder (see `hf_entity_models.hub.portable_code`), so checkpoints stay self-contained.

This file is package code (a checkpoint never holds it): it installs what the package adds to the shared code, for
models imported straight from their folder (`from hf_entity_models.models.petra import PetraForCoreference`) too:
saving and pushing through the package, which registers itself with transformers first (see
`hf_entity_models._registration`), and one-line config errors (`hf_entity_models.config_errors`).
"""

from typing import Any

from ...config_errors import CONFIG_ERROR_EXPLAINER
from .checkpoints import CheckpointConfigMixin, CheckpointMixin


class _PackageCheckpointWriter:
    """Registers the package on first use, then hands over to `hf_entity_models.hub.CHECKPOINT_WRITER`."""

    def __getattr__(self, name: str) -> Any:
        from ..._registration import ensure_registered
        from ...hub import CHECKPOINT_WRITER

        ensure_registered()  # auto_map and the pipelines a checkpoint declares come from the registration
        return getattr(CHECKPOINT_WRITER, name)


if CheckpointMixin._checkpoint_writer is None:
    CheckpointMixin._checkpoint_writer = _PackageCheckpointWriter()
CheckpointConfigMixin._error_explainer = CONFIG_ERROR_EXPLAINER
