"""Definition embeddings for a vocabulary and the replacement of a model's token embeddings (Section 5.3,
Appendices F and M): checked against slow independent computations and hand-chosen rankings; the replaced checkpoint
loads as a plain transformers model where hf_entity_models cannot be imported; the `hf-entity definitions` command.
"""

import json
import math

import huggingface_hub
import pytest
import torch
from conftest import error_line, run_cli
from datasets import Dataset
from embedding_fixtures import bart_tokenizer, tiny_bart_config, tiny_bert_config, wordpiece_tokenizer
from huggingface_hub import ModelCard
from test_hub_portability import NO_PACKAGE_PRELUDE, run_python, subprocess_env
from transformers import BartModel, BertForMaskedLM, BertModel

from hf_entity_models import DefinitionEmbConfig, DefinitionEmbModel
from hf_entity_models.models.definition_emb import PAPER_SETTINGS
from hf_entity_models.tasks.embeddings.prompts import WordDefinition, build_definition_prompt
import hf_entity_models.tasks.embeddings.replacement as replacement
from hf_entity_models.tasks.embeddings.definition_embeddings import TokenDefinitionEmbeddings, compute_definition_embeddings
from hf_entity_models.tasks.embeddings.replacement import apply_definition_embeddings, read_task_texts, replacement_budget

DEFINITIONS = [
    ("cat", "noun", "a small domesticated feline animal"),
    ("dog", "noun", "a domesticated canine animal"),
    ("cat", "verb", "to hoist an anchor"),  # names "cat" again: the first definition wins (footnote 8)
    ("happy", "adjective", "feeling or showing pleasure"),
]


def definitions_dataset() -> Dataset:
    return Dataset.from_dict({
        "word": [row[0] for row in DEFINITIONS],
        "part_of_speech": [row[1] for row in DEFINITIONS],
        "definition": [row[2] for row in DEFINITIONS],
    })


def bert_reader(**settings) -> DefinitionEmbModel:
    torch.manual_seed(0)
    plm = BertModel(tiny_bert_config(wordpiece_tokenizer()))
    return DefinitionEmbModel.from_pretrained_model(plm, **settings).eval()


def bart_reader() -> DefinitionEmbModel:
    torch.manual_seed(0)
    return DefinitionEmbModel.from_pretrained_model(BartModel(tiny_bart_config(bart_tokenizer()))).eval()


# ------------------------------------------------------------------------------------- definition embeddings
def test_paper_reader_masks_one_slot_token_at_a_time_and_the_first_definition_wins():
    tokenizer, reader = wordpiece_tokenizer(), bert_reader(**PAPER_SETTINGS)
    found = compute_definition_embeddings(reader, tokenizer, definitions_dataset(), show_progress=False)
    vectors = found.as_dict()
    cat = tokenizer.convert_tokens_to_ids("cat")
    # Independent slow reference: the first definition of "cat", its word slot masked alone, read by the model.
    prompt = build_definition_prompt(tokenizer, WordDefinition(*DEFINITIONS[0]), word_slots="paper")
    position = prompt.corruption_spans[0][0]
    assert prompt.input_ids[position] == cat
    masked = list(prompt.input_ids)
    masked[position] = tokenizer.mask_token_id
    with torch.no_grad():
        expected = reader(input_ids=torch.tensor([masked])).definition_embeddings[0, position]
    torch.testing.assert_close(vectors[cat], expected, rtol=1e-5, atol=1e-6)
    assert found.words[found.token_ids.tolist().index(cat)] == "cat"
    # Every token of every slot of every definition got an embedding; special tokens never do.
    slot_tokens = {
        token
        for row in DEFINITIONS
        for start, end in build_definition_prompt(tokenizer, WordDefinition(*row), word_slots="paper").corruption_spans
        for token in build_definition_prompt(tokenizer, WordDefinition(*row), word_slots="paper").input_ids[start:end]
    }
    assert set(vectors) == slot_tokens
    assert not set(vectors) & set(tokenizer.all_special_ids)


