"""PyTorch DefinitionEMB: token embeddings for a pre-trained language model (PLM) constructed from dictionary
definitions (Zhang, Li and Okumura, "Reconsidering Token Embeddings with the Definitions for Pre-trained Language
Models").

It imports only torch, transformers, files of its own folder and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a checkpoint loads with
``trust_remote_code=True`` where this package is not installed.

Section 5.1: a definition reader g, initialised from the PLM, reads a prompt built from a word's definition in
which the word's tokens are corrupted, and a linear map A (H_e x H_s, no bias) turns its last hidden state s_j at a
corrupted position j into the definition embedding e_d(v) = A s_j. An encoder-only reader (BERT, RoBERTa) gives s_j
at the corrupted input position; an encoder-decoder reader (BART, T5) reads the source with each corrupted span
replaced by one sentinel and gives s_j at the target position of the token (the decoder's last hidden state, with
the previous target tokens as decoder input). Section 5.2, Eq. 1: training pulls e_d(v) towards the PLM's frozen
pre-trained embedding e(v), stored here as the buffer ``target_embeddings``; by default with 1 - cosine instead of
Eq. 1's squared distance (``config.loss``). With ``config.readout == "pooled-definition"`` (encoders without a
masked-LM head) s is the mean of the last hidden states over the prompt, the same at every position. Shapes use B = batch, T = input length,
T_dec = decoder input length, H_s = the reader's hidden size, H_e = the embedding size, N = the vocabulary size.
"""

import os
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, PreTrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from hf_entity_models.models._shared.checkpoints import CheckpointMixin, copy_weights
from hf_entity_models.models._shared.encoders import load_pretrained_encoder

from .configuration_definition_emb import DefinitionEmbConfig

logger = logging.get_logger(__name__)

# The label of a position that is not a corrupted token (no target embedding), as in transformers' MLM labels.
IGNORE_INDEX = -100
# Weights of a PLM that the reader does not have, and that `from_pretrained_model` leaves behind: the pooler of
# BERT-like encoders (DefinitionEMB reads the last hidden states, never the pooled [CLS]) and the LM head of task
# models whose base model is the model itself (T5ForConditionalGeneration).
DROPPED_PLM_WEIGHT_PREFIXES = ("pooler.", "lm_head.")
# Initialiser scale of A when the reader's config names none (T5 scales by `initializer_factor` instead).
DEFAULT_INITIALIZER_RANGE = 0.02


@dataclass
class DefinitionEmbOutput(ModelOutput):
    """
    Output of [`DefinitionEmbModel`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` are given):
            Eq. 1: for every example, the mean over its labelled (corrupted) positions of the squared L2 distance
            between the definition embedding and the target embedding of the label; then the mean over the examples
            that have at least one labelled position (0 when none has).
        definition_embeddings (`torch.FloatTensor` of shape `(batch_size, length, embedding_size)`):
            e_d = A s at every position: `length` is the input length for an encoder-only reader, the decoder input
            length for an encoder-decoder reader. Only the corrupted positions are meaningful.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*, returned when `output_hidden_states=True`):
            The reader's hidden states (the decoder's for an encoder-decoder reader): the embeddings and the output
            of every layer, each of shape `(batch_size, length, reader_hidden_size)`.
    """

    loss: torch.FloatTensor | None = None
    definition_embeddings: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None


