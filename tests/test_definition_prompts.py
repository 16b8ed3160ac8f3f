"""DefinitionEMB prompts (Figure 4 / 17) and corruption (Section 5.1).

Expected values are written by hand from the paper's Figure 17, or built independently at the string level (the
tokenizer splitting a text around its own special tokens) and compared with the segment-by-segment assembly.
"""

import collections

import pytest
import torch
from embedding_fixtures import GPT2_TOKENIZER_DIR, bart_tokenizer, roberta_tokenizer, wordpiece_tokenizer
from transformers import AutoTokenizer, T5Tokenizer

from hf_entity_models.tasks.embeddings.corruption import (
    IGNORE_INDEX,
    corrupt_for_encoder,
    encoder_decoder_example,
    masked_all_slots,
    masked_one_at_a_time,
)
from hf_entity_models.tasks.embeddings.prompts import (
    DefinitionPrompt,
    WordDefinition,
    build_definition_prompt,
    default_decoder_start_token_id,
    random_replacement_ids,
    slot_token_ids,
    sentinel_token_ids,
    tokenizer_convention,
    word_forms,
)

DISCOMFORT = WordDefinition("discomfort", "verb", "To cause annoyance or distress to")
FIGURE_17_A = (
    "The definition of discomfort is To cause annoyance or distress to. Its part-of-speech, bpe-form without space, "
    "capitalization, and uppercase are verb, discomfort, Discomfort, and DISCOMFORT, respectively."
)


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    """GPT-2's own tokenizer: byte-level BPE with no mask token."""
    return AutoTokenizer.from_pretrained(GPT2_TOKENIZER_DIR)


@pytest.fixture(scope="module")
def t5_like_tokenizer():
    """A tiny SentencePiece (Unigram) tokenizer with three T5 sentinels and no mask token."""
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0), (",", -3.0), (".", -3.0)]
    pieces += [(letter, -5.0) for letter in "abcdefghijklmnopqrstuvwxyzTDI"]
    pieces += [("▁" + letter, -5.5) for letter in "abcdefghijklmnopqrstuvwxyzTDI"]
    pieces += [("▁cat", -2.0), ("cat", -2.0)]
    return T5Tokenizer(vocab=pieces, extra_ids=4)


# ------------------------------------------------------------------------------------------------ templates
def test_roberta_prompt_decodes_to_figure_17a_with_exact_spans():
    tokenizer = roberta_tokenizer()
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)
    spans = [tokenizer.decode(prompt.input_ids[start:end]) for start, end in prompt.corruption_spans]
    assert spans == [" discomfort", "discomfort", " Discomfort", " DISCOMFORT"]
    assert tokenizer.decode(prompt.input_ids, skip_special_tokens=True) == FIGURE_17_A
    assert prompt.input_ids[0] == tokenizer.bos_token_id and prompt.input_ids[-1] == tokenizer.eos_token_id
    assert prompt.word == "discomfort"
    # The bpe-form slot holds no space marker; the lone marker before it belongs to the template.
    tokens = tokenizer.convert_ids_to_tokens(prompt.input_ids)
    start, end = prompt.corruption_spans[1]
    assert tokens[start:end] == ["dis", "comfort"] and tokens[start - 1] == "Ġ"


