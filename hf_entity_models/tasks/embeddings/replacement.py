"""Replacing a model's token embeddings with definition embeddings (DefinitionEMB, Section 5.3).

The definition embeddings come from `compute_definition_embeddings` (`definition_embeddings`), given here as a
trained reader (read for exactly the task tokens that will be replaced) or as precomputed
`TokenDefinitionEmbeddings`. `apply_definition_embeddings` replaces min(alpha% x N, |V_task|) rows of a model's
input embedding matrix, chosen among the tokens that appear in a task's texts and ranked as Appendix F ranks them,
and returns a `DefinitionEmbeddingReplacement`: the model, still of its ORIGINAL class (a `BertModel` stays a
`BertModel`, so anyone loads it without this package), with what was replaced, a generated model card and
`save_pretrained` / `push_to_hub`.
"""

import copy
import json
import math
import numbers
import os
import random
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import HfApi, ModelCard, ModelCardData
from transformers import PreTrainedModel
from transformers.utils import logging

from ...models._shared.pipeline_inputs import check_unicode
from ..text_files import named_decode_errors
from .definition_embeddings import TokenDefinitionEmbeddings, compute_definition_embeddings, definitions_naming

logger = logging.get_logger(__name__)

STRATEGIES = ("rare", "last", "random", "top")
# Appendix F: the "top" strategy starts at index 5000, past the most frequent tokens.
TOP_STRATEGY_FIRST_INDEX = 5000
REPLACEMENT_FILE = "definition_embeddings.json"
# lambda of e + lambda (e_d' - e): chosen on word-similarity sets that are not reported (WS-353, MTurk-771) in
# benchmarks/bench_definition_emb.py; see benchmarks/RESULTS.md.
DEFAULT_BLEND = 0.1


