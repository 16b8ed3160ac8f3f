"""CoNLL-2012 coreference metrics: MUC, B-cubed, CEAF-m, CEAF-e, BLANC, LEA and the CoNLL F1.

`score_coreference` scores a response (system output) against a key (gold) the way the official CoNLL-2011/2012
reference scorer does (conll/reference-coreference-scorers, ``scorer.pl``, version 8.01, Pradhan et al., 2014), and
adds LEA (Moosavi and Strube, 2016), which that version lacks, computed as the LEA authors' ``coval`` computes it.
The reference scorer's own test suite (every case of ``test/CorefMetricTestConfig.pm``) is the test of this module
(tests/test_conll_metrics.py), and so are the LEA cases of coval's ``unittests.py``.

How the reference scorer scores, and so how this module does:

* Mentions are matched exactly: a response mention is correct when a key mention of the same document has the same
  first and last word. Nothing else (heads, partial overlap) counts.
* Per document, the metric's recall and precision numerators and denominators are computed; over a corpus they are
  SUMMED, and recall = numerator / denominator (0 when the denominator is 0), F1 = 2PR / (P + R). A corpus score is
  therefore not the mean of the documents' scores.
* B-cubed, CEAF-m, CEAF-e, BLANC and LEA score the key and response clusters as they are (twinless mentions, i.e.
  mentions of one side only, included: the "v6+" metrics). MUC counts links in the same clusters (a missing key
  mention costs recall, an invented one precision).
* CEAF aligns key and response clusters one to one with the Kuhn-Munkres algorithm, maximising the summed similarity
  (``scipy.optimize.linear_sum_assignment``); CEAF-m's similarity is the number of shared mentions, CEAF-e's
  ``2 |K & R| / (|K| + |R|)``. Its denominators are the numbers of mentions (m) or clusters (e).
* BLANC (Luo et al., 2014) counts coreference links (mention pairs in one cluster) and non-coreference links (pairs
  in two clusters) of key and response; its corpus score sums the four link counts over documents, then averages
  the coreference and non-coreference recall, precision and F1 (only the non-coreference ones when the key has no
  coreference link, only the coreference ones when it has no non-coreference link).
* ``conll_f1`` is the mean of the MUC, B-cubed and CEAF-e F1, the CoNLL-2012 shared task's ranking score.
* Duplicates. A response mention that repeats a key-matched mention already seen (the same span again, in the same
  or another cluster) is removed; the first occurrence stays, clusters taken in file order (the order in which the
  clusters first appear, reading the words in order). The reference refuses to score more than 10 such repeats
  (``MAX_REPEATED_RESPONSE_MENTIONS``; here a ValueError). A twinless response mention repeated is kept twice, and
  a key mention repeated is kept (both as the reference does: each occurrence counts in the cluster sizes, and a key
  span in two clusters belongs to the later one where a metric looks its cluster up).
* Singletons (clusters of one mention) are scored, as the reference scorer does; ``keep_singletons=False`` removes
  them from key and response first (the CoNLL-2012 / OntoNotes convention, which has no singletons in the key).

Scores are percentages (0-100), as the reference scorer prints them (it prints them truncated to two decimals;
these are not rounded).

Example:
    >>> from hf_entity_models.tasks.coreference.conll import CorefDocument
    >>> key = [CorefDocument("doc", 0, ["Ann", "saw", "her", "cat"], [(0, 0, 1), (2, 2, 1), (3, 3, 2)])]
    >>> response = [CorefDocument("doc", 0, ["Ann", "saw", "her", "cat"], [(0, 0, 5), (2, 2, 5)])]
    >>> scores = score_coreference(key, response)
    >>> scores["muc"]
    {'recall': 100.0, 'precision': 100.0, 'f1': 100.0}
    >>> round(scores["bcub"]["recall"], 2), scores["bcub"]["precision"]
    (66.67, 100.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse
from scipy.optimize import linear_sum_assignment

from .conll import UNKNOWN_WORD, CorefDocument, read_conll_coreference

__all__ = [
    "CONLL_METRICS",
    "MAX_REPEATED_RESPONSE_MENTIONS",
    "score_coreference",
]

CONLL_METRICS: tuple[str, ...] = ("muc", "bcub", "ceafm", "ceafe", "blanc", "lea")
"""The metrics `score_coreference` returns, each with recall, precision and F1 (besides ``conll_f1``)."""

MAX_REPEATED_RESPONSE_MENTIONS = 10
"""The reference scorer refuses to score a response with more repeated (key-matched) mentions than this."""

_Span = tuple[int, int]
_Source = str | Path | Sequence[str | Path] | Sequence[CorefDocument] | CorefDocument

# Recall numerator / denominator, precision numerator / denominator; BLANC: coreference links' four, then
# non-coreference links' four.
_COUNTS = {"muc": 4, "bcub": 4, "ceafm": 4, "ceafe": 4, "lea": 4, "blanc": 8}


@dataclass
class _Totals:
    counts: dict[str, np.ndarray] = field(
        default_factory=lambda: {name: np.zeros(size) for name, size in _COUNTS.items()}
    )
    repeated_mentions: list[tuple[str, int]] = field(default_factory=list)


def score_coreference(
    key: _Source, response: _Source, keep_singletons: bool = True, check_words: bool = True
) -> dict[str, dict[str, float] | float]:
    """Scores coreference clusters as the CoNLL-2012 reference scorer (v8.01) does, plus LEA.

    Documents are matched by (name, part). A key document without a response document is scored against an empty
    response (no mention), as the reference scorer does: it costs recall. Mentions are matched exactly by (first
    word, last word). Numerators and denominators are summed over documents (see the module docstring for every
    rule, duplicates included).

    Args:
        key: The gold clusters: a CoNLL file, a folder of them, a sequence of files and folders (read with
            `read_conll_coreference`), or `CorefDocument` objects (one or a sequence).
        response: The system's clusters, in any of the same forms. It may hold fewer documents than the key.
        keep_singletons: Score clusters of one mention (True, the reference scorer's behaviour and LitBank's
            convention). False removes them from key and response before scoring (OntoNotes / CoNLL-2012, whose key
            has none). A cluster whose mentions all have the same span counts as a singleton.
        check_words: Refuse a response document whose words differ from its key document's (True): mentions are
            word indices, so a response of another text would be scored as if it were of the key's. The reference
            scorer does not compare words; its own test files name the words of invented mentions differently in
            key and response (``jnk`` / ``x``), and False scores such files as it does. A side whose words are all
            ``"_"`` (the two-column layout, which has none) is compared by its number of words only.

    Returns:
        ``{"muc": {"recall": r, "precision": p, "f1": f}, "bcub": {...}, "ceafm": {...}, "ceafe": {...},
        "blanc": {...}, "lea": {...}, "conll_f1": f}``, percentages (0-100); ``conll_f1`` is the mean of the MUC,
        B-cubed and CEAF-e F1.

    Raises:
        ValueError: If the key has no document, two documents of one side have the same (name, part), a response
            document has no key document, a key and a response document of one (name, part) differ in their number of
            words or (with ``check_words``) in a word, or the response repeats more than
            `MAX_REPEATED_RESPONSE_MENTIONS` key-matched mentions (the reference scorer refuses to score it). Reading
            files raises what `read_conll_coreference` raises.
        TypeError: If ``key`` or ``response`` is none of the accepted forms, or ``keep_singletons`` not a bool.

    Example:
        >>> from hf_entity_models.tasks.coreference.conll import CorefDocument
        >>> words = ["Ann", "met", "Bo", ".", "She", "smiled", "at", "him"]
        >>> key = CorefDocument("story", 0, words, [(0, 0, 1), (4, 4, 1), (2, 2, 2), (7, 7, 2)])
        >>> response = CorefDocument("story", 0, words, [(0, 0, 1), (4, 4, 1), (7, 7, 1)])
        >>> scores = score_coreference([key], [response])
        >>> scores["muc"]["recall"], scores["muc"]["precision"], round(scores["conll_f1"], 2)
        (50.0, 50.0, 54.05)
        >>> score_coreference([key], [])["muc"]["recall"]  # no response document: an empty response
        0.0
    """
    for name, value in (("keep_singletons", keep_singletons), ("check_words", check_words)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}.")
    key_documents = _documents_by_name(key, "key")
    if not key_documents:
        raise ValueError("The key holds no document: pass the gold CoNLL file(s) or CorefDocument objects as key.")
    response_documents = _documents_by_name(response, "response")
    unknown = [name for name in response_documents if name not in key_documents]
    if unknown:
        shown = ", ".join(f"{name!r} part {part}" for name, part in unknown[:5])
        raise ValueError(
            f"{len(unknown)} response document(s) have no key document: {shown}"
            f"{' ...' if len(unknown) > 5 else ''}. Documents are matched by (name, part): check that the response "
            f"was written for this key (key documents: {len(key_documents)})."
        )
    totals = _Totals()
    for name, key_document in key_documents.items():
        response_document = response_documents.get(name)
        if response_document is not None:
            _check_same_words(key_document, response_document, check_words)
        _score_document(key_document, response_document, keep_singletons, totals)
    repeated = sum(count for _, count in totals.repeated_mentions)
    if repeated > MAX_REPEATED_RESPONSE_MENTIONS:
        shown = ", ".join(f"{label} ({count})" for label, count in totals.repeated_mentions[:5])
        raise ValueError(
            f"The response repeats {repeated} mentions of the key (the same span twice, in one cluster or two), more "
            f"than the {MAX_REPEATED_RESPONSE_MENTIONS} the reference scorer accepts: {shown}. Give every mention "
            "once, in one cluster."
        )
    return _scores(totals.counts)


# ------------------------------------------------------------------------------------------------ inputs
def _check_same_words(key: CorefDocument, response: CorefDocument, check_words: bool) -> None:
    """Refuse a response of another text than its key: mentions are word indices, so a response of other words (of
    the same number) would score as if it were of the key's. A side without words (every word `UNKNOWN_WORD`, the
    two-column layout of the reference scorer's test files), or `check_words` False, checks the number alone."""
    if len(response.words) != len(key.words):
        raise ValueError(
            f"Document {key.name!r} part {key.part}: the key has {len(key.words)} words ({key.label}) but the "
            f"response {len(response.words)} ({response.label}); mentions are word indices, so both must tokenise "
            "the document identically."
        )
    if not check_words or key.words == response.words or not _has_words(key) or not _has_words(response):
        return
    index = next(i for i, (mine, theirs) in enumerate(zip(key.words, response.words)) if mine != theirs)
    raise ValueError(
        f"Document {key.name!r} part {key.part}: word {index} is {key.words[index]!r} in the key but "
        f"{response.words[index]!r} in the response ({key.label}; {response.label}); mentions are word indices into "
        "one text, so score the response against the key it was made from."
    )


