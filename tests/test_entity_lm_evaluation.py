"""Perplexity over consecutive windows, LAMBADA scoring, the Table 4 analysis and the entity-LM Trainer set-up,
checked against independent computations."""

import functools
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM
from hf_entity_models.tasks.language_modeling import (
    build_entity_lm_trainer,
    entity_lm_training_arguments,
    entity_nll_sums,
    entity_perplexity,
    evaluate_entity_lm,
    lambada_scores,
    mention_similarities,
    reads_entities,
)

VOCAB = 50


def _windows(seed: int = 0) -> list[dict]:
    """Three documents of 1, 2 and 3 windows (lengths differ), entities recurring across windows."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for document in range(3):
        for window in range(document + 1):
            length = 9 - window
            rows.append(
                {
                    "input_ids": torch.randint(0, VOCAB, (length,), generator=generator).tolist(),
                    "entity_ids": torch.randint(0, 4, (length,), generator=generator).tolist(),
                    "document_id": document,
                    "window_index": window,
                }
            )
    return rows


def _gpt2e(design: str = "memory") -> GPT2EForCausalLM:
    torch.manual_seed(0)
    model = GPT2EForCausalLM(GPT2EConfig(n_layer=2, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=32,
                                         max_entities=5, entity_state=design))
    with torch.no_grad():  # make the entities matter: their output projections start at zero
        if design == "memory":
            model.transformer.entity_memory.read.weight.normal_(0.0, 0.5)
        else:
            for block in model.transformer.h:
                block.entity_attn.c_proj.weight.normal_(0.0, 0.5)
    return model.eval()


def _reference_nll(model, rows, zero_entities=False, mentions_only=False) -> tuple[float, int]:
    """Each document read alone, window after window, states carried by hand; summed token NLL (of the tokens whose
    gold entity id is not 0 only, with `mentions_only`)."""
    total, count = 0.0, 0
    for document in sorted({row["document_id"] for row in rows}):
        states = None
        for row in sorted((r for r in rows if r["document_id"] == document), key=lambda r: r["window_index"]):
            input_ids = torch.tensor([row["input_ids"]])
            kwargs = {}
            if reads_entities(model):
                entity_ids = torch.tensor([row["entity_ids"]])
                kwargs = {"entity_ids": torch.zeros_like(entity_ids) if zero_entities else entity_ids, "entity_states": states}
            with torch.no_grad():
                output = model(input_ids, **kwargs)
            log_probs = output.logits[0, :-1].log_softmax(-1).gather(1, input_ids[0, 1:, None])[:, 0]
            chosen = torch.tensor(row["entity_ids"][1:]) != 0 if mentions_only else torch.ones(len(log_probs), dtype=bool)
            total -= float(log_probs[chosen].sum())
            count += int(chosen.sum())
            states = getattr(output, "entity_states", None)
    return total, count


@pytest.mark.parametrize("zero_entities", [False, True])
def test_mention_token_sums_and_perplexities_match_reading_each_document_alone(zero_entities):
    """The mention-token figures count the tokens whose GOLD entity id is not 0, also with the ids zeroed."""
    model, rows = _gpt2e(), _windows()
    sums = entity_nll_sums(model, rows, batch_size=2, use_entities=not zero_entities, progress=False)
    total, count = _reference_nll(model, rows, zero_entities)
    mention_total, mention_count = _reference_nll(model, rows, zero_entities, mentions_only=True)
    assert 0 < mention_count < count and (sums.tokens, sums.mention_tokens) == (count, mention_count)
    assert (sums.total_nll, sums.mention_nll) == pytest.approx((total, mention_total), rel=1e-5)
    scores = evaluate_entity_lm(model, rows, batch_size=2, progress=False)
    suffix = "_without_entities" if zero_entities else ""
    assert scores[f"mention_perplexity{suffix}"] == pytest.approx(math.exp(mention_total / mention_count), rel=1e-5)


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_gpt2e_perplexity_carries_entity_states_like_reading_each_document_alone(batch_size):
    model, rows = _gpt2e(), _windows()
    total, count = _reference_nll(model, rows)
    assert entity_perplexity(model, rows, batch_size=batch_size, progress=False) == pytest.approx(
        math.exp(total / count), rel=1e-5
    )
    total, count = _reference_nll(model, rows, zero_entities=True)
    without = entity_perplexity(model, rows, batch_size=batch_size, use_entities=False, progress=False)
    assert without == pytest.approx(math.exp(total / count), rel=1e-5)


def test_entity_information_changes_gpt2e_perplexity_and_rows_may_come_in_any_order():
    model, rows = _gpt2e(), _windows()
    with_entities = entity_perplexity(model, rows, progress=False)
    assert with_entities != pytest.approx(entity_perplexity(model, rows, use_entities=False, progress=False), rel=1e-6)
    assert entity_perplexity(model, rows[::-1], progress=False) == pytest.approx(with_entities, rel=1e-6)


def test_plain_gpt2_perplexity_is_token_weighted():
    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=32)).eval()
    rows = _windows()
    assert not reads_entities(model)
    total, count = _reference_nll(model, rows)
    assert count == sum(len(row["input_ids"]) - 1 for row in rows)
    assert entity_perplexity(model, rows, batch_size=2, progress=False) == pytest.approx(math.exp(total / count), rel=1e-5)


def test_perplexity_refuses_incomplete_documents_and_empty_input():
    model, rows = _gpt2e(), _windows()
    missing_first_window = [row for row in rows if not (row["document_id"] == 2 and row["window_index"] == 0)]
    with pytest.raises(ValueError, match="windows \\[1, 2\\]"):
        entity_perplexity(model, missing_first_window, progress=False)
    with pytest.raises(ValueError, match="twice"):
        entity_perplexity(model, rows + rows[:1], progress=False)
    with pytest.raises(ValueError, match="No windows"):
        entity_perplexity(model, [], progress=False)


def test_lambada_scores_match_a_hand_computation():
    torch.manual_seed(2)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=16)).eval()
    examples = [{"context_ids": [3, 4, 5, 6], "target_ids": [7, 8]}, {"context_ids": [9, 10], "target_ids": [11]}]
    nll, tokens, correct = 0.0, 0, 0
    for example in examples:
        sequence = torch.tensor([example["context_ids"] + example["target_ids"]])
        with torch.no_grad():
            log_probs = model(sequence).logits[0].log_softmax(-1)
        start = len(example["context_ids"]) - 1
        predicted = []
        for offset, target in enumerate(example["target_ids"]):
            nll -= float(log_probs[start + offset, target])
            predicted.append(int(log_probs[start + offset].argmax()))
        tokens += len(example["target_ids"])
        correct += predicted == example["target_ids"]
    scores = lambada_scores(model, examples, batch_size=2, progress=False)
    assert scores.perplexity == pytest.approx(math.exp(nll / tokens), rel=1e-5)
    assert scores.accuracy == correct / 2 and scores.examples == 2
    # An example whose target is the model's own greedy continuation is always right.
    context = [3, 4, 5]
    with torch.no_grad():
        greedy = int(model(torch.tensor([context])).logits[0, -1].argmax())
    assert lambada_scores(model, [{"context_ids": context, "target_ids": [greedy]}], progress=False).accuracy == 1.0
    with pytest.raises(ValueError, match="more than the model's window of 16"):
        lambada_scores(model, [{"context_ids": list(range(20)), "target_ids": [1]}], progress=False)


class _EmbeddingLM(torch.nn.Module):
    """A 'language model' whose last hidden state at a token is a fixed vector of that token id: the analysis can be
    computed by hand."""

    def __init__(self, vectors: dict[int, list[float]]):
        super().__init__()
        table = torch.zeros(VOCAB, 2)
        for token, vector in vectors.items():
            table[token] = torch.tensor(vector)
        self.table = torch.nn.Parameter(table)

    def forward(self, input_ids, attention_mask=None, output_hidden_states=False, use_cache=None):
        hidden = self.table[input_ids]
        return CausalLMOutputWithPast(logits=torch.zeros(*input_ids.shape, VOCAB), hidden_states=(hidden,))


class _Decoder:
    def decode(self, ids):
        return " she" if ids == [2] else " Anna"


def test_mention_similarities_match_hand_computed_cosines():
    # Document 0, window 0: Anna(1) x she(1) ; window 1: she(1) Anna(1). Token 1 = "Anna" [1, 0], token 2 = "she"
    # [1, 1], token 3 (no entity) [0, 1].
    model = _EmbeddingLM({1: [1.0, 0.0], 2: [1.0, 1.0], 3: [0.0, 1.0]})
    rows = [
        {"input_ids": [1, 3, 2], "entity_ids": [1, 0, 1], "document_id": 0, "window_index": 0},
        {"input_ids": [2, 3, 1], "entity_ids": [1, 0, 1], "document_id": 0, "window_index": 1},
    ]
    result = mention_similarities(model, rows, _Decoder(), progress=False)
    cos_anna_she = 1 / math.sqrt(2)
    # Mentions: Anna, she, she, Anna. Each "other" (Anna) mention: others are she, she, Anna -> (c + c + 1) / 3.
    assert result.mention["other"] == pytest.approx((2 * cos_anna_she + 1) / 3)
    assert result.mention["pronoun"] == pytest.approx((2 * cos_anna_she + 1) / 3)
    assert result.counts == {"other": 2, "pronoun": 2}
    # The entity representation in window 1 is the last mention of window 0 ("she", [1, 1]); window 0 has none.
    assert result.entity["pronoun"] == pytest.approx(1.0)
    assert result.entity["other"] == pytest.approx(cos_anna_she)


def _trainer_rows():
    rows = []
    for document, windows in enumerate([3, 1, 2]):
        for window in range(windows):
            rows.append({"input_ids": [1 + document, 2, 3, 4], "entity_ids": [1, 0, 1, 0], "document_id": document,
                         "window_index": window, "num_entities": 1})
    import datasets

    return datasets.Dataset.from_list(rows)


def test_trainer_with_batch_size_one_reads_each_document_in_order(tmp_path):
    """The paper's update order: batch 1, every window of a document in turn, the entity states updated each step."""
    model = _gpt2e().train()
    seen = []
    original_forward = model.forward

    @functools.wraps(original_forward)  # keeps the signature: the collator gives GPT2E its entity columns
    def recording_forward(*args, **kwargs):
        seen.append((int(kwargs["document_ids"][0]), int(kwargs["window_index"][0])))
        return original_forward(*args, **kwargs)

    model.forward = recording_forward
    tokenizer = type("Tokenizer", (), {"pad_token_id": None, "eos_token_id": 0})()
    args = entity_lm_training_arguments(str(tmp_path), batch_size=1, max_steps=6, use_cpu=True, logging_steps=100)
    build_entity_lm_trainer(model, tokenizer, _trainer_rows(), args).train()
    assert seen == [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1)]
    assert len(model.entity_stores["train"]) == 3


