"""PyTorch PeTra model (Toshniwal et al., 2020, "PeTra: A Sparsely Supervised Memory Model for People Tracking").

This file is self-contained (it imports only torch, transformers and its own folder) so that
``register_for_auto_class`` can copy it to the Hub and ``trust_remote_code=True`` loads it without our package.

Equation numbers refer to the paper. Shapes use B = batch, T = tokens, N = memory cells, H = hidden size,
P = token pairs, K = candidate spans.
"""

import inspect
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
import transformers
from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.dynamic_module_utils import get_relative_import_files
from transformers.utils import ModelOutput, logging

from .configuration_petra import PetraConfig

logger = logging.get_logger(__name__)

# Values of `link_labels`: the kind of every labelled token pair decides its target and its loss weight.
LINK_NEGATIVE = 0  # pronoun to the other name, or name A to name B: target 0, weight `negative_link_weight`
LINK_POSITIVE = 1  # pronoun to its coreferent name: target 1, weight `positive_link_weight`
LINK_SELF = 2  # first token of a multi-token span to a later token of it: target 1, weight `self_link_weight`
IGNORE_INDEX = -100  # padding pairs

# Clamp used inside logarithms of probabilities, as in the authors' code.
LOG_EPSILON = 1e-7
# Coreference score of a never-used cell (the paper's -inf, kept finite so that softmax stays defined).
UNUSED_CELL_SCORE = -1e4
# Bonus that makes unused cells win the overwrite, ranked among themselves by similarity (authors' code).
UNUSED_CELL_OVERWRITE_BONUS = 1e5


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
            `coref_loss + entity_loss_weight * entity_loss`.
        candidate_scores (`torch.FloatTensor` of shape `(batch_size, num_candidates)`, *optional*):
            Span link probability between the pronoun and every candidate span: the maximum of Eq. 9 over their
            token pairs (paper section 3.5). 0 for padded candidates. Compare with `config.coref_threshold`.
        entity_probs, overwrite_probs, coref_probs, usage, memory:
            The memory log, as in [`PetraModelOutput`].
        coref_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Weighted binary cross-entropy of the labelled links (section 2.5.1), normalised by the total weight.
        entity_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Mean entity probability of unlabelled, non-special tokens (section 2.5.2), averaged over documents.
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