def _has_words(document: CorefDocument) -> bool:
    return any(word != UNKNOWN_WORD for word in document.words)


def _documents_by_name(source: _Source, side: str) -> dict[tuple[str, int], CorefDocument]:
    if isinstance(source, CorefDocument):
        documents = [source]
    elif isinstance(source, (str, Path)):
        documents = read_conll_coreference(source)
    elif isinstance(source, Sequence) and all(isinstance(item, CorefDocument) for item in source):
        documents = list(source)  # also an empty sequence: no document
    elif isinstance(source, Sequence) and all(isinstance(item, (str, Path)) for item in source):
        documents = read_conll_coreference(list(source))
    else:
        raise TypeError(
            f"The {side} must be a CoNLL file, a folder, a sequence of paths, or CorefDocument objects (not a mix); "
            f"got {type(source).__name__}."
        )
    return documents_by_name(documents, side)


def documents_by_name(documents: Sequence[CorefDocument], side: str) -> dict[tuple[str, int], CorefDocument]:
    """The documents by (name, part), refusing one given twice (`side` names them in the message, e.g. "key")."""
    by_name: dict[tuple[str, int], CorefDocument] = {}
    for document in documents:
        name = (document.name, document.part)
        if name in by_name:
            raise ValueError(
                f"The {side} has document {document.name!r} part {document.part} twice ({by_name[name].label} and "
                f"{document.label}); every (name, part) must occur once."
            )
        by_name[name] = document
    return by_name


