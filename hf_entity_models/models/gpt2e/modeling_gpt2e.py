"""GPT2E: GPT-2 with Entity-Transformer blocks (Stylianou and Vlahavas, 2021, "E.T.: Entity-Transformers").

It imports only torch, transformers, files of its own folder and the shared model code
(``hf_entity_models.models._shared``, copied next to the weights on save), so that a saved checkpoint loads with
``trust_remote_code=True`` where this package is not installed.

Every token carries an entity id (0 = not part of an entity mention). The entity states E hold one representation
per entity of a document (row 0 is E_Ø, the no-entity representation); ``forward`` takes and returns them, as it does
the key/value cache, so a document longer than one window carries its entities on. Two designs
(``config.entity_state``):

* ``"memory"`` (default), `GPT2EEntityMemory`: after block ``entity_memory_layer`` every mention token writes a gated
  update of its entity's state and reads that state back (its own update and every earlier mention of the window
  included) into the residual stream, through a projection that starts at zero. The states start at zero, and the
  update is a recurrence over the mentions of each entity, computed for a whole window at once
  (`entity_memory_states`), so reading a window in pieces (generation with a cache) gives the same states.
* ``"paper"``, the literal reading of sections 3.1-3.2: every representation starts as a vector of ones; each
  Entity-Transformer block (Figure 1) is GPT-2's block followed by the entity attention, a masked multi-head attention
  whose keys are the entity representations of the tokens; after a forward pass the final hidden state of the last
  mention of every entity in the input replaces that entity's representation.

Choices where the paper is silent (its Figure 1 is not in the text we have), each documented in the model card:

* The entity attention reads a layer norm of the block's output (pre-norm, like GPT-2's two sub-layers) and is added
  back by a residual connection. Its output projection starts at zero, so a model loaded from GPT-2 weights (or
  freshly initialised) computes exactly what GPT-2 computes until training moves it (so does the memory's read).
* Keys: each position's entity representation through a learned projection (computed once per entity, then gathered
  per token). Values: the token states (``entity_attention_values="hidden"``) or the entity representations
  (``"entities"``). Queries: the token states. Masking: causal and padding, as self-attention.
* The "final hidden representation" that replaces an entity's state is the model's last hidden state (after the final
  layer norm, the vector the LM head reads), at the last token of the entity's last mention; it is detached: the
  paper updates the store between steps, not through them.
"""

import math
from collections.abc import Callable
from dataclasses import field, make_dataclass

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.generation.utils import ALL_CACHE_NAMES
from transformers.masking_utils import create_causal_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.pytorch_utils import Conv1D
from transformers.utils import ModelOutput, logging

from hf_entity_models.models._shared.checkpoints import CheckpointMixin

from .configuration_gpt2e import GPT2EConfig

logger = logging.get_logger(__name__)

# The entity id of tokens that are not part of any entity mention (the paper's Ø).
NO_ENTITY = 0


# transformers 5.24 renamed the key/value cache from `past_key_values` to `cache` everywhere at once: forward
# arguments, output fields, `create_causal_mask`, and the model_kwargs that `generate` carries from step to step (it
# looks the cache up in a model output under the names in ALL_CACHE_NAMES, and a ModelOutput with a field named
# `past_key_values` can no longer be built by keyword). 5.6..5.23 use `past_key_values`. The outputs below name their
# field as the installed transformers does, so `generate` reuses the cache on either; `forward` accepts both names.
CACHE_NAME = "cache" if "cache" in ALL_CACHE_NAMES else "past_key_values"


def _output_class(name: str, doc: str, fields: list[tuple[str, object]]) -> type[ModelOutput]:
    """A `ModelOutput` dataclass whose field ``"cache"`` is named `CACHE_NAME`; every field defaults to None.

    Where that name is `past_key_values` (transformers < 5.24), a read-only `cache` property is added, so that code
    written for 5.24 (``output.cache``) runs unchanged; 5.24's `ModelOutput` has the opposite alias
    (``output.past_key_values``) itself.
    """
    dataclass_fields = [(CACHE_NAME if key == "cache" else key, kind, field(default=None)) for key, kind in fields]
    namespace: dict[str, object] = {"__doc__": doc}
    if CACHE_NAME != "cache":
        namespace["cache"] = property(lambda self: getattr(self, CACHE_NAME), doc="The key/value cache.")
    output_class = make_dataclass(name, dataclass_fields, bases=(ModelOutput,), namespace=namespace)
    output_class.__module__ = __name__  # make_dataclass's `module=` needs Python 3.12; pickling needs the module
    return output_class


GPT2EModelOutput = _output_class(
    "GPT2EModelOutput",
    """Output of `GPT2EModel`.

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, sequence_length, n_embd)`):
            Hidden states after the final layer norm.
        cache (`Cache`, *optional*):
            The key/value cache (self-attention of every block, and the paper design's entity attention), when
            `use_cache=True`. The field
            is named as the installed transformers names it: `cache` from 5.24 on, `past_key_values` before; both
            `output.cache` and `output.past_key_values` read it on every supported version.
        entity_states (`torch.FloatTensor` of shape `(batch_size, max_entities + 1, n_embd)`):
            The entity representations after this input; the entities not mentioned in it are unchanged. Every
            entity mentioned holds its memory state after its last mention (`entity_state="memory"`) or the last
            hidden state of the last token of its last mention (`"paper"`). Pass them with the next window. They
            are detached from the autograd graph (a training loop that carries them on back-propagates each
            window on its own), unless `forward(..., keep_entity_state_graph=True)` asks for the memory's states
            with their graph (back-propagation through several windows).
        hidden_states (`tuple(torch.FloatTensor)`, *optional*):
            The embeddings and the output of every block, when `output_hidden_states=True`.
    """,
    [
        ("last_hidden_state", torch.FloatTensor | None),
        ("cache", Cache | None),
        ("entity_states", torch.FloatTensor | None),
        ("hidden_states", tuple[torch.FloatTensor, ...] | None),
    ],
)