def test_distinct_slot_reader_reads_each_prompt_once_with_every_slot_masked():
    from embedding_fixtures import roberta_tokenizer, tiny_roberta_config
    from transformers import RobertaModel

    tokenizer = roberta_tokenizer()  # cased byte-level BPE: all four slots are distinct forms
    torch.manual_seed(0)
    reader = DefinitionEmbModel.from_pretrained_model(RobertaModel(tiny_roberta_config(tokenizer))).eval()
    assert (reader.config.word_slots, reader.config.readout) == ("distinct", "mask-slot")
    found = compute_definition_embeddings(reader, tokenizer, definitions_dataset(), show_progress=False).as_dict()
    prompt = build_definition_prompt(tokenizer, WordDefinition(*DEFINITIONS[1]))  # "dog": " DOG" is two tokens
    masked = [tokenizer.mask_token_id if position in prompt.span_positions() else token
              for position, token in enumerate(prompt.input_ids)]
    with torch.no_grad():
        expected = reader(input_ids=torch.tensor([masked])).definition_embeddings[0]
    singles = [(start, prompt.input_ids[start]) for start, end in prompt.corruption_spans if end - start == 1]
    assert len(singles) >= 2  # " dog" and "dog" at least
    for position, token in singles:
        torch.testing.assert_close(found[token], expected[position], rtol=1e-5, atol=1e-6)
    # Own definitions only: the pieces of a longer form are not read from any definition.
    pieces = {prompt.input_ids[p] for start, end in prompt.corruption_spans if end - start > 1 for p in range(start, end)}
    assert pieces and not pieces & set(found)


