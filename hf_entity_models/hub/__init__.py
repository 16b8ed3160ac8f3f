"""Model cards, portable saving and Hub upload of the package's checkpoints: package code that a checkpoint does not
carry (see `checkpoint_writer`)."""

from .checkpoint_writer import CHECKPOINT_WRITER, CheckpointWriter, card_spec, model_code_files
from .evaluation_results import check_evaluation_results, record_evaluation
from .model_cards import ModelCardSpec, encoder_summary, hub_model_id

__all__ = [
    "CHECKPOINT_WRITER",
    "CheckpointWriter",
    "ModelCardSpec",
    "card_spec",
    "check_evaluation_results",
    "encoder_summary",
    "hub_model_id",
    "model_code_files",
    "record_evaluation",
]