# ------------------------------------------------------------------------------------------------ replacement
@dataclass
class DefinitionEmbeddingReplacement:
    """A model whose token embeddings were partly rebuilt from definitions, and what was done to it.

    Attributes:
        model: The model, of its original class, with the replaced rows (tied output embeddings follow).
        tokenizer: Its tokenizer (saved next to it).
        replaced_token_ids: The replaced rows, in the order the strategy ranked them.
        alpha: Percentage of the vocabulary size N that bounds the number of replaced rows.
        strategy: "rare" (fewest occurrences in the task texts first), "last", "random" or "top" (Appendix F).
        appearing_only: Only tokens that appear in the task texts were replaced (Appendix M).
        vocabulary_size: N, the rows of the input embedding matrix.
        task_vocabulary_size: |V_task|, the distinct non-special tokens of the task texts.
        task_tokens_without_definition: Tokens of V_task that no definition names (never replaced, footnote 7).
        definition_model: Name or path of the definition reader, when known.
        definitions: What the definitions were (free text, for the card).
        held_out: The reader against the mean embedding on held-out words (`HeldOutComparison.summary()`), when
            it was checked.
        blend: lambda of the written rows e + lambda (e_d - e) (1: the definition embedding itself, the paper's).
        original_norms: e_d was rescaled to the norm of the row it replaces before blending.
    """

    model: PreTrainedModel
    tokenizer: Any
    replaced_token_ids: list[int]
    alpha: float
    strategy: str
    appearing_only: bool
    vocabulary_size: int
    task_vocabulary_size: int
    task_tokens_without_definition: int
    definition_model: str | None = None
    definitions: str | None = None
    seed: int | None = None
    held_out: dict[str, Any] | None = None
    blend: float = 1.0
    original_norms: bool = False

    def summary(self) -> dict[str, Any]:
        """What was replaced, as stored in the saved config (`definition_embeddings`) and in the card."""
        return {
            "alpha": self.alpha,
            "strategy": self.strategy,
            "appearing_only": self.appearing_only,
            "replaced_tokens": len(self.replaced_token_ids),
            "vocabulary_size": self.vocabulary_size,
            "task_vocabulary_size": self.task_vocabulary_size,
            "task_tokens_without_definition": self.task_tokens_without_definition,
            "definition_model": self.definition_model,
            "definitions": self.definitions,
            "seed": self.seed,
            "blend": self.blend,
            "original_norms": self.original_norms,
            **({"held_out": self.held_out} if self.held_out is not None else {}),
        }

    def model_card(self, model_location: str | None = None) -> ModelCard:
        """The card of the replaced checkpoint: the base model, the replaced rows, the data and alpha."""
        base_model = getattr(self.model.config, "_name_or_path", None) or None
        location = model_location or "path/to/this/folder"
        card_data = ModelCardData(
            library_name="transformers",
            tags=["hf-entity-models", "definition-emb"],
            base_model=base_model if base_model and not Path(base_model).exists() else None,
        )
        tokens = self.tokenizer.convert_ids_to_tokens(self.replaced_token_ids)
        return ModelCard.from_template(
            card_data,
            template_str=_REPLACEMENT_CARD,
            model_class=type(self.model).__name__,
            base_model=f"`{base_model}`" if base_model else "The original model",
            location=location,
            rows=[(token_id, token) for token_id, token in zip(self.replaced_token_ids, tokens)],
            **self.summary(),
        )

    def save_pretrained(self, save_directory: str | Path) -> Path:
        """Write the model (its original class), the tokenizer, the card (README.md) and the list of replaced rows
        (`definition_embeddings.json`); any transformers user loads the folder with `AutoModel.from_pretrained`."""
        folder = Path(save_directory)
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        (folder / REPLACEMENT_FILE).write_text(
            json.dumps({**self.summary(), "replaced_token_ids": self.replaced_token_ids}, indent=2) + "\n",
            encoding="utf-8",
        )
        self.model_card(str(folder)).save(folder / "README.md")
        return folder

    def push_to_hub(self, repo_id: str, *, private: bool | None = None, token: str | None = None,
                    commit_message: str = "Upload model with definition embeddings") -> str:
        """Upload what `save_pretrained` writes (card included) to `repo_id`; returns the commit URL."""
        # Read at call time: huggingface_hub reads HF_ENDPOINT once, at import.
        api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
        repo_id = api.create_repo(repo_id, private=private, token=token, exist_ok=True).repo_id
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder)
            self.model_card(repo_id).save(Path(folder) / "README.md")
            return api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message, token=token)


_REPLACEMENT_CARD = """---
{{ card_data }}
---

# {{ model_class }} with definition embeddings

{{ base_model }} with **{{ replaced_tokens }}** rows of its token embedding matrix rebuilt from dictionary definitions \
by DefinitionEMB (Zhang, Li and Okumura, *Reconsidering Token Embeddings with the Definitions for Pre-trained \
Language Models*), written by the `hf-entity-models` package. Everything else is the original model: it is a plain \
`{{ model_class }}` that loads without that package.

| | |
|---|---|
| Replaced rows | {{ replaced_tokens }} of N = {{ vocabulary_size }} |
| alpha | {{ alpha }} (at most alpha% x N rows) |
| Rows written | {% if original_norms %}e + {{ blend }} (e_d' - e), e_d' = the definition embedding at the norm of the row it replaces{% else %}e + {{ blend }} (e_d - e), e_d = the definition embedding as the reader gives it{% endif %} |
| Strategy | `{{ strategy }}` ({% if strategy == "rare" %}the tokens that occur least often in the task texts{% elif strategy == "last" %}the tokens of the task with the largest vocabulary indexes, \
i.e. the rarest in pre-training{% elif strategy == "top" %}the tokens of the task with the smallest indexes from 5000 \
on{% else %}random tokens of the task, seed {{ seed }}{% endif %}) |
| Tokens replaced | {% if appearing_only %}only tokens that appear in the task texts{% else %}every token with a definition \
in the index range that holds that many task tokens (Appendix M){% endif %} |
| Task vocabulary | {{ task_vocabulary_size }} distinct tokens, {{ task_tokens_without_definition }} of them without a \
definition (never replaced) |
| Definition reader | {{ definition_model or "not recorded" }} |
| Definitions | {{ definitions or "not recorded" }} |
{% if held_out -%}| Held-out check | on {{ held_out.tokens }} tokens of held-out definitions: cosine {{ "%.3f" % held_out.reader_cosine }} with the true rows against {{ "%.3f" % held_out.mean_vector_cosine }} for the mean embedding (MSE {{ "%.4f" % held_out.reader_mse }} against {{ "%.4f" % held_out.mean_vector_mse }}; pairwise cosine of the predictions {{ "%.3f" % held_out.reader_spread }} against {{ "%.3f" % held_out.true_spread }} for the true rows) |
{% endif %}
## How to use

```python
from transformers import AutoModel, AutoTokenizer

model = AutoModel.from_pretrained("{{ location }}")
tokenizer = AutoTokenizer.from_pretrained("{{ location }}")
```

`definition_embeddings.json` (and `config.definition_embeddings`) record what was replaced.

## Replaced rows

<details>
<summary>{{ replaced_tokens }} rows (id, token)</summary>

{% for token_id, token in rows -%}
`{{ token_id }}` `{{ token }}`{{ "  " }}
{% endfor %}
</details>
"""


