"""CoNLL-2012 coreference scores (MUC, B-cubed, CEAF-m, CEAF-e, BLANC, LEA, CoNLL F1) as an ``evaluate`` metric.

A thin ``evaluate.Metric`` around :func:`hf_entity_models.tasks.coreference.conll_metrics.score_coreference`, the
package's re-implementation of the CoNLL-2012 reference scorer (v8.01), tested on every case of that scorer's own
test suite: this file only checks the rows ``evaluate`` collects and turns them into that function's inputs. Two
configurations, because ``evaluate`` fixes a metric's input features when it is loaded:

* ``"default"``: one row per document, its clusters as lists of ``[first_word, last_word]`` spans;
* ``"conll_files"``: one row per pair of CoNLL files (response, key), matched by document name and part.
"""

import numbers
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any

import datasets
import evaluate

from hf_entity_models.tasks.coreference.conll import CorefDocument
from hf_entity_models.tasks.coreference.conll_metrics import score_coreference

_CITATION = """\
@inproceedings{pradhan-etal-2014-scoring,
    title = "Scoring Coreference Partitions of Predicted Mentions: A Reference Implementation",
    author = "Pradhan, Sameer and Luo, Xiaoqiang and Recasens, Marta and Hovy, Eduard and Ng, Vincent and
              Strube, Michael",
    booktitle = "Proceedings of the 52nd Annual Meeting of the Association for Computational Linguistics
                 (Volume 2: Short Papers)",
    year = "2014",
    pages = "30--35",
    url = "https://aclanthology.org/P14-2006",
    doi = "10.3115/v1/P14-2006",
}
@inproceedings{moosavi-strube-2016-coreference,
    title = "Which Coreference Evaluation Metric Do You Trust? A Proposal for a Link-based Entity Aware Metric",
    author = "Moosavi, Nafise Sadat and Strube, Michael",
    booktitle = "Proceedings of the 54th Annual Meeting of the Association for Computational Linguistics
                 (Volume 1: Long Papers)",
    year = "2016",
    pages = "632--642",
    url = "https://aclanthology.org/P16-1060",
    doi = "10.18653/v1/P16-1060",
}
"""

_DESCRIPTION = """\
The coreference scores of the CoNLL-2011/2012 shared tasks, as the official reference scorer
(conll/reference-coreference-scorers, v8.01) computes them: MUC (Vilain et al., 1995), B-cubed (Bagga and
Baldwin, 1998), CEAF-m and CEAF-e (Luo, 2005), BLANC (Recasens and Hovy, 2011; Luo et al., 2014), and the
CoNLL F1, the mean of the MUC, B-cubed and CEAF-e F1; plus LEA (Moosavi and Strube, 2016), which that version
lacks, computed as the LEA authors' coval computes it. Every score has recall, precision and F1, in percent.

A mention is correct when a key mention has exactly the same first and last word (no partial credit). Each
metric's numerators and denominators are summed over documents before dividing, so a corpus score is not the
mean of document scores. Singleton clusters are scored (the reference scorer's behaviour and LitBank's
convention); keep_singletons=False removes them from both sides first (OntoNotes convention). A response that
repeats a key-matched mention has the repeat removed; more than 10 repeats raise an error, as the reference
scorer refuses to score them.

This metric calls hf_entity_models.tasks.coreference.conll_metrics.score_coreference; see that module for every
rule (duplicates, BLANC's special cases).
"""