def _chains(document: CorefDocument | None, keep_singletons: bool) -> list[list[_Span]]:
    """The document's clusters as lists of spans, in the order the reference scorer numbers them: by the word where a
    cluster first appears; there, clusters with a one-word mention first (the scorer reads a cell's one-word mentions
    before its opening brackets), then the opens as a cell lists them (the longer mention first), then cluster id."""
    if document is None:
        return []
    clusters: dict[int, list[_Span]] = {}
    for start, end, cluster in document.mentions:
        clusters.setdefault(cluster, []).append((start, end))
    order = []
    for cluster, spans in clusters.items():
        if not keep_singletons and len(set(spans)) == 1:
            continue
        first = min(start for start, _ in spans)
        if any(start == end == first for start, end in spans):
            order.append(((first, 0, 0, cluster), spans))
        else:
            longest = max(end for start, end in spans if start == first)
            order.append(((first, 1, -longest, cluster), spans))
    return [spans for _, spans in sorted(order)]


# ------------------------------------------------------------------------------------------------ one document
@dataclass
class _Partition:
    """Clusters as mention ids: ``chain`` and ``ids`` give the cluster and mention id of every occurrence."""

    chain: np.ndarray
    ids: np.ndarray
    num_chains: int

    @property
    def sizes(self) -> np.ndarray:
        return np.bincount(self.chain, minlength=self.num_chains)

    def counts(self, num_ids: int) -> sparse.csr_matrix:
        """Cluster x mention-id occurrence counts."""
        ones = np.ones(len(self.ids))
        return sparse.csr_matrix((ones, (self.chain, self.ids)), shape=(self.num_chains, num_ids))

    def last_chain(self, num_ids: int) -> np.ndarray:
        """The last cluster holding each mention id, -1 for none (the reference scorer's ``Indexa``)."""
        index = np.full(num_ids, -1)
        np.maximum.at(index, self.ids, self.chain)
        return index


