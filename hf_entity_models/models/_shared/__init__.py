"""Modeling code that several model folders share, written once. Saving a model copies what its code imports from
here into the checkpoint folder (see `hf_entity_models.hub.portable_code`), so checkpoints stay self-contained.

Like everything under `models/`, this code imports nothing from the rest of the package. What the package adds to it
(saving and pushing through the package's checkpoint writer, one-line config errors) the package installs from above,
as `checkpoints` is imported (see `hf_entity_models._registration`).
"""
