"""Defects a newcomer met (issue 32, section 3): input checks and messages, what the generated cards say, and the
README's statements that can be checked without training."""

import re
from pathlib import Path

import pytest
from conftest import tiny_petra_config
from test_definition_replacement import (
    TASK_TEXTS,
    bert_reader,
    definitions_dataset,
    hand_made_embeddings,
    task_token_ids,
    tiny_bert,
)

from hf_entity_models import PetraForCoreference
from hf_entity_models.hub import CHECKPOINT_WRITER, model_cards, record_evaluation
from hf_entity_models.tasks.coreference import gap_gold, load_gap, score_gap
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hf_entity_models.tasks.embeddings import apply_definition_embeddings

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ inputs and messages
def test_a_lone_surrogate_in_the_task_texts_is_refused_naming_the_text():
    model, tokenizer = tiny_bert()
    found = hand_made_embeddings(task_token_ids(tokenizer))
    texts = [*TASK_TEXTS, "the cat \ud800 sat"]  # half of an escaped emoji pair, e.g. from JSON
    with pytest.raises(ValueError, match=r"Text 2 of task_texts holds a lone surrogate '\\ud800' at character 8"):
        apply_definition_embeddings(model, tokenizer, found, texts, alpha=5, show_progress=False)


@pytest.mark.parametrize(
    ("span", "cut"),
    [((14, 17), "'he '"), ((12, 15), "' Sh'"), ((13, 17), None)],
)
def test_the_suggested_whole_word_span_ends_on_the_word_not_on_the_space_after_it(span, cut):
    text = "Ann met Bob. She waved."
    if cut is None:  # a span that ends after the space but cuts nothing is the word plus a space: accepted
        assert coreference_pipeline._token_span(text, [(13, 16), (17, 22)], span, "pronoun") == [0, 1]
        return
    with pytest.raises(ValueError) as error:
        coreference_pipeline._token_span(text, [], span, "pronoun")
    message = str(error.value)
    assert f"{cut} cuts the word 'She' at (13, 16)" in message and "Use (13, 16) for the whole word" in message


# ------------------------------------------------------------------------------------------------- model cards
def _petra_card(**config_overrides):
    config = tiny_petra_config(**config_overrides)
    record_evaluation(config, "coreference", "gap", "validation", "f1", 0.71, threshold=0.04)
    record_evaluation(config, "coreference", "gap", "validation", "all_positive_f1", 0.603)
    return CHECKPOINT_WRITER.create_model_card(PetraForCoreference(config), "me/petra-gap")


def test_a_coreference_card_sets_no_hub_pipeline_tag_and_says_which_pipeline_runs_without_the_package():
    card = _petra_card()
    assert card.data.pipeline_tag is None and "pipeline_tag" not in card.content.split("\n---\n")[0]
    assert 'pipe = pipeline(model="me/petra-gap", trust_remote_code=True)' in card.text
    assert "the task the checkpoint declares (`entity-coreference`)" in card.text
    assert 'pipeline("coreference", ...)' in card.text and "KeyError: Unknown task" in card.text


def test_the_results_table_states_each_scale_and_the_all_positive_baseline():
    card = _petra_card()
    assert "| Task | Dataset | Split | Metric | Value | Threshold | Scale |" in card.text
    assert "| coreference | GAP | validation | F1 | 0.7100 | 0.04 | 0-1 |" in card.text
    assert "| F1 of linking every candidate (all-positive baseline) | 0.6030 | - | 0-1 |" in card.text
    assert "Read F1 against the all-positive baseline" in card.text
    squad = {"task": "question-answering", "dataset": "squad", "split": "validation", "metric": "f1", "value": 80.1}
    conll = {"task": "coreference", "dataset": "litbank", "split": "test", "metric": "conll_f1", "value": 38.2}
    bias = {"task": "coreference", "dataset": "gap", "split": "validation", "metric": "bias", "value": 1.07}
    perplexity = {"task": "text-generation", "dataset": "litbank", "split": "test", "metric": "perplexity",
                  "value": 90.0}
    assert [model_cards._result_row(result)["scale"] for result in (squad, conll, bias, perplexity)] == [
        "0-100", "0-100", "ratio", "-"]


