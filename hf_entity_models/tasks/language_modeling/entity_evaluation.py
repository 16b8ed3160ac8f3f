"""Evaluation of entity-aware language models (GPT2E) next to plain causal LMs (GPT-2): perplexity over consecutive
windows with and without entity information, LAMBADA, and the representation analysis of the GPT2E paper (Table 4).

Every function takes any causal LM of transformers; a model whose `forward` takes `entity_ids` and `entity_states`
(GPT2E) reads the entity ids and carries the entity states of each document from one window to the next, as it was
trained. Windows are rows with `input_ids`, `entity_ids`, `document_id` and `window_index` (see
`entity_lm_windows`).
"""

from __future__ import annotations

import inspect
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from hf_entity_models.models.gpt2e import DocumentEntityStore

from ...training.distributed import all_reduce_sums, process_rank_and_count

__all__ = [
    "LambadaScores",
    "MentionSimilarities",
    "PRONOUNS",
    "assign_documents_to_processes",
    "entity_nll",
    "entity_perplexity",
    "lambada_scores",
    "mention_similarities",
    "reads_entities",
]

# Mentions whose text is one of these (lower-cased) count as pronouns (the paper's PRP / PRP$ group); LitBank's
# CoNLL files carry no part-of-speech tags, so the other mentions stand for its NN / NNS / NNP / NNPS group.
PRONOUNS = frozenset(
    "i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself "
    "we us our ours ourselves they them their theirs themselves thee thou thy thine ye".split()
)


def reads_entities(model: torch.nn.Module) -> bool:
    """Whether the model takes entity ids and entity states (GPT2E) or is a plain causal LM.

    Decided from the config (a compiled or wrapped GPT2E still counts), else from the signature of `forward`.
    """
    if getattr(getattr(model, "config", None), "model_type", None) == "gpt2e":
        return True
    parameters = inspect.signature(model.forward).parameters
    return "entity_ids" in parameters and "entity_states" in parameters


def assign_documents_to_processes(window_counts: Mapping[int, int], num_processes: int) -> list[list[int]]:
    """Split whole documents between the processes of a data-parallel run, balancing their windows.

    A document's entity states live in the store of the process that reads it, so a document is never split: each
    goes, longest first (ties: lower document id), to the process with the fewest windows so far (ties: lower rank).
    The result depends on the counts only, so every process computes the same split without communicating.

    Args:
        window_counts: document id -> number of windows.
        num_processes: The world size, at least 1.

    Returns:
        One sorted list of document ids per rank (a list may be empty when there are fewer documents than processes).

    Example:
        >>> assign_documents_to_processes({0: 3, 1: 1, 2: 2, 3: 2}, 2)
        [[0, 1], [2, 3]]
    """
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"num_processes must be a positive int, got {num_processes!r}.")
    shares: list[list[int]] = [[] for _ in range(num_processes)]
    totals = [0] * num_processes
    for document in sorted(window_counts, key=lambda document: (-window_counts[document], document)):
        rank = min(range(num_processes), key=lambda index: (totals[index], index))
        shares[rank].append(document)
        totals[rank] += window_counts[document]
    return [sorted(share) for share in shares]


@torch.no_grad()
def entity_nll(
    model: torch.nn.Module,
    windows: Sequence[Mapping[str, Any]],
    batch_size: int = 8,
    use_entities: bool = True,
    progress: bool = True,
    distributed: bool = False,
) -> tuple[float, int]:
    """Summed negative log-likelihood and number of predicted tokens of a causal LM over whole documents.

    What `entity_perplexity` is computed from (``exp(nll / tokens)``); see it for the arguments. With
    ``distributed=True`` in a data-parallel run, each process reads the documents `assign_documents_to_processes`
    gives it and the sums are added up over the processes, so every process returns the totals over all documents.

    Raises:
        ValueError: If there are no windows, a document's windows are incomplete, or no window has a token to predict.
    """
    sums = entity_nll_sums(model, windows, batch_size, use_entities, progress, distributed)
    return sums.total_nll, sums.tokens