_KWARGS_DESCRIPTION = """
Scores predicted coreference clusters against gold clusters with the CoNLL-2012 metrics.

Args:
    predictions: The system's clusters. Configuration "default": one item per document, a list of clusters, each
        cluster a list of mentions `[first_word, last_word]` (word indices of the document, last word inclusive);
        a document may have no cluster. Configuration "conll_files": one item per CoNLL file (a `str` path, the
        coreference in the last column).
    references: The gold clusters, in the same form. "default": one document per prediction, in the same order
        (documents are paired by position). "conll_files": the key files; documents of all files are matched by
        (name, part), a key document without a response document is scored against an empty response, and a
        response document without a key document raises.
    keep_singletons (`bool`, optional, default True): score clusters of one mention; False removes them from both
        sides first.
    check_words (`bool`, optional, default True): "conll_files": refuse a response document whose words differ
        from its key document's (a response of another text); False scores it by word position, as the reference
        scorer does (its own test files rename the words of invented mentions).

Returns:
    A dict: "muc", "bcub", "ceafm", "ceafe", "blanc" and "lea", each `{"recall": float, "precision": float,
    "f1": float}`, and "conll_f1" (`float`), all in percent.

Raises:
    ValueError: If a document is not a list of clusters of `[first, last]` int pairs with 0 <= first <= last <=
        999999 (a document of at most a million words), predictions and references differ in length, there is
        nothing to score, or score_coreference refuses the input (e.g. more than 10 repeated mentions, a response
        document without a key document, or one of other words than its key document).

Examples:
    >>> import evaluate
    >>> from hf_entity_models.metrics import metric_path
    >>> coreference = evaluate.load(metric_path("coreference"))
    >>> results = coreference.compute(
    ...     predictions=[[[[0, 0], [4, 4], [7, 7]]]],
    ...     references=[[[[0, 0], [4, 4]], [[2, 2], [7, 7]]]],
    ... )
    >>> results["muc"], round(results["conll_f1"], 2)
    ({'recall': 50.0, 'precision': 50.0, 'f1': 50.0}, 54.05)
    >>> files = evaluate.load(metric_path("coreference"), "conll_files")
    >>> files.compute(predictions=["response.conll"], references=["key.conll"])["conll_f1"]  # doctest: +SKIP
    73.76...
"""

_CONFIGURATIONS = ("default", "conll_files")
# The largest word index of configuration "default". Its documents have no words, only spans, so each is scored as a
# document as long as its largest index: an index must be bounded, or a typo (a character offset, 10**12) would ask
# for terabytes. A million words is longer than any book (War and Peace: about 590,000).
MAX_WORD_INDEX = 999_999


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _rows(values: Any, name: str) -> list[Any]:
    if values is None:
        raise ValueError(f"{name} is missing: pass predictions and references (one item per document or file).")
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise ValueError(f"{name} must be a list with one item per document or file, got a {type(values).__name__}.")
    return list(values)


def _checked_clusters(document: Any, where: str) -> list[list[list[int]]]:
    if isinstance(document, (str, bytes, Mapping)) or not isinstance(document, Iterable):
        raise ValueError(f"{where} must be a list of clusters (lists of [first_word, last_word]), got {document!r}.")
    clusters = []
    for index, cluster in enumerate(document):
        if isinstance(cluster, (str, bytes, Mapping)) or not isinstance(cluster, Iterable):
            raise ValueError(f"{where}[{index}] must be a cluster: a list of [first_word, last_word], got {cluster!r}.")
        mentions = []
        for number, mention in enumerate(cluster):
            span = list(mention) if isinstance(mention, Iterable) and not isinstance(mention, (str, bytes)) else None
            if span is None or len(span) != 2 or not all(_is_int(value) for value in span):
                raise ValueError(
                    f"{where}[{index}][{number}] must be a mention [first_word, last_word] (two ints), got {mention!r}."
                )
            if not 0 <= span[0] <= span[1]:
                raise ValueError(
                    f"{where}[{index}][{number}] = {span}: need 0 <= first_word <= last_word (last word inclusive)."
                )
            if span[1] > MAX_WORD_INDEX:
                raise ValueError(
                    f"{where}[{index}][{number}] = {span}: word index {span[1]} is past the limit of {MAX_WORD_INDEX} "
                    f"(documents of at most {MAX_WORD_INDEX + 1:,} words: each document is as long as its largest "
                    "index); pass word indices, not character offsets, or score CoNLL files with the 'conll_files' "
                    "configuration."
                )
            mentions.append([int(span[0]), int(span[1])])
        clusters.append(mentions)
    return clusters


