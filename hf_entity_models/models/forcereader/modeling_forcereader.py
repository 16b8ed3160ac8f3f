"""PyTorch ForceReader: an interactive BERT-based reading-comprehension model (Attention Separate Representation,
Multi-mode Reading, Conditional Background Attention, Interactive Reasoning).

It imports only torch, transformers, files of its own folder and the shared model code
(``hf_entity_models.models._shared``), which saving copies next to it, so that a checkpoint loads with
``trust_remote_code=True`` where this package is not installed.

The model takes the standard packed QA features (``[CLS] question [SEP] passage [SEP]`` with ``token_type_ids``), so
features, post-processing, Trainer set-up and pipelines serve it and ``BertForQuestionAnswering`` alike; the separate
question and passage sequences are rebuilt from them inside the model. Section and equation numbers refer to the
paper. Shapes use B = batch, L = packed length, Q / P = question / passage sequence length, H = hidden size,
C = interaction channels.
"""

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from hf_entity_models.models._shared.encoders import copy_encoder_weights, load_pretrained_encoder
from hf_entity_models.models._shared.checkpoints import CheckpointMixin

from .configuration_forcereader import ForceReaderConfig

logger = logging.get_logger(__name__)

# Start/end logit of a position that cannot begin or end an answer (question, separators, padding). Finite, so that
# a softmax over a row stays defined and float16 can hold it.
MASKED_LOGIT = -1e4


class SeparateSequences(NamedTuple):
    """The question and passage rebuilt from a packed input as two single-segment sequences."""

    question_ids: torch.LongTensor  # (B, Q): [CLS] question [SEP]
    question_mask: torch.BoolTensor  # (B, Q)
    passage_ids: torch.LongTensor  # (B, P): [CLS] passage [SEP]
    passage_mask: torch.BoolTensor  # (B, P)
    passage_positions: torch.LongTensor  # (B, P): packed position of every passage-sequence position


def split_packed_input(
    input_ids: torch.LongTensor, token_type_ids: torch.LongTensor, attention_mask: torch.Tensor
) -> SeparateSequences:
    """Rebuild "[CLS] question [SEP]" and "[CLS] passage [SEP]" from "[CLS] question [SEP] passage [SEP]".

    The question segment is the right-padded prefix with token type 0; the passage segment the tokens of type 1.
    The passage sequence starts with the packed input's own [CLS], so it maps back to packed position 0 (where
    SQuAD 2.0 features put the no-answer label).
    """
    valid = attention_mask.bool()
    question_mask = valid & (token_type_ids == 0)
    passage_tokens = valid & (token_type_ids == 1)
    question_length = question_mask.sum(dim=1)
    passage_length = passage_tokens.sum(dim=1) + 1  # + the leading [CLS]
    if bool((question_length < 2).any()) or bool((passage_tokens.sum(dim=1) < 1).any()):
        raise ValueError(
            "Every row needs a question segment (token_type_ids 0) and a passage segment (token_type_ids 1): pass "
            "packed question-passage features, e.g. tokenizer(question, context) with return_token_type_ids=True."
        )
    question_span = int(question_length.max())
    steps = torch.arange(int(passage_length.max()), device=input_ids.device)
    # Passage step k >= 1 is packed position question_length + k - 1; step 0 is the packed [CLS] at position 0.
    passage_positions = torch.where(steps == 0, 0, question_length[:, None] + steps - 1)
    passage_mask = steps < passage_length[:, None]
    passage_positions = passage_positions.masked_fill(~passage_mask, 0).clamp(max=input_ids.shape[1] - 1)
    question_mask = question_mask[:, :question_span]
    # Padding positions of both sequences hold id 0; the masks keep the encoder off them.
    return SeparateSequences(
        question_ids=input_ids[:, :question_span].masked_fill(~question_mask, 0),
        question_mask=question_mask,
        passage_ids=input_ids.gather(1, passage_positions).masked_fill(~passage_mask, 0),
        passage_mask=passage_mask,
        passage_positions=passage_positions.masked_fill(~passage_mask, -1),
    )


