"""Whole-document coreference (CoNLL-2012, LitBank) for the memory models: training examples and clusters.

The memory models label tokens, while CoNLL-2012 annotates word spans that may nest (``[[her] sister]``). The
bridge, in both directions:

* **Tokens from spans.** Every token belongs to the innermost gold mention that covers it (its "owner"); a
  mention's first owned token is its *anchor*. ``[[her] sister]``: "her" is owned by the inner mention and anchors
  it, "sister" anchors the outer one.
* **Training examples** (`conll_coreference_examples`): dense supervision from every mention of every entity, in
  the link-pair format the models' losses read (`LINK_SELF`, `LINK_POSITIVE`, `LINK_NEGATIVE`): a mention's anchor
  to its later owned tokens (self links, as PeTra's span-internal pairs), each anchor to its entity's previous
  anchor (or to all earlier ones, `antecedents="all"`) as positives, and to the anchors of the
  `negatives_per_mention` nearest earlier mentions of other entities as negatives; plus ``mention_targets`` (0
  outside mentions, 1 inside, 2 on the anchor of an entity's first mention) for the dense mention loss (mention
  detection and the new-entity decision). Long documents may be cut into chunks of at most `chunk_length` tokens
  at word boundaries (pairs never cross a chunk; the memory starts empty in every chunk).
* **Clusters from the memory log** (`clusters_from_memory_log`): with the model's own mention detection, a token
  is a mention when it writes the memory with at least `mention_threshold` (`mention_strength`), its entity
  follows the pipeline's rule (`token_entities`), a word takes the entity of its first such token, runs of words
  of one entity are mentions, and nesting flattened by the token labels is restored (`_nested_mentions`). With
  gold mentions, every gold mention takes the entity its anchor writes to, whatever the threshold.

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> documents = read_conll_coreference("../shared/data/litbank/conll")  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained(encoder)  # doctest: +SKIP
    >>> examples = conll_coreference_examples(documents, tokenizer, chunk_length=256)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import datasets
import numpy as np
import torch

from ...models._shared.coreference_links import (
    IGNORE_INDEX,
    LINK_NEGATIVE,
    LINK_POSITIVE,
    LINK_SELF,
    MENTION_INSIDE,
    MENTION_NEW_ENTITY,
    MENTION_OUTSIDE,
)
from .conll import CorefDocument
from .pipeline import mention_strength, token_entities

__all__ = ["clusters_from_memory_log", "conll_coreference_examples", "mention_owners"]

# Columns of `conll_coreference_examples` that are not model inputs: where each row came from.
POSITION_COLUMNS = ("document_index", "word_ids")


def mention_owners(document: CorefDocument) -> list[int]:
    """For every word, the index (into ``document.mentions``) of the innermost mention that covers it, else -1.

    Longer mentions are painted first and shorter ones over them, so a word nested in several mentions belongs to
    the shortest; of two mentions with the same span, the later one in ``document.mentions`` wins.

    Example:
        >>> document = CorefDocument("d", 0, ["her", "sister", "left"], [(0, 1, 7), (0, 0, 3)])
        >>> mention_owners(document)  # mentions are sorted: (0, 1, 7) is 0, (0, 0, 3) is 1
        [1, 0, -1]
    """
    owners = [-1] * len(document.words)
    by_length = sorted(range(len(document.mentions)), key=lambda i: -(document.mentions[i][1] - document.mentions[i][0]))
    for index in by_length:
        first, last, _ = document.mentions[index]
        owners[first : last + 1] = [index] * (last - first + 1)
    return owners


def conll_coreference_examples(
    documents: Sequence[CorefDocument],
    tokenizer: Any,
    chunk_length: int | None = None,
    negatives_per_mention: int = 5,
    antecedents: str = "nearest",
) -> datasets.Dataset:
    """Model inputs with dense coreference supervision for every document (or chunk of one).

    Args:
        documents: The documents (`read_conll_coreference`).
        tokenizer: The encoder's fast tokenizer (words are tokenized with ``is_split_into_words=True``).
        chunk_length: At most this many tokens per row, special tokens included, cut at word boundaries (None: one
            row per document; the models encode long documents in windows and carry the memory across them).
        negatives_per_mention: Earlier mentions of other entities each anchor is paired with as a negative.
        antecedents: `"nearest"`: each anchor is a positive pair with the previous mention of its entity only (a
            link says the entity survives in its cell from one mention to the next; positives to every earlier
            mention would ask a cell to survive a whole chunk and teach the memory never to overwrite: PeTra);
            `"all"`: with every earlier mention of its entity (the Referential Reader, whose loss counts every
            unlabelled pair as a negative).

    Returns:
        A `datasets.Dataset` with ``input_ids``, ``attention_mask``, ``special_tokens_mask``, ``link_pairs``,
        ``link_labels``, ``mention_targets`` and, to map predictions back, ``document_index`` (position in
        `documents`) and ``word_ids`` (the word of every token, -1 for special tokens).

    Raises:
        ValueError: If the tokenizer is not fast, `chunk_length` leaves no room for a word, a word is longer than a
            chunk, or `negatives_per_mention` is negative.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("conll_coreference_examples needs a fast tokenizer (it maps tokens to words).")
    if negatives_per_mention < 0:
        raise ValueError(f"negatives_per_mention must be >= 0, got {negatives_per_mention}.")
    if antecedents not in ("nearest", "all"):
        raise ValueError(f"antecedents must be 'nearest' or 'all', got {antecedents!r}.")
    special_count = len(tokenizer(["a"], is_split_into_words=True)["input_ids"]) - len(
        tokenizer(["a"], is_split_into_words=True, add_special_tokens=False)["input_ids"]
    )
    if chunk_length is not None and chunk_length <= special_count:
        raise ValueError(f"chunk_length must exceed the {special_count} special tokens, got {chunk_length}.")
    rows: dict[str, list] = {name: [] for name in _COLUMNS}
    for document_index, document in enumerate(documents):
        word_ids = _token_words(document.words, tokenizer)
        budget = None if chunk_length is None else chunk_length - special_count
        for start, end in _chunks(word_ids, budget, document.label):
            words = range(word_ids[start], word_ids[end - 1] + 1)
            row = _example(document, tokenizer, words, negatives_per_mention, antecedents)
            row["document_index"] = document_index
            for name in _COLUMNS:
                rows[name].append(row[name])
    return datasets.Dataset.from_dict(rows)


