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


def pipeline_examples(tracked: str):
    """The calls of the shipped pipeline shown in a card (`config -> lines`); `tracked` names what the token
    memory tracks ("people"). A document-mode checkpoint answers with span clusters and takes no query."""

    def examples(config: Any) -> tuple[str, ...]:
        if is_document_mode(config):
            return (
                f"pipe(\"{EXAMPLE_TEXT}\")  # span clusters with character offsets, nested mentions included",
                "pipe(open(\"book.txt\").read(), span_threshold=0.5)  # a whole book; fewer, surer mentions",
            )
        return (
            f"pipe(\"{EXAMPLE_TEXT}\", {EXAMPLE_QUERY})",
            f"pipe(\"{EXAMPLE_TEXT}\")  # clusters: the {tracked} the memory tracked, with character offsets",
        )

    return examples


def is_document_mode(config: Any) -> bool:
    return getattr(config, "coreference_mode", "tokens") == "document"


def document_mode_overview(config: Any, update: str) -> str:
    """The card's paragraph on a document-mode checkpoint; `update` says how this model updates an entity."""
    encoder = "fine-tuned with the heads" if not getattr(config, "freeze_encoder", True) else "frozen"
    return (
        "This checkpoint is in **document mode** (`coreference_mode=\"document\"`), the direction the PeTra authors "
        "took for long documents (Toshniwal et al., EMNLP 2020 and CRAC 2021): the encoder (" + encoder + ") reads the "
        "document in overlapping windows, a BiLSTM reads its word states, every span of up to "
        f"{config.max_span_width} words inside a sentence is scored as a mention, and the proposed mentions, in text "
        "order, are clustered by an unbounded memory of entities: each mention joins the best-scoring entity "
        f"(which is then updated {update}) or starts a new one. It returns span clusters, nested mentions included; "
        "the paper's token memory is not used."
    )


def document_mode_config_rows(config: Any) -> list[tuple[str, str]]:
    return [
        ("Mode", "`document`: span mentions and a memory of entities"),
        ("Longest mention", f"{config.max_span_width} words"),
        ("Word state / entity size", str(config.document_hidden_size)),
        ("Entity update", f"`{config.entity_update}`"),
        ("Mention threshold (logit)", f"{float(config.span_threshold):g}, at most {config.max_mentions_per_word:g} "
         "mentions per word"),
        ("Mention loss weight", f"{float(config.span_loss_weight):g}"),
    ]


DOCUMENT_MODE_LIMITATIONS = (
    "Words and sentences of raw text are found by simple rules (letters and digits with inner apostrophes, "
    "punctuation marks; sentence ends at `.`, `!`, `?` and blank lines); a mention never crosses a sentence end, so "
    "a wrongly split sentence can cut one.",
    "Trained on LitBank-style annotation (literary English, all entity types, singletons and nested mentions "
    "marked); other guidelines (e.g. OntoNotes, which marks no singletons) score differently.",
    "Clustering is greedy and left to right: a mention is never moved to another entity once joined.",
)


def coreference_usage_with_package(location: str, registered: str) -> str:
    """The usage block of a coreference head with the package installed; `registered` names the model ("PeTra")."""
    return (
        "```python\n"
        f"import hf_entity_models  # registers {registered} with the Auto classes and pipeline(\"coreference\")\n"
        "from transformers import pipeline\n\n"
        f"pipe = pipeline(\"coreference\", model=\"{location}\")\n"
        f"pipe(\"{EXAMPLE_TEXT}\")  # the entities and their mentions, with character offsets\n"
        f"model = hf_entity_models.AutoModelForCoreference.from_pretrained(\"{location}\")\n```\n"
    )


def whole_document_limitations(config: Any) -> list[str]:
    """The limitations of a model trained on whole documents: the token mode's (`train_on_conll` sets
    `new_entity_threshold`), or the document mode's."""
    if is_document_mode(config):
        return list(DOCUMENT_MODE_LIMITATIONS)
    return [WHOLE_DOCUMENT_LIMITATION] if getattr(config, "new_entity_threshold", None) is not None else []