@dataclass
class ForceReaderModelOutput(ModelOutput):
    """
    Outputs of [`ForceReaderModel`]: the passage (and question) states the answer classifier reads.

    Args:
        passage_states (`torch.FloatTensor` of shape `(batch_size, passage_length, hidden_size)`):
            The passage sequence "[CLS] passage [SEP]" after the reading modes; with `separate_encoding=False`, the
            states of the whole packed input.
        passage_mask (`torch.BoolTensor` of shape `(batch_size, passage_length)`):
            Real (not padding) positions of `passage_states`.
        passage_positions (`torch.LongTensor` of shape `(batch_size, passage_length)`):
            The packed position of every passage position (-1 for padding).
        question_states (`torch.FloatTensor` of shape `(batch_size, question_length, hidden_size)`, *optional*):
            The question sequence "[CLS] question [SEP]" after the reading modes (separate encoding only).
        question_mask (`torch.BoolTensor` of shape `(batch_size, question_length)`, *optional*):
            Real positions of `question_states`.
        background (`torch.FloatTensor` of shape `(batch_size, hidden_size)`, *optional*):
            h_QCP, the [CLS] state of the jointly encoded pair (QCP mode).
        pair_states (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
            The QCP mode's states of the whole packed pair, in the packed layout (returned when the answer head
            reads them: `qcp_passage_logits`).
        question_to_passage_attentions (`torch.FloatTensor` of shape `(batch_size, question_length, passage_length)`, *optional*):
            Q2P attention alpha (Eq. 2 / 3): how each question token reads the passage (the paper's Figure 4).
        passage_to_question_attentions (`torch.FloatTensor` of shape `(batch_size, passage_length, question_length)`, *optional*):
            P2Q attention: how each passage token reads the question (Figure 5).
    """

    passage_states: torch.FloatTensor | None = None
    passage_mask: torch.BoolTensor | None = None
    passage_positions: torch.LongTensor | None = None
    question_states: torch.FloatTensor | None = None
    question_mask: torch.BoolTensor | None = None
    background: torch.FloatTensor | None = None
    pair_states: torch.FloatTensor | None = None
    question_to_passage_attentions: torch.FloatTensor | None = None
    passage_to_question_attentions: torch.FloatTensor | None = None


@dataclass
class ForceReaderQuestionAnsweringOutput(ModelOutput):
    """
    Outputs of [`ForceReaderForQuestionAnswering`], laid out like `BertForQuestionAnswering`'s.

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*, returned when `start_positions` and `end_positions` are given):
            Mean of the start and end cross-entropies (Eq. 7 up to its factor 2, as `BertForQuestionAnswering`),
            averaged over the batch.
        start_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
            Answer-start scores over the packed input; question, separator and padding positions hold `MASKED_LOGIT`.
            Position 0 ([CLS]) scores "no answer" (SQuAD 2.0).
        end_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`):
            Answer-end scores, masked likewise.
        question_to_passage_attentions (`torch.FloatTensor`, *optional*):
            See [`ForceReaderModelOutput`].
        passage_to_question_attentions (`torch.FloatTensor`, *optional*):
            See [`ForceReaderModelOutput`].
        qcp_start_logits, qcp_end_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The QCP token head's logits alone (returned with `output_head_logits=True` when the model has it).
        branch_start_logits, branch_end_logits (`torch.FloatTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The separate-encoding branch's logits alone, as they enter the sum (gate and `branch_weight` included;
            returned with `output_head_logits=True` when the model has two heads).
    """

    loss: torch.FloatTensor | None = None
    start_logits: torch.FloatTensor | None = None
    end_logits: torch.FloatTensor | None = None
    question_to_passage_attentions: torch.FloatTensor | None = None
    passage_to_question_attentions: torch.FloatTensor | None = None
    qcp_start_logits: torch.FloatTensor | None = None
    qcp_end_logits: torch.FloatTensor | None = None
    branch_start_logits: torch.FloatTensor | None = None
    branch_end_logits: torch.FloatTensor | None = None


