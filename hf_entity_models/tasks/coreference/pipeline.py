"""`pipeline("coreference")`: the entities a memory model tracks in a text, or which names a pronoun refers to.

This file imports only torch and transformers, so that it can be uploaded next to a checkpoint and loaded with
``pipeline(model=..., trust_remote_code=True)`` on a machine without hf_entity_models.
"""

from collections.abc import Sequence
from typing import Any

import torch
from transformers import Pipeline

CharSpan = tuple[int, int]


class CoreferencePipeline(Pipeline):
    """Read texts with a coreference memory model (PeTra, the Referential Reader, ...) and return what it tracked.

    The model's output must carry the memory log (``entity_probs``, ``overwrite_probs`` and ``coref_probs``, the
    Referential Reader's update gates; optionally ``salience``) and, for queries, ``candidate_scores``.

    Two modes:

    * **clusters** (default): ``pipe(text)`` returns ``{"clusters": [[mention, ...], ...]}``, the entities the
      memory found, each mention a dict with character ``start``, ``end`` and ``text`` into the input string. A
      token is a mention when the memory writes it to a cell (overwrite + coref) with at least
      ``mention_threshold``; an overwrite starts a new entity in that cell, a coref joins the cell's entity.
      With ``return_memory_log=True`` the per-token memory log is added (see `plot_memory_log`); it has a
      ``salience`` entry too when the model tracks salience (Referential Reader).
    * **query** (GAP-style): ``pipe(text, pronoun=(start, end), candidates=[(s1, e1), (s2, e2)])`` returns the
      link probability of the pronoun with every candidate (the model's ``candidate_scores``: its token link
      probability, PeTra's Eq. 9 or the Referential Reader's Eq. 5, maximised over token pairs) and the decision
      under the threshold stored in ``model.config.coref_threshold``.

    Texts may be a string or a list of strings; ``batch_size=`` batches them; long documents are encoded in
    windows by the model (nothing is truncated). To give every text of a list its own query, pass dicts:
    ``pipe([{"text": ..., "pronoun": (s, e), "candidates": [...]}, ...])``.

    Example:

    ```python
    >>> from transformers import pipeline
    >>> pipe = pipeline("coreference", model="runs/petra-gap")  # doctest: +SKIP
    >>> pipe("Zoe met Maggie in Paris. She was happy.")  # doctest: +SKIP
    {'clusters': [[{'start': 0, 'end': 3, 'text': 'Zoe'}, {'start': 25, 'end': 28, 'text': 'She'}], ...]}
    >>> pipe("Zoe met Maggie. She smiled.", pronoun=(16, 19), candidates=[(0, 3), (8, 14)])  # doctest: +SKIP
    {'pronoun': {...}, 'candidates': [{'start': 0, 'end': 3, 'text': 'Zoe', 'probability': 0.31, 'coreferent': True}, ...]}

    ```
    """

    def _sanitize_parameters(
        self,
        pronoun: CharSpan | None = None,
        candidates: Sequence[CharSpan] | None = None,
        return_memory_log: bool | None = None,
        mention_threshold: float | None = None,
        **kwargs,
    ):
        if kwargs:
            raise TypeError(f"Unknown arguments for the coreference pipeline: {sorted(kwargs)}.")
        if (pronoun is None) != (candidates is None):
            raise ValueError("Pass `pronoun=(start, end)` together with `candidates=[(start, end), ...]`.")
        preprocess_parameters = {}
        if pronoun is not None:
            preprocess_parameters["query"] = (pronoun, list(candidates))
        postprocess_parameters = {}
        if return_memory_log is not None:
            postprocess_parameters["return_memory_log"] = bool(return_memory_log)
        if mention_threshold is not None:
            if not 0.0 <= mention_threshold <= 1.0:
                raise ValueError(f"mention_threshold is a probability in [0, 1], got {mention_threshold}.")
            postprocess_parameters["mention_threshold"] = float(mention_threshold)
        return preprocess_parameters, {}, postprocess_parameters

    def preprocess(self, inputs: Any, query: tuple[CharSpan, list[CharSpan]] | None = None) -> dict[str, Any]:
        text, query = _text_and_query(inputs, query)
        if not text.strip():
            raise ValueError("The text is empty; pass a non-empty string.")
        encoding = self.tokenizer(
            text,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
            truncation=False,
            return_tensors="pt",
            verbose=False,  # long documents are fine: the model encodes them in windows
        )
        offsets = [tuple(pair) for pair in encoding.pop("offset_mapping")[0].tolist()]
        spans = _query_token_spans(text, offsets, query) if query is not None else None
        return {**encoding, "text": text, "offsets": offsets, "query": query, "query_token_spans": spans}

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        texts, offsets = model_inputs.pop("text"), model_inputs.pop("offsets")
        queries, query_spans = model_inputs.pop("query"), model_inputs.pop("query_token_spans")
        single = isinstance(texts, str)  # batch_size=1 leaves the items unbatched
        if single:
            texts, offsets, queries, query_spans = [texts], [offsets], [queries], [query_spans]
        model_inputs.update(_span_tensors(query_spans, model_inputs["input_ids"].device))
        outputs = self.model(**model_inputs)
        result = {
            "text": texts,
            "offsets": offsets,
            "query": queries,
            "special_tokens_mask": model_inputs["special_tokens_mask"],
            "entity_probs": outputs.entity_probs,
            "overwrite_probs": outputs.overwrite_probs,
            "coref_probs": outputs.coref_probs,
            "salience": getattr(outputs, "salience", None),  # per-cell salience of the Referential Reader
            "candidate_scores": outputs.candidate_scores,
        }
        if single:
            result.update(text=texts[0], offsets=offsets[0], query=queries[0])
        return result

    def postprocess(
        self, model_outputs: dict[str, Any], return_memory_log: bool = False, mention_threshold: float = 0.5
    ) -> dict[str, Any]:
        text, offsets, query = model_outputs["text"], model_outputs["offsets"], model_outputs["query"]
        length = len(offsets)  # batched outputs are padded to the longest text of the batch
        log = {
            "entity": model_outputs["entity_probs"][0, :length].float(),
            "overwrite": model_outputs["overwrite_probs"][0, :length].float(),
            "coref": model_outputs["coref_probs"][0, :length].float(),
        }
        if model_outputs.get("salience") is not None:
            log["salience"] = model_outputs["salience"][0, :length].float()
        if query is not None:
            scores = model_outputs["candidate_scores"][0, : len(query[1])].tolist()
            result = _query_answer(text, query, scores, float(self.model.config.coref_threshold))
        else:
            special = model_outputs["special_tokens_mask"][0, :length].bool().tolist()
            result = {"clusters": _clusters(text, offsets, special, log, mention_threshold)}
        if return_memory_log:
            result["memory_log"] = _memory_log(text, offsets, log)
        return result


