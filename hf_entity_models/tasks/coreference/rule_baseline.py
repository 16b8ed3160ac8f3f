"""A rule baseline for document-level coreference (LitBank style) that needs no training.

The baseline reads `CorefDocument` words only (no POS tagger, no parser, no model): word lists and capitalisation.
It answers two questions a learned model is compared against: how far do hand rules get, and how much of the
difficulty is mention detection (``mentions="rule"``) versus linking (``mentions="gold"``).

Mention detection (`rule_mentions`), for LitBank's entity types (people, places, organisations, vehicles,
facilities, geo-political entities):

* **Pronouns**: the personal, possessive and reflexive pronouns of `DETECTED_PRONOUNS` (he/him/his/himself,
  she/her/hers/herself, they/them/their/theirs/themselves, I/me/my/mine/myself, we/us/our/ours/ourselves,
  you/your/yours/yourself/yourselves and the archaic thou/thee/thy/thine/thyself/ye). ``it``/``its``/``itself`` are
  NOT detected: LitBank marks them only when they refer to an entity of its types (133 of 1,234 occurrences of
  "it" in the first 60 books), so detecting them costs far more precision than it brings recall. They are still
  linked when they are gold mentions.
* **Names**: maximal runs of capitalised words. A run may start with a title (`TITLES`: Mr., Mrs., Sir, Lady,
  Captain, ...). A capitalised word at a sentence start (first word, after ``. ! ?`` or an opening quote) starts a
  run only if it is a title, a known first name, or a *name word* of the document: it occurs capitalised inside a
  sentence at least as often as it occurs in lower case (so "The", "When" or "Yesterday" at a sentence start are
  skipped while "Anne" is kept). Closed-class words, months, days, nationalities and book headings
  (`NOT_NAME_WORDS`) and the pronoun "I" never belong to a run; a run stops at any other word (so at ``'s``). A
  ``the`` right before a run joins the mention ("the Lord Chancellor"), as LitBank annotates it.
* **Noun phrases**: a determiner (`DETERMINERS`: the, a, an, this, that, these, those, my, your, his, her, its,
  our, their, thy, some, every, each, another, any, no) followed by up to five lower-case words that are not
  function words; the mention ends at the LAST word of that run that is an entity noun (`ENTITY_NOUNS`: people,
  places, facilities, vehicles, groups, in singular and plural), and there is no mention when the run has none
  ("the old man 's" -> "the old man"; "the fog" -> nothing). The vocatives sir, madam and ma'am are mentions too,
  and so is a bare plural of people ("women", "passengers") that no determiner phrase ends at. A possessive
  determiner is also its own pronoun mention ("his father" gives "his father" and "his").

Linking (`rule_baseline_clusters`), mentions taken in text order:

* **Names** join the most recently mentioned entity that has a compatible name: one name's words (titles and
  "the" left out) are a subset of the other's ("Walter" ~ "Sir Walter Elliot"; "Mr. Elliot" ~ "Sir Walter
  Elliot") and their genders do not clash ("Mr. Bennet" and "Mrs. Bennet" stay apart). A name's gender comes from
  its title or a list of common first names. Names made of titles only ("Sir") match by exact string.
* **Noun phrases** join the entity of an earlier noun phrase with the same lower-cased string, else start an entity.
* **Third-person pronouns** link to the nearest preceding mention (ending before the pronoun) whose entity is
  compatible: he/him/his/himself need a masculine or unknown-gender singular person, she/her/hers/herself a
  feminine or unknown-gender singular person, they/them/their/theirs/themselves a plural (or collective) entity,
  it/its/itself a singular thing (or a collective). Gender and number come from the pronoun, a title, a first
  name or the noun's head (`ENTITY_NOUNS`), and an entity of unknown gender takes the gender of the first gendered
  pronoun linked to it. Without a compatible antecedent the pronoun starts an entity.
* **First and second person** pronouns form one entity per document for each person and number: all of
  I/me/my/mine/myself (the narrator, and whoever speaks in quotations), all of we/us/our/ours/ourselves, all of
  the singular you/your/yours/yourself/thou/thee/thy/thine/thyself, all of yourselves/ye. Speakers are not
  identified. On the first 60 LitBank books this beat linking a first-person pronoun inside a quotation only to
  the earlier ones of the same quotation (CoNLL F1 54.2 against 52.7 with rule mentions, 69.8 against 67.7 with
  gold mentions): most first-person pronouns of these books are the narrator's, in narration or in dialogue.

With ``mentions="gold"`` the document's own gold spans are used (their cluster ids are ignored): a one-word span
that is a pronoun is a pronoun, a span whose first word after a leading "the" and whose last word are capitalised
is a name, anything else is a noun phrase whose head is its last word before a preposition, relative pronoun or
punctuation. The same linking rules then apply.

Measured on LitBank (`score_coreference`, singletons kept; the rules were adjusted on the first 60 books in sorted
file-name order only, the last 20 were held out):

=====================  ==========================  ====================  ====================
books                  rule mentions P / R         CoNLL F1, rule mode   CoNLL F1, gold mode
=====================  ==========================  ====================  ====================
first 60 (adjusted)    84.7 / 79.5                 54.3                  69.8
last 20 (held out)     84.0 / 76.4                 55.0                  72.9
=====================  ==========================  ====================  ====================

The module stays whole at about 660 lines: it is one algorithm, whose mention detection and linking share the word
lists (about 200 lines) and the per-document analysis (``_Analysis``); most of the rest is this account of its rules.

Example:
    >>> from hf_entity_models.tasks.coreference.conll import CorefDocument
    >>> words = "Sir Walter Elliot was vain . Walter liked his mirror , and he admired himself .".split()
    >>> document = CorefDocument("book", 0, words)
    >>> rule_mentions(document)
    [(0, 2), (6, 6), (8, 8), (12, 12), (14, 14)]
    >>> [(first, last, cluster) for first, last, cluster in rule_baseline_clusters([document])[0].mentions]
    [(0, 2, 0), (6, 6, 0), (8, 8, 0), (12, 12, 0), (14, 14, 0)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .conll import CorefDocument

__all__ = [
    "DETECTED_PRONOUNS",
    "DETERMINERS",
    "ENTITY_NOUNS",
    "NOT_NAME_WORDS",
    "PRONOUN_FEATURES",
    "TITLES",
    "rule_baseline_clusters",
    "rule_mentions",
]

# ------------------------------------------------------------------------------------------------ word lists
# Genders: "m" masculine, "f" feminine, "p" a person of unknown gender, "n" a thing (place, vehicle, ...),
# "?" unknown (a name without a title or known first name: a person or a place).
# Numbers: "sg", "pl", "coll" (a collective noun: "it" or "they").

# pronoun -> (person, gender, number)
PRONOUN_FEATURES: dict[str, tuple[int, str, str]] = {
    **{word: (3, "m", "sg") for word in ("he", "him", "his", "himself")},
    **{word: (3, "f", "sg") for word in ("she", "her", "hers", "herself")},
    **{word: (3, "n", "sg") for word in ("it", "its", "itself")},
    **{word: (3, "?", "pl") for word in ("they", "them", "their", "theirs", "themselves")},
    **{word: (1, "?", "sg") for word in ("i", "me", "my", "mine", "myself")},
    **{word: (1, "?", "pl") for word in ("we", "us", "our", "ours", "ourselves")},
    **{word: (2, "?", "sg") for word in (
        "you", "your", "yours", "yourself", "thou", "thee", "thy", "thine", "thyself")},
    **{word: (2, "?", "pl") for word in ("yourselves", "ye")},
}
# Detected as mentions in the rule mode: all but it/its/itself (see the module docstring).
DETECTED_PRONOUNS: frozenset[str] = frozenset(word for word in PRONOUN_FEATURES if word not in ("it", "its", "itself"))

DETERMINERS: frozenset[str] = frozenset(
    "the a an this that these those my your his her its our their thy some every each another any no".split()
)

# title -> gender of its bearer ("p": either)
TITLES: dict[str, str] = {
    **{title: "m" for title in (
        "mr", "mr.", "mister", "sir", "lord", "master", "monsieur", "m.", "herr", "signor", "señor", "don", "king",
        "prince", "duke", "earl", "count", "baron", "emperor", "uncle", "brother", "father", "mr.s", "squire",
        "colonel", "captain", "major", "general", "lieutenant", "sergeant", "admiral", "reverend", "rev.", "parson",
        "bishop", "cardinal", "pope", "sheriff", "judge", "governor")},
    **{title: "f" for title in (
        "mrs", "mrs.", "miss", "ms.", "lady", "madame", "mme.", "mademoiselle", "mlle.", "frau", "fraulein",
        "signora", "señora", "queen", "princess", "duchess", "countess", "baroness", "empress", "aunt", "sister",
        "mother", "dame", "mistress")},
    **{title: "p" for title in ("dr", "dr.", "doctor", "professor", "prof.", "st.", "saint", "old", "young", "little")},
}
# Titles that are ranks rather than courtesy titles also name men in this period's fiction; "old"/"young"/"little"
# only count as titles at the start of a capitalised run ("Old Jolyon"), where they are capitalised.

_MALE_FIRST_NAMES = frozenset(
    "adam albert alexander alfred andrew anthony arthur augustus benjamin bertie bob charles charley charlie "
    "christopher daniel david dick edgar edmund edward ernest frank fred frederick george gerald gilbert godfrey "
    "harry henry herbert hugh jack jacob james jasper jim joe john jonathan joseph laurie leonard lewis louis "
    "mark matthew michael nicholas oliver patrick paul peter philip ralph richard robert roger samuel sam simon "
    "stephen thomas tom walter will william".split()
)
_FEMALE_FIRST_NAMES = frozenset(
    "ada agnes alice amelia amy anna anne annie beatrice bessie beth betsy caroline catherine cecilia celia "
    "charlotte clara daisy diana dora dorothea dorothy edith eleanor elinor eliza elizabeth ellen emily emma esther "
    "fanny florence frances georgiana grace hannah harriet helen isabel isabella jane jenny jo josephine julia "
    "katharine katherine kate kitty laura lizzie louisa lucy lydia mabel margaret maria marianne marilla martha mary "
    "matilda meg molly nancy nelly polly rachel rebecca rose ruth sarah sophia susan sybil tess victoria".split()
)

# Capitalised words that never belong to a name: closed-class words (capitalised at a sentence start or in a
# title line), interjections, months and days (not LitBank entities), nationalities and languages (adjectives far
# more often than mentions), and heading words.
NOT_NAME_WORDS: frozenset[str] = frozenset(
    # closed class
    "a an the and but or nor for so yet if then than when whenever while where wherever why how what whatever "
    "which who whom whose that this these those there here thus hence now once after before since until till "
    "though although because as at by from in into of off on onto out over to up upon with within without "
    "about above across against along among around behind below beneath beside besides between beyond down "
    "during except inside near outside through throughout toward towards under underneath unlike via "
    "all any both each either every few many more most much neither no none not only other others some such "
    "very also even still just ever never always often perhaps indeed however therefore moreover nevertheless "
    "is are was were be been being am do does did have has had shall should will would may might must can could "
    "let let's it its it's he she they we you i me him her them us my your his our their one two three "
    "oh o ah alas yes no nay well why hush hullo hello good dear poor ha aye".split()
    # months and days ("May" is left out: also a first name)
    + "january february march april june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday christmas easter".split()
    # nationalities and languages
    + "english french german italian spanish irish scotch scottish welsh american indian dutch russian roman "
    "greek latin christian catholic protestant jewish british european african asiatic chinese japanese "
    "turkish egyptian".split()
    # headings
    + "chapter book part volume preface contents introduction".split()
)

_HEADING_WORDS = frozenset("chapter book part volume".split())
_FUNCTION_WORDS = NOT_NAME_WORDS | frozenset(PRONOUN_FEATURES) | frozenset(
    "'s ' s".split()
)

# Entity nouns: head noun -> (gender, number) for the singular; plurals are derived in `_noun_features`.
_MALE_NOUNS = (
    "man gentleman boy father son brother husband uncle nephew king prince lord duke earl count baron emperor "
    "sultan master mister fellow lad grandfather grandson monk priest bishop squire knight landlord butler host "
    "hero widower bachelor bridegroom chap papa pa dad daddy stepfather footman valet coachman workman fisherman "
    "policeman horseman clergyman nobleman gentleman-farmer parson vicar rector curate friar abbot sir youth "
    "groom shepherd ploughman boatman waiter lover sire godfather schoolmaster headmaster"
)
_FEMALE_NOUNS = (
    "woman lady girl mother daughter sister wife aunt niece queen princess duchess countess baroness empress "
    "mistress madam ma'am maid maiden widow bride grandmother granddaughter nun housekeeper governess hostess "
    "heroine mama mamma mum mummy lass actress waitress landlady stepmother spinster dame wench milkmaid "
    "laundress seamstress nurse godmother schoolmistress sweetheart"
)
_PERSON_NOUNS = (
    "person child baby infant friend companion stranger doctor servant cousin parent neighbour neighbor visitor "
    "guest officer soldier sailor captain colonel general major lieutenant sergeant admiral judge lawyer clerk "
    "teacher student pupil scholar poet author writer artist painter traveller traveler merchant farmer peasant "
    "driver owner keeper guard guide pilot creature individual fool wretch savage native chief leader agent "
    "lodger tenant enemy foe beloved darling villain thief robber murderer prisoner slave messenger porter cook "
    "physician surgeon minister saint god ghost hunter warrior rider relation relative heir orphan twin "
    "gardener beggar sinner pedlar peddler stripling dependent politician poet philosopher lover partner "
    "master's mate captain's steward passenger inhabitant citizen resident reader listener speaker narrator "
    "spectator witness priestess prophet angel devil fairy giant dwarf emperor's"
)
_COLLECTIVE_NOUNS = (
    "family company party crowd army regiment troop government household crew council committee court class "
    "society congregation tribe nation audience staff group band gang club firm"
)
_THING_NOUNS = (
    # places and facilities
    "house home room chamber hall parlour parlor kitchen garden church chapel cathedral abbey castle palace "
    "cottage hut cabin tower town city village country land island world earth sea ocean river stream brook lake "
    "pond forest wood woods field meadow hill mountain valley road street lane path bridge square park yard "
    "courtyard shop store inn tavern hotel office school college university prison jail gaol station farm barn "
    "stable mill window door gate staircase stairs place spot region province state kingdom empire continent "
    "coast shore beach bay harbour harbor port desert plain cave camp tent library study bedroom drawing-room "
    "dining-room sitting-room nursery attic cellar corridor passage gallery balcony veranda verandah porch lodge "
    "estate grounds neighbourhood neighborhood parish county district quarter market theatre theater museum "
    "hospital bank factory building apartment flat lodgings window-seat heaven hell paradise wilderness "
    "plantation ranch moor heath marsh swamp jungle prairie glen cliff rock waterfall fountain well cemetery "
    "churchyard grave tomb vault wharf quay dock pier canal avenue alley boulevard highway track hollow "
    "mansion manor villa hermitage convent monastery cloister temple mosque shrine altar pulpit school-room "
    "schoolroom classroom workshop warehouse counting-house office bar saloon club-house cafe restaurant "
    "kingdom republic capital colony settlement suburb metropolis hamlet borough territory continent universe "
    "sky fireplace hearth bed table steps"
    # vehicles
    " ship boat vessel carriage coach cart waggon wagon train cab car canoe raft yacht schooner steamer sledge "
    "sleigh barge frigate brig sloop omnibus bus tram chaise gig buggy"
)
_IRREGULAR_PLURALS = {
    "men": "man", "women": "woman", "children": "child", "gentlemen": "gentleman", "people": "person",
    "folk": "person", "folks": "person", "wives": "wife", "thieves": "thief", "brethren": "brother",
    "oxen": "ox", "feet": "foot", "policemen": "policeman", "fishermen": "fisherman", "workmen": "workman",
    "clergymen": "clergyman", "noblemen": "nobleman", "horsemen": "horseman", "footmen": "footman",
    "coachmen": "coachman", "boatmen": "boatman", "countrymen": "countryman", "englishmen": "englishman",
}


def _noun_table() -> dict[str, tuple[str, str]]:
    table: dict[str, tuple[str, str]] = {}
    for words, gender, number in (
        (_MALE_NOUNS, "m", "sg"),
        (_FEMALE_NOUNS, "f", "sg"),
        (_PERSON_NOUNS, "p", "sg"),
        (_COLLECTIVE_NOUNS, "p", "coll"),
        (_THING_NOUNS, "n", "sg"),
    ):
        for word in words.split():
            table.setdefault(word, (gender, number))
    table.update({"countryman": ("m", "sg"), "englishman": ("m", "sg")})
    return table


# head noun (singular or plural) -> (gender, number)
ENTITY_NOUNS: dict[str, tuple[str, str]] = {}


def _build_entity_nouns() -> None:
    singular = _noun_table()
    ENTITY_NOUNS.update(singular)
    for word, (gender, number) in singular.items():
        plural_number = "pl" if number == "sg" else number
        if word.endswith("y") and word[-2:-1] not in tuple("aeiou"):
            plurals = [word[:-1] + "ies"]
        elif word.endswith(("s", "x", "ch", "sh")):
            plurals = [word + "es"]
        else:
            plurals = [word + "s"]
        for plural in plurals:
            ENTITY_NOUNS.setdefault(plural, (gender, plural_number))
    for plural, word in _IRREGULAR_PLURALS.items():
        gender = singular.get(word, ("p", "sg"))[0]
        ENTITY_NOUNS[plural] = (gender, "pl")


_build_entity_nouns()

_VOCATIVES = frozenset({"sir", "madam", "ma'am"})
# Words that end the head region of a gold noun-phrase span ("the rest of the staff" -> head "rest").
_HEAD_STOPPERS = frozenset(
    "of who whom whose which that where when in at on with from by for to into upon as , ; : -- ( ) 's '".split()
)
_SENTENCE_ENDS = frozenset({".", "!", "?", "...", "....", "?!", "!?"})
_OPENING_QUOTES = frozenset({"“", "‘", "``", "“‘"})
_STRAIGHT_QUOTE = '"'


# ------------------------------------------------------------------------------------------------ document analysis
def _is_capitalised(word: str) -> bool:
    return word[:1].isupper()


def _is_lower_word(word: str) -> bool:
    """A lower-case word (letters, possibly with inner hyphens or apostrophes)."""
    return word[:1].islower() and word.replace("-", "").replace("'", "").replace("’", "").isalpha()


def _sentence_starts(words: Sequence[str]) -> set[int]:
    """Indices of words that start a sentence: the first word, words after . ! ? and after opening quotes."""
    starts = {0}
    for index, word in enumerate(words[:-1]):
        if word in _SENTENCE_ENDS or word in _OPENING_QUOTES or word == _STRAIGHT_QUOTE:
            starts.add(index + 1)
            # "He left. “Well ..." -- the quote after a sentence end also starts the quoted sentence.
            if index + 2 < len(words) and words[index + 1] in _OPENING_QUOTES | {_STRAIGHT_QUOTE}:
                starts.add(index + 2)
    return starts


def _name_words(words: Sequence[str], sentence_starts: set[int]) -> set[str]:
    """Lower-cased words that the document capitalises inside sentences at least as often as it writes them lower."""
    capitalised_inside: Counter[str] = Counter()
    lower: Counter[str] = Counter()
    for index, word in enumerate(words):
        if _is_capitalised(word) and index not in sentence_starts:
            capitalised_inside[word.lower()] += 1
        elif word[:1].islower():
            lower[word] += 1
    return {
        word for word, count in capitalised_inside.items()
        if count >= lower[word] and word not in _FUNCTION_WORDS
    }


def _is_title(word: str) -> bool:
    return word.lower() in TITLES


@dataclass
class _Analysis:
    """What mention detection and mention typing need to know about a document."""

    words: list[str]
    sentence_starts: set[int]
    name_words: set[str]


def _analyse(document: CorefDocument) -> _Analysis:
    starts = _sentence_starts(document.words)
    return _Analysis(document.words, starts, _name_words(document.words, starts))


def _can_start_name(analysis: _Analysis, index: int) -> bool:
    word = analysis.words[index]
    if not _is_capitalised(word) or word == "I" or word.lower() in _FUNCTION_WORDS or not word[:1].isalpha():
        return False
    lowered = word.lower()
    if lowered in ("old", "young", "little"):  # a title only when a name follows ("Old Jolyon")
        following = analysis.words[index + 1] if index + 1 < len(analysis.words) else ""
        return _can_continue_name(following) and following.lower() not in TITLES
    if index not in analysis.sentence_starts:
        return True
    return (
        _is_title(word) or lowered in _MALE_FIRST_NAMES or lowered in _FEMALE_FIRST_NAMES
        or lowered in analysis.name_words
    )


def _can_continue_name(word: str) -> bool:
    return (
        _is_capitalised(word) and word[:1].isalpha() and word != "I" and word.lower() not in _FUNCTION_WORDS
    )


# ------------------------------------------------------------------------------------------------ mention detection
def _name_spans(analysis: _Analysis) -> list[tuple[int, int]]:
    words = analysis.words
    spans = []
    index = 0
    while index < len(words):
        if not _can_start_name(analysis, index):
            index += 1
            continue
        end = index
        while end + 1 < len(words) and _can_continue_name(words[end + 1]):
            end += 1
        start = index - 1 if index > 0 and words[index - 1].lower() == "the" else index
        spans.append((start, end))
        index = end + 1
    return spans


def _noun_phrase_spans(analysis: _Analysis, max_words: int = 5) -> list[tuple[int, int]]:
    words = analysis.words
    spans = []
    for index, word in enumerate(words):
        lowered = word.lower()
        if lowered in _VOCATIVES and word[:1].islower():
            spans.append((index, index))
            continue
        if lowered not in DETERMINERS or (_is_capitalised(word) and index not in analysis.sentence_starts):
            continue
        head = None
        for position in range(index + 1, min(index + 1 + max_words, len(words))):
            candidate = words[position]
            if not _is_lower_word(candidate) or candidate in _FUNCTION_WORDS or candidate in DETERMINERS:
                break
            if candidate in ENTITY_NOUNS:
                head = position
        if head is not None:
            spans.append((index, head))
    # Bare plurals of people ("women", "passengers"), when no determiner phrase already ends there.
    covered_ends = {end for _, end in spans}
    for index, word in enumerate(words):
        is_lower = word[:1].islower() or index in analysis.sentence_starts  # "Women and children waited ."
        features = ENTITY_NOUNS.get(word.lower()) if is_lower else None
        if features and features[1] == "pl" and features[0] != "n" and index not in covered_ends:
            spans.append((index, index))
    return spans


def rule_mentions(document: CorefDocument) -> list[tuple[int, int]]:
    """Mentions found by word-list rules: pronouns, capitalised names and simple noun phrases.

    See the module docstring for the rules. Nested mentions are kept ("his father" and "his").

    Args:
        document: The document; only its words are read.

    Returns:
        ``(first_word, last_word)`` spans (last word inclusive), sorted by first word, longer spans first, without
        duplicates.

    Example:
        >>> from hf_entity_models.tasks.coreference.conll import CorefDocument
        >>> words = "Mrs. Bennet saw her daughters in the old garden .".split()
        >>> rule_mentions(CorefDocument("book", 0, words))
        [(0, 1), (3, 4), (3, 3), (6, 8)]
    """
    analysis = _analyse(document)
    words = document.words
    spans = {
        (index, index) for index, word in enumerate(words)
        if _pronoun_key(word, words[index - 1] if index else "") in DETECTED_PRONOUNS
    }
    spans.update(_name_spans(analysis))
    spans.update(_noun_phrase_spans(analysis))
    return sorted(spans, key=lambda span: (span[0], -span[1]))


def _pronoun_key(word: str, previous: str = "") -> str | None:
    # "I" is only the pronoun capitalised; "i" lower case is a roman numeral or a typo, "I." a heading numeral, and
    # "CHAPTER I" a chapter number.
    if word == "I":
        return None if previous.lower() in _HEADING_WORDS else "i"
    lowered = word.lower()
    return lowered if lowered in PRONOUN_FEATURES and lowered != "i" else None


# ------------------------------------------------------------------------------------------------ mention typing
@dataclass
class _Mention:
    start: int
    end: int
    kind: str  # "pronoun", "name", "noun"
    key: str  # the pronoun, the name's lower-cased string, or the noun phrase's lower-cased string
    name_words: frozenset[str] = frozenset()  # names: lower-cased words without titles and "the"
    person: int = 3
    gender: str = "?"
    number: str = "sg"


def _type_mention(analysis: _Analysis, start: int, end: int) -> _Mention:
    words = analysis.words[start : end + 1]
    if start == end:
        pronoun = _pronoun_key(words[0], analysis.words[start - 1] if start else "")
        if pronoun is not None:
            person, gender, number = PRONOUN_FEATURES[pronoun]
            return _Mention(start, end, "pronoun", pronoun, person=person, gender=gender, number=number)
    content = words[1:] if len(words) > 1 and words[0].lower() == "the" else words
    key = " ".join(word.lower() for word in words)
    first_is_name = _can_continue_name(content[0]) or (
        _is_capitalised(content[0]) and content[0].lower() in TITLES
    )
    if first_is_name and _is_capitalised(content[-1]) and content[-1] != "I":
        return _name_mention(start, end, content, key)
    gender, number = _noun_head_features(words)
    return _Mention(start, end, "noun", key, gender=gender, number=number)


def _name_mention(start: int, end: int, content: Sequence[str], key: str) -> _Mention:
    lowered = [word.lower() for word in content]
    gender = "?"
    index = 0
    while index < len(lowered) - 1 and lowered[index] in TITLES:
        if TITLES[lowered[index]] in ("m", "f") and gender == "?":
            gender = TITLES[lowered[index]]
        index += 1
    core = [word for word in lowered[index:] if word not in ("'s", "of", "the")]
    if gender == "?" and core:
        if core[0] in _MALE_FIRST_NAMES:
            gender = "m"
        elif core[0] in _FEMALE_FIRST_NAMES:
            gender = "f"
    if not core or all(word in TITLES for word in core):
        core = []  # a title alone ("Sir"): matched by its exact string only
        if len(lowered) == 1 and lowered[0] in TITLES and TITLES[lowered[0]] in ("m", "f"):
            gender = TITLES[lowered[0]]
    return _Mention(start, end, "name", key, name_words=frozenset(core), gender=gender)


def _noun_head_features(words: Sequence[str]) -> tuple[str, str]:
    """(gender, number) of a noun phrase from its head: the last word before a preposition, relative or comma."""
    region = list(words)
    for index, word in enumerate(words[1:], start=1):
        if word.lower() in _HEAD_STOPPERS:
            region = list(words[:index])
            break
    for word in reversed(region):
        lowered = word.lower()
        if lowered in ENTITY_NOUNS:
            return ENTITY_NOUNS[lowered]
    head = region[-1].lower()
    if head.endswith("s") and not head.endswith("ss") and len(head) > 3:
        return "?", "pl"
    return "?", "sg"


# ------------------------------------------------------------------------------------------------ linking
@dataclass
class _Entity:
    identifier: int
    person: int
    gender: str
    number: str
    names: list[frozenset[str]] = field(default_factory=list)
    name_strings: set[str] = field(default_factory=set)
    last_start: int = -1


def _genders_clash(first: str, second: str) -> bool:
    return first in ("m", "f", "n") and second in ("m", "f", "n") and first != second


def _pronoun_accepts(pronoun: _Mention, entity: _Entity) -> bool:
    """Whether a third-person pronoun can refer to the entity (gender and number)."""
    if entity.person != 3:
        return False
    if pronoun.number == "pl":
        return entity.number in ("pl", "coll")
    if entity.number == "pl":
        return False
    if pronoun.gender == "n":
        return entity.gender == "n" or entity.number == "coll"
    if entity.number == "coll":
        return False
    return entity.gender in (pronoun.gender, "p", "?")


def _names_match(mention: _Mention, entity: _Entity) -> bool:
    if _genders_clash(mention.gender, entity.gender):
        return False
    if not mention.name_words:
        return mention.key in entity.name_strings
    return any(
        names and (mention.name_words <= names or names <= mention.name_words) for names in entity.names
    )


class _Linker:
    """Links the typed mentions of one document, in text order, into entities."""

    def __init__(self) -> None:
        self.entities: list[_Entity] = []
        self.linked: list[tuple[_Mention, _Entity]] = []  # in text order
        self.noun_entities: dict[str, _Entity] = {}
        self.speech_participants: dict[tuple[int, str], _Entity] = {}  # (person, number) -> the one entity

    def new_entity(self, mention: _Mention) -> _Entity:
        entity = _Entity(len(self.entities), mention.person, mention.gender, mention.number)
        self.entities.append(entity)
        return entity

    def add(self, mention: _Mention, entity: _Entity) -> None:
        if entity.gender in ("?", "p") and mention.gender in ("m", "f"):
            entity.gender = mention.gender  # "Walter ... he": the entity is masculine from now on
        elif entity.gender == "?" and mention.gender in ("p", "n"):
            entity.gender = mention.gender
        if mention.kind == "name":
            entity.names.append(mention.name_words)
            entity.name_strings.add(mention.key)
        elif mention.kind == "noun":
            self.noun_entities[mention.key] = entity
        entity.last_start = mention.start
        self.linked.append((mention, entity))

    def link(self, mention: _Mention) -> None:
        if mention.kind == "name":
            entity = self.name_antecedent(mention)
        elif mention.kind == "noun":
            entity = self.noun_entities.get(mention.key)
        elif mention.person == 3:
            entity = self.pronoun_antecedent(mention)
        else:
            key = (mention.person, mention.number)
            if key not in self.speech_participants:
                self.speech_participants[key] = self.new_entity(mention)
            entity = self.speech_participants[key]
        self.add(mention, entity if entity is not None else self.new_entity(mention))

    def name_antecedent(self, mention: _Mention) -> _Entity | None:
        candidates = [entity for entity in self.entities if entity.names and _names_match(mention, entity)]
        return max(candidates, key=lambda entity: entity.last_start, default=None)

    def pronoun_antecedent(self, pronoun: _Mention) -> _Entity | None:
        for mention, entity in reversed(self.linked):
            if mention.end < pronoun.start and _pronoun_accepts(pronoun, entity):
                return entity
        return None


def _cluster_document(document: CorefDocument, spans: Sequence[tuple[int, int]]) -> CorefDocument:
    analysis = _analyse(document)
    linker = _Linker()
    for start, end in sorted(set(spans), key=lambda span: (span[0], -span[1])):
        linker.link(_type_mention(analysis, start, end))
    mentions = [(mention.start, mention.end, entity.identifier) for mention, entity in linker.linked]
    return document.with_mentions(mentions)


def rule_baseline_clusters(documents: Sequence[CorefDocument], mentions: str = "rule") -> list[CorefDocument]:
    """Clusters mentions of each document with the rules of the module docstring; no training.

    Args:
        documents: The documents (e.g. from `read_conll_coreference`).
        mentions: ``"rule"`` detects mentions with `rule_mentions`; ``"gold"`` uses each document's own gold spans
            (their cluster ids are ignored), to measure linking alone.

    Returns:
        One new `CorefDocument` per document, with the same name, part and words, whose mentions are the
        baseline's ``(first_word, last_word, cluster_id)`` (singletons included; cluster ids count from 0 in each
        document).

    Raises:
        ValueError: If ``mentions`` is neither ``"rule"`` nor ``"gold"``.
        TypeError: If an element of ``documents`` is not a `CorefDocument`.

    Example:
        >>> from hf_entity_models.tasks.coreference.conll import CorefDocument
        >>> words = "Anne met Mr. Elliot . She liked him .".split()
        >>> gold = CorefDocument("book", 0, words, [(0, 0, 1), (2, 3, 2), (5, 5, 1), (7, 7, 2)])
        >>> rule_baseline_clusters([gold], mentions="gold")[0].mentions
        [(0, 0, 0), (2, 3, 1), (5, 5, 0), (7, 7, 1)]
    """
    if mentions not in ("rule", "gold"):
        raise ValueError(
            f"mentions must be 'rule' (detect mentions with rule_mentions) or 'gold' (use the documents' own "
            f"mention spans), got {mentions!r}."
        )
    clustered = []
    for index, document in enumerate(documents):
        if not isinstance(document, CorefDocument):
            raise TypeError(
                f"documents[{index}] is a {type(document).__name__}, not a CorefDocument; read the files with "
                "read_conll_coreference or build CorefDocument(name, part, words, mentions)."
            )
        if mentions == "rule":
            spans = rule_mentions(document)
        else:
            spans = [(start, end) for start, end, _ in document.mentions]
        clustered.append(_cluster_document(document, spans))
    return clustered
