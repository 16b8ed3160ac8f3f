"""ForceReader model configuration.

It imports only ``transformers``, ``huggingface_hub``, the standard library and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a saved config loads with
``trust_remote_code=True`` where this package is not installed.
"""

import math
import numbers
import os
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from hf_entity_models.models._shared.encoders import build_encoder_config
from hf_entity_models.models._shared.checkpoints import WIDTH_LIMIT, CheckpointConfigMixin, SizeLimit
from hf_entity_models.models._shared.checkpoints import check_size_limits, transformer_parameter_estimate

READING_MODES = ("q2p", "p2q", "qcp")
# What the start/end classifier of the full ForceReader reads (see the `interaction_head` field).
INTERACTION_HEADS = ("residual", "concat", "paper")
# Where Eq. 3 adds the background h_QCP (see the `background_attention_side` field).
BACKGROUND_ATTENTION_SIDES = ("query", "key")
# How the two answer heads (the QCP token head and the separate-encoding branch) are trained (see `head_training`).
HEAD_TRAININGS = ("sum", "deep-supervision", "stacked")
# The widest interaction kernel a config may ask for (see `check_size_limits`).
KERNEL_SIZE_LIMIT = SizeLimit(
    1_023, "a kernel of 1,023 already spans the whole passage-by-question map of a 512-token input from any pair"
)
# The branch weights `train_on_squad` chooses among on validation questions (see `branch_weight`).
BRANCH_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
# The two-head training switches, at the values that train the summed logits alone (the issue-22 design, and what
# configs saved before these fields existed were trained with).
SUMMED_HEAD_TRAINING = dict(
    head_training="sum", detach_branch_from_encoder=False, branch_dropout=0.0, branch_gate=False
)
# The rungs of the paper's ablation ladder (Table 1), each one config (the switches that differ from the default),
# and the full model read as printed.
PRESETS = {
    "joint-bert": dict(
        separate_encoding=False, reading_modes=[], conditional_background_attention=False, interactive_reasoning=False
    ),
    "sep-bert-reader": dict(
        separate_encoding=True, reading_modes=[], conditional_background_attention=False, interactive_reasoning=False
    ),
    "multi-mode-reader": dict(
        separate_encoding=True,
        reading_modes=list(READING_MODES),
        conditional_background_attention=False,
        interactive_reasoning=False,
    ),
    "cond-attention-reader": dict(
        separate_encoding=True,
        reading_modes=list(READING_MODES),
        conditional_background_attention=True,
        interactive_reasoning=False,
    ),
    "forcereader": dict(
        separate_encoding=True,
        reading_modes=list(READING_MODES),
        conditional_background_attention=True,
        interactive_reasoning=True,
    ),
    # The full model trained as in issue 22: Eq. 7 on the summed logits of its two heads only, the encoder trained
    # through every pass. Its separate-encoding branch fits the training questions first and the joint head then
    # learns little: kept to reproduce that measurement (see `head_training` and the model card).
    "forcereader-sum": dict(
        separate_encoding=True,
        reading_modes=list(READING_MODES),
        conditional_background_attention=True,
        interactive_reasoning=True,
        **SUMMED_HEAD_TRAINING,
    ),
    # The full model with every part read as printed: the QCP pair gives only its [CLS] (3.2, 3.3), Eq. 3 adds h_QCP
    # on the key side, and the classifier reads the interaction features alone (3.5). Kept for reproduction: it
    # hardly learns within a fine-tuning budget (see the three fields' docs and the model card).
    "forcereader-paper": dict(
        separate_encoding=True,
        reading_modes=list(READING_MODES),
        conditional_background_attention=True,
        interactive_reasoning=True,
        qcp_passage_logits=False,
        background_attention_side="key",
        interaction_head="paper",
    ),
}


