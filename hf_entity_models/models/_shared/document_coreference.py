"""Coreference over whole documents: span mentions proposed and scored, then clustered by a memory of entities read one
mention at a time (the direction the people-tracking memory's authors took for long documents: Toshniwal et al.,
EMNLP 2020 and CRAC 2021). Three small modules, one job each:

* `SpanRepresentation` / `MentionProposer`: every span of up to `max_span_width` words inside one sentence, as
  [first word; last word; attention-pooled words; width embedding], scored by an MLP plus a learned width prior and
  trained with binary cross-entropy against all gold mentions (singletons and nested mentions included).
* `EntityMemory`: mentions in document order, each scored against every entity in memory by an MLP over
  [entity; mention; entity * mention; distance bucket; cluster-size bucket], "new entity" fixed at 0; the chosen
  entity is updated as the people-tracking memory updates a cell it corefers with (``"mlp-merge"``: a tanh-MLP
  merge of the entity and the mention), as the Referential Reader does (``"gru"``: a GRU cell, the mention as
  input) or as the running mean of its mentions (``"mean"``). Trained with teacher forcing on the gold
  clusters (every mention's decision scored in one pass, see `EntityMemory.teacher_forced_logits`), greedy at
  inference (`EntityMemory.cluster`).
* A bounded memory (`max_entities`; the learned bounded memory of "Learning to Ignore", EMNLP 2020): at most
  `max_entities` entities are tracked. A mention that starts an entity while the memory is full goes to a learned
  eviction: a "fertility" MLP scores every tracked entity and the newcomer, the lowest is dropped (an evicted entity
  keeps its mentions but can no longer be joined; a dropped newcomer stays a singleton, "ignored"). Trained on an
  oracle that drops the entity with the fewest gold mentions left (`oracle_bounded_memory`,
  `EntityMemory.bounded_teacher_forcing`).

`DocumentCoreferenceHead` is the controller: word features -> a BiLSTM (as LitBank's own baseline) -> the proposer
-> the memory; the document mode of each memory model owns one, with the model's own entity update.

Word-level throughout: a word's state is the mean of its subword states, spans and distances are counted in words,
as CoNLL files count them. Saving a model copies this file next to the weights, so it imports only torch,
transformers and the standard library.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init
from transformers.utils import ModelOutput

# "new entity" is the fixed score 0 every entity score competes with (as in the authors' code).
NEW_ENTITY_SCORE = 0.0
ENTITY_UPDATES = ("mlp-merge", "gru", "mean")
COREFERENCE_MODES = ("tokens", "document")
# The head's fixed shape: log-scale buckets of distances (words since an entity's last mention: up to 2**10) and of
# entity sizes (mentions so far: up to 2**8).
NUM_DISTANCE_BUCKETS, NUM_SIZE_BUCKETS = 12, 10


def check_document_mode_values(config, size_limit) -> None:
    """Validate the document-mode fields every entity-memory config has (see the configs' docstrings); sizes must
    lie in [1, `size_limit.maximum`] (`checkpoints.WIDTH_LIMIT`).

    Raises:
        ValueError: What is wrong and the fix, in one line.
    """
    checks = [
        (config.coreference_mode in COREFERENCE_MODES,
         f"coreference_mode must be one of {COREFERENCE_MODES}, got {config.coreference_mode!r}."),
        (config.entity_update in ENTITY_UPDATES,
         f"entity_update must be one of {ENTITY_UPDATES}, got {config.entity_update!r}."),
        (0.0 <= config.document_dropout < 1.0, f"document_dropout must be in [0, 1), got {config.document_dropout}."),
        (config.span_loss_weight >= 0, f"span_loss_weight must be >= 0, got {config.span_loss_weight}."),
        (math.isfinite(config.span_threshold), f"span_threshold must be a finite logit, got {config.span_threshold}."),
        (0.0 < config.max_mentions_per_word <= config.max_span_width,
         f"max_mentions_per_word must be in (0, max_span_width={config.max_span_width}], got "
         f"{config.max_mentions_per_word}."),
        (config.document_hidden_size % 2 == 0,
         f"document_hidden_size must be even (a BiLSTM of two halves), got {config.document_hidden_size}."),
        (_valid_capacity(getattr(config, "max_entities", None)),
         f"max_entities must be None (unbounded) or an int >= 1, got {getattr(config, 'max_entities', None)!r}."),
    ]
    for name in ("document_hidden_size", "max_span_width", "span_width_size"):
        value = getattr(config, name)
        checks.append((
            1 <= value <= size_limit.maximum,
            f"{name} must be in [1, {size_limit.maximum:,}], got {value}.",
        ))
    for condition, message in checks:
        if not condition:
            raise ValueError(message)


def _valid_capacity(max_entities) -> bool:
    return max_entities is None or (isinstance(max_entities, int) and not isinstance(max_entities, bool)
                                    and max_entities >= 1)


def log_buckets(values: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Bucket non-negative counts on a log scale: 0, 1, 2-3, 4-7, ... the last bucket holds everything larger.

    Example:
        >>> log_buckets(torch.tensor([0, 1, 2, 3, 4, 7, 8, 1000]), 5).tolist()
        [0, 1, 2, 2, 3, 3, 4, 4]
    """
    values = values.clamp_min(0)
    buckets = torch.where(values > 0, torch.floor(torch.log2(values.clamp_min(1).float())).long() + 1, 0)
    return buckets.clamp(max=num_buckets - 1)


def candidate_spans(sentence_ids: torch.LongTensor, max_width: int) -> torch.LongTensor:
    """Every span `(first_word, last_word)` (last inclusive) of at most `max_width` words inside one sentence, sorted
    by first word, then by last word.

    Args:
        sentence_ids: `(W,)` the sentence of every word, non-decreasing.
        max_width: The longest span, in words.

    Example:
        >>> candidate_spans(torch.tensor([0, 0, 0, 1]), 2).tolist()
        [[0, 0], [0, 1], [1, 1], [1, 2], [2, 2], [3, 3]]
    """
    num_words = sentence_ids.shape[0]
    starts = torch.arange(num_words, device=sentence_ids.device).unsqueeze(1)
    ends = starts + torch.arange(max_width, device=sentence_ids.device).unsqueeze(0)
    inside = ends < num_words
    same_sentence = inside & (sentence_ids[ends.clamp(max=num_words - 1)] == sentence_ids.unsqueeze(1))
    return torch.stack([starts.expand_as(ends)[same_sentence], ends[same_sentence]], dim=-1)


def word_states(token_states: torch.Tensor, word_ids: torch.LongTensor) -> torch.Tensor:
    """The mean of every word's subword states: `(T, H)` and `(T,)` word ids (-1 for tokens of no word, e.g. special
    tokens) -> `(W, H)`, W = largest word id + 1. Every word must have a token."""
    keep = word_ids >= 0
    ids, states = word_ids[keep], token_states[keep]
    num_words = int(ids.max()) + 1 if ids.numel() else 0
    sums = states.new_zeros(num_words, states.shape[-1]).index_add(0, ids, states)
    counts = torch.bincount(ids, minlength=num_words).clamp_min(1).unsqueeze(-1).to(states.dtype)
    return sums / counts


class SpanRepresentation(nn.Module):
    """[first word; last word; attention-pooled words; width embedding] of every span: `(W, H)`, `(N, 2)` ->
    `(N, 3H + width_size)`. Spans of any width are read whole (gold mentions may be longer than the proposer's
    candidates); widths of `max_width` words and more share the last width embedding."""

    def __init__(self, hidden_size: int, max_width: int, width_size: int):
        super().__init__()
        self.max_width = max_width
        self.width_embedding = nn.Embedding(max_width, width_size)
        self.head_scorer = nn.Linear(hidden_size, 1)

    @property
    def output_size(self) -> int:
        return 3 * self.head_scorer.in_features + self.width_embedding.embedding_dim

    def forward(self, states: torch.Tensor, spans: torch.LongTensor) -> torch.Tensor:
        starts, ends = spans[:, 0], spans[:, 1]
        widths = ends - starts
        offsets = torch.arange(int(widths.max()) + 1 if widths.numel() else 1, device=states.device)
        positions = starts.unsqueeze(1) + offsets  # (N, max_width)
        inside = offsets.unsqueeze(0) <= widths.unsqueeze(1)
        positions = torch.where(inside, positions, starts.unsqueeze(1))
        head_logits = self.head_scorer(states).squeeze(-1)[positions].masked_fill(~inside, float("-inf"))
        head = torch.einsum("nw,nwh->nh", torch.softmax(head_logits, dim=-1), states[positions])
        width_buckets = widths.clamp(max=self.max_width - 1)
        return torch.cat([states[starts], states[ends], head, self.width_embedding(width_buckets)], dim=-1)


def feed_forward(input_size: int, hidden_size: int, output_size: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(input_size, hidden_size), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden_size, output_size)
    )