@dataclass(frozen=True)
class NLLSums:
    """Summed negative log-likelihood over every predicted token, and over the tokens of entity mentions (whose gold
    entity id is not 0, whether or not the model was given the ids), with their counts."""

    total_nll: float
    tokens: int
    mention_nll: float
    mention_tokens: int


@torch.no_grad()
def entity_nll_sums(
    model: torch.nn.Module,
    windows: Sequence[Mapping[str, Any]],
    batch_size: int = 8,
    use_entities: bool = True,
    progress: bool = True,
    distributed: bool = False,
) -> NLLSums:
    """`entity_nll`'s sums, with those of the mention tokens beside them (one pass over the documents)."""
    rank, world_size = process_rank_and_count()
    shard = distributed and world_size > 1
    by_document = _windows_by_document(windows)
    if not by_document:
        raise ValueError("No windows to evaluate.")
    if shard:
        counts = {document: len(rows) for document, rows in by_document.items()}
        mine = assign_documents_to_processes(counts, world_size)[rank]
        by_document = {document: by_document[document] for document in mine}
        progress = progress and rank == 0
    sums = [0.0, 0, 0.0, 0]  # total NLL, tokens, mention NLL, mention tokens
    for batch, states in _document_batches(model, by_document, batch_size, use_entities, progress, "perplexity"):
        outputs = _forward(model, batch, states)
        logits = outputs.logits[:, :-1].float()
        targets = batch["input_ids"][:, 1:]
        mask = batch["attention_mask"][:, 1:].bool()
        mention = mask & (batch["gold_entity_ids"][:, 1:] != 0)
        # Over flat rows: cross_entropy on the transposed (batch, vocabulary, length) view reads the vocabulary with a
        # stride and takes three times as long on CPU.
        losses = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(targets)
        for slot, chosen in ((0, mask), (2, mention)):
            sums[slot] += float(losses[chosen].double().sum())
            sums[slot + 1] += int(chosen.sum())
        states.update(outputs)
    if shard:
        sums = all_reduce_sums(sums, _device(model))
        sums[1], sums[3] = int(sums[1]), int(sums[3])
    if sums[1] == 0:
        raise ValueError("The windows have no token to predict (every window is a single token).")
    return NLLSums(*sums)


def entity_perplexity(
    model: torch.nn.Module,
    windows: Sequence[Mapping[str, Any]],
    batch_size: int = 8,
    use_entities: bool = True,
    progress: bool = True,
    distributed: bool = False,
) -> float:
    """Perplexity of a causal LM over the windows of whole documents, each document read window after window.

    A GPT2E model carries each document's entity states from one window to the next (from `initial_entity_states`); with
    `use_entities=False` its entity ids are all zeroed (the same model without entity information). A plain causal
    LM reads the tokens only. Every token but the first of each window is predicted; the perplexity is
    exp(total negative log-likelihood / number of predicted tokens).

    In a data-parallel run (``accelerate launch``) the processes can share the work: with ``distributed=True``
    EVERY process must call it; each reads its share of the documents (`assign_documents_to_processes`) and the
    sums are added up, so every process returns the perplexity over all documents, the number one process computes
    alone (up to float rounding). With ``distributed=False`` (the default) this process reads every document, so it
    may be called on one process only (e.g. the main process, after training).

    Args:
        model: A causal LM (`GPT2EForCausalLM`, `GPT2LMHeadModel`, ...).
        windows: Rows with `input_ids`, `entity_ids`, `document_id` and `window_index` (a `datasets.Dataset` or a
            list of dicts); every window of every document, in any order.
        batch_size: Documents read side by side.
        use_entities: Give GPT2E the entity ids (True) or zeros (False).
        progress: Show a progress bar (on the main process only).
        distributed: Share the documents between the processes of a data-parallel run (every process must call);
            without a process group of several processes, True reads every document here too.

    Example:
        >>> entity_perplexity(model, dataset["validation"], use_entities=False)  # doctest: +SKIP
        41.7
    """
    total_loss, total_tokens = entity_nll(model, windows, batch_size, use_entities, progress, distributed)
    return math.exp(total_loss / total_tokens)


