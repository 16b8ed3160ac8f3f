"""`resolve_coreferences`: pronouns replaced by their entity's name, against hand-written expected texts."""

import re

import pytest

from hf_entity_models.tasks.coreference import resolve_coreferences


def word(text: str, word: str, occurrence: int = 0) -> dict:
    """The mention of the `occurrence`-th whole-word `word` in `text`, as the pipeline returns mentions."""
    match = list(re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text))[occurrence]
    return {"start": match.start(), "end": match.end(), "text": word}


def test_pronouns_take_the_first_proper_name_and_possessives_stay_possessive():
    text = "Emma smiled because she liked her book. Mr. Knightley told her that his horse was hers."
    emma = [word(text, "Emma"), word(text, "she"), word(text, "her"), word(text, "her", 1), word(text, "hers")]
    knightley = [word(text, "Mr. Knightley"), word(text, "his")]
    result = resolve_coreferences(text, [emma, knightley])
    assert result["text"] == (
        "Emma smiled because Emma liked Emma's book. Mr. Knightley told Emma that Mr. Knightley's horse was Emma's."
    )
    assert [(r["original"], r["replacement"]) for r in result["replacements"]] == [
        ("she", "Emma"), ("her", "Emma's"), ("her", "Emma"), ("his", "Mr. Knightley's"), ("hers", "Emma's")]


def test_replacement_offsets_point_into_both_texts():
    text = "Zoe Telford met Maggie in Paris. She was happy because her friend laughed."
    result = resolve_coreferences(text, [[word(text, "Zoe Telford"), word(text, "She"), word(text, "her")]])
    for replacement in result["replacements"]:
        assert text[replacement["start"]:replacement["end"]] == replacement["original"]
        assert result["text"][replacement["resolved_start"]:replacement["resolved_end"]] == replacement["replacement"]
    assert result["text"] == "Zoe Telford met Maggie in Paris. Zoe Telford was happy because Zoe Telford's friend laughed."


def test_without_a_proper_name_the_longest_mention_names_the_entity_cased_for_its_place():
    text = "The old man sat down. He said that the man was tired and he slept."
    man = [word(text, "The old man"), word(text, "He"), word(text, "the man"), word(text, "he")]
    result = resolve_coreferences(text, [man])
    # "He" starts a sentence: "The old man"; inside a sentence the determiner is lowered.
    assert result["text"] == "The old man sat down. The old man said that the man was tired and the old man slept."


def test_reflexives_and_pronoun_only_entities_are_kept():
    text = "She hurt herself. They left. Anna saw it."
    result = resolve_coreferences(text, [[word(text, "She"), word(text, "herself")], [word(text, "They")],
                                         [word(text, "Anna")]])
    assert result == {"text": text, "replacements": []}
    anna = resolve_coreferences(text, [[word(text, "Anna"), word(text, "She"), word(text, "herself")]])
    assert anna["text"] == "Anna hurt herself. They left. Anna saw it."


def test_object_her_is_not_made_possessive():
    text = "Tom gave her a ring and told her to wait. Lucy took her ring."
    lucy = [word(text, "her"), word(text, "her", 1), word(text, "Lucy"), word(text, "her", 2)]
    assert resolve_coreferences(text, [lucy])["text"] == (
        "Tom gave Lucy a ring and told Lucy to wait. Lucy took Lucy's ring.")


def test_mentions_given_as_pairs_and_nested_mentions():
    text = "His sister met John."
    his_sister = (0, len("His sister"))
    his = (0, 3)
    john = (text.index("John"), text.index("John") + 4)
    result = resolve_coreferences(text, [[his_sister], [his, john]])
    assert result["text"] == "John's sister met John."


@pytest.mark.parametrize(
    ("clusters", "error", "message"),
    [
        ([[{"start": 5, "end": 99}]], ValueError, "not a span of the text"),
        ([[{"start": 0, "end": 3, "text": "Bob"}]], ValueError, "says 'Bob'"),
        ([[{"start": 0}]], ValueError, "needs 'start' and 'end'"),
        ([[(0.0, 3)]], TypeError, "integers"),
        (["Emma"], TypeError, "list of mentions"),
    ],
)
def test_bad_clusters_are_refused_with_the_mention_named(clusters, error, message):
    with pytest.raises(error, match=message):
        resolve_coreferences("Emma smiled.", clusters)


def test_text_must_be_a_string():
    with pytest.raises(TypeError, match="str"):
        resolve_coreferences(b"Emma", [])


def test_first_and_second_person_pronouns_are_kept_and_never_name_an_entity():
    text = '"I am late," said Emma. "You are not," I told her.'
    emma = [word(text, "I"), word(text, "Emma"), word(text, "her")]
    narrator = [word(text, "You"), word(text, "I", 1)]
    result = resolve_coreferences(text, [emma, narrator])
    assert result["text"] == '"I am late," said Emma. "You are not," I told Emma.'


def test_cost_grows_linearly_with_the_text():
    import time

    def seconds(repeats: int) -> float:
        sentence = "Anna met Tom and she gave him her book. "
        text = sentence * repeats
        anna, tom = [], []
        for index in range(repeats):
            offset = index * len(sentence)
            anna += [(offset, offset + 4), (offset + 17, offset + 20), (offset + 30, offset + 33)]
            tom += [(offset + 9, offset + 12), (offset + 26, offset + 29)]
        started = time.perf_counter()
        result = resolve_coreferences(text, [anna, tom])
        assert result["text"].count("Anna gave Tom Anna's book") == repeats
        return time.perf_counter() - started

    small, large = min(seconds(2_000) for _ in range(2)), min(seconds(16_000) for _ in range(2))
    assert large < 8 * small * 3, f"8x the text took {large / small:.1f}x the time: quadratic somewhere"
