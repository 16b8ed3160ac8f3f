"""Token/entity alignment for GPT2E (Entity-Transformers, section 4.2 and Table 1): the entity id of every BPE token.

GPT2E reads, next to every BPE token, the id of the entity the token is part of (Ø = 0 for tokens outside every
mention). This module's one job is to tokenize a text and give every token the entity of the mention it lies in:

* `entity_ids_for_document` gives a gold-annotated document's (`read_conll_coreference`) GPT-2 ``input_ids`` and
  ``entity_ids``: clusters renumbered 1..K per document in order of first mention, 0 outside mentions, the innermost
  mention winning where mentions nest.
* `entity_ids_from_clusters` / `entity_ids_from_text` give entity ids from a coreference resolver's clusters (our
  ``pipeline("coreference")``) instead of gold annotation, the paper's future work.

Cutting the encoded documents into training windows is `entity_windows`'s job.

Example:
    >>> from transformers import AutoTokenizer  # doctest: +SKIP
    >>> tokenizer = AutoTokenizer.from_pretrained("../shared/data/tokenizers/gpt2")  # doctest: +SKIP
    >>> document = CorefDocument("d", 0, ["Zoe", "met", "her", "sister"], [(0, 0, 1), (2, 2, 1)])
    >>> entity_ids_for_document(document, tokenizer)["entity_ids"]  # doctest: +SKIP
    [1, 0, 1, 0]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..coreference.conll import CorefDocument
from ._checks import is_int

__all__ = ["entity_ids_for_document", "entity_ids_from_clusters", "entity_ids_from_text"]

# A mention in characters of a text: (start, end exclusive, cluster key).
_CharMention = tuple[int, int, Any]


# ------------------------------------------------------------------------------------------------ entity ids
def entity_ids_for_document(document: CorefDocument, tokenizer: Any) -> dict[str, Any]:
    """GPT-2 BPE of a document with the entity id of every token (Table 1 of the paper).

    The text is the words joined by single spaces (no detokenisation, as `read_litbank_documents` does), tokenized
    without special tokens and without truncation. A BPE token belongs to the word its non-space characters are in
    (GPT-2's tokens carry the space before a word; found with the fast tokenizer's offset mapping); a token of
    spaces only (GPT-2 splits ``" urchin"`` into ``"Ġ"``, ``"urch"``, ``"in"``) belongs to the word after it.

    Entity ids are per document: cluster ids are renumbered 1..K in order of first mention (mentions ordered by first
    word, the longer (outer) one first when two start on the same word); tokens outside every mention get 0 (Ø).
    Every BPE piece of a mention's words carries the mention's entity. Where mentions nest, a token takes the entity
    of the INNERMOST (shortest) mention covering its word, e.g. LitBank's ``[a man who ... for [his] own amusement
    ...]``: ``his`` carries the entity of ``his`` (Sir Walter), the other words the entity of ``a man who ...``. Of
    two mentions of different clusters with the same words, the lower entity id wins. K counts every cluster of the
    document, also one whose words are all covered by shorter mentions (none in LitBank).

    Args:
        document: The document (`read_conll_coreference`). Its words must be non-empty and contain no whitespace
            (joining by spaces must be undone by splitting on spaces).
        tokenizer: A fast tokenizer (offset mapping), e.g. ``AutoTokenizer.from_pretrained(".../gpt2")``.

    Returns:
        A dict with ``input_ids`` and ``entity_ids`` (lists of ints, one per token), ``word_ids`` (the word of every
        token), ``offsets`` (``(start, end)`` character offsets of every token into ``text``, GPT-2 counting the
        leading space), ``text`` and ``num_entities`` (K).

    Raises:
        TypeError: If the tokenizer is not a fast one or ``document`` is not a `CorefDocument`.
        ValueError: If a word is empty or contains whitespace, or the tokenizer gives a word no token.

    Example:
        >>> words = ["Sir", "Walter", "saw", "his", "sister"]
        >>> document = CorefDocument("d", 0, words, [(0, 1, 9), (3, 4, 4), (3, 3, 9)])
        >>> encoded = entity_ids_for_document(document, gpt2_tokenizer)  # doctest: +SKIP
        >>> tokens = gpt2_tokenizer.convert_ids_to_tokens(encoded["input_ids"])  # doctest: +SKIP
        >>> list(zip(tokens, encoded["entity_ids"]))  # doctest: +SKIP
        [('Sir', 1), ('ĠWalter', 1), ('Ġsaw', 0), ('Ġhis', 1), ('Ġsister', 2)]
    """
    if not isinstance(document, CorefDocument):
        raise TypeError(f"entity_ids_for_document expects a CorefDocument, got {type(document).__name__}.")
    text, word_spans = _joined_words(document)
    char_mentions = [(word_spans[start][0], word_spans[end][1], cluster) for start, end, cluster in document.mentions]
    encoded = _encode_with_entities(text, char_mentions, tokenizer)
    encoded["word_ids"] = _token_words(document, text, word_spans, encoded["offsets"])
    return encoded


def _joined_words(document: CorefDocument) -> tuple[str, list[tuple[int, int]]]:
    spans, position = [], 0
    for index, word in enumerate(document.words):
        if not word or any(character.isspace() for character in word):
            raise ValueError(
                f"{document.label}: word {index} is {word!r}; words must be non-empty and contain no whitespace "
                "(the text joins them with single spaces). Fix the word column of the file."
            )
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return " ".join(document.words), spans


def _token_words(
    document: CorefDocument, text: str, word_spans: list[tuple[int, int]], offsets: list[tuple[int, int]]
) -> list[int]:
    word_of_character = [-1] * len(text)
    for index, (start, end) in enumerate(word_spans):
        word_of_character[start:end] = [index] * (end - start)
    word_ids = []
    for token, (start, end) in enumerate(offsets):
        words = {word_of_character[position] for position in _token_characters(text, start, end)}
        if len(words) != 1:
            raise ValueError(
                f"{document.label}: BPE token {token} (characters {start}..{end}, {text[start:end]!r}) spans words "
                f"{sorted(words)}; a token must lie inside one word (or be the spaces before one). Use a tokenizer "
                "that splits at spaces (GPT-2)."
            )
        word_ids.append(words.pop())
    missing = sorted(set(range(len(document.words))) - set(word_ids))
    if missing:
        raise ValueError(
            f"{document.label}: the tokenizer gives word {missing[0]} ({document.words[missing[0]]!r}) no token, so "
            "its entity would be lost; use a byte-level tokenizer (GPT-2) or fix the word."
        )
    return word_ids


def _encode_with_entities(text: str, mentions: list[_CharMention], tokenizer: Any) -> dict[str, Any]:
    """Tokenize ``text`` and give every token the entity of the innermost mention its non-space characters touch."""
    _check_fast_tokenizer(tokenizer)
    numbering = _number_entities(mentions)
    encoding = tokenizer(
        text,
        add_special_tokens=False,
        return_offsets_mapping=True,
        return_attention_mask=False,
        return_token_type_ids=False,
        truncation=False,
        verbose=False,
    )
    offsets = [(int(start), int(end)) for start, end in encoding["offset_mapping"]]
    # Paint characters from the longest mention to the shortest: a character keeps the innermost mention over it.
    ranked = sorted(mentions, key=lambda mention: (-(mention[1] - mention[0]), -numbering[mention[2]]))
    rank_of_character = [-1] * len(text)
    for rank, (start, end, _) in enumerate(ranked):
        rank_of_character[start:end] = [rank] * (end - start)
    entity_ids = []
    for start, end in offsets:
        rank = max((rank_of_character[p] for p in _token_characters(text, start, end)), default=-1)
        entity_ids.append(numbering[ranked[rank][2]] if rank >= 0 else 0)
    return {
        "input_ids": list(encoding["input_ids"]),
        "entity_ids": entity_ids,
        "offsets": offsets,
        "text": text,
        "num_entities": len(numbering),
    }


def _token_characters(text: str, start: int, end: int) -> list[int]:
    """The characters that decide a token's word and entity: its non-space characters; for a token of spaces only
    (GPT-2 splits " urchin" into "Ġ", "urch", "in"), the first character of the word it precedes."""
    characters = [position for position in range(start, end) if not text[position].isspace()]
    if characters:
        return characters
    position = end
    while position < len(text) and text[position].isspace():
        position += 1
    return [position] if position < len(text) else []


def _number_entities(mentions: Iterable[_CharMention]) -> dict[Any, int]:
    """Cluster key -> 1..K in order of first mention (by start, the longer mention first on a tie)."""
    numbering: dict[Any, int] = {}
    for _, _, cluster in sorted(mentions, key=lambda mention: (mention[0], -mention[1])):
        numbering.setdefault(cluster, len(numbering) + 1)
    return numbering


def _check_fast_tokenizer(tokenizer: Any) -> None:
    if not callable(tokenizer) or not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"A fast tokenizer is needed (its offset mapping ties tokens to characters), got "
            f"{type(tokenizer).__name__}; load it with AutoTokenizer.from_pretrained(path) (use_fast is the default)."
        )


# ------------------------------------------------------------------------------------------------ resolver output
def entity_ids_from_clusters(
    text: str, clusters: Sequence[Sequence[Mapping[str, Any]]] | Mapping[str, Any], tokenizer: Any
) -> dict[str, Any]:
    """Entity ids of the BPE tokens of a raw text, from coreference clusters with character offsets.

    ``clusters`` is what ``pipeline("coreference")`` returns (``{"clusters": [[{"start", "end", "text"}, ...],
    ...]}``, or just its list). Entities are numbered 1..K in order of first mention in the text (by start, the
    longer mention first on a tie), whatever the order of the clusters; tokens outside every mention get 0. A token
    takes the entity of the innermost (shortest, in characters) mention that any of its non-space characters lies in
    (overlapping mentions: the shorter wins; equally long: the lower id), so every BPE piece of a mention word carries
    it; a token of spaces only takes the entity of the character after it (GPT-2 attaches a space to the next word).

    Args:
        text: The text the offsets point into.
        clusters: The clusters: lists of mentions ``{"start": int, "end": int}`` (``end`` exclusive), with an
            optional ``"text"`` that must equal ``text[start:end]``.
        tokenizer: A fast tokenizer (GPT-2's); it need not be the resolver's.

    Returns:
        A dict with ``input_ids``, ``entity_ids``, ``offsets`` (of each token into ``text``), ``text`` and
        ``num_entities`` (K, the number of clusters) and ``cluster_entity_ids`` (the entity id of each cluster, in the
        order given).

    Raises:
        TypeError: For a slow tokenizer or clusters of the wrong shape.
        ValueError: For an empty text, an empty cluster, offsets outside the text or empty, or a mention ``text``
            that differs from ``text[start:end]``.

    Example:
        >>> text = "Zoe met Maggie. She smiled."
        >>> clusters = [[{"start": 8, "end": 14, "text": "Maggie"}, {"start": 16, "end": 19, "text": "She"}]]
        >>> encoded = entity_ids_from_clusters(text, clusters, gpt2_tokenizer)  # doctest: +SKIP
        >>> tokens = gpt2_tokenizer.convert_ids_to_tokens(encoded["input_ids"])  # doctest: +SKIP
        >>> list(zip(tokens, encoded["entity_ids"]))  # doctest: +SKIP
        [('Z', 0), ('oe', 0), ('Ġmet', 0), ('ĠMaggie', 1), ('.', 0), ('ĠShe', 1), ('Ġsmiled', 0), ('.', 0)]
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"The text must be a non-empty string, got {text!r}.")
    if isinstance(clusters, Mapping):
        if "clusters" not in clusters:
            raise TypeError(
                f"Expected the coreference pipeline's output {{'clusters': [...]}}, got keys {sorted(clusters)}."
            )
        clusters = clusters["clusters"]
    if isinstance(clusters, (str, bytes)) or not isinstance(clusters, Sequence):
        raise TypeError(f"clusters must be a list of lists of mentions, got {type(clusters).__name__}.")
    mentions = [
        _checked_char_mention(text, mention, cluster_index, mention_index)
        for cluster_index, cluster in enumerate(_checked_clusters(clusters))
        for mention_index, mention in enumerate(cluster)
    ]
    encoded = _encode_with_entities(text, mentions, tokenizer)
    numbering = _number_entities(mentions)
    encoded["cluster_entity_ids"] = [numbering[index] for index in range(len(clusters))]
    return encoded