@dataclass(frozen=True)
class LambadaScores:
    """LAMBADA results: perplexity of the target word's tokens and last-word accuracy (greedy, every token right)."""

    perplexity: float
    accuracy: float
    examples: int


@torch.no_grad()
def lambada_scores(
    model: torch.nn.Module, examples: Sequence[Mapping[str, Sequence[int]]], batch_size: int = 16, progress: bool = True
) -> LambadaScores:
    """Score LAMBADA: the target word given its passage, with no entity information (the paper's protocol).

    Args:
        model: A causal LM; GPT2E reads all-zero entity ids.
        examples: Dicts with `context_ids` and `target_ids` (see `lambada_examples`).
        batch_size: Examples per forward pass.
        progress: Show a progress bar.

    Raises:
        ValueError: No examples, or an example longer than the model's context window.
    """
    if not examples:
        raise ValueError("No LAMBADA examples to score.")
    window = _context_window(model)
    total_loss, total_tokens, correct = 0.0, 0, 0
    device = _device(model)
    was_training = model.training
    model.eval()
    for start in tqdm(range(0, len(examples), batch_size), desc="LAMBADA", disable=not progress):
        chunk = examples[start : start + batch_size]
        sequences = [list(example["context_ids"]) + list(example["target_ids"]) for example in chunk]
        for index, sequence in enumerate(sequences):
            if window is not None and len(sequence) > window:
                raise ValueError(
                    f"LAMBADA example {start + index} has {len(sequence)} tokens, more than the model's window of "
                    f"{window}; score it with a model of a longer context."
                )
        length = max(len(sequence) for sequence in sequences)
        input_ids = torch.zeros(len(chunk), length, dtype=torch.long)
        attention_mask = torch.zeros(len(chunk), length, dtype=torch.long)
        for row, sequence in enumerate(sequences):
            input_ids[row, : len(sequence)] = torch.tensor(sequence)
            attention_mask[row, : len(sequence)] = 1
        batch = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
        if reads_entities(model):
            batch["entity_ids"] = torch.zeros_like(batch["input_ids"])
        log_probs = model(**batch).logits.float().log_softmax(-1)
        for row, example in enumerate(chunk):
            context_length, target = len(example["context_ids"]), list(example["target_ids"])
            positions = torch.arange(context_length - 1, context_length - 1 + len(target), device=device)
            target_tensor = torch.tensor(target, device=device)
            total_loss -= float(log_probs[row, positions, target_tensor].sum())
            total_tokens += len(target)
            correct += int(bool((log_probs[row, positions].argmax(-1) == target_tensor).all()))
    model.train(was_training)
    return LambadaScores(
        perplexity=math.exp(total_loss / total_tokens), accuracy=correct / len(examples), examples=len(examples)
    )


@dataclass(frozen=True)
class MentionSimilarities:
    """Table 4 of the GPT2E paper for one model: mean cosine similarities, by mention group.

    Attributes:
        mention: group -> mean cosine similarity of a mention's representation with the other mentions of its entity.
        entity: group -> mean cosine similarity of a mention's representation with its entity's representation
            (the final hidden state of the entity's last mention in an earlier window: what the paper's design of GPT2E
            stores when it reads the mention), over mentions whose entity has one.
        counts: group -> number of mentions scored for `mention`.
    """

    mention: dict[str, float]
    entity: dict[str, float]
    counts: dict[str, int]