@strict
class ForceReaderConfig(CheckpointConfigMixin, PreTrainedConfig):
    r"""
    Configuration of a ForceReader (an interactive BERT-based reading-comprehension model: Attention Separate
    Representation, Multi-mode Reading, Conditional Background Attention and Interactive Reasoning). Every idea of
    the paper is a switch, so every rung of its ablation ladder is one config: see `PRESETS` and `from_preset`
    (`"joint-bert"`, `"sep-bert-reader"`, `"multi-mode-reader"`, `"cond-attention-reader"`, `"forcereader"`, and
    `"forcereader-paper"`, the full model with every part read as printed).

    Args:
        encoder_config (`dict` or `PreTrainedConfig`, *optional*):
            Configuration of the BERT-like encoder (fine-tuned with the reader). It must take `token_type_ids`.
            Defaults to BERT-base.
        separate_encoding (`bool`, *optional*, defaults to `True`):
            Attention Separate Representation (section 3.1): the encoder reads "[CLS] question [SEP]" and
            "[CLS] passage [SEP]" separately, both rebuilt from the packed input. `False` is the joint BERT baseline:
            one pass over the packed input and a linear start/end classifier.
        reading_modes (`list[str]`, *optional*, defaults to `["q2p", "p2q", "qcp"]`):
            Multi-mode Reading (3.2, Eq. 2): `"q2p"` adds to every question token its attention read of the passage,
            `"p2q"` adds to every passage token its attention read of the question, `"qcp"` encodes the packed
            question-passage pair jointly and keeps its [CLS] vector h_QCP as background semantics (and, with
            `qcp_passage_logits`, its passage token states). Needs `separate_encoding`.
        qcp_passage_logits (`bool`, *optional*, defaults to `True`):
            Whether the QCP mode's jointly read passage tokens also score the answer span: a linear start/end
            classifier on the packed pair's token states (BERT's question-answering head) whose logits are added to
            those of the separate-encoding head. Section 3.2 keeps only the pair's [CLS] (h_QCP), to keep the
            attention deconcentration of joint reading out of the answer; `False` is that literal reading. Read
            literally, every rung that encodes question and passage apart generalises much worse than joint BERT at
            a fine-tuning budget (measured on SQuAD, see the model card), although their training losses fall alike:
            the joint pass already runs for h_QCP, and its token states cost nothing more to read. Only used when
            `"qcp"` is in `reading_modes`. Configs saved before the field existed load with `False` (as they
            were trained).
        head_training (`str`, *optional*, defaults to `"stacked"`):
            How the loss trains the two answer heads when the QCP token head is on (`qcp_passage_logits`; only used
            then): the QCP
            token head (joint reading) and the separate-encoding branch (every other start/end logit). `"sum"`:
            Eq. 7 on the summed logits only. `"deep-supervision"`: Eq. 7 on the sum plus Eq. 7 on each head's
            logits alone, so each head learns as if it were alone. `"stacked"`: Eq. 7 on the QCP token head alone
            plus Eq. 7 on the sum with the QCP token head's logits detached, so the joint head (and, with
            `detach_branch_from_encoder`, the encoder) trains exactly as the joint baseline and the branch learns
            what the joint head's logits miss.
        detach_branch_from_encoder (`bool`, *optional*, defaults to `True`):
            Whether the separate-encoding branch sends no gradient into the shared encoder: the separate question
            and passage passes run without gradient (which also saves their backward pass) and h_QCP enters the
            branch detached, so only the QCP token head trains the encoder. Needs the QCP token head.
        branch_dropout (`float`, *optional*, defaults to 0.0):
            In training, the probability that a row's separate-encoding logits are dropped (the row is then scored
            by the QCP token head alone), not rescaled. Only used with the QCP token head.
        branch_gate (`bool`, *optional*, defaults to `False`):
            Multiply the separate-encoding logits by a learned scalar that starts at 0 (the branch's bilinear maps
            then start from a normal draw instead of zero, so that the gate gets a gradient). Only used with the QCP
            token head.
        branch_weight (`float`, *optional*, defaults to 1.0):
            Weight of the separate-encoding branch's logits in the answer (the QCP token head's weigh 1), in training
            and inference. `train_on_squad` chooses it on the validation questions among `BRANCH_WEIGHTS` and stores
            it (the branch fits its training questions faster than it learns to read: a weight below 1 keeps what
            of it carries to other articles; 0 answers with the QCP token head alone). Only used with the QCP token
            head. A finite number >= 0, checked whenever it is set (`config.branch_weight = -1.0` raises).
        branch_weight_validation_f1 (`dict[str, float]`, *optional*):
            The validation F1 at each weight (as a string, e.g. `"0.25"`) `train_on_squad` tried when it chose
            `branch_weight` (`record_branch_weight`); None when it was not chosen on validation (the card says so).
        conditional_background_attention (`bool`, *optional*, defaults to `True`):
            Conditional Background Attention (3.3, Eq. 3): the Q2P / P2Q attention scores are conditioned on h_QCP
            (see `background_attention_side`). Needs `"qcp"` in `reading_modes`. Without it, h_QCP is added to the
            question summary of the answer classifier (the paper does not say how the MultiModeReader fuses QCP;
            this is the choice made here).
        background_attention_side (`str`, *optional*, defaults to `"query"`):
            Which side of the attention score h_QCP is added to. `"key"` is Eq. 3 as printed:
            softmax_j((H_Pj + h_QCP) . H_Qi). Its extra term h_QCP . H_Qi is the same for every j, and a softmax is
            blind to a constant, so the attention weights never change with h_QCP and h_QCP gets no gradient
            (kept for reproduction; the QCP encoder pass is then skipped when nothing else reads h_QCP).
            `"query"` (default) adds h_QCP to the attending token instead: softmax_j(H_Pj . (H_Qi + h_QCP)) =
            softmax_j(H_Pj . H_Qi + H_Pj . h_QCP), so every key is also weighed by how well it matches the jointly
            read pair: the background conditions the attention, as section 3.3 intends.
        interactive_reasoning (`bool`, *optional*, defaults to `True`):
            Interactive Reasoning (3.4, Eqs. 4-6): the cosine and L1 interaction tensor S of passage x question
            tokens, `len(interaction_kernel_sizes)` separable convolution layers, global max-pooling over the
            question, and start/end logits from the pooled features (3.5). Without it, start/end logits are
            bilinear in each passage token and an attention-pooled question vector (the "AttentiveReader-like"
            prediction of the SepBERTReader rung).
        interaction_channels (`int`, *optional*, defaults to 64):
            Output channels c of every separable convolution layer.
        interaction_kernel_sizes (`list[int]`, *optional*, defaults to `[3, 5, 7]`):
            Kernel size of the depthwise convolution of each layer ("different receptive field sizes"), odd.
        interaction_head (`str`, *optional*, defaults to `"residual"`):
            What the start/end classifier reads when `interactive_reasoning` is on. Section 4.2 builds ForceReader
            by *adding* the interaction module to the CondAttentionReader; `"residual"` (default) reads it that way:
            the CondAttentionReader's bilinear passage head plus a zero-initialised linear projection of
            LayerNorm(H), so the model starts as the CondAttentionReader and the interaction features add to its
            logits. `"concat"` classifies [H; H_P] linearly. `"paper"` is 3.5 read literally: a linear classifier on
            H alone. H is bounded (cosines, mean L1 distances, max-pooled ReLUs) and starts with a tiny spread, so
            that head cannot scale its logits within a fine-tuning budget and hardly learns (measured: F1 2.6
            against 23 for the joint baseline on 1,200 SQuAD questions); it is kept to reproduce the reading.
            Configs saved with the older boolean `interaction_keeps_passage_features` load as `"concat"` (true) or
            `"paper"` (false).
        scale_mode_attention (`bool`, *optional*, defaults to `False`):
            Divide the Q2P / P2Q attention scores by sqrt(hidden size). The paper's Eq. 2 and 3 do not scale.
        null_score_diff_threshold (`float`, *optional*, defaults to 0.0):
            SQuAD 2.0: answer "no answer" when the [CLS] score minus the best span score exceeds it. Tune it on
            validation data (`train_on_squad` stores the best one); the question-answering pipeline reads it.
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout on the states the new layers read.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialiser of the new layers.
        evaluation_results (`list[dict]`, *optional*):
            Measured results reported in the model card; the package adds them with `hf_entity_models.hub.record_evaluation`.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering

    >>> encoder_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    >>> config = ForceReaderConfig.from_preset("cond-attention-reader", encoder_config=encoder_config)
    >>> config.interactive_reasoning, config.reading_modes
    (False, ['q2p', 'p2q', 'qcp'])
    >>> model = ForceReaderForQuestionAnswering(config)

    ```
    """

    model_type = "forcereader"
    sub_configs = {"encoder_config": AutoConfig}

    encoder_config: dict | PreTrainedConfig | None = None
    separate_encoding: bool = True
    reading_modes: list[str] | tuple[str, ...] = READING_MODES
    conditional_background_attention: bool = True
    interactive_reasoning: bool = True
    interaction_channels: int = 64
    interaction_kernel_sizes: list[int] | tuple[int, ...] = (3, 5, 7)
    interaction_head: str = "residual"
    qcp_passage_logits: bool = True
    head_training: str = "stacked"
    detach_branch_from_encoder: bool = True
    branch_dropout: float | int = 0.0
    branch_gate: bool = False
    branch_weight: float | int = 1.0
    branch_weight_validation_f1: dict[str, float] | None = None
    background_attention_side: str = "query"
    scale_mode_attention: bool = False
    null_score_diff_threshold: float | int = 0.0
    classifier_dropout: float | int = 0.1
    initializer_range: float = 0.02
    evaluation_results: list[dict] | None = None

    def __post_init__(self, **kwargs):
        legacy_head = kwargs.pop("interaction_keeps_passage_features", None)
        if legacy_head is not None:  # configs saved before `interaction_head` existed
            self.interaction_head = "concat" if legacy_head else "paper"
        self.encoder_config = build_encoder_config(self.encoder_config, default_model_type="bert")
        self.reading_modes = list(self.reading_modes)
        self.interaction_kernel_sizes = [int(size) for size in self.interaction_kernel_sizes]
        super().__post_init__(**kwargs)
        self.validate_values()

    def __setattr__(self, name: str, value: Any) -> None:
        # A bad value is refused when set, not only when built: saved, it would make a folder that no longer loads.
        # Checks across fields run when the config is built, validated or saved (related fields are set one by one).
        problem = _field_problem(name, value)
        _require(problem is None, problem)
        super().__setattr__(name, value)

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """`PreTrainedConfig.save_pretrained`, raising a one-line ValueError for an invalid config (e.g. a value set
        through `config.__dict__`) before anything is written: transformers validates after writing the code."""
        self.validate_values()
        super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs) -> "ForceReaderConfig":
        # A config saved before `qcp_passage_logits` existed (every saved config records `transformers_version` and
        # all its fields) was trained without the QCP token head: load it as it was, not with a fresh random head.
        if "transformers_version" in config_dict and "qcp_passage_logits" not in config_dict:
            config_dict = {**config_dict, "qcp_passage_logits": False}
        # Likewise a config saved before the two-head training switches was trained on the summed logits alone.
        if "transformers_version" in config_dict and "head_training" not in config_dict:
            config_dict = {**SUMMED_HEAD_TRAINING, **config_dict}
        return super().from_dict(config_dict, **kwargs)

    @classmethod
    def from_preset(cls, preset: str, **kwargs) -> "ForceReaderConfig":
        """The config of one rung of the paper's ablation ladder (`PRESETS`), with any other field in `kwargs`."""
        if preset not in PRESETS:
            raise ValueError(f"Unknown ForceReader preset {preset!r}; choose one of {sorted(PRESETS)}.")
        return cls(**{**PRESETS[preset], **kwargs})

    @property
    def preset(self) -> str | None:
        """The name of the preset this config is (the one that fixes the most fields, when several fit), or None
        for a combination outside the ladder. The fields decide it: a `preset` given to the constructor or written
        in config.json is accepted when it names this one and refused otherwise (use `from_preset`)."""
        fitting = [
            (len(switches), name)
            for name, switches in PRESETS.items()
            if all(getattr(self, field) == value for field, value in switches.items())
        ]
        return max(fitting)[1] if fitting else None

    @property
    def scores_qcp_tokens(self) -> bool:
        """Whether the QCP pass's token states score the answer (`qcp_passage_logits`, with the QCP mode on)."""
        return "qcp" in self.reading_modes and self.qcp_passage_logits

    @property
    def has_two_heads(self) -> bool:
        """Whether the answer is scored by two heads, the QCP token head and the separate-encoding branch (the
        two-head training switches apply only then)."""
        return self.scores_qcp_tokens  # the QCP mode needs separate encoding, so the branch exists too

    def validate_values(self) -> None:
        """Every check of the fields' values (a `validate_*` method, so `validate()` runs it too): each field's own,
        again (a value may have been set past `__setattr__`), then those across fields."""
        for name in self.__dataclass_fields__:
            problem = _field_problem(name, getattr(self, name))
            _require(problem is None, problem)
        _require(
            self.separate_encoding or not (self.reading_modes or self.interactive_reasoning),
            "reading_modes and interactive_reasoning work on the separate question and passage encodings: set "
            "separate_encoding=True, or use the joint baseline (reading_modes=[], interactive_reasoning=False).",
        )
        _require(
            not self.conditional_background_attention or "qcp" in self.reading_modes,
            "conditional_background_attention conditions the attention on the QCP mode's [CLS]: add 'qcp' to "
            "reading_modes or set conditional_background_attention=False.",
        )
        limits = {"interaction_channels": WIDTH_LIMIT, "interaction_kernel_sizes": KERNEL_SIZE_LIMIT}
        check_size_limits(self, limits, self._parameter_estimate())

    def _parameter_estimate(self) -> int:
        """About how many parameters the model has: the encoder, the separable convolutions of the interactive
        reasoning and the bilinear start/end maps (the largest terms only)."""
        channels, hidden = self.interaction_channels, getattr(self.encoder_config, "hidden_size", 0)
        convolutions = sum(channels * size * size + channels * channels for size in self.interaction_kernel_sizes)
        return transformer_parameter_estimate(self.encoder_config) + convolutions + 2 * hidden * hidden


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# The fields whose values `_field_problem` checks against a list of choices.
_CHOICES = {
    "interaction_head": INTERACTION_HEADS,
    "background_attention_side": BACKGROUND_ATTENTION_SIDES,
    "head_training": HEAD_TRAININGS,
}


