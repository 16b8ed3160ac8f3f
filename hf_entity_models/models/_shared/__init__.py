"""Modeling code that several model folders share, written once. Saving a model copies what its code imports from
here into the checkpoint folder (see `hf_entity_models.hub.portable_code`), so checkpoints stay self-contained.

This file is package code (a checkpoint never holds it): it lets a model imported straight from its folder
(`from hf_entity_models.models.petra import PetraForCoreference`) save and push through the package, which
registers itself with transformers first (see `hf_entity_models._registration`).
"""

from typing import Any

from .checkpoints import CheckpointMixin


class _PackageCheckpointWriter:
    """Registers the package on first use, then hands over to `hf_entity_models.hub.CHECKPOINT_WRITER`."""

    def __getattr__(self, name: str) -> Any:
        from ..._registration import ensure_registered
        from ...hub import CHECKPOINT_WRITER

        ensure_registered()  # auto_map and the pipelines a checkpoint declares come from the registration
        return getattr(CHECKPOINT_WRITER, name)


if CheckpointMixin._checkpoint_writer is None:
    CheckpointMixin._checkpoint_writer = _PackageCheckpointWriter()
