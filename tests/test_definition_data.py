"""DefinitionEMB data: WordNet glosses, number words, definition files, the prompt dataset, the collator, Trainer.

Counts are checked against the data's README and an independent line count; number words by hand.
"""

import json
import logging

import datasets
import pytest
import torch
from embedding_fixtures import (
    GPT2_TOKENIZER_DIR,
    bart_tokenizer,
    roberta_tokenizer,
    tiny_bart_config,
    tiny_roberta_config,
    wordpiece_tokenizer,
)
from transformers import AutoTokenizer

from hf_entity_models.models.definition_emb import PAPER_SETTINGS, DefinitionEmbConfig, DefinitionEmbModel
from hf_entity_models.tasks.embeddings.collator import DefinitionCollator
from hf_entity_models.tasks.embeddings.definitions import (
    definition_prompt_dataset,
    load_definitions,
    number_to_words,
    number_word_definitions,
    read_wordnet_glosses,
    split_definitions,
)
from hf_entity_models.tasks.embeddings.corruption import encoder_decoder_example
from hf_entity_models.tasks.embeddings.prompts import WordDefinition, build_definition_prompt
from hf_entity_models.tasks.embeddings.training import build_definition_trainer, definition_training_arguments

WORDNET_GLOSSES = GPT2_TOKENIZER_DIR.parents[1] / "wordnet" / "wordnet30_glosses.tsv"


@pytest.fixture(scope="module")
def all_glosses():
    return read_wordnet_glosses(WORDNET_GLOSSES, single_words_only=False)


@pytest.fixture(scope="module")
def single_word_glosses():
    return read_wordnet_glosses(WORDNET_GLOSSES)


@pytest.fixture(scope="module")
def gloss_sample(single_word_glosses):
    return single_word_glosses.select(range(0, len(single_word_glosses), 450))  # 309 glosses across the file


# ------------------------------------------------------------------------------------------------ WordNet
def test_wordnet_row_counts_match_the_readme(all_glosses, single_word_glosses, caplog):
    assert len(all_glosses) == 206_978  # README: 206,978 (lemma, synset) rows
    assert all_glosses.column_names == ["word", "part_of_speech", "definition"]
    with WORDNET_GLOSSES.open(encoding="utf-8") as handle:
        next(handle)
        multi_word = sum(1 for line in handle if " " in line.split("\t", 1)[0])
    assert len(single_word_glosses) == 206_978 - multi_word
    assert not any(" " in word for word in single_word_glosses["word"])
    with caplog.at_level(logging.INFO):
        read_wordnet_glosses(WORDNET_GLOSSES)
    assert f"dropped {multi_word} rows whose lemma has several words" in caplog.text


def test_wordnet_glosses_and_parts_of_speech(all_glosses, single_word_glosses):
    assert all_glosses[0] == {
        "word": "entity",
        "part_of_speech": "noun",
        "definition": "that which is perceived or known or inferred to have its own distinct existence (living or "
        "nonliving)",
    }
    assert all_glosses[1]["word"] == "physical entity"
    discomfort = single_word_glosses.filter(lambda row: row["word"] == "discomfort")
    assert discomfort["definition"] == [
        "an uncomfortable feeling of mental painfulness or distress",
        "the state of being tense and feeling pain",
    ]
    assert set(all_glosses.unique("part_of_speech")) == {"noun", "verb", "adjective", "adverb"}


def test_wordnet_layout_errors(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("lemma\tpos\toffset\tdefinition\texamples\ncat\tx\t1\ta pet\t\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.tsv:2: unknown WordNet part of speech 'x'"):
        read_wordnet_glosses(bad)
    other = tmp_path / "other.tsv"
    other.write_text("word\tdefinition\ncat\ta pet\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected the WordNet glosses layout"):
        read_wordnet_glosses(other)


# ------------------------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize(
    ("number", "words"),
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (40, "forty"),
        (99, "ninety-nine"),
        (100, "one hundred"),
        (105, "one hundred five"),
        (1001, "one thousand one"),
        (1990, "one thousand nine hundred ninety"),
        (2024, "two thousand twenty-four"),
        (1_000_000, "one million"),
        (3_000_000_012, "three billion twelve"),
        (
            999_999_999_999,
            "nine hundred ninety-nine billion nine hundred ninety-nine million nine hundred ninety-nine thousand "
            "nine hundred ninety-nine",
        ),
    ],
)
def test_number_to_words(number, words):
    assert number_to_words(number) == words


