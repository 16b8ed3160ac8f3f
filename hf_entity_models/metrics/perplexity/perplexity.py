"""Corpus perplexity from summed negative log-likelihoods, as an ``evaluate`` metric.

A thin ``evaluate.Metric`` around
:func:`hf_entity_models.tasks.language_modeling.metrics.perplexity_from_loss`: this file adds up the
rows ``evaluate`` collected and passes the token-weighted mean to that function. Load it offline with
``evaluate.load(hf_entity_models.metrics.metric_path("perplexity"))``.
"""

import math
import numbers
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import datasets
import evaluate

from hf_entity_models.tasks.language_modeling.metrics import perplexity_from_loss

_CITATION = """\
@article{jelinek1977perplexity,
    title = "Perplexity---a measure of the difficulty of speech recognition tasks",
    author = "Jelinek, Fred and Mercer, Robert L. and Bahl, Lalit R. and Baker, James K.",
    journal = "The Journal of the Acoustical Society of America",
    volume = "62",
    number = "S1",
    pages = "S63--S63",
    year = "1977",
    doi = "10.1121/1.2016299",
}
"""

_DESCRIPTION = """\
Perplexity of a causal language model over a corpus: the exponential of the mean negative
log-likelihood per predicted token,

    perplexity = exp( sum_i nll_i / sum_i n_i )

where nll_i is the negative log-likelihood, in nats (natural logarithm, base e), summed over the n_i
predicted tokens of row i. The base matters: a loss in bits (log base 2) would need 2 ** (bits per
token) instead; every loss in this package, and torch's cross_entropy, is in nats. Lower is better; 1.0
is a model certain of every token, and a uniform guess over a vocabulary of V types scores V.

A row is any group of tokens: one sequence, or one evaluation batch (its mean loss times its number of
predicted tokens). Weighting by tokens gives the perplexity of the whole corpus; exp(Trainer's
eval_loss) is instead the exponential of an average of per-batch mean losses, which differs when
batches hold different numbers of tokens. The exponential is taken by
hf_entity_models.tasks.language_modeling.metrics.perplexity_from_loss.
"""

_KWARGS_DESCRIPTION = """
Computes corpus perplexity from per-row summed negative log-likelihoods (nats) and token counts.

Args:
    negative_log_likelihood (`list` of `float`): For each row (a sequence or a batch), the negative
        log-likelihood in nats summed over its predicted tokens: -sum_t ln p(token_t | tokens before t).
        With our causal-LM models and collator (labels = input_ids with -100 on padding, shifted inside
        the model), that is `F.cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:],
        ignore_index=-100, reduction="none").sum(dim=1)` per sequence, or `outputs.loss.item() *
        num_tokens` per batch (the models' loss is the mean over predicted tokens).
    num_tokens (`list` of `int`): For each row, the number of predicted tokens the sum covers, e.g.
        `(labels[:, 1:] != -100).sum(dim=1)` (the first token of a sequence is never predicted).

Returns:
    A dict:
        - **perplexity** (`float`): exp(total nll / total tokens); inf if the exponential overflows.
        - **nll_per_token** (`float`): total nll / total tokens, in nats (the mean cross-entropy).
        - **num_tokens** (`int`): total predicted tokens.

Raises:
    ValueError: If an input is missing or the two differ in length, a negative log-likelihood is not a
        number or is negative, NaN or infinite, a token count is not a whole number >= 0, a row of 0
        tokens has a non-zero sum, or there are no tokens at all. Values are checked as given (numpy
        arrays and torch tensors are accepted), never silently cast.

Examples:
    >>> import math
    >>> import evaluate
    >>> from hf_entity_models.metrics import metric_path
    >>> perplexity = evaluate.load(metric_path("perplexity"))
    >>> results = perplexity.compute(negative_log_likelihood=[3.0, 9.0], num_tokens=[2, 4])
    >>> results["nll_per_token"], results["num_tokens"]
    (2.0, 6)
    >>> round(results["perplexity"], 4) == round(math.exp(2.0), 4)
    True
"""