def _checked_clusters(clusters: Sequence[Any]) -> list[Sequence[Any]]:
    for index, cluster in enumerate(clusters):
        if isinstance(cluster, (str, bytes, Mapping)) or not isinstance(cluster, Sequence):
            raise TypeError(f"Cluster {index} must be a list of mentions, got {type(cluster).__name__}.")
        if not cluster:
            raise ValueError(f"Cluster {index} has no mention; remove empty clusters.")
    return list(clusters)


def _checked_char_mention(text: str, mention: Any, cluster_index: int, mention_index: int) -> _CharMention:
    where = f"Mention {mention_index} of cluster {cluster_index}"
    if not isinstance(mention, Mapping) or not is_int(mention.get("start")) or not is_int(mention.get("end")):
        raise TypeError(f"{where} must be a dict with int 'start' and 'end' character offsets, got {mention!r}.")
    start, end = int(mention["start"]), int(mention["end"])
    if not 0 <= start < end <= len(text):
        raise ValueError(
            f"{where} has offsets ({start}, {end}) outside the text of {len(text)} characters or empty; offsets are "
            "character positions, end exclusive."
        )
    if "text" in mention and mention["text"] != text[start:end]:
        raise ValueError(
            f"{where} says {mention['text']!r} but text[{start}:{end}] is {text[start:end]!r}; the clusters belong to "
            "another text."
        )
    return start, end, cluster_index