def test_number_to_words_range():
    with pytest.raises(ValueError, match="covers 0 .. 999,999,999,999"):
        number_to_words(10**12)
    with pytest.raises(ValueError):
        number_to_words(-1)
    with pytest.raises(TypeError):
        number_to_words(2.0)


def test_number_word_definitions_for_both_vocabularies():
    rows = number_word_definitions(roberta_tokenizer())
    by_word = dict(zip(rows["word"], rows["definition"]))
    assert len(by_word) == len(rows)  # "2" and "Ġ2" give one row
    assert set(rows["part_of_speech"]) == {"numeral"}
    assert all(word.isascii() and word.isdigit() for word in rows["word"])
    assert by_word["2"] == "two" and by_word["1990"] == "one thousand nine hundred ninety"
    assert by_word["00"] == "zero zero"  # a code, read digit by digit
    vocab = roberta_tokenizer().get_vocab()
    assert "Ġ1990" in vocab and "ĠDIS" in vocab  # sanity: the vocabulary is GPT-2's
    pieces = number_word_definitions(wordpiece_tokenizer())
    wordpiece_words = dict(zip(pieces["word"], pieces["definition"]))
    assert wordpiece_words["13"] == "thirteen" and "##" not in "".join(pieces["word"])


# ------------------------------------------------------------------------------------------------ loading
def test_load_definitions_from_files(tmp_path, single_word_glosses):
    rows = [
        {"word": "cat", "part_of_speech": "noun", "definition": "a small pet, often furry"},
        {"word": "run", "part_of_speech": "verb", "definition": 'to move "fast"'},
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    (tmp_path / "d.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "d.csv").write_text(
        'word,part_of_speech,definition\ncat,noun,"a small pet, often furry"\nrun,verb,"to move ""fast"""\n',
        encoding="utf-8",
    )
    (tmp_path / "d.tsv").write_text(
        'word\tpart_of_speech\tdefinition\ncat\tnoun\ta small pet, often furry\nrun\tverb\tto move "fast"\n',
        encoding="utf-8",
    )
    for name in ("d.jsonl", "d.json", "d.csv", "d.tsv"):
        assert load_definitions(tmp_path / name).to_list() == rows, name
    assert len(load_definitions(WORDNET_GLOSSES)) == len(single_word_glosses)


def test_load_definitions_from_a_dataset_or_the_hub(monkeypatch):
    table = datasets.Dataset.from_dict(
        {"word": [" cat "], "part_of_speech": ["noun"], "definition": ["a pet"], "x": [1]}
    )
    assert load_definitions(table).to_list() == [{"word": "cat", "part_of_speech": "noun", "definition": "a pet"}]
    calls = []

    def fake_load_dataset(name, split):
        calls.append((name, split))
        return table

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert len(load_definitions("someone/wiktionary-definitions", split="validation")) == 1
    assert calls == [("someone/wiktionary-definitions", "validation")]


def test_load_definitions_errors(tmp_path):
    with pytest.raises(ValueError, match=r"has no \['part_of_speech'\] column"):
        load_definitions(datasets.Dataset.from_dict({"word": ["cat"], "definition": ["a pet"]}))
    with pytest.raises(ValueError, match=r"row 1 \(word 'dog'\) has an empty or non-text definition"):
        load_definitions(
            datasets.Dataset.from_dict(
                {"word": ["cat", "dog"], "part_of_speech": ["noun", "noun"], "definition": ["a pet", " "]}
            )
        )
    with pytest.raises(FileNotFoundError):
        load_definitions(tmp_path / "missing.tsv")
    (tmp_path / "d.xml").write_text("<x/>", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown definitions file type"):
        load_definitions(tmp_path / "d.xml")


@pytest.mark.parametrize(
    "name, content",
    [
        ("empty.tsv", b""),
        ("header.tsv", b"word\tpart_of_speech\tdefinition\n"),
        ("empty.csv", b""),
        ("header.csv", b"word,part_of_speech,definition\r\n"),
        ("empty.json", b"[]"),
        ("blank.jsonl", b"\n\n"),
    ],
)
def test_a_definitions_file_without_rows_is_refused_naming_it(tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError, match=rf"{tmp_path / name} holds no definitions \(it is empty, or has a header "
                                         r"only\); give one row per word"):
        load_definitions(tmp_path / name)
    with pytest.raises(ValueError, match="the given Dataset holds no definitions"):
        load_definitions(datasets.Dataset.from_dict({"word": [], "part_of_speech": [], "definition": []}))


def test_empty_or_header_only_wordnet_glosses_are_refused(tmp_path):
    path = tmp_path / "glosses.tsv"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"The WordNet glosses file {path} is empty"):
        read_wordnet_glosses(path)
    path.write_bytes(b"lemma\tpos\toffset\tdefinition\texamples\n")
    for reader in (read_wordnet_glosses, load_definitions):
        with pytest.raises(ValueError, match=rf"The WordNet glosses file {path} has no gloss to keep: it has a header "
                                             "only"):
            reader(path)
    path.write_bytes(b"lemma\tpos\toffset\tdefinition\texamples\nice cream\tn\t1\ta frozen dessert\t\n")
    with pytest.raises(ValueError, match=r"all its 1 lemmas have several words; pass single_words_only=False"):
        read_wordnet_glosses(path)
    assert len(read_wordnet_glosses(path, single_words_only=False)) == 1


@pytest.mark.parametrize("name", ["d.csv", "d.tsv", "d.json", "d.jsonl", "glosses.tsv"])
def test_a_definitions_file_that_is_not_utf8_is_refused_naming_it(tmp_path, name):
    """Latin-1 or binary files raised a bare UnicodeDecodeError that named no file."""
    header = b"lemma\tpos\toffset\tdefinition\texamples\n" if name == "glosses.tsv" else b"word,x\n"
    (tmp_path / name).write_bytes(header + b"caf\xe9\n")
    with pytest.raises(ValueError, match=rf"The definitions file {tmp_path / name} is not UTF-8 text: byte 0xe9 at "
                                         r"line 2, column 4"):
        load_definitions(tmp_path / name)
    if name == "glosses.tsv":
        with pytest.raises(ValueError, match=r"The WordNet glosses file .* is not UTF-8 text"):
            read_wordnet_glosses(tmp_path / name)


# ------------------------------------------------------------------------------------------------ prompt dataset
@pytest.mark.parametrize("tokenizer_name", ["roberta", "wordpiece"])
def test_prompt_dataset_over_real_glosses(gloss_sample, tokenizer_name):
    tokenizer = roberta_tokenizer() if tokenizer_name == "roberta" else wordpiece_tokenizer()
    prompts = definition_prompt_dataset(gloss_sample, tokenizer, word_slots="paper")
    assert prompts.column_names == ["input_ids", "corruption_spans", "word"]
    assert len(prompts) == len(gloss_sample) and prompts["word"] == gloss_sample["word"]
    for row, gloss in zip(prompts.select(range(0, len(prompts), 30)), gloss_sample.select(range(0, len(prompts), 30))):
        word_span = row["input_ids"][row["corruption_spans"][0][0] : row["corruption_spans"][0][1]]
        expected_word = " " + gloss["word"] if tokenizer_name == "roberta" else gloss["word"].lower()
        assert tokenizer.decode(word_span) == expected_word
        text = tokenizer.decode(row["input_ids"], skip_special_tokens=True)
        if tokenizer_name == "roberta":
            word, capitalized = gloss["word"], gloss["word"][:1].upper() + gloss["word"][1:]
            assert text == (
                f"The definition of {word} is {gloss['definition']}. Its part-of-speech, bpe-form without space, "
                f"capitalization, and uppercase are {gloss['part_of_speech']}, {word}, {capitalized}, and "
                f"{word.upper()}, respectively."
            )
    assert max(len(ids) for ids in prompts["input_ids"]) <= tokenizer.model_max_length


def test_long_definitions_are_shortened_with_a_warning(gloss_sample, caplog):
    tokenizer = roberta_tokenizer()
    full = definition_prompt_dataset(gloss_sample, tokenizer)
    limit = 70
    expected = sum(1 for ids in full["input_ids"] if len(ids) > limit)
    assert expected > 10
    with caplog.at_level(logging.WARNING):
        short = definition_prompt_dataset(gloss_sample, tokenizer, max_length=limit)
    assert f"{expected} of {len(gloss_sample)} definitions were longer than max_length=70" in caplog.text
    assert len(short) == len(full)  # nothing dropped
    for long_row, short_row in zip(full, short):
        assert len(short_row["input_ids"]) == min(limit, len(long_row["input_ids"]))
        long_forms = [long_row["input_ids"][start:end] for start, end in long_row["corruption_spans"]]
        short_forms = [short_row["input_ids"][start:end] for start, end in short_row["corruption_spans"]]
        assert long_forms == short_forms
    with pytest.raises(ValueError, match="needs .* tokens even with a one-token definition"):
        definition_prompt_dataset(gloss_sample, tokenizer, max_length=30)


def test_split_definitions(gloss_sample):
    parts = split_definitions(gloss_sample, validation_size=50, seed=3)
    assert (len(parts["train"]), len(parts["validation"])) == (len(gloss_sample) - 50, 50)
    key = lambda row: (row["word"], row["definition"])  # noqa: E731
    train, validation = set(map(key, parts["train"])), set(map(key, parts["validation"]))
    assert not train & validation and len(train | validation) == len(set(map(key, gloss_sample)))
    assert split_definitions(gloss_sample, 50, seed=3)["validation"]["word"] == parts["validation"]["word"]
    assert split_definitions(gloss_sample, 50, seed=4)["validation"]["word"] != parts["validation"]["word"]
    assert len(split_definitions(gloss_sample, 0.1, seed=0)["validation"]) == round(0.1 * len(gloss_sample))
    with pytest.raises(ValueError, match="both parts must be non-empty"):
        split_definitions(gloss_sample, len(gloss_sample), seed=0)


# ------------------------------------------------------------------------------------------------ collator
def _rows(tokenizer, *entries):
    prompts = [build_definition_prompt(tokenizer, WordDefinition(*entry)) for entry in entries]
    return prompts, [
        {
            "input_ids": prompt.input_ids,
            "corruption_spans": [list(span) for span in prompt.corruption_spans],
            "word": prompt.word,
        }
        for prompt in prompts
    ]


ENTRIES = (("discomfort", "verb", "To cause annoyance or distress to"), ("cat", "noun", "a small pet"))


def test_encoder_only_batches():
    tokenizer = roberta_tokenizer()
    prompts, rows = _rows(tokenizer, *ENTRIES)
    collator = DefinitionCollator(tokenizer, "encoder-only", seed=5, word_slots="paper")
    batch = collator(rows)
    assert sorted(batch) == ["attention_mask", "input_ids", "labels"]
    lengths = [len(prompt.input_ids) for prompt in prompts]
    assert batch["input_ids"].shape == (2, max(lengths))
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths
    short = lengths.index(min(lengths))
    assert bool((batch["input_ids"][short, min(lengths) :] == tokenizer.pad_token_id).all())
    assert bool((batch["labels"][short, min(lengths) :] == -100).all())
    for row, prompt in enumerate(prompts):
        expected = torch.full((max(lengths),), -100)
        for position in (p for start, end in prompt.corruption_spans for p in range(start, end)):
            expected[position] = prompt.input_ids[position]
        assert torch.equal(batch["labels"][row], expected)
    # Fresh corruption every call, reproducible from the seed.
    later = [collator(rows)["input_ids"] for _ in range(5)]
    assert any(not torch.equal(batch["input_ids"], ids) for ids in later)
    again = DefinitionCollator(tokenizer, "encoder-only", seed=5, word_slots="paper")
    assert torch.equal(again(rows)["input_ids"], batch["input_ids"])


def test_distinct_slot_batches_mask_every_slot_token_and_can_label_single_token_slots_only():
    tokenizer = roberta_tokenizer()
    prompts, rows = _rows(tokenizer, *ENTRIES)
    batch = DefinitionCollator(tokenizer, "encoder-only", seed=5)(rows)  # word_slots="distinct"
    pooled = DefinitionCollator(tokenizer, "encoder-only", seed=5, single_token_slots_only=True)(rows)
    for row, prompt in enumerate(prompts):
        slots = set(prompt.span_positions())
        for position, token in enumerate(prompt.input_ids):
            expected = tokenizer.mask_token_id if position in slots else token
            assert batch["input_ids"][row, position] == expected
            assert pooled["input_ids"][row, position] == expected  # unlabelled slots are hidden too
            assert batch["labels"][row, position] == (token if position in slots else -100)
        single = {start for start, end in prompt.corruption_spans if end - start == 1}
        assert {int(p) for p in (pooled["labels"][row] != -100).nonzero().flatten()} == single
    # "cat" is one token in every slot, "discomfort" is several in some.
    assert 0 < int((pooled["labels"][0] != -100).sum()) < int((batch["labels"][0] != -100).sum())


def test_encoder_decoder_batches():
    tokenizer = bart_tokenizer()
    prompts, rows = _rows(tokenizer, *ENTRIES)
    batch = DefinitionCollator(tokenizer, "encoder-decoder", decoder_start_token_id=2)(rows)
    assert sorted(batch) == ["attention_mask", "decoder_attention_mask", "decoder_input_ids", "input_ids", "labels"]
    for row, prompt in enumerate(prompts):
        example = encoder_decoder_example(prompt, tokenizer, decoder_start_token_id=2)
        source, target = len(example["input_ids"]), len(example["decoder_input_ids"])
        assert batch["input_ids"][row, :source].tolist() == example["input_ids"]
        assert batch["attention_mask"][row].sum() == source
        assert batch["decoder_input_ids"][row, :target].tolist() == example["decoder_input_ids"]
        assert batch["decoder_attention_mask"][row].sum() == target
        assert batch["labels"][row, :target].tolist() == example["labels"]
        assert bool((batch["labels"][row, target:] == -100).all())
        assert bool((batch["decoder_input_ids"][row, target:] == tokenizer.pad_token_id).all())


def test_collator_errors():
    gpt2 = AutoTokenizer.from_pretrained(GPT2_TOKENIZER_DIR)
    with pytest.raises(ValueError, match="encoder-only reader needs a tokenizer with a mask token"):
        DefinitionCollator(gpt2, "encoder-only")
    with pytest.raises(ValueError, match="encoder-decoder reader"):
        DefinitionCollator(gpt2, "encoder-decoder")
    with pytest.raises(ValueError, match="reader_type must be one of"):
        DefinitionCollator(roberta_tokenizer(), "decoder-only")
    with pytest.raises(TypeError, match="'input_ids' and 'corruption_spans'"):
        DefinitionCollator(roberta_tokenizer(), "encoder-only")([{"input_ids": [0, 5, 2]}])


# ------------------------------------------------------------------------------------------------ training
def test_training_arguments_follow_the_paper(tmp_path):
    args = definition_training_arguments(str(tmp_path), max_steps=3, learning_rate=5e-4)
    assert args.learning_rate == 5e-4 and args.lr_scheduler_type.value == "inverse_sqrt"
    assert args.optim.value == "adamw_torch" and args.weight_decay == 0.0
    assert args.remove_unused_columns is False and args.label_names == ["labels"] and args.report_to == []
    assert definition_training_arguments(str(tmp_path)).learning_rate == 1e-4


@pytest.mark.parametrize("reader", ["roberta", "bart"])
def test_trainer_smoke_on_real_glosses(tmp_path, gloss_sample, reader):
    torch.manual_seed(0)
    tokenizer = roberta_tokenizer() if reader == "roberta" else bart_tokenizer()
    config = tiny_roberta_config(tokenizer) if reader == "roberta" else tiny_bart_config(tokenizer)
    model = DefinitionEmbModel(DefinitionEmbConfig(reader_config=config))
    prompts = definition_prompt_dataset(gloss_sample.select(range(32)), tokenizer, max_length=128)
    args = definition_training_arguments(
        str(tmp_path), max_steps=2, per_device_train_batch_size=8, per_device_eval_batch_size=16, use_cpu=True,
        save_strategy="no", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = build_definition_trainer(model, tokenizer, prompts, prompts.select(range(16)), args=args, seed=0)
    assert trainer.data_collator.reader_type == ("encoder-only" if reader == "roberta" else "encoder-decoder")
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert torch.isfinite(torch.tensor(trainer.evaluate()["eval_loss"]))
    with pytest.raises(ValueError, match="remove_unused_columns"):
        keep_no_columns = definition_training_arguments(str(tmp_path), remove_unused_columns=True)
        build_definition_trainer(model, tokenizer, prompts, args=keep_no_columns)


def test_every_evaluation_reads_the_same_corruption_and_training_lowers_the_held_out_loss(tmp_path, gloss_sample):
    from transformers import RobertaModel

    torch.manual_seed(0)
    tokenizer = roberta_tokenizer()
    # The paper's corruption is random (the default masks every slot, the same at every evaluation by construction),
    # and its visible slots let a tiny random reader lower the loss on unseen words.
    model = DefinitionEmbModel.from_pretrained_model(RobertaModel(tiny_roberta_config(tokenizer)), **PAPER_SETTINGS)
    prompts = definition_prompt_dataset(gloss_sample.select(range(48)), tokenizer, max_length=128, word_slots="paper")
    train, held_out = prompts.select(range(32)), prompts.select(range(32, 48))
    args = definition_training_arguments(
        str(tmp_path), max_steps=25, per_device_train_batch_size=8, per_device_eval_batch_size=8, learning_rate=3e-3,
        warmup_steps=0, use_cpu=True, save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = build_definition_trainer(model, tokenizer, train, held_out, args=args, seed=0)
    before = trainer.evaluate()["eval_loss"]
    assert trainer.evaluate()["eval_loss"] == before  # identical inputs: the evaluation corruption is fixed
    trainer.train()
    assert trainer.evaluate()["eval_loss"] < 0.5 * before