def test_least_squares_start_of_the_map_equals_a_ridge_fit_by_hand_and_lowers_the_loss():
    from hf_entity_models.tasks.embeddings.definitions import definition_prompt_dataset
    from hf_entity_models.tasks.embeddings.training import definition_collator, fit_projection_by_least_squares

    tokenizer, reader = wordpiece_tokenizer(), bert_reader()
    with torch.no_grad():  # targets with a structure the states can explain
        reader.target_embeddings.copy_(torch.randn_like(reader.target_embeddings))
    prompts = definition_prompt_dataset(definitions_dataset(), tokenizer)
    batch = definition_collator(reader, tokenizer)([prompts[index] for index in range(len(prompts))])
    labels = batch.pop("labels")
    with torch.no_grad():
        loss_before = reader(**batch, labels=labels).loss.item()
        states = reader.reader(**batch).last_hidden_state[labels != -100].double()
    targets = reader.target_embeddings[labels[labels != -100]].double()
    targets = targets / targets.norm(dim=-1, keepdim=True)  # the cosine loss: unit targets
    gram = states.T @ states
    ridge = 0.1 * gram.diagonal().mean()
    expected = torch.linalg.solve(gram + ridge * torch.eye(gram.shape[0], dtype=gram.dtype), states.T @ targets).T
    assert fit_projection_by_least_squares(reader, tokenizer, prompts, ridge=0.1) == len(states)
    torch.testing.assert_close(reader.embedding_projection.weight.double(), expected, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        assert reader(**batch, labels=labels).loss.item() < loss_before


def test_requested_tokens_only_and_padding_does_not_change_an_embedding():
    tokenizer, reader = wordpiece_tokenizer(), bert_reader()
    dog = tokenizer.convert_tokens_to_ids("dog")
    alone = compute_definition_embeddings(reader, tokenizer, definitions_dataset(), token_ids=[dog], show_progress=False)
    assert alone.token_ids.tolist() == [dog]
    batched = compute_definition_embeddings(reader, tokenizer, definitions_dataset(), batch_size=3, show_progress=False)
    torch.testing.assert_close(alone.as_dict()[dog], batched.as_dict()[dog], rtol=1e-5, atol=1e-6)


def test_requested_tokens_build_only_the_first_definition_naming_each_and_read_the_same_vectors(monkeypatch):
    """With token_ids, only the definitions that are the first to name a requested token become prompts; the
    vectors equal those read from every prompt built up front."""
    import hf_entity_models.tasks.embeddings.definitions as definitions_module

    tokenizer, reader = wordpiece_tokenizer(), bert_reader()
    cat, dog = tokenizer.convert_tokens_to_ids(["cat", "dog"])
    every_prompt = definitions_module.definition_prompt_dataset(definitions_dataset(), tokenizer)
    expected = compute_definition_embeddings(reader, tokenizer, every_prompt, token_ids=[cat, dog], show_progress=False)
    built = []
    original = definitions_module.definition_prompt_dataset
    monkeypatch.setattr(definitions_module, "definition_prompt_dataset",
                        lambda rows, *args, **kwargs: built.append(list(rows["word"])) or original(rows, *args, **kwargs))
    got = compute_definition_embeddings(reader, tokenizer, definitions_dataset(), token_ids=[cat, dog],
                                        show_progress=False)
    assert built == [["cat", "dog"]]  # not the second "cat", not "happy"
    assert got.token_ids.tolist() == expected.token_ids.tolist() == [cat, dog]
    torch.testing.assert_close(got.embeddings, expected.embeddings, rtol=0, atol=0)


def test_the_held_out_comparison_by_hand():
    """Cosine and MSE of the reader's vectors and of the mean embedding (over the non-special rows) against the true
    rows, on the slot tokens of the held-out definitions that no training definition named."""
    from hf_entity_models.tasks.embeddings.quality import held_out_comparison, training_targets

    tokenizer, reader = wordpiece_tokenizer(), bert_reader()
    embeddings = torch.randn(len(tokenizer), reader.config.embedding_size, generator=torch.Generator().manual_seed(0))
    trained, held_out = definitions_dataset().select([0]), definitions_dataset().select([1, 3])  # "cat"; dog, happy
    trained_tokens = training_targets(tokenizer, trained, reader.config)
    assert tokenizer.convert_tokens_to_ids("cat") in trained_tokens
    comparison = held_out_comparison(reader, tokenizer, embeddings, held_out, trained_tokens)
    # The tokens that are a held-out word by themselves (their own definitions), not pieces of a longer word.
    own = {token for word in ("dog", "happy") for token in tokenizer(word, add_special_tokens=False)["input_ids"]
           if len(tokenizer(word, add_special_tokens=False)["input_ids"]) == 1}
    expected_tokens = sorted(own - trained_tokens - set(tokenizer.all_special_ids))
    found = compute_definition_embeddings(reader, tokenizer, held_out, token_ids=expected_tokens, show_progress=False)
    assert comparison.tokens == len(expected_tokens) == len(found.token_ids) > 0
    regular = [row for row in range(len(tokenizer)) if row not in set(tokenizer.all_special_ids)]
    mean = embeddings[regular].mean(0)
    cosines, mean_cosines, errors, mean_errors = [], [], [], []
    for token, vector in found.as_dict().items():
        truth = embeddings[token]
        cosines.append(float(vector @ truth / (vector.norm() * truth.norm())))
        mean_cosines.append(float(mean @ truth / (mean.norm() * truth.norm())))
        errors.append(float((vector - truth).pow(2).mean()))
        mean_errors.append(float((mean - truth).pow(2).mean()))
    average = lambda values: sum(values) / len(values)  # noqa: E731
    assert comparison.reader_cosine == pytest.approx(average(cosines), abs=1e-5)
    assert comparison.mean_vector_cosine == pytest.approx(average(mean_cosines), abs=1e-5)
    assert comparison.reader_mse == pytest.approx(average(errors), rel=1e-5)
    assert comparison.mean_vector_mse == pytest.approx(average(mean_errors), rel=1e-5)
    vectors = list(found.as_dict().values())
    pairs = [(a, b) for i, a in enumerate(vectors) for b in vectors[i + 1 :]]
    by_hand = average([float(a @ b / (a.norm() * b.norm())) for a, b in pairs])
    assert comparison.reader_spread == pytest.approx(by_hand, abs=1e-5)
    assert comparison.beats_mean == (
        comparison.reader_cosine > comparison.mean_vector_cosine
        and comparison.reader_spread <= (1 + comparison.true_spread) / 2
    )


def test_predictions_that_collapse_to_one_vector_do_not_pass_the_gate():
    from hf_entity_models.tasks.embeddings.quality import HeldOutComparison

    figures = dict(tokens=500, reader_cosine=0.085, mean_vector_cosine=0.034, reader_mse=0.00364,
                   mean_vector_mse=0.00367, true_spread=0.02)
    assert not HeldOutComparison(**figures, reader_spread=0.985).beats_mean  # the paper's reader after 20 steps
    assert "collapsed" in HeldOutComparison(**figures, reader_spread=0.985).describe()
    assert HeldOutComparison(**figures, reader_spread=0.08).beats_mean


def test_the_held_out_comparison_hides_every_slot_even_for_a_paper_reader():
    from hf_entity_models.tasks.embeddings.quality import held_out_comparison

    tokenizer, reader = wordpiece_tokenizer(), bert_reader(**PAPER_SETTINGS)
    embeddings = torch.randn(len(tokenizer), reader.config.embedding_size, generator=torch.Generator().manual_seed(0))
    dog_definition = definitions_dataset().select([1])
    comparison = held_out_comparison(reader, tokenizer, embeddings, dog_definition)
    hidden, visible = (
        compute_definition_embeddings(reader, tokenizer, dog_definition, show_progress=False, mask_every_slot=mask)
        for mask in (True, False)
    )
    assert len(hidden) == len(visible) == comparison.tokens  # "dog" and, with the paper's slots, its "##dog" form
    cosine = torch.nn.functional.cosine_similarity
    assert float(cosine(hidden.embeddings, embeddings[hidden.token_ids], dim=-1).mean()) == pytest.approx(
        comparison.reader_cosine, abs=1e-7)
    assert not torch.allclose(hidden.embeddings, visible.embeddings, atol=1e-5)  # the copies are not read


def test_encoder_decoder_reader_reads_the_decoder_state_before_each_slot_token():
    tokenizer, reader = bart_tokenizer(), bart_reader()
    found = compute_definition_embeddings(reader, tokenizer, definitions_dataset(), show_progress=False)
    prompt = build_definition_prompt(tokenizer, WordDefinition(*DEFINITIONS[1]))
    start, end = prompt.corruption_spans[0]
    dog = prompt.input_ids[start]  # " dog"
    # By hand (Figure 17 b, c): source = the prompt with each slot replaced by <mask>; decoder input = the start token,
    # then the target "<mask> dog <mask> dog ..." shifted right: " dog" is predicted after start + <mask>.
    source, cursor = [], 0
    for span_start, span_end in prompt.corruption_spans:
        source += prompt.input_ids[cursor:span_start] + [tokenizer.mask_token_id]
        cursor = span_end
    source += prompt.input_ids[cursor:]
    decoder_input = [reader.config.reader_config.decoder_start_token_id, tokenizer.mask_token_id]
    with torch.no_grad():
        expected = reader(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_input]))
    torch.testing.assert_close(found.as_dict()[dog], expected.definition_embeddings[0, 1], rtol=1e-5, atol=1e-6)


