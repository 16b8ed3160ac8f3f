"""Model architectures: one self-contained folder per model (what a checkpoint needs to run)."""