def test_word_forms_are_the_spans_and_carry_no_special_tokens():
    tokenizer = roberta_tokenizer()
    forms = word_forms(tokenizer, "discomfort")
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)
    assert list(forms) == ["word", "bpe_form", "capitalized", "uppercase"]
    assert [prompt.input_ids[start:end] for start, end in prompt.corruption_spans] == list(forms.values())
    assert forms["word"] == tokenizer(" discomfort", add_special_tokens=False)["input_ids"]
    assert forms["uppercase"] == tokenizer(" DISCOMFORT", add_special_tokens=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    assert not special & {token for ids in forms.values() for token in ids}


def test_tokenizer_conventions():
    assert tokenizer_convention(roberta_tokenizer()) == "space-marker"
    assert tokenizer_convention(bart_tokenizer()) == "space-marker"
    assert tokenizer_convention(wordpiece_tokenizer()) == "wordpiece"


def test_wordpiece_bpe_form_is_continuation_pieces():
    tokenizer = wordpiece_tokenizer()
    forms = word_forms(tokenizer, "discomfort")
    pieces = tokenizer.convert_ids_to_tokens(forms["bpe_form"])
    assert len(pieces) > 1 and all(piece.startswith("##") for piece in pieces)
    assert "".join(piece[2:] for piece in pieces) == "discomfort"
    assert tokenizer.convert_ids_to_tokens(forms["word"]) == ["discomfort"]
    # bert-base-uncased lowercases: "Discomfort" and "DISCOMFORT" become the same tokens (its own convention).
    assert forms["capitalized"] == forms["uppercase"] == forms["word"]
    prompt = build_definition_prompt(tokenizer, DISCOMFORT, word_slots="paper")
    tokens = tokenizer.convert_ids_to_tokens(prompt.input_ids)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    slots = [tokens[start:end] for start, end in prompt.corruption_spans]
    assert slots == [["discomfort"], pieces, ["discomfort"], ["discomfort"]]
    assert tokens[1:6] == ["the", "definition", "of", "discomfort", "is"]


def test_distinct_slots_drop_copies_and_pieces_an_uncased_wordpiece_tokenizer_makes():
    tokenizer = wordpiece_tokenizer()
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)  # word_slots="distinct", the default
    expected = "[CLS] the definition of discomfort is to cause annoyance or distress to. its part - of - speech is verb. [SEP]"
    assert tokenizer.decode(prompt.input_ids) == expected
    tokens = tokenizer.convert_ids_to_tokens(prompt.input_ids)
    assert [tokens[start:end] for start, end in prompt.corruption_spans] == [["discomfort"]]


def test_distinct_slots_keep_every_form_a_cased_bpe_tokenizer_tells_apart(gpt2_tokenizer):
    prompt = build_definition_prompt(gpt2_tokenizer, DISCOMFORT)
    assert gpt2_tokenizer.decode(prompt.input_ids) == FIGURE_17_A
    # "Paris" is already capitalised: its capitalised slot would repeat the word slot, so the prompt drops it.
    paris = build_definition_prompt(gpt2_tokenizer, WordDefinition("Paris", "noun", "the capital of France"))
    assert gpt2_tokenizer.decode(paris.input_ids) == (
        "The definition of Paris is the capital of France. Its part-of-speech, bpe-form without space, and uppercase "
        "are noun, Paris, and PARIS, respectively."
    )
    spans = [gpt2_tokenizer.decode(paris.input_ids[start:end]) for start, end in paris.corruption_spans]
    assert spans == [" Paris", "Paris", " PARIS"]


def test_slot_tokens_with_and_without_pieces():
    tokenizer = wordpiece_tokenizer()
    [single] = slot_token_ids(tokenizer, ["discomfort"], "distinct", single_token_slots_only=True)
    assert tokenizer.convert_ids_to_tokens(sorted(single)) == ["discomfort"]
    [paper] = slot_token_ids(tokenizer, ["discomfort"], "paper")
    assert sorted(tokenizer.convert_ids_to_tokens(sorted(paper))) == ["##com", "##dis", "##fort", "discomfort"]
    # A word the vocabulary spells in pieces has no single-token slot: no definition of its own for any piece.
    word = next(w for w in ("unbelievably", "misunderstanding", "snowboarder") if len(word_forms(tokenizer, w)["word"]) > 1)
    assert slot_token_ids(tokenizer, [word], "distinct", single_token_slots_only=True) == [set()]


def test_masked_all_slots_hides_every_slot_token():
    tokenizer = roberta_tokenizer()
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)
    masked = masked_all_slots(prompt, tokenizer.mask_token_id)
    positions = set(prompt.span_positions())
    assert len(positions) == 9  # Ġdiscomfort | dis comfort | ĠDis comfort | ĠDIS COM F ORT
    assert all(masked[index] == tokenizer.mask_token_id for index in positions)
    assert all(masked[index] == prompt.input_ids[index] for index in range(len(masked)) if index not in positions)


def test_wordpiece_bpe_form_falls_back_to_the_word_when_it_cannot_be_spelled():
    tokenizer = wordpiece_tokenizer()
    forms = word_forms(tokenizer, "snow☃")  # the snowman has no vocabulary piece at all
    assert tokenizer.convert_ids_to_tokens(forms["word"]) == ["[UNK]"]
    assert forms["bpe_form"] == forms["word"]


def test_empty_word_or_definition_is_refused_naming_the_word():
    with pytest.raises(ValueError, match="empty word"):
        WordDefinition("  ", "noun", "a thing")
    with pytest.raises(ValueError, match="'cat' has an empty definition"):
        WordDefinition("cat", "noun", " ")
    with pytest.raises(ValueError, match="'cat' has an empty part of speech"):
        WordDefinition("cat", "", "a small pet")
    with pytest.raises(ValueError, match="empty word"):
        word_forms(roberta_tokenizer(), "")


