"""What the model card of a Referential Reader checkpoint says about the model: overview, configuration table,
limits, citation, usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by `hub/model_cards.py`;
the package writes the card when it saves or pushes a model (the checkpoint does not carry this file).
"""

from transformers import PreTrainedModel

from ..model_cards import ModelCardSpec, encoder_summary

from ...models.refreader.configuration_refreader import RefReaderConfig
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

_CITATION = """@inproceedings{liu2019referential,
  title = {The Referential Reader: A Recurrent Entity Network for Anaphora Resolution},
  author = {Liu, Fei and Zettlemoyer, Luke and Eisenstein, Jacob},
  booktitle = {Proceedings of ACL},
  year = {2019}
}"""

_HEADS = {
    "RefReaderForCoreference": (
        "This checkpoint has the coreference head: for a pronoun and candidate names it returns their link "
        "probability (Eq. 5 of the paper, maximised over the token pairs of the two spans) and links a candidate "
        "when that probability reaches the decision threshold."
    ),
    "RefReaderForCausalLM": (
        "This checkpoint is the language model (section 2.4): it predicts the next word from the memory-gated GRU "
        "state, and its memory is learned without coreference labels. Load it into `RefReaderForCoreference` to "
        "train or evaluate coreference."
    ),
}


def _overview(config: RefReaderConfig, class_name: str) -> str:
    head = _HEADS.get(class_name, "This checkpoint is the bare reader (no head): it returns the memory log.")
    if is_document_mode(config):
        head = document_mode_overview(config, "by the reader's gated update, a GRU cell over the entity and the mention")
    mode = (
        "reads the features of a frozen pretrained encoder (so it resolves references left to right, but its "
        "inputs have seen the whole text)"
        if config.uses_encoder
        else "is purely incremental: it reads its own word embeddings strictly left to right"
    )
    return (
        "A [Referential Reader](https://aclanthology.org/P19-1593/) (Liu, Zettlemoyer and Eisenstein, 2019, *The "
        "Referential Reader: A Recurrent Entity Network for Anaphora Resolution*), packaged with the "
        "`hf-entity-models` package. The reader keeps a memory of a few cells (key, value, salience) next to a GRU; "
        "at every token, gates decide whether the token mentions an entity, whether it refers to one already in "
        "memory (the token updates that cell) or introduces a new one (it overwrites the least salient cell). "
        f"Coreference links between tokens follow from those gates. This checkpoint {mode}. {head}"
    )


def _config_rows(config: RefReaderConfig, class_name: str) -> list[tuple[str, str]]:
    if config.uses_encoder:
        name, size = encoder_summary(config.encoder_config).split(", ", 1)
        inputs = [
            ("Inputs", f"{name} (frozen), {size}"),
            ("Encoder layers read", f"`{list(config.encoder_layers)}` (concatenated)"),
        ]
        if is_document_mode(config):
            return inputs + document_mode_config_rows(config)
    else:
        frozen = ", frozen" if config.freeze_embeddings else ""
        inputs = [("Inputs", f"own word embeddings, {config.vocab_size} words x {config.embedding_size}{frozen}")]
    return [
        *inputs,
        ("Hidden / value size", str(config.hidden_size)),
        ("Key size", str(config.key_size)),
        ("Memory cells", str(config.num_memory_cells)),
        ("Salience half-lives (entity / other)", f"{config.entity_half_life:g} / {config.non_entity_half_life:g}"),
        ("Decision threshold", f"{float(config.coref_threshold):g}"),
    ]


def _limitations(config: RefReaderConfig, datasets: list[str]) -> list[str]:
    if is_document_mode(config):
        return whole_document_limitations(config)
    limits = [
        f"The memory has {config.num_memory_cells} cells: when more entities are active, the least salient one is "
        "overwritten and forgotten (the paper finds 2 cells work best on GAP).",
        "GAP supervision covers one pronoun and two names per text: links between other mentions are learned only "
        "indirectly.",
    ]
    if config.uses_encoder:
        limits.append("With encoder features the reader is not purely incremental: the encoder sees the whole text.")
    return limits + whole_document_limitations(config)


def _usage_with_package(class_name: str, location: str) -> str:
    if class_name == "RefReaderForCoreference":
        return coreference_usage_with_package(location, "the reader")
    if class_name == "RefReaderForCausalLM":
        return (
            "```python\nimport hf_entity_models\nfrom transformers import AutoModelForCausalLM\n\n"
            f"model = AutoModelForCausalLM.from_pretrained(\"{location}\")\n"
            f"coref = hf_entity_models.RefReaderForCoreference.from_pretrained(\"{location}\")  # LM pre-training -> coref\n```\n"
        )
    return (
        "```python\nimport hf_entity_models\nfrom transformers import AutoModel\n\n"
        f"model = AutoModel.from_pretrained(\"{location}\")  # {class_name}\n```\n"
    )


def _frozen_parameter_count(model: PreTrainedModel) -> int:
    """The encoder (always frozen) and, with `freeze_embeddings`, the word embeddings."""
    reader = getattr(model, model.base_model_prefix, model)
    frozen = sum(parameter.numel() for parameter in reader.encoder.parameters()) if reader.encoder is not None else 0
    if reader.embeddings is not None and model.config.freeze_embeddings:
        frozen += reader.embeddings.weight.numel()
    return frozen


REFREADER_MODEL_CARD = ModelCardSpec(
    tags=("refreader", "coreference", "entity-tracking"),
    pipeline_tag=COREFERENCE_PIPELINE_TAG,
    citation=_CITATION,
    overview=_overview,
    config_rows=_config_rows,
    limitations=_limitations,
    usage_with_package=_usage_with_package,
    pipeline_examples=pipeline_examples("entities"),
    usage_note=USAGE_NOTE,
    training_note=(
        "The hf-entity-models recipe (`hf_entity_models.tasks.coreference.train_on_gap`) trains on GAP-format rows "
        "with the authors' optimiser settings (Adam at 1e-3, constant learning rate, no gradient clipping, Gumbel "
        "temperature halved every 10 epochs, early stopping on validation F1) and chooses the decision threshold on "
        "the validation rows the results above were measured on (GAP development and validation in the paper's "
        "setup). Language-model pre-training uses the same optimiser with early stopping on validation perplexity "
        "(`hf_entity_models.tasks.language_modeling.refreader_pretraining`)."
    ),
    frozen_parameter_count=_frozen_parameter_count,
)
