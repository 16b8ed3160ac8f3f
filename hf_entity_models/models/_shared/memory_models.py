"""The pretrained-model class and the coreference head that the entity-memory models share; a model fills the hooks
each class names. Saving a model copies this file next to the weights, so it imports only torch, transformers and
other shared modules."""

import dataclasses
from typing import Any, ClassVar

import torch
from transformers.utils import ModelOutput

from .checkpoints import CheckpointMixin
from .coreference_links import candidate_scores_if_asked, check_link_inputs, encode_in_windows, mention_detection_loss
from .document_coreference import DocumentCoreferenceMixin
from .encoders import copy_encoder_weights, load_pretrained_encoder


class MemoryPreTrainedMixin(CheckpointMixin):
    """Before `PreTrainedModel` in the bases of a memory model's pretrained class. Its base model has `encoder` (None
    without one) and `gumbel_temperature`; a config without a `freeze_encoder` field keeps the encoder frozen."""

    main_input_name = "input_ids"
    supports_gradient_checkpointing = False

    def set_gumbel_temperature(self, temperature: float) -> None:
        """Set the temperature of the training-time Gumbel-softmax (see `GumbelTemperatureCallback`)."""
        if not temperature > 0:
            raise ValueError(f"The Gumbel temperature must be > 0, got {temperature}.")
        self.base_model.gumbel_temperature = float(temperature)

    def _encoder_is_fixed(self) -> bool:
        return self.base_model.encoder is not None and getattr(self.config, "freeze_encoder", True)

    def train(self, mode: bool = True):
        super().train(mode)
        if self._encoder_is_fixed():  # a fixed feature extractor: no dropout inside it, so cached features match
            self.base_model.encoder.eval()
        return self

    def get_encoder_features(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> torch.FloatTensor:
        """Concatenate the configured encoder layers for every token: `(B, T, features)`; padding gets zeros.

        A document longer than the encoder's window is encoded on its own in overlapping windows placed over its
        real length (so its features never depend on the rest of the batch); each token takes the features of the
        window where it has the most context on both sides.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        window, overlap = self.config.max_encoder_window, self.config.effective_window_overlap
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self._encoder_is_fixed()):
            features = encode_in_windows(self._encode_window, input_ids, attention_mask, window, overlap)
        return torch.where(attention_mask.bool().unsqueeze(-1), features, torch.zeros_like(features))

    def _encode_window(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor) -> torch.FloatTensor:
        outputs = self.base_model.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return torch.cat([outputs.hidden_states[layer] for layer in self.config.encoder_layers], dim=-1)

    def _refuse_document_mode(self) -> None:
        if self.config.coreference_mode == "document":
            raise ValueError(
                f"{type(self).__name__} of a coreference_mode='document' checkpoint holds only the encoder: load it "
                "with AutoModelForCoreference (or pipeline('coreference')), whose head reads whole documents."
            )

    def _check_arguments(self, unexpected: dict[str, Any], token_type_ids: torch.Tensor | None = None) -> None:
        if unexpected:
            raise TypeError(f"{type(self).__name__}.forward got unexpected arguments: {sorted(unexpected)}.")
        if token_type_ids is not None and bool((token_type_ids != 0).any()):
            raise ValueError("token_type_ids must be all zeros: the model reads one text segment, not a pair of texts.")


class MemoryCoreferenceMixin(DocumentCoreferenceMixin):
    """First in the bases of a memory model's coreference head. Hooks: `_output_class`, `_link_log_probability_class`
    (built from the overwrite and coreference logs, it maps token pairs to log link probabilities),
    `_mention_loss_reduction` (of `mention_detection_loss`), `_encoder_config_defaults` (of `from_encoder`), and
    `_link_losses(memory_output, link_log_probs, link_pairs, link_labels, input_ids, attention_mask,
    special_tokens_mask)`, which returns the training loss and its parts by output field."""

    _mention_loss_reduction: ClassVar[str] = "mean"
    _encoder_config_defaults: ClassVar[dict[str, Any]] = {}

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_overrides) -> "MemoryCoreferenceMixin":
        """Build a fresh model around a pretrained encoder (weights loaded, frozen unless `freeze_encoder=False`);
        `config_overrides` are config fields. Examples are in the docstrings of the coreference classes."""
        encoder = load_pretrained_encoder(encoder_name_or_path)
        overrides = {**cls._encoder_config_defaults, **config_overrides}
        model = cls(cls.config_class(encoder_config=encoder.config.to_dict(), **overrides))
        copy_encoder_weights(model.base_model.encoder, encoder, encoder_name_or_path)
        model.config.name_or_path = str(encoder_name_or_path)
        return model

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        special_tokens_mask: torch.Tensor | None = None,
        encoder_features: torch.FloatTensor | None = None,
        pronoun_spans: torch.LongTensor | None = None,
        candidate_spans: torch.LongTensor | None = None,
        link_pairs: torch.LongTensor | None = None,
        link_labels: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        mention_targets: torch.LongTensor | None = None,
        word_ids: torch.LongTensor | None = None,
        sentence_ids: torch.LongTensor | None = None,
        word_features: torch.FloatTensor | None = None,
        gold_spans: torch.LongTensor | None = None,
        gold_cluster_ids: torch.LongTensor | None = None,
        **kwargs,
    ) -> ModelOutput:
        r"""
        Args:
            input_ids, attention_mask, special_tokens_mask, encoder_features, token_type_ids:
                As in the base model's `forward`.
            pronoun_spans (`(batch_size, 2)`), candidate_spans (`(batch_size, num_candidates, 2)`), *optional*:
                Token spans `[start, end)` of each document's pronoun and of its candidate names (GAP: A and B; rows
                of `-1` are padding). Given together, the output has `candidate_scores`.
            link_pairs (`(batch_size, num_pairs, 2)`), link_labels (`(batch_size, num_pairs)`), *optional*:
                Labelled token pairs (in either order; rows of `-1` are padding) and their kinds: `LINK_NEGATIVE` (0),
                `LINK_POSITIVE` (1), `LINK_SELF` (2) or `-100` (padding). Given together, the output has the loss.
            mention_targets (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                0 outside every gold mention, 1 inside one, 2 on the first token of an entity's first mention, -100
                where not scored: dense supervision of mention detection and of the new-entity decision for corpora
                that annotate every mention (CoNLL-2012, LitBank; `mention_detection_loss`). Adds
                `mention_loss_weight * mention_loss` to the loss.
            word_ids (`(batch_size, sequence_length)`), sentence_ids (`(batch_size, num_words)`), word_features
            (`(batch_size, num_words, features)`), gold_spans (`(batch_size, num_mentions, 2)`), gold_cluster_ids
            (`(batch_size, num_mentions)`), *optional*:
                The document mode's inputs (`coreference_mode="document"`, `DocumentCoreferenceMixin`; -1 pads
                each): the word of every token, the sentence of every word, cached word features instead of tokens,
                and the gold mentions `(first word, last word)` with their entities, which add the loss. The output
                is then a `DocumentCoreferenceOutput`.
        """
        self._check_arguments(kwargs)
        document_inputs = (word_ids, sentence_ids, word_features, gold_spans, gold_cluster_ids)
        if self.config.coreference_mode == "document":
            token_mode_inputs = (pronoun_spans, candidate_spans, link_pairs, link_labels, mention_targets)
            if any(value is not None for value in token_mode_inputs):
                raise ValueError(
                    "This model is in coreference_mode='document': it takes word_ids, sentence_ids and gold_spans / "
                    "gold_cluster_ids, not the token mode's pronoun, candidate, link or mention-target inputs."
                )
            return self._document_forward(
                input_ids, attention_mask, encoder_features, word_features, word_ids, sentence_ids, gold_spans,
                gold_cluster_ids,
            )  # fmt: skip
        if any(value is not None for value in document_inputs):
            raise ValueError(
                "word_ids, sentence_ids, word_features, gold_spans and gold_cluster_ids are inputs of the document "
                "mode; this model is in coreference_mode='tokens'."
            )
        memory_output = self.base_model(
            input_ids=input_ids, attention_mask=attention_mask, special_tokens_mask=special_tokens_mask,
            encoder_features=encoder_features, token_type_ids=token_type_ids,
        )  # fmt: skip
        link_log_probs = self._link_log_probability_class(memory_output.overwrite_probs, memory_output.coref_probs)
        length = memory_output.entity_probs.shape[1]
        candidate_scores = candidate_scores_if_asked(link_log_probs, pronoun_spans, candidate_spans, length)

        loss, losses = None, {}
        if (link_pairs is None) != (link_labels is None):
            raise ValueError("Pass `link_pairs` and `link_labels` together to compute the loss.")
        if link_labels is not None:
            check_link_inputs(link_pairs, link_labels, length)
            loss, losses = self._link_losses(
                memory_output, link_log_probs, link_pairs, link_labels, input_ids, attention_mask, special_tokens_mask
            )
        if mention_targets is not None:
            losses["mention_loss"] = mention_detection_loss(
                memory_output.entity_probs, mention_targets, memory_output.overwrite_probs,
                memory_output.coref_probs, self._mention_loss_reduction,
            )  # fmt: skip
            weighted = self.config.mention_loss_weight * losses["mention_loss"]
            loss = weighted if loss is None else loss + weighted
        fields = {field.name for field in dataclasses.fields(self._output_class)}
        memory_log = {name: value for name, value in memory_output.items() if name in fields}
        return self._output_class(loss=loss, candidate_scores=candidate_scores, **memory_log, **losses)


def checked_attention_mask(
    input_ids, attention_mask, encoder_features, feature_size: int, vocab_size: int | None
) -> torch.Tensor:
    """Check `encoder_features` `(B, T, feature_size)` if given, else `input_ids`; return the mask (ones if None)."""
    if encoder_features is not None:
        if encoder_features.dim() != 3 or encoder_features.shape[-1] != feature_size:
            raise ValueError(
                f"encoder_features must have shape (batch, tokens, {feature_size}), got {tuple(encoder_features.shape)}"
                "; compute them with `model.get_encoder_features(input_ids, attention_mask)`."
            )
        reference = encoder_features[..., 0]
    else:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, tokens), got {tuple(input_ids.shape)}.")
        if input_ids.numel() and (input_ids.min() < 0 or (vocab_size and input_ids.max() >= vocab_size)):
            raise ValueError(
                f"input_ids must lie in [0, {vocab_size}) (the vocabulary), got values in "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]; use the model's own tokenizer."
            )
        reference = input_ids
    if 0 in reference.shape[:2]:
        raise ValueError(
            f"The input has shape {tuple(reference.shape[:2])} (documents, tokens): the model needs a batch of at "
            "least one document of at least one token; skip empty texts before calling the model."
        )
    if attention_mask is None:
        attention_mask = torch.ones(reference.shape, dtype=torch.long, device=reference.device)
    check_same_shape(attention_mask, reference, "attention_mask", "the input")
    return attention_mask


def check_same_shape(tensor: torch.Tensor, reference: torch.Tensor, name: str, reference_name: str) -> None:
    if tuple(tensor.shape) != tuple(reference.shape[:2]):
        expected = tuple(reference.shape[:2])
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but {reference_name} has {expected}.")


def scored_tokens(
    entity_probs: torch.Tensor, attention_mask: torch.Tensor | None, special_tokens_mask: torch.Tensor | None
) -> torch.Tensor:
    """`(B, T)`: the real, non-special tokens."""
    scored = torch.ones_like(entity_probs, dtype=torch.bool)
    if attention_mask is not None:
        scored &= attention_mask.bool()
    if special_tokens_mask is not None:
        scored &= ~special_tokens_mask.bool()
    return scored
