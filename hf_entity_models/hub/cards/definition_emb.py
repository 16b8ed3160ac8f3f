"""What the model card of a DefinitionEMB checkpoint says about the model: overview, configuration table, limits,
citation, usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by `hub/model_cards.py`;
the package writes the card when it saves or pushes a model (the checkpoint does not carry this file).
"""

from ..model_cards import ModelCardSpec, hub_model_id

from ...models.definition_emb.configuration_definition_emb import ENCODER_DECODER, DefinitionEmbConfig

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


def _readout_sentence(config: DefinitionEmbConfig) -> str:
    if config.reader_type == ENCODER_DECODER:
        return (
            "the decoder's last hidden state at each target position (the source has each word slot replaced by one "
            "sentinel, T5-style)"
        )
    if config.readout == "pooled-definition":
        return (
            "the mean of its last hidden states over the whole prompt (the sentence embedding of an encoder trained "
            "without a masked-LM head; one vector per definition, so it rebuilds words that are a single token)"
        )
    return "its last hidden state at each word-slot token (BERT-style denoising)"


def _slots_sentence(config: DefinitionEmbConfig) -> str:
    if config.word_slots == "paper":
        return (
            "the four word slots of the paper's Figure 17 (word, bpe form, capitalised, upper case), corrupted 50% "
            "mask / 25% random / 25% kept in training and masked one token at a time when read (the other slots stay "
            "visible)"
        )
    return (
        "only the word slots that hold a form of the word distinct for the tokenizer (an uncased tokenizer's "
        "capitalised and upper-case copies and a WordPiece bpe form spelled in `##` pieces are dropped), every slot "
        "token masked, in training and when read, so the reader never sees the word it rebuilds"
    )


def _overview(config: DefinitionEmbConfig, class_name: str) -> str:
    loss = "1 - cosine (scale-free)" if config.loss == "cosine" else "Eq. 1's squared L2 distance"
    return (
        "A DefinitionEMB model (Zhang, Li and Okumura, *Reconsidering Token Embeddings with the Definitions for "
        "Pre-trained Language Models*), packaged with the `hf-entity-models` package. A definition reader, "
        "initialised from a pre-trained language model (PLM), reads a prompt built from a word's dictionary "
        f"definition and part of speech, with {_slots_sentence(config)}; a linear map A (no bias) turns "
        f"{_readout_sentence(config)} into a definition embedding e_d(v). Training pulls e_d(v) towards the PLM's own "
        f"pre-trained embedding e(v) ({loss}), stored in the checkpoint as a frozen buffer (`target_embeddings`). The "
        "definition embeddings can then replace the pre-trained embeddings of rare tokens of the PLM. "
        f"`{class_name}` returns `definition_embeddings` of shape (batch, length, {config.embedding_size}) and, with "
        "`labels`, the loss."
    )


def _config_rows(config: DefinitionEmbConfig, class_name: str) -> list[tuple[str, str]]:
    paper = config.word_slots == "paper" and config.readout == "mask-slot" and config.loss == "mse"
    return [
        ("Reader", _reader_summary(config)),
        ("Base PLM (targets)", _base_plm(config)),
        ("Embedding size H_e", str(config.embedding_size)),
        ("Vocabulary N", str(config.vocab_size)),
        ("Reader input embeddings", "frozen" if config.freeze_reader_embeddings else "trained"),
        ("Word slots", f"`{config.word_slots}`"),
        ("Readout", f"`{config.readout}`"),
        ("Loss", "cosine: 1 - cos(e_d(v), e(v))" if config.loss == "cosine" else
                 "Eq. 1: squared L2 distance between e_d(v) and e(v)"),
        ("Settings", _settings_name(config, paper)),
    ]


def _settings_name(config: DefinitionEmbConfig, paper: bool) -> str:
    if paper:
        return "the paper's (Section 5 as written)"
    if config.word_slots == "distinct" and config.loss == "cosine":
        return "the package's defaults (distinct slots, all masked; cosine), not the paper's: see Limitations"
    return "a mix of the paper's and the package's settings: see Limitations"


def _limitations(config: DefinitionEmbConfig, datasets: list[str]) -> list[str]:
    return [
        "Defaults and the paper: the paper's reading (`word_slots=\"paper\"`, `readout=\"mask-slot\"`, "
        "`loss=\"mse\"`; `hf-entity definitions --preset paper`) lets an encoder-only reader copy the word from "
        "the slots left visible (with an uncased tokenizer three slots hold the same token), pulls uncertain "
        "predictions to the mean embedding under MSE (predicted rows far shorter than real ones), and reads the "
        "state at a mask slot, which says little about the masked token in an encoder trained without a masked-LM "
        "head (a sentence-embedding model). The defaults hide every slot, use a scale-free loss (rows are written "
        "at their original norms), and choose the readout by the model's kind: `mask-slot` for masked-LM and "
        "encoder-decoder checkpoints (or when no architecture is recorded), `pooled-definition` for encoders "
        "without a masked-LM head. Measured figures: benchmarks/RESULTS.md of the package.",
        "Choices where the paper is terse: per example, the loss is the mean over its labelled tokens, then the mean "
        "over examples with at least one; encoder-decoder corruption is T5-style, each span replaced by one sentinel "
        "(`<extra_id_i>` when the tokenizer has sentinels, otherwise its mask token for every span, as for BART); "
        "the reader's input embeddings can be frozen (`freeze_reader_embeddings`), as the paper did for BART.",
        "The reader's pooler (BERT, RoBERTa) is dropped: the pooled-definition readout is the mean of the last "
        "hidden states (the sentence-transformers pooling of MiniLM), not the [CLS] pooler.",
        "A definition embedding is only as good as the definition: tokens without a definition of their own "
        "(punctuation, word pieces) keep their pre-trained embeddings. The replacement writes only the rarest tokens "
        "that appear in the task data.",
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
        "The model's inputs are definition prompts whose word tokens are hidden (encoder-only: every slot masked, or "
        "with the paper's settings one masked token at a time; encoder-decoder: the word spans replaced by "
        "sentinels, `decoder_input_ids` the target shifted right), as built by `hf_entity_models.tasks.embeddings` "
        "(`build_definition_prompt` with the config's `word_slots`, `DefinitionCollator`); "
        "`definition_embeddings[b, j]` is the embedding of the token at position j."
    ),
    training_note=(
        "The package trains the reader on WordNet glosses (plus number words) with Adam, learning rate 1e-4 and an "
        "inverse square root schedule, the paper's settings (it used Wiktionary); with the default settings A starts "
        "from a ridge least-squares fit on 4,096 prompts (`fit_projection_by_least_squares`)."
    ),
    frozen_parameter_count=_frozen_parameter_count,
)
