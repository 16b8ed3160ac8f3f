"""DefinitionEMB model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from hf_entity_models.models._shared.encoders import build_encoder_config
from hf_entity_models.models._shared.evaluation_results import EvaluationResultsMixin
from hf_entity_models.models._shared.portable_code import SelfContainedConfigMixin

ENCODER_ONLY = "encoder-only"
ENCODER_DECODER = "encoder-decoder"
READER_TYPES = (ENCODER_ONLY, ENCODER_DECODER)
# The paper's encoder-only PLM (RoBERTa-base); the reader of a config built without `reader_config`.
DEFAULT_READER_MODEL_TYPE = "roberta"


@strict
class DefinitionEmbConfig(SelfContainedConfigMixin, EvaluationResultsMixin, PreTrainedConfig):
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
        evaluation_results (`list[dict]`, *optional*):
            Measured results recorded in the model card (see `record_evaluation`).

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
    evaluation_results: list[dict] | None = None

    def __post_init__(self, **kwargs):
        self.reader_config = build_encoder_config(self.reader_config, default_model_type=DEFAULT_READER_MODEL_TYPE)
        if self.reader_type is None:
            self.reader_type = ENCODER_DECODER if self.reader_config.is_encoder_decoder else ENCODER_ONLY
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
        _require(
            not isinstance(self.embedding_size, bool) and self.embedding_size > 0,
            f"embedding_size (H_e) must be a positive int, got {self.embedding_size!r}; leave it None to use the "
            "PLM's input embedding width.",
        )
        self.validate_evaluation_results()


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


__all__ = ["ENCODER_DECODER", "ENCODER_ONLY", "READER_TYPES", "DefinitionEmbConfig", "plm_embedding_width"]
