"""What the model card of a PeTra checkpoint says about PeTra: overview, configuration table, limits, citation, usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by `hub/model_cards.py`;
the package writes the card when it saves or pushes a model (the checkpoint does not carry this file).
"""

from transformers import PreTrainedModel

from ..model_cards import ModelCardSpec, encoder_summary

from ...models.petra.configuration_petra import PetraConfig
from .coreference import (
    COREFERENCE_PIPELINE_TAG,
    USAGE_NOTE,
    coreference_usage_with_package,
    document_mode_config_rows,
    document_mode_overview,
    is_document_mode,
    pipeline_examples,
    whole_document_limitations,
)

_CITATION = """@inproceedings{toshniwal2020petra,
  title = {PeTra: A Sparsely Supervised Memory Model for People Tracking},
  author = {Toshniwal, Shubham and Ettinger, Allyson and Gimpel, Kevin and Livescu, Karen},
  booktitle = {Proceedings of ACL},
  year = {2020}
}"""


def _overview(config: PetraConfig, class_name: str) -> str:
    head = (
        "This checkpoint has the coreference head: for a pronoun and candidate names it returns their link "
        "probability (Eq. 9 of the paper, maximised over the token pairs of the two spans) and links a candidate "
        "when that probability reaches the decision threshold."
        if class_name == "PetraForCoreference"
        else "This checkpoint is the bare memory model (no coreference head): it returns the memory log."
    )
    if is_document_mode(config):
        head = document_mode_overview(config, "by a tanh-MLP of the entity and the mention, PeTra's coreference update")
    return (
        "A [PeTra](https://aclanthology.org/2020.acl-main.481/) model (Toshniwal, Ettinger, Gimpel and Livescu, "
        "2020, *PeTra: A Sparsely Supervised Memory Model for People Tracking*), packaged with "
        "the `hf-entity-models` package. PeTra reads a document left "
        "to right with a pretrained encoder and a GRU, and keeps a memory of a few cells: at every token it "
        "decides whether the token mentions a person, and whether that person is new (the token overwrites the "
        "least used cell) or already tracked (the token updates that cell). Coreference links between tokens "
        f"follow from those decisions. {head}"
    )


def _config_rows(config: PetraConfig, class_name: str) -> list[tuple[str, str]]:
    frozen = "frozen" if config.freeze_encoder else "fine-tuned"
    if is_document_mode(config):
        encoder = [("Encoder", f"{encoder_summary(config.encoder_config)}, {frozen}"),
                   ("Encoder layers read", f"`{list(config.encoder_layers)}` (concatenated)")]
        return encoder + document_mode_config_rows(config)
    return [
        ("Encoder", f"{encoder_summary(config.encoder_config)}, {frozen}"),
        ("Encoder layers read", f"`{list(config.encoder_layers)}` (concatenated)"),
        ("GRU / memory cell size", str(config.hidden_size)),
        ("Memory cells", str(config.num_memory_cells)),
        ("Memory variant", f"`{config.memory_variant}`"),
        ("Usage decay", str(config.usage_decay)),
        ("Decision threshold", f"{float(config.coref_threshold):g}"),
        (
            "Choices where the paper and the authors' code differ",
            f"coref loss `{config.coref_loss}`, MLP3 `{config.coref_update_mlp}`, overwrite ties "
            f"`{config.overwrite_tie_breaking}`, entity loss `{config.entity_loss_reduction}`, init "
            f"`{config.linear_init}`",
        ),
    ]


def _limitations(config: PetraConfig, datasets: list[str]) -> list[str]:
    if is_document_mode(config):
        return whole_document_limitations(config)
    limits = [
        f"The memory has {config.num_memory_cells} cells: a document that mentions more people makes PeTra "
        "overwrite cells, and the overwritten people are forgotten.",
        "GAP supervision is sparse: the model is only trained to link pronouns to names, so name-to-name chains "
        "and entities that are not people are tracked less reliably (paper section 4.4).",
        "The people-counting evaluation of the paper is not part of this checkpoint's results; its annotations are "
        "published by the authors (data/num_people.tsv in github.com/shtoshni92/petra) and can be read with "
        "`hf_entity_models.tasks.coreference.metrics.read_people_counts`.",
    ]
    return limits + whole_document_limitations(config)


def _usage_with_package(class_name: str, location: str) -> str:
    if class_name == "PetraForCoreference":
        return coreference_usage_with_package(location, "PeTra")
    return (
        "```python\nimport hf_entity_models\nfrom transformers import AutoModel\n\n"
        f"model = AutoModel.from_pretrained(\"{location}\")  # {class_name}\n```\n"
    )


def _frozen_parameter_count(model: PreTrainedModel) -> int:
    """The encoder's parameters when the config freezes it (the paper's setting), else none."""
    if not model.config.freeze_encoder:
        return 0
    memory_model = getattr(model, model.base_model_prefix, model)
    return sum(parameter.numel() for parameter in memory_model.encoder.parameters())


PETRA_MODEL_CARD = ModelCardSpec(
    tags=("petra", "coreference", "entity-tracking"),
    pipeline_tag=COREFERENCE_PIPELINE_TAG,
    citation=_CITATION,
    overview=_overview,
    config_rows=_config_rows,
    limitations=_limitations,
    usage_with_package=_usage_with_package,
    pipeline_examples=pipeline_examples("people"),
    usage_note=USAGE_NOTE,
    training_note=(
        "The hf-entity-models recipe (`hf_entity_models.tasks.coreference.train_on_gap`) trains on GAP-format rows "
        "and chooses the decision threshold on the validation rows the results above were measured on (GAP "
        "development and validation in the paper's setup)."
    ),
    frozen_parameter_count=_frozen_parameter_count,
)