def test_token_definition_embeddings_round_trip_and_refuse_duplicates(tmp_path):
    found = TokenDefinitionEmbeddings(torch.tensor([7, 3]), torch.randn(2, 4), ["a", "b"])
    found.save(tmp_path / "found.safetensors")
    loaded = TokenDefinitionEmbeddings.load(tmp_path / "found.safetensors")
    assert loaded.token_ids.tolist() == [7, 3] and loaded.words == ["a", "b"]
    torch.testing.assert_close(loaded.embeddings, found.embeddings)
    with pytest.raises(ValueError, match="twice"):
        TokenDefinitionEmbeddings(torch.tensor([7, 7]), torch.randn(2, 4))


# ------------------------------------------------------------------------------------------- replacement
def tiny_bert(tied_head: bool = False):
    tokenizer = wordpiece_tokenizer()
    torch.manual_seed(1)
    model = BertForMaskedLM(tiny_bert_config(tokenizer)) if tied_head else BertModel(tiny_bert_config(tokenizer))
    return model.eval(), tokenizer


TASK_TEXTS = ["the cat sat on the mat", "a happy dog barked at the zebra"]


def task_token_ids(tokenizer) -> list[int]:
    return sorted({token for text in TASK_TEXTS for token in tokenizer(text, add_special_tokens=False)["input_ids"]})


def hand_made_embeddings(token_ids, width: int = 32) -> TokenDefinitionEmbeddings:
    token_ids = list(token_ids)
    # Row i is the constant i + 1: easy to recognise after replacement.
    return TokenDefinitionEmbeddings(
        torch.tensor(token_ids), torch.arange(1, len(token_ids) + 1, dtype=torch.float).unsqueeze(1).repeat(1, width)
    )


