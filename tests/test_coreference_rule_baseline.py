"""The word-list rule baseline for document-level coreference (no training).

Every small case below is worked out by hand from the rules in the module docstring; the comments give the
reasoning. One real LitBank book checks the output's shape in both mention modes.
"""

from __future__ import annotations

import pytest

from hf_entity_models.tasks.coreference.conll import CorefDocument, read_conll_coreference
from hf_entity_models.tasks.coreference.rule_baseline import (
    DETECTED_PRONOUNS,
    rule_baseline_clusters,
    rule_mentions,
)


def document(text: str, mentions: list[tuple[int, int, int]] | None = None) -> CorefDocument:
    return CorefDocument("toy", 0, text.split(), mentions or [])


def clusters(text: str, mentions: str = "rule", gold: list[tuple[int, int, int]] | None = None) -> list:
    return rule_baseline_clusters([document(text, gold)], mentions=mentions)[0].mentions


# ------------------------------------------------------------------------------------------------ mention detection
def test_pronouns_are_detected_but_not_it_or_a_chapter_number():
    text = "CHAPTER I She told him that it was hers , and they saw me , my dear ; you and we agreed ."
    #       0       1 2   3    4   5    6  7   8    9 10  11   12  13 14 15 16  17 18  19  20 21     22
    assert rule_mentions(document(text)) == [(2, 2), (4, 4), (8, 8), (11, 11), (13, 13), (15, 15), (18, 18), (20, 20)]
    assert {"he", "she", "they", "i", "we", "you", "thee", "herself"} <= DETECTED_PRONOUNS
    assert not {"it", "its", "itself"} & DETECTED_PRONOUNS


def test_capitalised_names_titles_and_sentence_initial_function_words():
    text = "When Mr. Darcy came , the Lord Chancellor and Lincoln 's Inn met Anne . Anne smiled ."
    #       0    1   2     3    4 5   6    7          8   9       10 11  12  13   14 15   16     17
    # "When" is a sentence-initial function word; "Mr." is a title; "the" before a run joins the mention; a run
    # stops at "'s"; "Anne" at a sentence start is a known first name.
    assert rule_mentions(document(text)) == [(1, 2), (5, 7), (9, 9), (11, 11), (13, 13), (15, 15)]


def test_sentence_initial_capitalised_word_is_a_name_only_if_the_document_capitalises_it_inside_sentences():
    text = "Yesterday Holmes came . Holmes sat . Yesterday was cold ."
    #       0         1      2    3 4      5   6 7         8   9    10
    # "Holmes" occurs capitalised inside a sentence (1), so it is a name at a sentence start (4) too;
    # "Yesterday" only ever starts sentences.
    assert rule_mentions(document(text)) == [(1, 1), (4, 4)]


def test_noun_phrases_end_at_an_entity_noun():
    text = "She saw the old man 's hat , the fog and his father . “ Yes , sir , ” said a policeman ."
    #       0   1   2   3   4   5  6   7 8   9   10  11  12     13 14 15 16 17 18 19 20  21 22      23
    # "the old man" stops before "'s" ("hat" then starts no phrase); "the fog" has no entity noun; "his father"
    # also gives the pronoun "his"; "sir" is a vocative; "Yes" after the quote is an interjection.
    assert rule_mentions(document(text)) == [(0, 0), (2, 4), (11, 12), (11, 11), (17, 17), (21, 22)]


def test_bare_plurals_of_people_are_mentions():
    text = "Women and children waited , and the women sang ."
    #       0     1   2        3      4 5   6   7     8    9
    assert rule_mentions(document(text)) == [(0, 0), (2, 2), (6, 7)]


# ------------------------------------------------------------------------------------------------ linking
def test_names_join_by_token_subset_without_a_gender_clash():
    text = "Sir Walter Elliot met Mr. Bennet and Mrs. Bennet . Walter left . Bennet stayed ."
    #       0   1      2      3   4   5      6   7    8      9 10     11   12 13     14     15
    # Mr. Bennet ({bennet}, masculine) is not Walter's; Mrs. Bennet is feminine so not Mr. Bennet's; "Walter"
    # is a subset of "Sir Walter Elliot"; the bare "Bennet" fits both Bennets and joins the most recent one.
    assert clusters(text) == [(0, 2, 0), (4, 5, 1), (7, 8, 2), (10, 10, 0), (13, 13, 2)]


def test_third_person_pronouns_take_the_nearest_compatible_antecedent():
    text = "Anne met Captain Wentworth and the sailors . He smiled at her , and they cheered him ."
    #       0    1   2       3         4   5   6       7 8  9      10 11  12 13  14   15      16  17
    # He: the sailors are plural, Captain Wentworth is masculine -> 1. her: skips He, the sailors and the Captain
    # for Anne (a feminine first name) -> 0. they: the sailors -> 2. him: the nearest masculine is "He" -> 1.
    assert clusters(text) == [(0, 0, 0), (2, 3, 1), (5, 6, 2), (8, 8, 1), (11, 11, 0), (14, 14, 2), (16, 16, 1)]