def definition_embedding_loss(
    definition_embeddings: torch.Tensor, labels: torch.LongTensor, target_embeddings: torch.Tensor, loss: str = "mse"
) -> torch.Tensor:
    """The distance between definition and target embeddings, averaged per example over its labelled positions, then
    over the examples that have at least one: Eq. 1's squared L2 distance (`loss="mse"`) or 1 - cosine
    (`loss="cosine"`, blind to the norm).

    Args:
        definition_embeddings: (B, T, H_e) definition embeddings e_d.
        labels: (B, T) token ids of the corrupted positions, `IGNORE_INDEX` (-100) elsewhere.
        target_embeddings: (N, H_e) pre-trained embeddings e.
        loss: `"mse"` or `"cosine"`.

    Returns:
        A float32 scalar; 0 (still attached to the graph) when no position is labelled.

    Example:

    ```python
    >>> import torch
    >>> targets = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    >>> embeddings = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[3.0, 1.0], [9.0, 9.0]]])
    >>> labels = torch.tensor([[0, 1], [1, -100]])  # example 1: (1 + 2) / 2; example 2: 4 / 1
    >>> definition_embedding_loss(embeddings, labels, targets)
    tensor(2.7500)
    >>> definition_embedding_loss(embeddings[1:], labels[1:], targets, loss="cosine")  # 1 - cos((3, 1), (1, 1))
    tensor(0.1056)

    ```
    """
    if loss not in ("mse", "cosine"):
        raise ValueError(f"loss must be 'mse' or 'cosine', got {loss!r}.")
    labelled = labels != IGNORE_INDEX
    targets = target_embeddings[labels.masked_fill(~labelled, 0)]
    # float32 at least: half precision squares of embedding differences lose the small ones.
    compute_dtype = torch.promote_types(definition_embeddings.dtype, torch.float32)
    predicted, targets = definition_embeddings.to(compute_dtype), targets.to(compute_dtype)
    if loss == "mse":
        distance = (predicted - targets).pow(2).sum(dim=-1)
    else:
        distance = 1.0 - nn.functional.cosine_similarity(predicted, targets, dim=-1, eps=1e-8)
    distance = distance.masked_fill(~labelled, 0.0)
    counts = labelled.sum(dim=1)
    has_targets = counts > 0
    if not bool(has_targets.any()):
        # A batch without corrupted tokens teaches nothing; a zero keeps the Trainer's backward pass valid.
        return definition_embeddings.sum().to(compute_dtype) * 0.0
    per_example = distance.sum(dim=1)[has_targets] / counts[has_targets]
    return per_example.mean()


