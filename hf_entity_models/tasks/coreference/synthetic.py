"""A built-in people-and-pronouns corpus in the GAP format, for demos, smoke runs and tests without GAP.

Every row is a short story about two or three named people of known gender (first names that are clearly male or
female, sometimes with a surname), one pronoun (he/she, him/her or his/her) and two candidate names A and B, with
0-based character offsets exactly like a GAP row. Which person the pronoun refers to is decided by one of two
cues, each used in half the rows:

* ``"gender"``: exactly one person of the story has the pronoun's gender; the pronoun refers to that person,
  whatever their position in the sentence.
* ``"subject"``: every person has the pronoun's gender; the pronoun refers to the subject of the nearest main
  clause: the subject (the first name) of the previous sentence, or, when the pronoun opens a sentence before the
  names ("Before she left, Ann called Eve."), the subject of that sentence's main clause.

In a story with three people the pronoun sometimes refers to the one who is neither A nor B (about 10% of the
rows, like GAP). Pronoun genders are balanced (equal numbers of masculine and feminine rows, +-1), and so are
the two cues. The corpus is deterministic given the seed.

Example:
    >>> rows = generate_people_corpus(4, seed=0)
    >>> rows.column_names[:4]
    ['id', 'text', 'pronoun', 'pronoun_offset']
    >>> row = rows[0]
    >>> row["text"][row["a_offset"] : row["a_offset"] + len(row["a"])] == row["a"]
    True
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from .gap import GAP_COLUMNS

__all__ = [
    "FEMALE_FIRST_NAMES",
    "MALE_FIRST_NAMES",
    "PEOPLE_CORPUS_ID",
    "PEOPLE_CORPUS_NAME",
    "PeopleStory",
    "Person",
    "generate_people_corpus",
    "generate_people_stories",
    "write_people_corpus_tsv",
]

# How results on this corpus are labelled (e.g. in `config.record_evaluation` and model cards): not a Hub dataset.
PEOPLE_CORPUS_ID = "synthetic-people"
PEOPLE_CORPUS_NAME = "Synthetic people-and-pronouns stories (hf-entity-models)"

# First names that are given (almost) only to one gender, from many languages: a model has to read the name to
# know the gender, not memorise a handful of tokens.
MALE_FIRST_NAMES: tuple[str, ...] = (
    "James", "Robert", "Michael", "David", "Thomas", "Daniel", "Matthew", "Andrew", "Joshua", "Kevin",
    "Brian", "George", "Edward", "Ronald", "Timothy", "Jason", "Jeffrey", "Ryan", "Jacob", "Gary",
    "Nicholas", "Eric", "Jonathan", "Stephen", "Larry", "Justin", "Scott", "Brandon", "Benjamin", "Samuel",
    "Gregory", "Patrick", "Raymond", "Peter", "Henry", "Walter", "Harold", "Arthur", "Carlos", "Miguel",
    "Juan", "Luis", "Ahmed", "Omar", "Hiroshi", "Kenji", "Ivan", "Dmitri", "Pierre", "Hans",
    "Giovanni", "Marco", "Rahul", "Arjun", "Kwame", "Tariq", "Liam", "Noah", "Oliver", "Lucas",
)
FEMALE_FIRST_NAMES: tuple[str, ...] = (
    "Mary", "Patricia", "Jennifer", "Linda", "Elizabeth", "Barbara", "Susan", "Jessica", "Sarah", "Karen",
    "Nancy", "Lisa", "Margaret", "Sandra", "Ashley", "Emily", "Donna", "Michelle", "Dorothy", "Carol",
    "Amanda", "Melissa", "Deborah", "Stephanie", "Rebecca", "Laura", "Sharon", "Cynthia", "Kathleen", "Amy",
    "Angela", "Helen", "Anna", "Brenda", "Pamela", "Nicole", "Emma", "Olivia", "Sophia", "Isabella",
    "Maria", "Lucia", "Carmen", "Fatima", "Aisha", "Yuki", "Sakura", "Olga", "Natasha", "Claire",
    "Ingrid", "Giulia", "Francesca", "Priya", "Ananya", "Amara", "Leila", "Grace", "Chloe", "Victoria",
)
SURNAMES: tuple[str, ...] = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Wilson", "Anderson", "Taylor", "Moore", "Jackson", "Martin", "Lee", "Thompson", "White", "Harris",
    "Clark", "Lewis", "Walker", "Young", "Allen", "King", "Wright", "Lopez", "Hill", "Green",
    "Tanaka", "Suzuki", "Petrov", "Novak", "Rossi", "Bianchi", "Dubois", "Schmidt", "Patel", "Okafor",
    "Nguyen", "Kim", "Haddad", "Larsen", "Kowalski", "Silva", "Costa", "Murphy", "Fischer", "Mensah",
)

# Sentences in which {s} is the grammatical subject (and the first name) and {o} the object.
EVENT_TEMPLATES: tuple[str, ...] = (
    "{s} met {o} at the {place}.",
    "{s} called {o} on {day}.",
    "{s} visited {o} in {city}.",
    "{s} invited {o} to the {event}.",
    "{s} thanked {o} for the {thing}.",
    "{s} waited for {o} outside the {place}.",
    "Later, {s} helped {o} with the {task}.",
    "On {day}, {s} emailed {o} about the {task}.",
    "{s} sat next to {o} at the {event}.",
    "{s} lent {o} a {thing}.",
    "After the {event}, {s} drove {o} back to {city}.",
    "{s} argued with {o} about the {task}.",
)
# Sentences about one person, who is the subject.
SOLO_TEMPLATES: tuple[str, ...] = (
    "{s} arrived in {city} on {day}.",
    "{s} was waiting at the {place}.",
    "{s} joined them at the {event}.",
    "On {day}, {s} came back from {city}.",
)
# Sentences with the pronoun and no name, by pronoun form. {pron} is capitalised when it opens the sentence.
PRONOUN_TEMPLATES: Mapping[str, tuple[str, ...]] = {
    "subject": (
        "{pron} was happy with how the day went.",
        "{pron} left early because of the rain.",
        "Later that evening, {pron} wrote a long letter.",
        "Everyone agreed that {pron} had done well.",
        "The next morning, {pron} took the train to {city}.",
        "{pron} said the {thing} was ready.",
    ),
    "object": (
        "The manager thanked {pron} for the help.",
        "A reporter asked {pron} about the {task}.",
        "The neighbours invited {pron} to the {event}.",
        "Nobody had told {pron} about the {event}.",
        "A stranger followed {pron} to the {place}.",
        "The committee gave {pron} a prize.",
    ),
    "possessive": (
        "{pron} brother lives in {city}.",
        "The next day, {pron} car broke down.",
        "Nobody had read {pron} report yet.",
        "{pron} phone rang during the {event}.",
        "Everyone liked {pron} idea for the {task}.",
        "{pron} office is near the {place}.",
    ),
}
# One sentence whose subordinate clause holds the pronoun before the names: the pronoun comes first.
CATAPHORA_TEMPLATES: Mapping[str, tuple[str, ...]] = {
    "subject": (
        "Before {pron} left the office, {s} called {o}.",
        "When {pron} arrived in {city}, {s} met {o}.",
        "Although {pron} was tired, {s} helped {o} with the {task}.",
    ),
    "object": (
        "After the coach had praised {pron}, {s} thanked {o}.",
        "Once the doctor had examined {pron}, {s} visited {o}.",
    ),
    "possessive": (
        "Because {pron} car had broken down, {s} phoned {o}.",
        "After {pron} lunch at the {place}, {s} visited {o}.",
    ),
}
FILLERS: Mapping[str, tuple[str, ...]] = {
    "place": ("station", "library", "museum", "bakery", "hospital", "market", "harbour", "cinema", "stadium"),
    "city": ("Paris", "Lagos", "Osaka", "Lima", "Oslo", "Cairo", "Denver", "Madrid", "Hanoi", "Toronto"),
    "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "event": ("wedding", "conference", "concert", "party", "meeting", "festival", "dinner"),
    "thing": ("book", "bicycle", "ladder", "camera", "umbrella", "map", "laptop"),
    "task": ("budget", "report", "garden", "move", "project", "repairs", "exam"),
}
PRONOUNS: Mapping[tuple[str, str], str] = {
    ("subject", "M"): "he",
    ("subject", "F"): "she",
    ("object", "M"): "him",
    ("object", "F"): "her",
    ("possessive", "M"): "his",
    ("possessive", "F"): "her",
}
CUES = ("gender", "subject")
PRONOUN_FORMS = ("subject", "object", "possessive")

# Shares of the story shapes; a third person makes about 10% of the rows "neither A nor B", as in GAP.
_THIRD_PERSON_RATE = 0.35
_NEITHER_RATE_WITH_THIRD_PERSON = 0.3
_CATAPHORA_RATE = 0.2
_TWO_WORD_NAME_RATE = 0.3
_EXTRA_EVENT_RATE = 0.3
_TRAILING_SENTENCE_RATE = 0.25
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Person:
    """A person of a story: the full name of the first mention, the shorter name of later mentions, a gender.

    Example:
        >>> Person("Maria Lopez", "Maria", "F").short_name
        'Maria'
    """

    name: str
    short_name: str
    gender: str


@dataclass(frozen=True)
class PeopleStory:
    """One generated row: the GAP fields plus what the generator intended (cue, referent, genders).

    Attributes:
        example_id, text, pronoun, pronoun_offset, a, a_offset, a_coref, b, b_offset, b_coref: The GAP fields.
        cue: ``"gender"`` or ``"subject"``: what decides the referent (see the module docstring).
        pronoun_form: ``"subject"``, ``"object"`` or ``"possessive"``.
        cataphora: The pronoun comes before every name.
        people: Everyone in the story, in order of first mention.
        referent: The person the pronoun refers to (neither A nor B in some three-person stories).
        a_person, b_person: The people named by A and B.

    Example:
        >>> story = generate_people_stories(1, seed=3)[0]
        >>> story.a_coref == (story.referent == story.a_person)
        True
    """

    example_id: str
    text: str
    pronoun: str
    pronoun_offset: int
    a: str
    a_offset: int
    a_coref: bool
    b: str
    b_offset: int
    b_coref: bool
    cue: str
    pronoun_form: str
    cataphora: bool
    people: tuple[Person, ...]
    referent: Person
    a_person: Person
    b_person: Person

    def gap_row(self) -> dict[str, Any]:
        """The row in the `load_gap` layout (snake_case columns, bool labels, an empty ``url``)."""
        return {
            "id": self.example_id,
            "text": self.text,
            "pronoun": self.pronoun,
            "pronoun_offset": self.pronoun_offset,
            "a": self.a,
            "a_offset": self.a_offset,
            "a_coref": self.a_coref,
            "b": self.b,
            "b_offset": self.b_offset,
            "b_coref": self.b_coref,
            "url": "",
        }


# ------------------------------------------------------------------------------------------------ public API
def generate_people_stories(num_rows: int, seed: int = 0, id_prefix: str = "people") -> list[PeopleStory]:
    """Generate `num_rows` stories with their GAP fields and the generator's intent.

    Args:
        num_rows: Number of rows (>= 1).
        seed: Random seed; the same seed always gives the same stories.
        id_prefix: Row ids are ``f"{id_prefix}-{n}"`` for n = 1, 2, ...; use different prefixes for different
            splits so that ids never collide.

    Returns:
        The stories, in id order.

    Raises:
        ValueError: If `num_rows` < 1 or `id_prefix` is empty or holds whitespace.

    Example:
        >>> stories = generate_people_stories(2, seed=1)
        >>> sorted(story.pronoun.lower() in {"he", "him", "his", "she", "her"} for story in stories)
        [True, True]
    """
    if not isinstance(num_rows, int) or num_rows < 1:
        raise ValueError(f"num_rows must be a positive integer, got {num_rows!r}.")
    if not id_prefix or any(character.isspace() for character in id_prefix):
        raise ValueError(f"id_prefix must be a non-empty string without whitespace, got {id_prefix!r}.")
    rng = random.Random(seed)
    # A fixed plan, shuffled, makes genders and cues balanced exactly (not just in expectation).
    plan = [("MF"[index % 2], CUES[(index // 2) % 2]) for index in range(num_rows)]
    rng.shuffle(plan)
    return [
        _generate_story(rng, f"{id_prefix}-{index + 1}", gender, cue) for index, (gender, cue) in enumerate(plan)
    ]


def generate_people_corpus(num_rows: int, seed: int = 0, id_prefix: str = "people") -> datasets.Dataset:
    """Generate the corpus as a dataset in the `load_gap` layout, ready for `prepare_gap_dataset`.

    Args:
        num_rows: Number of rows (>= 1).
        seed: Random seed; the same seed always gives the same rows.
        id_prefix: Row ids are ``f"{id_prefix}-{n}"``; use different prefixes for different splits.

    Returns:
        A dataset with the columns `GAP_COLUMNS` (``a_coref`` / ``b_coref`` are bools, offsets int64).

    Example:
        >>> train = generate_people_corpus(1200, seed=0, id_prefix="people-train")
        >>> validation = generate_people_corpus(300, seed=1, id_prefix="people-validation")
        >>> len(train), validation[0]["id"]
        (1200, 'people-validation-1')
    """
    rows = [story.gap_row() for story in generate_people_stories(num_rows, seed, id_prefix)]
    columns = {column: [row[column] for row in rows] for column in GAP_COLUMNS}
    return datasets.Dataset.from_dict(columns, features=_gap_features())


def write_people_corpus_tsv(
    path: str | os.PathLike, num_rows: int, seed: int = 0, id_prefix: str = "people"
) -> Path:
    """Write the corpus as an official GAP TSV file (header, tab separated, TRUE/FALSE), readable by `load_gap`.

    Args:
        path: File to write (its folder is created).
        num_rows: Number of rows (>= 1).
        seed: Random seed.
        id_prefix: Row ids are ``f"{id_prefix}-{n}"``.

    Returns:
        The path written.

    Example:
        >>> import tempfile
        >>> from hf_entity_models.tasks.coreference import load_gap
        >>> path = write_people_corpus_tsv(Path(tempfile.mkdtemp()) / "people.tsv", 8, seed=0)
        >>> len(load_gap(path))  # doctest: +SKIP
        8
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(_OFFICIAL_HEADER)]
    for story in generate_people_stories(num_rows, seed, id_prefix):
        lines.append("\t".join(_official_field(value) for value in story.gap_row().values()))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------- generation