class PetraPreTrainedModel(PreTrainedModel):
    config: PetraConfig
    config_class = PetraConfig
    base_model_prefix = "petra"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    # Pipelines whose code `save_pretrained` writes next to the weights, per model class: task -> the
    # `custom_pipelines` entry of config.json, and module name -> source file (see `register_hub_pipeline`).
    _hub_pipelines: ClassVar[dict[str, dict[str, Any]]] = {}
    _hub_pipeline_files: ClassVar[dict[str, str]] = {}

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # The encoder is a PreTrainedModel: transformers dispatches its own `_init_weights` to it.
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

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True gives a tuple
        # Loading replaces the parameters, which drops the requires_grad=False set in __init__.
        for module in model.modules():
            if isinstance(module, PetraModel) and module.config.freeze_encoder:
                module.encoder.requires_grad_(False)
        return loaded

    # ------------------------------------------------------------------------------------------ Hub and card
    @classmethod
    def register_hub_pipeline(
        cls,
        task: str,
        pipeline_class: type,
        model_auto_class: str = "AutoModel",
        pipeline_type: str = "text",
    ) -> None:
        """Ship a pipeline's code with every checkpoint of this class, so that it runs without our package.

        `save_pretrained` then declares the pipeline in `config.custom_pipelines` and copies the file that defines
        it next to the weights; `pipeline(model=folder_or_repo, trust_remote_code=True)` finds it there. The model
        is loaded remotely through `model_auto_class`, which must be a transformers Auto class that the
        checkpoint's `auto_map` names (custom Auto classes do not exist without our package).

        Args:
            task: Task name written in `custom_pipelines`; with a single declared task, `pipeline()` infers it.
            pipeline_class: A `transformers.Pipeline` subclass whose file imports only torch, transformers and
                files next to it.
            model_auto_class: Name of the transformers Auto class that loads the model remotely.
            pipeline_type: Input modality reported in `custom_pipelines` ("text").

        Example:

        ```python
        >>> from hf_entity_models.tasks.coreference.pipeline import CoreferencePipeline
        >>> PetraForCoreference.register_hub_pipeline("entity-coreference", CoreferencePipeline)

        ```
        """
        if not hasattr(transformers, model_auto_class):
            raise ValueError(
                f"model_auto_class must name a class of the transformers package (e.g. 'AutoModel'), got "
                f"{model_auto_class!r}: the remote environment resolves it with getattr(transformers, name)."
            )
        source_file = None if pipeline_class.__module__ == "__main__" else inspect.getsourcefile(pipeline_class)
        if source_file is None:
            raise ValueError(
                f"{pipeline_class.__name__} must be defined in an importable module file (not __main__) so that "
                "its code can be saved next to the weights."
            )
        module_name = Path(source_file).stem
        if module_name in (Path(__file__).stem, "configuration_petra"):
            raise ValueError(f"The pipeline module must not be named like a model file, got {module_name!r}.")
        entry = {"impl": f"{module_name}.{pipeline_class.__name__}", "pt": [model_auto_class], "type": pipeline_type}
        # Copies, not in-place updates: the class attributes of the parent class must stay untouched.
        cls._hub_pipelines = {**cls.__dict__.get("_hub_pipelines", {}), task: entry}
        cls._hub_pipeline_files = {**cls.__dict__.get("_hub_pipeline_files", {}), module_name: source_file}

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        is_main_process: bool = True,
        state_dict: dict | None = None,
        push_to_hub: bool = False,
        max_shard_size: int | str = "50GB",
        **kwargs,
    ) -> None:
        """Save the model like `PreTrainedModel.save_pretrained`, plus what makes the folder portable and documented.

        Besides the weights and config, the folder gets a model card (`README.md`, from the config and its
        `evaluation_results`), the code files named by `config.auto_map` (when the class is registered with
        `register_for_auto_class`, as `import hf_entity_models` does) and the code of the pipelines registered with
        `register_hub_pipeline`, declared in `config.custom_pipelines`. With the tokenizer saved next to it, the
        folder loads with `trust_remote_code=True` where hf_entity_models is not installed.

        With `push_to_hub=True` the saved files are uploaded to `repo_id` (default: the folder name), with the card.

        Example:

        ```python
        >>> model.save_pretrained("runs/petra-gap")  # doctest: +SKIP
        >>> tokenizer.save_pretrained("runs/petra-gap")  # doctest: +SKIP

        ```
        """
        hub_options = {key: kwargs.pop(key) for key in _SAVE_PUSH_OPTIONS if key in kwargs} if push_to_hub else {}
        save_kwargs = dict(state_dict=state_dict, max_shard_size=max_shard_size, **kwargs)
        if not push_to_hub or not is_main_process:
            self._save_with_card(save_directory, str(save_directory), None, is_main_process, **save_kwargs)
            return
        token = kwargs.get("token")
        api = _hub_api()
        repo_id = api.create_repo(
            hub_options.get("repo_id") or os.path.basename(os.path.normpath(save_directory)),
            private=hub_options.get("private"),
            token=token,
            exist_ok=True,
        ).repo_id
        before = _file_timestamps(save_directory)
        self._save_with_card(save_directory, repo_id, None, True, **save_kwargs)
        after = _file_timestamps(save_directory)
        # Like transformers: upload only what this save wrote, not everything else lying in the folder.
        api.upload_folder(
            repo_id=repo_id,
            folder_path=save_directory,
            allow_patterns=[name for name, stamp in after.items() if before.get(name) != stamp],
            commit_message=hub_options.get("commit_message") or "Upload model",
            commit_description=hub_options.get("commit_description"),
            create_pr=hub_options.get("create_pr", False),
            token=token,
        )

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
    ) -> str:
        """Upload the model with its generated model card (same signature and return value as transformers).

        transformers' own `push_to_hub` replaces README.md with a generic card after saving; this one uploads the
        card written from the config and its `evaluation_results`, which replaces the README of the repository.

        Returns:
            The commit info (a `str`: the commit URL) of the upload.

        Example:

        ```python
        >>> model.push_to_hub("me/petra-gap")  # doctest: +SKIP
        >>> tokenizer.push_to_hub("me/petra-gap")  # doctest: +SKIP

        ```
        """
        api = _hub_api()
        repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as folder:
            self._save_with_card(folder, repo_id, tags, True, max_shard_size=max_shard_size)
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message or "Upload model",
                commit_description=commit_description,
                token=token,
                revision=revision,
                create_pr=create_pr,
            )

    def create_model_card(self, model_location: str | None = None, tags: list[str] | None = None) -> ModelCard:
        """The model card of this checkpoint: Hub metadata (model-index with the recorded results) and text.

        Args:
            model_location: Repo id or folder used in the loading examples (default: a placeholder).
            tags: Extra Hub tags.

        Example:

        ```python
        >>> card = model.create_model_card("me/petra-gap")  # doctest: +SKIP
        >>> card.data.pipeline_tag  # doctest: +SKIP
        'token-classification'

        ```
        """
        return _petra_model_card(
            self.config,
            class_name=type(self).__name__,
            model_location=model_location or "path/to/this/model",
            tags=[*(self.model_tags or []), *(tags or [])],
            pipelines=self._hub_pipelines,
            num_parameters=self._parameter_counts(),
        )

    def _parameter_counts(self) -> tuple[int, int]:
        """(all, trained) parameters, from the config: a loaded model's `requires_grad` flags are not reliable."""
        total = self.num_parameters()
        memory_model = getattr(self, self.base_model_prefix, self)
        frozen = sum(parameter.numel() for parameter in memory_model.encoder.parameters())
        return total, (total - frozen) if self.config.freeze_encoder else total

    def _save_with_card(
        self,
        save_directory: str | os.PathLike,
        model_location: str,
        tags: list[str] | None,
        is_main_process: bool,
        **save_kwargs,
    ) -> None:
        with self._declared_hub_pipelines():
            super().save_pretrained(save_directory, is_main_process=is_main_process, push_to_hub=False, **save_kwargs)
        if not is_main_process:
            return
        for source_file in self._hub_pipeline_files.values():
            _copy_module_with_relative_imports(source_file, Path(save_directory))
        self.create_model_card(model_location, tags).save(os.path.join(save_directory, "README.md"))

    @contextmanager
    def _declared_hub_pipelines(self) -> Iterator[None]:
        """Write exactly the pipelines whose code this save ships into `config.custom_pipelines`, then restore it.

        A declaration without its code file would make `pipeline(model=..., trust_remote_code=True)` fail on
        load, so entries inherited from a loaded config (e.g. a checkpoint re-saved where hf_entity_models is not
        installed) are dropped unless this class ships their code.
        """
        had_attribute = "custom_pipelines" in self.config.__dict__
        previous = self.config.__dict__.get("custom_pipelines")
        dropped = sorted(set(previous or {}) - set(self._hub_pipelines))
        if dropped and self._hub_pipelines:
            # E.g. `Pipeline.save_pretrained`, which declares the task with our custom Auto class name.
            logger.info(f"Saving the portable pipelines {sorted(self._hub_pipelines)} instead of {dropped}.")
        elif dropped:
            logger.warning(
                f"Not saving the custom pipelines {dropped} declared in the config: {type(self).__name__} has no "
                "pipeline code registered in this environment. Save a coreference model with hf-entity-models "
                "imported to ship the pipeline code with it."
            )
        if self._hub_pipelines:
            self.config.custom_pipelines = {task: dict(entry) for task, entry in self._hub_pipelines.items()}
        elif had_attribute:
            del self.config.custom_pipelines
        try:
            yield
        finally:
            if had_attribute:
                self.config.custom_pipelines = previous
            elif "custom_pipelines" in self.config.__dict__:
                del self.config.custom_pipelines


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
        self.gru = nn.GRU(config.encoder_feature_size, config.hidden_size, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)
        hidden, mlp = config.hidden_size, config.mlp_hidden_size
        self.entity_mlp = PetraMLP(hidden, mlp, 1)  # MLP1, Eq. 1
        self.similarity_mlp = PetraMLP(3 * hidden + 1, mlp, 1)  # MLP2 over [h; m; h*m; u], Eq. 2
        self.coref_update_mlp = PetraMLP(2 * hidden, mlp, self.value_size)  # MLP3 over [h; m], Eq. 7
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
        self.gumbel_temperature = float(config.gumbel_temperature)
        if config.freeze_encoder:
            self.encoder.requires_grad_(False)
        self.post_init()

    @property
    def key_size(self) -> int:
        """Dimensions of every cell that stay fixed during a document (0 unless the fixed_key variant)."""
        return self.config.key_size if self.config.memory_variant == "fixed_key" else 0

    @property
    def value_size(self) -> int:
        """Dimensions of every cell that overwrites and coreference updates write to."""
        return self.config.hidden_size - self.key_size

    def set_gumbel_temperature(self, temperature: float) -> None:
        """Set the temperature of the training-time Gumbel-softmax (see `GumbelTemperatureCallback`)."""
        if not temperature > 0:
            raise ValueError(f"The Gumbel temperature must be > 0, got {temperature}.")
        self.gumbel_temperature = float(temperature)

    def train(self, mode: bool = True):
        super().train(mode)
        if self.config.freeze_encoder:
            # A frozen encoder is a fixed feature extractor: no dropout inside it, so cached features match.
            self.encoder.eval()
        return self

    # ----------------------------------------------------------------------------------------------- encoder
    def get_encoder_features(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> torch.FloatTensor:
        """Concatenate the configured encoder layers for every token: `(B, T, encoder_feature_size)`.

        A document longer than the encoder's window is encoded on its own in overlapping windows placed over its
        real length (so its features never depend on the rest of the batch); each token takes the features of
        the window where it has the most context on both sides. Padding positions get zeros.
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        window = self.config.max_encoder_window
        lengths = attention_mask.sum(-1).tolist()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.config.freeze_encoder):
            if input_ids.shape[1] <= window:
                features = self._encode_window(input_ids, attention_mask)
            else:
                features = self._encode_long_batch(input_ids, attention_mask, lengths, window)
        return torch.where(attention_mask.bool().unsqueeze(-1), features, torch.zeros_like(features))

    def _encode_window(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor) -> torch.FloatTensor:
        outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        hidden_states = outputs.hidden_states
        return torch.cat([hidden_states[layer] for layer in self.config.encoder_layers], dim=-1)

    def _encode_long_batch(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor, lengths: list[int], window: int
    ) -> torch.FloatTensor:
        batch_size, padded_length = input_ids.shape
        features = None
        short = [row for row, length in enumerate(lengths) if length <= window]
        if short:
            # Right padding: a short document lies entirely in the first `window` positions.
            short_features = self._encode_window(input_ids[short, :window], attention_mask[short, :window])
            features = short_features.new_zeros(batch_size, padded_length, short_features.shape[-1])
            features[short, :window] = short_features
        for row, length in enumerate(lengths):
            if length > window:
                document = self._encode_in_windows(input_ids[row : row + 1, :length], window)
                if features is None:
                    features = document.new_zeros(batch_size, padded_length, document.shape[-1])
                features[row, :length] = document[0]
        return features

    def _encode_in_windows(self, input_ids: torch.LongTensor, window: int) -> torch.FloatTensor:
        """Encode one unpadded document `(1, T)` with `T > window` in overlapping windows."""
        length = input_ids.shape[1]
        starts = _window_starts(length, window, self.config.effective_window_overlap)
        windows_ids = torch.cat([input_ids[:, start : start + window] for start in starts], dim=0)
        features = self._encode_window(windows_ids, torch.ones_like(windows_ids))
        best_window, offset_in_window = _best_window_per_token(starts, window, length, input_ids.device)
        return features[best_window, offset_in_window].unsqueeze(0)

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
        if kwargs:
            raise TypeError(f"PetraModel.forward got unexpected arguments: {sorted(kwargs)}.")
        if token_type_ids is not None and bool((token_type_ids != 0).any()):
            raise ValueError(
                "token_type_ids must be all zeros: PeTra reads a single text segment. Tokenize one text, not a pair."
            )
        features, attention_mask = self._resolve_features(input_ids, attention_mask, encoder_features)
        token_mask = attention_mask.bool()
        if special_tokens_mask is not None:
            _check_same_shape(special_tokens_mask, attention_mask, "special_tokens_mask", "attention_mask")
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
        if encoder_features is not None:
            if encoder_features.dim() != 3 or encoder_features.shape[-1] != self.config.encoder_feature_size:
                raise ValueError(
                    f"encoder_features must have shape (batch, tokens, {self.config.encoder_feature_size}) "
                    f"({len(self.config.encoder_layers)} layers x hidden size "
                    f"{self.config.encoder_config.hidden_size}), got {tuple(encoder_features.shape)}; compute them "
                    "with `model.get_encoder_features(input_ids, attention_mask)`."
                )
            reference = encoder_features[..., 0]
        else:
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must have shape (batch, tokens), got {tuple(input_ids.shape)}.")
            vocab_size = getattr(self.config.encoder_config, "vocab_size", None)
            if input_ids.numel() and (input_ids.min() < 0 or (vocab_size and input_ids.max() >= vocab_size)):
                raise ValueError(
                    f"input_ids must lie in [0, {vocab_size}) (the encoder's vocabulary), got values in "
                    f"[{int(input_ids.min())}, {int(input_ids.max())}]; use the encoder's own tokenizer."
                )
            reference = input_ids
        if reference.shape[1] == 0:
            raise ValueError("The input has no tokens; PeTra needs at least one token per document.")
        if attention_mask is None:
            attention_mask = torch.ones(reference.shape, dtype=torch.long, device=reference.device)
        _check_same_shape(attention_mask, reference, "attention_mask", "the input")
        _check_right_padding(attention_mask)
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
        batch_size, padded_length, hidden = hidden_states.shape
        order = torch.argsort(lengths, descending=True, stable=True)
        active_per_step = _active_documents_per_step(lengths[order].tolist())
        hidden_states, entity_probs = hidden_states[order], entity_probs[order]
        memory, usage = self._initial_memory(batch_size, hidden_states)

        # The first layers of MLP2 and MLP3 are linear in [h; m; h*m; u] and [h; m]: project the token part of all
        # tokens in one matmul, and the memory parts of both MLPs together at every step.
        sim_weight = self.similarity_mlp.input_layer.weight
        update_weight = self.coref_update_mlp.input_layer.weight
        token_projection_sim = F.linear(hidden_states, sim_weight[:, :hidden], self.similarity_mlp.input_layer.bias)
        token_projection_update = F.linear(
            hidden_states, update_weight[:, :hidden], self.coref_update_mlp.input_layer.bias
        )
        memory_weight = torch.cat([sim_weight[:, hidden : 2 * hidden], update_weight[:, hidden:]], dim=0)
        product_weight = sim_weight[:, 2 * hidden : 3 * hidden]
        usage_weight = sim_weight[:, 3 * hidden]
        mlp_size = sim_weight.shape[0]

        # unbind once instead of indexing a step at a time: the backward of per-step indexing would allocate and
        # zero-fill a full (B, T, .) gradient for every token.
        steps = zip(
            active_per_step,
            hidden_states.unsqueeze(2).unbind(1),
            token_projection_sim.unsqueeze(2).unbind(1),
            token_projection_update.unsqueeze(2).unbind(1),
            entity_probs.unbind(1),
        )
        finished_memories, overwrites, corefs, usages = [], [], [], []
        for active, token, token_sim, token_update, entity_prob in steps:  # token: (B, 1, H)
            if active < memory.shape[0]:
                finished_memories.append(memory[active:])
                memory, usage = memory[:active], usage[:active]
            token, token_sim, token_update = token[:active], token_sim[:active], token_update[:active]
            memory_projection = F.linear(memory, memory_weight)
            similarity = self.similarity_mlp.from_input_projection(
                token_sim
                + memory_projection[..., :mlp_size]
                + F.linear(token * memory, product_weight)
                + usage.unsqueeze(-1) * usage_weight
            ).squeeze(-1)  # Eq. 2, (B, N)
            unused = usage == 0
            coref, new_entity = self._coref_and_new_entity(similarity, unused, entity_prob[:active])
            overwrite = new_entity * self._overwrite_choice(similarity, usage, unused)
            update = self.coref_update_mlp.from_input_projection(token_update + memory_projection[..., mlp_size:])
            memory = self._update_memory(memory, token, update, overwrite, coref)
            usage = torch.clamp(overwrite + coref + self.config.usage_decay * usage, max=1.0)  # Eq. 8
            overwrites.append(overwrite)
            corefs.append(coref)
            usages.append(usage)
        # Documents left the batch shortest last, so the final memories in sorted order are the reverse.
        final_memory = torch.cat([memory, *reversed(finished_memories)], dim=0)

        unsort = torch.argsort(order)
        positions = _packed_positions(active_per_step, padded_length, hidden_states.device)
        logs = [
            _unpack_steps(log, positions, batch_size, padded_length)[unsort] for log in (overwrites, corefs, usages)
        ]
        return logs[0], logs[1], logs[2], final_memory[unsort]

    @staticmethod
    def _coref_and_new_entity(
        similarity: torch.Tensor, unused: torch.Tensor, entity_prob: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eqs. 3-4: coreference with a used cell, or a new entity (score fixed at 0), scaled by e_t."""
        coref_scores = similarity.masked_fill(unused, UNUSED_CELL_SCORE)
        scores = torch.cat([coref_scores, coref_scores.new_zeros(coref_scores.shape[0], 1)], dim=-1)
        probabilities = entity_prob.unsqueeze(-1) * torch.softmax(scores, dim=-1)
        return probabilities[:, :-1], probabilities[:, -1:]

    def _overwrite_choice(self, similarity: torch.Tensor, usage: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
        """Eqs. 5-6: which cell a new entity goes to: least used, unused cells first, ties broken by similarity.

        Soft Gumbel-softmax sample in training, hard argmax (argmin usage) at evaluation.
        """
        preference = (1 - usage) + UNUSED_CELL_OVERWRITE_BONUS * unused * torch.softmax(similarity, dim=-1)
        logits = torch.log(preference.clamp_min(LOG_EPSILON))
        if self.training:
            return F.gumbel_softmax(logits, tau=self.gumbel_temperature, hard=False, dim=-1)
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)

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


class PetraForCoreference(PetraPreTrainedModel):
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

    ```
    """

    def __init__(self, config: PetraConfig):
        super().__init__(config)
        self.petra = PetraModel(config)
        self.post_init()

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_overrides) -> "PetraForCoreference":
        """Build a fresh PeTra around a pretrained encoder (weights loaded, frozen unless `freeze_encoder=False`).

        Example:

        ```python
        >>> model = PetraForCoreference.from_encoder("bert-base-cased", num_memory_cells=8)  # doctest: +SKIP

        ```
        """
        encoder = AutoModel.from_pretrained(encoder_name_or_path)
        config = PetraConfig(encoder_config=encoder.config.to_dict(), **config_overrides)
        model = cls(config)
        missing, unexpected = model.petra.encoder.load_state_dict(encoder.state_dict(), strict=False)
        if missing or unexpected:
            raise ValueError(
                f"The encoder weights of {encoder_name_or_path!r} do not fit the encoder built from its config "
                f"(missing: {missing}, unexpected: {unexpected})."
            )
        model.config.name_or_path = str(encoder_name_or_path)
        return model

    def set_gumbel_temperature(self, temperature: float) -> None:
        """Set the temperature of the training-time Gumbel-softmax (see `GumbelTemperatureCallback`)."""
        self.petra.set_gumbel_temperature(temperature)

    def get_encoder_features(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> torch.FloatTensor:
        """See [`PetraModel.get_encoder_features`]."""
        return self.petra.get_encoder_features(input_ids, attention_mask)

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
        **kwargs,
    ) -> PetraCoreferenceOutput:
        r"""
        Args:
            input_ids, attention_mask, special_tokens_mask, encoder_features, token_type_ids:
                As in [`PetraModel.forward`].
            pronoun_spans (`torch.LongTensor` of shape `(batch_size, 2)`, *optional*):
                Token span `[start, end)` of the pronoun of each document.
            candidate_spans (`torch.LongTensor` of shape `(batch_size, num_candidates, 2)`, *optional*):
                Token spans `[start, end)` of the candidate names (GAP: A and B); rows of `-1` are padding.
                Given with `pronoun_spans`, the output has `candidate_scores`.
            link_pairs (`torch.LongTensor` of shape `(batch_size, num_pairs, 2)`, *optional*):
                Labelled token pairs `(t1, t2)`; order does not matter, `t1 != t2`. Rows of `-1` are padding.
            link_labels (`torch.LongTensor` of shape `(batch_size, num_pairs)`, *optional*):
                Kind of every pair: `LINK_NEGATIVE` (0), `LINK_POSITIVE` (1), `LINK_SELF` (2), or `-100` for
                padding. Given with `link_pairs`, the output has the training loss.
        """
        if kwargs:
            raise TypeError(f"PetraForCoreference.forward got unexpected arguments: {sorted(kwargs)}.")
        memory_output = self.petra(
            input_ids=input_ids,
            attention_mask=attention_mask,
            special_tokens_mask=special_tokens_mask,
            encoder_features=encoder_features,
            token_type_ids=token_type_ids,
        )
        link_log_probs = LinkLogProbability(memory_output.overwrite_probs, memory_output.coref_probs)
        length = memory_output.entity_probs.shape[1]

        candidate_scores = None
        if (pronoun_spans is None) != (candidate_spans is None):
            raise ValueError("Pass `pronoun_spans` and `candidate_spans` together to get `candidate_scores`.")
        if pronoun_spans is not None:
            candidate_scores = span_link_probabilities(link_log_probs, pronoun_spans, candidate_spans, length)

        loss = coref_loss = entity_loss = None
        if (link_pairs is None) != (link_labels is None):
            raise ValueError("Pass `link_pairs` and `link_labels` together to compute the loss.")
        if link_labels is not None:
            _check_link_inputs(link_pairs, link_labels, length)
            coref_loss = self._coref_loss(link_log_probs, link_pairs, link_labels)
            entity_loss = self._entity_loss(memory_output.entity_probs, attention_mask, special_tokens_mask, link_pairs)
            loss = coref_loss + self.config.entity_loss_weight * entity_loss

        return PetraCoreferenceOutput(
            loss=loss,
            candidate_scores=candidate_scores,
            entity_probs=memory_output.entity_probs,
            overwrite_probs=memory_output.overwrite_probs,
            coref_probs=memory_output.coref_probs,
            usage=memory_output.usage,
            memory=memory_output.memory,
            coref_loss=coref_loss,
            entity_loss=entity_loss,
        )

    def _coref_loss(
        self, link_log_probs: "LinkLogProbability", link_pairs: torch.LongTensor, link_labels: torch.LongTensor
    ) -> torch.Tensor:
        """Section 2.5.1: weighted binary cross-entropy between labels and Eq. 9, normalised by total weight."""
        valid = link_labels != IGNORE_INDEX
        safe_pairs = torch.where(valid.unsqueeze(-1), link_pairs, torch.zeros_like(link_pairs))
        safe_pairs = torch.stack([safe_pairs.min(-1).values, safe_pairs.max(-1).values], dim=-1)
        safe_pairs[..., 1] = torch.where(valid, safe_pairs[..., 1], torch.ones_like(safe_pairs[..., 1]))
        log_prob = link_log_probs(safe_pairs)
        log_prob = log_prob.clamp(max=math.log1p(-LOG_EPSILON))
        targets = (link_labels == LINK_POSITIVE) | (link_labels == LINK_SELF)
        log_complement = torch.log1p(-torch.exp(log_prob))
        cross_entropy = -torch.where(targets, log_prob, log_complement)
        weights = torch.zeros_like(cross_entropy)
        weights = torch.where(link_labels == LINK_SELF, self.config.self_link_weight, weights)
        weights = torch.where(link_labels == LINK_POSITIVE, self.config.positive_link_weight, weights)
        weights = torch.where(link_labels == LINK_NEGATIVE, self.config.negative_link_weight, weights)
        total_weight = weights.sum()
        if total_weight == 0:
            return cross_entropy.sum() * 0.0
        return (weights * cross_entropy).sum() / total_weight

    @staticmethod
    def _entity_loss(
        entity_probs: torch.Tensor,
        attention_mask: torch.Tensor | None,
        special_tokens_mask: torch.Tensor | None,
        link_pairs: torch.LongTensor,
    ) -> torch.Tensor:
        """Section 2.5.2: mean e_t over tokens outside the labelled spans (every span token is in some pair)."""
        unlabelled = torch.ones_like(entity_probs, dtype=torch.bool)
        if attention_mask is not None:
            unlabelled &= attention_mask.bool()
        if special_tokens_mask is not None:
            unlabelled &= ~special_tokens_mask.bool()
        pair_tokens = link_pairs.flatten(1)
        # scatter_add (not scatter) so that padding rows, sent to token 0, cannot erase a real label at token 0.
        labelled = torch.zeros_like(entity_probs, dtype=torch.long)
        labelled.scatter_add_(1, pair_tokens.clamp_min(0), (pair_tokens >= 0).long())
        unlabelled &= labelled == 0
        counts = unlabelled.sum(-1)
        per_document = (entity_probs * unlabelled).sum(-1) / counts.clamp_min(1)
        has_tokens = counts > 0
        if not has_tokens.any():
            return entity_probs.sum() * 0.0
        return per_document[has_tokens].mean()


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
        kept = _gather_tokens(self.cumulative_log_keep, second) - _gather_tokens(self.cumulative_log_keep, first)
        per_cell = _gather_tokens(self.log_write, first) + kept.to(self.log_write.dtype)
        per_cell = per_cell + _gather_tokens(self.log_coref, second)
        return torch.logsumexp(per_cell, dim=-1)


def span_link_probabilities(
    link_log_probs: LinkLogProbability,
    pronoun_spans: torch.LongTensor,
    candidate_spans: torch.LongTensor,
    length: int,
) -> torch.Tensor:
    """Section 3.5: P(candidate, pronoun) = max over token pairs of Eq. 9 (earlier token first). `(B, K)`."""
    if pronoun_spans.dim() != 2 or pronoun_spans.shape[-1] != 2:
        raise ValueError(f"pronoun_spans must have shape (batch, 2), got {tuple(pronoun_spans.shape)}.")
    if candidate_spans.dim() != 3 or candidate_spans.shape[-1] != 2:
        raise ValueError(f"candidate_spans must have shape (batch, candidates, 2), got {tuple(candidate_spans.shape)}.")
    if candidate_spans.shape[0] != pronoun_spans.shape[0]:
        raise ValueError("pronoun_spans and candidate_spans must have the same batch size.")
    _check_spans(pronoun_spans, length, "pronoun_spans", allow_padding=False)
    _check_spans(candidate_spans, length, "candidate_spans", allow_padding=True)

    batch_size, num_candidates, _ = candidate_spans.shape
    pronoun_tokens, pronoun_valid = _span_tokens(pronoun_spans.unsqueeze(1))  # (B, 1, Lp)
    candidate_tokens, candidate_valid = _span_tokens(candidate_spans)  # (B, K, Lc)
    pronoun_tokens = pronoun_tokens.unsqueeze(2)  # (B, 1, 1, Lp)
    candidate_tokens = candidate_tokens.unsqueeze(3)  # (B, K, Lc, 1)
    first = torch.minimum(pronoun_tokens, candidate_tokens)
    second = torch.maximum(pronoun_tokens, candidate_tokens)
    valid = pronoun_valid.unsqueeze(2) & candidate_valid.unsqueeze(3) & (first != second)
    shape = valid.shape
    pairs = torch.stack([first.expand(shape), torch.where(valid, second.expand(shape), first.expand(shape) + 1)], -1)
    pairs = pairs.clamp(0, length - 1)
    log_probs = link_log_probs(pairs.reshape(batch_size, -1, 2)).view(shape)
    log_probs = log_probs.masked_fill(~valid, float("-inf"))
    best = log_probs.flatten(2).max(dim=-1).values
    return torch.where(torch.isfinite(best), best.exp(), torch.zeros_like(best))


# ----------------------------------------------------------------------------------------------------- helpers
def _gather_tokens(values: torch.Tensor, positions: torch.LongTensor) -> torch.Tensor:
    """values (B, T, N), positions (B, P) -> (B, P, N)."""
    index = positions.unsqueeze(-1).expand(-1, -1, values.shape[-1])
    return torch.gather(values, 1, index)


def _span_tokens(spans: torch.LongTensor) -> tuple[torch.LongTensor, torch.Tensor]:
    """Token positions of spans `(B, K, 2)` padded to the longest span: positions `(B, K, L)` and validity."""
    widths = (spans[..., 1] - spans[..., 0]).clamp_min(0)
    longest = max(int(widths.max()), 1)
    offsets = torch.arange(longest, device=spans.device)
    positions = spans[..., :1] + offsets
    valid = (offsets < widths.unsqueeze(-1)) & (spans[..., :1] >= 0)
    return positions.clamp_min(0), valid


def _window_starts(length: int, window: int, overlap: int) -> list[int]:
    stride = window - overlap
    starts = list(range(0, max(length - window, 0) + 1, stride))
    if starts[-1] + window < length:
        starts.append(length - window)
    return starts


def _best_window_per_token(
    starts: list[int], window: int, length: int, device: torch.device
) -> tuple[torch.LongTensor, torch.LongTensor]:
    """For every token, the window where its smaller distance to a window edge is largest."""
    positions = torch.arange(length, device=device)
    window_starts = torch.tensor(starts, device=device).unsqueeze(1)
    offsets = positions.unsqueeze(0) - window_starts  # (W, T)
    inside = (offsets >= 0) & (offsets < window)
    context = torch.minimum(offsets, window - 1 - offsets).masked_fill(~inside, -1)
    best_window = context.argmax(dim=0)
    return best_window, positions - window_starts.squeeze(1)[best_window]


def _active_documents_per_step(sorted_lengths: list[int]) -> list[int]:
    """Number of documents still being read at every step, for lengths sorted longest first."""
    longest = sorted_lengths[0] if sorted_lengths else 0
    active, per_step = len(sorted_lengths), []
    for step in range(longest):
        while active and sorted_lengths[active - 1] <= step:
            active -= 1
        per_step.append(active)
    return per_step


def _packed_positions(active_per_step: list[int], padded_length: int, device: torch.device) -> torch.LongTensor:
    """Flat (document * padded_length + step) position of every row produced by the shrinking-batch loop."""
    if not active_per_step:
        return torch.zeros(0, dtype=torch.long, device=device)
    return torch.cat(
        [torch.arange(active, device=device) * padded_length + step for step, active in enumerate(active_per_step)]
    )


def _unpack_steps(
    steps: list[torch.Tensor], positions: torch.LongTensor, batch_size: int, padded_length: int
) -> torch.Tensor:
    """Place per-step rows `(active_t, N)` into a zero-padded `(B, T, N)` tensor (differentiable)."""
    if not steps:
        raise ValueError("Every document in the batch is empty (attention_mask is all zeros).")
    values = torch.cat(steps, dim=0)
    flat = values.new_zeros(batch_size * padded_length, values.shape[-1]).index_copy(0, positions, values)
    return flat.view(batch_size, padded_length, -1)


def _check_same_shape(tensor: torch.Tensor, reference: torch.Tensor, name: str, reference_name: str) -> None:
    if tuple(tensor.shape) != tuple(reference.shape[:2]):
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but {reference_name} has {tuple(reference.shape[:2])}.")


def _check_right_padding(attention_mask: torch.Tensor) -> None:
    mask = attention_mask.bool()
    if (mask[:, 1:] & ~mask[:, :-1]).any():
        raise ValueError(
            "attention_mask has padding before real tokens; PeTra reads documents left to right, so pad on the "
            "right (tokenizer.padding_side = 'right')."
        )


def _check_spans(spans: torch.LongTensor, length: int, name: str, allow_padding: bool) -> None:
    padding = (spans == -1).all(-1)
    real = spans[~padding] if allow_padding else spans.reshape(-1, 2)
    if not allow_padding and padding.any():
        raise ValueError(f"{name} contains a padding row (-1, -1); every document needs its span.")
    bad = (real[:, 0] < 0) | (real[:, 1] <= real[:, 0]) | (real[:, 1] > length)
    if bad.any():
        example = real[bad][0].tolist()
        raise ValueError(
            f"{name} must hold token spans [start, end) with 0 <= start < end <= {length} (the sequence length), "
            f"got {example}."
        )


def _check_link_inputs(link_pairs: torch.LongTensor, link_labels: torch.LongTensor, length: int) -> None:
    if link_pairs.dim() != 3 or link_pairs.shape[-1] != 2 or link_pairs.shape[:2] != link_labels.shape:
        raise ValueError(
            f"link_pairs must have shape (batch, pairs, 2) and link_labels (batch, pairs); got "
            f"{tuple(link_pairs.shape)} and {tuple(link_labels.shape)}."
        )
    known = (link_labels == IGNORE_INDEX) | (link_labels == LINK_NEGATIVE)
    known |= (link_labels == LINK_POSITIVE) | (link_labels == LINK_SELF)
    if not known.all():
        raise ValueError(
            f"link_labels must be LINK_NEGATIVE (0), LINK_POSITIVE (1), LINK_SELF (2) or -100, got "
            f"{sorted(set(link_labels[~known].tolist()))}."
        )
    real = link_pairs[link_labels != IGNORE_INDEX]
    if ((real < 0) | (real >= length)).any() or (real[:, 0] == real[:, 1]).any():
        raise ValueError(
            f"link_pairs must hold two different token positions in [0, {length}) for every labelled pair."
        )


# ------------------------------------------------------------------------------------------- Hub and model card
# The card and upload code lives in this file (not in hf_entity_models.hub) because it must also run where only
# this folder's files exist: a checkpoint loaded with trust_remote_code=True and saved or pushed again.

# `save_pretrained(push_to_hub=True, ...)` options that belong to the upload, not to the save.
_SAVE_PUSH_OPTIONS = ("repo_id", "commit_message", "commit_description", "private", "create_pr")

# The Hub has no coreference pipeline tag. Its task taxonomy files coreference resolution under
# token-classification (the `coreference-resolution` task id of datasets such as GAP), and PeTra's outputs are
# per-token decisions (entity, overwrite, coref) from which span links are derived.
PIPELINE_TAG = "token-classification"
_HUB_TASK_TYPES = {"coreference": ("token-classification", "Coreference resolution")}
_DATASET_NAMES = {"gap": "GAP"}
_METRIC_NAMES = {
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "masculine_f1": "F1 (masculine)",
    "feminine_f1": "F1 (feminine)",
    "bias": "Bias (F1 feminine / F1 masculine)",
}
_DATASET_DESCRIPTIONS = {
    "gap": (
        "[GAP](https://github.com/google-research-datasets/gap-coreference) (Webster et al., 2018) is a "
        "gender-balanced set of ambiguous pronoun-name pairs from English Wikipedia: each example asks whether a "
        "pronoun refers to name A, name B or neither (development 2,000 rows, validation 454, test 2,000)."
    ),
}
_CITATION = """@inproceedings{toshniwal2020petra,
  title = {PeTra: A Sparsely Supervised Memory Model for People Tracking},
  author = {Toshniwal, Shubham and Ettinger, Allyson and Gimpel, Kevin and Livescu, Karen},
  booktitle = {Proceedings of ACL},
  year = {2020}
}"""


def _hub_api() -> HfApi:
    return HfApi(library_name="transformers", library_version=transformers.__version__)


def _file_timestamps(folder: str | os.PathLike) -> dict[str, float]:
    if not os.path.isdir(folder):
        return {}
    return {name: os.path.getmtime(os.path.join(folder, name)) for name in os.listdir(folder)}


def _copy_module_with_relative_imports(source_file: str, folder: Path) -> None:
    """Copy a module and the modules it imports relatively, as transformers' `custom_object_save` does."""
    for path in [source_file, *get_relative_import_files(source_file)]:
        shutil.copyfile(path, folder / Path(path).name)


def _hub_model_id(name_or_path: str | None) -> str | None:
    """The Hub id an encoder was loaded from, or None for a local folder (a path means nothing on the Hub)."""
    if not name_or_path or os.path.isabs(name_or_path) or name_or_path.startswith((".", "~")):
        return None
    if os.path.exists(name_or_path):
        return None
    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        return None
    return name_or_path


def _petra_model_card(
    config: PetraConfig,
    class_name: str,
    model_location: str,
    tags: list[str],
    pipelines: dict[str, dict[str, Any]],
    num_parameters: tuple[int, int],
) -> ModelCard:
    """Hub metadata + text of a PeTra checkpoint, from its config and recorded evaluation results."""
    results = list(config.evaluation_results or [])
    model_name = Path(model_location.rstrip("/")).name or "petra"
    datasets = list(dict.fromkeys(result["dataset"] for result in results))
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag=PIPELINE_TAG,
        tags=list(dict.fromkeys(["hf-entity-models", "petra", "coreference", "entity-tracking", *tags])),
        base_model=_hub_model_id(getattr(config.encoder_config, "name_or_path", None)),
        datasets=datasets or None,
        model_name=model_name if results else None,
        eval_results=[_eval_result(result) for result in results] or None,
    )
    sections = [
        _card_overview(config, class_name, model_name, num_parameters),
        _card_data_section(datasets),
        _card_results_section(results),
        _card_threshold_section(config),
        _card_usage_section(class_name, model_location, pipelines),
        _card_limits_section(config, datasets),
        f"## Citation\n\n```bibtex\n{_CITATION}\n```\n",
    ]
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(sections))


def _eval_result(result: dict[str, Any]) -> EvalResult:
    task_type, task_name = _HUB_TASK_TYPES.get(result["task"], (result["task"], None))
    return EvalResult(
        task_type=task_type,
        task_name=task_name,
        dataset_type=result["dataset"],
        dataset_name=result.get("dataset_name") or _DATASET_NAMES.get(result["dataset"], result["dataset"]),
        dataset_split=result["split"],
        metric_type=result["metric"],
        metric_name=result.get("metric_name") or _METRIC_NAMES.get(result["metric"]),
        metric_value=result["value"],
        metric_args={"threshold": result["threshold"]} if "threshold" in result else None,
    )


def _card_overview(config: PetraConfig, class_name: str, model_name: str, num_parameters: tuple[int, int]) -> str:
    encoder = config.encoder_config
    encoder_id = _hub_model_id(getattr(encoder, "name_or_path", None))
    encoder_text = f"[`{encoder_id}`](https://huggingface.co/{encoder_id})" if encoder_id else f"`{encoder.model_type}`"
    head = (
        "This checkpoint has the coreference head: for a pronoun and candidate names it returns their link "
        "probability (Eq. 9 of the paper, maximised over the token pairs of the two spans) and links a candidate "
        "when that probability reaches the decision threshold."
        if class_name == "PetraForCoreference"
        else "This checkpoint is the bare memory model (no coreference head): it returns the memory log."
    )
    total, trainable = num_parameters
    rows = [
        ("Class", f"`{class_name}` (`model_type=\"{config.model_type}\"`)"),
        ("Encoder", f"{encoder_text}, {getattr(encoder, 'num_hidden_layers', '?')} layers, hidden size "
                    f"{getattr(encoder, 'hidden_size', '?')}, {'frozen' if config.freeze_encoder else 'fine-tuned'}"),
        ("Encoder layers read", f"`{list(config.encoder_layers)}` (concatenated)"),
        ("GRU / memory cell size", str(config.hidden_size)),
        ("Memory cells", str(config.num_memory_cells)),
        ("Memory variant", f"`{config.memory_variant}`"),
        ("Usage decay", str(config.usage_decay)),
        ("Decision threshold", f"{float(config.coref_threshold):g}"),
        ("Parameters", f"{total:,} ({trainable:,} trained)"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return (
        f"# {model_name}\n\n"
        "A [PeTra](https://aclanthology.org/2020.acl-main.481/) model (Toshniwal, Ettinger, Gimpel and Livescu, "
        "2020, *PeTra: A Sparsely Supervised Memory Model for People Tracking*), packaged with "
        "the `hf-entity-models` package. PeTra reads a document left "
        "to right with a pretrained encoder and a GRU, and keeps a memory of a few cells: at every token it "
        "decides whether the token mentions a person, and whether that person is new (the token overwrites the "
        "least used cell) or already tracked (the token updates that cell). Coreference links between tokens "
        f"follow from those decisions. {head}\n\n"
        f"| | |\n|---|---|\n{table}\n"
    )


def _card_data_section(datasets: list[str]) -> str:
    if not datasets:
        return (
            "## Data\n\nNo evaluation results are recorded with this checkpoint (`config.evaluation_results` is "
            "empty), so nothing here says how well it works: evaluate it before use.\n"
        )
    described = [_DATASET_DESCRIPTIONS.get(dataset, f"`{dataset}`.") for dataset in datasets]
    return (
        "## Data\n\n"
        + "\n\n".join(described)
        + "\n\nThe checkpoint does not store its training data. The hf-entity-models recipe "
        "(`hf_entity_models.tasks.coreference.train_on_gap`) trains on GAP-format rows and chooses the decision "
        "threshold on the validation rows the results above were measured on (GAP development and validation in "
        "the paper's setup).\n"
    )


def _card_results_section(results: list[dict[str, Any]]) -> str:
    if not results:
        return "## Results\n\nNo results recorded.\n"
    lines = ["| Task | Dataset | Split | Metric | Value | Threshold |", "|---|---|---|---|---|---|"]
    for result in results:
        dataset = result.get("dataset_name") or _DATASET_NAMES.get(result["dataset"], result["dataset"])
        metric = result.get("metric_name") or _METRIC_NAMES.get(result["metric"], result["metric"])
        threshold = f"{result['threshold']:g}" if "threshold" in result else "-"
        lines.append(
            f"| {result['task']} | {dataset} | {result['split']} | {metric} | {result['value']:.4f} | {threshold} |"
        )
    note = (
        "\n\nScores come from `config.evaluation_results`, recorded when the model was evaluated. GAP scores are "
        "computed by the official rule (two binary decisions per row, A and B); bias is F1 feminine / F1 "
        "masculine (1.0 is balanced). A score measured on the split the threshold was chosen on is optimistic."
    )
    return "## Results\n\n" + "\n".join(lines) + note + "\n"


def _card_threshold_section(config: PetraConfig) -> str:
    threshold = float(config.coref_threshold)
    return (
        "## Decision threshold\n\n"
        f"A candidate is linked to the pronoun when its link probability is at least `config.coref_threshold` = "
        f"**{threshold:g}**. The pipeline applies it and returns it with every answer (`\"threshold\"`); the model "
        "itself returns the probabilities (`candidate_scores`), so you can apply your own. To choose it on your "
        "validation data, use `hf_entity_models.tasks.coreference.sweep_threshold` (or `tune_threshold` after "
        "training) and store the result in `model.config.coref_threshold`.\n"
    )


def _card_usage_section(class_name: str, location: str, pipelines: dict[str, dict[str, Any]]) -> str:
    text = "Zoe met Maggie in Paris. She was happy."
    query = "pronoun=(25, 28), candidates=[(0, 3), (8, 14)]"
    with_package = (
        "```python\nimport hf_entity_models  # registers PeTra with the Auto classes and pipeline(\"coreference\")\n"
        "from transformers import pipeline\n\n"
        f"pipe = pipeline(\"coreference\", model=\"{location}\")\n"
        f"pipe(\"{text}\", {query})\n"
        f"model = hf_entity_models.AutoModelForCoreference.from_pretrained(\"{location}\")\n```\n"
        if class_name == "PetraForCoreference"
        else "```python\nimport hf_entity_models\nfrom transformers import AutoModel\n\n"
        f"model = AutoModel.from_pretrained(\"{location}\")  # {class_name}\n```\n"
    )
    remote_lines = [
        "from transformers import AutoModel, pipeline",
        "",
        f"model = AutoModel.from_pretrained(\"{location}\", trust_remote_code=True)  # {class_name}",
    ]
    if pipelines:
        remote_lines += [
            f"pipe = pipeline(model=\"{location}\", trust_remote_code=True)  # the pipeline saved with the model",
            f"pipe(\"{text}\", {query})",
            "pipe(\"" + text + "\")  # clusters: the people the memory tracked, with character offsets",
        ]
    code_files = ["configuration_petra.py", "modeling_petra.py"] + sorted(
        f"{entry['impl'].split('.')[0]}.py" for entry in pipelines.values()
    )
    return (
        "## How to use\n\n"
        "With the `hf-entity-models` package installed:\n\n"
        f"{with_package}\n"
        "Without it, transformers runs the code stored next to the weights "
        f"({', '.join(f'`{name}`' for name in code_files)}; read it first, `trust_remote_code=True` executes it):\n\n"
        "```python\n" + "\n".join(remote_lines) + "\n```\n\n"
        "Character offsets in queries and answers index the input string; long documents are read whole (the "
        "encoder sees overlapping windows), nothing is truncated.\n"
    )


def _card_limits_section(config: PetraConfig, datasets: list[str]) -> str:
    limits = [
        f"The memory has {config.num_memory_cells} cells: a document that mentions more people makes PeTra "
        "overwrite cells, and the overwritten people are forgotten.",
        "GAP supervision is sparse: the model is only trained to link pronouns to names, so name-to-name chains "
        "and entities that are not people are tracked less reliably (paper section 4.4).",
        "The people-counting evaluation of the paper is not part of this checkpoint's results.",
    ]
    if "gap" in datasets:
        limits.append(
            "GAP is English Wikipedia text: expect lower scores on other domains and languages. GAP balances "
            "pronoun gender; read the bias row before using the model where gender fairness matters."
        )
    return "## Limitations\n\n" + "\n".join(f"* {limit}" for limit in limits) + "\n"


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
    "span_link_probabilities",
]