class ForceReaderPreTrainedModel(CheckpointMixin, PreTrainedModel):
    config: ForceReaderConfig
    config_class = ForceReaderConfig
    base_model_prefix = "forcereader"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel: transformers dispatches its own `_init_weights` to it.
        super()._init_weights(module)
        if isinstance(module, nn.Conv2d):
            # He initialisation: the convolutions are stacked under ReLUs with small fan-ins (k x k per channel, then
            # the channels); a normal(0, initializer_range) start shrinks the interaction features to ~1e-8 over
            # three layers and training cannot start.
            init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
            if module.bias is not None:
                init.zeros_(module.bias)


class ModeAttention(nn.Module):
    """One reading mode of section 3.2: every query token adds its attention read of the other sequence (Eq. 2).
    When the attention is conditional (Eq. 3) the background h_QCP is added to the scores' query side (default: it
    weighs every key by its match with the pair) or, as printed, to the key side (a constant per query, which the
    softmax ignores: see `ForceReaderConfig.background_attention_side`)."""

    def __init__(self, hidden_size: int, scale: bool, background_side: str = "query"):
        super().__init__()
        self.scaling = hidden_size**-0.5 if scale else 1.0
        self.background_side = background_side

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        key_mask: torch.BoolTensor,
        background: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        score_queries, score_keys = queries, keys
        if background is not None and self.background_side == "query":
            score_queries = queries + background[:, None, :]
        elif background is not None:
            score_keys = keys + background[:, None, :]
        scores = torch.bmm(score_queries, score_keys.transpose(1, 2)) * self.scaling
        attention = scores.masked_fill(~key_mask[:, None, :], torch.finfo(scores.dtype).min).softmax(dim=-1)
        return queries + torch.bmm(attention, keys), attention


class InteractiveReasoning(nn.Module):
    """Section 3.4: the interaction tensor S = [cos; L1] of every passage-question token pair (Eq. 4), separable
    convolutions (Eq. 5: depthwise k x k per channel, then a 1 x 1 convolution across channels, ReLU), and global
    max-pooling over the question (Eq. 6) -> (B, P, C).

    The L1 distance is divided by the hidden size (the mean absolute difference), so that both channels of S have
    comparable scales; the paper does not say how they are scaled.
    """

    def __init__(self, config: ForceReaderConfig):
        super().__init__()
        layers = []
        channels = 2
        for kernel_size in config.interaction_kernel_sizes:
            layers.append(
                nn.ModuleDict(
                    {
                        "depthwise": nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels),
                        "pointwise": nn.Conv2d(channels, config.interaction_channels, kernel_size=1),
                    }
                )
            )
            channels = config.interaction_channels
        self.layers = nn.ModuleList(layers)

    def forward(
        self,
        passage: torch.Tensor,
        question: torch.Tensor,
        passage_mask: torch.BoolTensor,
        question_mask: torch.BoolTensor,
    ) -> torch.Tensor:
        pair_mask = (passage_mask[:, :, None] & question_mask[:, None, :])[:, None]  # (B, 1, P, Q)
        cosine = torch.bmm(F.normalize(passage, dim=-1), F.normalize(question, dim=-1).transpose(1, 2))
        l1 = torch.cdist(passage, question, p=1) / passage.shape[-1]
        interaction = torch.stack([cosine, l1], dim=1) * pair_mask
        for layer in self.layers:
            interaction = F.relu(layer["pointwise"](layer["depthwise"](interaction))) * pair_mask
        pooled = interaction.masked_fill(~pair_mask, torch.finfo(interaction.dtype).min).amax(dim=-1)
        # Padding passage positions have no question token to pool over: 0 rather than the fill value.
        return pooled.masked_fill(~passage_mask[:, None, :], 0.0).transpose(1, 2)


