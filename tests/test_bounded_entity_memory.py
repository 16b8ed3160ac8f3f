"""The bounded entity memory (`max_entities`, the learned bounded memory of "Learning to Ignore", EMNLP 2020) against
small hand-computed cases: the unbounded default unchanged, learned eviction and ignoring at inference, the oracle's
evictions counted by hand, the one-pass teacher forcing against a memory run one mention at a time, and training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hf_entity_models.models._shared.document_coreference import (
    DocumentCoreferenceHead,
    EntityMemory,
    clustering_loss,
    oracle_bounded_memory,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# A document of 40 words (5 sentences of 8) and 11 gold mentions of 5 entities, in document order.
GOLD_SPANS = torch.tensor(
    [[0, 0], [3, 4], [9, 9], [12, 12], [16, 17], [20, 20], [25, 25], [27, 28], [33, 33], [36, 36], [38, 39]]
)
GOLD_IDS = torch.tensor([0, 1, 0, 2, 1, 3, 0, 2, 4, 1, 0])


def _head_outputs(**bounded):
    torch.manual_seed(0)
    head = DocumentCoreferenceHead(8, 16, 3, 4, "mlp-merge", 0.0, **bounded).eval()
    torch.manual_seed(1)
    features, sentences = torch.randn(40, 8), torch.arange(40) // 8
    with torch.no_grad():
        states = head.states(features)
        spans, logits = head.candidates(states, sentences)
        mention_loss, cluster_loss = head.losses(states, spans, logits, GOLD_SPANS, GOLD_IDS)
    return head, logits, mention_loss, cluster_loss, head.cluster_spans(states, GOLD_SPANS)


# ------------------------------------------------------------------------------ (1) the unbounded default unchanged
def test_without_a_bound_the_head_is_the_one_before_the_bounded_memory():
    default, logits, mention_loss, cluster_loss, clusters = _head_outputs()
    unbounded, *same = _head_outputs(max_entities=None)
    assert default.memory.max_entities is None and not hasattr(default.memory, "fertility_scorer")
    assert list(default.state_dict()) == list(unbounded.state_dict())
    assert not any("fertility" in key for key in default.state_dict())
    for mine, theirs in zip((logits, mention_loss, cluster_loss, clusters), same):
        assert torch.equal(mine, theirs) if isinstance(mine, torch.Tensor) else mine == theirs
    # Figures of the same seed computed with the file as it was before the bounded memory (commit baa776e, CPU).
    assert mention_loss.item() == pytest.approx(0.7660525441169739, rel=1e-5)
    assert cluster_loss.item() == pytest.approx(1.267378330230713, rel=1e-5)
    assert clusters == list(range(11))


def test_a_bound_no_document_reaches_changes_nothing():
    """5 cells for 5 entities: no eviction, so the same losses and clusters as unbounded (the fertility MLP is created
    last, so the same seed draws the same weights for everything else)."""
    _, logits, mention_loss, cluster_loss, clusters = _head_outputs()
    _, bounded_logits, bounded_mention, bounded_cluster, bounded_clusters = _head_outputs(max_entities=5)
    assert torch.equal(logits, bounded_logits) and torch.equal(mention_loss, bounded_mention)
    assert bounded_cluster.item() == pytest.approx(cluster_loss.item(), rel=1e-6)
    assert bounded_clusters == clusters


@pytest.mark.parametrize("capacity", [0, -1, 2.0, True])
def test_a_capacity_that_is_not_a_positive_int_is_refused(capacity):
    with pytest.raises(ValueError, match="max_entities must be None"):
        EntityMemory(2, 2, 4, "mean", 4, 4, 2, 0.0, max_entities=capacity)


# ------------------------------------------------------------------------------ (2, 5) greedy eviction by hand
def _hand_made_memory(capacity: int | None) -> EntityMemory:
    """Mentions are [fertility, tag]; a mention joins an entity with its tag (the mean update keeps the tag) and the
    fertility of an entity is its first coordinate (the mean of its mentions')."""
    memory = EntityMemory(2, 2, 4, "mean", 4, 4, 2, 0.0, max_entities=capacity)
    with torch.no_grad():
        memory.mention_projection.weight.copy_(torch.eye(2))
        memory.mention_projection.bias.zero_()
        # Pair score 1 - 10 |entity tag - mention tag|, built in the scorer's weights (both clustering paths read
        # them): over [entity; mention; product; distance; size], unit 0 is relu(e_tag - m_tag), unit 1 its opposite.
        first, last = memory.pair_scorer[0], memory.pair_scorer[-1]
        first.weight.zero_(), first.bias.zero_(), last.weight.zero_()
        first.weight[0, 1], first.weight[0, 3], first.weight[1, 1], first.weight[1, 3] = 1.0, -1.0, -1.0, 1.0
        last.weight[0, :2], last.bias[0] = -10.0, 1.0
    assert memory.pair_scores(torch.tensor([[5.0, 2.0]]), torch.tensor([[1.0, 1.5]]), torch.tensor([3]),
                              torch.tensor([1])).item() == pytest.approx(-4.0)
    memory.fertility = lambda entities, distances, sizes: entities[..., 0]
    return memory


def test_a_full_memory_evicts_the_entity_of_lowest_fertility_and_keeps_its_mentions():
    vectors = torch.tensor([[5.0, 0.0], [1.0, 1.0], [5.0, 0.0], [3.0, 2.0], [1.0, 1.0], [3.0, 2.0], [5.0, 0.0]])
    # m0, m1: entities 0 and 1 fill the 2 cells; m2 joins 0. m3 (tag 2) is new in a full memory: fertilities 5 (entity
    # 0), 1 (entity 1), 3 (newcomer) -> entity 1 is evicted, entity 2 takes its cell. m4 has entity 1's tag but
    # cannot join it any more: new (entity 3), fertilities 5, 3, 1 -> ignored. m5 joins entity 2, m6 entity 0.
    assert _hand_made_memory(2).cluster(vectors, torch.arange(7)) == [0, 1, 0, 2, 3, 2, 0]
    # Unbounded, m4 would join entity 1.
    assert _hand_made_memory(None).cluster(vectors, torch.arange(7)) == [0, 1, 0, 2, 1, 2, 0]


def test_a_newcomer_of_lowest_fertility_is_ignored_and_never_joined():
    vectors = torch.tensor([[5.0, 0.0], [4.0, 1.0], [1.0, 2.0], [1.0, 2.0], [4.0, 1.0], [5.0, 0.0]])
    # m2 is new in a full memory with fertility 1 against 5 and 4: ignored, a singleton (entity 2). m3 has its tag but
    # nothing tracks it: new again (entity 3), ignored again. m4 and m5 join the tracked entities 1 and 0.
    assert _hand_made_memory(2).cluster(vectors, torch.arange(6)) == [0, 1, 2, 3, 1, 0]
    assert _hand_made_memory(None).cluster(vectors, torch.arange(6)) == [0, 1, 2, 2, 1, 0]
    # A memory of one cell: m1 (fertility 4 < 5) is ignored, m2 too; m4 (tag 1) is new and ignored again.
    assert _hand_made_memory(1).cluster(vectors, torch.arange(6)) == [0, 1, 2, 3, 4, 0]


# ------------------------------------------------------------------------------ (3) the oracle by hand
def test_the_oracle_evicts_the_entity_with_fewest_mentions_left():
    # Entities A=0 (mentions 0, 2, 8), B=1 (1, 4), C=2 (3, 6, 7), D=3 (5), E=4 (9); 2 cells.
    oracle = oracle_bounded_memory([0, 1, 0, 2, 1, 3, 2, 2, 0, 4], 2)
    # Mentions left after the current one, (left, last mention) per candidate, the lowest dropped:
    #   m3 (C): A (1, 2), B (1, 1), C (2, 3)  -> B: a tie on 1 left goes to the less recent -> cell 1 evicted.
    #   m4 (B, evicted before, so new): A (1, 2), C (2, 3), B (0, 4) -> the newcomer is ignored (2).
    #   m5 (D): A (1, 2), C (2, 3), D (0, 5) -> ignored.
    #   m9 (E): A (0, 8), C (0, 7), E (0, 9) -> all 0 left: the least recent, C in cell 1, is evicted.
    assert oracle.decisions.tolist() == [3, 4, 5, 9]
    assert oracle.evicted.tolist() == [1, 2, 2, 1]
    assert oracle.targets.tolist() == [2, 2, 0, 2, 2, 2, 1, 1, 0, 2]  # 2: "new entity" (untracked)
    # Each cell's entity's last mention and its mentions since it entered the cell, before every mention.
    assert oracle.cells.tolist() == [
        [-1, -1], [0, -1], [0, 1], [2, 1], [2, 3], [2, 3], [2, 3], [2, 6], [2, 7], [8, 7]
    ]
    assert oracle.sizes.tolist() == [[0, 0], [1, 0], [1, 1], [2, 1], [2, 1], [2, 1], [2, 1], [2, 2], [2, 3], [3, 3]]


def test_an_evicted_entity_reenters_as_a_new_one():
    # A (0, 4), B (1, 2, 3); 1 cell. m1: A (1 left, last 0) against B (2 left) -> A evicted (cell 0). m4: A is new;
    # B (0, 3) against A (0, 4): the tie goes to the less recent B -> evicted; A starts over at size 1.
    oracle = oracle_bounded_memory([0, 1, 1, 1, 0], 1)
    assert oracle.decisions.tolist() == [1, 4] and oracle.evicted.tolist() == [0, 0]
    assert oracle.targets.tolist() == [1, 1, 0, 0, 1]
    assert oracle.cells.tolist() == [[-1], [0], [1], [2], [3]]
    assert oracle.sizes.tolist() == [[0], [1], [1], [2], [3]]


# ------------------------------------------------------------------------------ one pass = one mention at a time
def _slow_bounded(memory: EntityMemory, vectors, starts, clusters, capacity):
    """The memory run on the gold clusters one mention at a time, evictions by the oracle's rule written out again."""
    mentions = memory.mention_projection(vectors)
    left = {entity: clusters.count(entity) for entity in clusters}
    cells, rows, evictions = [], [], []  # a cell: [entity, state, size, last start, last mention]
    for index, entity in enumerate(clusters):
        left[entity] -= 1
        start = int(starts[index])
        features = [(cell[1], torch.tensor(start - cell[3]), torch.tensor(cell[2])) for cell in cells]
        scores = [memory.pair_scores(state, mentions[index], distance, size) for state, distance, size in features]
        tracked = [k for k, cell in enumerate(cells) if cell[0] == entity]
        rows.append((scores, tracked[0] if tracked else capacity))
        if tracked:
            cell = cells[tracked[0]]
            cell[1] = memory.updated(cell[1][None], mentions[index][None], torch.tensor([cell[2]]))[0]
            cell[2], cell[3], cell[4] = cell[2] + 1, start, index
        elif len(cells) < capacity:
            cells.append([entity, mentions[index], 1, start, index])
        else:
            fertility = [memory.fertility(state, distance, size) for state, distance, size in features]
            fertility.append(memory.fertility(mentions[index], torch.tensor(0), torch.tensor(1)))
            keys = [(left[cell[0]], cell[4]) for cell in cells] + [(left[entity], index)]
            drop = keys.index(min(keys))
            evictions.append((index, torch.stack(fertility), drop))
            if drop < capacity:
                cells[drop] = [entity, mentions[index], 1, start, index]
    return rows, evictions


@pytest.mark.parametrize("update", ["mlp-merge", "gru", "mean"])
def test_bounded_teacher_forcing_equals_the_memory_read_one_mention_at_a_time(update):
    torch.manual_seed(0)
    memory = EntityMemory(6, 5, 8, update, 6, 4, 3, 0.0, max_entities=2)
    clusters = [4, 7, 4, 9, 7, 4, 5, 9, 9, 7, 4, 4, 5]
    vectors, starts = torch.randn(len(clusters), 6), torch.tensor([0, 2, 5, 7, 9, 30, 31, 33, 40, 41, 50, 52, 60])
    logits, mask, targets, eviction_logits, evicted = memory.bounded_teacher_forcing(
        vectors, starts, torch.tensor(clusters)
    )
    rows, evictions = _slow_bounded(memory, vectors, starts, clusters, 2)
    assert targets.tolist() == [target for _, target in rows]
    for index, (scores, _) in enumerate(rows):
        assert mask[index].tolist() == [k < len(scores) for k in range(2)] + [True]
        assert torch.allclose(logits[index, : len(scores)], torch.stack(scores) if scores else logits[index, :0])
        assert torch.all(torch.isinf(logits[index, len(scores) : 2])) and logits[index, 2] == 0
    assert evicted.tolist() == [drop for _, _, drop in evictions] and len(evictions) >= 3
    assert torch.allclose(eviction_logits, -torch.stack([fertility for _, fertility, _ in evictions]), atol=1e-6)


def test_the_head_adds_the_eviction_cross_entropy_to_the_clustering_loss():
    torch.manual_seed(0)
    head = DocumentCoreferenceHead(8, 16, 3, 4, "gru", 0.0, max_entities=2).eval()
    states = head.states(torch.randn(40, 8))
    spans, logits = head.candidates(states, torch.arange(40) // 8)
    _, cluster_loss = head.losses(states, spans, logits, GOLD_SPANS, GOLD_IDS)
    vectors, _ = head.proposer(states, GOLD_SPANS)
    decisions, mask, targets, eviction_logits, evicted = head.memory.bounded_teacher_forcing(
        vectors, GOLD_SPANS[:, 0], GOLD_IDS
    )
    assert evicted.numel() > 0
    expected = clustering_loss(decisions, mask, targets) + F.cross_entropy(eviction_logits, evicted)
    assert torch.allclose(cluster_loss, expected)


def test_a_document_without_evictions_still_reaches_the_fertility_mlp():
    """Data-parallel training needs every parameter in every step's graph: zero gradients, not none."""
    torch.manual_seed(0)
    head = DocumentCoreferenceHead(8, 16, 3, 4, "mean", 0.0, max_entities=10)
    states = head.states(torch.randn(40, 8))
    spans, logits = head.candidates(states, torch.arange(40) // 8)
    mention_loss, cluster_loss = head.losses(states, spans, logits, GOLD_SPANS, GOLD_IDS)
    (mention_loss + cluster_loss).backward()
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in head.memory.fertility_scorer.parameters())


# ------------------------------------------------------------------------------ (4) training
def test_the_bounded_loss_falls_on_a_tiny_document():
    """Words carry their entity's prototype; 5 entities in 2 cells, the early ones dying out, so the oracle evicts
    tracked entities (cells 0, 1, 0 at mentions 4, 7, 11): the coreference and the eviction decisions are both
    learnable, and 30 Adam steps halve the clustering loss."""
    torch.manual_seed(0)
    gold_ids = torch.tensor([0, 1, 0, 1, 2, 2, 2, 3, 3, 2, 3, 4, 4, 3, 4, 4])
    gold_spans = torch.arange(0, 32, 2).unsqueeze(1).expand(-1, 2)  # one-word mentions at words 0, 2, ..., 30
    assert oracle_bounded_memory(gold_ids.tolist(), 2).evicted.tolist() == [0, 1, 0]
    prototypes = torch.randn(5, 8)
    features = 0.1 * torch.randn(32, 8)
    features[gold_spans[:, 0]] += prototypes[gold_ids]
    head = DocumentCoreferenceHead(8, 16, 3, 4, "mlp-merge", 0.0, max_entities=2)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-2)
    sentences = torch.arange(32) // 8
    losses = []
    for _ in range(30):
        states = head.states(features)
        spans, logits = head.candidates(states, sentences)
        _, cluster_loss = head.losses(states, spans, logits, gold_spans, gold_ids)
        optimizer.zero_grad()
        cluster_loss.backward()
        optimizer.step()
        losses.append(cluster_loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    with torch.no_grad():  # and the greedy bounded memory now clusters the gold mentions as the gold does
        assert head.eval().cluster_spans(head.states(features), gold_spans) == gold_ids.tolist()
    assert all(parameter.grad is not None for parameter in head.memory.fertility_scorer.parameters())
