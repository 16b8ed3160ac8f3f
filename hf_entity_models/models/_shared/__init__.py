"""Code that several model folders share, written once. Saving a model copies what its code imports from here into
the checkpoint folder (see `portable_code`), so checkpoints stay self-contained."""