_COLUMNS = (
    "input_ids",
    "attention_mask",
    "special_tokens_mask",
    "link_pairs",
    "link_labels",
    "mention_targets",
    *POSITION_COLUMNS,
)


def _token_words(words: list[str], tokenizer: Any) -> list[int]:
    """The word of every token of the words, without special tokens (to place chunk boundaries)."""
    encoding = tokenizer(words, is_split_into_words=True, add_special_tokens=False, verbose=False)
    return [int(word) for word in encoding.word_ids() if word is not None]


def _chunks(word_ids: list[int], budget: int | None, label: str) -> list[tuple[int, int]]:
    """Token ranges [start, end) of at most `budget` tokens that never split a word."""
    if budget is None or len(word_ids) <= budget:
        return [(0, len(word_ids))]
    chunks, start = [], 0
    while start < len(word_ids):
        end = min(start + budget, len(word_ids))
        while end < len(word_ids) and end > start and word_ids[end] == word_ids[end - 1]:
            end -= 1  # step back to the first token of the word that would be cut
        if end == start:
            raise ValueError(f"{label}: word {word_ids[start]} has more tokens than a chunk of {budget}.")
        chunks.append((start, end))
        start = end
    return chunks


def _example(
    document: CorefDocument, tokenizer: Any, words: range, negatives_per_mention: int, antecedents: str
) -> dict[str, Any]:
    encoding = tokenizer(
        document.words[words.start : words.stop],
        is_split_into_words=True,
        return_special_tokens_mask=True,
        truncation=False,
        verbose=False,
    )
    input_ids, special = list(encoding["input_ids"]), list(encoding["special_tokens_mask"])
    positioned_words = [-1 if word is None else words.start + word for word in encoding.word_ids()]

    owners = mention_owners(document)
    token_owner = np.array([owners[word] if word >= 0 else -1 for word in positioned_words])
    anchors = _anchors(document, token_owner)
    pairs, labels = _link_pairs(anchors, negatives_per_mention, antecedents)
    mention_targets = np.where(token_owner >= 0, MENTION_INSIDE, MENTION_OUTSIDE)
    mention_targets[_first_mention_anchors(anchors)] = MENTION_NEW_ENTITY
    mention_targets[np.asarray(special, dtype=bool)] = IGNORE_INDEX
    return {
        "input_ids": input_ids,
        "attention_mask": [1] * len(input_ids),
        "special_tokens_mask": special,
        "link_pairs": pairs,
        "link_labels": labels,
        "mention_targets": mention_targets.tolist(),
        "word_ids": positioned_words,
    }