def test_trainer_set_up_refuses_random_order_and_dropped_columns(tmp_path):
    model = _gpt2e()
    tokenizer = type("Tokenizer", (), {"pad_token_id": 0, "eos_token_id": 0})()
    shuffled = entity_lm_training_arguments(str(tmp_path), use_cpu=True, train_sampling_strategy="random")
    with pytest.raises(ValueError, match="sequential"):
        build_entity_lm_trainer(model, tokenizer, _trainer_rows(), shuffled)
    dropping = entity_lm_training_arguments(str(tmp_path), use_cpu=True, remove_unused_columns=True)
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        build_entity_lm_trainer(model, tokenizer, _trainer_rows(), dropping)


@pytest.mark.parametrize("design", ["memory", "paper"])
def test_generation_continues_the_prompt_as_a_window_of_its_document(design):
    """`generate_with_entities` reads the prompt as training reads a window: with the states of the text before it
    (none at the start of a document), never with states computed from the prompt itself. With the memory, the
    prompt's own mentions already shape the continuation; with the paper's design they cannot within a first window
    (every entity is the same vector of ones) and do so through the states of an earlier window."""
    from hf_entity_models.tasks.language_modeling import generate_with_entities

    model = _gpt2e(design)
    model.generation_config.pad_token_id = 0
    input_ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(3))
    entity_ids = torch.tensor([[1, 0, 1, 2, 0, 2, 1, 0]])
    earlier = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        previous_window = model(earlier, entity_ids=torch.tensor([[0, 1, 0, 2, 2, 0, 1, 0]])).entity_states
    options = dict(max_new_tokens=4, do_sample=False, output_logits=True, return_dict_in_generate=True)
    plain = torch.stack(model.generate(input_ids, **options).logits)
    for states in (None, previous_window):
        generated = torch.stack(generate_with_entities(model, input_ids, entity_ids, states, **options).logits)
        by_hand = model.generate(input_ids, entity_ids=entity_ids, entity_states=states, **options)
        torch.testing.assert_close(generated, torch.stack(by_hand.logits), rtol=0, atol=0)
        matters = states is not None or design == "memory"
        assert bool((generated - plain).abs().max() > 1e-4) == matters, (design, states is None)
    with pytest.raises(ValueError, match=r"entity_ids has shape \(1, 5\) but input_ids \(1, 8\)"):
        generate_with_entities(model, input_ids, entity_ids[:, :5], **options)


