"""PeTra model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from hf_entity_models.models._shared.checkpoints import WIDTH_LIMIT, CheckpointConfigMixin
from hf_entity_models.models._shared.checkpoints import transformer_parameter_estimate
from hf_entity_models.models._shared.coreference_links import EncoderWindowMixin, check_memory_reader_values
from hf_entity_models.models._shared.document_coreference import check_document_mode_values
from hf_entity_models.models._shared.encoders import build_encoder_config
from hf_entity_models.models._shared.recurrence import MEMORY_IMPLEMENTATIONS

MEMORY_VARIANTS = ("vanilla", "learned_init", "fixed_key")
# Choices where the paper and the authors' code differ (issue 13). The first value of each is the default, as
# decided by the GAP ablations (benchmarks/RESULTS.md, model card).
COREF_LOSSES = ("cross_entropy", "bce_with_logits_of_log_p")
COREF_UPDATE_MLPS = ("mlp", "tanh_linear")
OVERWRITE_TIE_BREAKING = ("random", "first")
ENTITY_LOSS_REDUCTIONS = ("per_document", "per_token")
LINEAR_INITS = ("normal", "pytorch_default")


@strict
class PetraConfig(CheckpointConfigMixin, EncoderWindowMixin, PreTrainedConfig):
    r"""
    Configuration of a PeTra model (Toshniwal et al., 2020, "PeTra: A Sparsely Supervised Memory Model for
    People Tracking"): a frozen pretrained encoder, a one-layer GRU and a memory of ``num_memory_cells`` cells
    that are overwritten with new entities or updated on coreference.

    Args:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Configuration of the token encoder; any model that `AutoModel` can build and that returns hidden
            states (BERT, RoBERTa, MiniLM, ...). Defaults to a BERT-base configuration, as in the paper.
        encoder_layers (`list[int]`, *optional*, defaults to `[-4, -3, -2, -1]`):
            Indices into the encoder's `hidden_states` tuple (index 0 is the embedding output) whose outputs are
            concatenated, in this order, to form the GRU input. The paper uses the last four layers of BERT-base.
        freeze_encoder (`bool`, *optional*, defaults to `True`):
            Keep the encoder frozen (paper setting). A frozen encoder runs under `torch.no_grad()` and its features
            can be cached and passed as `encoder_features`.
        trainable_encoder_layers (`int`, *optional*):
            With `freeze_encoder=False`: how many of the encoder's top transformer layers are fine-tuned (the rest,
            embeddings included, stay frozen). None (default) fine-tunes the whole encoder. A trained encoder gives
            different features every step, so they cannot be cached: every epoch runs the encoder forward and
            backward.
        encoder_window_size (`int`, *optional*):
            Longest window, in tokens, given to the encoder at once. Longer documents are encoded in overlapping
            windows and every token keeps the features of the window where it has most context; the memory always
            reads the whole document. Defaults to the encoder's `max_position_embeddings`.
        encoder_window_overlap (`int`, *optional*):
            Number of tokens shared by consecutive encoder windows. Defaults to a quarter of the window (128 for
            a 512-token encoder).
        hidden_size (`int`, *optional*, defaults to 300):
            Size of the GRU output and of every memory cell.
        num_memory_cells (`int`, *optional*, defaults to 10):
            Number of memory cells N (the paper explores 2 to 20).
        memory_variant (`str`, *optional*, defaults to `"vanilla"`):
            `"vanilla"`: cells start at zero (parameter-free memory); `"learned_init"`: cells start at learned
            vectors; `"fixed_key"`: the first `key_size` dimensions of every cell are a learned key that is never
            updated, the rest is the value.
        key_size (`int`, *optional*, defaults to 20):
            Dimensions of the fixed key (only used by `"fixed_key"`). Must be smaller than `hidden_size`.
        usage_decay (`float`, *optional*, defaults to 0.98):
            Decay rate gamma of the usage scalar (Eq. 8).
        mlp_hidden_size (`int`, *optional*, defaults to 300):
            Width of the two ReLU hidden layers of the entity, similarity and coreference-update MLPs.
        dropout (`float`, *optional*, defaults to 0.5):
            Dropout on the GRU output.
        self_link_weight (`float`, *optional*, defaults to 1.0):
            Loss weight of the implied links from the first token of a span to its later tokens.
        positive_link_weight (`float`, *optional*, defaults to 5.0):
            Loss weight of pronoun-to-coreferent-name links.
        negative_link_weight (`float`, *optional*, defaults to 50.0):
            Loss weight of negative links (pronoun to the other name, name A to name B).
        entity_loss_weight (`float`, *optional*, defaults to 0.1):
            Weight lambda of the entity-mention loss (section 2.5.2).
        mention_loss_weight (`float`, *optional*, defaults to 1.0):
            Weight of the dense mention loss (mention detection and the new-entity decision on every token,
            `mention_detection_loss`), added when the forward call gets `mention_targets` (CoNLL / LitBank
            training; GAP does not use it).
        gumbel_temperature (`float`, *optional*, defaults to 1.0):
            Initial temperature of the Gumbel-softmax used for soft overwrites in training (halved every 10 epochs
            by `GumbelTemperatureCallback`).
        coref_threshold (`float`, *optional*, defaults to 0.5):
            Decision threshold on the span link probability; tune it on validation data with
            `hf_entity_models.tasks.coreference.sweep_threshold` and store the best value here.
        mention_threshold (`float`, *optional*, defaults to 0.5):
            Smallest write (overwrite + coref) that makes a token a mention when `pipeline("coreference")` builds
            clusters; `train_on_conll` chooses it on validation documents and stores it here.
        new_entity_threshold (`float`, *optional*):
            When set, a mention token starts a new entity in the clusters of `pipeline("coreference")` when the
            overwrite share of its write reaches it (else it joins the cell it corefers with most); None keeps the
            rule "overwrite >= coref in the cell written most". `train_on_conll` chooses it on validation documents.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialiser of linear layers (with `linear_init="normal"`).
        coref_loss (`str`, *optional*, defaults to `"cross_entropy"`):
            Per-pair loss of section 2.5.1 (the GAP ablation kept the paper's). `"cross_entropy"`: the binary
            cross-entropy between the label and the link probability P of Eq. 9, as the paper writes it.
            `"bce_with_logits_of_log_p"`: what the authors' code computes, `log P` fed to a BCE-with-logits, i.e. the
            cross-entropy between the label and `sigmoid(log P) = P / (1 + P)`: `-log(P / (1 + P))` for a positive pair,
            `log(1 + P)` for a negative one. Both are weighted and normalised by the total weight.
        coref_update_mlp (`str`, *optional*, defaults to `"mlp"`):
            Shape of MLP3, the coreference update of Eq. 7 (the GAP ablation kept `"mlp"`). `"mlp"`: two ReLU hidden
            layers of `mlp_hidden_size` and a linear output (the paper does not state the shape). `"tanh_linear"`: the
            authors' code, `tanh(Linear([h_t; m_i]))`.
        overwrite_tie_breaking (`str`, *optional*, defaults to `"random"`):
            How the hard overwrite at evaluation (Eq. 5) breaks exact ties among the least used cells. `"random"`:
            a random cell among the tied ones, as the paper and the authors' code do; the draws come from a
            generator seeded with `overwrite_tie_seed` at every forward call, so the same inputs always give the
            same choice. `"first"`: the cell with the lowest index, which always overwrites cell 0 once every
            usage has reached 1 and so skews overwrite logs and per-cell analyses (the GAP F1 of both rules was
            identical on every model measured). Training (soft Gumbel-softmax overwrites, Eq. 6) is not affected.
        overwrite_tie_seed (`int`, *optional*, defaults to 0):
            Seed of the tie-breaking generator of `overwrite_tie_breaking="random"`.
        entity_loss_reduction (`str`, *optional*, defaults to `"per_document"`):
            How the entity-mention loss of section 2.5.2 averages (the GAP ablation kept `"per_document"`).
            `"per_document"`: the mean over the unlabelled tokens of each document (the paper's per-instance formula),
            then the mean over documents. `"per_token"`: the authors' code, one mean over all unlabelled tokens of the
            batch (longer documents weigh more).
        linear_init (`str`, *optional*, defaults to `"normal"`):
            Initialisation of PeTra's own linear layers (MLPs) when a model is built from scratch (the GAP ablation kept
            `"normal"`). `"normal"`: normal(0, `initializer_range`) weights and zero biases (the transformers
            convention). `"pytorch_default"`: PyTorch's default `nn.Linear` initialisation (weights and biases uniform
            in +-1/sqrt(fan_in)), which the authors' code used. Weights loaded from a checkpoint are never
            re-initialised, whichever the choice.
        memory_implementation (`str`, *optional*, defaults to `"eager"`):
            How the per-token memory recurrence runs; both compute the same function (outputs and gradients agree
            to float rounding). `"eager"`: a Python loop over tokens, documents leaving the batch after their last
            token (the reference; no compilation). `"compiled"`: the batch keeps one shape for every token, and
            chunks of `memory_chunk_size` steps are compiled by `torch.compile` into one graph each (replayed with
            CUDA graphs on a GPU), which removes most kernel launches. The first batch of each shape pays the
            compilation (tens of seconds); it needs a C++ compiler on CPU and Triton on GPU.
        memory_chunk_size (`int`, *optional*, defaults to 16):
            Tokens per compiled chunk with `memory_implementation="compiled"`. Longer chunks fuse more steps but
            compile longer; the last chunk of a document is padded with no-op steps.
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
            (`EntityMemory`). Defaults to this model's own update: `"mlp-merge"`, the coreference update of Eq. 7 (a tanh-MLP of [entity; mention], as the authors' code).
        evaluation_results (`list[dict]`, *optional*):
            Measured results of this checkpoint, reported in the model card that `save_pretrained` and
            `push_to_hub` write. Each entry is a dict with `task` (e.g. `"coreference"`), `dataset` (e.g. `"gap"`),
            `split` (e.g. `"validation"`), `metric` (e.g. `"f1"`) and a finite number `value`, and optionally the
            decision `threshold` it was measured at, a display `dataset_name` and `metric_name`. Add entries with
            `hf_entity_models.hub.record_evaluation(config, ...)`, which replaces an earlier value of the same task,
            dataset, split and metric.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> from hf_entity_models import PetraConfig, PetraForCoreference

    >>> encoder_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    >>> config = PetraConfig(
    ...     encoder_config=encoder_config, encoder_layers=[-2, -1], hidden_size=16, mlp_hidden_size=16, num_memory_cells=4
    ... )
    >>> model = PetraForCoreference(config)
    >>> from hf_entity_models.hub import record_evaluation
    >>> record_evaluation(config, task="coreference", dataset="gap", split="validation", metric="f1", value=0.72)
    >>> config.evaluation_results
    [{'task': 'coreference', 'dataset': 'gap', 'split': 'validation', 'metric': 'f1', 'value': 0.72}]

    ```
    """

    model_type = "petra"
    # Scalars and the final memory are not per-example predictions: Trainer's evaluation loop leaves them out.
    keys_to_ignore_at_inference = ["memory", "coref_loss", "entity_loss"]
    sub_configs = {"encoder_config": AutoConfig}

    encoder_config: dict | PreTrainedConfig | None = None
    encoder_layers: list[int] | tuple[int, ...] = (-4, -3, -2, -1)
    freeze_encoder: bool = True
    trainable_encoder_layers: int | None = None
    encoder_window_size: int | None = None
    encoder_window_overlap: int | None = None
    hidden_size: int = 300
    num_memory_cells: int = 10
    memory_variant: str = "vanilla"
    key_size: int = 20
    usage_decay: float | int = 0.98
    mlp_hidden_size: int = 300
    dropout: float | int = 0.5
    self_link_weight: float | int = 1.0
    positive_link_weight: float | int = 5.0
    negative_link_weight: float | int = 50.0
    entity_loss_weight: float | int = 0.1
    mention_loss_weight: float | int = 1.0
    gumbel_temperature: float | int = 1.0
    coref_threshold: float | int = 0.5
    mention_threshold: float | int = 0.5
    new_entity_threshold: float | int | None = None
    initializer_range: float = 0.02
    coref_loss: str = "cross_entropy"
    coref_update_mlp: str = "mlp"
    overwrite_tie_breaking: str = "random"
    overwrite_tie_seed: int = 0
    entity_loss_reduction: str = "per_document"
    linear_init: str = "normal"
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
        self.encoder_config = build_encoder_config(self.encoder_config, default_model_type="bert")
        super().__post_init__(**kwargs)
        self.encoder_layers = [int(layer) for layer in self.encoder_layers]
        if self.entity_update is None:
            self.entity_update = "mlp-merge"
        self._check_values()

    @property
    def encoder_is_frozen(self) -> bool:
        """True when the encoder is not trained, so its features can be computed once and cached."""
        return self.freeze_encoder

    @property
    def encoder_feature_size(self) -> int:
        """Size of the concatenated encoder features fed to the GRU."""
        return len(self.encoder_layers) * self.encoder_config.hidden_size

    def _check_values(self) -> None:
        check_memory_reader_values(
            self,
            sizes={"hidden_size": WIDTH_LIMIT, "mlp_hidden_size": WIDTH_LIMIT},
            other_loss_weights=("entity_loss_weight",),
            choices={
                "memory_variant": MEMORY_VARIANTS,
                "coref_loss": COREF_LOSSES,
                "coref_update_mlp": COREF_UPDATE_MLPS,
                "overwrite_tie_breaking": OVERWRITE_TIE_BREAKING,
                "entity_loss_reduction": ENTITY_LOSS_REDUCTIONS,
                "linear_init": LINEAR_INITS,
                "memory_implementation": MEMORY_IMPLEMENTATIONS,
            },
            cells_advice="the paper uses 2 to 20 (default 10)",
            parameters=self._parameter_estimate(),
        )
        if self.memory_variant == "fixed_key":
            _require(
                1 <= self.key_size < self.hidden_size,
                f"key_size must be in [1, hidden_size) for the fixed_key variant, got key_size={self.key_size} "
                f"with hidden_size={self.hidden_size}; lower key_size (paper: 20 of 300).",
            )
        _require(0.0 < self.usage_decay < 1.0, f"usage_decay must be in (0, 1), got {self.usage_decay} (paper: 0.98).")
        check_document_mode_values(self, WIDTH_LIMIT)
        if self.trainable_encoder_layers is not None:
            encoder_layers = getattr(self.encoder_config, "num_hidden_layers", None)
            _require(
                not self.freeze_encoder,
                f"trainable_encoder_layers={self.trainable_encoder_layers} needs freeze_encoder=False (a frozen "
                "encoder trains no layer).",
            )
            _require(
                0 <= self.trainable_encoder_layers <= (encoder_layers or self.trainable_encoder_layers),
                f"trainable_encoder_layers must be in [0, {encoder_layers}] (the encoder's layers), got "
                f"{self.trainable_encoder_layers}.",
            )
        self._check_encoder_fields()

    def _parameter_estimate(self) -> int:
        """About how many parameters the model has: the encoder, the GRU over its features, and the entity,
        similarity and coreference-update MLPs (the size limit needs the largest terms only)."""
        hidden, mlp = self.hidden_size, self.mlp_hidden_size
        gru = 3 * hidden * (self.encoder_feature_size + hidden)
        return transformer_parameter_estimate(self.encoder_config) + gru + 8 * hidden * mlp + 4 * mlp * mlp


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


__all__ = ["PetraConfig"]
