"""Model cards of entity-model checkpoints: Hub metadata and text, from the config, its recorded results and what
the model's card spec says about the model.

Package code: `hub.checkpoint_writer` writes the card when the package saves or pushes a model, the CLI and the
training recipes record the results it reports. What a card says about one model (overview, configuration table,
limitations, citation, usage) comes from that model's `ModelCardSpec` in `hub/cards/`.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id
from transformers import PreTrainedConfig

@dataclass(frozen=True)
class ModelCardSpec:
    """What the model card of one model says that the generic card code cannot know.

    `hub/cards/` holds one per `model_type`; `CHECKPOINT_WRITER.create_model_card` (`hub/checkpoint_writer.py`)
    writes everything else (Hub metadata, data, results, decision threshold, how to load the checkpoint with and
    without the package). The code files listed in the card are those the checkpoint ships.

    Attributes:
        tags: Hub tags of every checkpoint of the model, after `"hf-entity-models"`, e.g. `("my-model", "coreference")`.
        pipeline_tag: Hub pipeline tag of the model's checkpoints, e.g. `"text-generation"`; None for a model whose
            task the Hub has no pipeline for (the card's usage section names the pipeline to use instead).
        citation: BibTeX entry of the paper.
        overview: `(config, class_name) -> str`: the paragraph under the card's title (what the model is and what
            this class returns).
        config_rows: `(config, class_name) -> [(name, value), ...]`: rows of the checkpoint table, written between
            the class row and the parameter count.
        limitations: `(config, dataset ids of the recorded results) -> [item, ...]`: limitation bullets; the
            limitations of known datasets (e.g. GAP's) follow them.
        usage_with_package: `(class_name, model_location) -> str`: a fenced Python block that loads the checkpoint
            with hf-entity-models installed.
        pipeline_examples: Python lines calling `pipe`, the pipeline saved with the checkpoint (or `config -> lines`,
            when they depend on the checkpoint's mode), shown after it is
            loaded with `trust_remote_code=True` (only when the class ships a pipeline).
        usage_note: Paragraph that closes the usage section (e.g. how offsets and long inputs are handled).
        training_note: What the package's training recipe does with the data, closing the data section.
        frozen_parameter_count: `model -> int`: the parameters that training leaves frozen, decided from the
            config (a loaded model's `requires_grad` flags are not reliable); None when everything is trained.

    Example:

    ```python
    >>> spec = ModelCardSpec(
    ...     tags=("my-model", "coreference"),
    ...     pipeline_tag=None,
    ...     citation="@inproceedings{me2024model, title = {My Model}}",
    ...     overview=lambda config, class_name: f"A `{class_name}` checkpoint.",
    ...     config_rows=lambda config, class_name: [("Hidden size", str(config.hidden_size))],
    ...     limitations=lambda config, datasets: ["Trained on English only."],
    ...     usage_with_package=lambda class_name, location: f"Load `{location}` with `AutoModel`.",
    ... )
    >>> spec.tags
    ('my-model', 'coreference')

    ```
    """

    tags: tuple[str, ...]
    pipeline_tag: str | None
    citation: str
    overview: Callable[[Any, str], str]
    config_rows: Callable[[Any, str], list[tuple[str, str]]]
    limitations: Callable[[Any, list[str]], list[str]]
    usage_with_package: Callable[[str, str], str]
    pipeline_examples: tuple[str, ...] | Callable[[Any], tuple[str, ...]] = ()
    usage_note: str = ""
    training_note: str = ""
    frozen_parameter_count: Callable[[Any], int] | None = None


# The Hub has no coreference task type. Its task taxonomy files coreference resolution under token-classification
# (the `coreference-resolution` task id of datasets such as GAP).
_HUB_TASK_TYPES = {
    "coreference": ("token-classification", "Coreference resolution"),
    "question-answering": ("question-answering", "Question answering"),
}
_DATASET_NAMES = {"gap": "GAP", "squad": "SQuAD 1.1", "squad_v2": "SQuAD 2.0"}
# How the scores of a dataset are computed, after the results table.
_DATASET_RESULT_NOTES = {
    "gap": (
        "GAP scores are computed by the official rule (two binary decisions per row, A and B), as fractions from 0 "
        "to 1; bias is F1 feminine / F1 masculine (1.0 is balanced). Read F1 against the all-positive baseline, "
        "the F1 of linking every candidate on the same rows (0.603 on the whole GAP validation split): a model "
        "near it has not learned to tell the names apart."
    ),
    "squad": (
        "SQuAD scores are the official exact match and token F1 (normalised answers, best over gold answers), as "
        "percentages from 0 to 100."
    ),
    "squad_v2": (
        "SQuAD 2.0 scores are the official exact match and F1, unanswerable questions included (answering \"\" is "
        "correct for them), as percentages from 0 to 100."
    ),
}
_METRIC_NAMES = {
    "f1": "F1",
    "precision": "Precision",
    "recall": "Recall",
    "masculine_f1": "F1 (masculine)",
    "feminine_f1": "F1 (feminine)",
    "bias": "Bias (F1 feminine / F1 masculine)",
    "all_positive_f1": "F1 of linking every candidate (all-positive baseline)",
}
# The scale each recorded metric is on, for the results table: the official scorers differ (GAP's gives fractions,
# SQuAD's and the CoNLL-2012 scorer percentages), and the recorded values keep each scorer's own scale.
_FRACTION_METRICS = {"f1", "precision", "recall", "masculine_f1", "feminine_f1", "all_positive_f1"}
_PERCENT_DATASETS = {"squad", "squad_v2"}
_PERCENT_METRICS = {"conll_f1", "gold_conll_f1", "mention_f1", "answered_percent"}
_RATIO_METRICS = {"bias"}
_DATASET_DESCRIPTIONS = {
    "squad": (
        "[SQuAD 1.1](https://rajpurkar.github.io/SQuAD-explorer/) (Rajpurkar et al., 2016): questions on Wikipedia "
        "paragraphs whose answer is a span of the paragraph."
    ),
    "squad_v2": (
        "[SQuAD 2.0](https://rajpurkar.github.io/SQuAD-explorer/) (Rajpurkar et al., 2018): SQuAD 1.1 plus "
        "unanswerable questions written to look answerable."
    ),
    "gap": (
        "[GAP](https://github.com/google-research-datasets/gap-coreference) (Webster et al., 2018) is a "
        "gender-balanced set of ambiguous pronoun-name pairs from English Wikipedia: each example asks whether a "
        "pronoun refers to name A, name B or neither (development 2,000 rows, validation 454, test 2,000)."
    ),
}
# Limitations that come with the data rather than the model, listed after the model's own.
_DATASET_LIMITATIONS = {
    "gap": (
        "GAP is English Wikipedia text: expect lower scores on other domains and languages. GAP balances "
        "pronoun gender; read the bias row before using the model where gender fairness matters."
    ),
}


def hub_model_id(name_or_path: str | None) -> str | None:
    """The Hub id an encoder was loaded from, or None for a local folder (a path means nothing on the Hub).

    Example:

    ```python
    >>> hub_model_id("google-bert/bert-base-uncased"), hub_model_id("./runs/encoder"), hub_model_id(None)
    ('google-bert/bert-base-uncased', None, None)

    ```
    """
    if not name_or_path or os.path.isabs(name_or_path) or name_or_path.startswith((".", "~")):
        return None
    if os.path.exists(name_or_path):
        return None
    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        return None
    return name_or_path


def encoder_summary(encoder_config: PreTrainedConfig) -> str:
    """How a card names a model's pretrained encoder: a Hub link when it came from the Hub, its size.

    Example:

    ```python
    >>> from transformers import BertConfig
    >>> encoder_summary(BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2))
    '`bert`, 2 layers, hidden size 32'

    ```
    """
    encoder_id = hub_model_id(getattr(encoder_config, "name_or_path", None))
    name = f"[`{encoder_id}`](https://huggingface.co/{encoder_id})" if encoder_id else f"`{encoder_config.model_type}`"
    layers = getattr(encoder_config, "num_hidden_layers", "?")
    return f"{name}, {layers} layers, hidden size {getattr(encoder_config, 'hidden_size', '?')}"


# The card's text; `ModelCard.from_template` renders it with Jinja2 (a dependency of torch) and writes the metadata
# header from the ModelCardData. What a card says about one model comes from its ModelCardSpec.
_CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ model_name }}

{{ overview }}

| | |
|---|---|
{% for name, value in rows -%}
| {{ name }} | {{ value }} |
{% endfor %}
## Data

{% for description in dataset_descriptions -%}
{{ description }}

{% endfor -%}
{% if dataset_descriptions -%}
{{ data_closing }}
{%- else -%}
No evaluation results are recorded with this checkpoint (`config.evaluation_results` is empty), so nothing here says \
how well it works: evaluate it before use.
{%- endif %}

## Results

{% if results -%}
| Task | Dataset | Split | Metric | Value | Threshold | Scale |
|---|---|---|---|---|---|---|
{% for row in results -%}
| {{ row.task }} | {{ row.dataset }} | {{ row.split }} | {{ row.metric }} | {{ "%.4f" | format(row.value) }} | \
{{ row.threshold }} | {{ row.scale }} |
{% endfor %}
Scores come from `config.evaluation_results`, recorded when the model was evaluated.{% for note in result_notes %} \
{{ note }}{% endfor %} A score measured on the split a threshold was chosen on is optimistic.
{%- else -%}
No results recorded.
{%- endif %}
{% if threshold is not none %}
## Decision threshold

A candidate is linked to the pronoun when its link probability is at least `config.coref_threshold` = \
**{{ threshold }}**. The pipeline applies it and returns it with every answer (`"threshold"`); the model itself \
returns the probabilities (`candidate_scores`), so you can apply your own. To choose it on your validation data, use \
`hf_entity_models.tasks.coreference.sweep_threshold` (or `tune_threshold` after training) and store the result in \
`model.config.coref_threshold`.
{% endif %}
## How to use

With the `hf-entity-models` package installed:

{{ usage_with_package }}
Without it, transformers runs the code stored next to the weights ({{ code_files }}; read it first, \
`trust_remote_code=True` executes it):

```python
from transformers import AutoModel, pipeline

model = AutoModel.from_pretrained("{{ location }}", trust_remote_code=True)  # {{ class_name }}
{% if pipeline_examples -%}
pipe = pipeline(model="{{ location }}", trust_remote_code=True)  # the pipeline saved with the model
{% for line in pipeline_examples -%}
{{ line }}
{% endfor -%}
{% endif -%}
```
{% if pipeline_examples and pipeline_tasks %}
Give `pipeline` no task name there: transformers reads the task the checkpoint declares ({{ pipeline_tasks }}) from \
`config.json` and runs the pipeline code saved with the model. The package's task names (e.g. \
`pipeline("coreference", ...)`) exist only where `hf-entity-models` is imported; without it transformers answers \
`KeyError: Unknown task`.
{% endif %}{% if usage_note %}
{{ usage_note }}
{% endif %}
## Limitations

{% for limit in limitations -%}
* {{ limit }}
{% endfor %}
## Citation

```bibtex
{{ citation }}
```

"""  # Jinja2 drops the template's last newline: the card ends with one


def model_card(
    spec: ModelCardSpec,
    config: PreTrainedConfig,
    class_name: str,
    model_location: str,
    tags: list[str],
    pipelines: dict[str, dict[str, Any]],
    code_files: list[str],
    num_parameters: tuple[int, int],
) -> ModelCard:
    """Hub metadata + text of a checkpoint, from its config, its recorded evaluation results and the model's spec."""
    results = list(getattr(config, "evaluation_results", None) or [])
    # `model_type` names the model when the location has no last component (e.g. a save into ".").
    model_name = Path(model_location.rstrip("/")).name or config.model_type
    datasets = list(dict.fromkeys(result["dataset"] for result in results))
    encoder_config = getattr(config, "encoder_config", None)
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag=spec.pipeline_tag,
        tags=list(dict.fromkeys(["hf-entity-models", *spec.tags, *tags])),
        base_model=hub_model_id(getattr(encoder_config, "name_or_path", None)),
        datasets=datasets or None,
        model_name=model_name if results else None,
        eval_results=[_eval_result(result) for result in results] or None,
    )
    total, trainable = num_parameters
    threshold = getattr(config, "coref_threshold", None)
    return ModelCard.from_template(
        card_data,
        template_str=_CARD_TEMPLATE,
        model_name=model_name,
        overview=spec.overview(config, class_name),
        rows=[
            ("Class", f"`{class_name}` (`model_type=\"{config.model_type}\"`)"),
            *spec.config_rows(config, class_name),
            ("Parameters", f"{total:,} ({trainable:,} trained)"),
        ],
        dataset_descriptions=[_DATASET_DESCRIPTIONS.get(dataset, f"`{dataset}`.") for dataset in datasets],
        data_closing=" ".join(filter(None, ["The checkpoint does not store its training data.", spec.training_note])),
        results=[_result_row(result) for result in results],
        result_notes=[_DATASET_RESULT_NOTES[dataset] for dataset in datasets if dataset in _DATASET_RESULT_NOTES],
        threshold=None if threshold is None else f"{float(threshold):g}",
        usage_with_package=spec.usage_with_package(class_name, model_location),
        code_files=", ".join(f"`{name}`" for name in code_files),
        location=model_location,
        class_name=class_name,
        pipeline_examples=list(_pipeline_examples(spec, config)) if pipelines else [],
        pipeline_tasks=", ".join(f"`{task}`" for task in pipelines),
        usage_note=spec.usage_note,
        limitations=[
            *spec.limitations(config, datasets),
            *(_DATASET_LIMITATIONS[dataset] for dataset in datasets if dataset in _DATASET_LIMITATIONS),
        ],
        citation=spec.citation,
    )


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


def _result_row(result: dict[str, Any]) -> dict[str, Any]:
    """One row of the card's results table, with display names."""
    return {
        "task": result["task"],
        "dataset": result.get("dataset_name") or _DATASET_NAMES.get(result["dataset"], result["dataset"]),
        "split": result["split"],
        "metric": result.get("metric_name") or _METRIC_NAMES.get(result["metric"], result["metric"]),
        "value": result["value"],
        "threshold": f"{result['threshold']:g}" if "threshold" in result else "-",
        "scale": _scale(result),
    }


def _scale(result: dict[str, Any]) -> str:
    """The scale of a recorded value, as the results table states it ("-" where it has none, e.g. perplexity)."""
    metric = result["metric"]
    if metric in _RATIO_METRICS:
        return "ratio"
    if result["dataset"] in _PERCENT_DATASETS or metric in _PERCENT_METRICS:
        return "0-100"
    if metric in _FRACTION_METRICS:
        return "0-1"
    return "-"


def _pipeline_examples(spec: ModelCardSpec, config: Any) -> tuple[str, ...]:
    return spec.pipeline_examples(config) if callable(spec.pipeline_examples) else spec.pipeline_examples
