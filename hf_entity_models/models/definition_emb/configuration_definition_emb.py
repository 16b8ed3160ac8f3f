"""DefinitionEMB model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from hf_entity_models.models._shared.encoders import build_encoder_config
from hf_entity_models.models._shared.checkpoints import WIDTH_LIMIT, CheckpointConfigMixin, check_size_limits
from hf_entity_models.models._shared.checkpoints import transformer_parameter_estimate

ENCODER_ONLY = "encoder-only"
ENCODER_DECODER = "encoder-decoder"
READER_TYPES = (ENCODER_ONLY, ENCODER_DECODER)
# The paper's encoder-only PLM (RoBERTa-base); the reader of a config built without `reader_config`.
DEFAULT_READER_MODEL_TYPE = "roberta"

MASK_SLOT = "mask-slot"
POOLED_DEFINITION = "pooled-definition"
READOUTS = (MASK_SLOT, POOLED_DEFINITION)
COSINE = "cosine"
MSE = "mse"
LOSSES = (COSINE, MSE)
DISTINCT_SLOTS = "distinct"
PAPER_SLOTS = "paper"
WORD_SLOTS = (DISTINCT_SLOTS, PAPER_SLOTS)
# The paper's reading (Section 5): four word slots corrupted 50/25/25, the hidden state at the corrupted slot, MSE.
PAPER_SETTINGS = {"word_slots": PAPER_SLOTS, "readout": MASK_SLOT, "loss": MSE}
# Architectures whose checkpoints carry a masked-LM (or denoising) head: their state at a mask slot is trained to
# name the masked token, so the paper's mask-slot readout fits them.
# ELECTRA's ForPreTraining is a replaced-token discriminator without one; BERT's has it.
_MASKED_LM_ARCHITECTURE_MARKERS = ("MaskedLM", "BertForPreTraining", "LMHead", "ConditionalGeneration")


@strict
class DefinitionEmbConfig(CheckpointConfigMixin, PreTrainedConfig):
    r"""
    Configuration of a DefinitionEMB model (Zhang, Li and Okumura, "Reconsidering Token Embeddings with the
    Definitions for Pre-trained Language Models"): a definition reader g, initialised from a pre-trained language
    model (PLM), reads a prompt built from a word's dictionary definition in which the word's tokens are corrupted,
    and a linear map A turns its last hidden state at each corrupted position into a definition embedding
    e_d(v) = A s_j, trained to match the PLM's own pre-trained embedding e(v) of that token (Eq. 1).

    Args:
        reader_config (`dict` or `PreTrainedConfig`, *optional*):
            The PLM's own config (e.g. `BertConfig`, `RobertaConfig`, `BartConfig`, `T5Config`); the reader is
            `AutoModel.from_config(reader_config)`. Defaults to RoBERTa-base, the paper's encoder-only PLM.
        reader_type (`str`, *optional*):
            `"encoder-only"` (BERT-style denoising: the reader's last hidden state at each corrupted position) or
            `"encoder-decoder"` (T5-style span corruption: the decoder's last hidden state at each target position).
            Defaults to `"encoder-decoder"` when `reader_config.is_encoder_decoder`, else `"encoder-only"`.
        embedding_size (`int`, *optional*):
            H_e, the width of the definition embeddings and of the target embeddings. Defaults to the PLM's input
            embedding width (`reader_config.embedding_size` for ALBERT-like configs, else its hidden size).
        base_model_name_or_path (`str`, *optional*):
            The PLM whose pre-trained input embeddings are the targets (written by
            `DefinitionEmbModel.from_pretrained_model`; shown in the model card).
        freeze_reader_embeddings (`bool`, *optional*, defaults to `False`):
            Keep the reader's input embedding matrix fixed during training (the paper froze it for BART).
        word_slots (`str`, *optional*, defaults to `"distinct"`):
            Which word slots the prompt holds and how they are hidden. `"distinct"`: only the slots that hold a form
            of the word distinct for this tokenizer (an uncased tokenizer's capitalised and upper-case copies and a
            WordPiece "bpe form" spelled in `##` pieces are dropped), and every slot token is masked, in training and
            when reading, so the reader never sees the answer. `"paper"`: the four slots of Figure 17, corrupted
            50/25/25 in training and masked one token at a time when reading (the other slots stay visible).
        readout (`str`, *optional*):
            `"mask-slot"` (the paper's: A applied to the last hidden state at each word-slot token) or
            `"pooled-definition"` (A applied to the mean of the last hidden states over the whole prompt, the
            sentence embedding of an encoder trained without a masked-LM head; it rebuilds one token per definition,
            so only single-token words are its targets). Defaults to `"pooled-definition"` when `reader_config`
            names only architectures without a masked-LM or denoising head (e.g. `["BertModel"]` of a
            sentence-embedding model), else `"mask-slot"`.
        loss (`str`, *optional*, defaults to `"cosine"`):
            `"cosine"`: 1 - cos(e_d, e), scale-free (the replacement writes rows with their original norms, so the
            direction is what the reader contributes). `"mse"`: the paper's Eq. 1, the squared L2 distance, which
            pulls every uncertain prediction towards the mean embedding and shrinks it.
        evaluation_results (`list[dict]`, *optional*):
            Measured results reported in the model card; the package adds them with `hf_entity_models.hub.record_evaluation`.

    Example:

    ```python
    >>> from transformers import BartConfig
    >>> from hf_entity_models import DefinitionEmbConfig

    >>> reader_config = BartConfig(vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1,
    ...                            encoder_attention_heads=2, decoder_attention_heads=2,
    ...                            encoder_ffn_dim=64, decoder_ffn_dim=64)
    >>> config = DefinitionEmbConfig(reader_config=reader_config)
    >>> config.reader_type, config.embedding_size, config.vocab_size
    ('encoder-decoder', 32, 100)

    ```
    """

    model_type = "definition-emb"
    sub_configs = {"reader_config": AutoConfig}

    reader_config: dict | PreTrainedConfig | None = None
    reader_type: str | None = None
    embedding_size: int | None = None
    base_model_name_or_path: str | None = None
    freeze_reader_embeddings: bool = False
    word_slots: str = DISTINCT_SLOTS
    readout: str | None = None
    loss: str = COSINE
    evaluation_results: list[dict] | None = None

    def __post_init__(self, **kwargs):
        self.reader_config = build_encoder_config(self.reader_config, default_model_type=DEFAULT_READER_MODEL_TYPE)
        if self.reader_type is None:
            self.reader_type = ENCODER_DECODER if self.reader_config.is_encoder_decoder else ENCODER_ONLY
        if self.readout is None:
            self.readout = default_readout(self.reader_config)
        if self.embedding_size is None:
            self.embedding_size = plm_embedding_width(self.reader_config)
        super().__post_init__(**kwargs)
        self._check_values()

    @property
    def vocab_size(self) -> int:
        """The PLM's vocabulary size N: the rows of the target embedding matrix."""
        return self.reader_config.vocab_size

    @property
    def reader_hidden_size(self) -> int:
        """H_s, the width of the reader's last hidden state (the input of the linear map A)."""
        return self.reader_config.hidden_size

    @property
    def is_encoder_decoder_reader(self) -> bool:
        """Whether the reader is an encoder-decoder (T5-style span corruption, decoder states)."""
        return self.reader_type == ENCODER_DECODER

    def _check_values(self) -> None:
        _require(
            self.reader_type in READER_TYPES,
            f"reader_type must be one of {READER_TYPES} (or None to infer it from reader_config), got "
            f"{self.reader_type!r}.",
        )
        is_encoder_decoder = bool(self.reader_config.is_encoder_decoder)
        _require(
            self.reader_type != ENCODER_DECODER or is_encoder_decoder,
            f"reader_type='encoder-decoder' needs an encoder-decoder reader_config (e.g. BartConfig, T5Config), got "
            f"a {type(self.reader_config).__name__} (model_type {self.reader_config.model_type!r}, "
            "is_encoder_decoder=False): pass reader_type='encoder-only' or leave it None.",
        )
        _require(
            self.reader_type != ENCODER_ONLY or not is_encoder_decoder,
            f"reader_type='encoder-only' needs an encoder-only reader_config (e.g. BertConfig, RobertaConfig), got "
            f"the encoder-decoder {type(self.reader_config).__name__}: pass reader_type='encoder-decoder' or leave "
            "it None.",
        )
        _require(self.word_slots in WORD_SLOTS, f"word_slots must be one of {WORD_SLOTS}, got {self.word_slots!r}.")
        _require(self.loss in LOSSES, f"loss must be one of {LOSSES}, got {self.loss!r}.")
        _require(
            self.readout in READOUTS,
            f"readout must be one of {READOUTS} (or None to choose by the model's head), got {self.readout!r}.",
        )
        _require(
            self.readout != POOLED_DEFINITION or self.reader_type == ENCODER_ONLY,
            "readout='pooled-definition' reads an encoder's sentence embedding; an encoder-decoder reader uses "
            "readout='mask-slot' (its decoder states at the word slots).",
        )
        _require(
            not isinstance(self.embedding_size, bool) and self.embedding_size > 0,
            f"embedding_size (H_e) must be a positive int, got {self.embedding_size!r}; leave it None to use the "
            "PLM's input embedding width.",
        )
        # The reader and the linear map A from its hidden states to the embeddings (the largest terms).
        parameters = transformer_parameter_estimate(self.reader_config) + self.reader_hidden_size * self.embedding_size
        check_size_limits(self, {"embedding_size": WIDTH_LIMIT}, parameters)


    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs) -> "DefinitionEmbConfig":
        # A DefinitionEMB config saved before `word_slots` existed belongs to a reader trained with the paper's
        # settings: load it as it was trained, so that it is read the same way.
        saved = config_dict.get("model_type") == cls.model_type and "transformers_version" in config_dict
        if saved and "word_slots" not in config_dict:
            config_dict = {**PAPER_SETTINGS, **config_dict}
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_json_file(cls, json_file) -> "DefinitionEmbConfig":
        # PreTrainedConfig.from_json_file builds the config without from_dict: route it there for the migration.
        return cls.from_dict(cls._dict_from_json_file(json_file))


def default_readout(reader_config: PreTrainedConfig) -> str:
    """`"mask-slot"` for encoder-decoder models and checkpoints with a masked-LM / denoising head (or no recorded
    architecture), `"pooled-definition"` for encoders whose checkpoint names only heads without one (a
    sentence-embedding `BertModel`, whose state at a mask slot says little about the masked token). The guess reads
    the checkpoint's `architectures`: a masked-LM model re-saved as its base model reads as a sentence encoder, so
    pass `readout=` explicitly when you know better.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> default_readout(BertConfig(architectures=["BertModel"])), default_readout(BertConfig(architectures=["BertForMaskedLM"]))
    ('pooled-definition', 'mask-slot')

    ```
    """
    architectures = list(getattr(reader_config, "architectures", None) or [])
    if reader_config.is_encoder_decoder or not architectures:
        return MASK_SLOT
    has_lm_head = any(marker in name for name in architectures for marker in _MASKED_LM_ARCHITECTURE_MARKERS)
    return MASK_SLOT if has_lm_head else POOLED_DEFINITION


def plm_embedding_width(reader_config: PreTrainedConfig) -> int:
    """The width of a PLM's input token embeddings: `embedding_size` for ALBERT-like configs that factorise the
    embeddings, else the hidden size (`d_model` for BART and T5).

    Example:

    ```python
    >>> from transformers import AlbertConfig, BertConfig
    >>> albert, bert = AlbertConfig(embedding_size=16, hidden_size=32), BertConfig(hidden_size=32)
    >>> plm_embedding_width(albert), plm_embedding_width(bert)
    (16, 32)

    ```
    """
    width = getattr(reader_config, "embedding_size", None)
    return int(width) if isinstance(width, int) and not isinstance(width, bool) else int(reader_config.hidden_size)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


__all__ = [
    "COSINE",
    "DISTINCT_SLOTS",
    "ENCODER_DECODER",
    "ENCODER_ONLY",
    "LOSSES",
    "MASK_SLOT",
    "MSE",
    "PAPER_SETTINGS",
    "PAPER_SLOTS",
    "POOLED_DEFINITION",
    "READER_TYPES",
    "READOUTS",
    "WORD_SLOTS",
    "DefinitionEmbConfig",
    "default_readout",
    "plm_embedding_width",
]