def read_task_texts(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The texts of a downstream task from plain-text files, one text per line (blank lines skipped).

    These are the `task_texts` of `apply_definition_embeddings`: the task's training texts, whose tokens decide which
    embeddings are replaced.

    Args:
        paths: One UTF-8 text file or several (read in the given order).

    Returns:
        The non-blank lines of all files, in order, without their line ends.

    Raises:
        FileNotFoundError: Naming a file that does not exist.
        ValueError: Naming a file that is not UTF-8 text, or when the files hold no text at all.

    Example:

    ```python
    >>> texts = read_task_texts(["mrpc-train-sentences.txt"])  # doctest: +SKIP

    ```
    """
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not files:
        raise ValueError("No task-text file was given: pass one or more text files, one text per line.")
    texts: list[str] = []
    for file in map(Path, files):
        if not file.is_file():
            raise FileNotFoundError(f"The task-text file {file} does not exist.")
        with named_decode_errors(file, "task-text file"):
            # Split at line ends only: str.splitlines would also split a text at characters such as U+2028.
            lines = file.read_text(encoding="utf-8-sig").split("\n")
        texts += [line.rstrip("\r") for line in lines if line.strip()]
    if not texts:
        raise ValueError(
            f"The task-text file{'s' if len(files) > 1 else ''} {', '.join(str(f) for f in files)} hold"
            f"{'' if len(files) > 1 else 's'} no text (empty or blank lines only): give the task's training texts, "
            "one per line."
        )
    return texts


def apply_definition_embeddings(
    model: PreTrainedModel,
    tokenizer: Any,
    definition_model: Any,
    task_texts: Sequence[str],
    alpha: float,
    strategy: str = "rare",
    appearing_only: bool = True,
    definitions: Any = None,
    seed: int = 0,
    inplace: bool = False,
    definitions_description: str | None = None,
    show_progress: bool = True,
    blend: float = DEFAULT_BLEND,
    original_norms: bool = True,
    definition_model_description: str | None = None,
) -> DefinitionEmbeddingReplacement:
    """Replace the token embeddings of the rare tokens of a task with definition embeddings (Section 5.3).

    V_task is the set of non-special tokens of `task_texts`. min(alpha% x N, |V_task|) of its tokens, ranked by
    `strategy`, get e(v) <- e(v) + blend (e_d'(v) - e(v)), where e_d' is the definition embedding rescaled to the
    norm of e(v) (`original_norms`; the paper writes e_d itself: blend 1, original_norms False); tokens that no definition names are passed over (footnote 7) and the budget is
    filled from further down the ranking, so fewer rows are replaced only when the task's defined tokens run out. With `appearing_only=False` (Appendix M) the index range [X, N] that holds that many task tokens is
    replaced whole, tokens absent from the task included ("last" and "top" only).

    Args:
        model: Any transformers model with input embeddings (e.g. `BertModel`, `BertForMaskedLM`).
        tokenizer: Its tokenizer.
        definition_model: A trained `DefinitionEmbModel` for this model (then `definitions` is needed), or the
            `TokenDefinitionEmbeddings` it computed.
        task_texts: The texts of the downstream task (its training data).
        alpha: Percentage of the vocabulary size, 0 to 100 (the paper tunes it on validation: 1 to 100).
        strategy: "rare" (fewest occurrences in `task_texts` first, ties by larger index: rarity by real counts, for
            vocabularies that are not frequency-ordered, like BERT's), "last" (largest vocabulary indexes first, the
            paper's choice for BPE vocabularies ordered by merge frequency), "top" (smallest indexes from 5000 on)
            or "random" (seeded).
        appearing_only: Replace only tokens of V_task (the paper's default).
        definitions: The definitions to read when `definition_model` is a model.
        seed: Seed of the "random" strategy.
        inplace: Modify `model` itself instead of a copy.
        definitions_description: What the definitions were, for the card (e.g. "WordNet 3.0 glosses").
        show_progress: Show progress bars.
        blend: lambda in [0, 1]: how far each row moves from its original value to the definition embedding.
        original_norms: Rescale each definition embedding to the norm of the row it replaces (a scale-free reader
            gives directions; an MSE reader's predictions are far shorter than real rows).
        definition_model_description: Where the reader is kept, for the card (e.g. the folder it was saved to after
            training). Default: the folder or Hub id it was loaded from, or that it was built in this run.

    Returns:
        A `DefinitionEmbeddingReplacement` (`.model`, `.replaced_token_ids`, `.save_pretrained`, `.push_to_hub`).

    Example:

    ```python
    >>> result = apply_definition_embeddings(bert, tokenizer, reader, mrpc_texts, alpha=5,
    ...                                      definitions=glosses)  # doctest: +SKIP
    >>> result.save_pretrained("bert-mrpc-definitions")  # doctest: +SKIP

    ```
    """
    _check_replacement_arguments(alpha, strategy, appearing_only, task_texts)
    if isinstance(blend, bool) or not isinstance(blend, numbers.Real) or not 0 <= blend <= 1:
        raise ValueError(f"blend is lambda in e + lambda (e_d - e) and must lie in 0..1, got {blend!r}.")
    embedding_matrix = model.get_input_embeddings().weight
    vocabulary_size, width = embedding_matrix.shape
    special = set(tokenizer.all_special_ids)
    task_counts = _task_token_counts(tokenizer, task_texts, special)
    task_vocabulary = set(task_counts)
    if not task_vocabulary:
        raise ValueError("The task texts contain no token other than special tokens: give the task's training texts.")
    outside = [token for token in task_vocabulary if token >= vocabulary_size]
    if outside:
        raise ValueError(
            f"The tokenizer gives ids up to {max(outside)} but the model has {vocabulary_size} embedding rows: use the "
            "model's own tokenizer."
        )
    budget = replacement_budget(alpha, vocabulary_size, len(task_vocabulary))
    ranked = _ranked_tokens(strategy, task_counts, seed)
    wanted: Iterable[int] | None = task_vocabulary if appearing_only else None
    named = None  # the task tokens some definition names, when known before reading
    raw_definitions = "definition" in (getattr(definitions, "column_names", None) or [])
    if appearing_only and raw_definitions and isinstance(definition_model, PreTrainedModel):
        # Read only what is written: the `budget` best-ranked task tokens that some definition names.
        definitions, named = definitions_naming(definitions, tokenizer, task_vocabulary, definition_model.config)
        wanted = [token for token in ranked if token in named][:budget]
    found = _definition_embeddings(definition_model, tokenizer, definitions, wanted, show_progress)
    if found.embeddings.shape[1] != width:
        raise ValueError(
            f"The definition embeddings are {found.embeddings.shape[1]} wide but the model's token embeddings are "
            f"{width} wide: train the definition reader for this model (DefinitionEmbModel.from_pretrained_model)."
        )
    vectors = found.as_dict()
    defined_task_tokens = [token for token in ranked if token in vectors]
    if appearing_only:
        replaced = defined_task_tokens[:budget]
    else:
        replaced = _whole_range(strategy, defined_task_tokens[:budget], vectors, special)
    target = model if inplace else copy.deepcopy(model)
    _write_rows(target, replaced, vectors, float(blend), original_norms)
    result = DefinitionEmbeddingReplacement(
        model=target,
        tokenizer=tokenizer,
        replaced_token_ids=replaced,
        alpha=alpha,
        strategy=strategy,
        appearing_only=appearing_only,
        vocabulary_size=vocabulary_size,
        task_vocabulary_size=len(task_vocabulary),
        task_tokens_without_definition=len(task_vocabulary) - len(named if named is not None else defined_task_tokens),
        definition_model=definition_model_description or _reader_name(definition_model),
        definitions=definitions_description,
        seed=seed if strategy == "random" else None,
        blend=float(blend),
        original_norms=bool(original_norms),
    )
    target.config.definition_embeddings = result.summary()
    logger.info(
        f"Replaced {len(replaced)} token embeddings (alpha {alpha}, strategy {strategy}; |V_task| = "
        f"{len(task_vocabulary)}, {result.task_tokens_without_definition} without a definition)."
    )
    return result


def replacement_budget(alpha: float, vocabulary_size: int, task_vocabulary_size: int) -> int:
    """min(alpha% x N, |V_task|) rows (Section 5.3), in exact arithmetic (29 / 100 * 100 is 28.999... in floats).

    Example:

    ```python
    >>> replacement_budget(29, 100, 1000), replacement_budget(5, 30522, 800)
    (29, 800)

    ```
    """
    return min(math.floor(Fraction(str(alpha)) * vocabulary_size / 100), task_vocabulary_size)


def _check_replacement_arguments(alpha: float, strategy: str, appearing_only: bool, task_texts: Any) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= alpha <= 100:
        raise ValueError(f"alpha is a percentage of the vocabulary size and must lie in 0..100, got {alpha!r}.")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}.")
    if not appearing_only and strategy in ("random", "rare"):
        raise ValueError(
            f"appearing_only=False replaces a whole index range (Appendix M), which the {strategy!r} strategy does "
            "not have: use strategy='last' or 'top', or appearing_only=True."
        )
    if isinstance(task_texts, str) or not isinstance(task_texts, Sequence):
        raise TypeError("task_texts must be a list of strings (the task's training texts), not a single string.")
    if not task_texts:
        raise ValueError("task_texts is empty: give the texts of the task whose vocabulary is to be replaced.")
    bad = next((text for text in task_texts if not isinstance(text, str)), None)
    if bad is not None:
        raise TypeError(f"task_texts must hold strings, found {type(bad).__name__}.")
    for index, text in enumerate(task_texts):  # before the tokenizer, whose TypeError names no text
        check_unicode(text, f"Text {index} of task_texts")


def _task_token_counts(tokenizer: Any, task_texts: Sequence[str], special: set[int]) -> Counter:
    """How often each non-special token occurs in the task texts."""
    counts: Counter = Counter()
    for start in range(0, len(task_texts), 1000):
        encoded = tokenizer(list(task_texts[start : start + 1000]), add_special_tokens=False)["input_ids"]
        for ids in encoded:
            counts.update(ids)
    for token in special:
        counts.pop(token, None)
    return counts


def _definition_embeddings(definition_model, tokenizer, definitions, token_ids, show_progress):
    if isinstance(definition_model, TokenDefinitionEmbeddings):
        return definition_model
    if not isinstance(definition_model, PreTrainedModel) or not hasattr(definition_model.config, "reader_type"):
        raise TypeError(
            "definition_model must be a DefinitionEmbModel or the TokenDefinitionEmbeddings it computed, got "
            f"{type(definition_model).__name__}."
        )
    if definitions is None:
        raise ValueError(
            "definitions is needed to read definition embeddings with a DefinitionEmbModel (e.g. "
            "read_wordnet_glosses(...)); or pass precomputed TokenDefinitionEmbeddings."
        )
    return compute_definition_embeddings(definition_model, tokenizer, definitions, token_ids, show_progress=show_progress)


def _ranked_tokens(strategy: str, task_counts: Counter, seed: int) -> list[int]:
    task_vocabulary = set(task_counts)
    if strategy == "rare":
        return sorted(task_vocabulary, key=lambda token: (task_counts[token], -token))
    if strategy == "last":
        return sorted(task_vocabulary, reverse=True)
    if strategy == "top":
        return sorted(token for token in task_vocabulary if token >= TOP_STRATEGY_FIRST_INDEX)
    ranked = sorted(task_vocabulary)
    random.Random(seed).shuffle(ranked)
    return ranked


def _whole_range(strategy: str, chosen: list[int], vectors: dict[int, torch.Tensor], special: set[int]) -> list[int]:
    """Appendix M: every token with a definition in the index range that the chosen task tokens span."""
    if not chosen:
        return []
    if strategy == "last":
        low = min(chosen)
        return sorted((token for token in vectors if token >= low and token not in special), reverse=True)
    high = max(chosen)
    return sorted(token for token in vectors if TOP_STRATEGY_FIRST_INDEX <= token <= high and token not in special)


def blended_rows(original: torch.Tensor, definition: torch.Tensor, blend: float, original_norms: bool) -> torch.Tensor:
    """e + blend (e_d' - e), row by row; e_d' = e_d rescaled to the norm of e when `original_norms`, else e_d.

    Example:

    ```python
    >>> original, definition = torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 1.0]])
    >>> blended_rows(original, definition, 0.5, original_norms=True)  # e_d' = (0, 5)
    tensor([[1.5000, 4.5000]])

    ```
    """
    if blend == 1 and not original_norms:  # the paper's rows, exactly as read
        return definition.clone()
    original, definition = original.float(), definition.float()
    if original_norms:
        scale = original.norm(dim=-1, keepdim=True) / definition.norm(dim=-1, keepdim=True).clamp(min=1e-12)
        definition = definition * scale
    return original + blend * (definition - original)


@torch.no_grad()
def _write_rows(
    model: PreTrainedModel, token_ids: list[int], vectors: dict[int, torch.Tensor], blend: float, original_norms: bool
) -> None:
    if not token_ids:
        return
    weight = model.get_input_embeddings().weight
    index = torch.tensor(token_ids, device=weight.device)
    definitions = torch.stack([vectors[token] for token in token_ids]).to(weight.device)
    rows = blended_rows(weight[index], definitions, blend, original_norms).to(weight.dtype)
    weight[index] = rows
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    output_weight = getattr(output, "weight", None)
    # Tied output embeddings share the tensor and follow; a model that ties by copying gets the rows too.
    if output_weight is not None and output_weight.data_ptr() != weight.data_ptr() and _ties_embeddings(model):
        output_weight[index.to(output_weight.device)] = rows.to(output_weight.device, output_weight.dtype)


def _ties_embeddings(model: PreTrainedModel) -> bool:
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text_config, "tie_word_embeddings", False))


def _reader_name(definition_model: Any) -> str | None:
    """Where the reader was loaded from, or that it was built in this run (whether it was saved is not known here:
    the caller that saved it says where with `definition_model_description`)."""
    if not isinstance(definition_model, PreTrainedModel):
        return None
    config = definition_model.config
    base = getattr(config, "base_model_name_or_path", None)
    return getattr(config, "_name_or_path", None) or (
        f"a {config.reader_type} DefinitionEmbModel" + (f" of {base}" if base else "")
        + ", built in the run that wrote this checkpoint (not loaded from a folder)"
    )