def _checked_batch(predictions: Any, references: Any, configuration: str) -> tuple[list[Any], list[Any]]:
    prediction_rows, reference_rows = _rows(predictions, "predictions"), _rows(references, "references")
    if configuration == "conll_files":
        for name, rows in (("predictions", prediction_rows), ("references", reference_rows)):
            for index, row in enumerate(rows):
                if not isinstance(row, str) or not row:
                    raise ValueError(f"{name}[{index}] must be the path of a CoNLL file (a str), got {row!r}.")
        return prediction_rows, reference_rows
    if len(prediction_rows) != len(reference_rows):
        raise ValueError(
            f"Mismatch in the number of predictions ({len(prediction_rows)}) and references ({len(reference_rows)}): "
            "pass one cluster list per document on both sides (an empty list for a document without clusters)."
        )
    return (
        [_checked_clusters(row, f"predictions[{index}]") for index, row in enumerate(prediction_rows)],
        [_checked_clusters(row, f"references[{index}]") for index, row in enumerate(reference_rows)],
    )


def _documents(predictions: list[Any], references: list[Any]) -> tuple[list[CorefDocument], list[CorefDocument]]:
    keys, responses = [], []
    for index, (predicted, gold) in enumerate(zip(predictions, references)):
        ends = [end for clusters in (predicted, gold) for cluster in clusters for _, end in cluster]
        words = ["_"] * (max(ends) + 1 if ends else 1)
        for clusters, documents in ((gold, keys), (predicted, responses)):
            mentions = [(start, end, number) for number, cluster in enumerate(clusters) for start, end in cluster]
            documents.append(CorefDocument(f"document {index}", 0, words, mentions))
    return keys, responses


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Coreference(evaluate.Metric):
    """CoNLL-2012 MUC, B-cubed, CEAF-m, CEAF-e, BLANC, LEA and CoNLL F1: configuration "default" (clusters of word
    spans per document) or "conll_files" (paths of CoNLL files)."""

    @property
    def configuration(self) -> str:
        """``"default"`` or ``"conll_files"``, from the configuration name the metric was loaded with."""
        if self.config_name not in _CONFIGURATIONS:
            raise ValueError(
                f"Unknown configuration {self.config_name!r} for the coreference metric: use "
                'evaluate.load(metric_path("coreference")) for clusters of word spans or '
                'evaluate.load(metric_path("coreference"), "conll_files") for CoNLL file paths.'
            )
        return self.config_name

    def _info(self) -> evaluate.MetricInfo:
        if self.configuration == "conll_files":
            feature = datasets.Value("string")
        else:
            feature = datasets.Sequence(datasets.Sequence(datasets.Sequence(datasets.Value("int64"))))
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": feature, "references": feature}),
            homepage="https://github.com/conll/reference-coreference-scorers",
            reference_urls=[
                "https://aclanthology.org/P14-2006",
                "https://github.com/conll/reference-coreference-scorers",
                "https://github.com/ns-moosavi/coval",
            ],
        )

    def add_batch(self, *, predictions: Any = None, references: Any = None, **kwargs: Any) -> None:
        """Adds documents (or files); see the class docstring for their format. Invalid rows raise ValueError here."""
        predictions, references = _checked_batch(predictions, references, self.configuration)
        super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction: Any = None, reference: Any = None, **kwargs: Any) -> None:
        """Adds one document (or file); see the class docstring for its format."""
        predictions, references = _checked_batch(
            None if prediction is None else [prediction], None if reference is None else [reference], self.configuration
        )
        super().add(prediction=predictions[0], reference=references[0], **kwargs)

    def _compute(
        self, predictions: list[Any], references: list[Any], keep_singletons: bool = True, check_words: bool = True
    ) -> dict[str, Any]:
        if len(references) == 0:
            raise ValueError("No documents to score: pass at least one prediction and reference.")
        if self.configuration == "conll_files":
            return score_coreference(
                list(references), list(predictions), keep_singletons=keep_singletons, check_words=check_words
            )
        keys, responses = _documents(predictions, references)
        return score_coreference(keys, responses, keep_singletons=keep_singletons)
