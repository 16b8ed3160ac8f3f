"""What each model's card says about it, by `model_type`."""

from .definition_emb import DEFINITION_EMB_MODEL_CARD
from .forcereader import FORCEREADER_MODEL_CARD
from .gpt2e import GPT2E_MODEL_CARD
from .petra import PETRA_MODEL_CARD
from .refreader import REFREADER_MODEL_CARD

CARD_SPECS = {
    "definition-emb": DEFINITION_EMB_MODEL_CARD,
    "forcereader": FORCEREADER_MODEL_CARD,
    "gpt2e": GPT2E_MODEL_CARD,
    "petra": PETRA_MODEL_CARD,
    "refreader": REFREADER_MODEL_CARD,
}

__all__ = ["CARD_SPECS"]