class MentionProposer(nn.Module):
    """Scores candidate spans as mentions: an MLP over the span representation plus a learned prior per width."""

    def __init__(self, hidden_size: int, max_width: int, width_size: int, mlp_size: int, dropout: float):
        super().__init__()
        self.spans = SpanRepresentation(hidden_size, max_width, width_size)
        self.scorer = feed_forward(self.spans.output_size, mlp_size, 1, dropout)
        self.width_prior = nn.Embedding(max_width, 1)

    def forward(self, states: torch.Tensor, spans: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(span vectors (N, D), mention logits (N,))`."""
        vectors = self.spans(states, spans)
        widths = (spans[:, 1] - spans[:, 0]).clamp(max=self.width_prior.num_embeddings - 1)
        logits = self.scorer(vectors).squeeze(-1) + self.width_prior(widths).squeeze(-1)
        return vectors, logits


def mention_labels(spans: torch.LongTensor, gold_spans: torch.LongTensor) -> torch.Tensor:
    """1.0 for every candidate span that is a gold mention, else 0.0: `(N, 2)`, `(G, 2)` -> `(N,)`."""
    if gold_spans.numel() == 0:
        return spans.new_zeros(spans.shape[0], dtype=torch.float)
    matches = (spans.unsqueeze(1) == gold_spans.unsqueeze(0)).all(-1)
    return matches.any(-1).float()


@dataclass
class BoundedMemoryOracle:
    """The gold run of a bounded memory over a document's gold mentions (`oracle_bounded_memory`); row i of
    `cells`, `sizes` and `targets` is the memory just before mention i is read, with K = `max_entities` cells.

    Args:
        cells: `(M, K)` the last mention (its index) of the entity each cell tracks; -1 for an empty cell.
        sizes: `(M, K)` that entity's mentions since it entered its cell (0 for an empty cell).
        targets: `(M,)` the cell of mention i's entity; K if its entity is not tracked ("new entity": its first
            mention, or one whose entity was evicted or ignored before).
        decisions: `(E,)` the mentions that start an entity in a full memory, in document order.
        evicted: `(E,)` the oracle's choice for each: the cell it evicts, or K for ignoring the newcomer.
    """

    cells: torch.LongTensor
    sizes: torch.LongTensor
    targets: torch.LongTensor
    decisions: torch.LongTensor
    evicted: torch.LongTensor


def oracle_bounded_memory(
    cluster_ids: Sequence[int], max_entities: int, device: torch.device | str | None = None
) -> BoundedMemoryOracle:
    """Runs the gold clusters of a document's mentions (in document order) through a memory of `max_entities` cells.
    A mention of a tracked entity joins it; another starts an entity, in an empty cell while there is one, else the
    oracle drops the candidate (a tracked entity or the newcomer) with the fewest gold mentions left after this one,
    ties to the least recently mentioned (so the newcomer, mentioned last, loses no tie)."""
    remaining: dict[int, int] = {}
    for entity in cluster_ids:
        remaining[entity] = remaining.get(entity, 0) + 1
    cell_entity: list[int] = []
    cell_last: list[int] = []
    cell_size: list[int] = []
    cells, sizes, targets, decisions, evicted = [], [], [], [], []
    for index, entity in enumerate(cluster_ids):
        remaining[entity] -= 1
        empty = max_entities - len(cell_entity)
        cells.append(cell_last + [-1] * empty)
        sizes.append(cell_size + [0] * empty)
        if entity in cell_entity:
            cell = cell_entity.index(entity)
            targets.append(cell)
            cell_last[cell], cell_size[cell] = index, cell_size[cell] + 1
            continue
        targets.append(max_entities)
        if empty:
            cell_entity.append(entity)
            cell_last.append(index)
            cell_size.append(1)
            continue
        keys = [(remaining[other], last) for other, last in zip(cell_entity, cell_last)] + [(remaining[entity], index)]
        drop = min(range(max_entities + 1), key=keys.__getitem__)
        decisions.append(index)
        evicted.append(drop)
        if drop < max_entities:
            cell_entity[drop], cell_last[drop], cell_size[drop] = entity, index, 1

    def tensor(values):
        return torch.tensor(values, dtype=torch.long, device=device)

    return BoundedMemoryOracle(
        tensor(cells).view(-1, max_entities), tensor(sizes).view(-1, max_entities), tensor(targets),
        tensor(decisions), tensor(evicted),
    )  # fmt: skip


class EntityMemory(nn.Module):
    """Clusters mentions, read in document order, into entities held in a memory (unbounded by default).

    Each mention is compared with every entity in memory: an MLP over [entity; mention; entity * mention; distance
    bucket (words since the entity's last mention); size bucket (its mentions so far)] gives a score, "new entity"
    the fixed score 0. The mention joins the best entity if that score is above 0, else starts a new entity (its
    vector is the mention's). A joined entity is updated by `update`: ``"mlp-merge"`` (the people-tracking memory's
    coreference update, a tanh-MLP of [entity; mention]), ``"gru"`` (the Referential Reader's, a GRU cell with the
    mention as input and the entity as state) or ``"mean"`` (the running mean of its mentions).

    With `max_entities` the memory is bounded: at most that many entities are tracked, and a mention that starts an
    entity in a full memory is settled by `fertility` scores (an MLP over [entity; distance bucket; size bucket]) of
    the tracked entities and of the newcomer (its mention, size 1, distance 0): the lowest-scoring one is evicted (it
    keeps its mentions but can no longer be joined) or, if it is the newcomer, ignored (a singleton never tracked).
    """

    def __init__(
        self,
        mention_size: int,
        entity_size: int,
        mlp_size: int,
        update: str,
        num_distance_buckets: int,
        num_size_buckets: int,
        feature_size: int,
        dropout: float,
        max_entities: int | None = None,
    ):
        super().__init__()
        if update not in ENTITY_UPDATES:
            raise ValueError(f"update must be one of {ENTITY_UPDATES}, got {update!r}.")
        if not _valid_capacity(max_entities):
            raise ValueError(f"max_entities must be None (unbounded) or an int >= 1, got {max_entities!r}.")
        self.max_entities = max_entities
        self.update_kind = update
        self.num_distance_buckets, self.num_size_buckets = num_distance_buckets, num_size_buckets
        self.mention_projection = nn.Linear(mention_size, entity_size)
        self.distance_embedding = nn.Embedding(num_distance_buckets, feature_size)
        self.size_embedding = nn.Embedding(num_size_buckets, feature_size)
        self.pair_scorer = feed_forward(3 * entity_size + 2 * feature_size, mlp_size, 1, dropout)
        if update == "mlp-merge":
            self.merge = nn.Linear(2 * entity_size, entity_size)
        elif update == "gru":
            self.merge = nn.GRUCell(entity_size, entity_size)
        else:
            self.merge = None
        if max_entities is not None:  # created last: an unbounded memory draws the same initial weights as before
            self.fertility_scorer = feed_forward(entity_size + 2 * feature_size, mlp_size, 1, dropout)

    # ------------------------------------------------------------------------------------------ the update
    def updated(self, entities: torch.Tensor, mentions: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Entities `(E, D)` after one more mention each `(E, D)`; `sizes` `(E,)`: their mentions before this one."""
        if self.update_kind == "mlp-merge":
            return torch.tanh(self.merge(torch.cat([entities, mentions], dim=-1)))
        if self.update_kind == "gru":
            return self.merge(mentions, entities)
        weight = sizes.to(entities.dtype).unsqueeze(-1)
        return (entities * weight + mentions) / (weight + 1)

    def pair_scores(
        self, entities: torch.Tensor, mentions: torch.Tensor, distances: torch.Tensor, sizes: torch.Tensor
    ) -> torch.Tensor:
        """Scores of mention-entity pairs: entities and mentions `(..., D)` (broadcast), distances and sizes `(...)`."""
        entities, mentions = torch.broadcast_tensors(entities, mentions)
        features = torch.cat(
            [
                entities, mentions, entities * mentions,
                self.distance_embedding(log_buckets(distances, self.num_distance_buckets)),
                self.size_embedding(log_buckets(sizes, self.num_size_buckets)),
            ],
            dim=-1,
        )  # fmt: skip
        return self.pair_scorer(features).squeeze(-1)

    def fertility(self, entities: torch.Tensor, distances: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """How much an entity `(..., D)` is worth tracking (bounded memory: the lowest is evicted), `(...)`."""
        features = torch.cat(
            [
                entities,
                self.distance_embedding(log_buckets(distances, self.num_distance_buckets)),
                self.size_embedding(log_buckets(sizes, self.num_size_buckets)),
            ],
            dim=-1,
        )  # fmt: skip
        return self.fertility_scorer(features).squeeze(-1)

    # ------------------------------------------------------------------------------------------ training
    def teacher_forced_logits(
        self, mention_vectors: torch.Tensor, mention_starts: torch.LongTensor, cluster_ids: torch.LongTensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.LongTensor]:
        """Every mention's decision with the memory built from the gold clusters, in one pass.

        Under teacher forcing the state of an entity before mention i depends only on the entity's own earlier
        mentions, so the states are built in waves (the k-th mention of every entity at once: as many steps as the
        largest entity has mentions, not as the document has mentions) and each mention reads the state its entity
        had after its last earlier mention.

        Args:
            mention_vectors: `(M, mention_size)` in document order.
            mention_starts: `(M,)` first word of every mention (distances are counted from it).
            cluster_ids: `(M,)` the gold entity of every mention (any ints).

        Returns:
            logits `(M, C + 1)` (entity c in column c, "new entity" last; -inf for entities without an earlier
            mention), the mask of valid columns `(M, C + 1)`, and targets `(M,)` (C for a mention starting an entity).
        """
        mentions = self.mention_projection(mention_vectors)
        _, clusters = torch.unique(cluster_ids, return_inverse=True)
        num_mentions, num_clusters = clusters.shape[0], int(clusters.max()) + 1 if clusters.numel() else 0
        one_hot = F.one_hot(clusters, num_clusters)  # (M, C)
        rank = ((one_hot.cumsum(0) - one_hot) * one_hot).sum(-1)  # k: earlier mentions of the mention's entity
        seen = (one_hot.cumsum(0) - one_hot)  # (M, C): mentions of entity c before mention i
        states = self._states_in_waves(mentions, clusters, rank, num_clusters)  # (K, C, D): after k + 1 mentions
        valid = seen > 0
        entity_states = states[(seen - 1).clamp_min(0), torch.arange(num_clusters, device=seen.device)]  # (M, C, D)
        last_start = torch.cummax(
            torch.where(one_hot.bool(), mention_starts.unsqueeze(1), torch.full_like(one_hot, -1)), dim=0
        ).values
        previous_start = torch.cat([last_start.new_full((1, num_clusters), -1), last_start[:-1]])  # before mention i
        distances = (mention_starts.unsqueeze(1) - previous_start).clamp_min(0)
        scores = self.pair_scores(entity_states, mentions.unsqueeze(1), distances, seen)
        logits = torch.cat(
            [scores.masked_fill(~valid, float("-inf")), scores.new_full((num_mentions, 1), NEW_ENTITY_SCORE)], dim=-1
        )
        mask = torch.cat([valid, valid.new_ones(num_mentions, 1)], dim=-1)
        targets = torch.where(rank > 0, clusters, torch.full_like(clusters, num_clusters))
        return logits, mask, targets

    def _states_in_waves(
        self, mentions: torch.Tensor, clusters: torch.LongTensor, rank: torch.LongTensor, num_clusters: int
    ) -> torch.Tensor:
        num_waves = int(rank.max()) + 1 if rank.numel() else 0
        state = mentions.new_zeros(num_clusters, mentions.shape[-1])
        snapshots = []
        for wave in range(num_waves):
            members = torch.nonzero(rank == wave).squeeze(-1)  # one mention per entity that has a (wave+1)-th
            entities = clusters[members]
            if wave == 0:
                new = mentions[members]
            else:
                sizes = torch.full_like(entities, wave)
                new = self.updated(state[entities], mentions[members], sizes)
            state = state.index_copy(0, entities, new)
            snapshots.append(state)
        return torch.stack(snapshots) if snapshots else mentions.new_zeros(1, num_clusters, mentions.shape[-1])

    def bounded_teacher_forcing(
        self, mention_vectors: torch.Tensor, mention_starts: torch.LongTensor, cluster_ids: torch.LongTensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.LongTensor, torch.Tensor, torch.LongTensor]:
        """The bounded memory's decisions with the memory run on the gold clusters and the oracle's evictions
        (`oracle_bounded_memory`), in one pass. The oracle fixes which entity every cell holds before every mention,
        so each stay of an entity in a cell is a cluster of its own, built in waves (as `teacher_forced_logits`):
        the state after every mention, then each mention reads the states of the K cells.

        Args:
            mention_vectors: `(M, mention_size)` in document order.
            mention_starts: `(M,)` first word of every mention.
            cluster_ids: `(M,)` the gold entity of every mention (any ints).

        Returns:
            logits `(M, K + 1)` (cell k in column k, "new entity" last; -inf for an empty cell), the mask of valid
            columns, the targets `(M,)` (`BoundedMemoryOracle.targets`), the eviction logits `(E, K + 1)` (minus the
            fertility of every cell, of the newcomer last) at the oracle's decisions and their targets `(E,)`.
        """
        capacity = self.max_entities
        if capacity is None:
            raise ValueError("bounded_teacher_forcing needs max_entities; an unbounded memory: teacher_forced_logits.")
        oracle = oracle_bounded_memory(cluster_ids.tolist(), capacity, mention_vectors.device)
        mentions = self.mention_projection(mention_vectors)
        tracked = oracle.targets < capacity
        target_cells = oracle.targets.clamp(max=capacity - 1).unsqueeze(1)
        previous = torch.where(tracked, oracle.cells.gather(1, target_cells).squeeze(1), -1)
        rank = torch.where(tracked, oracle.sizes.gather(1, target_cells).squeeze(1), 0)  # earlier mentions in the cell
        states = mentions  # after each mention: a mention that enters a cell is its entity's state
        for wave in range(1, int(rank.max()) + 1 if rank.numel() else 1):
            members = torch.nonzero(rank == wave).squeeze(-1)
            new = self.updated(states[previous[members]], mentions[members], torch.full_like(members, wave))
            states = states.index_copy(0, members, new)
        valid, last = oracle.cells >= 0, oracle.cells.clamp_min(0)
        entity_states = states[last]  # (M, K, D)
        distances = (mention_starts.unsqueeze(1) - mention_starts[last]).clamp_min(0)
        scores = self.pair_scores(entity_states, mentions.unsqueeze(1), distances, oracle.sizes)
        new_entity = scores.new_full((scores.shape[0], 1), NEW_ENTITY_SCORE)
        logits = torch.cat([scores.masked_fill(~valid, float("-inf")), new_entity], dim=-1)
        mask = torch.cat([valid, valid.new_ones(valid.shape[0], 1)], dim=-1)
        rows = oracle.decisions
        cells = self.fertility(entity_states[rows], distances[rows], oracle.sizes[rows])
        newcomer = self.fertility(mentions[rows], torch.zeros_like(rows), torch.ones_like(rows))
        eviction_logits = -torch.cat([cells, newcomer.unsqueeze(-1)], dim=-1)
        return logits, mask, oracle.targets, eviction_logits, oracle.evicted

    # ------------------------------------------------------------------------------------------ inference
    @torch.no_grad()
    def cluster(self, mention_vectors: torch.Tensor, mention_starts: torch.LongTensor) -> list[int]:
        """Greedy clustering: the entity (0, 1, ... in order of creation) of every mention, read in document order.

        The scores are `pair_scores`', faster: the scorer's first layer is linear, so the mention's, entity's (again
        when it changes), distance's and size's shares are computed once; each step multiplies out only the product."""
        if self.max_entities is not None:
            return self._cluster_bounded(mention_vectors, mention_starts)
        mentions = self.mention_projection(mention_vectors)
        num_mentions, size = mentions.shape
        first_layer, rest = self.pair_scorer[0], self.pair_scorer[1:]
        feature_size = self.distance_embedding.embedding_dim
        entity_weight, mention_weight, product_weight, distance_weight, size_weight = first_layer.weight.split(
            [size, size, size, feature_size, feature_size], dim=1)
        mention_terms = torch.addmm(first_layer.bias, mentions, mention_weight.T)
        distance_terms = self.distance_embedding.weight @ distance_weight.T  # one row per bucket
        size_terms = self.size_embedding.weight @ size_weight.T
        # Room for every mention starting an entity: no tensor grows inside the loop.
        entities = mentions.new_empty(num_mentions, size)
        entity_terms = mentions.new_empty(num_mentions, first_layer.out_features)
        sizes, last_starts = mention_starts.new_empty(num_mentions), mention_starts.new_empty(num_mentions)
        assignment: list[int] = []
        count = 0
        for index in range(num_mentions):
            mention, start = mentions[index], mention_starts[index]
            best = -1
            if count:
                distances = log_buckets(start - last_starts[:count], self.num_distance_buckets)
                hidden = (entity_terms[:count] + mention_terms[index] + (entities[:count] * mention) @ product_weight.T
                          + distance_terms[distances] + size_terms[log_buckets(sizes[:count], self.num_size_buckets)])
                top_score, top = rest(hidden).squeeze(-1).max(dim=0)
                if float(top_score) > NEW_ENTITY_SCORE:
                    best = int(top)
            if best < 0:
                best, count = count, count + 1
                entities[best], sizes[best] = mention, 0
            else:
                joined = slice(best, best + 1)
                entities[best] = self.updated(entities[joined], mention.unsqueeze(0), sizes[joined])[0]
            entity_terms[best] = entities[best] @ entity_weight.T
            sizes[best] += 1
            last_starts[best] = start
            assignment.append(best)
        return assignment

    def _cluster_bounded(self, mention_vectors: torch.Tensor, mention_starts: torch.LongTensor) -> list[int]:
        """`cluster` with at most `max_entities` entities tracked (in cells): a new entity in a full memory evicts the
        tracked entity of lowest fertility, or is ignored (a singleton never tracked) if its own is lowest."""
        mentions = self.mention_projection(mention_vectors)
        entities = mentions.new_zeros(0, mentions.shape[-1])
        sizes, last_starts = mention_starts.new_zeros(0), mention_starts.new_zeros(0)
        cell_entity: list[int] = []  # the entity each cell tracks
        assignment: list[int] = []
        num_entities = 0
        for index in range(mentions.shape[0]):
            mention, start = mentions[index], mention_starts[index]
            best = -1
            if entities.shape[0]:
                distances = (start - last_starts).clamp_min(0)
                scores = self.pair_scores(entities, mention.unsqueeze(0), distances, sizes)
                top = int(scores.argmax())
                if float(scores[top]) > NEW_ENTITY_SCORE:
                    best = top
            if best >= 0:
                entities = entities.clone()
                row = slice(best, best + 1)
                entities[best] = self.updated(entities[row], mention.unsqueeze(0), sizes[row])[0]
                sizes[best] += 1
                last_starts[best] = start
                assignment.append(cell_entity[best])
                continue
            entity, num_entities = num_entities, num_entities + 1  # a new entity, numbered in order of creation
            assignment.append(entity)
            cell = entities.shape[0]
            if cell == self.max_entities:
                fertility = torch.cat([
                    self.fertility(entities, distances, sizes),
                    self.fertility(mention.unsqueeze(0), sizes.new_zeros(1), sizes.new_ones(1)),
                ])  # fmt: skip
                cell = int(fertility.argmin())
                if cell == self.max_entities:
                    continue  # ignored: the newcomer is the least worth tracking
            entities = torch.cat([entities[:cell], mention.unsqueeze(0), entities[cell + 1 :]])
            sizes = torch.cat([sizes[:cell], sizes.new_ones(1), sizes[cell + 1 :]])
            last_starts = torch.cat([last_starts[:cell], start.view(1), last_starts[cell + 1 :]])
            cell_entity[cell : cell + 1] = [entity]
        return assignment


def clustering_loss(
    logits: torch.Tensor, mask: torch.Tensor, targets: torch.LongTensor, label_smoothing: float = 0.1
) -> torch.Tensor:
    """Cross-entropy of the memory's decisions, with label smoothing spread over each mention's valid choices only
    (an entity that does not exist yet is no choice). Mean over mentions."""
    log_probs = torch.log_softmax(logits, dim=-1).masked_fill(~mask, 0.0)
    target_log_prob = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    uniform = log_probs.sum(-1) / mask.sum(-1)
    return -((1 - label_smoothing) * target_log_prob + label_smoothing * uniform).mean()


def spans_in_document_order(spans: torch.LongTensor) -> torch.LongTensor:
    """The order that reads spans by first word, longer (outer) spans first: the order mentions enter the memory."""
    keys = spans[:, 0] * (spans[:, 1].max() + 2 if spans.numel() else 1) - spans[:, 1]
    return torch.argsort(keys, stable=True)


def keep_top_spans(spans: torch.LongTensor, logits: torch.Tensor, threshold: float, max_per_word: float,
                   num_words: int) -> torch.LongTensor:
    """The proposed mentions: spans whose logit reaches `threshold`, at most `max_per_word * num_words` of them (the
    highest), returned in document order."""
    keep = torch.nonzero(logits >= threshold).squeeze(-1)
    limit = max(1, math.floor(max_per_word * num_words))
    if keep.numel() > limit:
        keep = keep[torch.topk(logits[keep], limit).indices]
    kept = spans[keep]
    return kept[spans_in_document_order(kept)]


def clusters_from_assignment(spans: Sequence[Sequence[int]], assignment: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Group spans by their entity, entities in order of their first mention."""
    clusters: dict[int, list[tuple[int, int]]] = {}
    for span, entity in zip(spans, assignment):
        clusters.setdefault(int(entity), []).append((int(span[0]), int(span[1])))
    return list(clusters.values())


class DocumentCoreferenceHead(nn.Module):
    """Word features `(W, feature_size)` -> contextual word states (dropout, a linear projection, a BiLSTM) -> scored
    candidate spans (`MentionProposer`) -> entities (`EntityMemory`). Its layers keep PyTorch's default
    initialisation (`reset_to_pytorch_defaults`), the one the document-mode benchmarks measured."""

    def __init__(
        self,
        feature_size: int,
        hidden_size: int,
        max_span_width: int,
        width_size: int,
        update: str,
        dropout: float,
        max_entities: int | None = None,
    ):
        super().__init__()
        if hidden_size % 2:
            raise ValueError(f"hidden_size must be even (a BiLSTM of two halves), got {hidden_size}.")
        self.max_span_width = max_span_width
        self.input = nn.Sequential(nn.Dropout(dropout), nn.Linear(feature_size, hidden_size))
        self.context = nn.LSTM(hidden_size, hidden_size // 2, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.proposer = MentionProposer(hidden_size, max_span_width, width_size, hidden_size, dropout)
        self.memory = EntityMemory(
            self.proposer.spans.output_size, hidden_size, hidden_size, update, NUM_DISTANCE_BUCKETS, NUM_SIZE_BUCKETS,
            width_size, dropout, max_entities,
        )  # fmt: skip
        for module in self.modules():
            module.keeps_pytorch_default_init = True

    def states(self, word_features: torch.Tensor) -> torch.Tensor:
        """Contextual word states `(W, hidden_size)`."""
        return self.dropout(self.context(self.input(word_features).unsqueeze(0))[0][0])

    def candidates(self, states: torch.Tensor, sentence_ids: torch.LongTensor) -> tuple[torch.LongTensor, torch.Tensor]:
        """Every candidate span `(N, 2)` and its mention logit `(N,)`."""
        spans = candidate_spans(sentence_ids, self.max_span_width)
        return spans, self.proposer(states, spans)[1]

    def losses(
        self,
        states: torch.Tensor,
        spans: torch.LongTensor,
        span_logits: torch.Tensor,
        gold_spans: torch.LongTensor,
        gold_cluster_ids: torch.LongTensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(mention loss, clustering loss)` of one document: binary cross-entropy of every candidate span against the
        gold mentions `(G, 2)`, and the memory's teacher-forced decisions over the gold mentions (0 without any); a
        bounded memory adds the cross-entropy of its eviction decisions against the oracle's (mean over them)."""
        mention_loss = F.binary_cross_entropy_with_logits(span_logits, mention_labels(spans, gold_spans))
        if gold_spans.shape[0] == 0:
            return mention_loss, span_logits.sum() * 0.0
        order = spans_in_document_order(gold_spans)
        gold_spans, gold_cluster_ids = gold_spans[order], gold_cluster_ids[order]
        vectors, _ = self.proposer(states, gold_spans)
        if self.memory.max_entities is None:
            logits, mask, targets = self.memory.teacher_forced_logits(vectors, gold_spans[:, 0], gold_cluster_ids)
            return mention_loss, clustering_loss(logits, mask, targets)
        logits, mask, targets, eviction_logits, evicted = self.memory.bounded_teacher_forcing(
            vectors, gold_spans[:, 0], gold_cluster_ids
        )
        # A document without eviction decisions still reaches the fertility MLP (zero gradients), as data-parallel
        # training needs every parameter in every step's graph.
        evictions = F.cross_entropy(eviction_logits, evicted) if evicted.numel() else eviction_logits.sum()
        return mention_loss, clustering_loss(logits, mask, targets) + evictions

    @torch.no_grad()
    def cluster_spans(self, states: torch.Tensor, spans: torch.LongTensor) -> list[int]:
        """The entity of every span `(K, 2)` (in document order), greedily."""
        if spans.shape[0] == 0:
            return []
        vectors, _ = self.proposer(states, spans)
        return self.memory.cluster(vectors, spans[:, 0])


def reset_to_pytorch_defaults(module: nn.Module) -> None:
    """PyTorch's own initialisation of a layer, through transformers' `init` functions (which skip weights loaded from
    a checkpoint): linear layers uniform in +-1/sqrt(fan_in) (weights via kaiming-uniform), embeddings normal(0, 1),
    recurrent layers uniform in +-1/sqrt(hidden_size)."""
    if isinstance(module, nn.Linear):
        init.kaiming_uniform_(module.weight, a=math.sqrt(5))
        if module.bias is not None:
            init.uniform_(module.bias, -1.0 / math.sqrt(module.in_features), 1.0 / math.sqrt(module.in_features))
    elif isinstance(module, nn.Embedding):
        init.normal_(module.weight, 0.0, 1.0)
    elif isinstance(module, (nn.LSTM, nn.GRUCell)):
        bound = 1.0 / math.sqrt(module.hidden_size)
        for parameter in module.parameters(recurse=False):
            init.uniform_(parameter, -bound, bound)


@dataclass
class DocumentCoreferenceOutput(ModelOutput):
    """
    Output of a memory model's coreference head in document mode (`coreference_mode="document"`).

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            With gold mentions: the mean over documents of `span_loss_weight * mention_loss + cluster_loss`.
        mention_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Binary cross-entropy of every candidate span against the gold mentions, mean over documents.
        cluster_loss (`torch.FloatTensor` of shape `()`, *optional*):
            Cross-entropy of the memory's teacher-forced decisions over the gold mentions (a bounded memory adds its
            eviction decisions'), mean over documents.
        candidate_spans (`torch.LongTensor` of shape `(batch_size, num_spans, 2)`):
            Every candidate mention `(first word, last word)` (last inclusive) of each document; rows of -1 pad.
        span_logits (`torch.FloatTensor` of shape `(batch_size, num_spans)`):
            The mention logit of every candidate span; -inf on padding.
    """

    loss: torch.FloatTensor | None = None
    mention_loss: torch.FloatTensor | None = None
    cluster_loss: torch.FloatTensor | None = None
    candidate_spans: torch.LongTensor | None = None
    span_logits: torch.FloatTensor | None = None


def document_head_for(config) -> DocumentCoreferenceHead | None:
    """The document-mode head a config asks for (None in the token mode)."""
    if config.coreference_mode != "document":
        return None
    feature_size = len(config.encoder_layers) * config.encoder_config.hidden_size
    return DocumentCoreferenceHead(
        feature_size, config.document_hidden_size, config.max_span_width, config.span_width_size,
        config.entity_update, config.document_dropout, getattr(config, "max_entities", None),
    )  # fmt: skip


class DocumentCoreferenceMixin:
    """The document mode of a memory model's coreference head, which has `document_head` (`document_head_for`) and a
    base model with an `encoder`. Documents arrive as tokens (`input_ids` or cached `encoder_features`) with the word
    of every token (`word_ids`), or as cached word features; `sentence_ids` gives every word's sentence (spans never
    cross a sentence end). Word ids, spans and distances count words, as CoNLL files do."""

    def _document_forward(
        self, input_ids, attention_mask, encoder_features, word_features, word_ids, sentence_ids, gold_spans,
        gold_cluster_ids,
    ) -> DocumentCoreferenceOutput:  # fmt: skip
        features, sentences = self.document_word_features(
            sentence_ids, input_ids, attention_mask, encoder_features, word_features, word_ids
        )
        if (gold_spans is None) != (gold_cluster_ids is None):
            raise ValueError("Pass `gold_spans` and `gold_cluster_ids` together to compute the loss.")
        golds = _gold_rows(gold_spans, gold_cluster_ids, [f.shape[0] for f in features])
        spans_rows, logits_rows, losses = [], [], []
        for index, (document_features, document_sentences) in enumerate(zip(features, sentences)):
            states = self.document_head.states(document_features)
            spans, logits = self.document_head.candidates(states, document_sentences)
            spans_rows.append(spans)
            logits_rows.append(logits)
            if golds is not None:
                losses.append(self.document_head.losses(states, spans, logits, *golds[index]))
        output = DocumentCoreferenceOutput(
            candidate_spans=torch.nn.utils.rnn.pad_sequence(spans_rows, batch_first=True, padding_value=-1),
            span_logits=torch.nn.utils.rnn.pad_sequence(logits_rows, batch_first=True, padding_value=float("-inf")),
        )
        if losses:
            output.mention_loss = torch.stack([mention for mention, _ in losses]).mean()
            output.cluster_loss = torch.stack([cluster for _, cluster in losses]).mean()
            output.loss = self.config.span_loss_weight * output.mention_loss + output.cluster_loss
        return output

    def document_word_features(
        self,
        sentence_ids: torch.LongTensor,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_features: torch.FloatTensor | None = None,
        word_features: torch.FloatTensor | None = None,
        word_ids: torch.LongTensor | None = None,
    ) -> tuple[list[torch.Tensor], list[torch.LongTensor]]:
        """Every document's word features `(W_b, F)` (the mean of its subwords' encoder features) and sentence ids
        `(W_b,)`, from `word_features` `(B, W, F)` or from tokens with their `word_ids` `(B, T)` (-1: no word)."""
        if self.config.coreference_mode != "document":
            raise ValueError("document_word_features needs a model in coreference_mode='document'.")
        if sentence_ids is None or sentence_ids.dim() != 2:
            raise ValueError("sentence_ids must have shape (documents, words) (-1 pads), the sentence of every word.")
        lengths = (sentence_ids >= 0).sum(-1).tolist()
        if min(lengths) == 0:
            raise ValueError("Every document needs at least one word: skip empty documents.")
        if sum(source is not None for source in (input_ids, encoder_features, word_features)) != 1:
            raise ValueError("Pass exactly one of `input_ids`, `encoder_features` and `word_features`.")
        if word_features is None:
            if word_ids is None:
                raise ValueError("Pass `word_ids` (the word of every token, -1 for none) with tokens.")
            if encoder_features is None:
                encoder_features = self.get_encoder_features(input_ids, attention_mask)
            word_features = [word_states(tokens, ids) for tokens, ids in zip(encoder_features, word_ids)]
        features = [document[:length] for document, length in zip(word_features, lengths)]
        for index, (document, length) in enumerate(zip(features, lengths)):
            if document.shape[0] != length:
                raise ValueError(
                    f"Document {index} has {length} words in sentence_ids but {document.shape[0]} word features: "
                    "every word needs at least one token (word_ids from the tokenizer's word_ids())."
                )
        return features, [document[:length] for document, length in zip(sentence_ids, lengths)]

    @torch.no_grad()
    def predict_clusters(
        self,
        sentence_ids: torch.LongTensor,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_features: torch.FloatTensor | None = None,
        word_features: torch.FloatTensor | None = None,
        word_ids: torch.LongTensor | None = None,
        mention_spans: Sequence[torch.LongTensor] | None = None,
        span_threshold: float | None = None,
    ) -> list[list[tuple[int, int, int]]]:
        """The mentions `(first word, last word, entity)` of every document, in document order: the proposed spans
        (logit >= `span_threshold`, default `config.span_threshold`; at most `config.max_mentions_per_word` per word)
        or the given `mention_spans` (one `(K, 2)` tensor per document, e.g. gold mentions), clustered greedily."""
        was_training = self.training
        self.eval()
        try:
            features, sentences = self.document_word_features(
                sentence_ids, input_ids, attention_mask, encoder_features, word_features, word_ids
            )
            threshold = self.config.span_threshold if span_threshold is None else float(span_threshold)
            documents = []
            for index, (document_features, document_sentences) in enumerate(zip(features, sentences)):
                states = self.document_head.states(document_features)
                if mention_spans is None:
                    spans, logits = self.document_head.candidates(states, document_sentences)
                    spans = keep_top_spans(
                        spans, logits, threshold, self.config.max_mentions_per_word, document_features.shape[0]
                    )
                else:
                    spans = mention_spans[index].to(states.device).view(-1, 2)
                    spans = spans[spans_in_document_order(spans)]
                entities = self.document_head.cluster_spans(states, spans)
                documents.append([(int(a), int(b), e) for (a, b), e in zip(spans.tolist(), entities)])
            return documents
        finally:
            self.train(was_training)


def _gold_rows(gold_spans, gold_cluster_ids, lengths: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """Every document's gold mentions `(G_b, 2)` and entities `(G_b,)` from padded `(B, G, 2)` / `(B, G)` (-1 pads)."""
    if gold_spans is None:
        return None
    if gold_spans.dim() != 3 or gold_spans.shape[-1] != 2 or gold_cluster_ids.shape != gold_spans.shape[:2]:
        raise ValueError(
            f"gold_spans must have shape (documents, mentions, 2) and gold_cluster_ids (documents, mentions), got "
            f"{tuple(gold_spans.shape)} and {tuple(gold_cluster_ids.shape)}."
        )
    rows = []
    for spans, clusters, length in zip(gold_spans, gold_cluster_ids, lengths):
        real = spans[:, 0] >= 0
        spans, clusters = spans[real], clusters[real]
        if spans.numel() and (spans[:, 1] < spans[:, 0]).any() or (spans.numel() and spans.max() >= length):
            raise ValueError(f"gold_spans must be (first word, last word) with first <= last < {length} (the words).")
        rows.append((spans, clusters))
    return rows