def reader_initializer_range(reader_config: PreTrainedConfig) -> float:
    """The standard deviation the reader's own config uses for new linear layers (`initializer_range` of BERT-like
    configs, `init_std` of BART), `DEFAULT_INITIALIZER_RANGE` when it names none.

    Example:

    ```python
    >>> from transformers import BartConfig, BertConfig
    >>> bert, bart = BertConfig(initializer_range=0.03), BartConfig(init_std=0.01)
    >>> reader_initializer_range(bert), reader_initializer_range(bart)
    (0.03, 0.01)

    ```
    """
    for name in ("initializer_range", "init_std"):
        value = getattr(reader_config, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
    return DEFAULT_INITIALIZER_RANGE


class DefinitionEmbPreTrainedModel(CheckpointMixin, PreTrainedModel):
    config: DefinitionEmbConfig
    config_class = DefinitionEmbConfig
    base_model_prefix = "definition_emb"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The reader is a PreTrainedModel: transformers dispatches its own `_init_weights` to it.
        if module is getattr(self, "embedding_projection", None):
            init.normal_(module.weight, mean=0.0, std=reader_initializer_range(self.config.reader_config))
            return
        super()._init_weights(module)
        if isinstance(module, DefinitionEmbModel):
            # Only reached when a checkpoint lacks the targets (a loaded buffer is marked initialised): zeros are
            # finite, where the uninitialised memory of a meta-device load is not.
            init.zeros_(module.target_embeddings)


class DefinitionEmbModel(DefinitionEmbPreTrainedModel):
    r"""
    DefinitionEMB f = o . g: the definition reader g (the PLM's base model, `AutoModel.from_config(reader_config)`)
    and the linear map o = A (`embedding_projection`, H_s -> H_e, no bias), with the PLM's pre-trained input
    embeddings as the frozen targets (`target_embeddings`, N x H_e, a buffer: saved, never trained).

    Build one around a PLM with `from_pretrained_model`; its inputs come from
    `hf_entity_models.tasks.embeddings` (`build_definition_prompt`, `DefinitionCollator`).

    Example:

    ```python
    >>> import torch
    >>> from transformers import BertConfig
    >>> from hf_entity_models import DefinitionEmbConfig, DefinitionEmbModel

    >>> reader_config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    ...                            intermediate_size=64)
    >>> model = DefinitionEmbModel(DefinitionEmbConfig(reader_config=reader_config, embedding_size=16))
    >>> input_ids = torch.tensor([[1, 5, 4, 9, 2]])  # position 2 holds a corrupted token whose id is 7
    >>> labels = torch.tensor([[-100, -100, 7, -100, -100]])
    >>> output = model(input_ids, labels=labels)
    >>> output.definition_embeddings.shape, output.loss.shape
    (torch.Size([1, 5, 16]), torch.Size([]))

    ```
    """

    def __init__(self, config: DefinitionEmbConfig):
        super().__init__(config)
        self.reader = AutoModel.from_config(config.reader_config)
        if getattr(self.reader, "pooler", None) is not None:
            # Never read (the definition embeddings come from the last hidden states): an untrained block without
            # gradients, which distributed data parallel refuses and the parameter count would include.
            self.reader.pooler = None
        self.embedding_projection = nn.Linear(config.reader_hidden_size, config.embedding_size, bias=False)
        self.register_buffer(
            "target_embeddings", torch.zeros(config.vocab_size, config.embedding_size), persistent=True
        )
        self.post_init()
        self.apply_embedding_freeze()

    def _after_loading(self) -> None:
        # Loading replaces the parameters that `__init__` froze.
        self.apply_embedding_freeze()

    def apply_embedding_freeze(self) -> None:
        """Set `requires_grad=False` on the reader's input embeddings when `config.freeze_reader_embeddings` (the
        paper froze BART's embedding layer); BART's encoder and decoder share the matrix, so both are frozen."""
        if self.config.freeze_reader_embeddings:
            self.get_input_embeddings().weight.requires_grad_(False)

    def get_input_embeddings(self) -> nn.Module:
        """The reader's input token embeddings (the ones the reader reads the prompt with, not the targets)."""
        return self.reader.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.reader.set_input_embeddings(value)

    def resize_token_embeddings(self, *args, **kwargs):
        """Refused: the targets are the PLM's pre-trained embeddings, one per vocabulary entry, and a new token has
        none. Resize the PLM first, then build the reader with `from_pretrained_model`."""
        raise ValueError(
            "A DefinitionEmbModel cannot change its vocabulary: its targets are the PLM's pre-trained embeddings. "
            "Resize the PLM (plm.resize_token_embeddings(n)) and build a new reader with "
            "DefinitionEmbModel.from_pretrained_model(plm)."
        )

    @classmethod
    def from_pretrained_model(
        cls,
        model_or_name_or_path: PreTrainedModel | str | os.PathLike,
        reader_type: str | None = None,
        **config_overrides,
    ) -> "DefinitionEmbModel":
        """A DefinitionEMB model around a PLM: the reader starts from the PLM's base-model weights, the targets are a
        copy of its input embedding matrix, the linear map A is random.

        Args:
            model_or_name_or_path: The PLM: a loaded `PreTrainedModel` (a base model such as `BertModel`, or a task
                model such as `BertForMaskedLM` or `BartForConditionalGeneration`, whose head is left behind), or a
                Hub id / folder loaded with `AutoModel.from_pretrained`.
            reader_type: `"encoder-only"` or `"encoder-decoder"`; None infers it from the PLM's config.
            config_overrides: Other `DefinitionEmbConfig` fields (e.g. `freeze_reader_embeddings=True`).

        Raises:
            ValueError: The PLM's weights do not fit the reader built from its config (a weight missing, left over or
                of another shape), or its input embedding matrix is not N x H_e.
            TypeError: `model_or_name_or_path` is neither a PreTrainedModel nor a name or path.

        Example:

        ```python
        >>> model = DefinitionEmbModel.from_pretrained_model("FacebookAI/roberta-base")  # doctest: +SKIP
        >>> model = DefinitionEmbModel.from_pretrained_model(bart, freeze_reader_embeddings=True)  # doctest: +SKIP

        ```
        """
        if isinstance(model_or_name_or_path, PreTrainedModel):
            plm = model_or_name_or_path
            name = getattr(plm.config, "name_or_path", None) or None
            source = plm.base_model
        elif isinstance(model_or_name_or_path, (str, os.PathLike)):
            name = str(model_or_name_or_path)
            plm = source = _load_plm_base_model(name)
        else:
            raise TypeError(
                "model_or_name_or_path must be a transformers PreTrainedModel or a Hub id / folder of one, got "
                f"{type(model_or_name_or_path).__name__}."
            )
        config_overrides.setdefault("base_model_name_or_path", name)
        config = DefinitionEmbConfig(reader_config=source.config.to_dict(), reader_type=reader_type, **config_overrides)
        model = cls(config)
        description = name or type(plm).__name__
        copy_reader_weights(model.reader, source, description)
        embeddings = plm.get_input_embeddings().weight
        if tuple(embeddings.shape) != tuple(model.target_embeddings.shape):
            raise ValueError(
                f"The input embedding matrix of {description} has shape {tuple(embeddings.shape)}, but the targets "
                f"must be (vocab_size, embedding_size) = {tuple(model.target_embeddings.shape)}: leave embedding_size "
                "None (the PLM's embedding width) and keep the PLM's config.vocab_size equal to its embedding rows."
            )
        with torch.no_grad():
            model.target_embeddings.copy_(embeddings.detach().to(model.target_embeddings.dtype))
        return model

    def readout_states(self, last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The states A is applied to, one per position: the last hidden state itself (`readout="mask-slot"`), or
        the prompt's mean-pooled last hidden state (over `attention_mask`) at every position
        (`readout="pooled-definition"`, the sentence embedding of a mean-pooling sentence encoder)."""
        if self.config.readout != "pooled-definition":
            return last_hidden_state
        if attention_mask is None:
            pooled = last_hidden_state.mean(dim=1)
        else:
            weights = attention_mask.to(last_hidden_state.dtype).unsqueeze(-1)
            pooled = (last_hidden_state * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)
        return pooled.unsqueeze(1).expand_as(last_hidden_state)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
    ) -> DefinitionEmbOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                The corrupted definition prompts (encoder-only: corrupted word tokens in place; encoder-decoder: the
                source, each word span replaced by one sentinel).
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding (default: all ones).
            decoder_input_ids (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
                Encoder-decoder readers only, and required there: the target (sentinel, span, sentinel, span, ...)
                shifted right behind the decoder start token. `DefinitionCollator` builds them.
            decoder_attention_mask (`torch.Tensor` of shape `(batch_size, target_length)`, *optional*):
                1 for real decoder input positions, 0 for padding.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)` or `(batch_size, target_length)`):
                *Optional*. At a corrupted position, the original token id v (its target is
                `target_embeddings[v]`); -100 elsewhere. One label per input position (encoder-only) or per decoder
                input position (encoder-decoder).
            output_hidden_states (`bool`, *optional*):
                Also return the reader's hidden states of every layer.
        """
        config = self.config
        _check_token_ids(input_ids, "input_ids", config.vocab_size)
        _check_mask(attention_mask, input_ids, "attention_mask", "input_ids")
        if config.is_encoder_decoder_reader:
            if decoder_input_ids is None:
                raise ValueError(
                    "An encoder-decoder reader needs decoder_input_ids: the target (sentinel, span, sentinel, span, "
                    "...) shifted right behind the decoder start token. DefinitionCollator(tokenizer, "
                    "reader_type='encoder-decoder') builds them with the labels."
                )
            _check_token_ids(decoder_input_ids, "decoder_input_ids", config.vocab_size)
            _check_mask(decoder_attention_mask, decoder_input_ids, "decoder_attention_mask", "decoder_input_ids")
            reader_output = self.reader(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                decoder_attention_mask=decoder_attention_mask,
                output_hidden_states=output_hidden_states,
                use_cache=False,
            )
            hidden_states = reader_output.decoder_hidden_states
        else:
            if decoder_input_ids is not None or decoder_attention_mask is not None:
                raise ValueError(
                    "decoder_input_ids / decoder_attention_mask are for encoder-decoder readers; this reader is "
                    "encoder-only: drop them (build the batch with DefinitionCollator(tokenizer, "
                    "reader_type='encoder-only'))."
                )
            reader_output = self.reader(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states
            )
            hidden_states = reader_output.hidden_states
        states = self.readout_states(reader_output.last_hidden_state, attention_mask)  # s: (B, T or T_dec, H_s)
        definition_embeddings = self.embedding_projection(states)  # e_d = A s: (B, T or T_dec, H_e)
        loss = None
        if labels is not None:
            _check_labels(labels, tuple(states.shape[:2]), config)
            loss = definition_embedding_loss(definition_embeddings, labels, self.target_embeddings, config.loss)
        return DefinitionEmbOutput(
            loss=loss, definition_embeddings=definition_embeddings, hidden_states=hidden_states
        )


def copy_reader_weights(reader: nn.Module, source: nn.Module, description: str) -> None:
    """Load a PLM's base-model weights into the reader built from its config; refuse any mismatch.

    Every weight of the reader must come from `source` with the same shape; `source` may have more weights only in
    modules the reader lacks (a pooler or an LM head that DefinitionEMB never reads).

    Raises:
        ValueError: Naming the missing, left-over and differently shaped weights.
    """
    copy_weights(reader, source.state_dict(), description)


def _load_plm_base_model(name_or_path: str) -> PreTrainedModel:
    """The PLM's base model from a Hub id or folder, refusing a checkpoint whose weights do not fit its config (some
    missing: the reader would start partly random; some left over: layers the config drops)."""
    return load_pretrained_encoder(name_or_path, unused_prefixes=DROPPED_PLM_WEIGHT_PREFIXES)


def _check_token_ids(ids: torch.Tensor, name: str, vocab_size: int) -> None:
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch_size, length), got {tuple(ids.shape)}.")
    if 0 in ids.shape:
        # An empty batch or row would fail inside the reader's attention with an unrelated reshape error.
        raise ValueError(
            f"{name} has shape {tuple(ids.shape)}: the reader needs a batch of at least one row of at least one "
            "token; skip empty definitions before calling the model."
        )
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} must be integer token ids, got dtype {ids.dtype}.")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"{name} must be token ids in [0, {vocab_size}) (the reader's vocabulary), got values from "
            f"{int(ids.min())} to {int(ids.max())}: tokenize with the PLM's own tokenizer."
        )