def test_last_strategy_replaces_the_task_tokens_with_the_largest_indexes_and_nothing_else():
    model, tokenizer = tiny_bert()
    task_tokens = task_token_ids(tokenizer)
    without_definition = task_tokens[-1]  # the largest index has no definition: skipped (footnote 7)
    found = hand_made_embeddings([token for token in task_tokens if token != without_definition] + [5])
    alpha = 100 * 4.5 / model.config.vocab_size  # floor(alpha% x N) = 4 rows
    before = model.get_input_embeddings().weight.detach().clone()
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, strategy="last",
                                         blend=1.0, original_norms=False, show_progress=False)
    expected = sorted((token for token in task_tokens if token != without_definition), reverse=True)[:4]
    assert result.replaced_token_ids == expected
    after = result.model.get_input_embeddings().weight.detach()
    vectors = found.as_dict()
    for token in expected:
        torch.testing.assert_close(after[token], vectors[token])
    untouched = torch.ones(len(after), dtype=torch.bool)
    untouched[expected] = False
    assert torch.equal(after[untouched], before[untouched])
    assert torch.equal(model.get_input_embeddings().weight, before), "the original model must stay as it was"
    assert type(result.model) is BertModel
    assert result.task_vocabulary_size == len(task_tokens)
    assert result.task_tokens_without_definition == 1
    assert result.model.config.definition_embeddings["replaced_tokens"] == 4


def test_budget_is_min_of_alpha_n_and_the_task_vocabulary():
    model, tokenizer = tiny_bert()
    task_tokens = task_token_ids(tokenizer)
    found = hand_made_embeddings(task_tokens)
    everything = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=100, show_progress=False)
    assert sorted(everything.replaced_token_ids) == task_tokens  # |V_task| < alpha% x N
    nothing = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=0, show_progress=False)
    assert nothing.replaced_token_ids == []
    three = 100 * 3.999 / model.config.vocab_size
    assert len(apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=three,
                                           show_progress=False).replaced_token_ids) == math.floor(3.999)


def test_budget_arithmetic_is_exact_and_numpy_alpha_is_accepted():
    import numpy as np

    assert [replacement_budget(alpha, 100, 1000) for alpha in (29, 57, 58, 0.5, 100)] == [29, 57, 58, 0, 100]
    assert replacement_budget(12.5, 30522, 10**6) == 3815  # 3815.25 rows: floor
    model, tokenizer = tiny_bert()
    found = hand_made_embeddings(task_token_ids(tokenizer))
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=np.int64(100), show_progress=False)
    assert len(result.replaced_token_ids) == len(task_token_ids(tokenizer))


def test_top_and_random_strategies():
    model, tokenizer = tiny_bert()
    task_tokens = task_token_ids(tokenizer)
    found = hand_made_embeddings(task_tokens)
    alpha = 100 * 3.5 / model.config.vocab_size  # floor(3.5) = 3 rows
    top = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, strategy="top", show_progress=False)
    assert top.replaced_token_ids == sorted(token for token in task_tokens if token >= 5000)[:3]
    first = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, strategy="random", seed=3,
                                        show_progress=False)
    again = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, strategy="random", seed=3,
                                        show_progress=False)
    assert first.replaced_token_ids == again.replaced_token_ids
    assert len(first.replaced_token_ids) == 3 and set(first.replaced_token_ids) <= set(task_tokens)
    others = {tuple(apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, strategy="random",
                                                seed=seed, show_progress=False).replaced_token_ids) for seed in range(6)}
    assert len(others) > 1, "the seed must change the random choice"


def test_whole_range_replaces_tokens_absent_from_the_task_too():
    model, tokenizer = tiny_bert()
    task_tokens = task_token_ids(tokenizer)
    largest_two = sorted(task_tokens)[-2:]
    absent_inside = largest_two[0] + 1  # between the two largest task tokens, not in the task
    absent_below = largest_two[0] - 1
    assert absent_inside not in task_tokens and absent_below not in task_tokens
    found = hand_made_embeddings(task_tokens + [absent_inside, absent_below])
    alpha = 100 * 2.5 / model.config.vocab_size  # floor(2.5) = 2 rows
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, appearing_only=False,
                                         strategy="last", show_progress=False)
    # [X, N] holds 2 task tokens; every token with a definition in it is replaced, the one below X is not.
    assert result.replaced_token_ids == sorted([*largest_two, absent_inside], reverse=True)


def test_tied_output_embeddings_follow_the_replaced_rows():
    model, tokenizer = tiny_bert(tied_head=True)
    found = hand_made_embeddings(task_token_ids(tokenizer))
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=100, show_progress=False)
    replaced = result.replaced_token_ids
    assert type(result.model) is BertForMaskedLM
    decoder = result.model.get_output_embeddings().weight
    torch.testing.assert_close(decoder[replaced], result.model.get_input_embeddings().weight[replaced])
    assert decoder.data_ptr() == result.model.get_input_embeddings().weight.data_ptr()


