"""PyTorch PeTra model (Toshniwal et al., 2020, "PeTra: A Sparsely Supervised Memory Model for People Tracking").

It imports only torch, transformers, files of its own folder and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a checkpoint loads with
``trust_remote_code=True`` where this package is not installed.

Equation numbers refer to the paper. Shapes use B = batch, T = tokens, N = memory cells, H = hidden size,
P = token pairs, K = candidate spans.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from hf_entity_models.models._shared.coreference_links import (
    IGNORE_INDEX,
    LINK_NEGATIVE,
    LINK_POSITIVE,
    LINK_SELF,
    LOG_EPSILON,
    active_documents_per_step,
    check_right_padding,
    gather_tokens,
    packed_positions,
    span_link_probabilities,
    unpack_steps,
)
from hf_entity_models.models._shared.document_coreference import document_head_for, reset_to_pytorch_defaults
from hf_entity_models.models._shared.memory_models import MemoryCoreferenceMixin, MemoryPreTrainedMixin
from hf_entity_models.models._shared.memory_models import check_same_shape, checked_attention_mask, scored_tokens
from hf_entity_models.models._shared.recurrence import alive_steps, gumbel_noise, run_in_chunks

from .configuration_petra import PetraConfig

logger = logging.get_logger(__name__)

# Coreference score of a never-used cell (the paper's -inf, kept finite so that softmax stays defined).
UNUSED_CELL_SCORE = -1e4
# Bonus that makes unused cells win the overwrite, ranked among themselves by similarity (authors' code).
UNUSED_CELL_OVERWRITE_BONUS = 1e5
# Tie-breaking priorities are drawn in blocks of this many tokens, so a token's draw never depends on the
# padded length of its batch.
TIE_NOISE_BLOCK_LENGTH = 256


@dataclass
class PetraModelOutput(ModelOutput):
    r"""
    Output of [`PetraModel`]: the token states and the memory log of every token.

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`):
            GRU outputs h_t (after dropout), the token representations the memory reads.
        entity_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
            Entity-mention probability e_t (Eq. 1); 0 on special tokens and padding.
        overwrite_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_memory_cells)`):
            Overwrite probability o_t^i of every cell (Eqs. 5-6).
        coref_probs (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_memory_cells)`):
            Coreference probability c_t^i of every cell (Eq. 4).
        usage (`torch.FloatTensor` of shape `(batch_size, sequence_length, num_memory_cells)`):
            Usage scalar u_t^i after reading token t (Eq. 8).
        memory (`torch.FloatTensor` of shape `(batch_size, num_memory_cells, hidden_size)`):
            Memory cell vectors after the last token.
    """

    last_hidden_state: torch.FloatTensor | None = None
    entity_probs: torch.FloatTensor | None = None
    overwrite_probs: torch.FloatTensor | None = None
    coref_probs: torch.FloatTensor | None = None
    usage: torch.FloatTensor | None = None
    memory: torch.FloatTensor | None = None


@dataclass
class PetraCoreferenceOutput(ModelOutput):
    r"""
    Output of [`PetraForCoreference`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `link_labels` is given):
            `coref_loss + entity_loss_weight * entity_loss`, plus `mention_loss_weight * mention_loss` when
            `mention_targets` is given.
        candidate_scores (`torch.FloatTensor` of shape `(batch_size, num_candidates)`, *optional*):
            Span link probability between the pronoun and every candidate span: the maximum of Eq. 9 over their
            token pairs (paper section 3.5). 0 for padded candidates. Compare with `config.coref_threshold`.
        entity_probs, overwrite_probs, coref_probs, usage, memory:
            The memory log, as in [`PetraModelOutput`].
        coref_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Weighted binary cross-entropy of the labelled links (section 2.5.1), normalised by the total weight.
        entity_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Mean entity probability of unlabelled, non-special tokens (section 2.5.2), averaged over documents.
        mention_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Binary cross-entropies of e_t and of the new-entity share of the write against `mention_targets` (dense
            mention detection and new-entity decisions, CoNLL training).
    """

    loss: torch.FloatTensor | None = None
    candidate_scores: torch.FloatTensor | None = None
    entity_probs: torch.FloatTensor | None = None
    overwrite_probs: torch.FloatTensor | None = None
    coref_probs: torch.FloatTensor | None = None
    usage: torch.FloatTensor | None = None
    memory: torch.FloatTensor | None = None
    coref_loss: torch.FloatTensor | None = None
    entity_loss: torch.FloatTensor | None = None
    mention_loss: torch.FloatTensor | None = None


class PetraMLP(nn.Module):
    """Two ReLU hidden layers then a linear output, the shape of the paper's MLP1-3."""

    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.input_layer = nn.Linear(input_size, hidden_size)
        self.hidden_layer = nn.Linear(hidden_size, hidden_size)
        self.output_layer = nn.Linear(hidden_size, output_size)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.from_input_projection(self.input_layer(inputs))

    def from_input_projection(self, projected: torch.Tensor) -> torch.Tensor:
        """Finish the MLP from the pre-activation of its first layer.

        The memory step assembles that pre-activation from parts (the token part is computed for all tokens at
        once), which avoids concatenating `[h; m; ...]` for every cell at every step.
        """
        return self.output_layer(F.relu(self.hidden_layer(F.relu(projected))))


class PetraTanhLinear(nn.Module):
    """`tanh(Linear(inputs))`: the coreference update (MLP3, Eq. 7) of the authors' code (`coref_update_mlp`)."""

    def __init__(self, input_size: int, output_size: int):
        super().__init__()
        self.input_layer = nn.Linear(input_size, output_size)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.from_input_projection(self.input_layer(inputs))

    def from_input_projection(self, projected: torch.Tensor) -> torch.Tensor:
        """Finish from the pre-activation of the linear layer (see `PetraMLP.from_input_projection`)."""
        return torch.tanh(projected)


class PetraPreTrainedModel(MemoryPreTrainedMixin, PreTrainedModel):
    config: PetraConfig
    config_class = PetraConfig
    base_model_prefix = "petra"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel: transformers dispatches its own `_init_weights` to it, so the linear
        # layers seen here are PeTra's own. The `init` functions skip tensors loaded from a checkpoint.
        if getattr(module, "keeps_pytorch_default_init", False):  # the document-mode head
            reset_to_pytorch_defaults(module)
            return
        if isinstance(module, nn.Linear) and self.config.linear_init == "pytorch_default":
            # What `nn.Linear.reset_parameters` does: weights and biases uniform in +-1/sqrt(fan_in).
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))
            if module.bias is not None:
                bound = 1.0 / math.sqrt(module.in_features) if module.in_features > 0 else 0.0
                init.uniform_(module.bias, -bound, bound)
            return
        super()._init_weights(module)
        if isinstance(module, nn.GRU):
            bound = 1.0 / math.sqrt(module.hidden_size)
            for parameter in module.parameters():
                init.uniform_(parameter, -bound, bound)
        elif isinstance(module, PetraModel):
            # The paper's variants start from zero-initialised parameters (authors' code).
            if module.memory_init is not None:
                init.zeros_(module.memory_init)
            if module.memory_key is not None:
                init.zeros_(module.memory_key)

    def _after_loading(self) -> None:
        self.base_model.freeze_encoder_parts()  # loading replaces the parameters that __init__ froze


class PetraModel(PetraPreTrainedModel):
    """
    The PeTra encoder + memory: a (frozen) pretrained encoder, a left-to-right GRU and the memory module.

    Example:

    ```python
    >>> import torch
    >>> from transformers import BertConfig
    >>> from hf_entity_models import PetraConfig, PetraModel

    >>> encoder_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    >>> config = PetraConfig(encoder_config=encoder_config, encoder_layers=[-2, -1], hidden_size=16, mlp_hidden_size=16)
    >>> model = PetraModel(config)
    >>> out = model(input_ids=torch.tensor([[101, 2198, 2001, 2182, 102]]))
    >>> out.overwrite_probs.shape
    torch.Size([1, 5, 10])

    ```
    """

    def __init__(self, config: PetraConfig):
        super().__init__(config)
        self.encoder = AutoModel.from_config(config.encoder_config)
        self.gumbel_temperature = float(config.gumbel_temperature)
        self.memory_init = self.memory_key = None
        if config.coreference_mode == "tokens":  # the document mode's head (in PetraForCoreference) reads the encoder
            self._build_token_memory(config)
        self.freeze_encoder_parts()
        self.post_init()

    def _build_token_memory(self, config: PetraConfig) -> None:
        self.gru = nn.GRU(config.encoder_feature_size, config.hidden_size, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)
        hidden, mlp = config.hidden_size, config.mlp_hidden_size
        self.entity_mlp = PetraMLP(hidden, mlp, 1)  # MLP1, Eq. 1
        self.similarity_mlp = PetraMLP(3 * hidden + 1, mlp, 1)  # MLP2 over [h; m; h*m; u], Eq. 2
        # MLP3 over [h; m], Eq. 7: two ReLU layers, or tanh(linear) as in the authors' code.
        if config.coref_update_mlp == "tanh_linear":
            self.coref_update_mlp = PetraTanhLinear(2 * hidden, self.value_size)
        else:
            self.coref_update_mlp = PetraMLP(2 * hidden, mlp, self.value_size)
        self.memory_init = (
            nn.Parameter(torch.zeros(config.num_memory_cells, hidden))
            if config.memory_variant == "learned_init"
            else None
        )
        self.memory_key = (
            nn.Parameter(torch.zeros(config.num_memory_cells, config.key_size))
            if config.memory_variant == "fixed_key"
            else None
        )

    def freeze_encoder_parts(self) -> None:
        """Stop gradients to the encoder (`freeze_encoder`), or to all but its top `trainable_encoder_layers`."""
        if self.config.freeze_encoder:
            self.encoder.requires_grad_(False)
            return
        if self.config.trainable_encoder_layers is None:
            return
        self.encoder.requires_grad_(False)
        layers = _transformer_layers(self.encoder, self.config.encoder_config.num_hidden_layers)
        for layer in layers[len(layers) - self.config.trainable_encoder_layers :]:
            layer.requires_grad_(True)

    @property
    def key_size(self) -> int:
        """Dimensions of every cell that stay fixed during a document (0 unless the fixed_key variant)."""
        return self.config.key_size if self.config.memory_variant == "fixed_key" else 0

    @property
    def value_size(self) -> int:
        """Dimensions of every cell that overwrites and coreference updates write to."""
        return self.config.hidden_size - self.key_size

    # ------------------------------------------------------------------------------------------------ memory
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        special_tokens_mask: torch.Tensor | None = None,
        encoder_features: torch.FloatTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> PetraModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Token ids for the encoder. Pass either `input_ids` or `encoder_features`.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding. Padding must be on the right: the memory reads left to right.
            special_tokens_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for special tokens ([CLS], [SEP], ...), which can never be entity mentions. Tokenizers return it
                with `return_special_tokens_mask=True`.
            encoder_features (`torch.FloatTensor` of shape `(batch_size, sequence_length, encoder_feature_size)`, *optional*):
                Cached output of `get_encoder_features`; skips the encoder (a frozen encoder gives the same
                features every epoch).
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Accepted so that tokenizer outputs can be passed as they are. PeTra reads one text segment, so
                they must be all zeros (the encoder's default).
        """
        self._check_arguments(kwargs, token_type_ids)
        self._refuse_document_mode()
        features, attention_mask = self._resolve_features(input_ids, attention_mask, encoder_features)
        token_mask = attention_mask.bool()
        if special_tokens_mask is not None:
            check_same_shape(special_tokens_mask, attention_mask, "special_tokens_mask", "attention_mask")
            token_mask = token_mask & ~special_tokens_mask.bool()

        hidden_states = self.dropout(self.gru(features)[0])
        entity_logits = self.entity_mlp(hidden_states).squeeze(-1)
        entity_probs = torch.where(token_mask, torch.sigmoid(entity_logits), torch.zeros_like(entity_logits))
        lengths = attention_mask.sum(-1)
        overwrite_probs, coref_probs, usage, memory = self._run_memory(hidden_states, entity_probs, lengths)
        return PetraModelOutput(
            last_hidden_state=hidden_states,
            entity_probs=entity_probs,
            overwrite_probs=overwrite_probs,
            coref_probs=coref_probs,
            usage=usage,
            memory=memory,
        )

    def _resolve_features(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        encoder_features: torch.FloatTensor | None,
    ) -> tuple[torch.FloatTensor, torch.Tensor]:
        if (input_ids is None) == (encoder_features is None):
            raise ValueError("Pass exactly one of `input_ids` or `encoder_features` (cached encoder output).")
        attention_mask = checked_attention_mask(
            input_ids, attention_mask, encoder_features, self.config.encoder_feature_size,
            getattr(self.config.encoder_config, "vocab_size", None),
        )  # fmt: skip
        check_right_padding(attention_mask)
        if encoder_features is None:
            encoder_features = self.get_encoder_features(input_ids, attention_mask)
        return encoder_features.to(self.gru.weight_ih_l0.dtype), attention_mask

    def _initial_memory(self, batch_size: int, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        num_cells, hidden = self.config.num_memory_cells, self.config.hidden_size
        if self.memory_init is not None:
            memory = self.memory_init.unsqueeze(0).expand(batch_size, -1, -1)
        elif self.memory_key is not None:
            values = reference.new_zeros(batch_size, num_cells, self.value_size)
            memory = torch.cat([self.memory_key.unsqueeze(0).expand(batch_size, -1, -1), values], dim=-1)
        else:
            memory = reference.new_zeros(batch_size, num_cells, hidden)
        usage = reference.new_zeros(batch_size, num_cells)
        return memory, usage

    def _run_memory(
        self, hidden_states: torch.Tensor, entity_probs: torch.Tensor, lengths: torch.LongTensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Read the tokens left to right, updating every cell of every document at once (Eqs. 2-8).

        Documents are read longest first and each one leaves the batch after its last token, so the work follows
        the number of real tokens rather than batch size x longest document. Padding positions of the returned
        logs are zeros.
        """
        if self.config.memory_implementation == "compiled":
            return self._run_memory_in_chunks(hidden_states, entity_probs, lengths)
        batch_size, padded_length, hidden = hidden_states.shape
        order = torch.argsort(lengths, descending=True, stable=True)
        active_per_step = active_documents_per_step(lengths[order].tolist())
        hidden_states, entity_probs = hidden_states[order], entity_probs[order]
        memory, usage = self._initial_memory(batch_size, hidden_states)

        token_projection_sim, token_projection_update = self._token_projections(hidden_states)
        weights = self._memory_projection_weights()
        tie_noise = self._tie_breaking_noise(batch_size, padded_length, hidden_states)
        tie_noise_steps = tie_noise[order].unbind(1) if tie_noise is not None else [None] * padded_length

        # unbind once instead of indexing a step at a time: the backward of per-step indexing would allocate and
        # zero-fill a full (B, T, .) gradient for every token.
        steps = zip(
            active_per_step,
            hidden_states.unsqueeze(2).unbind(1),
            token_projection_sim.unsqueeze(2).unbind(1),
            token_projection_update.unsqueeze(2).unbind(1),
            entity_probs.unbind(1),
            tie_noise_steps,
        )
        finished_memories, overwrites, corefs, usages = [], [], [], []
        for active, token, token_sim, token_update, entity_prob, noise in steps:  # token: (B, 1, H)
            if active < memory.shape[0]:
                finished_memories.append(memory[active:])
                memory, usage = memory[:active], usage[:active]
            memory, usage, overwrite, coref = self._step(
                memory, usage, token[:active], token_sim[:active], token_update[:active], entity_prob[:active], weights,
                noise[:active] if noise is not None else None,
            )  # fmt: skip
            overwrites.append(overwrite)
            corefs.append(coref)
            usages.append(usage)
        # Documents left the batch shortest last, so the final memories in sorted order are the reverse.
        final_memory = torch.cat([memory, *reversed(finished_memories)], dim=0)

        unsort = torch.argsort(order)
        positions = packed_positions(active_per_step, padded_length, hidden_states.device)
        logs = [
            unpack_steps(log, positions, batch_size, padded_length)[unsort] for log in (overwrites, corefs, usages)
        ]
        return logs[0], logs[1], logs[2], final_memory[unsort]

    def _token_projections(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The token parts of the first layers of MLP2 and MLP3, for all tokens in one matmul each.

        Those layers are linear in `[h; m; h*m; u]` and `[h; m]`: the token part is computed once here, and the
        memory parts of both MLPs together at every step (`_memory_projection_weights`).
        """
        hidden = self.config.hidden_size
        sim_layer, update_layer = self.similarity_mlp.input_layer, self.coref_update_mlp.input_layer
        token_projection_sim = F.linear(hidden_states, sim_layer.weight[:, :hidden], sim_layer.bias)
        token_projection_update = F.linear(hidden_states, update_layer.weight[:, :hidden], update_layer.bias)
        return token_projection_sim, token_projection_update

    def _memory_projection_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Weights of the memory parts of MLP2 and MLP3 (stacked), of the `h * m` part and of the usage input."""
        hidden = self.config.hidden_size
        sim_weight = self.similarity_mlp.input_layer.weight
        update_weight = self.coref_update_mlp.input_layer.weight
        memory_weight = torch.cat([sim_weight[:, hidden : 2 * hidden], update_weight[:, hidden:]], dim=0)
        return memory_weight, sim_weight[:, 2 * hidden : 3 * hidden], sim_weight[:, 3 * hidden]

    def _run_memory_in_chunks(
        self, hidden_states: torch.Tensor, entity_probs: torch.Tensor, lengths: torch.LongTensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`memory_implementation="compiled"`: the same recurrence as `_run_memory`, in compiled fixed-shape chunks.

        Every document stays in the batch for every step (its steps after its last token are no-ops), so each
        chunk of `memory_chunk_size` steps has one shape and compiles into one graph (see `_shared/recurrence.py`).
        Gumbel noise (training) and tie-breaking noise (evaluation) are drawn for all tokens before the scan.
        """
        batch_size, padded_length, _ = hidden_states.shape
        cells = self.config.num_memory_cells
        if self.training:
            noise = gumbel_noise((batch_size, padded_length, cells), hidden_states)
        else:
            noise = self._tie_breaking_noise(batch_size, padded_length, hidden_states)
            if noise is None:
                noise = hidden_states.new_zeros(batch_size, padded_length, cells)
        token_projection_sim, token_projection_update = self._token_projections(hidden_states)
        alive = alive_steps(lengths, padded_length)
        step_inputs = (
            hidden_states, token_projection_sim, token_projection_update, entity_probs, alive.to(hidden_states.dtype),
            noise,
        )  # fmt: skip
        state = self._initial_memory(batch_size, hidden_states)
        (memory, _), log = run_in_chunks(_petra_memory_chunk, self, state, step_inputs, self.config.memory_chunk_size)
        overwrite_probs, coref_probs, usage = log.split(cells, dim=-1)
        return overwrite_probs, coref_probs, usage, memory

    def _fixed_shape_step(
        self,
        memory: torch.Tensor,
        usage: torch.Tensor,
        step_inputs: tuple[torch.Tensor, ...],
        weights: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One token of every document of the batch, finished or not (Eqs. 2-8): `(memory, usage, log)`.

        `log` is `[overwrite; coref; usage]` `(B, 3N)`. A finished document (`alive` 0) has entity probability 0,
        hence no overwrite and no coreference; its memory and usage are carried over unchanged and its log is 0.
        """
        token, token_sim, token_update, entity_prob, alive, noise = step_inputs
        tie_noise = noise if not self.training and self.config.overwrite_tie_breaking == "random" else None
        memory, new_usage, overwrite, coref = self._step(
            memory, usage, token.unsqueeze(1), token_sim.unsqueeze(1), token_update.unsqueeze(1), entity_prob, weights,
            tie_noise, gumbel=noise if self.training else None,
        )  # fmt: skip
        alive = alive.unsqueeze(-1)
        usage = alive * new_usage + (1 - alive) * usage
        return memory, usage, torch.cat([overwrite, coref, alive * usage], dim=-1)

    def _step(
        self, memory, usage, token, token_sim, token_update, entity_prob, weights, tie_noise=None, gumbel=None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One token of every document in `memory` `(B, N, H)` (Eqs. 2-8): `(memory, usage, overwrite, coref)`.

        `token`, `token_sim`, `token_update`: the token `(B, 1, H)` and its parts of MLP2 and MLP3
        (`_token_projections`); `weights`: `_memory_projection_weights()`; `tie_noise`, `gumbel`: see
        `_overwrite_choice`.
        """
        memory_weight, product_weight, usage_weight = weights
        mlp_size = product_weight.shape[0]
        memory_projection = F.linear(memory, memory_weight)
        similarity = self.similarity_mlp.from_input_projection(
            token_sim
            + memory_projection[..., :mlp_size]
            + F.linear(token * memory, product_weight)
            + usage.unsqueeze(-1) * usage_weight
        ).squeeze(-1)  # Eq. 2, (B, N)
        unused = usage == 0
        coref, new_entity = self._coref_and_new_entity(similarity, unused, entity_prob)
        overwrite = new_entity * self._overwrite_choice(similarity, usage, unused, tie_noise, gumbel)
        update = self.coref_update_mlp.from_input_projection(token_update + memory_projection[..., mlp_size:])
        memory = self._update_memory(memory, token, update, overwrite, coref)
        usage = torch.clamp(overwrite + coref + self.config.usage_decay * usage, max=1.0)  # Eq. 8
        return memory, usage, overwrite, coref

    @staticmethod
    def _coref_and_new_entity(
        similarity: torch.Tensor, unused: torch.Tensor, entity_prob: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eqs. 3-4: coreference with a used cell, or a new entity (score fixed at 0), scaled by e_t."""
        coref_scores = similarity.masked_fill(unused, UNUSED_CELL_SCORE)
        scores = torch.cat([coref_scores, coref_scores.new_zeros(coref_scores.shape[0], 1)], dim=-1)
        probabilities = entity_prob.unsqueeze(-1) * torch.softmax(scores, dim=-1)
        return probabilities[:, :-1], probabilities[:, -1:]

    def _tie_breaking_noise(self, batch_size: int, length: int, reference: torch.Tensor) -> torch.Tensor | None:
        """Random priorities `(B, T, N)` for `overwrite_tie_breaking="random"` at evaluation, else None.

        The priorities depend only on the token position and `config.overwrite_tie_seed`: a generator seeded at
        every call draws blocks of a fixed shape, and every document of the batch reads the same rows. So a
        document gets the same choices alone or in any batch, at any padded length and on any device, and the global
        random state is left alone.
        """
        if self.training or self.config.overwrite_tie_breaking != "random":
            return None
        # Drawn on the CPU whatever the model's device: a CUDA generator seeded alike draws other numbers, and the
        # model would choose other cells on a GPU than on the CPU.
        generator = torch.Generator(device="cpu")
        generator.manual_seed(int(self.config.overwrite_tie_seed))
        block_shape = (TIE_NOISE_BLOCK_LENGTH, self.config.num_memory_cells)
        blocks = [
            torch.rand(block_shape, generator=generator, dtype=reference.dtype)
            for _ in range(-(-length // TIE_NOISE_BLOCK_LENGTH))
        ]
        noise = torch.cat(blocks)[:length].to(reference.device)
        return noise.expand(batch_size, -1, -1).contiguous()

    def _overwrite_choice(
        self,
        similarity: torch.Tensor,
        usage: torch.Tensor,
        unused: torch.Tensor,
        tie_noise: torch.Tensor | None = None,
        gumbel: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Eqs. 5-6: which cell a new entity goes to: least used, unused cells first, ties broken by similarity.

        The preference of a cell is `(1 - u) + 1e5 [u = 0] softmax(sim)` (authors' code). Training: a soft
        Gumbel-softmax sample over its log. Evaluation: a one-hot on the most preferred cell; among cells whose
        preferences are exactly equal, the first one (`overwrite_tie_breaking="first"`, an argmax over the clamped
        log preference) or the one with the highest `tie_noise` (`"random"`). `gumbel`: Gumbel noise drawn in
        advance (the compiled path), used instead of `F.gumbel_softmax`'s own draw.
        """
        preference = (1 - usage) + UNUSED_CELL_OVERWRITE_BONUS * unused * torch.softmax(similarity, dim=-1)
        logits = torch.log(preference.clamp_min(LOG_EPSILON))
        if self.training:
            if gumbel is None:
                return F.gumbel_softmax(logits, tau=self.gumbel_temperature, hard=False, dim=-1)
            return torch.softmax((logits + gumbel) / self.gumbel_temperature, dim=-1)  # noise drawn before the scan
        if tie_noise is None:
            choice = logits.argmax(dim=-1)
        else:
            # The same tied set that "first" picks the lowest index of: equal clamped log preferences.
            tied = logits == logits.max(dim=-1, keepdim=True).values
            choice = torch.where(tied, tie_noise, torch.full_like(tie_noise, -1.0)).argmax(dim=-1)
        return F.one_hot(choice, logits.shape[-1]).to(logits.dtype)

    def _update_memory(
        self,
        memory: torch.Tensor,
        token: torch.Tensor,
        update: torch.Tensor,
        overwrite: torch.Tensor,
        coref: torch.Tensor,
    ) -> torch.Tensor:
        """Eq. 7: ignore, overwrite with h_t, or merge via MLP3; fixed keys are never written."""
        keys, values = memory[..., : self.key_size], memory[..., self.key_size :]
        overwrite, coref = overwrite.unsqueeze(-1), coref.unsqueeze(-1)
        values = (1 - overwrite - coref) * values + overwrite * token[..., self.key_size :] + coref * update
        return torch.cat([keys, values], dim=-1) if self.key_size else values


class LinkLogProbability:
    """Log of the coreference link probability of Eq. 9 for any set of token pairs.

    log P(t1, t2) = logsumexp_i [ log(o+c)_{t1,i} + sum_{t1<j<=t2} log(1 - o_{j,i}) + log c_{t2,i} ]

    The product over the tokens between the pair is a difference of one cumulative sum, so a pair costs O(N)
    whatever its distance, and only the requested pairs are gathered (no B x T x T x N tensor).
    """

    def __init__(self, overwrite_probs: torch.Tensor, coref_probs: torch.Tensor):
        self.log_write = torch.log((overwrite_probs + coref_probs).clamp_min(LOG_EPSILON))
        self.log_coref = torch.log(coref_probs.clamp_min(LOG_EPSILON))
        # float64 keeps the difference of two long cumulative sums exact enough for long documents.
        log_keep = torch.log((1 - overwrite_probs).clamp_min(LOG_EPSILON)).double()
        self.cumulative_log_keep = torch.cumsum(log_keep, dim=1)

    def __call__(self, pairs: torch.LongTensor) -> torch.Tensor:
        """Log link probability of `pairs` `(B, P, 2)` with `pairs[..., 0] < pairs[..., 1]`; returns `(B, P)`."""
        first, second = pairs[..., 0], pairs[..., 1]
        kept = gather_tokens(self.cumulative_log_keep, second) - gather_tokens(self.cumulative_log_keep, first)
        per_cell = gather_tokens(self.log_write, first) + kept.to(self.log_write.dtype)
        per_cell = per_cell + gather_tokens(self.log_coref, second)
        return torch.logsumexp(per_cell, dim=-1)


class PetraForCoreference(MemoryCoreferenceMixin, PetraPreTrainedModel):
    """
    PeTra with the coreference losses of section 2.5 and the span link probabilities used for GAP (section 3.5).

    Example:

    ```python
    >>> import torch
    >>> from transformers import BertConfig
    >>> from hf_entity_models import PetraConfig, PetraForCoreference

    >>> encoder_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    >>> config = PetraConfig(encoder_config=encoder_config, encoder_layers=[-2, -1], hidden_size=16, mlp_hidden_size=16)
    >>> model = PetraForCoreference(config)
    >>> out = model(
    ...     input_ids=torch.tensor([[101, 2198, 2056, 2002, 2001, 102]]),
    ...     pronoun_spans=torch.tensor([[3, 4]]),
    ...     candidate_spans=torch.tensor([[[1, 2], [2, 3]]]),
    ... )
    >>> out.candidate_scores.shape
    torch.Size([1, 2])
    >>> model = PetraForCoreference.from_encoder("bert-base-cased", num_memory_cells=8)  # doctest: +SKIP

    ```
    """

    # GAP token pairs this model is trained on (see `tasks.coreference.build_link_pairs`).
    gap_link_scheme = "petra"
    _output_class = PetraCoreferenceOutput
    _link_log_probability_class = LinkLogProbability

    def __init__(self, config: PetraConfig):
        super().__init__(config)
        self.petra = PetraModel(config)
        self.document_head = document_head_for(config)
        self.post_init()

    def _link_losses(
        self, memory_output, link_log_probs, link_pairs, link_labels, input_ids, attention_mask, special_tokens_mask
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Section 2.5: `coref_loss + entity_loss_weight * entity_loss`."""
        coref_loss = self._coref_loss(link_log_probs, link_pairs, link_labels)
        entity_loss = self._entity_loss(memory_output.entity_probs, attention_mask, special_tokens_mask, link_pairs)
        loss = coref_loss + self.config.entity_loss_weight * entity_loss
        return loss, {"coref_loss": coref_loss, "entity_loss": entity_loss}

    def _coref_loss(
        self, link_log_probs: "LinkLogProbability", link_pairs: torch.LongTensor, link_labels: torch.LongTensor
    ) -> torch.Tensor:
        """Section 2.5.1: weighted binary cross-entropy between labels and Eq. 9, normalised by total weight.

        `config.coref_loss="cross_entropy"` is the cross-entropy on P itself; `"bce_with_logits_of_log_p"` feeds
        log P to a BCE-with-logits as the authors' code does (a cross-entropy on P / (1 + P)).
        """
        valid = link_labels != IGNORE_INDEX
        safe_pairs = torch.where(valid.unsqueeze(-1), link_pairs, torch.zeros_like(link_pairs))
        safe_pairs = torch.stack([safe_pairs.min(-1).values, safe_pairs.max(-1).values], dim=-1)
        safe_pairs[..., 1] = torch.where(valid, safe_pairs[..., 1], torch.ones_like(safe_pairs[..., 1]))
        log_prob = link_log_probs(safe_pairs)
        log_prob = log_prob.clamp(max=math.log1p(-LOG_EPSILON))
        targets = (link_labels == LINK_POSITIVE) | (link_labels == LINK_SELF)
        cross_entropy = pair_coref_loss(log_prob, targets, self.config.coref_loss)
        weights = torch.zeros_like(cross_entropy)
        weights = torch.where(link_labels == LINK_SELF, self.config.self_link_weight, weights)
        weights = torch.where(link_labels == LINK_POSITIVE, self.config.positive_link_weight, weights)
        weights = torch.where(link_labels == LINK_NEGATIVE, self.config.negative_link_weight, weights)
        total_weight = weights.sum()
        if total_weight == 0:
            return cross_entropy.sum() * 0.0
        return (weights * cross_entropy).sum() / total_weight

    def _entity_loss(
        self,
        entity_probs: torch.Tensor,
        attention_mask: torch.Tensor | None,
        special_tokens_mask: torch.Tensor | None,
        link_pairs: torch.LongTensor,
    ) -> torch.Tensor:
        """Section 2.5.2: mean e_t over tokens outside the labelled spans (every span token is in some pair).

        `config.entity_loss_reduction="per_document"` averages each document, then the documents; `"per_token"`
        pools the unlabelled tokens of the whole batch (authors' code).
        """
        unlabelled = scored_tokens(entity_probs, attention_mask, special_tokens_mask)
        pair_tokens = link_pairs.flatten(1)
        # scatter_add (not scatter) so that padding rows, sent to token 0, cannot erase a real label at token 0.
        labelled = torch.zeros_like(entity_probs, dtype=torch.long)
        labelled.scatter_add_(1, pair_tokens.clamp_min(0), (pair_tokens >= 0).long())
        unlabelled &= labelled == 0
        counts = unlabelled.sum(-1)
        has_tokens = counts > 0
        if not has_tokens.any():
            return entity_probs.sum() * 0.0
        sums = (entity_probs * unlabelled).sum(-1)
        if self.config.entity_loss_reduction == "per_token":
            return sums.sum() / counts.sum()
        per_document = sums / counts.clamp_min(1)
        return per_document[has_tokens].mean()


def _petra_memory_chunk(
    model: PetraModel, state: tuple[torch.Tensor, torch.Tensor], chunk_inputs: tuple[torch.Tensor, ...]
) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Every step of one time chunk (the function `torch.compile` traces into one graph, its loop unrolled)."""
    memory, usage = state
    weights = model._memory_projection_weights()
    logs = []
    for step in range(chunk_inputs[0].shape[1]):
        memory, usage, log = model._fixed_shape_step(
            memory, usage, tuple(tensor[:, step] for tensor in chunk_inputs), weights
        )
        logs.append(log)
    return (memory, usage), torch.stack(logs, dim=1)


def pair_coref_loss(log_prob: torch.Tensor, targets: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
    """Unweighted loss of every labelled pair from its log link probability `log P` (< 0) and its label.

    `"cross_entropy"`: `-log P` for a positive pair, `-log(1 - P)` for a negative one (paper, section 2.5.1).
    `"bce_with_logits_of_log_p"`: `log P` taken as a logit (authors' code): `-log(P / (1 + P))` for a positive
    pair, `log(1 + P)` for a negative one.
    """
    if kind == "bce_with_logits_of_log_p":
        return F.binary_cross_entropy_with_logits(log_prob, targets.to(log_prob.dtype), reduction="none")
    if kind != "cross_entropy":
        raise ValueError(f"Unknown coreference loss {kind!r}; choose 'cross_entropy' or 'bce_with_logits_of_log_p'.")
    # log(1 - P) as log(-expm1(log P)), evaluated only where it is used: a positive pair whose P rounds to 1 would
    # otherwise send 0 * inf = NaN back through the unused branch.
    negative_log_prob = torch.where(targets, torch.full_like(log_prob, -1.0), log_prob)
    log_complement = torch.log(-torch.expm1(negative_log_prob))
    return -torch.where(targets, log_prob, log_complement)


def _transformer_layers(encoder: nn.Module, num_layers: int) -> nn.ModuleList:
    """The encoder's stack of transformer layers (BERT's `encoder.layer`): its ModuleList of `num_layers` blocks."""
    for module in encoder.modules():
        if isinstance(module, nn.ModuleList) and len(module) == num_layers:
            return module
    raise ValueError(
        f"Cannot find the {num_layers} transformer layers of the {type(encoder).__name__} encoder to fine-tune the "
        "top ones; set trainable_encoder_layers=None to fine-tune the whole encoder."
    )


__all__ = [
    "IGNORE_INDEX",
    "LINK_NEGATIVE",
    "LINK_POSITIVE",
    "LINK_SELF",
    "LinkLogProbability",
    "PetraCoreferenceOutput",
    "PetraForCoreference",
    "PetraModel",
    "PetraModelOutput",
    "PetraPreTrainedModel",
    "pair_coref_loss",
    "span_link_probabilities",
]