# ----------------------------------------------------------------------------------------------------- query
def _text_and_query(inputs: Any, query: tuple | None) -> tuple[str, tuple | None]:
    """A string, or a dict ``{"text", "pronoun", "candidates"}`` when every text of a batch has its own query."""
    if isinstance(inputs, dict):
        unknown = set(inputs) - {"text", "pronoun", "candidates"}
        if "text" not in inputs or unknown:
            raise ValueError(
                f"A dict input needs a 'text' and optionally 'pronoun' and 'candidates'; got keys {sorted(inputs)}."
            )
        if ("pronoun" in inputs) != ("candidates" in inputs):
            raise ValueError("A dict input with a 'pronoun' needs 'candidates' too (and the other way round).")
        if "pronoun" in inputs:
            query = (inputs["pronoun"], list(inputs["candidates"]))
        inputs = inputs["text"]
    if not isinstance(inputs, str):
        raise TypeError(f"The coreference pipeline reads strings (or dicts with a 'text'), got {type(inputs).__name__}.")
    return inputs, query


def _query_token_spans(
    text: str, offsets: list[tuple[int, int]], query: tuple[CharSpan, list[CharSpan]]
) -> tuple[list[int], list[list[int]]]:
    pronoun, candidates = query
    if not candidates:
        raise ValueError("candidates is empty; pass at least one (start, end) character span.")
    pronoun_span = _token_span(text, offsets, pronoun, "pronoun")
    candidate_spans = [_token_span(text, offsets, span, f"candidate {i}") for i, span in enumerate(candidates)]
    for index, span in enumerate(candidate_spans):
        if span[0] < pronoun_span[1] and pronoun_span[0] < span[1]:
            raise ValueError(
                f"candidate {index} {tuple(candidates[index])} overlaps the pronoun {tuple(pronoun)}; a candidate "
                "must be a different mention."
            )
    return pronoun_span, candidate_spans