def test_definition_is_shortened_to_fit_max_length_and_word_slots_survive():
    tokenizer = roberta_tokenizer()
    full = build_definition_prompt(tokenizer, DISCOMFORT)
    short = build_definition_prompt(tokenizer, DISCOMFORT, max_length=len(full.input_ids) - 3)
    assert len(short.input_ids) == len(full.input_ids) - 3
    assert "annoyance or distress to" not in tokenizer.decode(short.input_ids)  # the last 3 definition tokens went
    assert "To cause annoyance." in tokenizer.decode(short.input_ids)
    spans = [tokenizer.decode(short.input_ids[start:end]) for start, end in short.corruption_spans]
    assert spans == [" discomfort", "discomfort", " Discomfort", " DISCOMFORT"]
    with pytest.raises(ValueError, match="'discomfort' needs .* tokens even with a one-token definition"):
        build_definition_prompt(tokenizer, DISCOMFORT, max_length=20)


def test_prompt_spans_are_validated():
    with pytest.raises(ValueError, match="outside the 3 tokens"):
        DefinitionPrompt([1, 2, 3], [(2, 5)], "x")
    with pytest.raises(ValueError, match="overlaps"):
        DefinitionPrompt([1, 2, 3, 4], [(1, 3), (2, 4)], "x")


# ------------------------------------------------------------------------------------------------ encoder-only
def test_random_replacements_exclude_every_special_token():
    tokenizer = roberta_tokenizer()
    ids = set(random_replacement_ids(tokenizer))
    # <s>=0, <pad>=1, </s>=2, <unk>=3 and <mask> (the last id) in the RoBERTa layout.
    assert not ids & {0, 1, 2, 3, len(tokenizer) - 1}
    assert len(ids) == len(tokenizer) - 5


def test_encoder_corruption_statistics():
    tokenizer = roberta_tokenizer()
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)
    original = torch.tensor(prompt.input_ids)
    in_span = torch.zeros(len(original), dtype=torch.bool)
    for start, end in prompt.corruption_spans:
        in_span[start:end] = True
    # A tensor, as the collator passes it: a list of the ~50,000 ids would be converted again on each of the draws.
    replacement_ids = torch.tensor(random_replacement_ids(tokenizer))
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
    mask_id = tokenizer.mask_token_id
    generator = torch.Generator().manual_seed(1234)
    counts = collections.Counter()
    draws = 2000
    for _ in range(draws):
        ids, labels = corrupt_for_encoder(
            prompt.input_ids, prompt.corruption_spans, mask_id, replacement_ids, generator
        )
        assert torch.equal(ids[~in_span], original[~in_span])
        assert torch.equal(labels[in_span], original[in_span])
        assert bool((labels[~in_span] == IGNORE_INDEX).all())
        span_ids, span_original = ids[in_span], original[in_span]
        masked = span_ids == mask_id
        changed = (span_ids != span_original) & ~masked
        assert not bool(torch.isin(span_ids[changed], special).any())
        counts["mask"] += int(masked.sum())
        counts["random"] += int(changed.sum())
        counts["kept"] += int((span_ids == span_original).sum())
    total = draws * int(in_span.sum())
    assert sum(counts.values()) == total
    # 18,000 span tokens: the standard error of each fraction is below 0.004.
    assert abs(counts["mask"] / total - 0.5) < 0.02
    assert abs(counts["random"] / total - 0.25) < 0.02
    assert abs(counts["kept"] / total - 0.25) < 0.02


def test_same_seed_same_corruption():
    tokenizer = roberta_tokenizer()
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)
    replacement_ids = random_replacement_ids(tokenizer)
    mask_id = tokenizer.mask_token_id

    def draw(seed):
        generator = torch.Generator().manual_seed(seed)
        draws = []
        for _ in range(20):
            ids, _ = corrupt_for_encoder(prompt.input_ids, prompt.corruption_spans, mask_id, replacement_ids, generator)
            draws.append(ids.tolist())
        return draws

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_corruption_probabilities_are_checked():
    with pytest.raises(ValueError, match="sum to at most 1"):
        corrupt_for_encoder([0, 5, 2], [(1, 2)], 9, [5], None, mask_probability=0.8, random_probability=0.3)


