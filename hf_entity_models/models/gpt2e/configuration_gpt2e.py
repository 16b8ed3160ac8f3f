"""GPT2E (Entity-Transformers) model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

from huggingface_hub.dataclasses import strict
from transformers import GPT2Config

from hf_entity_models.models._shared.evaluation_results import EvaluationResultsMixin
from hf_entity_models.models._shared.portable_code import SelfContainedConfigMixin

ENTITY_ATTENTION_VALUES = ("hidden", "entities")


@strict
class GPT2EConfig(SelfContainedConfigMixin, EvaluationResultsMixin, GPT2Config):
    r"""
    Configuration of a GPT2E model (Stylianou and Vlahavas, 2021): GPT-2 whose Transformer blocks are
    Entity-Transformer blocks that also attend to the representations of the coreference entities of the tokens.

    Every field of `GPT2Config` keeps its meaning and default (so a GPT-2 `config.json` is a valid GPT2E config:
    `GPT2EForCausalLM.from_pretrained` of a GPT-2 folder maps every GPT-2 weight), plus:

    Args:
        max_entities (`int`, *optional*, defaults to 256):
            Capacity of the entity store of one document: entity ids run from 1 to `max_entities` (0 = the token is
            not part of an entity mention). The entity states have `max_entities + 1` rows, row 0 being the
            no-entity representation E_Ø, a vector of ones that never changes.
        entity_attention_values (`str`, *optional*, defaults to `"hidden"`):
            Where the entity attention takes its values. The paper (3.1) says the entity attention "considers
            Entities (E) as the Key (K)" of the masked multi-head attention: the keys of position j come from the
            entity representation of token j, the queries from the token states. `"hidden"` (the literal reading)
            takes the values from the token states, as self-attention does, so the entities decide where a token
            looks; `"entities"` takes them from the entity representations too, so their content flows in.
        entity_attention_size (`int`, *optional*):
            Width of the entity attention's queries, keys and values (split over `n_head` heads; a multiple of
            `n_head`). Defaults to a quarter of `n_embd` (rounded to a multiple of `n_head`). The paper does not give
            the width; it reports that the entity attention costs 2.8% of GPT-2's training time per step, and a
            narrower entity attention costs less: `benchmarks/bench_gpt2e_attention_width.py` measures the step
            time of each width against GPT-2 (figures in benchmarks/RESULTS.md).
        evaluation_results (`list[dict]`, *optional*):
            Measured results recorded in the model card (see `record_evaluation`).

    Example:

    ```python
    >>> from hf_entity_models import GPT2EConfig, GPT2EForCausalLM

    >>> config = GPT2EConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, max_entities=8)
    >>> config.entity_attention_size
    8
    >>> model = GPT2EForCausalLM(config)

    ```
    """

    model_type = "gpt2e"
    # The Trainer's evaluation drops these output keys; the cache is `cache` from transformers 5.24 on.
    keys_to_ignore_at_inference = ["cache", "past_key_values", "entity_states"]

    max_entities: int = 256
    entity_attention_values: str = "hidden"
    entity_attention_size: int | None = None
    evaluation_results: list[dict] | None = None

    def __post_init__(self, **kwargs):
        if self.entity_attention_size is None:
            self.entity_attention_size = max(self.n_head, self.n_embd // 4 // self.n_head * self.n_head)
        super().__post_init__(**kwargs)
        self._check_entity_fields()

    def _check_entity_fields(self) -> None:
        if isinstance(self.max_entities, bool) or self.max_entities < 1:
            raise ValueError(f"max_entities must be a positive int (the store capacity), got {self.max_entities!r}.")
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
        self.validate_evaluation_results()


__all__ = ["ENTITY_ATTENTION_VALUES", "GPT2EConfig"]
