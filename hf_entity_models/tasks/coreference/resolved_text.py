"""Resolved text: each pronoun mention of a cluster replaced by the name of its entity.

``resolve_coreferences(text, clusters)`` takes the clusters `pipeline("coreference")` returns (mentions with character
offsets) and rewrites the text: "Emma smiled because she liked her book" -> "Emma smiled because Emma liked Emma's
book". Each entity is named by its most informative mention: its first proper name (a mention whose words all start
with a capital letter or are joined by lowercase particles: "Mr. Knightley", "Anne of Green Gables"), else its longest
mention that is not a pronoun; an entity mentioned only by pronouns is left as it is. Possessive pronouns stay
possessive ("his" -> "Frank's"). Only third-person pronouns are replaced: a name in place of "I" or "you" breaks the
verb ("I am late" -> "Emma am late"), and reflexive ones ("herself") are kept, as "Emma hurt Emma" is wrong. The replacements come back with their offsets in the original and in the resolved text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Third person only: a name in place of "I" or "you" breaks the verb's agreement ("I am late" -> "Emma am late").
SUBJECT_AND_OBJECT_PRONOUNS = frozenset({"he", "him", "she", "it", "they", "them"})
POSSESSIVE_PRONOUNS = frozenset({"his", "its", "their", "hers", "theirs"})
REFLEXIVE_PRONOUNS = frozenset({"himself", "herself", "itself", "themselves", "oneself"})
# Kept as they are, and never an entity's name.
FIRST_AND_SECOND_PERSON = frozenset(
    """i me my mine myself we us our ours ourselves you your yours yourself yourselves thou thee thy thine thyself ye"""
    .split()
)
# "her" is an object ("told her that") or a possessive ("her book"); without a tagger the next word decides: a
# possessive "her" is followed by the noun phrase it determines, an object "her" by anything else. These words never
# start a noun phrase after an object "her" ("gave her a book", "saw her in town", "her and him"); `_is_possessive_her`.
_WORDS_AFTER_AN_OBJECT_HER = frozenset(
    """a an the this that these those some any no every each all both either neither my your his her its our their
    to in on at by for from with without of off out up down over under into onto upon about above below across after
    before behind between beyond during near since through till until toward towards and or but nor so yet then than
    as if because while when where whether though although once unless not never again away back too very well
    is was were be been being am are has had have do did does will would shall should can could may might must
    how what who whom why which
    """.split()
)
PRONOUNS = SUBJECT_AND_OBJECT_PRONOUNS | POSSESSIVE_PRONOUNS | REFLEXIVE_PRONOUNS | FIRST_AND_SECOND_PERSON | {"her"}
# Lowercase words a proper name may hold between its capitalised words ("Anne of Green Gables", "Vincent van Gogh").
_NAME_PARTICLES = frozenset({"of", "the", "de", "van", "von", "der", "du", "la", "le", "da", "di", "and", "'s"})
_DETERMINERS = frozenset({"the", "a", "an"})


def resolve_coreferences(text: str, clusters: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The text with every non-reflexive pronoun mention replaced by its entity's most informative mention.

    Args:
        text: the text the clusters were found in.
        clusters: one list of mentions per entity, each mention ``{"start": int, "end": int}`` (the pipeline's
            output; a ``"text"`` key, when there, must equal ``text[start:end]``) or a ``(start, end)`` pair.

    Returns:
        ``{"text": resolved_text, "replacements": [...]}``, one replacement per rewritten mention in text order:
        ``{"start", "end", "original", "replacement", "resolved_start", "resolved_end"}`` (``start``/``end`` in
        `text`, ``resolved_start``/``resolved_end`` in the resolved text).

    Raises:
        TypeError / ValueError: a mention that is not a span of `text`, with the mention named.
    """
    if not isinstance(text, str):
        raise TypeError(f"resolve_coreferences needs the text as a str, not {type(text).__name__}")
    entities = [[_checked_mention(text, mention, index) for mention in _checked_cluster(cluster, index)]
                for index, cluster in enumerate(clusters)]
    rewrites: dict[tuple[int, int], str] = {}
    for mentions in entities:
        name = entity_name(text, mentions)
        if name is None:
            continue
        for start, end in mentions:
            replacement = _replacement(text, start, end, name)
            # A span claimed by two entities (a model error) keeps the first entity's name.
            if replacement is not None and (start, end) not in rewrites:
                rewrites[(start, end)] = replacement
    return _apply(text, rewrites)


def entity_name(text: str, mentions: Iterable[tuple[int, int]]) -> str | None:
    """The entity's first proper-name mention, else its longest non-pronoun one (the first of equal length); None
    when every mention is a pronoun."""
    candidates = [(start, end) for start, end in sorted(mentions) if text[start:end].strip().lower() not in PRONOUNS]
    if not candidates:
        return None
    for start, end in candidates:
        if _is_proper_name(text[start:end]):
            return text[start:end].strip()
    start, end = max(candidates, key=lambda span: (span[1] - span[0], -span[0]))
    return text[start:end].strip()