def test_inplace_modifies_the_given_model():
    model, tokenizer = tiny_bert()
    found = hand_made_embeddings(task_token_ids(tokenizer))
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=100, inplace=True, blend=1.0,
                                         original_norms=False, show_progress=False)
    assert result.model is model
    token = result.replaced_token_ids[0]
    torch.testing.assert_close(model.get_input_embeddings().weight[token].detach(), found.as_dict()[token])


def test_rare_strategy_ranks_by_counts_in_the_task_texts():
    model, tokenizer = tiny_bert()
    task_tokens = task_token_ids(tokenizer)
    the = tokenizer.convert_tokens_to_ids("the")  # three times in TASK_TEXTS, every other token once
    found = hand_made_embeddings(task_tokens)
    alpha = 100 * (len(task_tokens) - 0.5) / model.config.vocab_size  # floor: every task token but one
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=alpha, show_progress=False)
    assert result.strategy == "rare"
    assert result.replaced_token_ids == sorted((token for token in task_tokens if token != the), reverse=True)


def test_rows_are_written_at_their_own_norm_and_blended():
    model, tokenizer = tiny_bert()
    found = hand_made_embeddings(task_token_ids(tokenizer))
    before = model.get_input_embeddings().weight.detach().clone()
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=100, blend=0.25,
                                         show_progress=False)
    after = result.model.get_input_embeddings().weight.detach()
    for token, definition in found.as_dict().items():
        original = before[token]
        rescaled = definition / definition.norm() * original.norm()  # the definition's direction, the row's norm
        torch.testing.assert_close(after[token], original + 0.25 * (rescaled - original))
    assert result.summary()["blend"] == 0.25 and result.summary()["original_norms"] is True
    with pytest.raises(ValueError, match="blend"):
        apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=100, blend=1.5, show_progress=False)


def test_a_definition_model_reads_only_the_task_tokens_it_writes(monkeypatch):
    model, tokenizer = tiny_bert()
    reader = bert_reader()
    requested = []
    compute = replacement.compute_definition_embeddings

    def spy(definition_model, tokenizer, definitions, token_ids=None, **kwargs):
        requested.append(set(token_ids))
        return compute(definition_model, tokenizer, definitions, token_ids, **kwargs)

    monkeypatch.setattr(replacement, "compute_definition_embeddings", spy)
    result = apply_definition_embeddings(model, tokenizer, reader, TASK_TEXTS, alpha=100,
                                         definitions=definitions_dataset(), show_progress=False)
    # The definitions name cat, dog and happy among the task's tokens (and "feline", ... which the task lacks).
    names = set(tokenizer.convert_ids_to_tokens(result.replaced_token_ids))
    assert {"cat", "dog", "happy"} <= names
    assert set(result.replaced_token_ids) <= set(task_token_ids(tokenizer))
    assert requested == [set(result.replaced_token_ids)]  # task tokens that no definition names are not read
    # With a budget of one row, one token is read: the task token of the largest index that a definition names.
    requested.clear()
    one_row = apply_definition_embeddings(model, tokenizer, reader, TASK_TEXTS, alpha=150 / len(tokenizer),
                                          definitions=definitions_dataset(), show_progress=False)
    assert requested == [set(one_row.replaced_token_ids)] and one_row.replaced_token_ids == [max(names_ids := [
        token for token in result.replaced_token_ids])] and len(names_ids) > 1
    assert one_row.task_tokens_without_definition == result.task_tokens_without_definition


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (dict(alpha=-1), ValueError, "0..100"),
        (dict(alpha=101), ValueError, "0..100"),
        (dict(alpha="5"), ValueError, "0..100"),
        (dict(strategy="first"), ValueError, "strategy must be one of"),
        (dict(strategy="random", appearing_only=False), ValueError, "Appendix M"),
        (dict(task_texts=[]), ValueError, "task_texts is empty"),
        (dict(task_texts="the cat sat"), TypeError, "not a single string"),
        (dict(task_texts=["[CLS] [SEP]"]), ValueError, "no token other than special tokens"),
    ],
)
def test_bad_replacement_arguments_are_refused(arguments, error, message):
    model, tokenizer = tiny_bert()
    values = {"task_texts": TASK_TEXTS, "alpha": 5, **arguments}
    found = hand_made_embeddings(task_token_ids(tokenizer))
    with pytest.raises(error, match=message):
        apply_definition_embeddings(model, tokenizer, found, show_progress=False, **values)