def _partition(chains: list[list[int]]) -> _Partition:
    chain = np.repeat(np.arange(len(chains)), [len(ids) for ids in chains])
    ids = np.fromiter((i for ids in chains for i in ids), dtype=np.int64, count=len(chain))
    return _Partition(chain.astype(np.int64), ids, len(chains))


def _identified(key_chains: list[list[_Span]], response_chains: list[list[_Span]]) -> tuple[list, list, int, int]:
    """Mention ids as the reference scorer's ``IdentifMentions`` gives them: a key span has one id, a response span
    the id of the equal key span (its first occurrence only; later ones are removed and counted as repeated) or an
    id of its own. Returns key chains, response chains (as ids, empty response clusters dropped), the number of ids
    and the number of repeated response mentions."""
    key_ids: dict[_Span, int] = {}
    for spans in key_chains:
        for span in spans:
            key_ids.setdefault(span, len(key_ids))
    key_chain_ids = [[key_ids[span] for span in spans] for spans in key_chains]
    assigned: set[int] = set()
    twinless: dict[_Span, int] = {}
    response_chain_ids = []
    repeated = 0
    for spans in response_chains:
        ids = []
        for span in spans:
            key_id = key_ids.get(span)
            if key_id is None:
                ids.append(twinless.setdefault(span, len(key_ids) + len(twinless)))
            elif key_id in assigned:
                repeated += 1
            else:
                assigned.add(key_id)
                ids.append(key_id)
        if ids:
            response_chain_ids.append(ids)
    return key_chain_ids, response_chain_ids, len(key_ids) + len(twinless), repeated