class BranchGate(nn.Module):
    """A learned scalar that scales the separate-encoding branch's logits (`branch_gate`); it starts at 0."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits * self.weight


class AnswerHeadLogits(NamedTuple):
    """Start/end logits of each answer head in the packed layout (non-answerable positions hold `MASKED_LOGIT`)."""

    branch_start: torch.Tensor  # the separate-encoding branch (the only head of a rung without the QCP token head)
    branch_end: torch.Tensor
    pair_start: torch.Tensor | None  # the QCP token head (None without it)
    pair_end: torch.Tensor | None
    answerable: torch.BoolTensor


class ForceReaderModel(ForceReaderPreTrainedModel):
    """
    The ForceReader body: the encoder and the reading modes (sections 3.1-3.3). Which parts run is set by the config
    (see `ForceReaderConfig.from_preset`).

    Example:

    ```python
    >>> import torch
    >>> from transformers import BertConfig
    >>> from hf_entity_models import ForceReaderConfig, ForceReaderModel

    >>> encoder_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    >>> model = ForceReaderModel(ForceReaderConfig(encoder_config=encoder_config))
    >>> packed = dict(input_ids=torch.tensor([[101, 2040, 102, 3958, 5964, 102]]),
    ...               token_type_ids=torch.tensor([[0, 0, 0, 1, 1, 1]]))
    >>> out = model(**packed)
    >>> out.question_states.shape, out.passage_states.shape
    (torch.Size([1, 3, 32]), torch.Size([1, 4, 32]))

    ```
    """

    def __init__(self, config: ForceReaderConfig):
        super().__init__(config)
        self.encoder = AutoModel.from_config(config.encoder_config)
        hidden_size = config.encoder_config.hidden_size
        side = config.background_attention_side
        self.question_to_passage = ModeAttention(hidden_size, config.scale_mode_attention, side)
        self.passage_to_question = ModeAttention(hidden_size, config.scale_mode_attention, side)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> ForceReaderModelOutput:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Packed "[CLS] question [SEP] passage [SEP]" token ids, right-padded.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 for real tokens, 0 for padding (default: all ones).
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                0 for the question segment, 1 for the passage segment; they tell the model where the question ends.
        """
        if input_ids.dim() != 2 or 0 in input_ids.shape:
            # An empty batch or row would fail deep inside the encoder or the segment split with an unrelated error.
            raise ValueError(
                f"input_ids has shape {tuple(input_ids.shape)}: ForceReader reads a batch of at least one packed "
                "question-passage row, shaped (batch_size, sequence_length), e.g. tokenizer(question, context, "
                "return_tensors='pt'); skip empty questions or contexts before calling the model."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            raise ValueError(
                "ForceReader needs token_type_ids (0 = question, 1 = passage) to find the passage: tokenize the pair "
                "with tokenizer(question, context, return_token_type_ids=True)."
            )
        if not self.config.separate_encoding:
            states = self._encode(input_ids, attention_mask, token_type_ids)
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
            valid = attention_mask.bool()
            return ForceReaderModelOutput(
                passage_states=states, passage_mask=valid, passage_positions=positions.masked_fill(~valid, -1)
            )
        sequences = split_packed_input(input_ids, token_type_ids, attention_mask)
        # `detach_branch_from_encoder`: only the QCP token head trains the encoder, so the separate passes need no
        # graph (and no backward pass), and h_QCP enters the branch without one.
        detach = self.config.has_two_heads and self.config.detach_branch_from_encoder
        with torch.set_grad_enabled(torch.is_grad_enabled() and not detach):
            question = self._encode(sequences.question_ids, sequences.question_mask)
            passage = self._encode(sequences.passage_ids, sequences.passage_mask)
        modes = self.config.reading_modes
        pair = self._encode(input_ids, attention_mask, token_type_ids) if self._reads_pair() else None
        background = pair[:, 0] if pair is not None else None
        if detach and background is not None:
            background = background.detach()
        condition = background if self.config.conditional_background_attention else None
        # Both modes read the separate encodings: they are parallel readings, not one after the other.
        question_to_passage = passage_to_question = None
        question_read, passage_read = question, passage
        if "q2p" in modes:
            question_read, question_to_passage = self.question_to_passage(
                question, passage, sequences.passage_mask, condition
            )
        if "p2q" in modes:
            passage_read, passage_to_question = self.passage_to_question(
                passage, question, sequences.question_mask, condition
            )
        return ForceReaderModelOutput(
            passage_states=passage_read,
            passage_mask=sequences.passage_mask,
            passage_positions=sequences.passage_positions,
            question_states=question_read,
            question_mask=sequences.question_mask,
            background=background,
            pair_states=pair if self.config.scores_qcp_tokens else None,
            question_to_passage_attentions=question_to_passage,
            passage_to_question_attentions=passage_to_question,
        )

    def _reads_pair(self) -> bool:
        """Whether anything reads the QCP pass over the packed pair (about one extra encoder pass): the answer head
        (its token states, `qcp_passage_logits`), the conditional attention on its query side, or the answer head's
        question summary (which adds h_QCP when the attention is not conditional). Eq. 3 read literally (the key
        side) changes nothing, so on its own it does not pay for the pass."""
        config = self.config
        if "qcp" not in config.reading_modes:
            return False
        if config.scores_qcp_tokens or not config.conditional_background_attention:
            return True
        return config.background_attention_side == "query" and bool({"q2p", "p2q"} & set(config.reading_modes))

    def _encode(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor, token_type_ids: torch.LongTensor | None = None
    ) -> torch.Tensor:
        if token_type_ids is None:  # a single-segment sequence
            token_type_ids = torch.zeros_like(input_ids)
        return self.encoder(
            input_ids=input_ids, attention_mask=attention_mask.long(), token_type_ids=token_type_ids
        ).last_hidden_state


class ForceReaderForQuestionAnswering(ForceReaderPreTrainedModel):
    """
    ForceReader with the answer prediction of section 3.5: start and end logits over the packed input, the
    cross-entropy of Eq. 7 when `start_positions` / `end_positions` are given.

    The rungs of the ladder predict differently: the joint baseline classifies each packed token linearly (BERT's
    QA head); the separate-encoding rungs without Interactive Reasoning score each passage token bilinearly against
    an attention-pooled question vector (the AttentiveReader-like prediction the paper names), plus h_QCP when the
    QCP mode is not already inside the attention; ForceReader adds the pooled interaction features H (Eq. 6) to
    that head through a zero-initialised projection of LayerNorm(H) (`interaction_head="residual"`, the default:
    section 4.2 adds the interaction module to the CondAttentionReader), or classifies [H; H_P] (`"concat"`) or H
    alone (`"paper"`, 3.5 read literally, which cannot scale its logits and hardly learns). The bilinear head and
    the residual projection start at zero. With the QCP mode and `qcp_passage_logits` (the default), a linear
    start/end head on the jointly encoded pair's token states (BERT's QA head, BERT's initialisation) adds its
    logits, so a fresh reader starts as the joint baseline; with `qcp_passage_logits=False` (the paper's [CLS]-only
    reading) training starts from uniform start/end distributions. With both heads, the default trains the encoder
    through the QCP token head only and the branch on what that head's logits miss (`head_training="stacked"`,
    `detach_branch_from_encoder=True`), and the branch weighs `branch_weight` in the answer.

    Example:

    ```python
    >>> import torch
    >>> from transformers import BertConfig
    >>> from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering

    >>> encoder_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    >>> model = ForceReaderForQuestionAnswering(ForceReaderConfig(encoder_config=encoder_config))
    >>> out = model(input_ids=torch.tensor([[101, 2040, 102, 3958, 5964, 102]]),
    ...             token_type_ids=torch.tensor([[0, 0, 0, 1, 1, 1]]),
    ...             start_positions=torch.tensor([3]), end_positions=torch.tensor([4]))
    >>> out.start_logits.shape, out.loss.shape
    (torch.Size([1, 6]), torch.Size([]))

    ```
    """

    def __init__(self, config: ForceReaderConfig):
        super().__init__(config)
        self.forcereader = ForceReaderModel(config)
        hidden_size = config.encoder_config.hidden_size
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.question_pooling = self.start_bilinear = self.end_bilinear = self.interaction = None
        self.interaction_norm = self.interaction_outputs = self.pair_outputs = None
        head = config.interaction_head if config.interactive_reasoning else None
        if config.interactive_reasoning:
            self.interaction = InteractiveReasoning(config)
        if head == "paper":
            self.qa_outputs = nn.Linear(config.interaction_channels, 2)
        elif head == "concat":
            self.qa_outputs = nn.Linear(config.interaction_channels + hidden_size, 2)
        elif config.separate_encoding:  # the bilinear passage head: the middle rungs, and ForceReader's "residual"
            self.question_pooling = nn.Linear(hidden_size, 1)
            self.start_bilinear = nn.Linear(hidden_size, hidden_size)
            self.end_bilinear = nn.Linear(hidden_size, hidden_size)
            if head == "residual":
                self.interaction_norm = nn.LayerNorm(config.interaction_channels)
                self.interaction_outputs = nn.Linear(config.interaction_channels, 2)
        else:
            self.qa_outputs = nn.Linear(hidden_size, 2)
        if config.scores_qcp_tokens:
            self.pair_outputs = nn.Linear(hidden_size, 2)  # BERT's QA head on the QCP pass (normal start, like BERT's)
        self.branch_gate = BranchGate() if config.has_two_heads and config.branch_gate else None
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        # Zero starts: the bilinear head would start with a start-logit spread of about 2.5 (an initial loss of
        # 14.5 against 9.7 for uniform logits, and encoder gradients of norm ~100); the residual interaction
        # projection makes the full model start exactly as its CondAttentionReader. Behind a gate that starts at
        # 0, the bilinear maps start from a normal draw instead: a zero branch behind a zero gate gets no gradient.
        bilinear = any(module is layer for layer in (self.start_bilinear, self.end_bilinear))
        if isinstance(module, BranchGate):
            init.zeros_(module.weight)
        elif bilinear and self.branch_gate is not None:
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.bias)
        elif bilinear or module is self.interaction_outputs:
            init.zeros_(module.weight)
            init.zeros_(module.bias)

    @classmethod
    def from_encoder(
        cls, encoder_name_or_path: str, preset: str = "forcereader", **config_overrides
    ) -> "ForceReaderForQuestionAnswering":
        """A fresh reader (one rung of the ladder, `preset`) around a pretrained BERT-like encoder.

        Example:

        ```python
        >>> model = ForceReaderForQuestionAnswering.from_encoder("bert-base-uncased", preset="forcereader")  # doctest: +SKIP

        ```
        """
        encoder = load_pretrained_encoder(encoder_name_or_path)
        config = ForceReaderConfig.from_preset(preset, encoder_config=encoder.config.to_dict(), **config_overrides)
        model = cls(config)
        copy_encoder_weights(model.forcereader.encoder, encoder, encoder_name_or_path)
        model.config.name_or_path = str(encoder_name_or_path)
        return model

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        output_head_logits: bool = False,
        **kwargs,
    ) -> ForceReaderQuestionAnsweringOutput:
        r"""
        Args:
            input_ids, attention_mask, token_type_ids:
                Packed question-passage features, as for `BertForQuestionAnswering` (see [`ForceReaderModel`]).
            start_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Packed position of the answer's first token (0, the [CLS], for no answer in the window).
            end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                Packed position of the answer's last token.
            output_head_logits (`bool`, *optional*, defaults to `False`):
                Also return each answer head's logits alone (see `head_logits`).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        body = self.forcereader(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        heads = self._head_logits(body, input_ids, attention_mask, token_type_ids)
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self._loss(heads, start_positions, end_positions)
        start_logits, end_logits = _combined(heads, heads.branch_start, heads.branch_end)
        separate = output_head_logits and heads.pair_start is not None
        return ForceReaderQuestionAnsweringOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            question_to_passage_attentions=body.question_to_passage_attentions,
            passage_to_question_attentions=body.passage_to_question_attentions,
            qcp_start_logits=heads.pair_start if separate else None,
            qcp_end_logits=heads.pair_end if separate else None,
            branch_start_logits=heads.branch_start if separate else None,
            branch_end_logits=heads.branch_end if separate else None,
        )

    def head_logits(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(start, end) logits over the packed input of each answer head alone and of their sum (what `forward`
        returns): `"combined"`, and with the QCP token head `"qcp_tokens"` and `"separate_encoding"` (the branch as
        it enters the sum, gate and `branch_weight` included). A diagnostic of which head carries the answer; also
        what `choose_branch_weight` combines.

        Example:

        ```python
        >>> model.eval()  # doctest: +SKIP
        >>> heads = model.head_logits(**tokenizer(question, context, return_tensors="pt"))  # doctest: +SKIP
        >>> sorted(heads)  # doctest: +SKIP
        ['combined', 'qcp_tokens', 'separate_encoding']

        ```
        """
        output = self(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, output_head_logits=True)
        return logits_per_head(output)

    def _head_logits(
        self,
        body: ForceReaderModelOutput,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.LongTensor | None,
    ) -> AnswerHeadLogits:
        passage = self.dropout(body.passage_states)
        question = self.dropout(body.question_states) if body.question_states is not None else None
        interaction = None
        if self.interaction is not None:
            interaction = self.interaction(passage, question, body.passage_mask, body.question_mask)
        if self.question_pooling is not None:
            summary = self._question_summary(question, body.question_mask, body.background)
            start = (passage * self.start_bilinear(summary)[:, None, :]).sum(dim=-1)
            end = (passage * self.end_bilinear(summary)[:, None, :]).sum(dim=-1)
            if self.interaction_outputs is not None:
                interaction_start, interaction_end = self.interaction_outputs(self.interaction_norm(interaction)).unbind(-1)
                start, end = start + interaction_start, end + interaction_end
        elif interaction is not None:
            features = interaction if self.config.interaction_head == "paper" else torch.cat([interaction, passage], -1)
            start, end = self.qa_outputs(features).unbind(dim=-1)
        else:
            start, end = self.qa_outputs(passage).unbind(dim=-1)
        if self.branch_gate is not None:
            start, end = self.branch_gate(start), self.branch_gate(end)
        if self.config.has_two_heads and self.config.branch_weight != 1:
            start, end = start * self.config.branch_weight, end * self.config.branch_weight
        answerable = _answerable_positions(input_ids, attention_mask, token_type_ids)
        pair_start = pair_end = None
        if self.pair_outputs is not None:  # the QCP mode's jointly read tokens (packed layout)
            pair_start, pair_end = self.pair_outputs(self.dropout(body.pair_states)).unbind(dim=-1)
            pair_start = pair_start.masked_fill(~answerable, MASKED_LOGIT)
            pair_end = pair_end.masked_fill(~answerable, MASKED_LOGIT)
        return AnswerHeadLogits(
            branch_start=_to_packed_positions(start, body.passage_positions, answerable),
            branch_end=_to_packed_positions(end, body.passage_positions, answerable),
            pair_start=pair_start,
            pair_end=pair_end,
            answerable=answerable,
        )

    def _loss(
        self, heads: AnswerHeadLogits, start_positions: torch.Tensor, end_positions: torch.Tensor
    ) -> torch.Tensor:
        """Eq. 7 on the summed logits, plus the heads' own terms that `head_training` asks for (section docs in
        `ForceReaderConfig`). Branch dropout acts on the branch only where it enters the sum."""
        if heads.pair_start is None:
            return _span_loss(heads.branch_start, heads.branch_end, start_positions, end_positions)
        branch_start, branch_end = heads.branch_start, heads.branch_end
        dropout = self.config.branch_dropout
        if self.training and dropout > 0:
            kept = torch.rand(branch_start.shape[0], 1, device=branch_start.device) >= dropout
            silent = torch.zeros_like(branch_start).masked_fill(~heads.answerable, MASKED_LOGIT)
            branch_start = torch.where(kept, branch_start, silent)
            branch_end = torch.where(kept, branch_end, silent)
        training = self.config.head_training
        pair_loss = _span_loss(heads.pair_start, heads.pair_end, start_positions, end_positions)
        if training == "stacked":
            stacked = _combined(heads, branch_start, branch_end, detach_pair=True)
            return pair_loss + _span_loss(*stacked, start_positions, end_positions)
        loss = _span_loss(*_combined(heads, branch_start, branch_end), start_positions, end_positions)
        if training == "deep-supervision":
            loss = loss + pair_loss + _span_loss(heads.branch_start, heads.branch_end, start_positions, end_positions)
        return loss

    def _question_summary(
        self, question: torch.Tensor, question_mask: torch.BoolTensor, background: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention-pooled question vector; h_QCP is added when the attention is not already conditioned on it."""
        weights = self.question_pooling(question).squeeze(-1)
        weights = weights.masked_fill(~question_mask, torch.finfo(weights.dtype).min).softmax(dim=-1)
        summary = torch.bmm(weights[:, None, :], question).squeeze(1)
        if background is not None and not self.config.conditional_background_attention:
            summary = summary + background
        return summary


def logits_per_head(output: ForceReaderQuestionAnsweringOutput) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(start, end) logits by head name (`"combined"`, and `"qcp_tokens"` / `"separate_encoding"` when the output
    holds them: `output_head_logits=True`)."""
    logits = {"combined": (output.start_logits, output.end_logits)}
    if output.qcp_start_logits is not None:
        logits["qcp_tokens"] = (output.qcp_start_logits, output.qcp_end_logits)
        logits["separate_encoding"] = (output.branch_start_logits, output.branch_end_logits)
    return logits


def _combined(
    heads: AnswerHeadLogits, branch_start: torch.Tensor, branch_end: torch.Tensor, detach_pair: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The answer logits: the branch's plus the QCP token head's (if any) on the answerable positions."""
    if heads.pair_start is None:
        return branch_start, branch_end
    pair_start, pair_end = heads.pair_start, heads.pair_end
    if detach_pair:
        pair_start, pair_end = pair_start.detach(), pair_end.detach()
    return (
        torch.where(heads.answerable, branch_start + pair_start, MASKED_LOGIT),
        torch.where(heads.answerable, branch_end + pair_end, MASKED_LOGIT),
    )


def _answerable_positions(
    input_ids: torch.LongTensor, attention_mask: torch.Tensor, token_type_ids: torch.LongTensor | None
) -> torch.BoolTensor:
    """Packed positions that may start or end an answer: the passage tokens (not its closing separator) and the
    [CLS] at position 0, which stands for "no answer"."""
    if token_type_ids is None:
        raise ValueError("token_type_ids are needed to tell the passage from the question (0 = question, 1 = passage).")
    valid = attention_mask.bool()
    last_real = valid.long().cumsum(dim=1).argmax(dim=1, keepdim=True)  # the closing [SEP]
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
    answerable = valid & (token_type_ids == 1) & (positions != last_real)
    answerable[:, 0] = True
    return answerable


def _to_packed_positions(
    logits: torch.Tensor, positions: torch.LongTensor, answerable: torch.BoolTensor
) -> torch.Tensor:
    """Scatter per-position logits of the passage sequence into the packed layout; other positions are masked."""
    batch_size, length = answerable.shape
    # A spare last column takes the padding positions, so that they overwrite nothing.
    packed = logits.new_full((batch_size, length + 1), MASKED_LOGIT)
    packed.scatter_(1, positions.masked_fill(positions < 0, length), logits)
    return packed[:, :length].masked_fill(~answerable, MASKED_LOGIT)


def _span_loss(
    start_logits: torch.Tensor, end_logits: torch.Tensor, start_positions: torch.Tensor, end_positions: torch.Tensor
) -> torch.Tensor:
    """Eq. 7 halved, -(log P_start + log P_end) / 2, averaged over the batch: `BertForQuestionAnswering`'s loss (the
    factor changes no optimum; with it the joint rung trains exactly as BERT's QA head does). Positions outside the
    input are ignored, as in `BertForQuestionAnswering`."""
    ignored = start_logits.shape[1]
    start_positions = start_positions.view(-1).clamp(0, ignored)
    end_positions = end_positions.view(-1).clamp(0, ignored)
    start_loss = F.cross_entropy(start_logits, start_positions, ignore_index=ignored)
    end_loss = F.cross_entropy(end_logits, end_positions, ignore_index=ignored)
    return (start_loss + end_loss) / 2


__all__ = [
    "MASKED_LOGIT",
    "AnswerHeadLogits",
    "ForceReaderForQuestionAnswering",
    "ForceReaderModel",
    "ForceReaderModelOutput",
    "ForceReaderPreTrainedModel",
    "ForceReaderQuestionAnsweringOutput",
    "logits_per_head",
    "split_packed_input",
]