def test_task_texts_are_read_one_per_line_from_utf8_files(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("The cat sat.\r\n\n  \nA dog\u2028barked.\n", encoding="utf-8")
    second.write_text("Last one", encoding="utf-8")
    assert read_task_texts([first, str(second)]) == ["The cat sat.", "A dog\u2028barked.", "Last one"]
    assert read_task_texts(second) == ["Last one"]
    binary = tmp_path / "texts.bin"
    binary.write_bytes(b"fine\n\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match=rf"The task-text file {binary} is not UTF-8 text: byte 0x89 at line 2, "
                                         "column 1"):
        read_task_texts([first, binary])
    (tmp_path / "blank.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"blank.txt holds no text \(empty or blank lines only\)"):
        read_task_texts(tmp_path / "blank.txt")
    with pytest.raises(FileNotFoundError, match="The task-text file .*missing.txt does not exist"):
        read_task_texts([first, tmp_path / "missing.txt"])
    with pytest.raises(ValueError, match="No task-text file was given"):
        read_task_texts([])


def test_a_reader_needs_definitions_and_a_matching_width():
    model, tokenizer = tiny_bert()
    with pytest.raises(ValueError, match="definitions is needed"):
        apply_definition_embeddings(model, tokenizer, bert_reader(), TASK_TEXTS, alpha=5, show_progress=False)
    narrow = hand_made_embeddings(task_token_ids(tokenizer), width=8)
    with pytest.raises(ValueError, match="8 wide"):
        apply_definition_embeddings(model, tokenizer, narrow, TASK_TEXTS, alpha=5, show_progress=False)
    with pytest.raises(TypeError, match="DefinitionEmbModel"):
        apply_definition_embeddings(model, tokenizer, object(), TASK_TEXTS, alpha=5, show_progress=False)


def test_encoder_only_reader_needs_a_mask_token():
    tokenizer = wordpiece_tokenizer()
    without_mask = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    without_mask.mask_token = None
    with pytest.raises(ValueError, match="mask"):
        compute_definition_embeddings(bert_reader(), without_mask, definitions_dataset(), show_progress=False)


# --------------------------------------------------------------------------------------- the saved checkpoint
REMOTE_PLAIN_LOAD = NO_PACKAGE_PRELUDE + r'''
import json
import torch
from transformers import AutoModel, AutoTokenizer

location, rows = sys.argv[1], json.loads(sys.argv[2])
model = AutoModel.from_pretrained(location)  # no trust_remote_code: a plain transformers model
tokenizer = AutoTokenizer.from_pretrained(location)
weights = model.get_input_embeddings().weight
print("RESULT " + json.dumps({
    "class": type(model).__name__,
    "rows": weights[rows].tolist(),
    "package_imported": "hf_entity_models" in sys.modules,
    "record": model.config.definition_embeddings,
    "tokens": tokenizer.convert_ids_to_tokens(rows),
}))
'''


def test_saved_checkpoint_loads_as_plain_bert_without_the_package_and_its_card_lists_the_rows(tmp_path):
    model, tokenizer = tiny_bert()
    found = hand_made_embeddings(task_token_ids(tokenizer))
    result = apply_definition_embeddings(model, tokenizer, found, TASK_TEXTS, alpha=100, show_progress=False,
                                         definitions_description="four hand-written definitions")
    folder = result.save_pretrained(tmp_path / "replaced")
    rows = result.replaced_token_ids
    remote = run_python(REMOTE_PLAIN_LOAD, str(folder), json.dumps(rows), env=subprocess_env(tmp_path / "hf"), cwd=tmp_path)
    assert remote["class"] == "BertModel" and not remote["package_imported"]
    torch.testing.assert_close(torch.tensor(remote["rows"]), result.model.get_input_embeddings().weight[rows].detach())
    assert remote["record"]["replaced_tokens"] == len(rows) and remote["record"]["alpha"] == 100
    saved = json.loads((folder / "definition_embeddings.json").read_text())
    assert saved["replaced_token_ids"] == rows
    card = ModelCard.load(folder / "README.md")
    assert "definition-emb" in card.data.tags
    assert "four hand-written definitions" in card.text
    for token_id, token in zip(rows, remote["tokens"]):
        assert f"`{token_id}` `{token}`" in card.text


def test_push_to_hub_uploads_the_checkpoint_with_its_card(tmp_path, monkeypatch):
    from hub_server import LoopbackHub

    model, tokenizer = tiny_bert()
    result = apply_definition_embeddings(model, tokenizer, hand_made_embeddings(task_token_ids(tokenizer)), TASK_TEXTS,
                                         alpha=100, show_progress=False)
    with LoopbackHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        # The suite runs offline (HF_HUB_OFFLINE=1, read by huggingface_hub at import): this test talks to the loopback Hub.
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        result.push_to_hub("tester/bert-definitions", token="loopback-token")
        files = hub.files("tester/bert-definitions")
    assert {"model.safetensors", "config.json", "README.md", "definition_embeddings.json", "tokenizer.json"} <= set(files)
    assert b"tester/bert-definitions" in files["README.md"]


# --------------------------------------------------------------------------------------------- the command
@pytest.fixture
def command_inputs(tmp_path):
    model, tokenizer = tiny_bert()
    model.save_pretrained(tmp_path / "plm")
    tokenizer.save_pretrained(tmp_path / "plm")
    definitions = tmp_path / "definitions.tsv"
    definitions.write_text("word\tpart_of_speech\tdefinition\n" + "".join(f"{w}\t{p}\t{d}\n" for w, p, d in DEFINITIONS))
    texts = tmp_path / "task.txt"
    texts.write_text("\n".join(TASK_TEXTS) + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("default", {"word_slots": "distinct", "loss": "cosine", "strategy": "rare", "blend": 0.1, "norms": True}),
        ("paper", {"word_slots": "paper", "loss": "mse", "strategy": "last", "blend": 1.0, "norms": False}),
    ],
)
def test_definitions_command_trains_a_reader_and_writes_the_replaced_checkpoint(capsys, command_inputs, preset, expected):
    out = command_inputs / f"out-{preset}"
    status, stdout, err = run_cli(
        capsys, "definitions", command_inputs / "plm", "--definitions", command_inputs / "definitions.tsv",
        "--task-texts", command_inputs / "task.txt", "--alpha", "100", "--max-steps", "2", "--batch-size", "2",
        "--no-number-words", "--preset", preset, "--output-dir", out,
    )
    assert status == 0, err
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["replaced_tokens"] >= 3 and summary["alpha"] == 100
    assert (summary["strategy"], summary["blend"], summary["original_norms"]) == (
        expected["strategy"], expected["blend"], expected["norms"])
    assert type(BertModel.from_pretrained(out)) is BertModel
    reader = DefinitionEmbModel.from_pretrained(out / "definition-reader")
    assert isinstance(reader.config, DefinitionEmbConfig) and reader.config.reader_type == "encoder-only"
    assert (reader.config.word_slots, reader.config.loss) == (expected["word_slots"], expected["loss"])
    replaced = json.loads((out / "definition_embeddings.json").read_text())["replaced_token_ids"]
    assert len(replaced) == summary["replaced_tokens"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--task-texts", "task.txt", "--alpha", "150"], "must lie in 0..100"),
        ([], "either --task-texts"),
        (["--glue-task", "mrpc"], "--glue-task needs --glue-dir"),
        (["--task-texts", "task.txt", "--strategy", "random", "--whole-range"], "--strategy random"),
        (["--task-texts", "task.txt", "--whole-range"], "--strategy rare does not have"),
        (["--task-texts", "task.txt", "--blend", "1.5"], "--blend is lambda"),
        (["--task-texts", "missing.txt"], "does not exist"),
    ],
)
def test_definitions_command_refuses_bad_input_in_one_line(capsys, command_inputs, extra, message):
    extra = [str(command_inputs / value) if value.endswith(".txt") else value for value in extra]
    arguments = ["definitions", command_inputs / "plm", "--definitions", command_inputs / "definitions.tsv",
                 "--max-steps", "1", "--output-dir", command_inputs / "out", *extra]
    status, _, err = run_cli(capsys, *arguments)
    assert status == 1
    assert message in error_line(err, "definitions")