def _score_document(
    key_document: CorefDocument, response_document: CorefDocument | None, keep_singletons: bool, totals: _Totals
) -> None:
    key_chains, response_chains, num_ids, repeated = _identified(
        _chains(key_document, keep_singletons), _chains(response_document, keep_singletons)
    )
    if repeated:
        totals.repeated_mentions.append((key_document.label, repeated))
    key, response = _partition(key_chains), _partition(response_chains)
    key_counts, response_counts = key.counts(num_ids), response.counts(num_ids)
    key_sizes, response_sizes = key.sizes, response.sizes
    key_last, response_last = key.last_chain(num_ids), response.last_chain(num_ids)

    # shared[K, R]: distinct mentions of key cluster K in response cluster R. key_in_response[K, R]: occurrences of
    # K's mentions in R (differs from `shared` only where the key repeats a mention). found[K, R]: occurrences in R
    # of mentions whose (last) key cluster is K. by_response[K, R]: occurrences in K of mentions whose (last)
    # response cluster is R. Without duplicates all four are the same matrix.
    response_binary = (response_counts > 0).astype(np.float64)
    shared = ((key_counts > 0).astype(np.float64) @ response_binary.T).tocoo()
    key_in_response = (key_counts @ response_binary.T).tocoo()
    found = (response_counts @ _one_hot(key_last, key.num_chains)).T.tocoo()
    by_response = (key_counts @ _one_hot(response_last, response.num_chains)).tocoo()

    counts = totals.counts
    counts["muc"] += _muc(found, key_sizes, response_sizes)
    counts["bcub"] += _b_cubed(shared, found, key_sizes, response_sizes)
    counts["ceafm"] += _ceaf(key_in_response, key_sizes, response_sizes, entity_based=False)
    counts["ceafe"] += _ceaf(key_in_response, key_sizes, response_sizes, entity_based=True)
    counts["lea"] += _lea(by_response, found, key, response, key_last, response_last, key_sizes, response_sizes)
    if _has_repeats(key) or _has_repeats(response):
        counts["blanc"] += _blanc_from_links(key, response, num_ids)
    else:
        counts["blanc"] += _blanc(shared, key_sizes, response_sizes)


def _one_hot(index: np.ndarray, width: int) -> sparse.csr_matrix:
    rows = np.flatnonzero(index >= 0)
    return sparse.csr_matrix((np.ones(len(rows)), (rows, index[rows])), shape=(len(index), width))


def _has_repeats(partition: _Partition) -> bool:
    return len(np.unique(partition.ids)) != len(partition.ids)


def _pairs(values: np.ndarray) -> np.ndarray:
    return values * (values - 1) / 2


# ------------------------------------------------------------------------------------------------ the metrics
def _muc(found: sparse.coo_matrix, key_sizes: np.ndarray, response_sizes: np.ndarray) -> np.ndarray:
    # A response cluster's correct links: its key-matched mentions minus the key clusters they fall into.
    correct = float(np.sum(found.data[found.data > 0] - 1))
    key_links = float(np.sum(key_sizes[key_sizes > 0] - 1))
    response_links = float(np.sum(response_sizes[response_sizes > 0] - 1))
    return np.array([correct, key_links, correct, response_links])


def _b_cubed(
    shared: sparse.coo_matrix, found: sparse.coo_matrix, key_sizes: np.ndarray, response_sizes: np.ndarray
) -> np.ndarray:
    # Every response occurrence m of key cluster K in response cluster R adds |K & R| / |K| to recall and
    # |K & R| / |R| to precision (the reference scorer's loop), i.e. found[K, R] * shared[K, R] / size.
    products = (found.tocsr().multiply(shared.tocsr())).tocoo()
    recall = float(np.sum(products.data / key_sizes[products.row]))
    precision = float(np.sum(products.data / response_sizes[products.col]))
    return np.array([recall, key_sizes.sum(), precision, response_sizes.sum()], dtype=np.float64)