def entity_ids_from_text(
    text: str, coreference_pipeline: Any, tokenizer: Any, **pipeline_kwargs: Any
) -> dict[str, Any]:
    """From raw text to ``input_ids`` + ``entity_ids``: run a coreference resolver, then `entity_ids_from_clusters`.

    Noisy entity annotation from a pretrained resolver instead of gold coreference (the paper's future work).

    Args:
        text: The raw text.
        coreference_pipeline: Our ``pipeline("coreference", model=...)`` (any callable returning
            ``{"clusters": [[{"start", "end", "text"}, ...], ...]}``).
        tokenizer: The language model's fast tokenizer (GPT-2's), not necessarily the resolver's.
        **pipeline_kwargs: Passed to the pipeline, e.g. ``mention_threshold=0.5``.

    Returns:
        `entity_ids_from_clusters`'s dict, plus ``clusters`` (the resolver's clusters).

    Raises:
        TypeError: If the pipeline is not callable or returns something else than ``{"clusters": [...]}``.

    Example:
        >>> from transformers import pipeline  # doctest: +SKIP
        >>> resolver = pipeline("coreference", model="runs/petra-gap")  # doctest: +SKIP
        >>> encoded = entity_ids_from_text("Zoe met Maggie. She smiled.", resolver, gpt2_tokenizer)  # doctest: +SKIP
        >>> encoded["num_entities"] == len(encoded["clusters"])  # doctest: +SKIP
        True
    """
    if not callable(coreference_pipeline):
        raise TypeError(
            f"coreference_pipeline must be a pipeline('coreference', model=...) object, got "
            f"{type(coreference_pipeline).__name__}."
        )
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"The text must be a non-empty string, got {text!r}.")
    output = coreference_pipeline(text, **pipeline_kwargs)
    if not isinstance(output, Mapping) or "clusters" not in output:
        raise TypeError(
            f"The coreference pipeline returned {type(output).__name__}, not {{'clusters': [...]}}; pass a "
            "pipeline('coreference') in clusters mode (no pronoun/candidates query)."
        )
    result = entity_ids_from_clusters(text, output["clusters"], tokenizer)
    result["clusters"] = output["clusters"]
    return result
