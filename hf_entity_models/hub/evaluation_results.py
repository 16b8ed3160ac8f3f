"""Measured results recorded in a model config (`config.evaluation_results`), checked and kept one per measurement.

Package code (a checkpoint carries the recorded results in its config.json, not this code): the training code and
the CLI record results, and the model card (`hub.checkpoint_writer`) checks and reports them.
"""

import math
import numbers
from typing import Any

# Keys of one `evaluation_results` entry: what identifies the measurement, then optional display details.
EVALUATION_RESULT_KEYS = ("task", "dataset", "split", "metric", "value")
EVALUATION_RESULT_OPTIONAL_KEYS = ("threshold", "dataset_name", "metric_name")


def record_evaluation(
    config: Any,
    task: str,
    dataset: str,
    split: str,
    metric: str,
    value: float,
    threshold: float | None = None,
    dataset_name: str | None = None,
    metric_name: str | None = None,
) -> None:
    """Record one measured result in `config.evaluation_results`, so that the model card reports it.

    A result with the same task, dataset, split and metric replaces the earlier one (re-tuning the threshold
    updates the card instead of listing stale values).

    Args:
        config: The model's config (any config with an `evaluation_results` field).
        task: What was evaluated, e.g. `"coreference"`.
        dataset: Dataset id, e.g. `"gap"` (the Hub id when there is one).
        split: Dataset split, e.g. `"validation"`.
        metric: Metric id, e.g. `"f1"`, `"bias"`.
        value: The measured value; must be a finite number (skip undefined metrics such as a NaN ratio).
        threshold: Decision threshold the value was measured at, if any.
        dataset_name: Display name of the dataset, e.g. `"GAP"`.
        metric_name: Display name of the metric, e.g. `"F1 (feminine)"`.

    Raises:
        ValueError: The result is invalid (see `check_evaluation_results`); nothing is recorded.

    Example:

    ```python
    >>> from types import SimpleNamespace
    >>> config = SimpleNamespace(evaluation_results=None)
    >>> record_evaluation(config, "coreference", "gap", "validation", "f1", 0.70, threshold=0.05)
    >>> record_evaluation(config, "coreference", "gap", "validation", "f1", 0.72, threshold=0.04)
    >>> [(r["metric"], r["value"]) for r in config.evaluation_results]
    [('f1', 0.72)]

    ```
    """
    result = {"task": task, "dataset": dataset, "split": split, "metric": metric, "value": value}
    optional = {"threshold": threshold, "dataset_name": dataset_name, "metric_name": metric_name}
    result.update({key: item for key, item in optional.items() if item is not None})
    _check_evaluation_result(result, "The evaluation result")
    # Plain floats: numpy scalars are numbers too, but the config must stay JSON-serialisable.
    result["value"] = float(result["value"])
    if "threshold" in result:
        result["threshold"] = float(result["threshold"])
    # Replacing (not appending) keeps the model card free of stale rows when a threshold is tuned again.
    kept = [old for old in getattr(config, "evaluation_results", None) or [] if _measurement(old) != _measurement(result)]
    config.evaluation_results = [*kept, result]


def check_evaluation_results(results: list[dict[str, Any]] | None) -> None:
    """Check every entry of a config's `evaluation_results`.

    Args:
        results: The recorded results (None means none).

    Raises:
        ValueError: An entry misses a key, has an unknown key, an empty name, a value that is not a finite number
            or a threshold outside [0, 1]; the message names the entry, e.g. `evaluation_results[1]`.

    Example:

    ```python
    >>> check_evaluation_results([{"task": "coreference", "dataset": "gap", "split": "validation", "metric": "f1",
    ...                            "value": float("nan")}])
    Traceback (most recent call last):
        ...
    ValueError: evaluation_results[0]: 'value' must be a finite number, got nan; do not record undefined metrics (NaN).

    ```
    """
    for index, result in enumerate(results or []):
        _check_evaluation_result(result, f"evaluation_results[{index}]")


def _measurement(result: dict[str, Any]) -> tuple[str, str, str, str]:
    """What a result measured (everything but the value): one card row per measurement."""
    return result["task"], result["dataset"], result["split"], result["metric"]


def _check_evaluation_result(result: dict[str, Any], name: str) -> None:
    _require(isinstance(result, dict), f"{name} must be a dict, got {type(result).__name__}.")
    missing = [key for key in EVALUATION_RESULT_KEYS if key not in result]
    unknown = sorted(set(result) - set(EVALUATION_RESULT_KEYS) - set(EVALUATION_RESULT_OPTIONAL_KEYS))
    _require(
        not missing and not unknown,
        f"{name} must have the keys {list(EVALUATION_RESULT_KEYS)} and may have "
        f"{list(EVALUATION_RESULT_OPTIONAL_KEYS)}; missing {missing}, unknown {unknown}. Use "
        "`config.record_evaluation(...)` to add results.",
    )
    for key in ("task", "dataset", "split", "metric", "dataset_name", "metric_name"):
        if key in result:
            _require(
                isinstance(result[key], str) and result[key].strip() != "",
                f"{name}: {key!r} must be a non-empty string, got {result[key]!r}.",
            )
    value = result["value"]
    _require(
        _is_number(value) and math.isfinite(value),
        f"{name}: 'value' must be a finite number, got {value!r}; do not record undefined metrics (NaN).",
    )
    if "threshold" in result:
        threshold = result["threshold"]
        _require(
            _is_number(threshold) and 0.0 <= threshold <= 1.0,
            f"{name}: 'threshold' is a probability and must be in [0, 1], got {threshold!r}.",
        )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