def _rows_of_lengths(window_counts: list[int]):
    import datasets

    rows = [
        {"input_ids": [1 + document, 2, 3], "entity_ids": [1, 0, 1], "document_id": document, "window_index": window,
         "num_entities": 1}
        for document, windows in enumerate(window_counts) for window in range(windows)
    ]  # fmt: skip
    return datasets.Dataset.from_list(rows)


@pytest.mark.parametrize("num_processes, batch_size", [(2, 1), (2, 3), (3, 2)])
def test_ordered_windows_give_each_process_whole_documents_through_accelerates_sharding(num_processes, batch_size):
    """What each process reads from the stock Trainer's sequential dataloader (Accelerate's `BatchSamplerShard`):
    whole documents, window after window, full batches of distinct documents, the same number of batches each, and
    only one-token padding windows of fresh documents at window 0 besides."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    from hf_entity_models.tasks.language_modeling.entity_training import order_windows_for_processes

    window_counts = [int(n) for n in torch.randint(1, 6, (9,), generator=torch.Generator().manual_seed(batch_size))]
    ordered = order_windows_for_processes(_rows_of_lengths(window_counts), batch_size, num_processes)
    assert len(ordered) % (num_processes * batch_size) == 0
    sampler = BatchSampler(SequentialSampler(ordered), batch_size, drop_last=False)
    reader_of, batch_counts = {}, []
    for rank in range(num_processes):
        batches = list(BatchSamplerShard(sampler, num_processes=num_processes, process_index=rank))
        batch_counts.append(len(batches))
        next_window: dict[int, int] = {}
        for batch in batches:
            rows = [ordered[index] for index in batch]
            assert len(rows) == batch_size and len({row["document_id"] for row in rows}) == batch_size
            for row in rows:
                document = row["document_id"]
                if document >= len(window_counts):  # padding
                    assert row["window_index"] == 0 and row["input_ids"] == [1 + 0] and row["entity_ids"] == [0]
                    continue
                assert reader_of.setdefault(document, rank) == rank, f"document {document} read by two processes"
                assert row["window_index"] == next_window.get(document, 0)
                next_window[document] = row["window_index"] + 1
        for document, windows in next_window.items():
            assert windows == window_counts[document]
    assert set(reader_of) == set(range(len(window_counts)))
    assert len(set(batch_counts)) == 1, batch_counts


def test_one_process_order_is_the_stream_order_and_documents_are_shared_by_window_count():
    from hf_entity_models.tasks.language_modeling import order_windows_for_streams
    from hf_entity_models.tasks.language_modeling.entity_training import order_windows_for_processes
    from hf_entity_models.tasks.language_modeling.entity_evaluation import assign_documents_to_processes

    rows = _rows_of_lengths([3, 1, 2, 2])
    assert order_windows_for_processes(rows, 2, 1)["window_index"] == order_windows_for_streams(rows, 2)["window_index"]
    assert assign_documents_to_processes({0: 3, 1: 1, 2: 2, 3: 2}, 2) == [[0, 1], [2, 3]]
    assert assign_documents_to_processes({0: 1}, 2) == [[0], []]
    with pytest.raises(ValueError, match="cannot be shared by 3 processes"):
        order_windows_for_processes(rows.filter(lambda row: row["document_id"] < 2), 1, 3)
    with pytest.raises(ValueError, match="num_processes"):
        order_windows_for_processes(rows, 1, 0)


def test_trainer_evaluate_is_the_document_level_perplexity(tmp_path):
    """`trainer.evaluate()` reads whole documents like `evaluate_entity_lm` (token-weighted, batching-independent)."""
    import datasets

    from hf_entity_models.tasks.language_modeling import evaluate_entity_lm

    model = _gpt2e()
    tokenizer = type("Tokenizer", (), {"pad_token_id": 0, "eos_token_id": 0})()
    evaluation = datasets.Dataset.from_list(_windows())
    args = entity_lm_training_arguments(str(tmp_path), batch_size=2, use_cpu=True, disable_tqdm=True)
    metrics = build_entity_lm_trainer(model, tokenizer, _trainer_rows(), args, evaluation).evaluate()
    expected = evaluate_entity_lm(model, evaluation, batch_size=3, progress=False)
    nll, tokens = _reference_nll(model, _windows())
    assert metrics["eval_loss"] == pytest.approx(nll / tokens, rel=1e-6)
    for key in ("perplexity", "perplexity_without_entities"):
        assert metrics[f"eval_{key}"] == pytest.approx(expected[key], rel=1e-6)
    assert not args.dataloader_pin_memory or torch.cuda.is_available()