def _token_span(text: str, offsets: list[tuple[int, int]], span: Any, name: str) -> list[int]:
    """Token span [first, last + 1) of the tokens that overlap the character span, with clear errors."""
    if not (isinstance(span, (tuple, list)) and len(span) == 2 and all(isinstance(v, int) for v in span)):
        raise ValueError(f"The {name} span must be a (start, end) pair of character offsets, got {span!r}.")
    start, end = span
    if not 0 <= start < end <= len(text):
        raise ValueError(
            f"The {name} span ({start}, {end}) is not a non-empty character span inside the text of length "
            f"{len(text)}; use 0 <= start < end <= len(text)."
        )
    tokens = [i for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]
    if not tokens:
        raise ValueError(f"The {name} span ({start}, {end}) covers only whitespace ({text[start:end]!r}).")
    return [tokens[0], tokens[-1] + 1]


def _span_tensors(query_spans: list, device: torch.device) -> dict[str, torch.Tensor]:
    """Pronoun and candidate token spans as tensors; candidates padded with (-1, -1) rows across the batch."""
    if all(spans is None for spans in query_spans):
        return {}
    if any(spans is None for spans in query_spans):
        raise ValueError("Either every text of a batch has a pronoun query or none has; split the calls.")
    width = max(len(candidates) for _, candidates in query_spans)
    pronouns = torch.tensor([pronoun for pronoun, _ in query_spans], device=device)
    candidates = torch.full((len(query_spans), width, 2), -1, dtype=torch.long, device=device)
    for row, (_, spans) in enumerate(query_spans):
        candidates[row, : len(spans)] = torch.tensor(spans, device=device)
    return {"pronoun_spans": pronouns, "candidate_spans": candidates}


def _query_answer(
    text: str, query: tuple[CharSpan, list[CharSpan]], scores: list[float], threshold: float
) -> dict[str, Any]:
    pronoun, candidates = query
    return {
        "pronoun": _mention(text, *pronoun),
        "candidates": [
            {**_mention(text, start, end), "probability": score, "coreferent": score >= threshold}
            for (start, end), score in zip(candidates, scores)
        ],
        "threshold": threshold,
    }


# -------------------------------------------------------------------------------------------------- clusters
def _clusters(
    text: str,
    offsets: list[tuple[int, int]],
    special: list[bool],
    log: dict[str, torch.Tensor],
    mention_threshold: float,
) -> list[list[dict[str, Any]]]:
    """Entities from the memory log: overwrite starts an entity in a cell, coref joins the cell's entity."""
    written = log["overwrite"] + log["coref"]
    strength, cell = written.max(dim=-1)
    entity_in_cell: dict[int, int] = {}
    token_entity: list[int | None] = []
    entities_started = 0
    for token, (value, chosen) in enumerate(zip(strength.tolist(), cell.tolist())):
        if special[token] or value < mention_threshold:
            token_entity.append(None)
            continue
        if log["overwrite"][token, chosen] >= log["coref"][token, chosen] or chosen not in entity_in_cell:
            entity_in_cell[chosen] = entities_started
            entities_started += 1
        token_entity.append(entity_in_cell[chosen])

    clusters: dict[int, list[dict[str, Any]]] = {}
    # Mentions never share characters: a word whose pieces went to two entities (or to one entity in two runs) is
    # one mention, of the entity its first piece went to. Runs come in text order, so the mentions end in order too.
    claimed_end = 0
    for entity, first, last in _runs(token_entity):
        start, end = max(offsets[first][0], claimed_end), offsets[last][1]
        span = _whole_words(text, start, end) if start < end else None
        if span is None:  # only punctuation, or only the rest of a word that is already a mention
            continue
        claimed_end = span[1]
        clusters.setdefault(entity, []).append(_mention(text, *span))
    return [mentions for mentions in clusters.values() if mentions]


def _runs(token_entity: list[int | None]):
    """(entity, first token, last token) of every maximal run of consecutive tokens with the same entity."""
    run_start = None
    for token, entity in enumerate([*token_entity, None]):
        if run_start is not None and entity != token_entity[run_start]:
            yield token_entity[run_start], run_start, token - 1
            run_start = None
        if entity is not None and run_start is None:
            run_start = token


def _whole_words(text: str, start: int, end: int) -> CharSpan | None:
    """Trim punctuation and spaces at the edges, then extend to whole words (never stop inside a word piece)."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    if start == end:
        return None
    while start > 0 and text[start - 1].isalnum():
        start -= 1
    while end < len(text) and text[end].isalnum():
        end += 1
    return start, end


def _mention(text: str, start: int, end: int) -> dict[str, Any]:
    return {"start": start, "end": end, "text": text[start:end]}


def _memory_log(text: str, offsets: list[tuple[int, int]], log: dict[str, torch.Tensor]) -> dict[str, Any]:
    memory_log = {"tokens": [text[start:end] for start, end in offsets], "offsets": [list(pair) for pair in offsets]}
    memory_log.update({name: values.tolist() for name, values in log.items()})
    return memory_log