GPT2ECausalLMOutput = _output_class(
    "GPT2ECausalLMOutput",
    """Output of `GPT2EForCausalLM`.

    Args:
        loss (`torch.FloatTensor` of shape `(1,)`, *optional*):
            Mean next-token cross-entropy over the labels that are not -100, when `labels` are given.
        logits (`torch.FloatTensor` of shape `(batch_size, sequence_length, vocab_size)`):
            Next-token scores.
        cache (`Cache`, *optional*):
            The key/value cache, when `use_cache=True` (named as in `GPT2EModelOutput`).
        entity_states (`torch.FloatTensor` of shape `(batch_size, max_entities + 1, n_embd)`):
            The entity representations after this input (see `GPT2EModelOutput`).
        hidden_states (`tuple(torch.FloatTensor)`, *optional*):
            The embeddings and the output of every block, when `output_hidden_states=True`.
    """,
    [
        ("loss", torch.FloatTensor | None),
        ("logits", torch.FloatTensor | None),
        ("cache", Cache | None),
        ("entity_states", torch.FloatTensor | None),
        ("hidden_states", tuple[torch.FloatTensor, ...] | None),
    ],
)


def _single_cache(cache: Cache | None, past_key_values: Cache | None) -> Cache | None:
    """The cache passed under either name (`generate` of transformers < 5.24 passes `past_key_values`)."""
    if cache is not None and past_key_values is not None:
        raise ValueError(
            "Pass the key/value cache once, as `cache` (or, the name before transformers 5.24, `past_key_values`), "
            "not both."
        )
    return cache if cache is not None else past_key_values


def initial_entity_states(
    batch_size: int, config: GPT2EConfig, device: torch.device | None = None, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """The entity states of documents that have not been read yet: zeros for the entity memory (nothing written
    yet), every representation a vector of ones for the paper's design (3.2).

    Example:
        >>> config = GPT2EConfig(n_layer=1, n_embd=8, n_head=2, vocab_size=10, max_entities=3)
        >>> initial_entity_states(2, config).shape
        torch.Size([2, 4, 8])
    """
    fill = torch.zeros if config.entity_state == "memory" else torch.ones
    return fill(batch_size, config.max_entities + 1, config.n_embd, device=device, dtype=dtype)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention on (batch, heads, length, head size) tensors; the mask is additive, or None for causal."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    elif query.shape[-2] > 1:
        # No mask: the plain causal case (sdpa gets is_causal=True instead); queries are the last positions.
        offset = key.shape[-2] - query.shape[-2]
        future = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).triu(offset + 1)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    # At least float32 (half precision upcasts), never below the input (float64 stays float64).
    softmax_dtype = torch.promote_types(scores.dtype, torch.float32)
    weights = nn.functional.softmax(scores, dim=-1, dtype=softmax_dtype).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2), weights


def _attend_and_project(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
) -> torch.Tensor:
    """Attention through the configured backend (eager, sdpa, ...), then the module's output projection."""
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(module.config._attn_implementation, eager_attention_forward)
    output, _ = attention(
        module,
        query,
        key,
        value,
        attention_mask,
        dropout=module.config.attn_pdrop if module.training else 0.0,
        scaling=module.scaling,
    )
    return module.resid_dropout(module.c_proj(_merge_heads(output)))


class GPT2ESelfAttention(nn.Module):
    """GPT-2's masked multi-head self-attention (same parameters, `c_attn` and `c_proj`, so GPT-2 weights load)."""

    def __init__(self, config: GPT2EConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.num_heads = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.layer_idx = layer_idx
        self.is_causal = True
        self.scaling = self.head_dim**-0.5 if config.scale_attn_weights else 1.0
        if config.scale_attn_by_inverse_layer_idx:
            self.scaling /= float(layer_idx + 1)
        self.c_attn = Conv1D(3 * config.n_embd, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, config.n_embd)
        self.c_proj._projects_into_residual = True
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, cache: Cache | None
    ) -> torch.Tensor:
        query, key, value = (
            _split_heads(part, self.head_dim) for part in self.c_attn(hidden_states).split(self.config.n_embd, dim=2)
        )
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
        return _attend_and_project(self, query, key, value, attention_mask)


class GPT2EEntityAttention(nn.Module):
    """The entity attention of an Entity-Transformer block: masked multi-head attention whose keys are the entity
    representations of the tokens (3.1).

    Keys (and, with ``entity_attention_values="entities"``, values) are projected once per entity row of the entity
    states and then gathered per token, so their cost does not grow with the sequence. The output projection
    `c_proj` starts at zero (see the module docstring). Its key/value cache lives in cache layer
    ``n_layer + layer_idx``.
    """

    def __init__(self, config: GPT2EConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.size = config.entity_attention_size
        self.num_heads = config.n_head
        self.head_dim = self.size // config.n_head
        self.cache_idx = config.n_layer + layer_idx
        self.is_causal = True
        self.scaling = self.head_dim**-0.5
        self.values_from_entities = config.entity_attention_values == "entities"
        # Queries (and values, when they come from the token states) from the block's normalised output.
        self.q_attn = Conv1D(self.size if self.values_from_entities else 2 * self.size, config.n_embd)
        # Keys (and values, when they come from the entities) from the entity representations.
        self.e_attn = Conv1D(2 * self.size if self.values_from_entities else self.size, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, self.size)
        self.c_proj._starts_at_zero = True
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        hidden_states: torch.Tensor,
        entity_ids: torch.Tensor,
        entity_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Cache | None,
    ) -> torch.Tensor:
        token_part = self.q_attn(hidden_states)
        entity_rows = self.e_attn(entity_states)  # (batch, max_entities + 1, size or 2 size)
        per_token = entity_rows.gather(1, entity_ids.unsqueeze(-1).expand(-1, -1, entity_rows.shape[-1]))
        if self.values_from_entities:
            query = token_part
            key, value = per_token.split(self.size, dim=2)
        else:
            query, value = token_part.split(self.size, dim=2)
            key = per_token
        query, key, value = (_split_heads(part, self.head_dim) for part in (query, key, value))
        if cache is not None:
            key, value = cache.update(key, value, self.cache_idx)
        return _attend_and_project(self, query, key, value, attention_mask)