def _field_problem(name: str, value: Any) -> str | None:
    """What is wrong with the value of one field, checked on its own (None when nothing is, or for a field without a
    check of its own): run when the field is set, and on every field when the config is built, validated or saved."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)  # a comparison with NaN is False
    if name in _CHOICES:
        return None if value in _CHOICES[name] else f"{name} must be one of {_CHOICES[name]}, got {value!r}."
    if name == "reading_modes":
        unknown = [mode for mode in value if mode not in READING_MODES]
        if unknown:
            return f"reading_modes must be taken from {READING_MODES}, got unknown {unknown}."
        return None if len(set(value)) == len(value) else f"reading_modes must not repeat a mode, got {list(value)}."
    if name == "branch_dropout" and not (number and 0 <= value <= 1):
        return f"branch_dropout must be a probability in [0, 1], got {value!r}."
    if name == "branch_weight" and not (number and 0 <= value < math.inf):
        return f"branch_weight must be a finite number >= 0, got {value!r}: 0 answers with the QCP token head alone."
    if name == "branch_weight_validation_f1" and not (value is None or _is_weight_record(value)):
        return (
            "branch_weight_validation_f1 must map branch weights (finite numbers >= 0, as strings such as \"0.25\") "
            f"to finite F1 scores, got {value!r}: record a choice with record_branch_weight, or set it to None."
        )
    if name == "interaction_channels" and not value >= 1:
        return f"interaction_channels must be >= 1, got {value}."
    if name == "interaction_kernel_sizes" and not (value and all(size >= 1 and size % 2 == 1 for size in value)):
        return f"interaction_kernel_sizes must be a non-empty list of odd sizes, got {value}."
    if name == "null_score_diff_threshold" and not (number and -math.inf < value < math.inf):
        return (
            f"null_score_diff_threshold must be a finite number, got {value!r}: a non-finite threshold makes the model "
            "always or never answer; choose one on validation (choose_null_threshold) or use 0.0."
        )
    if name == "classifier_dropout" and not (number and 0 <= value < 1):
        return f"classifier_dropout must be in [0, 1), got {value}."
    return None


def _is_weight_record(record: Any) -> bool:
    try:  # a weight that is no number, or an F1 that cannot be compared, raises
        return isinstance(record, dict) and all(
            isinstance(weight, str) and 0 <= float(weight) < math.inf and -math.inf < f1 < math.inf
            for weight, f1 in record.items()
        )
    except (TypeError, ValueError):
        return False


__all__ = [
    "BACKGROUND_ATTENTION_SIDES",
    "BRANCH_WEIGHTS",
    "HEAD_TRAININGS",
    "INTERACTION_HEADS",
    "PRESETS",
    "READING_MODES",
    "SUMMED_HEAD_TRAINING",
    "ForceReaderConfig",
]