@torch.no_grad()
def mention_similarities(
    model: torch.nn.Module,
    windows: Sequence[Mapping[str, Any]],
    tokenizer: Any,
    batch_size: int = 8,
    use_entities: bool = True,
    progress: bool = True,
) -> MentionSimilarities:
    """The paper's representation analysis (Table 4) for one model.

    A mention is a maximal run of consecutive tokens with the same nonzero entity id; its representation is the
    model's final hidden state at its last token. Groups: `"pronoun"` (the mention's text is in `PRONOUNS`) and
    `"other"` (names and nominals; LitBank has no part-of-speech tags). The entity representation of a mention is
    computed the same way for every model (GPT-2 included): the hidden state of the last token of the entity's last
    mention in an earlier window of the document.

    Args:
        model: A causal LM (GPT2E with or without its entity ids, or GPT-2).
        windows: Rows as for `entity_perplexity`.
        tokenizer: Decodes mention tokens for the pronoun test.
        batch_size: Documents read side by side.
        use_entities: Give GPT2E the entity ids (True) or zeros (False); the mentions always come from the ids.
        progress: Show a progress bar.
    """
    by_document = _windows_by_document(windows)
    if not by_document:
        raise ValueError("No windows to analyse.")
    mentions: dict[tuple[int, int], list[tuple[str, torch.Tensor]]] = defaultdict(list)
    entity_cosines: dict[str, list[float]] = defaultdict(list)
    for batch, states in _document_batches(model, by_document, batch_size, use_entities, progress, "mentions"):
        outputs = _forward(model, batch, states, output_hidden_states=True)
        hidden = outputs.hidden_states[-1].float()
        for row, document in enumerate(batch["document_ids"].tolist()):
            length = int(batch["attention_mask"][row].sum())
            for entity, last, text in _mention_runs(batch["gold_entity_ids"][row, :length], batch["input_ids"][row], tokenizer):
                group = "pronoun" if text.strip().lower() in PRONOUNS else "other"
                vector = hidden[row, last]
                earlier = states.analysis_states.get((document, entity))
                if earlier is not None:
                    entity_cosines[group].append(float(torch.cosine_similarity(vector, earlier, dim=0)))
                mentions[(document, entity)].append((group, vector))
        states.update(outputs)
        states.remember_mentions(batch, hidden)
    mention_cosines: dict[str, list[float]] = defaultdict(list)
    for entity_mentions in mentions.values():
        if len(entity_mentions) < 2:
            continue
        vectors = torch.nn.functional.normalize(torch.stack([vector for _, vector in entity_mentions]), dim=-1)
        similarity = vectors @ vectors.T
        others = (similarity.sum(1) - similarity.diagonal()) / (len(entity_mentions) - 1)
        for (group, _), value in zip(entity_mentions, others.tolist()):
            mention_cosines[group].append(value)
    return MentionSimilarities(
        mention={group: sum(values) / len(values) for group, values in mention_cosines.items()},
        entity={group: sum(values) / len(values) for group, values in entity_cosines.items()},
        counts={group: len(values) for group, values in mention_cosines.items()},
    )


# ------------------------------------------------------------------------------------------------------- internals
class _DocumentStates:
    """Per-document entity states of a GPT2E model between windows, and (for the analysis) the hidden state of each
    entity's last mention in the windows read so far."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.store = DocumentEntityStore()
        self.analysis_states: dict[tuple[int, int], torch.Tensor] = {}
        self._document_ids: list[int] = []
        self._pending: dict[tuple[int, int], torch.Tensor] = {}

    def for_batch(self, document_ids: list[int], window: int) -> torch.Tensor | None:
        self._document_ids = document_ids
        # Mentions of the previous window become "earlier" only now: within a window, GPT2E reads the old states.
        self.analysis_states.update(self._pending)
        self._pending = {}
        if not reads_entities(self.model):
            return None
        # Documents come window 0 first (`_document_batches`): the store starts each one afresh.
        return self.store.read(
            torch.tensor(document_ids), torch.full((len(document_ids),), window), self.model.config,
            _device(self.model), self.model.dtype,
        )

    def update(self, outputs: Any) -> None:
        entity_states = getattr(outputs, "entity_states", None)
        if entity_states is not None:
            self.store.write(torch.tensor(self._document_ids), entity_states)

    def remember_mentions(self, batch: Mapping[str, torch.Tensor], hidden: torch.Tensor) -> None:
        for row, document in enumerate(self._document_ids):
            length = int(batch["attention_mask"][row].sum())
            for entity, last, _ in _mention_runs(batch["gold_entity_ids"][row, :length], None, None):
                self._pending[(document, entity)] = hidden[row, last]


def _document_batches(
    model: torch.nn.Module,
    by_document: Mapping[int, list[Mapping[str, Any]]],
    batch_size: int,
    use_entities: bool,
    progress: bool,
    description: str,
) -> Iterator[tuple[dict[str, torch.Tensor], _DocumentStates]]:
    """Batches of windows: `batch_size` documents side by side, window 0 of each, then window 1, ... (no batch at
    all for no documents: a process of a data-parallel run may be given none)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    window_limit = _context_window(model)
    for document, rows in by_document.items():
        longest = max(len(row["input_ids"]) for row in rows)
        if window_limit is not None and longest > window_limit:
            raise ValueError(
                f"Document {document} has a window of {longest} tokens, more than the model's {window_limit} "
                "positions: build the windows with window_length <= the model's n_positions."
            )
    was_training = model.training
    model.eval()
    documents = sorted(by_document)
    device = _device(model)
    rounds = []
    for start in range(0, len(documents), batch_size):
        group = documents[start : start + batch_size]
        for window in range(max(len(by_document[document]) for document in group)):
            rounds.append(
                (window, [(document, by_document[document][window]) for document in group if window < len(by_document[document])])
            )
    states = _DocumentStates(model)
    for window, members in tqdm(rounds, desc=description, disable=not progress):
        batch = _collate([row for _, row in members], device, use_entities)
        batch["document_ids"] = torch.tensor([document for document, _ in members])
        batch["entity_states"] = states.for_batch([document for document, _ in members], window)
        yield batch, states
    model.train(was_training)