class GPT2EMLP(nn.Module):
    """GPT-2's position-wise feed-forward layer (same parameters, `c_fc` and `c_proj`)."""

    def __init__(self, config: GPT2EConfig):
        super().__init__()
        inner = config.n_inner if config.n_inner is not None else 4 * config.n_embd
        self.c_fc = Conv1D(inner, config.n_embd)
        self.c_proj = Conv1D(config.n_embd, inner)
        self.c_proj._projects_into_residual = True
        self.act = ACT2FN[config.activation_function]
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(hidden_states))))


class GPT2EEntityMemory(nn.Module):
    """The entity memory (`entity_state="memory"`): every mention token writes a gated update of its entity's state
    and reads the state back into the residual stream.

    A mention t of entity k writes v_t, the layer norm of its hidden state plus that of its token embedding, with a
    learned gate g_t = sigmoid(z_t): the entity's state becomes s_k <- (1 - g_t) s_k + g_t v_t, in token order,
    starting from the state the entity had before the input (`entity_memory_states`). Token t then adds `read(s_k)` to its
    hidden state: a mention sees what it and every earlier mention of its entity wrote, in this window and before
    it. Tokens outside mentions add nothing; `read` starts at zero (GPT-2's outputs until training moves it).
    """

    def __init__(self, config: GPT2EConfig):
        super().__init__()
        # What a mention writes is not learned: the layer norm (without affine parameters) of its hidden state at
        # this layer plus that of its token embedding. Normalised apart, so that the token (which entity the mention
        # names) is not drowned by the context (what the text says about it) in the residual stream. A learned
        # value could only be trained by reads in the same window (the store carries states detached across
        # windows), a signal that does not ask it to keep the entity; and the hidden state alone lost the token:
        # on the recall task (benchmarks/bench_gpt2e_recall.py) both stayed at chance (2.79 nats); with the token
        # embedding added, 0.01-0.02. The blocks below this layer learn what to put into the hidden state.
        self.ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, elementwise_affine=False)
        self.gate = Conv1D(1, config.n_embd)
        self.gate._starts_at_zero = True  # gates of 1/2 until trained
        self.read = Conv1D(config.n_embd, config.n_embd)
        self.read._starts_at_zero = True
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(
        self,
        hidden_states: torch.Tensor,
        token_embeddings: torch.Tensor,
        entity_ids: torch.Tensor,
        entity_states: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns the hidden states with what each mention read added, and every token's entity state after its
        own update (zeros outside mentions), `(batch, length, n_embd)` each."""
        values = self.ln(hidden_states) + self.ln(token_embeddings)
        gate_logits = self.gate(values).squeeze(-1)
        states = entity_memory_states(entity_states, entity_ids, values, gate_logits, token_mask)
        is_mention = (token_mask & (entity_ids != NO_ENTITY)).unsqueeze(-1)
        return hidden_states + self.dropout(self.read(states)) * is_mention, states


class EntityTransformerBlock(nn.Module):
    """An Entity-Transformer block (3.1, Figure 1): GPT-2's block, then the entity attention with a residual.

    With `entity_state="memory"` the block is GPT-2's block alone: the entities are read by `GPT2EEntityMemory`.
    """

    def __init__(self, config: GPT2EConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = GPT2ESelfAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = GPT2EMLP(config)
        self.has_entity_attention = config.entity_state == "paper"
        if self.has_entity_attention:
            self.ln_entity = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
            self.entity_attn = GPT2EEntityAttention(config, layer_idx)

    def forward(
        self,
        hidden_states: torch.Tensor,
        entity_ids: torch.Tensor,
        entity_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Cache | None,
    ) -> torch.Tensor:
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states), attention_mask, cache)
        hidden_states = hidden_states + self.mlp(self.ln_2(hidden_states))
        if not self.has_entity_attention:
            return hidden_states
        entity_context = self.entity_attn(
            self.ln_entity(hidden_states), entity_ids, entity_states, attention_mask, cache
        )
        return hidden_states + entity_context


class GPT2EPreTrainedModel(CheckpointMixin, PreTrainedModel):
    config: GPT2EConfig
    config_class = GPT2EConfig
    base_model_prefix = "transformer"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules = ["EntityTransformerBlock"]
    _skip_keys_device_placement = ["cache", "past_key_values"]
    _supports_sdpa = True
    # GPT-2 checkpoints of older transformers versions store the causal mask as a buffer.
    _keys_to_ignore_on_load_unexpected = [r"attn\.bias$", r"attn\.masked_bias$"]
    # A GPT2E starts from a GPT-2 checkpoint (its entity modules new, the rest loaded).
    _compatible_model_types = ("gpt2",)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # Decided per Conv1D (marked by the modules that own them): transformers initialises the modules of custom
        # code that hold parameters themselves, not their parents.
        super()._init_weights(module)
        if isinstance(module, Conv1D):
            std = self.config.initializer_range
            if getattr(module, "_projects_into_residual", False):
                # GPT-2's scaled initialisation of the projections into the residual stream (2 per block).
                std = std / math.sqrt(2 * self.config.n_layer)
            init.normal_(module.weight, mean=0.0, std=std)
            init.zeros_(module.bias)
            if getattr(module, "_starts_at_zero", False):
                # The entity attention's output, the memory's read and gate: they add nothing (gates of 1/2) until
                # training moves them, so a model initialised from GPT-2 weights computes exactly what GPT-2 computes.
                init.zeros_(module.weight)


class GPT2EModel(GPT2EPreTrainedModel):
    r"""
    The GPT2E transformer: token and position embeddings, `n_layer` Entity-Transformer blocks, a final layer norm.

    Example:

    ```python
    >>> import torch
    >>> from hf_entity_models import GPT2EConfig, GPT2EModel

    >>> model = GPT2EModel(GPT2EConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=100, max_entities=4)).eval()
    >>> input_ids = torch.tensor([[5, 6, 7, 8]])
    >>> entity_ids = torch.tensor([[1, 0, 1, 2]])
    >>> output = model(input_ids, entity_ids=entity_ids)
    >>> output.last_hidden_state.shape, output.entity_states.shape
    (torch.Size([1, 4, 32]), torch.Size([1, 5, 32]))

    ```
    """

    def __init__(self, config: GPT2EConfig):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([EntityTransformerBlock(config, layer_idx) for layer_idx in range(config.n_layer)])
        self.entity_memory = GPT2EEntityMemory(config) if config.entity_state == "memory" else None
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, new_embeddings: nn.Embedding) -> None:
        self.wte = new_embeddings

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        entity_ids: torch.LongTensor | None = None,
        entity_states: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Cache | None = None,
        keep_entity_state_graph: bool = False,
        **kwargs,
    ) -> GPT2EModelOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids (with a cache: only the tokens not yet in it).
            entity_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                The entity of every token, 1..`max_entities`, or 0 (no entity). Defaults to all 0: the model then
                computes GPT-2 (with the memory) or GPT-2 plus an entity attention over the no-entity representation
                (the paper's design).
            entity_states (`torch.FloatTensor` of shape `(batch_size, max_entities + 1, n_embd)`, *optional*):
                The entity representations before this input, e.g. `entity_states` of the previous window of the
                same documents (with a cache and `entity_state="memory"`: those returned for the cached tokens).
                Defaults to `initial_entity_states` (zeros for the memory, ones for the paper's design).
            attention_mask (`torch.Tensor` of shape `(batch_size, past + sequence_length)`, *optional*):
                1 for real tokens, 0 for padding.
            cache (`DynamicCache`, *optional*):
                The key/value cache of the tokens read so far (the `cache` of the previous output); only a
                `DynamicCache` is supported.
            past_key_values (`DynamicCache`, *optional*):
                The same cache under its name before transformers 5.24 (what `generate` passes there); give one of
                the two.
            keep_entity_state_graph (`bool`, *optional*, defaults to `False`):
                Return the memory's `entity_states` with their autograd graph, for truncated back-propagation
                through time: the loss of the next window (which reads them) then back-propagates into this one, so
                call `backward()` once on the summed losses of the windows you chain, and detach the states to
                start a new chain. By default they come back detached, so a loop that calls `backward()` once per
                window and passes the states on works. The paper's design (`entity_state="paper"`) always returns
                them detached (its store is updated between steps, not through them).
            position_ids, inputs_embeds, use_cache, output_hidden_states, return_dict:
                As in `GPT2Model`.
        """
        cache = _single_cache(cache, past_key_values)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if use_cache is None:  # a cache that is passed is used, as in GPT-2
            use_cache = cache is not None or (self.config.use_cache and not self.training)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        _check_not_empty(input_ids if input_ids is not None else inputs_embeds)
        inputs_embeds = self.wte(input_ids) if inputs_embeds is None else inputs_embeds
        batch_size, length = inputs_embeds.shape[:2]
        entity_ids = self._checked_entity_ids(entity_ids, batch_size, length, inputs_embeds.device)
        entity_states = self._checked_entity_states(entity_states, batch_size, inputs_embeds)
        cache = self._prepared_cache(cache, use_cache)

        past_length = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            if past_length + length > self.config.n_positions:
                raise ValueError(
                    f"The input reaches position {past_length + length}, beyond the model's n_positions="
                    f"{self.config.n_positions}: read long documents in windows of at most that many tokens and "
                    "carry entity_states from one window to the next."
                )
            position_ids = torch.arange(past_length, past_length + length, device=inputs_embeds.device).unsqueeze(0)
        else:
            self._check_position_ids(position_ids)
        hidden_states = self.drop(inputs_embeds + self.wpe(position_ids))
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            **{CACHE_NAME: cache},
        )

        token_mask = _token_mask(attention_mask, batch_size, length, inputs_embeds.device)
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        for layer_idx, block in enumerate(self.h):
            hidden_states = block(hidden_states, entity_ids, entity_states, causal_mask, cache)
            if self.entity_memory is not None and layer_idx == self.config.entity_memory_layer:
                hidden_states, per_token_states = self.entity_memory(
                    hidden_states, inputs_embeds, entity_ids, entity_states, token_mask
                )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
        hidden_states = self.ln_f(hidden_states)
        if output_hidden_states:  # GPT-2 reports the last block's output after the final layer norm
            all_hidden_states = all_hidden_states[:-1] + (hidden_states,)

        if self.entity_memory is not None:
            # Each entity's state after its last mention. Detached unless asked: a loop that passes the states to the
            # next window and calls backward() once per window would otherwise back-propagate into the previous
            # window's freed graph ("Trying to backward through the graph a second time").
            new_entity_states = update_entity_states(entity_states, entity_ids, per_token_states, token_mask)
            if not keep_entity_state_graph:
                new_entity_states = new_entity_states.detach()
        else:
            new_entity_states = update_entity_states(entity_states, entity_ids, hidden_states.detach(), token_mask)
        output = GPT2EModelOutput(
            last_hidden_state=hidden_states,
            entity_states=new_entity_states,
            hidden_states=all_hidden_states,
            **{CACHE_NAME: cache if use_cache else None},
        )
        return output if return_dict else output.to_tuple()

    def _check_position_ids(self, position_ids: torch.Tensor) -> None:
        """Positions beyond the position embeddings would fail inside `nn.Embedding` with a bare IndexError (a
        device-side assert on CUDA)."""
        if not position_ids.numel():
            return
        smallest, largest = torch.stack(torch.aminmax(position_ids)).tolist()  # one device sync for both
        if smallest < 0 or largest >= self.config.n_positions:
            raise ValueError(
                f"position_ids run from {smallest} to {largest}, but the model has position embeddings for 0.."
                f"{self.config.n_positions - 1} only (n_positions={self.config.n_positions}): read long documents in "
                "windows of at most n_positions tokens and carry entity_states from one window to the next."
            )

    def _checked_entity_ids(
        self, entity_ids: torch.Tensor | None, batch_size: int, length: int, device: torch.device
    ) -> torch.Tensor:
        if entity_ids is None:
            return torch.full((batch_size, length), NO_ENTITY, dtype=torch.long, device=device)
        if not isinstance(entity_ids, torch.Tensor) or entity_ids.dtype.is_floating_point or entity_ids.dtype == torch.bool:
            raise TypeError("entity_ids must be an integer tensor (one entity id per token, 0 = no entity).")
        if entity_ids.shape != (batch_size, length):
            raise ValueError(
                f"entity_ids has shape {tuple(entity_ids.shape)} but the input has {(batch_size, length)} tokens: give "
                "exactly one entity id per token (0 for tokens outside every mention)."
            )
        if entity_ids.numel():
            smallest, largest = torch.stack(torch.aminmax(entity_ids)).tolist()  # one device sync for both
            if smallest < 0:
                raise ValueError(f"entity_ids must be >= 0 (0 = no entity), got {smallest}.")
            if largest > self.config.max_entities:
                raise ValueError(
                    f"entity id {largest} is beyond the entity store, which holds config.max_entities="
                    f"{self.config.max_entities} entities per document; renumber the entities of each document "
                    "from 1, or build the model with a larger max_entities."
                )
        return entity_ids.to(device=device, dtype=torch.long)

    def _checked_entity_states(
        self, entity_states: torch.Tensor | None, batch_size: int, inputs_embeds: torch.Tensor
    ) -> torch.Tensor:
        if entity_states is None:
            return initial_entity_states(batch_size, self.config, inputs_embeds.device, inputs_embeds.dtype)
        expected = (batch_size, self.config.max_entities + 1, self.config.n_embd)
        if not isinstance(entity_states, torch.Tensor) or tuple(entity_states.shape) != expected:
            shape = tuple(entity_states.shape) if isinstance(entity_states, torch.Tensor) else type(entity_states)
            raise ValueError(
                f"entity_states must have shape (batch, max_entities + 1, n_embd) = {expected}, got {shape}; pass the "
                "entity_states returned for the previous window of the same documents, or None to start afresh."
            )
        return entity_states.to(device=inputs_embeds.device, dtype=inputs_embeds.dtype)

    def _prepared_cache(self, cache: Cache | None, use_cache: bool) -> Cache | None:
        if not use_cache:
            return None
        if cache is None:
            return DynamicCache()  # one layer per index: self-attention 0..n-1, the paper's entity attention n..2n-1
        if not isinstance(cache, DynamicCache):
            raise ValueError(
                f"GPT2E supports a DynamicCache only, got {type(cache).__name__} (e.g. generate with the default "
                "cache_implementation)."
            )
        # A cache built from the config (as `generate` does) has one layer per block: add the entity attention's.
        while self.config.entity_state == "paper" and len(cache.layers) < 2 * self.config.n_layer:
            cache.layers.append(DynamicLayer())
        return cache