def _check_mask(mask: torch.Tensor | None, ids: torch.Tensor, name: str, ids_name: str) -> None:
    if mask is not None and tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"{name} must have the shape of {ids_name} {tuple(ids.shape)}, got {tuple(mask.shape)}.")


def _check_labels(labels: torch.Tensor, expected_shape: tuple[int, int], config: DefinitionEmbConfig) -> None:
    positions = "decoder_input_ids" if config.is_encoder_decoder_reader else "input_ids"
    if tuple(labels.shape) != expected_shape:
        raise ValueError(
            f"labels must have the shape of {positions} {expected_shape} (one label per {positions} position, -100 "
            f"where there is no corrupted token), got {tuple(labels.shape)}."
        )
    invalid = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= config.vocab_size))
    if bool(invalid.any()):
        raise ValueError(
            f"labels must be token ids in [0, {config.vocab_size}) or {IGNORE_INDEX} (no corrupted token), got "
            f"{sorted(set(labels[invalid].tolist()))[:5]}."
        )


__all__ = [
    "DROPPED_PLM_WEIGHT_PREFIXES",
    "IGNORE_INDEX",
    "DefinitionEmbModel",
    "DefinitionEmbOutput",
    "DefinitionEmbPreTrainedModel",
    "copy_reader_weights",
    "definition_embedding_loss",
    "reader_initializer_range",
]