def _ceaf(
    overlap: sparse.coo_matrix, key_sizes: np.ndarray, response_sizes: np.ndarray, entity_based: bool
) -> np.ndarray:
    if entity_based:
        denominators = (float(np.count_nonzero(key_sizes)), float(np.count_nonzero(response_sizes)))
    else:
        denominators = (float(key_sizes.sum()), float(response_sizes.sum()))
    mask = overlap.data > 0
    rows, columns, values = overlap.row[mask], overlap.col[mask], overlap.data[mask]
    if not len(values):
        return np.array([0.0, denominators[0], 0.0, denominators[1]])
    if entity_based:
        values = 2 * values / (key_sizes[rows] + response_sizes[columns])
    # Clusters that share no mention score 0 with every partner: align only those that share some.
    row_ids, row_index = np.unique(rows, return_inverse=True)
    column_ids, column_index = np.unique(columns, return_inverse=True)
    similarity = np.zeros((len(row_ids), len(column_ids)))
    similarity[row_index, column_index] = values
    aligned_rows, aligned_columns = linear_sum_assignment(similarity, maximize=True)
    total = float(similarity[aligned_rows, aligned_columns].sum())
    return np.array([total, denominators[0], total, denominators[1]])


def _lea(
    by_response: sparse.coo_matrix,
    found: sparse.coo_matrix,
    key: _Partition,
    response: _Partition,
    key_last: np.ndarray,
    response_last: np.ndarray,
    key_sizes: np.ndarray,
    response_sizes: np.ndarray,
) -> np.ndarray:
    recall = _lea_side(by_response, key, response_last, key_sizes, response_sizes)
    precision = _lea_side(found.T.tocoo(), response, key_last, response_sizes, key_sizes)
    return np.array([recall, key_sizes.sum(), precision, response_sizes.sum()], dtype=np.float64)


def _lea_side(
    links: sparse.coo_matrix,
    side: _Partition,
    other_last: np.ndarray,
    sizes: np.ndarray,
    other_sizes: np.ndarray,
) -> float:
    """LEA's numerator for one side (coval's ``lea``): every cluster E of `side` adds |E| times the fraction of its
    links found in the other side's clusters; a singleton's one "link" is found when its mention is a singleton of
    the other side too."""
    found_links = np.bincount(links.row, weights=_pairs(links.data), minlength=side.num_chains)
    total = float(np.sum(sizes[sizes > 1] * found_links[sizes > 1] / _pairs(sizes[sizes > 1])))
    singletons = np.flatnonzero(sizes == 1)
    if len(singletons):
        # Each singleton cluster has exactly one occurrence: its mention id.
        mention = np.empty(side.num_chains, dtype=np.int64)
        mention[side.chain] = side.ids
        partner = other_last[mention[singletons]]
        partner = partner[partner >= 0]
        total += float(np.count_nonzero(other_sizes[partner] == 1))
    return total


def _blanc(shared: sparse.coo_matrix, key_sizes: np.ndarray, response_sizes: np.ndarray) -> np.ndarray:
    """BLANC's link counts when no mention occurs twice on a side (closed forms of the reference's link sets)."""
    key_coreference = _pairs(key_sizes).sum()
    response_coreference = _pairs(response_sizes).sum()
    key_non_coreference = _pairs(key_sizes.sum()) - key_coreference
    response_non_coreference = _pairs(response_sizes.sum()) - response_coreference
    both_coreference = _pairs(shared.data).sum()
    # Pairs of mentions found on both sides that are in two key clusters and in two response clusters.
    shared_csr = shared.tocsr()
    in_both = shared.data.sum()
    both_non_coreference = (
        _pairs(in_both)
        - _pairs(np.asarray(shared_csr.sum(axis=1)).ravel()).sum()
        - _pairs(np.asarray(shared_csr.sum(axis=0)).ravel()).sum()
        + both_coreference
    )
    return np.array(
        [
            both_coreference, key_coreference, both_coreference, response_coreference,
            both_non_coreference, key_non_coreference, both_non_coreference, response_non_coreference,
        ],
        dtype=np.float64,
    )


