"""Referential Reader model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

import math

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from hf_entity_models.models._shared.checkpoints import VOCABULARY_LIMIT, WIDTH_LIMIT, CheckpointConfigMixin
from hf_entity_models.models._shared.checkpoints import transformer_parameter_estimate
from hf_entity_models.models._shared.coreference_links import EncoderWindowMixin, check_memory_reader_values
from hf_entity_models.models._shared.document_coreference import check_document_mode_values
from hf_entity_models.models._shared.encoders import build_encoder_config
from hf_entity_models.models._shared.recurrence import MEMORY_IMPLEMENTATIONS

# Key size of the paper's appendix: 16 in the purely incremental model, 32 on BERT features.
INCREMENTAL_KEY_SIZE = 16
ENCODER_KEY_SIZE = 32


@strict
class RefReaderConfig(CheckpointConfigMixin, EncoderWindowMixin, PreTrainedConfig):
    r"""
    Configuration of a Referential Reader (Liu, Zettlemoyer and Eisenstein, 2019, "The Referential Reader: A
    Recurrent Entity Network for Anaphora Resolution"): a recurrent reader that stores entity mentions in a memory
    of a few cells (key, value, salience), updating a cell on coreference and overwriting the least salient cell
    with a new entity.

    Two input modes, as in the paper:

    * **incremental** (`encoder_config=None`, the default): the reader has its own word embeddings and reads
      strictly left to right; it can be pre-trained as a language model (`RefReaderForCausalLM`).
    * **encoder**: token features are the concatenated top layers of a frozen pretrained encoder (the paper's
      "coref + BERT" row). Build one with `RefReaderForCoreference.from_encoder(...)`.

    Args:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Configuration of a frozen token encoder (BERT, MiniLM, ...) whose hidden states are the reader's inputs.
            `None` (default) selects the purely incremental mode with the reader's own embeddings.
        encoder_layers (`list[int]`, *optional*, defaults to `[-1, -2, -3, -4]`):
            Indices into the encoder's `hidden_states` (0 is the embedding output) concatenated, in this order, into
            the input features. The paper concatenates the top four layers, last layer first (authors' code).
        encoder_window_size (`int`, *optional*):
            Longest window given to the encoder at once; longer documents are encoded in overlapping windows and the
            reader still reads them whole. Defaults to the encoder's `max_position_embeddings`.
        encoder_window_overlap (`int`, *optional*):
            Tokens shared by consecutive encoder windows. Defaults to a quarter of the window.
        vocab_size (`int`, *optional*, defaults to 30522):
            Vocabulary of the incremental reader's embeddings and language-model head. The default is the BERT
            uncased vocabulary, so a BERT / MiniLM tokenizer can be used with the default config.
        embedding_size (`int`, *optional*, defaults to 300):
            Size D_x of the word embeddings of the incremental reader (paper: 300).
        freeze_embeddings (`bool`, *optional*, defaults to `False`):
            Keep the word embeddings fixed; the paper's coref-only incremental model keeps pretrained (GloVe)
            vectors fixed. Load the vectors with `RefReaderModel.load_word_vectors`.
        hidden_size (`int`, *optional*, defaults to 300):
            Size D_h of the pre-recurrent and hidden states, and D_v of the memory values (the memory summary is
            mixed into the GRU state, so both sizes are the same).
        key_size (`int`, *optional*):
            Size D_k of the memory keys and queries, and of the hidden layer of the key network. Defaults to 16 in
            the incremental mode and 32 with an encoder (paper appendix).
        num_memory_cells (`int`, *optional*, defaults to 2):
            Number of memory cells N (paper: 2; 4 is also reported).
        entity_half_life (`float`, *optional*, defaults to 4):
            Number of entity mentions after which salience halves (gamma_e = 0.5 ** (1 / half-life), Eq. 2).
        non_entity_half_life (`float`, *optional*, defaults to 30):
            Number of non-entity tokens after which salience halves (gamma_n, Eq. 2).
        initial_salience (`float`, *optional*, defaults to 1e-7):
            Salience of every cell before the first token (authors' code: zero is numerically unstable).
        dropout (`float`, *optional*, defaults to 0.5):
            Dropout on the input features, the pre-recurrent state and the GRU output (paper appendix).
        self_link_weight (`float`, *optional*, defaults to 0.1):
            Loss weight of token pairs inside one mention span (self links, target 1).
        positive_link_weight (`float`, *optional*, defaults to 5.0):
            Loss weight of pronoun-to-coreferent-name token pairs (target 1).
        negative_link_weight (`float`, *optional*, defaults to 50.0):
            Loss weight of pronoun-to-other-name token pairs (target 0).
        mention_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the dense mention loss (mention detection and the overwrite-or-update decision on every
            token, `mention_detection_loss`), added when the forward call gets `mention_targets` (CoNLL / LitBank
            training; GAP does not use it).
        other_pair_weight (`float`, *optional*, defaults to 1.0):
            Loss weight of every other token pair of the document (target 0): the loss runs over all pairs.
        lm_loss_weight (`float`, *optional*, defaults to 0.0):
            Weight of the language-modelling loss added to the coreference loss by `RefReaderForCoreference`
            (incremental mode only). With a positive weight the coreference model carries the LM head.
        gumbel_temperature (`float`, *optional*, defaults to 1.0):
            Initial temperature of the Gumbel-softmax over negative salience used for soft overwrites in training
            (halved every 10 epochs by `GumbelTemperatureCallback`).
        coref_threshold (`float`, *optional*, defaults to 0.5):
            Decision threshold on the span link probability; tune it on validation data (best values are small).
        mention_threshold (`float`, *optional*, defaults to 0.5):
            Smallest write (overwrite + coref) that makes a token a mention when `pipeline("coreference")` builds
            clusters; `train_on_conll` chooses it on validation documents and stores it here.
        new_entity_threshold (`float`, *optional*):
            When set, a mention token starts a new entity in the clusters of `pipeline("coreference")` when the
            overwrite share of its write reaches it (else it joins the cell it corefers with most); None keeps the
            rule "overwrite >= coref in the cell written most". `train_on_conll` chooses it on validation documents.
        pad_token_id (`int`, *optional*, defaults to 0):
            Padding id of the incremental reader's vocabulary (BERT's `[PAD]`).
        bos_token_id (`int`, *optional*):
            Beginning-of-sequence id used by `generate` when no prompt is given.
        eos_token_id (`int`, *optional*):
            End-of-sequence id that stops `generate`.
        tie_word_embeddings (`bool`, *optional*, defaults to `False`):
            Share the input embeddings with the LM output projection (needs `embedding_size == hidden_size`). The
            authors' reader has a separate output projection.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialiser of linear layers and embeddings.
        memory_implementation (`str`, *optional*, defaults to `"eager"`):
            How the per-token recurrence runs; both compute the same function (outputs and gradients agree to float
            rounding). `"eager"`: a Python loop over tokens, documents leaving the batch after their last token (the
            reference; no compilation). `"compiled"`: the batch keeps one shape for every token, and chunks of
            `memory_chunk_size` steps are compiled by `torch.compile` into one graph each (replayed with CUDA graphs
            on a GPU), which removes most kernel launches. The first batch of each shape pays the compilation (tens
            of seconds); it needs a C++ compiler on CPU and Triton on GPU.
        memory_chunk_size (`int`, *optional*, defaults to 16):
            Tokens per compiled chunk with `memory_implementation="compiled"`.
        coreference_mode (`str`, *optional*, defaults to `"tokens"`):
            `"tokens"`: the paper's model, a memory of a few cells read token by token (GAP; the mode of every
            checkpoint saved before the document mode existed). `"document"`: coreference over whole documents
            (LitBank, CoNLL-2012): span mentions proposed and scored, clustered by an unbounded memory of entities
            read one mention at a time, as the authors later took the model to long documents (Toshniwal et al.,
            2020b, 2021; `models/_shared/document_coreference.py`). The token memory's fields are then unused.
        document_hidden_size (`int`, *optional*, defaults to 256):
            Document mode: size of the BiLSTM word states, the entity vectors and the scorers' hidden layers.
        max_span_width (`int`, *optional*, defaults to 12):
            Document mode: the longest candidate mention, in words (LitBank: 99% of mentions).
        span_width_size (`int`, *optional*, defaults to 20):
            Document mode: size of the span-width and distance/size feature embeddings.
        document_dropout (`float`, *optional*, defaults to 0.3):
            Document mode: dropout on the word features, the word states and the scorers' hidden layers.
        span_loss_weight (`float`, *optional*, defaults to 10.0):
            Document mode: weight of the mention loss beside the clustering loss (chosen on LitBank selection books).
        span_threshold (`float`, *optional*, defaults to 0.0):
            Document mode: smallest mention logit of a proposed mention; `train --conll` chooses it on validation
            documents and stores it here.
        max_mentions_per_word (`float`, *optional*, defaults to 0.6):
            Document mode: at most this many proposed mentions per word of a document (the highest scored).
        max_entities (`int`, *optional*):
            Document mode: None (default) tracks every entity of the document; a number bounds the memory ("learning
            to ignore", Toshniwal et al., 2020b): when it is full, a learned score drops the tracked entity (or the new
            mention) least likely to be mentioned again, trained against the oracle that drops the one with the
            fewest mentions left. 20 costs about 3 CoNLL F1 on LitBank (benchmarks/RESULTS.md) and trains faster.
        entity_update (`str`, *optional*):
            Document mode: how an entity's vector takes in a new mention, `"mlp-merge"`, `"gru"` or `"mean"`
            (`EntityMemory`). Defaults to this model's own update: `"gru"`, the gated (GRU) update of the memory values.
        evaluation_results (`list[dict]`, *optional*):
            Measured results reported in the model card; the package adds them with `hf_entity_models.hub.record_evaluation`.

    Example:

    ```python
    >>> from hf_entity_models import RefReaderConfig, RefReaderForCoreference
    >>> config = RefReaderConfig(vocab_size=100, embedding_size=16, hidden_size=16, num_memory_cells=2)
    >>> config.uses_encoder, config.key_size
    (False, 16)
    >>> model = RefReaderForCoreference(config)

    ```
    """

    model_type = "refreader"
    keys_to_ignore_at_inference = ["coref_loss", "lm_loss", "memory_keys", "memory_values", "hidden_states"]
    sub_configs = {"encoder_config": AutoConfig}

    encoder_config: dict | PreTrainedConfig | None = None
    encoder_layers: list[int] | tuple[int, ...] = (-1, -2, -3, -4)
    encoder_window_size: int | None = None
    encoder_window_overlap: int | None = None
    vocab_size: int = 30522
    embedding_size: int = 300
    freeze_embeddings: bool = False
    hidden_size: int = 300
    key_size: int | None = None
    num_memory_cells: int = 2
    entity_half_life: float | int = 4
    non_entity_half_life: float | int = 30
    initial_salience: float = 1e-7
    dropout: float | int = 0.5
    self_link_weight: float | int = 0.1
    positive_link_weight: float | int = 5.0
    negative_link_weight: float | int = 50.0
    other_pair_weight: float | int = 1.0
    mention_loss_weight: float | int = 1.0
    lm_loss_weight: float | int = 0.0
    gumbel_temperature: float | int = 1.0
    coref_threshold: float | int = 0.5
    mention_threshold: float | int = 0.5
    new_entity_threshold: float | int | None = None
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    memory_implementation: str = "eager"
    memory_chunk_size: int = 16
    coreference_mode: str = "tokens"
    document_hidden_size: int = 256
    max_span_width: int = 12
    span_width_size: int = 20
    document_dropout: float | int = 0.3
    span_loss_weight: float | int = 10.0
    span_threshold: float | int = 0.0
    max_mentions_per_word: float | int = 0.6
    max_entities: int | None = None
    entity_update: str | None = None
    evaluation_results: list[dict] | None = None

    def __post_init__(self, **kwargs):
        self.encoder_config = build_encoder_config(self.encoder_config, default_model_type=None)
        super().__post_init__(**kwargs)
        self.encoder_layers = [int(layer) for layer in self.encoder_layers]
        if self.key_size is None:
            self.key_size = ENCODER_KEY_SIZE if self.uses_encoder else INCREMENTAL_KEY_SIZE
        if self.entity_update is None:
            self.entity_update = "gru"
        self._check_values()

    @property
    def uses_encoder(self) -> bool:
        """True when the reader reads the features of a frozen encoder, False in the purely incremental mode."""
        return self.encoder_config is not None

    @property
    def encoder_is_frozen(self) -> bool:
        """True when the reader reads an encoder (always frozen), so its features can be computed once and cached."""
        return self.uses_encoder

    @property
    def input_feature_size(self) -> int:
        """Size D_x of the reader's inputs x_t: concatenated encoder layers, or the word embeddings."""
        if self.uses_encoder:
            return len(self.encoder_layers) * self.encoder_config.hidden_size
        return self.embedding_size

    @property
    def entity_decay(self) -> float:
        """gamma_e of Eq. 2: salience kept per entity mention."""
        return math.exp(math.log(0.5) / self.entity_half_life)

    @property
    def non_entity_decay(self) -> float:
        """gamma_n of Eq. 2: salience kept per non-entity token."""
        return math.exp(math.log(0.5) / self.non_entity_half_life)

    def _check_values(self) -> None:
        check_memory_reader_values(
            self,
            sizes={
                "hidden_size": WIDTH_LIMIT,
                "key_size": WIDTH_LIMIT,
                "vocab_size": VOCABULARY_LIMIT,
                "embedding_size": WIDTH_LIMIT,
            },
            other_loss_weights=("other_pair_weight", "lm_loss_weight"),
            choices={"memory_implementation": MEMORY_IMPLEMENTATIONS},
            cells_advice="the paper uses 2 (and 4)",
            parameters=self._parameter_estimate(),
        )
        for name in ("entity_half_life", "non_entity_half_life"):
            _require(getattr(self, name) > 0, f"{name} is a number of tokens and must be > 0, got {getattr(self, name)}.")
        _require(
            0.0 < self.initial_salience < 1.0,
            f"initial_salience must be in (0, 1), got {self.initial_salience} (authors' code: 1e-7).",
        )
        if self.pad_token_id is not None:
            _require(
                0 <= self.pad_token_id < self.vocab_size,
                f"pad_token_id must be in [0, vocab_size={self.vocab_size}), got {self.pad_token_id}.",
            )
        if self.tie_word_embeddings:
            _require(
                not self.uses_encoder and self.embedding_size == self.hidden_size,
                "tie_word_embeddings needs the incremental mode and embedding_size == hidden_size, got "
                f"embedding_size={self.embedding_size}, hidden_size={self.hidden_size}; set tie_word_embeddings=False.",
            )
        _require(
            not (self.uses_encoder and self.lm_loss_weight > 0),
            "lm_loss_weight > 0 needs the incremental mode (encoder_config=None): with encoder features the reader "
            "sees future tokens, so next-word prediction is meaningless.",
        )
        check_document_mode_values(self, WIDTH_LIMIT)
        _require(
            self.coreference_mode == "tokens" or (self.uses_encoder and self.lm_loss_weight == 0),
            "coreference_mode='document' reads a pretrained encoder's features: give an encoder_config (e.g. "
            "RefReaderForCoreference.from_encoder(name, coreference_mode='document')) and keep lm_loss_weight=0.",
        )
        if self.uses_encoder:
            self._check_encoder_fields()

    def _parameter_estimate(self) -> int:
        """About how many parameters the model has: the encoder, or the word embeddings and the LM head; the input
        projection and GRU cell over the features; the state, value and key networks (the largest terms only)."""
        hidden, key = self.hidden_size, self.key_size
        vocabulary = 0 if self.uses_encoder else self.vocab_size * (self.embedding_size + hidden)
        reader = 4 * self.input_feature_size * hidden + 12 * hidden * hidden + 2 * hidden * key + 8 * key * key
        return transformer_parameter_estimate(self.encoder_config) + vocabulary + reader


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


__all__ = ["RefReaderConfig"]