class GPT2EForCausalLM(GPT2EPreTrainedModel, GenerationMixin):
    r"""
    GPT2E with a language-modelling head tied to the token embeddings (Eq. 1: P(u) = softmax(h_n W_e^T)).

    `from_pretrained` of a saved `GPT2LMHeadModel` (or `GPT2Model`) folder maps every GPT-2 weight; the entity
    memory's read (the paper design's entity attention) starts at zero, so the loaded model computes what GPT-2
    computes until it is trained.

    Training over consecutive windows: pass `document_ids` (and `window_index`) instead of `entity_states`; the model
    keeps the entity states of every document in a store (one for training, one for evaluation; not saved with the
    weights) and reads and updates them itself, so the stock `Trainer` trains with the entities carried from window to window. The
    store starts a document afresh (`initial_entity_states`) at its window 0.

    A hand-written loop may pass `entity_states` itself: they come back detached, so each window's `backward()`
    stays within that window. To back-propagate through several windows (truncated back-propagation through
    time), pass `keep_entity_state_graph=True` and call `backward()` once on the chained windows' summed loss.

    Example:

    ```python
    >>> import torch
    >>> from hf_entity_models import GPT2EConfig, GPT2EForCausalLM

    >>> config = GPT2EConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, max_entities=4)
    >>> model = GPT2EForCausalLM(config).eval()
    >>> input_ids, entity_ids = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 0, 1, 2]])
    >>> first = model(input_ids, entity_ids=entity_ids, labels=input_ids)
    >>> second = model(input_ids, entity_ids=entity_ids, entity_states=first.entity_states)
    >>> generated = model.generate(input_ids, entity_ids=entity_ids, max_new_tokens=3, do_sample=False)
    >>> generated.shape
    torch.Size([1, 7])

    ```
    """

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPT2EConfig):
        super().__init__(config)
        self.transformer = GPT2EModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.entity_stores = {"train": DocumentEntityStore(), "eval": DocumentEntityStore()}
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def reset_entity_stores(self) -> None:
        """Forget the entity states of every document (training and evaluation stores)."""
        for store in self.entity_stores.values():
            store.clear()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        entity_ids: torch.LongTensor | None = None,
        entity_states: torch.FloatTensor | None = None,
        document_ids: torch.LongTensor | None = None,
        window_index: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        past_key_values: Cache | None = None,
        keep_entity_state_graph: bool = False,
        **kwargs,
    ) -> GPT2ECausalLMOutput | tuple:
        r"""
        Args:
            document_ids (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Which document each row is a window of: the entity states are read from and written back to the
                model's store (instead of `entity_states`). The rows of one batch must be different documents.
            window_index (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Position of each window in its document; window 0 starts the document with fresh entity states.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Next-token targets, unshifted (the model shifts them), -100 where ignored.
            logits_to_keep (`int`, *optional*, defaults to 0):
                Compute logits for the last `logits_to_keep` positions only (0: all), as in GPT-2.
            keep_entity_state_graph (`bool`, *optional*, defaults to `False`):
                Return `entity_states` with their autograd graph (truncated back-propagation through the windows
                you chain); by default they are detached. See `GPT2EModel.forward`.
            Other arguments: see `GPT2EModel.forward`.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        store = None
        if document_ids is not None:
            if entity_states is not None:
                raise ValueError("Pass either entity_states or document_ids (the model's store), not both.")
            reference = input_ids if input_ids is not None else inputs_embeds
            store = self.entity_stores["train" if self.training else "eval"]
            entity_states = store.read(document_ids, window_index, self.config, reference.device, self.dtype)
        outputs = self.transformer(
            input_ids,
            entity_ids=entity_ids,
            entity_states=entity_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=_single_cache(cache, past_key_values),
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            keep_entity_state_graph=keep_entity_state_graph,
        )
        if store is not None:
            store.write(document_ids, outputs.entity_states)
        hidden_states = outputs.last_hidden_state
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:]
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        output = GPT2ECausalLMOutput(
            loss=loss,
            logits=logits,
            entity_states=outputs.entity_states,
            hidden_states=outputs.hidden_states,
            **{CACHE_NAME: outputs.cache},
        )
        return output if return_dict else output.to_tuple()

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        entity_ids: torch.LongTensor | None = None,
        entity_id_policy: Callable | None = None,
        entity_ids_appended: bool = False,
        **kwargs,
    ) -> dict:
        """Give the model the entity ids of the tokens it reads in this step.

        Tokens generated after the prompt carry the no-entity id 0 (`_update_model_kwargs_for_generation` extends
        `entity_ids` with zeros), unless `generate(..., entity_id_policy=fn)` is given: `fn(input_ids, entity_ids)`
        receives the tokens so far (the newest one last) and their entity ids (the newest one still 0) and returns
        the newest token's entity id per row, a `(batch_size,)` integer tensor. The policy needs the prompt's
        `entity_ids`; the ids are not reordered with beams, so use it with greedy search or sampling.
        """
        # The cache stays in `kwargs` under the installed transformers' name (`cache`, or `past_key_values` before
        # 5.24): the parent puts it into the model inputs under that name, and `forward` takes both.
        model_inputs = super().prepare_inputs_for_generation(input_ids, **kwargs)
        if entity_ids is None:
            if entity_id_policy is not None:
                raise ValueError(
                    "entity_id_policy names the entities of generated tokens after the prompt's: pass the prompt's "
                    "entity_ids too (zeros for a prompt without entities)."
                )
            entity_ids = torch.zeros_like(input_ids)
        if entity_ids.shape != input_ids.shape:
            raise ValueError(
                f"entity_ids has shape {tuple(entity_ids.shape)} but the prompt has {tuple(input_ids.shape)} tokens: "
                "give one entity id per prompt token."
            )
        if entity_id_policy is not None and entity_ids_appended:
            newest = torch.as_tensor(entity_id_policy(input_ids, entity_ids), device=entity_ids.device).long()
            entity_ids[:, -1] = newest.view(-1)  # in place: the extended ids live in generate's model_kwargs
        length = model_inputs["input_ids"].shape[1]
        model_inputs["entity_ids"] = entity_ids[:, -length:]
        return model_inputs

    def _validate_generated_length(self, generation_config, input_ids_length: int, *args, **kwargs) -> None:
        """Refuse, before the first step, a generation that would read positions beyond the position embeddings.

        `generate` calls this once with the final `max_length` (prompt + `max_new_tokens`) — the same signature from
        transformers 5.6 to 5.24. The last generated token is never read, so the model reads `max_length - 1`
        positions; without this check the step that passes `n_positions` fails inside the position embedding.
        """
        super()._validate_generated_length(generation_config, input_ids_length, *args, **kwargs)
        max_length, n_positions = generation_config.max_length, self.config.n_positions
        longest = n_positions + 1  # prompt + new tokens
        if max_length is None or max_length <= longest:
            return
        new_tokens = max_length - input_ids_length
        fixes = []
        if input_ids_length < longest:
            fixes.append(f"lower max_new_tokens to at most {longest - input_ids_length}")
        if new_tokens < longest:
            fixes.append(f"keep only the last {longest - new_tokens} prompt tokens")
        fix = " or ".join(fixes) or f"shorten the prompt and lower max_new_tokens to at most {longest} together"
        raise ValueError(
            f"The prompt ({input_ids_length} tokens) + max_new_tokens ({new_tokens}) = {max_length} tokens exceeds the "
            f"model's n_positions={n_positions} position embeddings (the last generated token is never read, so "
            f"prompt + max_new_tokens may be at most {longest}). To fix it, {fix}; or generate in windows, carrying "
            "entity_states from one to the next."
        )

    def generate(self, *args, **kwargs):
        """`GenerationMixin.generate`; with the entity memory and entity ids, beam search is refused: the memory's
        states travel in the model kwargs, which beam search does not reorder with the beams."""
        generation_config = kwargs.get("generation_config") or self.generation_config
        beams = kwargs.get("num_beams") or generation_config.num_beams or 1
        entity_ids = kwargs.get("entity_ids")
        writes = kwargs.get("entity_id_policy") is not None or (entity_ids is not None and bool(entity_ids.any()))
        if self.config.entity_state == "memory" and beams > 1 and writes:
            raise ValueError(
                f"num_beams={beams} with entity ids (or an entity_id_policy): the entity memory's states are not "
                "reordered with the beams. Use greedy search or sampling (num_beams=1) with entity ids, or beam "
                "search without them."
            )
        return super().generate(*args, **kwargs)

    def _update_model_kwargs_for_generation(self, outputs, model_kwargs, *args, **kwargs):
        model_kwargs = super()._update_model_kwargs_for_generation(outputs, model_kwargs, *args, **kwargs)
        if self.config.entity_state == "memory":
            # The memory's states after the tokens read so far are exactly what the next token continues from (the
            # recurrence runs token by token), so generating with the cache computes what a full pass computes. The
            # paper's design keeps the states of before the prompt for the whole window, as in training.
            model_kwargs["entity_states"] = outputs.entity_states
        entity_ids = model_kwargs.get("entity_ids")
        if entity_ids is not None:
            model_kwargs["entity_ids"] = torch.cat([entity_ids, torch.zeros_like(entity_ids[:, :1])], dim=1)
            model_kwargs["entity_ids_appended"] = True  # the newest token is a generated one: the policy names it
        return model_kwargs


class DocumentEntityStore:
    """The entity states of the documents being read, keyed by document id (the paper's persistent set of entities).

    `read` gives the states of a batch of documents (fresh ones at a document's window 0), `write` keeps the states a
    forward pass returned. States are kept detached, on the model's device. Every read names each row's window, and
    a document's windows must come in order (0, 1, 2, ...; window 0 starts it again at any time): a window read out
    of order would get states written by a later window of its document (information from further on in the
    text), or by itself, so it is refused.
    """

    def __init__(self):
        self._states: dict[int, torch.Tensor] = {}
        self._last_window: dict[int, int] = {}  # the window whose states `_states` holds, per document
        self._reading: dict[int, int] = {}  # the windows of the last read, recorded by the write that follows

    def __len__(self) -> int:
        return len(self._states)

    def clear(self) -> None:
        self._states.clear()
        self._last_window.clear()
        self._reading.clear()

    def read(
        self,
        document_ids: torch.Tensor,
        window_index: torch.Tensor | None,
        config: GPT2EConfig,
        device: torch.device,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        ids = _document_id_list(document_ids)
        if window_index is None:
            raise ValueError(
                "document_ids need window_index (each row's window in its document, 0 for the first): without it "
                "the store cannot tell a document's next window from a window read out of order. Rows of "
                "entity_lm_windows carry it as window_index."
            )
        windows = torch.as_tensor(window_index).view(-1).tolist()
        if len(windows) != len(ids):
            raise ValueError(f"window_index has {len(windows)} entries for {len(ids)} document_ids.")
        fresh = initial_entity_states(1, config, device, dtype)[0]
        rows = []
        for key, window in zip(ids, windows):
            if window < 0:
                raise ValueError(f"Document {key} has window_index {window}: windows are numbered 0, 1, 2, ...")
            if window == 0:
                rows.append(fresh)
            elif key not in self._states:
                raise ValueError(
                    f"Document {key} arrives at window {window} but its earlier windows were never read by this "
                    "store (e.g. training resumed mid-epoch or rows were filtered): its entity states are unknown. "
                    "Read every document from its window 0 (order_windows_for_streams), or call "
                    "reset_entity_stores() and start the documents again."
                )
            elif self._last_window[key] != window - 1:
                raise ValueError(
                    f"Document {key} arrives at window {window} after window {self._last_window[key]}: its stored "
                    f"entity states are those written by window {self._last_window[key]}, not by window {window - 1}, "
                    "so this window would read entities from "
                    + ("later in the document" if self._last_window[key] >= window else "a gap")
                    + ". Read each document's windows in order (order_windows_for_streams), or start it again at "
                    "window 0."
                )
            else:
                rows.append(self._states[key])
        self._reading = dict(zip(ids, windows))
        return torch.stack(rows).to(device=device, dtype=dtype)

    def write(self, document_ids: torch.Tensor, entity_states: torch.Tensor) -> None:
        ids = _document_id_list(document_ids)
        unread = [key for key in ids if key not in self._reading]
        if unread:
            raise ValueError(f"Document {unread[0]} is written without being read first: read its window, then write.")
        for key, states in zip(ids, entity_states.detach()):
            self._states[key] = states
            self._last_window[key] = self._reading.pop(key)


def _document_id_list(document_ids: torch.Tensor) -> list[int]:
    ids = torch.as_tensor(document_ids).view(-1).tolist()  # one device sync
    if len(set(ids)) != len(ids):
        raise ValueError(
            f"document_ids {ids} repeat a document within one batch: the entity states of a document are updated "
            "once per step, so its windows must come in different batches (see order_windows_for_streams)."
        )
    return ids


def update_entity_states(
    entity_states: torch.Tensor, entity_ids: torch.Tensor, hidden_states: torch.Tensor, token_mask: torch.Tensor
) -> torch.Tensor:
    """The entity states after an input: each entity mentioned in it takes the hidden state of the last token of its
    last mention (3.2); the others, and the no-entity row 0, are unchanged.

    Args:
        entity_states: `(batch, max_entities + 1, hidden)` states before the input.
        entity_ids: `(batch, length)` entity id of every token.
        hidden_states: `(batch, length, hidden)` what each token would store: the final hidden states (the paper's
            design) or the memory's per-token states (`entity_memory_states`).
        token_mask: `(batch, length)` bool, False on padding (never a mention).

    Example:
        >>> states = torch.ones(1, 3, 2)
        >>> hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])
        >>> update_entity_states(states, torch.tensor([[2, 0, 2]]), hidden, torch.ones(1, 3, dtype=torch.bool))[0]
        tensor([[1., 1.],
                [1., 1.],
                [5., 6.]])
    """
    length = entity_ids.shape[1]
    positions = torch.arange(length, device=entity_ids.device).expand_as(entity_ids)
    is_mention = token_mask & (entity_ids != NO_ENTITY)
    last_position = torch.full(entity_states.shape[:2], -1, dtype=torch.long, device=entity_ids.device)
    last_position = last_position.scatter_reduce(1, entity_ids, torch.where(is_mention, positions, -1), reduce="amax")
    last_position[:, NO_ENTITY] = -1
    mentioned = last_position >= 0
    gathered = hidden_states.gather(1, last_position.clamp(min=0).unsqueeze(-1).expand(-1, -1, hidden_states.shape[-1]))
    return torch.where(mentioned.unsqueeze(-1), gathered.to(entity_states.dtype), entity_states)


def entity_memory_states(
    entity_states: torch.Tensor,
    entity_ids: torch.Tensor,
    values: torch.Tensor,
    gate_logits: torch.Tensor,
    token_mask: torch.Tensor,
) -> torch.Tensor:
    """Every mention token's entity state after its own write: the gated recurrence s <- (1 - g_j) s + g_j v_j over
    the mentions j of the token's entity, in order, from the entity's state before the input.

    Unrolled, the state at mention t of entity k is exp(c_t) s_k + sum_j exp(c_t - c_j) g_j v_j over the mentions
    j <= t of k, with c_t the sum of log(1 - g_i) over the mentions i <= t of k; so a whole window is two batched
    matrix products over a same-entity causal mask, instead of a loop over tokens.

    Args:
        entity_states: `(batch, max_entities + 1, hidden)` the states before the input.
        entity_ids: `(batch, length)` entity id of every token (0: none).
        values: `(batch, length, hidden)` what each token would write.
        gate_logits: `(batch, length)` the gate logit z_j of each token (g_j = sigmoid(z_j)).
        token_mask: `(batch, length)` bool, False on padding (never a mention).

    Returns:
        `(batch, length, hidden)`: the state of each mention's entity after its write; zeros outside mentions.

    Example (one entity, gates 0.5: the state halves towards each value):
        >>> values = torch.tensor([[[4.0], [8.0]]])
        >>> entity_memory_states(torch.zeros(1, 2, 1), torch.tensor([[1, 1]]), values, torch.zeros(1, 2),
        ...                      torch.ones(1, 2, dtype=torch.bool))
        tensor([[[2.],
                 [5.]]])
    """
    with torch.autocast(values.device.type, enabled=False):  # c_t - c_j cancels: keep it in float32 at least
        return _entity_memory_states(entity_states, entity_ids, values, gate_logits, token_mask)


def _entity_memory_states(
    entity_states: torch.Tensor,
    entity_ids: torch.Tensor,
    values: torch.Tensor,
    gate_logits: torch.Tensor,
    token_mask: torch.Tensor,
) -> torch.Tensor:
    length = entity_ids.shape[1]
    is_mention = token_mask & (entity_ids != NO_ENTITY)
    causal = torch.ones(length, length, dtype=torch.bool, device=entity_ids.device).tril()
    same_entity = (entity_ids.unsqueeze(2) == entity_ids.unsqueeze(1)) & causal
    same_entity = same_entity & is_mention.unsqueeze(1) & is_mention.unsqueeze(2)  # (batch, t, j): j <= t, same
    output_dtype, compute_dtype = values.dtype, torch.promote_types(values.dtype, torch.float32)
    gate_logits = gate_logits.to(compute_dtype)
    log_keep = torch.where(is_mention, nn.functional.logsigmoid(-gate_logits), 0.0)  # log(1 - g_j) at mentions
    # c_t: a running sum per entity (a cumulative sum over one-hot entities, exact), read at each token's entity.
    per_entity = nn.functional.one_hot(entity_ids, entity_states.shape[1]).to(compute_dtype) * log_keep.unsqueeze(-1)
    kept = per_entity.cumsum(1).gather(2, entity_ids.unsqueeze(-1))  # (batch, t, 1)
    decay = (kept - kept.transpose(1, 2)).masked_fill(~same_entity, -math.inf).exp()  # exp(c_t - c_j) on the mask
    weights = decay * torch.sigmoid(gate_logits).unsqueeze(1)  # times g_j
    values = torch.where(is_mention.unsqueeze(-1), values.to(compute_dtype), 0.0)  # nothing from padding
    carried = entity_states.gather(1, entity_ids.unsqueeze(-1).expand(-1, -1, entity_states.shape[-1]))
    states = kept.exp() * carried.to(compute_dtype) + torch.matmul(weights, values)
    return torch.where(is_mention.unsqueeze(-1), states, 0.0).to(output_dtype)


def _check_not_empty(inputs: torch.Tensor) -> None:
    """Refuse an input without tokens, which fails deep inside transformers' mask code with a bare IndexError."""
    if inputs.ndim < 2 or inputs.shape[0] == 0 or inputs.shape[1] == 0:
        name = "input_ids" if inputs.ndim == 2 else "inputs_embeds"
        raise ValueError(
            f"{name} has shape {tuple(inputs.shape)}: GPT2E needs a batch of at least one row of at least one token, "
            "shaped (batch_size, sequence_length). Tokenize a non-empty text, or skip empty texts before calling the "
            "model."
        )


def _token_mask(attention_mask: torch.Tensor | None, batch_size: int, length: int, device: torch.device) -> torch.Tensor:
    """Which of the current input's tokens are real (the attention mask also covers the cached past)."""
    if attention_mask is None or attention_mask.ndim != 2:
        return torch.ones(batch_size, length, dtype=torch.bool, device=device)
    return attention_mask[:, -length:].to(device=device).bool()


def _split_heads(tensor: torch.Tensor, head_dim: int) -> torch.Tensor:
    return tensor.view(*tensor.shape[:-1], -1, head_dim).transpose(1, 2)


def _merge_heads(tensor: torch.Tensor) -> torch.Tensor:
    """(batch, length, heads, head size) from the attention functions -> (batch, length, heads x head size)."""
    return tensor.reshape(*tensor.shape[:-2], -1).contiguous()


__all__ = [
    "NO_ENTITY",
    "DocumentEntityStore",
    "EntityTransformerBlock",
    "GPT2ECausalLMOutput",
    "GPT2EEntityMemory",
    "GPT2EForCausalLM",
    "GPT2EModel",
    "GPT2EModelOutput",
    "GPT2EPreTrainedModel",
    "entity_memory_states",
    "initial_entity_states",
    "update_entity_states",
]