def _link_codes(partition: _Partition, num_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference scorer's link sets, literally: every pair of occurrences in one cluster is a coreference link,
    every pair in two clusters a non-coreference link, each link the unordered pair of mention ids (a mention that
    occurs twice links to itself), encoded ``low * num_ids + high`` and deduplicated."""
    coreference, non_coreference = [], []
    chain, ids = partition.chain, partition.ids
    for position in range(len(ids) - 1):
        later_ids, later_chains = ids[position + 1 :], chain[position + 1 :]
        low, high = np.minimum(ids[position], later_ids), np.maximum(ids[position], later_ids)
        codes = low * num_ids + high
        same = later_chains == chain[position]
        coreference.append(codes[same])
        non_coreference.append(codes[~same])
    empty = np.zeros(0, dtype=np.int64)
    return (
        np.unique(np.concatenate(coreference)) if coreference else empty,
        np.unique(np.concatenate(non_coreference)) if non_coreference else empty,
    )


def _blanc_from_links(key: _Partition, response: _Partition, num_ids: int) -> np.ndarray:
    """BLANC's link counts from the link sets themselves, for documents where a mention occurs twice on a side."""
    key_coreference, key_non_coreference = _link_codes(key, num_ids)
    response_coreference, response_non_coreference = _link_codes(response, num_ids)
    both_coreference = len(np.intersect1d(key_coreference, response_coreference, assume_unique=True))
    both_non_coreference = len(np.intersect1d(key_non_coreference, response_non_coreference, assume_unique=True))
    return np.array(
        [
            both_coreference, len(key_coreference), both_coreference, len(response_coreference),
            both_non_coreference, len(key_non_coreference), both_non_coreference, len(response_non_coreference),
        ],
        dtype=np.float64,
    )


# ------------------------------------------------------------------------------------------------ corpus scores
def _ratio(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator else 0.0


def _f1(recall: float, precision: float) -> float:
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def _percent(recall: float, precision: float, f1: float) -> dict[str, float]:
    return {"recall": 100 * recall, "precision": 100 * precision, "f1": 100 * f1}


def _blanc_scores(counts: np.ndarray) -> dict[str, float]:
    """The reference scorer's ``ComputeBLANCFromCounts`` on the corpus's summed link counts."""
    (both_c, key_c, _, response_c, both_n, key_n, _, response_n) = counts
    recall_c, precision_c = _ratio(both_c, key_c), _ratio(both_c, response_c)
    recall_n, precision_n = _ratio(both_n, key_n), _ratio(both_n, response_n)
    f1_c, f1_n = _f1(recall_c, precision_c), _f1(recall_n, precision_n)
    if key_c == 0 and key_n == 0:
        return _percent(0.0, 0.0, 0.0)
    if key_c == 0:
        return _percent(recall_n, precision_n, f1_n)
    if key_n == 0:
        return _percent(recall_c, precision_c, f1_c)
    return _percent((recall_c + recall_n) / 2, (precision_c + precision_n) / 2, (f1_c + f1_n) / 2)


def _scores(counts: dict[str, np.ndarray]) -> dict[str, dict[str, float] | float]:
    scores: dict[str, dict[str, float] | float] = {}
    for name in CONLL_METRICS:
        if name == "blanc":
            scores[name] = _blanc_scores(counts[name])
            continue
        recall_numerator, recall_denominator, precision_numerator, precision_denominator = counts[name]
        recall = _ratio(recall_numerator, recall_denominator)
        precision = _ratio(precision_numerator, precision_denominator)
        scores[name] = _percent(recall, precision, _f1(recall, precision))
    scores["conll_f1"] = (scores["muc"]["f1"] + scores["bcub"]["f1"] + scores["ceafe"]["f1"]) / 3
    return scores