def _replacement(text: str, start: int, end: int, name: str) -> str | None:
    """What replaces the mention text[start:end], or None when it is not a pronoun to replace."""
    pronoun = text[start:end].lower()
    if pronoun in POSSESSIVE_PRONOUNS or (pronoun == "her" and _is_possessive_her(text, end)):
        replacement = _possessive(name)
    elif pronoun in SUBJECT_AND_OBJECT_PRONOUNS or pronoun == "her":
        replacement = name
    else:
        return None
    return _cased_for_position(text, start, replacement)


def _is_possessive_her(text: str, end: int) -> bool:
    """"her" determines the next word ("her book") rather than being its verb's object ("gave her a book")."""
    start = end
    while start < len(text) and text[start] in " \t":  # scanned, not sliced: a book has thousands of pronouns
        start += 1
    stop = start
    while stop < len(text) and (text[stop].isalpha() or text[stop] in "-'"):
        stop += 1
    return stop > start and text[start:stop].lower() not in _WORDS_AFTER_AN_OBJECT_HER


def _possessive(name: str) -> str:
    if name.endswith(("'s", "’s")):
        return name
    return name + "'s"


def _cased_for_position(text: str, start: int, replacement: str) -> str:
    """A capital at a sentence start; a leading "The"/"A" lowered inside a sentence ("saw the old man")."""
    first_word, _, rest = replacement.partition(" ")
    if _starts_sentence(text, start):
        return replacement[:1].upper() + replacement[1:]
    if rest and first_word.lower() in _DETERMINERS:
        return first_word.lower() + " " + rest
    return replacement


def _starts_sentence(text: str, start: int) -> bool:
    position = start - 1
    while position >= 0 and text[position] in " \t\n\"'“‘(":
        position -= 1
    return position < 0 or text[position] in ".!?"


def _is_proper_name(mention: str) -> bool:
    words = mention.split()
    if not words or words[0].lower() in _DETERMINERS:
        return False
    return words[0][:1].isupper() and all(word[:1].isupper() or word.lower() in _NAME_PARTICLES for word in words)


def _apply(text: str, rewrites: Mapping[tuple[int, int], str]) -> dict[str, Any]:
    pieces: list[str] = []
    replacements: list[dict[str, Any]] = []
    position = 0
    resolved_length = 0
    for (start, end), replacement in sorted(rewrites.items()):
        if start < position:  # inside an earlier replacement: pronouns are single words, so only a model error
            continue
        pieces.append(text[position:start])
        resolved_length += start - position
        pieces.append(replacement)
        replacements.append({
            "start": start, "end": end, "original": text[start:end], "replacement": replacement,
            "resolved_start": resolved_length, "resolved_end": resolved_length + len(replacement),
        })
        resolved_length += len(replacement)
        position = end
    pieces.append(text[position:])
    return {"text": "".join(pieces), "replacements": replacements}


def _checked_cluster(cluster: Any, index: int) -> Sequence[Any]:
    if isinstance(cluster, (str, bytes, Mapping)) or not isinstance(cluster, Sequence):
        raise TypeError(
            f"cluster {index} must be a list of mentions ({{'start': int, 'end': int}} or (start, end)), not "
            f"{type(cluster).__name__}: pass pipeline('coreference')(text)['clusters']"
        )
    return cluster


def _checked_mention(text: str, mention: Any, cluster: int) -> tuple[int, int]:
    if isinstance(mention, Mapping):
        if "start" not in mention or "end" not in mention:
            raise ValueError(f"mention {mention!r} of cluster {cluster} needs 'start' and 'end' character offsets")
        start, end = mention["start"], mention["end"]
    elif isinstance(mention, Sequence) and not isinstance(mention, str) and len(mention) == 2:
        start, end = mention
    else:
        raise TypeError(f"mention {mention!r} of cluster {cluster} must be {{'start': int, 'end': int}} or (start, end)")
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (start, end)):
        raise TypeError(f"mention {mention!r} of cluster {cluster}: offsets must be integers")
    if not 0 <= start < end <= len(text):
        raise ValueError(
            f"mention {mention!r} of cluster {cluster} is not a span of the text (0 <= start < end <= {len(text)}): "
            "were the clusters found in another text?"
        )
    if isinstance(mention, Mapping) and "text" in mention and mention["text"] != text[start:end]:
        raise ValueError(
            f"mention {mention!r} of cluster {cluster} says {mention['text']!r} but the text holds "
            f"{text[start:end]!r} there: were the clusters found in another text?"
        )
    return start, end
