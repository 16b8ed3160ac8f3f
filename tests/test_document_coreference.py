"""The document mode's parts against small hand-computed cases: candidate spans, span vectors, mention labels, the
entity memory's teacher-forced decisions (against a slow one-mention-at-a-time reference) and its greedy clustering."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hf_entity_models.tasks.coreference.conll import CorefDocument, read_conll_coreference, write_conll_coreference
from hf_entity_models.models._shared.document_coreference import (
    EntityMemory,
    MentionProposer,
    SpanRepresentation,
    candidate_spans,
    clustering_loss,
    clusters_from_assignment,
    keep_top_spans,
    log_buckets,
    mention_labels,
    spans_in_document_order,
    word_states,
)


def test_candidate_spans_stay_inside_a_sentence_and_the_width_limit():
    # Words 0-2 are one sentence, 3-4 the next; spans of at most 2 words.
    spans = candidate_spans(torch.tensor([0, 0, 0, 1, 1]), max_width=2).tolist()
    assert spans == [[0, 0], [0, 1], [1, 1], [1, 2], [2, 2], [3, 3], [3, 4], [4, 4]]


def test_log_buckets_by_hand():
    assert log_buckets(torch.tensor([0, 1, 2, 3, 4, 7, 8, 15, 16, 10**6]), 6).tolist() == [
        0, 1, 2, 2, 3, 3, 4, 4, 5, 5
    ]


def test_word_states_average_the_subwords_of_each_word():
    tokens = torch.tensor([[9.0, 9.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [9.0, 9.0]])
    word_ids = torch.tensor([-1, 0, 0, 1, -1])  # [CLS] w0 w0 w1 [SEP]
    assert word_states(tokens, word_ids).tolist() == [[2.0, 3.0], [5.0, 6.0]]


def test_a_span_vector_is_first_last_attention_head_and_width():
    representation = SpanRepresentation(hidden_size=2, max_width=2, width_size=1)
    with torch.no_grad():
        representation.head_scorer.weight.copy_(torch.tensor([[1.0, 0.0]]))
        representation.head_scorer.bias.zero_()
        representation.width_embedding.weight.copy_(torch.tensor([[10.0], [20.0]]))
    states = torch.tensor([[0.0, 1.0], [math.log(3.0), 2.0], [0.0, 5.0]])
    vectors = representation(states, torch.tensor([[0, 1], [2, 2], [0, 2]]))
    # Span (0, 1): head weights softmax([0, log 3]) = [1/4, 3/4].
    head = 0.25 * states[0] + 0.75 * states[1]
    assert torch.allclose(vectors[0], torch.cat([states[0], states[1], head, torch.tensor([20.0])]))
    assert torch.allclose(vectors[1], torch.cat([states[2], states[2], states[2], torch.tensor([10.0])]))
    # A gold span longer than max_width is read whole (weights 1/5, 3/5, 1/5) and takes the last width embedding.
    head = (states[0] + 3 * states[1] + states[2]) / 5
    assert torch.allclose(vectors[2], torch.cat([states[0], states[2], head, torch.tensor([20.0])]))


def test_mention_labels_mark_exactly_the_gold_spans():
    spans = torch.tensor([[0, 0], [0, 1], [1, 1], [2, 3]])
    assert mention_labels(spans, torch.tensor([[0, 1], [2, 3], [5, 5]])).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert mention_labels(spans, torch.zeros(0, 2, dtype=torch.long)).tolist() == [0.0] * 4


def test_the_proposer_adds_a_width_prior_to_the_mlp_score():
    proposer = MentionProposer(hidden_size=2, max_width=3, width_size=1, mlp_size=4, dropout=0.0)
    with torch.no_grad():
        proposer.width_prior.weight.copy_(torch.tensor([[0.0], [5.0], [-5.0]]))
    spans = torch.tensor([[0, 0], [0, 1], [0, 2]])
    vectors, logits = proposer(torch.randn(3, 2), spans)
    assert torch.allclose(logits - proposer.scorer(vectors).squeeze(-1), torch.tensor([0.0, 5.0, -5.0]))


def _slow_decisions(memory: EntityMemory, vectors, starts, clusters):
    """One mention at a time, as the memory reads a document: scores of every existing entity, in order of creation."""
    mentions = memory.mention_projection(vectors)
    entities, sizes, last = {}, {}, {}
    rows = []
    for index, cluster in enumerate(clusters.tolist()):
        row = {}
        for entity in entities:
            row[entity] = memory.pair_scores(
                entities[entity], mentions[index], torch.tensor(int(starts[index]) - last[entity]),
                torch.tensor(sizes[entity]),
            )
        rows.append(row)
        if cluster in entities:
            entities[cluster] = memory.updated(
                entities[cluster][None], mentions[index][None], torch.tensor([sizes[cluster]])
            )[0]
            sizes[cluster] += 1
        else:
            entities[cluster], sizes[cluster] = mentions[index], 1
        last[cluster] = int(starts[index])
    return rows


@pytest.mark.parametrize("update", ["mlp-merge", "gru", "mean"])
def test_teacher_forced_logits_equal_the_memory_read_one_mention_at_a_time(update):
    torch.manual_seed(0)
    memory = EntityMemory(6, 5, 8, update, num_distance_buckets=6, num_size_buckets=4, feature_size=3, dropout=0.0)
    vectors = torch.randn(7, 6)
    starts = torch.tensor([0, 2, 5, 7, 9, 30, 31])
    clusters = torch.tensor([4, 7, 4, 9, 7, 4, 4])  # entities in order of creation: 4 -> 0, 7 -> 1, 9 -> 2
    logits, mask, targets = memory.teacher_forced_logits(vectors, starts, clusters)
    assert targets.tolist() == [3, 3, 0, 3, 1, 0, 0]  # 3 = "new entity"
    assert mask.tolist() == [
        [False, False, False, True],
        [True, False, False, True],
        [True, True, False, True],
        [True, True, False, True],
        [True, True, True, True],
        [True, True, True, True],
        [True, True, True, True],
    ]
    assert torch.all(logits[:, -1] == 0)
    column = {4: 0, 7: 1, 9: 2}
    for index, row in enumerate(_slow_decisions(memory, vectors, starts, clusters)):
        for entity, score in row.items():
            assert torch.allclose(logits[index, column[entity]], score, atol=1e-6)


def test_the_mean_update_is_the_running_mean_of_the_mentions():
    memory = EntityMemory(2, 2, 4, "mean", 4, 4, 2, 0.0)
    entities = torch.tensor([[2.0, 4.0]])  # the mean of 3 mentions
    assert memory.updated(entities, torch.tensor([[6.0, 0.0]]), torch.tensor([3])).tolist() == [[3.0, 3.0]]


def test_greedy_clustering_by_hand():
    memory = EntityMemory(2, 2, 4, "mean", 4, 4, 2, 0.0)
    with torch.no_grad():
        memory.mention_projection.weight.copy_(torch.eye(2))
        memory.mention_projection.bias.zero_()
        # A hand-made pair score, agreement minus 0.5 ("new entity" is 0): the first layer's unit 0 sums the
        # entity-mention product (columns 4-5 of [entity; mention; product; distance; size]), the second layer
        # subtracts 0.5; distance and size count for nothing.
        first, last = memory.pair_scorer[0], memory.pair_scorer[-1]
        first.weight.zero_(), first.bias.zero_(), last.weight.zero_()
        first.weight[0, 4:6] = 1.0
        last.weight[0, 0], last.bias[0] = 1.0, -0.5
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.9, 0.1], [0.3, 0.3]])
    entity = torch.tensor([[1.0, 0.0]])
    assert memory.pair_scores(entity, torch.tensor([[0.9, 0.1]]), torch.tensor([5]), torch.tensor([2])).item() == (
        pytest.approx(0.4))
    # m0 new; m1 scores -0.5 -> new; m2 scores 0.5 with entity 0 -> joins; m3 0.4 with entity 0 -> joins;
    # entity 0 is then the mean (2.9 / 3, 0.1 / 3); m4 scores 0.3 * (3.0 / 3) - 0.5 = -0.2 with it and with entity 1
    # -> new.
    assert memory.cluster(vectors, torch.arange(5)) == [0, 1, 0, 0, 2]


def _slow_greedy_clustering(memory: EntityMemory, vectors: torch.Tensor, starts: torch.Tensor) -> list[int]:
    """Greedy clustering straight from `pair_scores`, one mention at a time, with growing tensors."""
    mentions = memory.mention_projection(vectors)
    entities, sizes, last, assignment = [], [], [], []
    for index in range(len(mentions)):
        best = -1
        if entities:
            scores = memory.pair_scores(torch.stack(entities), mentions[index].unsqueeze(0),
                                        starts[index] - torch.tensor(last), torch.tensor(sizes))
            if scores.max() > 0:
                best = int(scores.argmax())
        if best < 0:
            entities.append(mentions[index]), sizes.append(1), last.append(int(starts[index]))
            assignment.append(len(entities) - 1)
            continue
        entities[best] = memory.updated(entities[best].unsqueeze(0), mentions[index].unsqueeze(0),
                                        torch.tensor([sizes[best]]))[0]
        sizes[best] += 1
        last[best] = int(starts[index])
        assignment.append(best)
    return assignment


@pytest.mark.parametrize("update", ["mlp-merge", "gru", "mean"])
@torch.no_grad()
def test_greedy_clustering_equals_the_pair_scores_read_one_mention_at_a_time(update):
    torch.manual_seed(0)
    memory = EntityMemory(6, 5, 8, update, num_distance_buckets=6, num_size_buckets=4, feature_size=3, dropout=0.0)
    memory.eval()
    vectors = torch.randn(60, 6)
    starts = torch.sort(torch.randint(0, 400, (60,))).values
    first_pairs = memory.pair_scores(memory.mention_projection(vectors[:30]), memory.mention_projection(vectors[30:]),
                                     starts[30:] - starts[:30], torch.ones(30, dtype=torch.long))
    memory.pair_scorer[-1].bias -= first_pairs.median()  # half of these pairs would join: both decisions are read
    expected = _slow_greedy_clustering(memory, vectors, starts)
    assert 5 < len(set(expected)) < 55  # mentions both joined entities and started new ones
    assert memory.cluster(vectors, starts) == expected


def test_clustering_loss_smooths_over_the_valid_choices_only():
    logits = torch.tensor([[float("-inf"), 0.0], [math.log(3.0), 0.0]])
    mask = torch.tensor([[False, True], [True, True]])
    targets = torch.tensor([1, 0])
    # Mention 0: one valid choice, loss 0. Mention 1: log-probs log(3/4), log(1/4).
    expected = -(0.9 * math.log(0.75) + 0.1 * (math.log(0.75) + math.log(0.25)) / 2) / 2
    assert clustering_loss(logits, mask, targets, label_smoothing=0.1).item() == pytest.approx(expected)


def test_kept_spans_reach_the_threshold_at_most_the_limit_in_document_order():
    spans = torch.tensor([[4, 4], [0, 0], [0, 2], [2, 3], [1, 1]])
    logits = torch.tensor([3.0, 1.0, 2.0, -1.0, 0.5])
    # 4 spans reach 0; the limit 0.4 x 10 words = 4 keeps them all; order: by first word, longer first.
    assert keep_top_spans(spans, logits, 0.0, 0.4, 10).tolist() == [[0, 2], [0, 0], [1, 1], [4, 4]]
    # A limit of 2 keeps the 2 highest.
    assert keep_top_spans(spans, logits, 0.0, 0.2, 10).tolist() == [[0, 2], [4, 4]]
    assert spans_in_document_order(torch.tensor([[3, 3], [1, 1], [1, 4]])).tolist() == [2, 1, 0]


def test_clusters_from_an_assignment():
    assert clusters_from_assignment([(0, 0), (2, 3), (5, 5)], [1, 0, 1]) == [[(0, 0), (5, 5)], [(2, 3)]]


def test_an_unknown_update_is_refused():
    with pytest.raises(ValueError, match="update must be one of"):
        EntityMemory(2, 2, 4, "sum", 4, 4, 2, 0.0)


def test_teacher_forcing_trains_the_memory_to_the_gold_decisions():
    """The mechanism learns: on a toy document whose entities are told apart by their vectors, the memory trained on
    its gold clusters makes the gold decisions greedily."""
    torch.manual_seed(0)
    prototypes = torch.randn(3, 6)
    clusters = torch.tensor([0, 1, 0, 2, 1, 0, 2, 2, 1, 0])
    vectors = prototypes[clusters] + 0.05 * torch.randn(10, 6)
    starts = torch.arange(10) * 3
    memory = EntityMemory(6, 8, 16, "mlp-merge", 6, 4, 3, 0.0)
    optimizer = torch.optim.Adam(memory.parameters(), lr=1e-2)
    for _ in range(150):
        logits, mask, targets = memory.teacher_forced_logits(vectors, starts, clusters)
        loss = clustering_loss(logits, mask, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert memory.cluster(vectors, starts) == clusters.tolist()
    assert isinstance(memory.merge, nn.Linear)


def test_sentences_are_read_from_blank_lines_and_written_back(tmp_path):
    path = tmp_path / "story.conll"
    path.write_text(
        "#begin document (story); part 0\n"
        "story\t0\t0\tAnn\t(1)\nstory\t0\t1\tslept\t-\n\n\n"
        "story\t0\t2\tShe\t(1)\n\nstory\t0\t3\tWoke\t-\nstory\t0\t4\tup\t-\n\n"
        "#end document\n",
        encoding="utf-8",
    )
    document = read_conll_coreference(path)[0]
    assert document.sentence_starts == [2, 3]  # two blank lines end one sentence; the last blank line starts none
    assert document.sentence_ids() == [0, 0, 1, 2, 2]
    assert document.with_mentions([]).sentence_starts == [2, 3]
    again = read_conll_coreference(write_conll_coreference(document, tmp_path / "again.conll"))[0]
    assert again.sentence_starts == [2, 3]
    with pytest.raises(ValueError, match="sentence_starts"):
        CorefDocument("x", 0, ["a", "b"], sentence_starts=[0])
