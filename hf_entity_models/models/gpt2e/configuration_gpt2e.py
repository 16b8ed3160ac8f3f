"""GPT2E (Entity-Transformers) model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

from huggingface_hub.dataclasses import strict
from transformers import GPT2Config

from hf_entity_models.models._shared.checkpoints import LAYERS_LIMIT, POSITIONS_LIMIT, VOCABULARY_LIMIT, WIDTH_LIMIT
from hf_entity_models.models._shared.checkpoints import CheckpointConfigMixin, SizeLimit, check_size_limits

ENTITY_ATTENTION_VALUES = ("hidden", "entities")
ENTITY_STATES = ("memory", "paper")
# The largest entity store a config may ask for (see `check_size_limits`).
MAX_ENTITIES_LIMIT = SizeLimit(
    16_384, "every document of a batch carries a state row of n_embd per entity (16,384 rows of 768 are 50 MB), and "
    "a whole book has a few hundred entities"
)
# Named designs: the field values each fixes (any other field keeps its default or the value given).
PRESETS: dict[str, dict[str, object]] = {
    "entity-memory": {"entity_state": "memory"},
    "paper": {"entity_state": "paper"},
}


@strict
class GPT2EConfig(CheckpointConfigMixin, GPT2Config):
    r"""
    Configuration of a GPT2E model (Stylianou and Vlahavas, 2021): GPT-2 whose Transformer blocks are
    Entity-Transformer blocks that also attend to the representations of the coreference entities of the tokens.

    Every field of `GPT2Config` keeps its meaning and default (so a GPT-2 `config.json` is a valid GPT2E config:
    `GPT2EForCausalLM.from_pretrained` of a GPT-2 folder maps every GPT-2 weight), plus:

    Args:
        entity_state (`str`, *optional*, defaults to `"memory"`):
            How the entities are represented and read (preset `"entity-memory"` / `"paper"`):

            - `"memory"` (default): a learned entity memory after block `entity_memory_layer`. Every mention token
              writes a gated update of its entity's state, s <- (1 - g) s + g v, where v is the layer norm of the
              token's hidden state there plus that of its token embedding, and the scalar gate g is learned from v;
              every mention token then reads its own
              entity's state, as it stands after its own update (earlier mentions of the window included), through a
              projection added to the residual stream that starts at zero. Entities carry from window to window in
              `entity_states` (zeros for a document not yet read).
            - `"paper"`: the literal reading of section 3: every block ends with an entity attention whose keys are
              the entity representations of the tokens; an entity's representation is a vector of ones until a
              window ends, then the final hidden state (after `ln_f`) of its last mention. On a recall task this
              state does not carry the entity (benchmarks/RESULTS.md, "GPT2E recall task"): the final hidden state
              becomes a next-token predictor, and within a window every entity reads the same vector of ones.
        entity_memory_layer (`int`, *optional*):
            After which block (0-based) the entity memory writes and reads (`entity_state="memory"` only).
            Defaults to the middle block, `n_layer // 2`, but never the last block of a model with two or more:
            what a mention reads reaches the tokens after it through the blocks that follow.
        max_entities (`int`, *optional*, defaults to 256):
            Capacity of the entity store of one document: entity ids run from 1 to `max_entities` (0 = the token is
            not part of an entity mention). The entity states have `max_entities + 1` rows, row 0 being the
            no-entity representation E_Ø (a vector of ones that never changes for `"paper"`; unused for `"memory"`).
        entity_attention_values (`str`, *optional*, defaults to `"hidden"`):
            (`entity_state="paper"` only.) Where the entity attention takes its values. The paper (3.1) says the
            entity attention "considers Entities (E) as the Key (K)" of the masked multi-head attention: the keys of
            position j come from the entity representation of token j, the queries from the token states. `"hidden"` (the literal reading)
            takes the values from the token states, as self-attention does, so the entities decide where a token
            looks; `"entities"` takes them from the entity representations too, so their content flows in.
        entity_attention_size (`int`, *optional*):
            (`entity_state="paper"` only.) Width of the entity attention's queries, keys and values (split over
            `n_head` heads; a multiple of `n_head`). Defaults to a quarter of `n_embd` (rounded to a multiple of
            `n_head`). The paper does not give the width; it reports that the entity attention costs 2.8% of GPT-2's training time per step, and a
            narrower entity attention costs less: `benchmarks/bench_gpt2e_attention_width.py` measures the step
            time of each width against GPT-2 (figures in benchmarks/RESULTS.md).
        evaluation_results (`list[dict]`, *optional*):
            Measured results reported in the model card; the package adds them with `hf_entity_models.hub.record_evaluation`.

    Example:

    ```python
    >>> from hf_entity_models import GPT2EConfig, GPT2EForCausalLM

    >>> config = GPT2EConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, max_entities=8)
    >>> config.preset, config.entity_memory_layer
    ('entity-memory', 0)
    >>> GPT2EConfig.from_preset("paper", n_layer=2, n_embd=32, n_head=2).entity_attention_size
    8
    >>> model = GPT2EForCausalLM(config)

    ```
    """

    model_type = "gpt2e"
    # The Trainer's evaluation drops these output keys; the cache is `cache` from transformers 5.24 on.
    keys_to_ignore_at_inference = ["cache", "past_key_values", "entity_states"]

    entity_state: str = "memory"
    entity_memory_layer: int | None = None
    max_entities: int = 256
    entity_attention_values: str = "hidden"
    entity_attention_size: int | None = None
    evaluation_results: list[dict] | None = None

    def __post_init__(self, **kwargs):
        if self.entity_memory_layer is None:
            self.entity_memory_layer = max(0, min(self.n_layer // 2, self.n_layer - 2))
        if self.entity_attention_size is None:
            self.entity_attention_size = max(self.n_head, self.n_embd // 4 // self.n_head * self.n_head)
        super().__post_init__(**kwargs)
        self._check_entity_fields()

    def _check_entity_fields(self) -> None:
        limits = {
            "n_embd": WIDTH_LIMIT,
            "n_inner": WIDTH_LIMIT,
            "n_layer": LAYERS_LIMIT,
            "n_positions": POSITIONS_LIMIT,
            "vocab_size": VOCABULARY_LIMIT,
            "max_entities": MAX_ENTITIES_LIMIT,
            "entity_attention_size": WIDTH_LIMIT,
        }
        check_size_limits(self, limits, self._parameter_estimate())
        if isinstance(self.max_entities, bool) or self.max_entities < 1:
            raise ValueError(f"max_entities must be a positive int (the store capacity), got {self.max_entities!r}.")
        if self.entity_state not in ENTITY_STATES:
            raise ValueError(
                f"entity_state must be one of {ENTITY_STATES} (see GPT2EConfig's docstring), got {self.entity_state!r}."
            )
        if isinstance(self.entity_memory_layer, bool) or not 0 <= self.entity_memory_layer < self.n_layer:
            raise ValueError(
                f"entity_memory_layer must be a block index in 0..{self.n_layer - 1} (n_layer={self.n_layer}), got "
                f"{self.entity_memory_layer!r}."
            )
        if self.entity_attention_values not in ENTITY_ATTENTION_VALUES:
            raise ValueError(
                f"entity_attention_values must be one of {ENTITY_ATTENTION_VALUES}, got {self.entity_attention_values!r}."
            )
        if self.entity_attention_size < 1 or self.entity_attention_size % self.n_head:
            raise ValueError(
                f"entity_attention_size ({self.entity_attention_size}) must be a positive multiple of n_head "
                f"({self.n_head}): the entity attention splits it over the heads."
            )
        if self.add_cross_attention:
            raise ValueError("GPT2E is a decoder-only language model: add_cross_attention=True is not supported.")

    def _parameter_estimate(self) -> int:
        """About how many parameters the model has: token and position embeddings (and an untied LM head), GPT-2's
        blocks, and the entity attention of every block or the one entity memory (the largest terms only)."""
        width, layers = self.n_embd, self.n_layer
        inner = self.n_inner or 4 * width
        embeddings = (self.vocab_size * (1 if self.tie_word_embeddings else 2) + self.n_positions) * width
        entity = layers * 4 * width * self.entity_attention_size if self.entity_state == "paper" else 4 * width * width
        return embeddings + layers * (4 * width * width + 2 * width * inner) + entity

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs) -> "GPT2EConfig":
        # A GPT2E config saved before `entity_state` existed (saved configs record every field) belongs to a model
        # trained with the paper's entity attention: load it as it was, not with a fresh entity memory. A GPT-2
        # config (model_type "gpt2") gets the default.
        saved_gpt2e = config_dict.get("model_type") == cls.model_type and "transformers_version" in config_dict
        if saved_gpt2e and "entity_state" not in config_dict:
            config_dict = {**config_dict, "entity_state": "paper"}
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_preset(cls, preset: str, **kwargs) -> "GPT2EConfig":
        """The config of a named design (`PRESETS`), with any other field in `kwargs`."""
        if preset not in PRESETS:
            raise ValueError(f"Unknown GPT2E preset {preset!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[preset], **kwargs})

    @property
    def preset(self) -> str | None:
        """The name of the preset this config is, or None. The fields decide it: a `preset` given to the constructor
        or written in config.json is accepted when it names this one and refused otherwise (use `from_preset`)."""
        for name, switches in PRESETS.items():
            if all(getattr(self, key) == value for key, value in switches.items()):
                return name
        return None


__all__ = ["ENTITY_ATTENTION_VALUES", "ENTITY_STATES", "PRESETS", "GPT2EConfig"]
