"""Definition prompts for DefinitionEMB (Section 5.1, Figure 4, Appendix E / Figure 17).

A word's dictionary definition is written into one prompt that also names the word four times, in the four forms a
tokenizer can give it (Figure 17 a)::

    The definition of {word} is {definition}. Its part-of-speech, bpe-form without space, capitalization, and
    uppercase are {pos}, {bpe_form}, {Capitalized}, and {UPPER}, respectively.

The four word slots are the *corruption spans*: the tokens the definition reader must rebuild the embeddings of.
With ``word_slots="distinct"`` (the default) only the slots that hold a form distinct for the tokenizer are written:
an uncased tokenizer lowercases the capitalised and upper-case forms into copies of the word, and a WordPiece "bpe
form" (``##dis ##com ##fort``) is not a form the word ever takes, so they are dropped (``Its part-of-speech is
verb.`` when only the word slot is left) and every slot is masked (`masked_all_slots`): a visible copy would hand
the reader its answer. ``word_slots="paper"`` keeps Figure 17's four slots.

`build_definition_prompt` assembles the prompt segment by segment from token ids, so the spans are exact token
positions (never recovered from character offsets), and adds the tokenizer's special tokens around it. The
tokenizer facts the prompts and their readers need (`tokenizer_convention`, `sentinel_token_ids`,
`random_replacement_ids`, ...) are here too; turning a prompt into a reader's input and labels (masking or
corrupting its word slots) is `corruption`'s job.

Example:
    >>> definition = WordDefinition("discomfort", "verb", "To cause annoyance or distress to")
    >>> prompt = build_definition_prompt(tokenizer, definition)  # doctest: +SKIP
    >>> [tokenizer.decode(prompt.input_ids[start:end]) for start, end in prompt.corruption_spans]  # doctest: +SKIP
    [' discomfort', 'discomfort', ' Discomfort', ' DISCOMFORT']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from transformers.utils import logging

logger = logging.get_logger(__name__)

__all__ = [
    "NUM_WORD_SLOTS",
    "WORD_SLOT_CHOICES",
    "WORD_FORM_KEYS",
    "DefinitionPrompt",
    "WordDefinition",
    "build_definition_prompt",
    "build_definition_prompts",
    "default_decoder_start_token_id",
    "random_replacement_ids",
    "sentinel_token_ids",
    "slot_token_ids",
    "tokenizer_convention",
    "word_forms",
]

# The word slots of the prompt, in prompt order; they are also the keys of `word_forms`.
WORD_FORM_KEYS = ("word", "bpe_form", "capitalized", "uppercase")
NUM_WORD_SLOTS = len(WORD_FORM_KEYS)
# `config.word_slots` of the reader: "distinct" (only distinct forms, all masked) or "paper" (Figure 17's four).
WORD_SLOT_CHOICES = ("distinct", "paper")

_SPACE_MARKERS = ("Ġ", "▁")
_WORDPIECE_PREFIX = "##"
_CONVENTIONS = ("space-marker", "wordpiece")
Convention = Literal["space-marker", "wordpiece"]


# ------------------------------------------------------------------------------------------------ records
@dataclass(frozen=True)
class WordDefinition:
    """One dictionary entry: a word, its part of speech and its definition.

    Attributes:
        word: The defined word (one token sequence of the vocabulary's language, e.g. ``"discomfort"``).
        part_of_speech: Written into the prompt as is (``"noun"``, ``"verb"``, ``"numeral"`` ...).
        definition: The definition text.

    Raises:
        TypeError: If a field is not a string.
        ValueError: If the word, part of speech or definition is empty (naming the word).

    Example:
        >>> WordDefinition("discomfort", "verb", "To cause annoyance or distress to").word
        'discomfort'
    """

    word: str
    part_of_speech: str
    definition: str

    def __post_init__(self) -> None:
        for name in ("word", "part_of_speech", "definition"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(
                    f"WordDefinition.{name} must be a string, got {type(value).__name__} ({value!r}) "
                    f"for the word {self.word!r}."
                )
        if not self.word.strip():
            raise ValueError(
                f"WordDefinition has an empty word {self.word!r} (definition {self.definition!r}); every definition "
                "needs the word it defines. Drop the row or fill in the word."
            )
        if not self.definition.strip():
            raise ValueError(
                f"The word {self.word!r} has an empty definition; DefinitionEMB reads the definition to build the "
                "embedding. Drop the row or give a definition."
            )
        if not self.part_of_speech.strip():
            raise ValueError(
                f"The word {self.word!r} has an empty part of speech; the prompt writes it out. Give one (e.g. "
                "'noun') or a placeholder such as 'unknown'."
            )


@dataclass(frozen=True)
class DefinitionPrompt:
    """A tokenized definition prompt and the token positions of its word slots (up to four).

    Attributes:
        input_ids: The prompt's token ids, with the tokenizer's special tokens around it.
        corruption_spans: ``[start, end)`` token positions of the word slots the prompt holds (of word, bpe-form,
            capitalized, uppercase), in prompt order, non-empty and non-overlapping.
        word: The defined word.

    Raises:
        ValueError: If a span is empty, outside ``input_ids``, or overlaps / precedes the previous one.

    Example:
        >>> prompt = DefinitionPrompt([0, 7, 8, 9, 2], [(1, 2), (3, 4)], "cat")
        >>> prompt.span_positions()
        [1, 3]
    """

    input_ids: list[int]
    corruption_spans: list[tuple[int, int]]
    word: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_ids", [int(token_id) for token_id in self.input_ids])
        spans = []
        previous_end = 0
        for span in self.corruption_spans:
            if len(span) != 2:
                raise ValueError(f"Prompt for {self.word!r}: a corruption span is (start, end), got {span!r}.")
            start, end = int(span[0]), int(span[1])
            if not previous_end <= start < end <= len(self.input_ids):
                raise ValueError(
                    f"Prompt for {self.word!r}: corruption span {span!r} is empty, outside the {len(self.input_ids)} "
                    "tokens, or overlaps the previous span; spans are increasing, non-empty [start, end) positions."
                )
            spans.append((start, end))
            previous_end = end
        object.__setattr__(self, "corruption_spans", spans)

    def span_positions(self) -> list[int]:
        """Every token position inside the corruption spans, in order."""
        return [position for start, end in self.corruption_spans for position in range(start, end)]

    @classmethod
    def from_features(cls, features: Mapping[str, Any]) -> DefinitionPrompt:
        """A prompt from a dataset row with ``input_ids``, ``corruption_spans`` (and optionally ``word``)."""
        if not isinstance(features, Mapping) or "input_ids" not in features or "corruption_spans" not in features:
            raise TypeError(
                "A definition example is a mapping with 'input_ids' and 'corruption_spans' (the rows of "
                f"definition_prompt_dataset), got {type(features).__name__}"
                + (f" with keys {sorted(features)}" if isinstance(features, Mapping) else "")
                + "."
            )
        input_ids = features["input_ids"]
        if isinstance(input_ids, torch.Tensor):
            input_ids = input_ids.tolist()
        spans = features["corruption_spans"]
        if isinstance(spans, torch.Tensor):
            spans = spans.tolist()
        return cls(list(input_ids), [tuple(span) for span in spans], str(features.get("word", "") or ""))


# ------------------------------------------------------------------------------------------------ tokenizer facts
def tokenizer_convention(tokenizer: Any) -> Convention:
    """How the tokenizer marks word boundaries: ``"space-marker"`` or ``"wordpiece"``.

    ``"space-marker"``: byte-level BPE (GPT-2, RoBERTa, BART: a leading ``Ġ``) or SentencePiece (T5, XLM-R: ``▁``),
    where a token carries the space before it. ``"wordpiece"``: BERT-style, where a word-internal piece carries
    ``##`` and spaces are not tokens.

    Raises:
        ValueError: If the vocabulary uses neither convention.

    Example:
        >>> tokenizer_convention(tokenizer)  # doctest: +SKIP
        'space-marker'
    """
    model = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    if model is not None and type(model).__name__ == "WordPiece":
        return "wordpiece"
    counts = _marker_counts(tokenizer)
    if max(counts.values()) == 0:
        raise ValueError(
            f"{type(tokenizer).__name__}: no vocabulary token starts with 'Ġ', '▁' or '##', so the prompt's "
            "bpe-form slot cannot be built. DefinitionEMB supports byte-level BPE, SentencePiece and WordPiece "
            "tokenizers."
        )
    space_markers = max(counts[marker] for marker in _SPACE_MARKERS)
    return "wordpiece" if counts[_WORDPIECE_PREFIX] > space_markers else "space-marker"


def _marker_counts(tokenizer: Any) -> dict[str, int]:
    counts = {marker: 0 for marker in (*_SPACE_MARKERS, _WORDPIECE_PREFIX)}
    for token in tokenizer.get_vocab():
        for marker in counts:
            if token.startswith(marker):
                counts[marker] += 1
    return counts


def _space_marker(tokenizer: Any) -> str:
    counts = _marker_counts(tokenizer)
    return max(_SPACE_MARKERS, key=lambda marker: counts[marker])


def random_replacement_ids(tokenizer: Any) -> list[int]:
    """The ids a corrupted token may be replaced with: the vocabulary without special tokens.

    Special tokens (``<s>``, ``<pad>``, ``<mask>``, T5's ``<extra_id_i>`` ...) and added tokens marked special are
    left out: a random ``</s>`` in the middle of a prompt would teach the reader nothing about the word.

    Example:
        >>> ids = random_replacement_ids(tokenizer)  # doctest: +SKIP
        >>> tokenizer.mask_token_id in ids  # doctest: +SKIP
        False
    """
    special = set(int(token_id) for token_id in tokenizer.all_special_ids)
    for token_id, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(added, "special", False):
            special.add(int(token_id))
    ids = [token_id for token_id in range(len(tokenizer)) if token_id not in special]
    if not ids:
        raise ValueError(f"{type(tokenizer).__name__} has no non-special token to use as a random replacement.")
    return ids


def sentinel_token_ids(tokenizer: Any, num_spans: int = NUM_WORD_SLOTS) -> list[int]:
    """The token that replaces each corruption span in the encoder-decoder source (Section 5.1, Raffel et al.).

    T5-style tokenizers have a distinct sentinel per span (``<extra_id_0>``, ``<extra_id_1>`` ...) and get those;
    other encoder-decoder tokenizers (BART) use their mask token for every span.

    Raises:
        ValueError: If the tokenizer has neither sentinels nor a mask token.

    Example:
        >>> sentinel_token_ids(bart_tokenizer) == [bart_tokenizer.mask_token_id] * 4  # doctest: +SKIP
        True
    """
    vocab = tokenizer.get_vocab()
    sentinels = [vocab.get(f"<extra_id_{index}>") for index in range(num_spans)]
    if all(sentinel is not None for sentinel in sentinels):
        return [int(sentinel) for sentinel in sentinels]
    if tokenizer.mask_token_id is not None:
        return [int(tokenizer.mask_token_id)] * num_spans
    raise ValueError(
        f"{type(tokenizer).__name__} has neither T5-style sentinel tokens (<extra_id_0> ...) nor a mask token, so "
        "the encoder-decoder reader cannot mark the corrupted spans in its source. Add a mask token "
        "(tokenizer.add_special_tokens({'mask_token': '<mask>'}) and resize the model's embeddings)."
    )


def default_decoder_start_token_id(tokenizer: Any) -> int:
    """The decoder start id when the model config does not give one: pad for T5-style tokenizers, else eos (BART).

    Example:
        >>> default_decoder_start_token_id(bart_tokenizer) == bart_tokenizer.eos_token_id  # doctest: +SKIP
        True
    """
    t5_style = "<extra_id_0>" in tokenizer.get_vocab()
    token_id = tokenizer.pad_token_id if t5_style else tokenizer.eos_token_id
    if token_id is None:
        raise ValueError(
            f"{type(tokenizer).__name__} has no {'pad' if t5_style else 'eos'} token to start the decoder with; pass "
            "decoder_start_token_id (the model config's value) explicitly."
        )
    return int(token_id)


# ------------------------------------------------------------------------------------------------ word forms
def word_forms(tokenizer: Any, word: str) -> dict[str, list[int]]:
    """The token ids of the four forms of `word` written into the prompt (no special tokens).

    space-marker tokenizers: ``"word"`` = `` word`` (with its space marker), ``"bpe_form"`` = ``word`` without the
    space marker, ``"capitalized"`` = `` Word``, ``"uppercase"`` = `` WORD``.
    wordpiece tokenizers: ``"word"`` = ``word``, ``"bpe_form"`` = the word spelled in continuation (``##``) pieces
    (the plain ``word`` tokens when the vocabulary cannot spell it so), ``"capitalized"`` = ``Word``,
    ``"uppercase"`` = ``WORD`` (an uncased tokenizer lowercases the last two: its own convention).

    Raises:
        ValueError: If the word is empty or a form tokenizes to nothing.

    Example:
        >>> forms = word_forms(tokenizer, "discomfort")  # doctest: +SKIP
        >>> tokenizer.convert_ids_to_tokens(forms["bpe_form"])  # doctest: +SKIP
        ['dis', 'comfort']
    """
    return _PromptBuilder(tokenizer).word_forms(word)


class _PromptBuilder:
    """The tokenizer facts a prompt needs, computed once (a dataset map builds many prompts with one tokenizer)."""

    def __init__(self, tokenizer: Any, word_slots: str = "distinct") -> None:
        if not callable(tokenizer) or not hasattr(tokenizer, "get_vocab"):
            raise TypeError(f"Expected a transformers tokenizer, got {type(tokenizer).__name__}.")
        if word_slots not in WORD_SLOT_CHOICES:
            raise ValueError(f"word_slots must be one of {WORD_SLOT_CHOICES}, got {word_slots!r}.")
        self.word_slots = word_slots
        self.tokenizer = tokenizer
        self.convention = tokenizer_convention(tokenizer)
        self.vocab = tokenizer.get_vocab()
        self.marker = _space_marker(tokenizer) if self.convention == "space-marker" else _WORDPIECE_PREFIX
        self.prefix_ids, self.suffix_ids = _special_token_frame(tokenizer)

    # -- encoding
    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def continuation(self, ids: list[int], text: str) -> list[int]:
        """`ids` of `text` as it reads glued to the previous token: no space marker the text does not have.

        Byte-level BPE never adds a marker by itself, but SentencePiece (and BPE with ``add_prefix_space``) prepends
        one to every separately encoded text; that first marker is removed here, re-tokenizing the bare piece with
        the tokenizer's own model when the vocabulary lacks it.
        """
        if self.convention != "space-marker" or not ids or text[:1].isspace():
            return ids
        first = self.tokenizer.convert_ids_to_tokens(ids[0])
        if not isinstance(first, str) or not first.startswith(self.marker):
            return ids
        bare = first[len(self.marker) :]
        if not bare:
            return ids[1:]
        if bare in self.vocab:
            return [self.vocab[bare], *ids[1:]]
        model = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "model", None)
        if model is not None and hasattr(model, "tokenize"):
            pieces = [self.vocab.get(token.value) for token in model.tokenize(bare)]
            if pieces and all(piece is not None for piece in pieces):
                return [*pieces, *ids[1:]]
        logger.warning_once(
            f"{type(self.tokenizer).__name__}: cannot write {first!r} without its space marker; the bpe-form slot "
            "keeps the marker for such words."
        )
        return ids

    def wordpiece_continuation(self, word_ids: list[int], word: str) -> list[int]:
        """`word` spelled with ``##`` pieces only (greedy longest match, as WordPiece itself); else `word_ids`."""
        normalizer = getattr(getattr(self.tokenizer, "backend_tokenizer", None), "normalizer", None)
        text = normalizer.normalize_str(word) if normalizer is not None else word
        text = text.strip()
        pieces: list[int] = []
        start = 0
        while start < len(text):
            for end in range(len(text), start, -1):
                piece_id = self.vocab.get(_WORDPIECE_PREFIX + text[start:end])
                if piece_id is not None:
                    pieces.append(piece_id)
                    start = end
                    break
            else:
                return word_ids
        return pieces or word_ids

    # -- forms and prompts
    def word_forms(self, word: str) -> dict[str, list[int]]:
        return self._forms_from_encoded(word, self.encode(self._form_texts(word)))

    def _form_texts(self, word: str) -> list[str]:
        if not isinstance(word, str) or not word.strip():
            raise ValueError(f"Cannot build word forms for an empty word ({word!r}).")
        word = word.strip()
        capitalized = word[:1].upper() + word[1:]
        if self.convention == "space-marker":
            return [" " + word, word, " " + capitalized, " " + word.upper()]
        return [word, word, capitalized, word.upper()]

    def kept_forms(self, forms: dict[str, list[int]]) -> dict[str, list[int]]:
        """The forms the prompt writes out: all four (`word_slots="paper"`), or only those that are a distinct form
        of the word for this tokenizer (`"distinct"`): a WordPiece "bpe form" (the word spelled in ``##`` pieces,
        not a form the word ever takes) and any form with the same tokens as an earlier one (an uncased
        tokenizer's capitalised and upper-case copies) are dropped."""
        if self.word_slots == "paper":
            return forms
        kept: dict[str, list[int]] = {}
        for key, ids in forms.items():
            if key == "bpe_form" and self.convention == "wordpiece":
                continue
            if all(ids != earlier for earlier in kept.values()):
                kept[key] = ids
        return kept

    def _forms_from_encoded(self, word: str, encoded: list[list[int]]) -> dict[str, list[int]]:
        texts = self._form_texts(word)
        forms = dict(zip(WORD_FORM_KEYS, encoded))
        if self.convention == "space-marker":
            forms["bpe_form"] = self.continuation(forms["bpe_form"], texts[1])
        else:
            forms["bpe_form"] = self.wordpiece_continuation(forms["bpe_form"], texts[1])
        for key, ids in forms.items():
            if not ids:
                raise ValueError(
                    f"The {key} form of the word {word!r} tokenizes to no tokens with {type(self.tokenizer).__name__}; "
                    "the word cannot be a corruption target."
                )
        return forms

    def build(
        self, definitions: Sequence[WordDefinition], max_length: int | None = None
    ) -> list[tuple[DefinitionPrompt, int]]:
        """Prompts for `definitions`, each with how many definition tokens were cut to fit `max_length`."""
        for definition in definitions:
            if not isinstance(definition, WordDefinition):
                raise TypeError(f"Expected a WordDefinition, got {type(definition).__name__} ({definition!r}).")
        # The forms decide which slots the template holds, so they are tokenized first (one batched call each).
        form_texts = [text for definition in definitions for text in self._form_texts(definition.word)]
        encoded_forms = self.encode(form_texts)
        texts: list[str] = []
        layouts = []
        for index, definition in enumerate(definitions):
            start = index * NUM_WORD_SLOTS
            form_ids = encoded_forms[start : start + NUM_WORD_SLOTS]
            forms = self.kept_forms(self._forms_from_encoded(definition.word, form_ids))
            segments = _template_segments(definition, self.convention, tuple(forms))
            layouts.append((definition, forms, segments, len(texts)))
            texts.extend(text for kind, text in segments if kind not in WORD_FORM_KEYS)
        encoded = self.encode(texts)
        prompts = []
        for definition, forms, segments, cursor in layouts:
            pieces: list[tuple[str, list[int]]] = []
            for index, (kind, text) in enumerate(segments):
                if kind in WORD_FORM_KEYS:
                    pieces.append((kind, forms[kind]))
                    continue
                ids = encoded[cursor]
                cursor += 1
                # The opening text is the sequence start: keep whatever the tokenizer does there.
                pieces.append((kind, ids if index == 0 else self.continuation(ids, text)))
            prompts.append(self._assemble(definition, pieces, max_length))
        return prompts

    def _assemble(
        self, definition: WordDefinition, pieces: list[tuple[str, list[int]]], max_length: int | None
    ) -> tuple[DefinitionPrompt, int]:
        total = len(self.prefix_ids) + len(self.suffix_ids) + sum(len(ids) for _, ids in pieces)
        cut = 0
        if max_length is not None and total > max_length:
            definition_ids = next(ids for kind, ids in pieces if kind == "definition")
            cut = total - max_length
            if cut >= len(definition_ids):
                raise ValueError(
                    f"The prompt for the word {definition.word!r} needs {total - len(definition_ids) + 1} tokens even "
                    f"with a one-token definition, more than max_length={max_length}; raise max_length or drop this "
                    "word."
                )
            pieces = [(kind, ids[: len(ids) - cut] if kind == "definition" else ids) for kind, ids in pieces]
        input_ids = list(self.prefix_ids)
        spans = []
        for kind, ids in pieces:
            if kind in WORD_FORM_KEYS:
                spans.append((len(input_ids), len(input_ids) + len(ids)))
            input_ids.extend(ids)
        input_ids.extend(self.suffix_ids)
        return DefinitionPrompt(input_ids, spans, definition.word), cut


_FORM_NAMES = {"bpe_form": "bpe-form without space", "capitalized": "capitalization", "uppercase": "uppercase"}


def _english_list(items: Sequence[str]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def _template_segments(
    definition: WordDefinition, convention: str, kinds: Sequence[str] = WORD_FORM_KEYS
) -> list[tuple[str, str]]:
    """The prompt of Figure 4 / 17 (a) as (kind, text) segments; kinds are the word slots, "definition" or "text".

    `kinds` are the word slots written out (always "word" first); with all four this is the paper's prompt, with
    fewer the second sentence names only those (``Its part-of-speech is noun.`` when the word slot is the only one).
    The definition ends the first sentence, so one trailing period of its own is dropped (no ``..``). With a
    space-marker tokenizer the text before the bpe-form slot ends in a space, which such tokenizers keep as a lone
    marker token: the slot itself then holds the marker-free pieces and the prompt still decodes to ``, discomfort``.
    """
    text = " ".join(definition.definition.split())
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()
    if not text:
        raise ValueError(f"The word {definition.word!r} has a definition with no text besides a period.")
    part_of_speech = " ".join(definition.part_of_speech.split())
    segments = [("text", "The definition of"), ("word", ""), ("text", " is"), ("definition", " " + text)]
    extra = [kind for kind in kinds if kind != "word"]
    if not extra:
        return segments + [("text", ". Its part-of-speech is"), ("text", f" {part_of_speech}.")]
    names = _english_list(["part-of-speech", *(_FORM_NAMES[kind] for kind in extra)])
    segments.append(("text", f". Its {names} are"))
    values = len(extra) + 1
    for position, kind in enumerate(extra):
        last = position == len(extra) - 1
        joiner = (", and" if values > 2 else " and") if last else ","
        space = " " if kind == "bpe_form" and convention == "space-marker" else ""
        separator = ("text", f" {part_of_speech}{joiner}{space}" if position == 0 else f"{joiner}{space}")
        segments += [separator, (kind, "")]
    return segments + [("text", ", respectively.")]


def _special_token_frame(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts around one sequence (``<s>`` ... ``</s>``, ``[CLS]`` ... ``[SEP]``)."""
    probe = "definition"
    plain = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    framed = list(tokenizer(probe, add_special_tokens=True)["input_ids"])
    for start in range(len(framed) - len(plain) + 1):
        if framed[start : start + len(plain)] == plain:
            return framed[:start], framed[start + len(plain) :]
    raise ValueError(
        f"{type(tokenizer).__name__}: cannot find where the special tokens go around a single sequence (adding them "
        "changed the text's own tokens)."
    )


# ------------------------------------------------------------------------------------------------ prompts
def build_definition_prompt(
    tokenizer: Any, definition: WordDefinition, max_length: int | None = None, word_slots: str = "distinct"
) -> DefinitionPrompt:
    """The tokenized prompt of Figure 4 / 17 (a) for one definition, with its corruption spans (one per word slot).

    The ids are assembled segment by segment (template text, word slots, definition), so every span is exactly the
    tokens of its word form (`word_forms`); the tokenizer's special tokens for a single sequence go around it.

    Args:
        tokenizer: A space-marker (byte-level BPE / SentencePiece) or WordPiece tokenizer.
        definition: The entry.
        max_length: If given, a longer prompt has its definition text shortened token-wise (from the end) so that the
            whole prompt, special tokens included, fits; the word slots are never cut.
        word_slots: ``"distinct"`` (only the forms that differ for this tokenizer: `_PromptBuilder.kept_forms`) or
            ``"paper"`` (all four, as Figure 17); the reader's ``config.word_slots``.

    Raises:
        ValueError: If the word slots and template alone do not fit `max_length`, or the tokenizer convention is
            unsupported.

    Example:
        >>> prompt = build_definition_prompt(tokenizer, WordDefinition("cat", "noun", "a small pet"))  # doctest: +SKIP
        >>> tokenizer.decode(prompt.input_ids, skip_special_tokens=True)[-54:]  # doctest: +SKIP
        'and uppercase are noun, cat, Cat, and CAT, respectively.'
    """
    return _PromptBuilder(tokenizer, word_slots).build([definition], max_length)[0][0]


def slot_token_ids(
    tokenizer: Any, words: Sequence[str], word_slots: str = "distinct", single_token_slots_only: bool = False
) -> list[set[int]]:
    """The token ids each word's prompt holds in its word slots, for many words at once, without tokenizing any
    definition: what decides whether a definition names a token. With `single_token_slots_only`, only the tokens
    that are a whole slot by themselves (the definition is the token's own, not that of a longer word it is a piece
    of).

    Example:
        >>> slot_token_ids(bert_uncased_tokenizer, ["discomfort"])  # doctest: +SKIP
        [{17964}]
    """
    builder = _PromptBuilder(tokenizer, word_slots)
    texts = [builder._form_texts(word) for word in words]
    encoded = builder.encode([text for forms in texts for text in forms])
    slots = []
    for word, index in zip(words, range(0, len(encoded), NUM_WORD_SLOTS)):
        forms = builder.kept_forms(builder._forms_from_encoded(word, encoded[index : index + NUM_WORD_SLOTS]))
        kept = [ids for ids in forms.values() if len(ids) == 1 or not single_token_slots_only]
        slots.append({token for ids in kept for token in ids})
    return slots


def build_definition_prompts(
    tokenizer: Any, definitions: Sequence[WordDefinition], max_length: int | None = None, word_slots: str = "distinct"
) -> list[tuple[DefinitionPrompt, int]]:
    """`build_definition_prompt` for many definitions with one batched tokenizer call.

    Returns:
        ``(prompt, number of definition tokens cut to fit max_length)`` per definition.
    """
    return _PromptBuilder(tokenizer, word_slots).build(list(definitions), max_length)