def _windows_by_document(windows: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    by_document: dict[int, dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for row in windows:
        document, window = int(row["document_id"]), int(row["window_index"])
        if window in by_document[document]:
            raise ValueError(f"Document {document} has window {window} twice.")
        by_document[document][window] = row
    ordered = {}
    for document, rows in by_document.items():
        if sorted(rows) != list(range(len(rows))):
            raise ValueError(
                f"Document {document} has windows {sorted(rows)}: evaluate every window of a document (0, 1, 2, ...)."
            )
        ordered[document] = [rows[index] for index in range(len(rows))]
    return ordered


def _collate(rows: list[Mapping[str, Any]], device: torch.device, use_entities: bool) -> dict[str, torch.Tensor]:
    length = max(len(row["input_ids"]) for row in rows)
    input_ids = torch.zeros(len(rows), length, dtype=torch.long)
    entity_ids = torch.zeros(len(rows), length, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), length, dtype=torch.long)
    for index, row in enumerate(rows):
        size = len(row["input_ids"])
        if len(row["entity_ids"]) != size:
            raise ValueError(f"A window has {size} input_ids but {len(row['entity_ids'])} entity_ids.")
        input_ids[index, :size] = torch.as_tensor(row["input_ids"])
        entity_ids[index, :size] = torch.as_tensor(row["entity_ids"])
        attention_mask[index, :size] = 1
    return {
        "input_ids": input_ids.to(device),
        "attention_mask": attention_mask.to(device),
        "gold_entity_ids": entity_ids.to(device),
        "entity_ids": (entity_ids if use_entities else torch.zeros_like(entity_ids)).to(device),
    }


def _forward(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], states: _DocumentStates, **kwargs) -> Any:
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], **kwargs}
    if reads_entities(model):
        inputs.update(entity_ids=batch["entity_ids"], entity_states=batch["entity_states"])
    return model(**inputs, use_cache=False)


def _mention_runs(entity_ids: torch.Tensor, input_ids: torch.Tensor | None, tokenizer: Any) -> Iterator[tuple[int, int, str]]:
    """(entity, last token, text) of every maximal run of tokens with the same nonzero entity id."""
    ids = entity_ids.tolist()
    start = 0
    for position in range(1, len(ids) + 1):
        if position == len(ids) or ids[position] != ids[start]:
            if ids[start] != 0:
                text = tokenizer.decode(input_ids[start:position].tolist()) if tokenizer is not None else ""
                yield ids[start], position - 1, text
            start = position


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _context_window(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