def _values(values: Any, name: str) -> list[Any]:
    if values is None:
        raise ValueError(
            f"{name} is missing: perplexity needs negative_log_likelihood=[...] (summed nats per row) and "
            "num_tokens=[...] (predicted tokens per row), one value per row each."
        )
    if hasattr(values, "tolist"):
        values = values.tolist()  # numpy arrays and torch tensors, to Python numbers
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a list with one number per row, got a {type(values).__name__}.")
    return list(values)


def _number(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return value.item()  # numpy / torch scalars
    return value


def _checked_nll(value: Any, index: int) -> float:
    value = _number(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"negative_log_likelihood[{index}] must be a number (the row's summed -ln p, in nats), got {value!r}"
            + ("; sum each sequence's token losses first." if isinstance(value, (list, tuple)) else ".")
        )
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"negative_log_likelihood[{index}] is {value}: it must be a finite sum of -ln p, which is >= 0. "
            "NaN or inf means the model diverged; a negative value is a log-likelihood that was not negated."
        )
    return value


def _checked_count(value: Any, index: int) -> int:
    value = _number(value)
    # Whole floats are accepted (a float tensor's sum); Arrow would silently truncate 2.5 to 2.
    whole = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < 0:
        raise ValueError(f"num_tokens[{index}] must be a whole number >= 0 (predicted tokens), got {value!r}.")
    return int(value)


def _checked_batch(negative_log_likelihood: Any, num_tokens: Any) -> tuple[list[float], list[int]]:
    nll_values = _values(negative_log_likelihood, "negative_log_likelihood")
    count_values = _values(num_tokens, "num_tokens")
    if len(nll_values) != len(count_values):
        raise ValueError(
            f"Mismatch in the number of negative_log_likelihood ({len(nll_values)}) and num_tokens "
            f"({len(count_values)}): pass one sum and one token count per row."
        )
    nll_values = [_checked_nll(value, index) for index, value in enumerate(nll_values)]
    count_values = [_checked_count(value, index) for index, value in enumerate(count_values)]
    for index, (nll, count) in enumerate(zip(nll_values, count_values)):
        if count == 0 and nll != 0:
            raise ValueError(
                f"Row {index} has num_tokens 0 but negative_log_likelihood {nll}: a sum over no tokens is 0; "
                "check that the counts and the sums cover the same tokens."
            )
    return nll_values, count_values


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Perplexity(evaluate.Metric):
    """Corpus perplexity, exp(total negative log-likelihood in nats / total predicted tokens)."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "negative_log_likelihood": datasets.Value("float64"),
                    "num_tokens": datasets.Value("int64"),
                }
            ),
            reference_urls=["https://en.wikipedia.org/wiki/Perplexity"],
        )

    def add_batch(self, *, negative_log_likelihood: Any = None, num_tokens: Any = None, **kwargs: Any) -> None:
        """Adds rows (summed nats, token count); invalid values raise ValueError here, before Arrow casts them."""
        negative_log_likelihood, num_tokens = _checked_batch(negative_log_likelihood, num_tokens)
        super().add_batch(negative_log_likelihood=negative_log_likelihood, num_tokens=num_tokens, **kwargs)

    def add(self, *, negative_log_likelihood: Any = None, num_tokens: Any = None, **kwargs: Any) -> None:
        """Adds one row (summed nats, token count); invalid values raise ValueError here."""
        nll_values, count_values = _checked_batch(
            None if negative_log_likelihood is None else [negative_log_likelihood],
            None if num_tokens is None else [num_tokens],
        )
        super().add(negative_log_likelihood=nll_values[0], num_tokens=count_values[0], **kwargs)

    def _compute(self, negative_log_likelihood: list[float], num_tokens: list[int]) -> dict[str, Any]:
        total_tokens = int(sum(num_tokens))
        if total_tokens == 0:
            raise ValueError(
                "There are no tokens to compute a perplexity over (num_tokens sums to 0); "
                "check that the labels are not all -100."
            )
        nll_per_token = math.fsum(negative_log_likelihood) / total_tokens
        return {
            "perplexity": perplexity_from_loss(nll_per_token),
            "nll_per_token": nll_per_token,
            "num_tokens": total_tokens,
        }
