"""What the cards of the two coreference memory models (PeTra, the Referential Reader) say alike: the usage example,
the pipeline calls, the limitation of whole-document training, and why their cards carry no Hub pipeline tag."""

from typing import Any

# The coreference example of the usage section: a pronoun and two candidate names, as character offsets.
EXAMPLE_TEXT = "Zoe met Maggie in Paris. She was happy."
EXAMPLE_QUERY = "pronoun=(25, 28), candidates=[(0, 3), (8, 14)]"

# The Hub has no coreference pipeline, and its widgets and inference service do not run a pipeline shipped as code
# with a checkpoint: any tag (`token-classification` was used before) would promise a widget that fails on these
# models. Without a tag the Hub shows none; the card's usage section names the pipeline to use.
COREFERENCE_PIPELINE_TAG = None

USAGE_NOTE = (
    "Character offsets in queries and answers index the input string; long documents are read whole (an encoder "
    "reads them in overlapping windows), nothing is truncated."
)

WHOLE_DOCUMENT_LIMITATION = (
    "Trained on whole documents (CoNLL-2012 files such as LitBank), clusters are limited mostly by mention "
    "detection: on held-out LitBank books this model family scores below a rule baseline with its own mentions "
    "(the package's benchmarks/RESULTS.md, \"Coreference on whole documents\")."
)


def pipeline_examples(tracked: str) -> tuple[str, ...]:
    """The calls of the shipped pipeline shown in the card; `tracked` names what the memory tracks ("people")."""
    return (
        f"pipe(\"{EXAMPLE_TEXT}\", {EXAMPLE_QUERY})",
        f"pipe(\"{EXAMPLE_TEXT}\")  # clusters: the {tracked} the memory tracked, with character offsets",
    )


def coreference_usage_with_package(location: str, registered: str) -> str:
    """The usage block of a coreference head with the package installed; `registered` names the model ("PeTra")."""
    return (
        "```python\n"
        f"import hf_entity_models  # registers {registered} with the Auto classes and pipeline(\"coreference\")\n"
        "from transformers import pipeline\n\n"
        f"pipe = pipeline(\"coreference\", model=\"{location}\")\n"
        f"pipe(\"{EXAMPLE_TEXT}\", {EXAMPLE_QUERY})\n"
        f"model = hf_entity_models.AutoModelForCoreference.from_pretrained(\"{location}\")\n```\n"
    )


def whole_document_limitations(config: Any) -> list[str]:
    """The limitation of a model trained on whole documents (`train_on_conll` sets `new_entity_threshold`)."""
    return [WHOLE_DOCUMENT_LIMITATION] if getattr(config, "new_entity_threshold", None) is not None else []
