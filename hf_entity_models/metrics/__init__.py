"""The package's metrics as local `evaluate` modules, loadable offline with ``evaluate.load(path)``.

``evaluate.load("name")`` fetches metric code from the Hub, which fails offline and runs code we do not
control. Our metrics instead ship inside the package, one folder per metric in the layout
``evaluate.load(<folder>)`` accepts::

    hf_entity_models/metrics/
        coreference/coreference.py  CoNLL-2012 coreference: MUC, B-cubed, CEAF-m, CEAF-e, BLANC, LEA, CoNLL F1
        gap/gap.py                  GAP pronoun resolution: P/R/F1 overall and per gender, bias
        perplexity/perplexity.py    corpus perplexity from summed negative log-likelihoods (nats)
        squad/squad.py              SQuAD exact match / F1: config "v1.1" (default) or "v2.0" (HasAns, NoAns,
                                    best no-answer thresholds)

Each ``<name>/<name>.py`` defines one ``evaluate.Metric`` subclass whose ``_compute`` only converts
the rows ``evaluate`` collected and calls our tested scorer in ``hf_entity_models/tasks/*/metrics.py``:
the math lives once, there. ``_info`` carries the description, citation, input description with an
example, and the ``datasets.Features`` of the inputs.

Adding a metric (e.g. ``squad``): create ``squad/__init__.py`` (empty docstring; it makes
``find_packages`` ship the folder in the wheel) and ``squad/squad.py`` defining the ``evaluate.Metric``
subclass that delegates to ``tasks/question_answering/metrics.py``. Write one import per line
(``evaluate`` reads the imports textually) and import our code absolutely (``from
hf_entity_models.tasks... import ...``, never relative: the script runs from evaluate's module cache,
outside the package). Name the class so that its snake_case is the folder name (``Squad`` ->
``squad``) and name no other ``EvaluationModule`` subclass at module level (``evaluate`` takes the first
one it finds). Check raw inputs in ``add``/``add_batch`` before Arrow casts them (Arrow turns ``"no"``
into ``True``). :func:`available_metrics` finds the folder by itself and ``tests/test_evaluate_metrics.py``
checks its layout and metadata; add the hand-computed cases there.

This module imports neither ``evaluate`` nor ``datasets`` (seconds to import): :func:`load` does, when
called.

Example:
    >>> import evaluate
    >>> from hf_entity_models.metrics import metric_path
    >>> perplexity = evaluate.load(metric_path("perplexity"))
    >>> perplexity.compute(negative_log_likelihood=[2.0, 4.0], num_tokens=[1, 2])["nll_per_token"]
    2.0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["METRICS_DIR", "available_metrics", "load", "metric_path"]

METRICS_DIR: Path = Path(__file__).resolve().parent
"""The folder holding one ``<name>/<name>.py`` folder per metric."""


def available_metrics() -> list[str]:
    """Names of the metrics shipped with the package.

    Returns:
        Sorted names of the sub-folders ``<name>/`` that hold a ``<name>.py`` module.

    Example:
        >>> "gap" in available_metrics() and "perplexity" in available_metrics()
        True
    """
    return sorted(
        folder.name
        for folder in METRICS_DIR.iterdir()
        if folder.is_dir() and (folder / f"{folder.name}.py").is_file()
    )


def metric_path(name: str) -> str:
    """The folder of one of our metrics, for ``evaluate.load``.

    Args:
        name: A metric name from :func:`available_metrics`, e.g. ``"gap"``.

    Returns:
        The absolute path of the metric's folder, as a string. It must stay absolute: ``evaluate.load``
        takes a bare relative name such as ``"gap"`` for a Hub module.

    Raises:
        ValueError: If there is no such metric; the message lists the ones there are.

    Example:
        >>> import evaluate
        >>> gap = evaluate.load(metric_path("gap"))
        >>> gap.compute(
        ...     predictions=[{"a_coref": True, "b_coref": False}],
        ...     references=[{"pronoun": "She", "a_coref": True, "b_coref": False}],
        ... )["f1"]
        1.0
    """
    names = available_metrics()
    if name not in names:
        raise ValueError(
            f"No metric named {name!r} in hf_entity_models.metrics; the available metrics are {names}. "
            "(For a Hub metric, call evaluate.load(name) directly.)"
        )
    return str(METRICS_DIR / name)


def load(name: str, **kwargs: Any) -> Any:
    """Loads one of our metrics with ``evaluate.load``, offline.

    Args:
        name: A metric name from :func:`available_metrics`, e.g. ``"perplexity"``.
        **kwargs: Passed to ``evaluate.load`` (e.g. ``experiment_id``, ``num_process``, ``process_id`` for
            distributed evaluation, or ``keep_in_memory=True``).

    Returns:
        The ``evaluate.EvaluationModule``.

    Raises:
        ValueError: If there is no such metric.

    Example:
        >>> perplexity = load("perplexity")
        >>> perplexity.compute(negative_log_likelihood=[0.0], num_tokens=[3])["perplexity"]
        1.0
    """
    path = metric_path(name)
    import evaluate  # here, not at the top: importing evaluate (and datasets) takes seconds

    return evaluate.load(path, **kwargs)