_OFFICIAL_HEADER = (
    "ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref", "URL",
)


def _gap_features() -> datasets.Features:
    types = dict.fromkeys(("pronoun_offset", "a_offset", "b_offset"), "int64")
    types.update(a_coref="bool", b_coref="bool")
    return datasets.Features({column: datasets.Value(types.get(column, "string")) for column in GAP_COLUMNS})


def _official_field(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return str(value)


def _generate_story(rng: random.Random, example_id: str, gender: str, cue: str) -> PeopleStory:
    num_people = 3 if rng.random() < _THIRD_PERSON_RATE else 2
    pronoun_form = rng.choice(PRONOUN_FORMS)
    # Cataphora is kept to two people: "Before she left, Ann called Eve and Zoe" would blur the subject cue.
    cataphora = num_people == 2 and rng.random() < _CATAPHORA_RATE
    referent_index = rng.randrange(num_people)
    people = _draw_people(rng, _genders(num_people, gender, cue, referent_index))
    referent = people[referent_index]

    writer = _StoryWriter(rng)
    pronoun = PRONOUNS[pronoun_form, gender]
    if cataphora:
        # The referent under the subject cue is the main-clause subject, so it must come first.
        subject, other = (referent, people[1 - referent_index]) if cue == "subject" else (people[0], people[1])
        writer.write(rng.choice(CATAPHORA_TEMPLATES[pronoun_form]), s=subject, o=other, pron=pronoun)
    else:
        _write_events(rng, writer, people, referent, cue)
        writer.write(rng.choice(PRONOUN_TEMPLATES[pronoun_form]), pron=pronoun)
    if rng.random() < _TRAILING_SENTENCE_RATE:
        first, second = rng.sample(people, 2)
        writer.write(rng.choice(EVENT_TEMPLATES), s=first, o=second)

    candidates = _choose_candidates(rng, people, referent)
    a_person, b_person = sorted(candidates, key=writer.first_offset)
    return PeopleStory(
        example_id=example_id,
        text=writer.text,
        pronoun=writer.pronoun_text,
        pronoun_offset=writer.pronoun_offset,
        a=a_person.name,
        a_offset=writer.first_offset(a_person),
        a_coref=a_person == referent,
        b=b_person.name,
        b_offset=writer.first_offset(b_person),
        b_coref=b_person == referent,
        cue=cue,
        pronoun_form=pronoun_form,
        cataphora=cataphora,
        people=tuple(sorted(people, key=writer.first_offset)),
        referent=referent,
        a_person=a_person,
        b_person=b_person,
    )


def _draw_people(rng: random.Random, genders: Sequence[str]) -> list[Person]:
    """Distinct people of the given genders: distinct first names and surnames, some with a two-word name."""
    first_names = {
        "M": iter(rng.sample(MALE_FIRST_NAMES, genders.count("M"))),
        "F": iter(rng.sample(FEMALE_FIRST_NAMES, genders.count("F"))),
    }
    surnames = rng.sample(SURNAMES, len(genders))
    people = []
    for gender, surname in zip(genders, surnames):
        first_name = next(first_names[gender])
        full_name = f"{first_name} {surname}" if rng.random() < _TWO_WORD_NAME_RATE else first_name
        people.append(Person(full_name, first_name, gender))
    return people


def _genders(num_people: int, gender: str, cue: str, referent_index: int) -> list[str]:
    """Subject cue: everyone shares the pronoun's gender. Gender cue: only the referent has it."""
    other = "F" if gender == "M" else "M"
    if cue == "subject":
        return [gender] * num_people
    return [gender if index == referent_index else other for index in range(num_people)]


class _StoryWriter:
    """Renders templates sentence by sentence and records the character offset of every mention."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.text = ""
        self.pronoun_text = ""
        self.pronoun_offset = -1
        self._first_offsets: dict[Person, int] = {}

    def write(self, template: str, s: Person | None = None, o: Person | None = None, pron: str | None = None):
        sentence_start = len(self.text) + (1 if self.text else 0)
        self.text += " " if self.text else ""
        position = 0
        for match in _FIELD.finditer(template):
            self.text += template[position : match.start()]
            self._write_field(match.group(1), {"s": s, "o": o, "pron": pron}, len(self.text) == sentence_start)
            position = match.end()
        self.text += template[position:]

    def _write_field(self, field: str, people: Mapping[str, Any], opens_sentence: bool) -> None:
        if field == "pron":
            pronoun = people["pron"]
            self.pronoun_text = pronoun.capitalize() if opens_sentence else pronoun
            self.pronoun_offset = len(self.text)
            self.text += self.pronoun_text
        elif field in ("s", "o"):
            person = people[field]
            if person in self._first_offsets:
                self.text += person.short_name
            else:
                self._first_offsets[person] = len(self.text)
                self.text += person.name
        else:
            self.text += self.rng.choice(FILLERS[field])

    def first_offset(self, person: Person) -> int:
        return self._first_offsets[person]


def _write_events(
    rng: random.Random, writer: _StoryWriter, people: Sequence[Person], referent: Person, cue: str
) -> None:
    """Sentences before the pronoun; under the subject cue the last one has the referent as its subject."""
    writer.write(rng.choice(EVENT_TEMPLATES), s=people[0], o=people[1])
    last_subject = people[0]
    if len(people) == 3:
        last_subject = _introduce_third_person(rng, writer, people)
    needs_referent_last = cue == "subject" and last_subject != referent
    if needs_referent_last or rng.random() < _EXTRA_EVENT_RATE:
        subject = referent if cue == "subject" else rng.choice(people)
        writer.write(rng.choice(EVENT_TEMPLATES), s=subject, o=rng.choice([p for p in people if p != subject]))


def _introduce_third_person(rng: random.Random, writer: _StoryWriter, people: Sequence[Person]) -> Person:
    """Write a sentence that names the third person; return the subject of that sentence."""
    third, known = people[2], rng.choice(people[:2])
    shape = rng.randrange(3)
    if shape == 0:
        writer.write(rng.choice(SOLO_TEMPLATES), s=third)
        return third
    if shape == 1:
        writer.write(rng.choice(EVENT_TEMPLATES), s=third, o=known)
        return third
    writer.write(rng.choice(EVENT_TEMPLATES), s=known, o=third)
    return known


def _choose_candidates(rng: random.Random, people: Sequence[Person], referent: Person) -> tuple[Person, Person]:
    others = [person for person in people if person != referent]
    if len(people) == 3 and rng.random() < _NEITHER_RATE_WITH_THIRD_PERSON:
        return others[0], others[1]
    return referent, rng.choice(others)
