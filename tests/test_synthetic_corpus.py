"""The built-in people-and-pronouns corpus: GAP-valid offsets, labels that follow the stated cues, balance, seeds."""

import re
from collections import Counter

import pytest

from hf_entity_models.tasks.coreference import load_gap, pronoun_gender
from hf_entity_models.tasks.coreference.gap import GAP_COLUMNS
from hf_entity_models.tasks.coreference.synthetic import (
    FEMALE_FIRST_NAMES,
    MALE_FIRST_NAMES,
    generate_people_corpus,
    generate_people_stories,
    write_people_corpus_tsv,
)

NUM_ROWS = 600
NAME_GENDER = {**{name: "M" for name in MALE_FIRST_NAMES}, **{name: "F" for name in FEMALE_FIRST_NAMES}}


@pytest.fixture(scope="module")
def stories():
    return generate_people_stories(NUM_ROWS, seed=7)


def gender_of(name: str) -> str:
    """Gender from the first word of a mention, looked up independently of the generator's Person objects."""
    return NAME_GENDER[name.split()[0]]


def first_name_in(sentence: str) -> str:
    """The first word of a sentence that is a known first name (every template puts the subject first)."""
    return next(word for word in re.findall(r"[A-Z][a-z]+", sentence) if word in NAME_GENDER)


def sentences_with_offsets(text: str) -> list[tuple[int, str]]:
    return [(match.start(), match.group()) for match in re.finditer(r"[^.]+\.", text)]


def test_name_lists_do_not_share_a_name():
    assert not set(MALE_FIRST_NAMES) & set(FEMALE_FIRST_NAMES)


def test_tsv_round_trips_through_load_gap_which_checks_every_offset(tmp_path):
    path = write_people_corpus_tsv(tmp_path / "people.tsv", 200, seed=3, id_prefix="people-dev")
    loaded = load_gap(path)  # raises if any A, B or pronoun offset does not point at its mention
    generated = generate_people_corpus(200, seed=3, id_prefix="people-dev")
    assert loaded.column_names == list(GAP_COLUMNS) == generated.column_names
    assert loaded.features == generated.features
    assert loaded.to_list() == generated.to_list()
    assert path.read_text().splitlines()[0].split("\t")[:4] == ["ID", "Text", "Pronoun", "Pronoun-offset"]


def test_mentions_sit_at_their_offsets_and_a_comes_before_b(stories):
    for story in stories:
        mentions = [(story.a, story.a_offset), (story.b, story.b_offset), (story.pronoun, story.pronoun_offset)]
        for mention, offset in mentions:
            assert story.text[offset : offset + len(mention)] == mention, story
            # Whole words: the characters before and after a mention are not letters.
            end = offset + len(mention)
            assert offset == 0 or not story.text[offset - 1].isalpha()
            assert end == len(story.text) or not story.text[end].isalpha()
        assert story.a_offset < story.b_offset
        assert story.a != story.b
        assert "\t" not in story.text and "\n" not in story.text


def test_gender_cue_rows_have_exactly_one_person_of_the_pronoun_gender(stories):
    rows = [story for story in stories if story.cue == "gender"]
    assert rows
    for story in rows:
        pronoun = pronoun_gender(story.pronoun)
        names_in_text = {word for word in re.findall(r"[A-Z][a-z]+", story.text) if word in NAME_GENDER}
        matching = [name for name in names_in_text if NAME_GENDER[name] == pronoun]
        assert len(matching) == 1, story.text
        # The label says the pronoun refers to A (or B) exactly when that name is the one of matching gender.
        assert story.a_coref == (gender_of(story.a) == pronoun), story
        assert story.b_coref == (gender_of(story.b) == pronoun), story


def test_subject_cue_rows_resolve_to_the_nearest_main_clause_subject(stories):
    rows = [story for story in stories if story.cue == "subject"]
    assert rows
    for story in rows:
        pronoun = pronoun_gender(story.pronoun)
        names_in_text = {word for word in re.findall(r"[A-Z][a-z]+", story.text) if word in NAME_GENDER}
        assert {NAME_GENDER[name] for name in names_in_text} == {pronoun}, "gender must not give the answer away"
        sentences = sentences_with_offsets(story.text)
        index = max(i for i, (start, _) in enumerate(sentences) if start <= story.pronoun_offset)
        if story.cataphora:
            # "Before she left the office, Ann called Eve.": the main clause follows the comma.
            antecedent = first_name_in(sentences[index][1].split(",", 1)[1])
        else:
            antecedent = first_name_in(sentences[index - 1][1])
        assert story.a_coref == (story.a.split()[0] == antecedent), story
        assert story.b_coref == (story.b.split()[0] == antecedent), story


def test_labels_never_both_true_and_neither_rows_name_a_third_person(stories):
    for story in stories:
        assert not (story.a_coref and story.b_coref)
        if not (story.a_coref or story.b_coref):
            assert len(story.people) == 3
            assert story.referent not in (story.a_person, story.b_person)
            assert story.referent.short_name in story.text


def test_genders_cues_and_outcomes_are_balanced(stories):
    genders = Counter(pronoun_gender(story.pronoun) for story in stories)
    assert abs(genders["M"] - genders["F"]) <= 1
    cues = Counter(story.cue for story in stories)
    assert abs(cues["gender"] - cues["subject"]) <= 1
    outcomes = Counter("A" if story.a_coref else "B" if story.b_coref else "neither" for story in stories)
    assert 0.35 < outcomes["A"] / NUM_ROWS < 0.6
    assert 0.3 < outcomes["B"] / NUM_ROWS < 0.6
    assert 0.04 < outcomes["neither"] / NUM_ROWS < 0.2
    assert {story.pronoun_form for story in stories} == {"subject", "object", "possessive"}
    assert 0.05 < sum(story.cataphora for story in stories) / NUM_ROWS < 0.3
    assert any(" " in story.a or " " in story.b for story in stories), "some names have two words"
    assert any(story.pronoun[0].isupper() for story in stories) and any(story.pronoun.islower() for story in stories)


def test_names_and_texts_vary(stories):
    names = {story.a.split()[0] for story in stories} | {story.b.split()[0] for story in stories}
    assert len(names) > 0.8 * len(NAME_GENDER)
    assert len({story.text for story in stories}) == NUM_ROWS


def test_same_seed_same_rows_other_seed_other_rows():
    first = generate_people_corpus(50, seed=11)
    assert first.to_list() == generate_people_corpus(50, seed=11).to_list()
    assert first["text"] != generate_people_corpus(50, seed=12)["text"]
    assert first["id"] == [f"people-{n}" for n in range(1, 51)]


@pytest.mark.parametrize("num_rows, id_prefix", [(0, "people"), (-3, "people"), (5, ""), (5, "two words")])
def test_bad_arguments_are_refused(num_rows, id_prefix):
    with pytest.raises(ValueError):
        generate_people_corpus(num_rows, id_prefix=id_prefix)
