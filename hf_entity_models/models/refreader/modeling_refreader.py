"""PyTorch Referential Reader (Liu, Zettlemoyer and Eisenstein, 2019, "The Referential Reader: A Recurrent Entity
Network for Anaphora Resolution").

It imports only torch, transformers, files of its own folder and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a checkpoint loads with
``trust_remote_code=True`` where this package is not installed.

Equation numbers refer to the paper. Shapes use B = batch, T = tokens, N = memory cells, H = hidden size,
K = key size, V = vocabulary, P = token pairs, C = candidate spans.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from hf_entity_models.models._shared.coreference_links import (
    IGNORE_INDEX,
    LINK_NEGATIVE,
    LINK_POSITIVE,
    LINK_SELF,
    LOG_EPSILON,
    active_documents_per_step,
    gather_tokens,
    packed_positions,
    unpack_steps,
)
from hf_entity_models.models._shared.document_coreference import document_head_for, reset_to_pytorch_defaults
from hf_entity_models.models._shared.memory_models import MemoryCoreferenceMixin, MemoryPreTrainedMixin
from hf_entity_models.models._shared.memory_models import check_same_shape, checked_attention_mask, scored_tokens
from hf_entity_models.models._shared.recurrence import alive_steps, gumbel_noise, run_in_chunks

from .configuration_refreader import ENCODER_KEY_SIZE, RefReaderConfig

logger = logging.get_logger(__name__)

# Largest cross-entropy of one token pair, in nats (torch's BCELoss caps its log terms the same way).
BCE_LOG_FLOOR = 100.0
# Columns of the per-step gate log, in the order the recurrence writes them (after the three per-cell blocks).
_ENTITY, _REFERENCE, _MEMORY_GATE = 0, 1, 2


@dataclass
class RefReaderModelOutput(ModelOutput):
    r"""
    Output of [`RefReaderModel`]: the hidden states and the memory log of every token.

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
            GRU states h_t after output dropout (what the LM head reads).
        entity_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
            Entity gate e_t; 0 on special tokens and padding.
        reference_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
            Reference gate r_t = sigma(phi_r . h~_t) * e_t: the token refers to an entity already in memory.
        overwrite_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_memory_cells)`):
            Overwrite gates o_t^i: the token starts a new entity in cell i.
        coref_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_memory_cells)`):
            Update gates u_t^i: the token refers to the entity stored in cell i (the paper's "update"; named like
            PeTra's coreference gates so that the pipeline and plots read both models).
        salience (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_memory_cells)`):
            Salience s_t^i after reading token t (Eq. 3).
        memory_gate (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
            c_t of Eq. 1: how much of the memory summary enters the GRU state.
        memory_keys (`torch.FloatTensor` of shape `(batch_size, num_memory_cells, key_size)`):
            Memory keys after the last token.
        memory_values (`torch.FloatTensor` of shape `(batch_size, num_memory_cells, hidden_size)`):
            Memory values after the last token.
    """

    last_hidden_state: torch.FloatTensor | None = None
    entity_probs: torch.FloatTensor | None = None
    reference_probs: torch.FloatTensor | None = None
    overwrite_probs: torch.FloatTensor | None = None
    coref_probs: torch.FloatTensor | None = None
    salience: torch.FloatTensor | None = None
    memory_gate: torch.FloatTensor | None = None
    memory_keys: torch.FloatTensor | None = None
    memory_values: torch.FloatTensor | None = None


@dataclass
class RefReaderCoreferenceOutput(ModelOutput):
    r"""
    Output of [`RefReaderForCoreference`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `link_labels` is given):
            `coref_loss + lm_loss_weight * lm_loss`.
        candidate_scores (`torch.FloatTensor` of shape `(batch_size, num_candidates)`, *optional*):
            Link probability between the pronoun and every candidate span: the maximum of Eq. 5 over their token
            pairs (a name is linked if any of its tokens is). 0 for padded candidates.
        entity_probs, reference_probs, overwrite_probs, coref_probs, salience, memory_gate:
            The memory log, as in [`RefReaderModelOutput`].
        coref_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Weighted binary cross-entropy of Eq. 5 over all token pairs of each document (section 2.4), summed
            over pairs and averaged over documents.
        lm_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Next-token cross-entropy, when `config.lm_loss_weight > 0`.
        mention_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Binary cross-entropies of the entity gate and of the overwrite share of the write against
            `mention_targets` (dense mention detection and new-entity decisions).
    """

    loss: torch.FloatTensor | None = None
    candidate_scores: torch.FloatTensor | None = None
    entity_probs: torch.FloatTensor | None = None
    reference_probs: torch.FloatTensor | None = None
    overwrite_probs: torch.FloatTensor | None = None
    coref_probs: torch.FloatTensor | None = None
    salience: torch.FloatTensor | None = None
    memory_gate: torch.FloatTensor | None = None
    coref_loss: torch.FloatTensor | None = None
    lm_loss: torch.FloatTensor | None = None
    mention_loss: torch.FloatTensor | None = None


@dataclass
class RefReaderCausalLMOutput(ModelOutput):
    r"""
    Output of [`RefReaderForCausalLM`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `labels` is given):
            Mean next-token cross-entropy (labels are shifted inside the model, as in GPT-2).
        logits (`torch.FloatTensor` of shape `(batch_size, sequence_length, vocab_size)`):
            Next-token scores P(w_{t+1} | h_t).
        entity_probs, overwrite_probs, coref_probs, salience:
            The memory log, as in [`RefReaderModelOutput`]: the LM may use the memory without coreference labels.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    entity_probs: torch.FloatTensor | None = None
    overwrite_probs: torch.FloatTensor | None = None
    coref_probs: torch.FloatTensor | None = None
    salience: torch.FloatTensor | None = None


class RefReaderPreTrainedModel(MemoryPreTrainedMixin, PreTrainedModel):
    config: RefReaderConfig
    config_class = RefReaderConfig
    base_model_prefix = "refreader"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel: transformers dispatches its own `_init_weights` to it.
        if getattr(module, "keeps_pytorch_default_init", False):  # the document-mode head
            reset_to_pytorch_defaults(module)
            return
        super()._init_weights(module)
        if isinstance(module, nn.GRUCell):
            bound = 1.0 / math.sqrt(module.hidden_size)
            for parameter in module.parameters():
                init.uniform_(parameter, -bound, bound)
        elif isinstance(module, RefReaderModel) and module.config.coreference_mode == "tokens":
            # Learned initial state, as in the authors' code (standard normal).
            init.normal_(module.initial_hidden)
            init.normal_(module.initial_keys)
            init.normal_(module.initial_values)
            init.zeros_(module.query_bias)

    def _after_loading(self) -> None:
        self.base_model.freeze_fixed_parts()  # loading replaces the parameters that __init__ froze

    def get_encoder_features(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> torch.FloatTensor:
        """As `MemoryPreTrainedMixin.get_encoder_features`; a left-padded document is encoded without its padding."""
        if self.base_model.encoder is None:
            raise ValueError("This reader is purely incremental (no encoder); it reads input_ids through embeddings.")
        order = None if attention_mask is None else real_tokens_first(attention_mask)
        if order is None:
            return super().get_encoder_features(input_ids, attention_mask)
        features = super().get_encoder_features(input_ids.gather(1, order), attention_mask.gather(1, order))
        return _gather_steps(features, order.argsort(dim=1))


class RefReaderModel(RefReaderPreTrainedModel):
    """
    The Referential Reader body: inputs x_t (own embeddings or frozen encoder features), the memory-gated GRU
    (Eq. 1) and the entity memory (section 2.2), read left to right.

    Example:

    ```python
    >>> import torch
    >>> from hf_entity_models import RefReaderConfig, RefReaderModel
    >>> config = RefReaderConfig(vocab_size=100, embedding_size=16, hidden_size=16, num_memory_cells=2)
    >>> model = RefReaderModel(config).eval()
    >>> out = model(input_ids=torch.tensor([[5, 17, 42, 8]]))
    >>> out.overwrite_probs.shape, out.salience.shape
    (torch.Size([1, 4, 2]), torch.Size([1, 4, 2]))

    ```
    """

    def __init__(self, config: RefReaderConfig):
        super().__init__(config)
        if config.uses_encoder:
            self.encoder = AutoModel.from_config(config.encoder_config)
            self.embeddings = None
        else:
            self.encoder = None
            self.embeddings = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.gumbel_temperature = float(config.gumbel_temperature)
        if config.coreference_mode == "tokens":  # the document mode's head (in the coreference class) reads the encoder
            self._build_reader(config)
        self.post_init()
        self.freeze_fixed_parts()

    def _build_reader(self, config: RefReaderConfig) -> None:
        hidden, key, cells = config.hidden_size, config.key_size, config.num_memory_cells
        self.dropout = nn.Dropout(config.dropout)
        # Pre-recurrent state h~_t = tanh(W h_{t-1} + U x_t).
        self.input_projection = nn.Linear(config.input_feature_size, hidden)
        self.recurrent_projection = nn.Linear(hidden, hidden, bias=False)
        # Gates read from h~_t: entity e_t, reference r_t, memory gate c_t (Eq. 1).
        self.entity_gate = nn.Linear(hidden, 1)
        self.reference_gate = nn.Linear(hidden, 1)
        self.memory_gate = nn.Linear(hidden, 1)
        # f_q: two-layer feed-forward query network; b: the attention bias.
        self.query_hidden = nn.Linear(hidden, key)
        self.query_output = nn.Linear(key, key)
        self.query_bias = nn.Parameter(torch.zeros(1))
        # f_k: two-layer residual tanh network; f_v: tanh(linear). Overwrite candidates.
        self.key_candidate_hidden = nn.Linear(hidden, key)
        self.key_candidate_output = nn.Linear(key, key)
        self.value_candidate = nn.Linear(hidden, hidden)
        # Update candidates GRU(candidate as input, old cell as hidden state), one call over all cells.
        self.key_update = nn.GRUCell(key, key)
        self.value_update = nn.GRUCell(hidden, hidden)
        self.gru = nn.GRUCell(config.input_feature_size, hidden)
        self.initial_hidden = nn.Parameter(torch.zeros(hidden))
        self.initial_keys = nn.Parameter(torch.zeros(cells, key))
        self.initial_values = nn.Parameter(torch.zeros(cells, hidden))

    # ------------------------------------------------------------------------------------------------ setup
    def freeze_fixed_parts(self) -> None:
        """Keep the encoder (always) and the word embeddings (with `freeze_embeddings`) out of training."""
        if self.encoder is not None:
            self.encoder.requires_grad_(False)
        if self.embeddings is not None and self.config.freeze_embeddings:
            self.embeddings.requires_grad_(False)

    def get_input_embeddings(self) -> nn.Embedding | None:
        return self.embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        if self.embeddings is None:
            raise ValueError("This reader reads encoder features and has no word embeddings to replace.")
        self.embeddings = value

    def load_word_vectors(self, vectors: torch.Tensor) -> None:
        """Initialise the word embeddings from pretrained vectors (the paper uses GloVe) of shape `(V, D_x)`.

        Example:

        ```python
        >>> import torch
        >>> model = RefReaderModel(RefReaderConfig(vocab_size=10, embedding_size=4, hidden_size=4))
        >>> model.load_word_vectors(torch.ones(10, 4))
        >>> float(model.embeddings.weight.detach().sum())
        40.0

        ```
        """
        if self.embeddings is None:
            raise ValueError("load_word_vectors needs the incremental mode; this reader reads encoder features.")
        expected = tuple(self.embeddings.weight.shape)
        if not isinstance(vectors, torch.Tensor) or tuple(vectors.shape) != expected:
            shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(vectors).__name__
            raise ValueError(f"vectors must be a tensor of shape {expected} (vocab_size, embedding_size), got {shape}.")
        if not torch.isfinite(vectors).all():
            raise ValueError("vectors contain NaN or infinite values.")
        with torch.no_grad():
            self.embeddings.weight.copy_(vectors.to(self.embeddings.weight))

    # ----------------------------------------------------------------------------------------------- inputs
    def _resolve_inputs(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        encoder_features: torch.FloatTensor | None,
    ) -> tuple[torch.FloatTensor, torch.Tensor, torch.LongTensor | None]:
        """Check the inputs and compute `x_t`, with every document's real tokens moved to its front.

        Returns the inputs `(B, T, D_x)`, the attention mask in that order, and the per-document order used (None
        when every document already starts with its real tokens, i.e. no padding or right padding).
        """
        if encoder_features is not None and self.encoder is None:
            raise ValueError("encoder_features were given, but this reader is purely incremental: pass input_ids.")
        if encoder_features is not None and input_ids is not None:
            raise ValueError("Pass either `input_ids` or `encoder_features` (cached encoder output), not both.")
        if encoder_features is None and input_ids is None:
            raise ValueError("Pass `input_ids` (or cached `encoder_features` with an encoder).")
        config = self.config
        vocab_size = config.encoder_config.vocab_size if self.encoder is not None else config.vocab_size
        attention_mask = checked_attention_mask(
            input_ids, attention_mask, encoder_features, config.input_feature_size, vocab_size
        )
        # Masked steps are no-ops (left padding, or gaps that generate() leaves after right padding): the reader
        # reads each document's real tokens as one contiguous, right-padded sequence. With an encoder this also
        # gives it the positions the unpadded text has.
        order = real_tokens_first(attention_mask)
        if order is not None:
            attention_mask = attention_mask.gather(1, order)
            if input_ids is not None:
                input_ids = input_ids.gather(1, order)
            if encoder_features is not None:
                encoder_features = _gather_steps(encoder_features, order)
        if encoder_features is None:
            if self.encoder is not None:
                encoder_features = self.get_encoder_features(input_ids, attention_mask)
            else:
                encoder_features = self.embeddings(input_ids)
        return encoder_features.to(self.input_projection.weight.dtype), attention_mask, order

    # ------------------------------------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        special_tokens_mask: torch.Tensor | None = None,
        encoder_features: torch.FloatTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> RefReaderModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Token ids: the reader's vocabulary (incremental mode) or the encoder's.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding. A masked step is a no-op: the memory and the GRU state pass it
                unchanged, so left padding (as `generate` uses for batches of prompts), right padding and gaps all
                give every document what it gives alone. Outputs at masked positions are 0.
            special_tokens_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for special tokens ([CLS], [SEP], ...), which can never be entity mentions (their e_t is 0).
            encoder_features (`torch.FloatTensor` of shape `(batch_size, sequence_length, input_feature_size)`, *optional*):
                Cached output of `get_encoder_features` (encoder mode only); skips the encoder.
            token_type_ids (`torch.LongTensor`, *optional*):
                Accepted so that tokenizer outputs can be passed as they are; must be all zeros (one text segment).
        """
        self._check_arguments(kwargs, token_type_ids)
        self._refuse_document_mode()
        inputs, attention_mask, order = self._resolve_inputs(input_ids, attention_mask, encoder_features)
        token_mask = attention_mask.bool()
        if special_tokens_mask is not None:
            check_same_shape(special_tokens_mask, attention_mask, "special_tokens_mask", "attention_mask")
            if order is not None:
                special_tokens_mask = special_tokens_mask.gather(1, order)
            token_mask = token_mask & ~special_tokens_mask.bool()
        hidden_states, log, keys, values = self._read(self.dropout(inputs), token_mask, attention_mask.sum(-1))
        if order is not None:
            # Back to the caller's positions; the masked positions receive the zeros of the padded tail.
            restore = order.argsort(dim=1)
            hidden_states, log = _gather_steps(hidden_states, restore), _gather_steps(log, restore)
        cells = self.config.num_memory_cells
        gates = log[..., 3 * cells :]
        return RefReaderModelOutput(
            last_hidden_state=self.dropout(hidden_states),
            entity_probs=gates[..., _ENTITY],
            reference_probs=gates[..., _REFERENCE],
            overwrite_probs=log[..., cells : 2 * cells],
            coref_probs=log[..., :cells],
            salience=log[..., 2 * cells : 3 * cells],
            memory_gate=gates[..., _MEMORY_GATE],
            memory_keys=keys,
            memory_values=values,
        )

    def _read(
        self, inputs: torch.Tensor, token_mask: torch.Tensor, lengths: torch.LongTensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Read the tokens left to right, all documents and memory cells at once.

        Documents are read longest first and leave the batch after their last token, so the work follows the
        number of real tokens, not batch x longest document. The input halves of the pre-recurrent state and of
        the GRU are projected for all tokens in one matmul each.

        Returns:
            GRU states `(B, T, H)`, the gate log `(B, T, 3N + 3)` (update, overwrite, salience per cell, then entity,
            reference and memory gates), and the final memory keys `(B, N, K)` and values `(B, N, H)`.
        """
        batch_size, padded_length, _ = inputs.shape
        order = torch.argsort(lengths, descending=True, stable=True)
        active_per_step = active_documents_per_step(lengths[order].tolist())
        inputs, token_mask = inputs[order], token_mask[order]

        # U x_t and the GRU's input gates for all tokens in one matmul (the largest matmul of the reader).
        input_weight = torch.cat([self.input_projection.weight, self.gru.weight_ih], dim=0)
        input_bias = torch.cat([self.input_projection.bias, self.gru.bias_ih], dim=0)
        pre_recurrent_inputs, gru_inputs = F.linear(inputs, input_weight, input_bias).split(
            [self.config.hidden_size, 3 * self.config.hidden_size], dim=-1
        )
        # Everything computed from h~_t, in one matmul per step: gates, query and key hidden layers, value candidate.
        fused_weight, fused_bias = self._fused_step_weights()

        state = self._initial_state(batch_size, inputs)
        if self.config.memory_implementation == "compiled":
            return self._read_in_chunks(state, pre_recurrent_inputs, gru_inputs, token_mask, lengths, order)
        finished: list[tuple[torch.Tensor, torch.Tensor]] = []
        hidden_log, gate_log = [], []
        steps = zip(active_per_step, pre_recurrent_inputs.unbind(1), gru_inputs.unbind(1), token_mask.unbind(1))
        for active, pre_input, gru_input, is_token in steps:
            if active < state[0].shape[0]:
                finished.append((state[1][active:], state[2][active:]))
                state = tuple(part[:active] for part in state)
            state, hidden, gates = self._step(
                state, pre_input[:active], gru_input[:active], is_token[:active], fused_weight, fused_bias
            )
            hidden_log.append(hidden)
            gate_log.append(gates)
        # Documents left the batch shortest last, so the final memories in sorted order are the reverse.
        keys = torch.cat([state[1], *(keys for keys, _ in reversed(finished))], dim=0)
        values = torch.cat([state[2], *(values for _, values in reversed(finished))], dim=0)

        unsort = torch.argsort(order)
        positions = packed_positions(active_per_step, padded_length, inputs.device)
        hidden_states = unpack_steps(hidden_log, positions, batch_size, padded_length)[unsort]
        log = unpack_steps(gate_log, positions, batch_size, padded_length)[unsort]
        return hidden_states, log, keys[unsort], values[unsort]

    def _fused_step_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Everything computed from h~_t, stacked for one matmul per step: gates, query and key hidden layers, value
        candidate."""
        readers = (self.entity_gate, self.reference_gate, self.memory_gate, self.query_hidden,
                   self.key_candidate_hidden, self.value_candidate)  # fmt: skip
        return torch.cat([layer.weight for layer in readers], dim=0), torch.cat([layer.bias for layer in readers], dim=0)

    def _read_in_chunks(
        self,
        state: tuple[torch.Tensor, ...],
        pre_recurrent_inputs: torch.Tensor,
        gru_inputs: torch.Tensor,
        token_mask: torch.Tensor,
        lengths: torch.LongTensor,
        order: torch.LongTensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`memory_implementation="compiled"`: the recurrence of `_read`, in compiled fixed-shape chunks.

        The inputs are sorted longest first (as `_read` leaves them). Every document stays in the batch for every
        step; its steps after its last token are no-ops (state carried over, outputs 0), so each chunk of
        `memory_chunk_size` steps has one shape and compiles into one graph (see `_shared/recurrence.py`). The
        Gumbel noise and the dropout masks inside the step are drawn for all tokens before the scan.
        """
        batch_size, padded_length, _ = pre_recurrent_inputs.shape
        hidden_size, key_size, cells = self.config.hidden_size, self.config.key_size, self.config.num_memory_cells
        reference = pre_recurrent_inputs
        if self.training:  # drawn in the caller's document order, then sorted like the inputs
            noise = gumbel_noise((batch_size, padded_length, cells), reference)[order]
        else:
            noise = reference.new_zeros(batch_size, padded_length, cells)
        # Dropout of h~_t, of the key candidate's hidden layer and of its residual branch, as scaled masks.
        masks = self.dropout(reference.new_ones(batch_size, padded_length, hidden_size + 2 * key_size))[order]
        alive = alive_steps(lengths[order], padded_length).to(reference.dtype)
        step_inputs = (pre_recurrent_inputs, gru_inputs, token_mask.to(reference.dtype), alive, noise, masks)
        (_, keys, values, _), log = run_in_chunks(
            _refreader_chunk, self, state, step_inputs, self.config.memory_chunk_size
        )
        unsort = torch.argsort(order)
        hidden_states, gate_log = log[unsort].split([hidden_size, log.shape[-1] - hidden_size], dim=-1)
        return hidden_states, gate_log, keys[unsort], values[unsort]

    def _fixed_shape_step(
        self,
        state: tuple[torch.Tensor, ...],
        step_inputs: tuple[torch.Tensor, ...],
        fused_weight: torch.Tensor,
        fused_bias: torch.Tensor,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """One token of every document, finished or not: `(state, [hidden; gates])`; finished documents keep their
        state and log zeros."""
        pre_input, gru_input, is_token, alive, noise, masks = step_inputs
        hidden_size, key_size = self.config.hidden_size, self.config.key_size
        dropout_masks = masks.split([hidden_size, key_size, key_size], dim=-1)
        gumbel = noise if self.training else None
        new_state, hidden, gates = self._step(
            state, pre_input, gru_input, is_token, fused_weight, fused_bias, gumbel, dropout_masks
        )
        alive = alive.unsqueeze(-1)
        kept = tuple(
            torch.where(alive.view(-1, *[1] * (new.dim() - 1)) > 0, new, old) for new, old in zip(new_state, state)
        )
        return kept, alive * torch.cat([hidden, gates], dim=-1)

    def _initial_state(self, batch_size: int, reference: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cells = self.config.num_memory_cells
        hidden = self.initial_hidden.unsqueeze(0).expand(batch_size, -1)
        keys = self.initial_keys.unsqueeze(0).expand(batch_size, -1, -1)
        values = self.initial_values.unsqueeze(0).expand(batch_size, -1, -1)
        salience = reference.new_full((batch_size, cells), self.config.initial_salience)
        return hidden, keys, values, salience

    def _step(
        self,
        state: tuple[torch.Tensor, ...],
        pre_input: torch.Tensor,
        gru_input: torch.Tensor,
        is_token: torch.Tensor,
        fused_weight: torch.Tensor,
        fused_bias: torch.Tensor,
        gumbel: torch.Tensor | None = None,
        dropout_masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor, torch.Tensor]:
        """One token for every active document: gates, salience, memory read, GRU, memory write.

        `gumbel` and `dropout_masks` (for h~_t, the key network's hidden layer and its residual branch) are drawn
        in advance by the compiled path; None draws them here, as the eager loop does.
        """
        hidden, keys, values, salience = state
        key_size, hidden_size = self.config.key_size, self.config.hidden_size
        pre_dropout, key_dropouts = (None, None) if dropout_masks is None else (dropout_masks[0], dropout_masks[1:])
        pre_recurrent = self._drop(
            torch.tanh(torch.addmm(pre_input, hidden, self.recurrent_projection.weight.t())), pre_dropout
        )
        fused = F.linear(pre_recurrent, fused_weight, fused_bias)
        gate_logits, query_hidden, key_hidden, value_logits = fused.split([3, key_size, key_size, hidden_size], -1)

        entity = torch.sigmoid(gate_logits[:, :1]) * is_token.unsqueeze(-1)  # special tokens and padding: 0
        reference = torch.sigmoid(gate_logits[:, 1:2]) * entity
        query = self.query_output(torch.tanh(query_hidden))
        scores = torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1) + self.query_bias
        attention = reference * torch.softmax(scores, dim=-1)
        update = torch.minimum(attention, 2 * salience)
        overwrite_amount = torch.clamp(entity - update.sum(-1, keepdim=True), 0.0, 1.0)
        overwrite = overwrite_amount * self._least_salient_choice(salience, gumbel)
        remember = torch.clamp(1 - update - overwrite, 0.0, 1.0)

        # Eqs. 2-3, with the decay mixed by the amount actually written (authors' code).
        written = (update + overwrite).sum(-1, keepdim=True)
        decay = written * self.config.entity_decay + (1 - written) * self.config.non_entity_decay
        salience = update + overwrite + remember * salience * decay

        # Eq. 1: the memory summary uses the new salience and the values before this token's write.
        memory_summary = torch.bmm(salience.unsqueeze(1), values).squeeze(1)
        memory_gate = torch.minimum(torch.sigmoid(gate_logits[:, 2:3]), salience.sum(-1, keepdim=True))
        mixed = (1 - memory_gate) * hidden + memory_gate * memory_summary
        hidden = _gru_cell(gru_input, mixed, self.gru)

        keys, values = self._write_memory(
            keys, values, key_hidden, value_logits, update, overwrite, remember, key_dropouts
        )
        gates = torch.cat([update, overwrite, salience, entity, reference, memory_gate], dim=-1)
        return (hidden, keys, values, salience), hidden, gates

    def _drop(self, tensor: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Dropout, or a dropout mask drawn in advance (already scaled by 1 / (1 - p))."""
        return self.dropout(tensor) if mask is None else tensor * mask

    def _least_salient_choice(self, salience: torch.Tensor, gumbel: torch.Tensor | None = None) -> torch.Tensor:
        """Which cell an overwrite goes to: Gumbel-softmax over -s in training, one-hot argmin at evaluation.

        `gumbel`: noise drawn in advance (the compiled path) instead of `F.gumbel_softmax`'s own draw.
        """
        if self.training:
            if gumbel is None:
                return F.gumbel_softmax(-salience, tau=self.gumbel_temperature, hard=False, dim=-1)
            return torch.softmax((gumbel - salience) / self.gumbel_temperature, dim=-1)
        return F.one_hot(salience.argmin(dim=-1), salience.shape[-1]).to(salience.dtype)

    def _write_memory(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        key_hidden: torch.Tensor,
        value_logits: torch.Tensor,
        update: torch.Tensor,
        overwrite: torch.Tensor,
        remember: torch.Tensor,
        key_dropouts: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Section 2.2, memory state: keep, overwrite with the candidate, or update through the GRUs (all cells)."""
        hidden_dropout, branch_dropout = (None, None) if key_dropouts is None else key_dropouts
        residual = torch.tanh(key_hidden)
        branch = torch.tanh(self.key_candidate_output(self._drop(residual, hidden_dropout)))
        key_candidate = residual + self._drop(branch, branch_dropout)
        value_candidate = torch.tanh(value_logits)
        key_updated = _gru_cell(
            F.linear(key_candidate, self.key_update.weight_ih, self.key_update.bias_ih).unsqueeze(1), keys,
            self.key_update,
        )
        value_updated = _gru_cell(
            F.linear(value_candidate, self.value_update.weight_ih, self.value_update.bias_ih).unsqueeze(1), values,
            self.value_update,
        )
        update, overwrite, remember = update.unsqueeze(-1), overwrite.unsqueeze(-1), remember.unsqueeze(-1)
        keys = update * key_updated + overwrite * key_candidate.unsqueeze(1) + remember * keys
        values = update * value_updated + overwrite * value_candidate.unsqueeze(1) + remember * values
        return keys, values


def _refreader_chunk(
    model: RefReaderModel, state: tuple[torch.Tensor, ...], chunk_inputs: tuple[torch.Tensor, ...]
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Every step of one time chunk (the function `torch.compile` traces into one graph, its loop unrolled)."""
    fused_weight, fused_bias = model._fused_step_weights()
    logs = []
    for step in range(chunk_inputs[0].shape[1]):
        state, log = model._fixed_shape_step(
            state, tuple(tensor[:, step] for tensor in chunk_inputs), fused_weight, fused_bias
        )
        logs.append(log)
    return state, torch.stack(logs, dim=1)


def real_tokens_first(attention_mask: torch.Tensor) -> torch.LongTensor | None:
    """Per-document order `(B, T)` that moves the real tokens (mask 1) to the front, keeping their order.

    None when no masked position comes before a real token (no padding, or right padding): nothing to move.

    Example:

    ```python
    >>> import torch
    >>> real_tokens_first(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 0]])).tolist()
    [[2, 3, 0, 1], [0, 1, 2, 3]]
    >>> real_tokens_first(torch.tensor([[1, 1, 0]])) is None
    True

    ```
    """
    mask = attention_mask.bool()
    if not (mask[:, 1:] & ~mask[:, :-1]).any():
        return None
    return torch.argsort((~mask).to(torch.uint8), dim=1, stable=True)


def _gather_steps(values: torch.Tensor, order: torch.LongTensor) -> torch.Tensor:
    """`values[b, order[b, t]]` for a `(B, T, D)` tensor."""
    return values.gather(1, order.unsqueeze(-1).expand(-1, -1, values.shape[-1]))


def _gru_cell(input_gates: torch.Tensor, hidden: torch.Tensor, cell: nn.GRUCell) -> torch.Tensor:
    """`cell(input, hidden)` given the input projection `W_ih x + b_ih` (precomputed, or shared by all cells).

    Same equations as `torch.nn.GRUCell`; `input_gates` broadcasts against `hidden`'s leading dimensions.
    """
    hidden_gates = F.linear(hidden, cell.weight_hh, cell.bias_hh)
    input_reset, input_update, input_new = input_gates.chunk(3, dim=-1)
    hidden_reset, hidden_update, hidden_new = hidden_gates.chunk(3, dim=-1)
    reset = torch.sigmoid(input_reset + hidden_reset)
    update = torch.sigmoid(input_update + hidden_update)
    new = torch.tanh(input_new + reset * hidden_new)
    return (1 - update) * new + update * hidden


# ----------------------------------------------------------------------------------------------- link probability
class RefReaderLinkLogProbability:
    """Log of the coreference probability of Eqs. 4-5 for any token pairs, or for all pairs at once.

    log psi(t1, t2) = logsumexp_i [ log(u + o)_{t1,i} + sum_{t1 < t < t2} log(1 - o_{t,i}) + log u_{t2,i} ]

    The product of Eq. 4 runs over the tokens strictly between the pair (authors' code: an overwrite at t2 does not
    break the link its update makes). It is a difference of one float64 cumulative sum, so a pair costs O(N).
    """

    def __init__(self, overwrite_probs: torch.Tensor, update_probs: torch.Tensor):
        self.log_write = torch.log((overwrite_probs + update_probs).clamp(LOG_EPSILON, 1.0))
        self.log_update = torch.log(update_probs.clamp(LOG_EPSILON, 1.0))
        log_keep = torch.log((1 - overwrite_probs).clamp(LOG_EPSILON, 1.0)).double()
        self.kept_through = torch.cumsum(log_keep, dim=1)  # sum over tokens <= t
        # sum over tokens < t: the same sum shifted by one token.
        self.kept_before = F.pad(self.kept_through, (0, 0, 1, 0))[:, :-1]

    def __call__(self, pairs: torch.LongTensor) -> torch.Tensor:
        """Log link probability of `pairs` `(B, P, 2)` with `pairs[..., 0] < pairs[..., 1]`; returns `(B, P)`."""
        first, second = pairs[..., 0], pairs[..., 1]
        kept = gather_tokens(self.kept_before, second) - gather_tokens(self.kept_through, first)
        per_cell = gather_tokens(self.log_write, first) + kept.to(self.log_write.dtype)
        return torch.logsumexp(per_cell + gather_tokens(self.log_update, second), dim=-1)

    def all_pairs(self) -> torch.Tensor:
        """`(B, T, T)` log link probability of every pair (t1, t2); only entries with t1 < t2 are meaningful."""
        first = self.log_write.double() - self.kept_through
        second = self.log_update.double() + self.kept_before
        return torch.logsumexp(first.unsqueeze(2) + second.unsqueeze(1), dim=-1).to(self.log_write.dtype)


# ---------------------------------------------------------------------------------------------------- heads
class RefReaderForCoreference(MemoryCoreferenceMixin, RefReaderPreTrainedModel):
    """
    The Referential Reader with the all-pairs coreference loss of section 2.4 (optionally plus the LM loss) and the
    span link probabilities used on GAP (section 3).

    Example:

    ```python
    >>> import torch
    >>> from hf_entity_models import RefReaderConfig, RefReaderForCoreference
    >>> config = RefReaderConfig(vocab_size=100, embedding_size=16, hidden_size=16)
    >>> model = RefReaderForCoreference(config).eval()
    >>> out = model(
    ...     input_ids=torch.tensor([[3, 11, 12, 40, 13, 4]]),
    ...     pronoun_spans=torch.tensor([[4, 5]]),
    ...     candidate_spans=torch.tensor([[[1, 2], [2, 3]]]),
    ... )
    >>> out.candidate_scores.shape
    torch.Size([1, 2])
    >>> model = RefReaderForCoreference.from_encoder("bert-base-cased")  # "coref + BERT", key size 32  # doctest: +SKIP

    ```
    """

    # GAP token pairs this model is trained on (see `tasks.coreference.build_link_pairs`).
    # A language-model checkpoint loaded into this head brings its `lm_head`, which this head has only with an LM loss.
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]
    gap_link_scheme = "refreader"
    _output_class = RefReaderCoreferenceOutput
    _link_log_probability_class = RefReaderLinkLogProbability
    _mention_loss_reduction = "sum_per_document"  # the link loss is summed over each document's pairs
    _encoder_config_defaults = {"key_size": ENCODER_KEY_SIZE}

    def __init__(self, config: RefReaderConfig):
        super().__init__(config)
        self.refreader = RefReaderModel(config)
        self.document_head = document_head_for(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size) if config.lm_loss_weight > 0 else None
        if self.lm_head is not None:
            # Declared per instance: the head exists only with an LM loss. transformers ties (and expects the
            # checkpoint to omit) lm_head.weight only when config.tie_word_embeddings is set.
            self._tied_weights_keys = {"lm_head.weight": "refreader.embeddings.weight"}
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear | None:
        return self.lm_head

    def _link_losses(
        self, memory_output, link_log_probs, link_pairs, link_labels, input_ids, attention_mask, special_tokens_mask
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Section 2.4: the all-pairs `coref_loss` (every other pair of real, non-special tokens is a negative of
        weight `other_pair_weight`), plus `lm_loss_weight * lm_loss` with an LM head."""
        pair_mask = scored_tokens(memory_output.entity_probs, attention_mask, special_tokens_mask)
        all_pairs = link_log_probs.all_pairs()
        coref_loss = all_pairs_coreference_loss(all_pairs, pair_mask, link_pairs, link_labels, self.config)
        if self.lm_head is None or input_ids is None:
            return coref_loss, {"coref_loss": coref_loss}
        lm_loss = next_token_loss(self.lm_head(memory_output.last_hidden_state), input_ids, attention_mask)
        return coref_loss + self.config.lm_loss_weight * lm_loss, {"coref_loss": coref_loss, "lm_loss": lm_loss}


class RefReaderForCausalLM(RefReaderPreTrainedModel, GenerationMixin):
    """
    The purely incremental Referential Reader as a language model: P(w_{t+1} | h_t) from the memory-gated GRU
    (section 2.4). Pre-train it on unlabelled text, then load the checkpoint into `RefReaderForCoreference`.

    Example:

    ```python
    >>> import torch
    >>> from hf_entity_models import RefReaderConfig, RefReaderForCausalLM
    >>> config = RefReaderConfig(vocab_size=100, embedding_size=16, hidden_size=16)
    >>> model = RefReaderForCausalLM(config)
    >>> ids = torch.tensor([[5, 17, 42, 8]])
    >>> out = model(input_ids=ids, labels=ids)
    >>> out.logits.shape, bool(out.loss > 0)
    (torch.Size([1, 4, 100]), True)

    ```
    """

    _tied_weights_keys = {"lm_head.weight": "refreader.embeddings.weight"}

    def __init__(self, config: RefReaderConfig):
        super().__init__(config)
        if config.uses_encoder:
            raise ValueError(
                "RefReaderForCausalLM needs the incremental mode (encoder_config=None): encoder features see future "
                "tokens, so next-word prediction would be trivial."
            )
        self.refreader = RefReaderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # A recurrent reader has no key/value cache for generate() to allocate.
        return False

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, attention_mask=None, **kwargs):
        # No cache: the reader re-reads the prefix at every step (GAP-sized texts are short, the recurrence cheap).
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        special_tokens_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> RefReaderCausalLMOutput:
        r"""
        Args:
            input_ids, attention_mask, special_tokens_mask, token_type_ids:
                As in [`RefReaderModel.forward`].
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Usually `input_ids`; shifted inside the model. `-100` positions are ignored, and so are positions
                where `attention_mask` is 0: they are neither predicted nor predict (see `next_token_loss`).
            num_items_in_batch (`int`, *optional*):
                Number of predicted tokens in the whole accumulated batch (the Trainer passes it): the loss is then
                summed and divided by it, so gradient accumulation gives the same loss as one large batch.
        """
        # generate() passes bookkeeping arguments the reader has no use for.
        unexpected = sorted(set(kwargs) - {"use_cache", "return_dict", "output_attentions", "output_hidden_states"})
        if unexpected:
            raise TypeError(f"RefReaderForCausalLM.forward got unexpected arguments: {unexpected}.")
        memory_output = self.refreader(
            input_ids=input_ids,
            attention_mask=attention_mask,
            special_tokens_mask=special_tokens_mask,
            token_type_ids=token_type_ids,
        )
        logits = self.lm_head(memory_output.last_hidden_state)
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(input_ids.shape):
                raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}, got {tuple(labels.shape)}.")
            loss = next_token_loss(logits, labels, attention_mask, num_items_in_batch)
        return RefReaderCausalLMOutput(
            loss=loss,
            logits=logits,
            entity_probs=memory_output.entity_probs,
            overwrite_probs=memory_output.overwrite_probs,
            coref_probs=memory_output.coref_probs,
            salience=memory_output.salience,
        )


# ----------------------------------------------------------------------------------------------------- losses
def all_pairs_coreference_loss(
    pair_log_probs: torch.Tensor,
    scored_tokens: torch.Tensor,
    link_pairs: torch.LongTensor,
    link_labels: torch.LongTensor,
    config: RefReaderConfig,
) -> torch.Tensor:
    """Section 2.4: weighted cross-entropy of Eq. 5 over every pair t1 < t2 of scored tokens, summed per document
    and averaged over documents.

    Labelled pairs take their kind's target and weight (self 0.1, positive 5, negative 50); every other pair is a
    negative of weight `other_pair_weight`.

    Args:
        pair_log_probs: `(B, T, T)` log psi for t1 < t2 (`RefReaderLinkLogProbability.all_pairs`).
        scored_tokens: `(B, T)` real, non-special tokens.
        link_pairs, link_labels: The labelled pairs (padding rows labelled -100).
        config: Supplies the weights.
    """
    batch_size, length, _ = pair_log_probs.shape
    upper = torch.ones(length, length, dtype=torch.bool, device=pair_log_probs.device).triu(1)
    scored_pairs = upper & scored_tokens.unsqueeze(2) & scored_tokens.unsqueeze(1)
    weights = scored_pairs.to(pair_log_probs.dtype) * config.other_pair_weight
    targets = torch.zeros_like(pair_log_probs)

    valid = link_labels != IGNORE_INDEX
    documents = torch.arange(batch_size, device=link_labels.device).unsqueeze(1).expand_as(link_labels)[valid]
    first = link_pairs[..., 0].minimum(link_pairs[..., 1])[valid]
    second = link_pairs[..., 0].maximum(link_pairs[..., 1])[valid]
    kinds = link_labels[valid]
    label_weights = torch.tensor(
        [config.negative_link_weight, config.positive_link_weight, config.self_link_weight],
        dtype=pair_log_probs.dtype,
        device=pair_log_probs.device,
    )
    weights = weights.index_put((documents, first, second), label_weights[kinds])
    targets = targets.index_put((documents, first, second), (kinds != LINK_NEGATIVE).to(targets.dtype))

    # Each log term is capped at -100 nats, like torch's BCELoss (the authors' criterion): one distant positive pair
    # whose link probability underflows cannot dominate the loss.
    log_prob = pair_log_probs.clamp(min=-BCE_LOG_FLOOR, max=math.log1p(-LOG_EPSILON))
    log_complement = torch.log1p(-torch.exp(log_prob)).clamp(min=-BCE_LOG_FLOOR)
    cross_entropy = -(targets * log_prob + (1 - targets) * log_complement)
    return (weights * cross_entropy).sum(dim=(1, 2)).mean()


def next_token_loss(
    logits: torch.Tensor,
    labels: torch.LongTensor,
    attention_mask: torch.Tensor | None,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Cross-entropy of predicting the next real token from each real token; -100 labels are ignored.

    Without `attention_mask`, position t predicts label t+1. With it, masked positions are no-op steps: their labels
    count as -100, they predict nothing, and a real position predicts the label of the next real position (t+1 with
    right padding). A padded document thus has the loss it has alone.

    The mean over predicted tokens, or their sum divided by `num_items_in_batch` when given (gradient accumulation).

    Example:

    ```python
    >>> import torch
    >>> logits = torch.zeros(1, 4, 5)
    >>> labels = torch.tensor([[0, 0, 3, 4]])
    >>> loss = next_token_loss(logits, labels, torch.tensor([[0, 0, 1, 1]]))  # left padding: one prediction, 3 -> 4
    >>> round(loss.item(), 4) == round(float(torch.log(torch.tensor(5.0))), 4)
    True

    ```
    """
    flat_logits = logits.reshape(-1, logits.shape[-1]).float()
    flat_targets = next_token_targets(labels, attention_mask).reshape(-1)
    if num_items_in_batch is None:
        return F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORE_INDEX)
    total = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / num_items_in_batch


def next_token_targets(labels: torch.LongTensor, attention_mask: torch.Tensor | None) -> torch.LongTensor:
    """The label each position is scored against, `(B, T)`: the next real position's label, or -100.

    Masked positions (attention_mask 0) get -100 and are skipped when looking for the next real position.
    """
    ignore = torch.full_like(labels[:, :1], IGNORE_INDEX)
    if attention_mask is None:
        return torch.cat([labels[:, 1:], ignore], dim=1)
    mask = attention_mask.bool()
    labels = labels.masked_fill(~mask, IGNORE_INDEX)
    # Real tokens first (stable): in that order the next real token is the next column; then scatter back.
    order = torch.argsort((~mask).to(torch.uint8), dim=1, stable=True)
    shifted = torch.cat([labels.gather(1, order)[:, 1:], ignore], dim=1)
    return torch.full_like(labels, IGNORE_INDEX).scatter(1, order, shifted)


__all__ = [
    "IGNORE_INDEX",
    "LINK_NEGATIVE",
    "LINK_POSITIVE",
    "LINK_SELF",
    "RefReaderCausalLMOutput",
    "RefReaderCoreferenceOutput",
    "RefReaderForCausalLM",
    "RefReaderForCoreference",
    "RefReaderLinkLogProbability",
    "RefReaderModel",
    "RefReaderModelOutput",
    "RefReaderPreTrainedModel",
    "all_pairs_coreference_loss",
    "next_token_loss",
    "next_token_targets",
    "real_tokens_first",
]