def test_masked_one_at_a_time_masks_each_span_token_once():
    tokenizer = roberta_tokenizer()
    prompt = build_definition_prompt(tokenizer, DISCOMFORT)
    mask_id = tokenizer.mask_token_id
    copies = masked_one_at_a_time(prompt, mask_id)
    # <s> The Ġdefinition Ġof [Ġdiscomfort] ... Ġverb , Ġ [dis comfort] , [ĠDis comfort] , Ġand [ĠDIS COM F ORT]
    expected_positions = [4, 38, 39, 41, 42, 45, 46, 47, 48]
    assert [position for _, position in copies] == expected_positions
    for ids, position in copies:
        assert ids.count(mask_id) == 1 and ids[position] == mask_id
        assert ids[:position] == prompt.input_ids[:position] and ids[position + 1 :] == prompt.input_ids[position + 1 :]


# ------------------------------------------------------------------------------------------------ encoder-decoder
def test_bart_source_target_and_labels_match_figure_17_bc():
    tokenizer = bart_tokenizer()
    prompt = build_definition_prompt(tokenizer, WordDefinition("cat", "noun", "a small pet"))
    example = encoder_decoder_example(prompt, tokenizer)
    # Independent reference: the tokenizer itself splits text around its special <mask> token.
    source_text = (
        "The definition of<mask> is a small pet. Its part-of-speech, bpe-form without space, capitalization, and "
        "uppercase are noun, <mask>,<mask>, and<mask>, respectively."
    )
    assert example["input_ids"] == tokenizer(source_text)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(example["decoder_input_ids"]) == [
        "</s>", "<mask>", "Ġcat", "<mask>", "cat", "<mask>", "ĠCat", "<mask>", "ĠCAT",
    ]  # fmt: skip
    vocab = tokenizer.get_vocab()
    cat_ids = [vocab["Ġcat"], vocab["cat"], vocab["ĠCat"], vocab["ĠCAT"]]
    assert example["labels"] == [-100, cat_ids[0], -100, cat_ids[1], -100, cat_ids[2], -100, cat_ids[3], -100]
    # decoder_input_ids = [decoder start] + target[:-1], target ending in eos.
    assert len(example["labels"]) == len(example["decoder_input_ids"])


def test_discomfort_target_decodes_like_figure_17c():
    tokenizer = bart_tokenizer()
    example = encoder_decoder_example(build_definition_prompt(tokenizer, DISCOMFORT), tokenizer)
    target = tokenizer.decode(example["decoder_input_ids"][1:])
    assert target == "<mask> discomfort<mask>discomfort<mask> Discomfort<mask> DISCOMFORT"
    assert example["input_ids"].count(tokenizer.mask_token_id) == 4


def test_t5_style_sentinels_are_distinct_and_decoder_starts_with_pad(t5_like_tokenizer):
    tokenizer = t5_like_tokenizer
    sentinels = sentinel_token_ids(tokenizer)
    assert tokenizer.convert_ids_to_tokens(sentinels) == [f"<extra_id_{index}>" for index in range(4)]
    assert default_decoder_start_token_id(tokenizer) == tokenizer.pad_token_id
    assert sentinel_token_ids(bart_tokenizer()) == [bart_tokenizer().mask_token_id] * 4
    prompt = DefinitionPrompt([7, 8, 9, 10, 1], [(1, 2), (3, 4)], "x")
    example = encoder_decoder_example(prompt, tokenizer)
    assert example["input_ids"] == [7, sentinels[0], 9, sentinels[1], 1]
    assert example["decoder_input_ids"] == [tokenizer.pad_token_id, sentinels[0], 8, sentinels[1], 10]
    assert example["labels"] == [-100, 8, -100, 10, -100]
    # A SentencePiece prompt: the bpe-form slot loses the ▁ that SentencePiece puts before every separate text.
    forms = word_forms(tokenizer, "cat")
    assert tokenizer.convert_ids_to_tokens(forms["word"]) == ["▁cat"]
    assert tokenizer.convert_ids_to_tokens(forms["bpe_form"]) == ["cat"]


def test_tokenizers_without_mask_or_sentinels_are_refused(gpt2_tokenizer):
    assert gpt2_tokenizer.mask_token_id is None
    with pytest.raises(ValueError, match="neither T5-style sentinel tokens .* nor a mask token"):
        sentinel_token_ids(gpt2_tokenizer)
    prompt = build_definition_prompt(gpt2_tokenizer, DISCOMFORT)
    with pytest.raises(ValueError, match="encoder-decoder reader"):
        encoder_decoder_example(prompt, gpt2_tokenizer)
    with pytest.raises(ValueError, match="encoder-only reader needs a mask token"):
        masked_one_at_a_time(prompt, gpt2_tokenizer.mask_token_id)