def _anchors(document: CorefDocument, token_owner: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(anchor token, cluster, owned tokens) of every mention with a token in this row, in token order."""
    anchors = []
    for mention in np.unique(token_owner[token_owner >= 0]):
        owned = np.flatnonzero(token_owner == mention)
        anchors.append((int(owned[0]), document.mentions[mention][2], owned))
    return sorted(anchors, key=lambda anchor: anchor[0])


def _first_mention_anchors(anchors: list[tuple[int, int, np.ndarray]]) -> list[int]:
    """The anchor of the first mention (in this row) of every entity: where the memory should overwrite."""
    seen: set[int] = set()
    first = []
    for token, cluster, _ in anchors:
        if cluster not in seen:
            seen.add(cluster)
            first.append(token)
    return first


def _link_pairs(
    anchors: list[tuple[int, int, np.ndarray]], negatives_per_mention: int, antecedents: str
) -> tuple[list[list[int]], list[int]]:
    """Self, positive and negative token pairs of the mentions whose tokens lie in this row."""
    pairs: list[list[int]] = []
    labels: list[int] = []
    for anchor, _, owned in anchors:
        pairs.extend([anchor, int(token)] for token in owned[1:])
        labels.extend([LINK_SELF] * (len(owned) - 1))
    anchors = [(anchor, cluster) for anchor, cluster, _ in anchors]
    for later, (anchor, cluster) in enumerate(anchors):
        others, found_antecedent = 0, False
        for earlier in range(later - 1, -1, -1):
            earlier_anchor, earlier_cluster = anchors[earlier]
            if earlier_cluster == cluster and (antecedents == "all" or not found_antecedent):
                pairs.append([earlier_anchor, anchor])
                labels.append(LINK_POSITIVE)
                found_antecedent = True
            elif earlier_cluster != cluster and others < negatives_per_mention:
                pairs.append([earlier_anchor, anchor])
                labels.append(LINK_NEGATIVE)
                others += 1
            if antecedents == "nearest" and found_antecedent and others >= negatives_per_mention:
                break
    return pairs, labels


# --------------------------------------------------------------------------------------------------- decoding
def clusters_from_memory_log(
    document: CorefDocument,
    word_ids: Sequence[int],
    overwrite_probs: torch.Tensor | np.ndarray,
    coref_probs: torch.Tensor | np.ndarray,
    mention_threshold: float = 0.5,
    gold_mentions: bool = False,
    new_entity_threshold: float | None = None,
) -> CorefDocument:
    """The entities a memory model found in one document, as a `CorefDocument` of the same words.

    Args:
        document: The document read (its gold mentions are used only with `gold_mentions=True`).
        word_ids: The word of every token of the model's input, -1 for special tokens (`conll_coreference_examples`
            with ``chunk_length=None``).
        overwrite_probs, coref_probs: `(tokens, cells)` memory log of the whole document (padding removed).
        mention_threshold: A token is a mention when its write (overwrite + coref summed over cells,
            `mention_strength`) reaches this (own mentions); it goes to the cell it writes most.
        gold_mentions: Cluster the gold mentions instead: each takes the entity its anchor (first owned token)
            writes to; a mention without a token of its own (a duplicate span) becomes a singleton.
        new_entity_threshold: How a token decides between a new entity and a cell's entity (`token_entities`):
            None, overwrite >= coref in the cell written most; a number, the overwrite share of its write reaches it.

    Returns:
        The response document: the words and header of `document`, mentions ``(first_word, last_word, entity)``.
    """
    overwrite = torch.as_tensor(np.asarray(overwrite_probs, dtype=np.float32))
    coref = torch.as_tensor(np.asarray(coref_probs, dtype=np.float32))
    word_ids = list(word_ids)
    if overwrite.shape != coref.shape or overwrite.shape[0] != len(word_ids):
        raise ValueError(
            f"{document.label}: the memory log has shapes {tuple(overwrite.shape)} / {tuple(coref.shape)} but the "
            f"input had {len(word_ids)} tokens; pass the log of the whole document without padding."
        )
    if gold_mentions:
        return _cluster_gold_mentions(document, word_ids, overwrite, coref, new_entity_threshold)
    strength = mention_strength(overwrite, coref).tolist()
    is_mention = [word >= 0 and value >= mention_threshold for word, value in zip(word_ids, strength)]
    entities = token_entities(overwrite, coref, is_mention, new_entity_threshold)
    word_entity: dict[int, int] = {}
    for word, entity in zip(word_ids, entities):
        if entity is not None and word not in word_entity:
            word_entity[word] = entity
    return document.with_mentions(_nested_mentions(document.words, word_entity))


def _nested_mentions(words: list[str], word_entity: dict[int, int]) -> list[tuple[int, int, int]]:
    """Mentions ``(first, last, entity)`` from the entity of every word, nesting restored where the token labels
    flattened it.

    A word carries one entity, the innermost mention's (as in training), so an outer mention shows as its own runs
    around or after the inner ones. In a block of mention words without a gap: an entity with several runs is one
    mention from its first run to its last (``[a man who for [his] own amusement]``), and a run that follows a
    genitive (a run ending in a possessive determiner, or a run starting with ``'s``) starts at the genitive
    (``[[her] sister]``, ``[[Sir Walter] 's daughter]``; English).
    """
    mentions = []
    for block in _contiguous_blocks(_runs_of_words(word_entity)):
        spans: dict[int, list[int]] = {}
        for index, (first, last, entity) in enumerate(block):
            if index and _follows_genitive(words, block[index - 1], first):
                first = block[index - 1][0]
            span = spans.setdefault(entity, [first, last])
            span[0], span[1] = min(span[0], first), max(span[1], last)
        mentions.extend((first, last, entity) for entity, (first, last) in spans.items())
    return mentions


_POSSESSIVES = {"his", "her", "their", "its", "my", "your", "our", "thy", "whose"}
_GENITIVE_MARKS = {"'s", "’s", "'", "’"}


def _follows_genitive(words: list[str], previous_run: tuple[int, int, int], first: int) -> bool:
    return words[previous_run[1]].lower() in _POSSESSIVES or words[first].lower() in _GENITIVE_MARKS


def _runs_of_words(word_entity: dict[int, int]) -> list[tuple[int, int, int]]:
    """Maximal runs (first word, last word, entity) of consecutive words with one entity, in order."""
    runs: list[tuple[int, int, int]] = []
    for word in sorted(word_entity):
        entity = word_entity[word]
        if runs and runs[-1][1] == word - 1 and runs[-1][2] == entity:
            runs[-1] = (runs[-1][0], word, entity)
        else:
            runs.append((word, word, entity))
    return runs


def _contiguous_blocks(runs: list[tuple[int, int, int]]) -> list[list[tuple[int, int, int]]]:
    """Runs grouped into blocks with no word outside a mention between them."""
    blocks: list[list[tuple[int, int, int]]] = []
    for run in runs:
        if blocks and blocks[-1][-1][1] == run[0] - 1:
            blocks[-1].append(run)
        else:
            blocks.append([run])
    return blocks


def _cluster_gold_mentions(
    document: CorefDocument,
    word_ids: list[int],
    overwrite: torch.Tensor,
    coref: torch.Tensor,
    new_entity_threshold: float | None,
) -> CorefDocument:
    owners = mention_owners(document)
    anchor_of: dict[int, int] = {}
    for token, word in enumerate(word_ids):
        if word >= 0 and owners[word] >= 0 and owners[word] not in anchor_of:
            anchor_of[owners[word]] = token
    anchors = set(anchor_of.values())
    entities = token_entities(overwrite, coref, [token in anchors for token in range(len(word_ids))], new_entity_threshold)
    next_singleton = max((e for e in entities if e is not None), default=-1) + 1
    mentions = []
    for index, (first, last, _) in enumerate(document.mentions):
        if index in anchor_of:
            entity = entities[anchor_of[index]]
        else:
            entity, next_singleton = next_singleton, next_singleton + 1
        mentions.append((first, last, entity))
    return document.with_mentions(mentions)
