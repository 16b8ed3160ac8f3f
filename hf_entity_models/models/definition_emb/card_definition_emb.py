"""What the model card of a DefinitionEMB checkpoint says about the model: overview, configuration table, limits,
citation, usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by the shared
`entity_hub.py`, from `DEFINITION_EMB_MODEL_CARD`. Shipped next to the weights with the other code files.
"""

from hf_entity_models.models._shared.entity_hub import ModelCardSpec, hub_model_id

from .configuration_definition_emb import ENCODER_DECODER, DefinitionEmbConfig

_CITATION = """@misc{zhang2024definitionemb,
  title = {Reconsidering Token Embeddings with the Definitions for Pre-trained Language Models},
  author = {Zhang, Ying and Li, Dongyuan and Okumura, Manabu},
  year = {2024}
}"""


def _base_plm(config: DefinitionEmbConfig) -> str:
    name = config.base_model_name_or_path
    if not name:
        return "not recorded (targets not copied from a named PLM)"
    hub_id = hub_model_id(name)
    return f"[`{hub_id}`](https://huggingface.co/{hub_id})" if hub_id else f"`{name}`"


def _reader_summary(config: DefinitionEmbConfig) -> str:
    reader = config.reader_config
    if config.reader_type == ENCODER_DECODER:
        # BART names its depths encoder_layers / decoder_layers, T5 num_layers / num_decoder_layers.
        encoder_layers = getattr(reader, "encoder_layers", getattr(reader, "num_layers", "?"))
        decoder_layers = getattr(reader, "decoder_layers", getattr(reader, "num_decoder_layers", "?"))
        layers = f"{encoder_layers} + {decoder_layers} layers"
    else:
        layers = f"{getattr(reader, 'num_hidden_layers', '?')} layers"
    return f"{config.reader_type}, `{reader.model_type}`, {layers}, hidden size {config.reader_hidden_size}"


def _overview(config: DefinitionEmbConfig, class_name: str) -> str:
    states = (
        "the decoder's last hidden state at each target position (the source has each corrupted span replaced by one "
        "sentinel, T5-style)"
        if config.reader_type == ENCODER_DECODER
        else "its last hidden state at each corrupted position (BERT-style denoising)"
    )
    return (
        "A DefinitionEMB model (Zhang, Li and Okumura, *Reconsidering Token Embeddings with the Definitions for "
        "Pre-trained Language Models*), packaged with the `hf-entity-models` package. A definition reader, "
        "initialised from a pre-trained language model (PLM), reads a prompt built from a word's dictionary "
        "definition, part of speech and spellings in which the word's tokens are corrupted; a linear map A "
        f"(no bias) turns {states} into a definition embedding e_d(v) of the corrupted token. Training pulls e_d(v) "
        "towards the PLM's own pre-trained embedding e(v), which the checkpoint stores as a frozen buffer "
        "(`target_embeddings`). The definition embeddings can then replace the pre-trained embeddings of rare tokens "
        f"of the PLM. `{class_name}` returns `definition_embeddings` of shape (batch, length, {config.embedding_size})"
        " and, with `labels`, the loss of Eq. 1."
    )


def _config_rows(config: DefinitionEmbConfig, class_name: str) -> list[tuple[str, str]]:
    return [
        ("Reader", _reader_summary(config)),
        ("Base PLM (targets)", _base_plm(config)),
        ("Embedding size H_e", str(config.embedding_size)),
        ("Vocabulary N", str(config.vocab_size)),
        ("Reader input embeddings", "frozen" if config.freeze_reader_embeddings else "trained"),
        ("Loss", "Eq. 1: squared L2 distance between e_d(v) and e(v), averaged per example over its corrupted tokens, "
                 "then over examples"),
    ]


def _limitations(config: DefinitionEmbConfig, datasets: list[str]) -> list[str]:
    return [
        "Choices where the paper is terse: the loss is Eq. 1 on the squared L2 distance summed over the embedding "
        "dimensions (per example: the mean over its corrupted tokens; then the mean over examples with at least one); "
        "encoder-only corruption replaces each target token by the mask token with probability 0.5, by a random "
        "token with 0.25 and keeps it with 0.25; encoder-decoder corruption is T5-style, each span replaced by one "
        "sentinel (`<extra_id_i>` when the tokenizer has sentinels, otherwise its mask token for every span, as for "
        "BART); the reader's input embeddings can be frozen (`freeze_reader_embeddings`), as the paper did for BART.",
        "The reader's pooler (BERT, RoBERTa), which DefinitionEMB never reads, is dropped.",
        "A definition embedding is only as good as the definition: tokens without a definition (punctuation, "
        "fragments) should keep their pre-trained embeddings. The paper replaces only the rarest tokens that "
        "appear in the task data.",
        "The targets are the PLM's pre-trained embeddings: the model reproduces their geometry, including what they "
        "got wrong for tokens the PLM saw rarely.",
    ]


def _usage_with_package(class_name: str, location: str) -> str:
    return (
        "```python\n"
        "import hf_entity_models  # registers DefinitionEMB with the Auto classes\n"
        "from transformers import AutoModel, AutoTokenizer\n"
        "from hf_entity_models.tasks.embeddings.replacement import compute_definition_embeddings\n\n"
        f"model = AutoModel.from_pretrained(\"{location}\")  # {class_name}\n"
        f"tokenizer = AutoTokenizer.from_pretrained(\"{location}\")\n"
        "# definitions: a datasets.Dataset with word, part_of_speech, definition columns\n"
        "embeddings = compute_definition_embeddings(model, tokenizer, definitions)\n```\n"
    )


def _frozen_parameter_count(model) -> int:
    if not model.config.freeze_reader_embeddings:
        return 0
    return model.get_input_embeddings().weight.numel()


DEFINITION_EMB_MODEL_CARD = ModelCardSpec(
    tags=("definition-emb", "token-embeddings", "feature-extraction"),
    pipeline_tag="feature-extraction",
    citation=_CITATION,
    overview=_overview,
    config_rows=_config_rows,
    limitations=_limitations,
    usage_with_package=_usage_with_package,
    usage_note=(
        "The model's inputs are definition prompts whose word tokens are corrupted (encoder-only: one masked token "
        "at a time at inference; encoder-decoder: the word spans replaced by sentinels, `decoder_input_ids` the "
        "target shifted right), as built by `hf_entity_models.tasks.embeddings` (`build_definition_prompt`, "
        "`DefinitionCollator`); `definition_embeddings[b, j]` is the embedding of the token at position j."
    ),
    training_note=(
        "The package trains the reader on WordNet glosses (plus number words) with Adam, learning rate 1e-4 and an "
        "inverse square root schedule, the paper's settings (it used Wiktionary)."
    ),
    frozen_parameter_count=_frozen_parameter_count,
)