def test_the_all_positive_figure_the_gap_note_quotes_is_that_of_gap_validation(shared_data):
    gold = gap_gold(load_gap(shared_data / "gap" / "gap-validation.tsv"))
    baseline = score_gap(gold, {row.example_id: (True, True) for row in gold}).f1
    assert f"({baseline:.3f} on the whole GAP validation split)" in model_cards._DATASET_RESULT_NOTES["gap"]


def test_the_whole_document_limitation_is_written_once_and_listed_by_both_memory_models():
    from hf_entity_models.hub.cards.coreference import WHOLE_DOCUMENT_LIMITATION

    sources = [path.read_text(encoding="utf-8") for path in (ROOT / "hf_entity_models" / "hub").rglob("*.py")]
    assert sum(source.count("clusters are limited mostly by mention") for source in sources) == 1
    card = _petra_card(new_entity_threshold=0.3)
    assert f"* {WHOLE_DOCUMENT_LIMITATION}" in card.text
    assert WHOLE_DOCUMENT_LIMITATION not in _petra_card().text


def test_the_definition_card_names_the_reader_truthfully():
    model, tokenizer = tiny_bert()
    reader = bert_reader()  # built here, never saved nor loaded from a folder
    result = apply_definition_embeddings(model, tokenizer, reader, TASK_TEXTS, alpha=100,
                                         definitions=definitions_dataset(), show_progress=False)
    assert "unsaved" not in result.definition_model and "built in the run" in result.definition_model
    saved = apply_definition_embeddings(model, tokenizer, reader, TASK_TEXTS, alpha=100,
                                        definitions=definitions_dataset(), show_progress=False,
                                        definition_model_description="definition-reader/ next to this checkpoint")
    assert "| Definition reader | definition-reader/ next to this checkpoint |" in saved.model_card().text


# ------------------------------------------------------------------------------------------------------ README
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_never_names_the_package_task_where_the_package_is_not_imported():
    for text in [README, *(path.read_text(encoding="utf-8") for path in (ROOT / "model_cards").glob("*.md"))]:
        # Named only to say that it fails.
        assert not re.search(r'pipeline\("coreference",[^)]*trust_remote_code=True\)(?!`? raises `KeyError)',
                             text.replace("\n", " "))
    assert "pipeline(model=\"petra-gap\", trust_remote_code=True)" in README
    assert "KeyError: Unknown task coreference" in README


def test_the_readme_says_how_to_install_the_cpu_build_of_torch_at_the_pinned_version():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pinned = re.search(r"TORCH_SPEC \?= (torch==\S+)", makefile).group(1)
    assert f"pip install {pinned} --index-url https://download.pytorch.org/whl/cpu" in README


# ---------------------------------------------------------------------------------------------------- noise
def test_small_data_steps_draw_no_progress_bar_and_large_ones_still_do(capfd):
    import datasets
    from embedding_fixtures import wordpiece_tokenizer

    from hf_entity_models.tasks.embeddings.glue import glue_features
    from hf_entity_models.training.progress import progress_bars_for

    pairs = datasets.Dataset.from_dict({"sentence1": ["the cat sat"] * 3, "sentence2": ["a dog"] * 3,
                                        "label": [0, 1, 0], "idx": [0, 1, 2]})
    glue_features(pairs, wordpiece_tokenizer())
    assert "Tokenising sentence pairs" not in capfd.readouterr().err
    with progress_bars_for(10, min_rows=5):
        assert not datasets.are_progress_bars_disabled()
    with progress_bars_for(4, min_rows=5):
        assert datasets.are_progress_bars_disabled()
    assert not datasets.are_progress_bars_disabled()  # switched on again after the small step