def test_an_unknown_name_takes_the_gender_of_its_first_gendered_pronoun():
    text = "Then Holmes rose . He sat . Then Jocelyn came . She nodded and he bowed ."
    #       0    1      2    3 4  5   6 7    8       9    10 11  12     13  14 15    16
    # Holmes becomes masculine through "He"; Jocelyn (unknown) takes "She" and becomes feminine, so the last "he"
    # skips her and reaches Holmes' chain.
    assert clusters(text) == [(1, 1, 0), (4, 4, 0), (8, 8, 1), (11, 11, 1), (14, 14, 0)]


def test_a_pronoun_without_compatible_antecedent_starts_an_entity():
    text = "The house stood . She came , and they left ."
    #       0   1     2     3 4   5    6 7   8    9    10
    # "the house" is a thing: neither "She" nor "they" can refer to it.
    assert clusters(text) == [(0, 1, 0), (4, 4, 1), (8, 8, 2)]


def test_first_and_second_person_form_one_entity_each_per_document():
    text = "Tom came . I met him . “ I know you , ” I said . “ We know , ” said Tom ."
    #       0   1    2 3 4   5   6 7 8 9    10  11 12 13 14 15 16 17 18 19 20 21  22  23
    # Every I is the one first-person entity, in narration and in quotations; "him" skips "I" for Tom.
    assert clusters(text) == [(0, 0, 0), (3, 3, 1), (5, 5, 0), (8, 8, 1), (10, 10, 2), (13, 13, 1), (17, 17, 3),
                              (22, 22, 0)]


def test_noun_phrases_join_only_the_same_lower_cased_string():
    text = "A man came . The man sat by a woman , and the man left . The men went ."
    #       0 1   2    3 4   5   6   7  8 9     10 11 12  13  14  15 16  17  18   19
    assert clusters(text) == [(0, 1, 0), (4, 5, 1), (8, 9, 2), (12, 13, 1), (16, 17, 3)]


def test_gold_mode_uses_the_gold_spans_and_ignores_their_cluster_ids():
    text = "The house stood . It was old , and its roof leaked ."
    #       0   1     2     3 4  5   6   7 8   9   10   11     12
    gold = [(0, 1, 7), (4, 4, 8), (9, 9, 9)]
    # "It" and "its" are not detected in the rule mode, but as gold mentions they link to the thing "the house".
    assert clusters(text, "gold", gold) == [(0, 1, 0), (4, 4, 0), (9, 9, 0)]
    assert clusters(text, "rule", gold) == [(0, 1, 0)]


def test_gold_mode_types_names_and_noun_phrases():
    text = "the Lord Chancellor visited the little town of Hanover . Later the Chancellor left Hanover ."
    #       0   1    2          3       4   5      6    7  8       9 10    11  12         13   14      15
    gold = [(0, 2, 1), (4, 8, 2), (8, 8, 3), (11, 12, 1), (14, 14, 3)]
    # "the little town of Hanover" is a noun phrase (its first word is lower case), "Hanover" inside it a name;
    # "the Chancellor" ({chancellor}) joins "the Lord Chancellor" (title "Lord" left out).
    assert clusters(text, "gold", gold) == [(0, 2, 0), (4, 8, 1), (8, 8, 2), (11, 12, 0), (14, 14, 2)]


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="mentions must be 'rule'.*or 'gold'"):
        rule_baseline_clusters([document("He left .")], mentions="predicted")
    with pytest.raises(TypeError, match=r"documents\[0\] is a str, not a CorefDocument"):
        rule_baseline_clusters(["He left ."])


# ------------------------------------------------------------------------------------------------ a real book
def test_one_litbank_book_in_both_modes(shared_data):
    path = shared_data / "litbank" / "conll" / "105_persuasion_brat.conll"
    (book,) = read_conll_coreference(path)
    rule, gold = (rule_baseline_clusters([book], mentions=mode)[0] for mode in ("rule", "gold"))
    for output in (rule, gold):
        assert (output.name, output.part, output.words) == (book.name, book.part, book.words)
        assert output.mentions and all(0 <= first <= last < len(book.words) for first, last, _ in output.mentions)
    assert sorted((first, last) for first, last, _ in gold.mentions) == sorted(
        (first, last) for first, last, _ in book.mentions
    )
    rule_spans = [(first, last) for first, last, _ in rule.mentions]
    assert sorted(rule_spans) == sorted(rule_mentions(book)) and len(set(rule_spans)) == len(rule_spans)
    # Sanity, not a tuned figure: most gold mentions of the book are found, and most found ones are gold.
    found = set(rule_spans) & {(first, last) for first, last, _ in book.mentions}
    assert len(found) > 0.6 * len(book.mentions) and len(found) > 0.6 * len(rule_spans)
    # "Sir Walter Elliot" and the later "Sir Walter" are one entity.
    entity_of = {(first, last): cluster for first, last, cluster in rule.mentions}
    walter = [span for span in entity_of if book.words[span[0]: span[1] + 1][:2] == ["Sir", "Walter"]]
    assert len(walter) > 2 and len({entity_of[span] for span in walter}) == 1
