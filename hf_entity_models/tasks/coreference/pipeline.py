"""`pipeline("coreference")`: the entities a memory model tracks in a text, or which names a pronoun refers to.

This file imports only torch, transformers, the standard library and shared modules of the models
(``pipeline_inputs``, ``coreference_links``, ``document_coreference``), which saving copies next to it (the imports
made relative), so that the files can be uploaded next to a checkpoint and loaded with
``pipeline(model=..., trust_remote_code=True)`` on a machine without hf_entity_models. ``resolve=True`` reads the
package's `resolve_coreferences` (it is not shipped with checkpoints).
"""

import importlib
import math
import numbers
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import Pipeline

from hf_entity_models.models._shared.coreference_links import _best_window_per_token, _window_starts
from hf_entity_models.models._shared.document_coreference import NEW_ENTITY_SCORE, keep_top_spans, log_buckets
from hf_entity_models.models._shared.pipeline_inputs import check_tokenizer_files, check_unicode

CharSpan = tuple[int, int]

# Embedding rows a model may have that no token of its tokenizer uses: padding to GPU-friendly shapes (GPT-2's
# 50257 tokens in 50304 rows) and reserved rows (T5: 32100 in 32128, DeBERTa-v3: 128001 in 128100). The larger of the
# two bounds applies; see `check_tokenizer_matches_model`.
UNUSED_EMBEDDING_ROWS = 128
UNUSED_EMBEDDING_SHARE = 0.01
# Most tokens one encoder call reads when the pipeline reads a batch of document-mode texts: the windows of all its
# documents go to the encoder together, in calls of at most this many tokens (16 windows of 512), which keeps an
# accelerator busy and bounds the attention scores held at once.
ENCODER_TOKENS_PER_CALL = 8192
# Scripts written without spaces between words (CJK ideographs, kana, Thai, Lao, Myanmar, Khmer): the text does not
# mark words there, so every character boundary counts as a word boundary.
_SPACELESS_SCRIPTS = (
    (0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0x20000, 0x2FA1F),
)


class CoreferencePipeline(Pipeline):
    """Read texts with a coreference memory model (PeTra, the Referential Reader, ...) and return what it tracked.

    The model's output must carry the memory log (``entity_probs``, ``overwrite_probs`` and ``coref_probs``, the
    Referential Reader's update gates; optionally ``salience``) and, for queries, ``candidate_scores``.

    Two modes:

    * **clusters** (default): ``pipe(text)`` returns ``{"clusters": [[mention, ...], ...]}``, the entities the
      memory found, each mention a dict with character ``start``, ``end`` and ``text`` into the input string (the
      string as given: decomposed accents, e.g. ``"Zoe\\u0301"``, stay in the mention of their letter). A
      token is a mention when the memory writes it (overwrite + coref, summed over cells) with at least
      ``mention_threshold`` (default: ``model.config.mention_threshold``, chosen on validation by
      `train_on_conll`, else 0.5); with ``model.config.new_entity_threshold`` set (by `train_on_conll`), a token
      whose overwrite share of its write reaches it starts a new entity (`token_entities`); else an overwrite starts a new entity in that cell, a coref joins the cell's entity.
      With ``return_memory_log=True`` the per-token memory log is added (see `plot_memory_log`); it has a
      ``salience`` entry too when the model tracks salience (Referential Reader).
    * **query** (GAP-style): ``pipe(text, pronoun=(start, end), candidates=[(s1, e1), (s2, e2)])`` returns the
      link probability of the pronoun with every candidate (the model's ``candidate_scores``: its token link
      probability, PeTra's Eq. 9 or the Referential Reader's Eq. 5, maximised over token pairs) and the decision
      under the threshold stored in ``model.config.coref_threshold``. Spans are pairs of integer character
      offsets (a bool or float raises `TypeError`) that start and end on word boundaries (a span that cuts a word
      raises `ValueError` naming the whole word's span).

    A checkpoint in **document mode** (``model.config.coreference_mode == "document"``, trained on whole books by
    ``hf-entity train petra --conll``) answers ``pipe(text)`` with span clusters: the text is split into words (runs
    of letters and digits, with inner apostrophes, and single punctuation marks; `document_words`) and sentences
    (after ``.``, ``!`` or ``?`` and any closing quotes, and at blank lines; `document_sentence_ids`), the model
    proposes mentions of up to ``config.max_span_width`` words inside a sentence (nested mentions included) and
    clusters them in text order (`predict_clusters`). Every entity is returned, those mentioned once included, in
    the order of its first mention; ``span_threshold=`` overrides ``config.span_threshold`` (a logit). Queries and
    the memory log are token-mode answers.

    ``resolve=True`` (clusters only, not with a query) adds the text with its pronouns replaced by the names of
    their entities: ``"resolved_text"`` and ``"replacements"`` (``resolve_coreferences`` of the package; each
    replacement has its ``start``/``end`` in the text and ``resolved_start``/``resolved_end`` in the resolved text).

    Texts may be a string or a list of strings (an empty list gives ``[]``); ``batch_size=`` batches them; long
    documents are encoded in windows by the model (nothing is truncated). In the document mode a batch is read
    together: the encoder windows of all its texts in shared calls, and their mentions clustered in lockstep (one
    step of the entity memory for every text at once); the clusters are those of the texts read one by one. To give
    every text of a list its own query, pass dicts: ``pipe([{"text": ..., "pronoun": (s, e), "candidates": [...]},
    ...])``; a list may mix dicts with and without a query, at any batch size.

    The tokenizer must be the model's (`check_tokenizer_matches_model`), checked when the pipeline is built (a
    `ValueError` says what to fix); a checkpoint whose config.json does not fit its weights is refused when the model
    loads (`CheckpointError`).

    Example:

    ```python
    >>> from transformers import pipeline
    >>> pipe = pipeline("coreference", model="runs/petra-gap")  # doctest: +SKIP
    >>> pipe("Zoe met Maggie in Paris. She was happy.")  # doctest: +SKIP
    {'clusters': [[{'start': 0, 'end': 3, 'text': 'Zoe'}, {'start': 25, 'end': 28, 'text': 'She'}], ...]}
    >>> pipe("Zoe met Maggie. She smiled.", pronoun=(16, 19), candidates=[(0, 3), (8, 14)])  # doctest: +SKIP
    {'pronoun': {...}, 'candidates': [{'start': 0, 'end': 3, 'text': 'Zoe', 'probability': 0.31, 'coreferent': True}, ...]}
    >>> pipe("Zoe met Maggie. She smiled.", resolve=True)["resolved_text"]  # doctest: +SKIP
    'Zoe met Maggie. Zoe smiled.'
    >>> answers = pipe(["First text.", "Second text."], batch_size=8)  # doctest: +SKIP

    ```
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # A checkpoint saved without its tokenizer files loads a near-empty vocabulary that maps every word to
        # [UNK]: refuse it here rather than answer from [UNK]s (naming the missing files where it can).
        check_tokenizer_files(self.tokenizer)
        check_tokenizer_matches_model(self.tokenizer, self.model)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Answer one text (a dict) or a list of texts (a list of dicts, in order); see the class docstring."""
        if isinstance(inputs, tuple):
            inputs = list(inputs)  # the base class would take a tuple for one input
        if isinstance(inputs, list) and not inputs:
            # The base class looks at inputs[0] first (IndexError); an empty list has an empty list of answers.
            # The arguments are still checked, so that a typo does not go unnoticed until the list is non-empty.
            self._sanitize_parameters(**{k: v for k, v in kwargs.items() if k not in ("batch_size", "num_workers")})
            return []
        if isinstance(inputs, list):
            # Checked here, where the position in the list is known (preprocess sees one text at a time).
            for index, item in enumerate(inputs):
                text = item.get("text") if isinstance(item, dict) else item
                if isinstance(text, str):
                    check_unicode(text, f"Text {index} of the list")
        return super().__call__(inputs, *args, **kwargs)

    def _sanitize_parameters(
        self,
        pronoun: CharSpan | None = None,
        candidates: Sequence[CharSpan] | None = None,
        return_memory_log: bool | None = None,
        mention_threshold: float | None = None,
        span_threshold: float | None = None,
        resolve: bool | None = None,
        **kwargs,
    ):
        if kwargs:
            raise TypeError(f"Unknown arguments for the coreference pipeline: {sorted(kwargs)}.")
        resolve_parameters = {}
        if resolve:
            if pronoun is not None or candidates is not None:
                raise ValueError(_RESOLVE_WITH_QUERY)
            _resolver()  # fails now, before any text is read, where the package is not installed
            resolve_parameters = {"resolve": True}
        if self._document_mode():
            token_mode = {"pronoun": pronoun, "candidates": candidates, "return_memory_log": return_memory_log,
                          "mention_threshold": mention_threshold}
            asked = sorted(name for name, value in token_mode.items() if value is not None)
            if asked:
                raise ValueError(
                    f"{asked} are answered by token-mode checkpoints (GAP queries, the memory log); a document-mode "
                    "checkpoint returns the clusters of the whole text (look for the pronoun's mention there) and "
                    "takes span_threshold."
                )
            return {}, {"span_threshold": _checked_span_threshold(span_threshold)}, resolve_parameters
        if span_threshold is not None:
            raise ValueError("span_threshold is for document-mode checkpoints; this one reads tokens (mention_threshold).")
        if (pronoun is None) != (candidates is None):
            raise ValueError("Pass `pronoun=(start, end)` together with `candidates=[(start, end), ...]`.")
        preprocess_parameters = dict(resolve_parameters)  # a dict input's own query is refused with resolve=True
        if pronoun is not None:
            preprocess_parameters["query"] = _checked_query(pronoun, candidates)
        postprocess_parameters = dict(resolve_parameters)
        if return_memory_log is not None:
            postprocess_parameters["return_memory_log"] = bool(return_memory_log)
        if mention_threshold is not None:
            if not 0.0 <= mention_threshold <= 1.0:
                raise ValueError(f"mention_threshold is a probability in [0, 1], got {mention_threshold}.")
            postprocess_parameters["mention_threshold"] = float(mention_threshold)
        return preprocess_parameters, {}, postprocess_parameters

    def preprocess(
        self, inputs: Any, query: tuple[CharSpan, list[CharSpan]] | None = None, resolve: bool = False
    ) -> dict[str, Any]:
        text, query = _text_and_query(inputs, query)
        if resolve and query is not None:
            raise ValueError(_RESOLVE_WITH_QUERY)
        if not text.strip():
            raise ValueError("The text is empty; pass a non-empty string.")
        check_unicode(text, "The text")
        if self._document_mode():
            return self._document_preprocess(text, query)
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

    def _forward(self, model_inputs: dict[str, Any], span_threshold: float | None = None) -> dict[str, Any]:
        if self._document_mode():
            return self._document_forward(model_inputs, span_threshold)
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
        self,
        model_outputs: dict[str, Any],
        return_memory_log: bool = False,
        mention_threshold: float | None = None,
        resolve: bool = False,
    ) -> dict[str, Any]:
        if self._document_mode():
            document = model_outputs["document"]
            result = {"clusters": _document_clusters(document.text, document.words, document.mentions)}
            return _with_resolved_text(document.text, result) if resolve else result
        if mention_threshold is None:
            mention_threshold = float(getattr(self.model.config, "mention_threshold", 0.5))
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
            new_entity_threshold = getattr(self.model.config, "new_entity_threshold", None)
            result = {"clusters": _clusters(text, offsets, special, log, mention_threshold, new_entity_threshold)}
            if resolve:
                result = _with_resolved_text(text, result)
        if return_memory_log:
            result["memory_log"] = _memory_log(text, offsets, log)
        return result


    # ---------------------------------------------------------------------------------------------- document mode
    def _document_mode(self) -> bool:
        return getattr(self.model.config, "coreference_mode", "tokens") == "document"

    def _document_preprocess(self, text: str, query: Any) -> dict[str, Any]:
        if query is not None:  # a query given inside a dict input
            raise ValueError(
                "pronoun/candidates queries are answered by token-mode checkpoints (GAP); a document-mode checkpoint "
                "returns the clusters of the whole text: look for the pronoun's mention there."
            )
        words = document_words(text)
        if not words:
            raise ValueError("The text has no word (only spaces or control characters); pass a text with words.")
        encoding = self.tokenizer(
            [text[start:end] for start, end in words], is_split_into_words=True, truncation=False,
            return_tensors="pt", verbose=False,
        )  # fmt: skip
        # Word positions count from 1 so that the pipeline's padding (0) reads as "no word" like special tokens.
        positions = [0 if word is None else word + 1 for word in encoding.word_ids(0)]
        return {
            "input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"],
            "word_positions": torch.tensor([positions]),
            "document": _DocumentText(text, words, document_sentence_ids(text, words)),
        }  # fmt: skip

    def _document_forward(self, model_inputs: dict[str, Any], span_threshold: float | None) -> dict[str, Any]:
        documents = model_inputs["document"]
        single = isinstance(documents, _DocumentText)  # batch_size=1 leaves the items unbatched
        if single:
            documents = [documents]
        device = model_inputs["input_ids"].device
        real = model_inputs["attention_mask"].bool()  # the pipeline pads on the tokenizer's side
        tokens = [ids[mask] for ids, mask in zip(model_inputs["input_ids"], real)]
        word_ids = [positions[mask] - 1 for positions, mask in zip(model_inputs["word_positions"], real)]
        sentences = [torch.tensor(document.sentence_ids, device=device) for document in documents]
        pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        found = predict_document_batch(self.model, tokens, word_ids, sentences, span_threshold, pad_token_id)
        for document, mentions in zip(documents, found):
            document.mentions = mentions
        return {"document": documents[0] if single else documents}


class _DocumentText:
    """A document-mode text with its words, sentences and (after the forward pass) mentions. One object, not lists:
    the pipeline base class walks lists and dicts element by element to move tensors between devices, which costs
    seconds on the thousands of words of a book."""

    __slots__ = ("text", "words", "sentence_ids", "mentions")

    def __init__(self, text: str, words: list[CharSpan], sentence_ids: list[int]):
        self.text, self.words, self.sentence_ids = text, words, sentence_ids
        self.mentions: list[tuple[int, int, int]] = []


# ------------------------------------------------------------------------------------- document-mode batches
@torch.no_grad()
def predict_document_batch(
    model: Any,
    tokens: Sequence[torch.Tensor],
    word_ids: Sequence[torch.Tensor],
    sentence_ids: Sequence[torch.Tensor],
    span_threshold: float | None = None,
    pad_token_id: int = 0,
) -> list[list[tuple[int, int, int]]]:
    """The mentions `(first word, last word, entity)` of several documents, as `model.predict_clusters` finds them in
    each document alone (one document is read by it), read together: the encoder windows of all documents in shared
    calls (`encode_documents`), then every document's mention proposal, then the greedy clustering of all documents
    in lockstep (`cluster_in_lockstep`; a bounded memory clusters each document alone).

    Args:
        model: A document-mode coreference model (`coreference_mode="document"`).
        tokens, word_ids: Per document its token ids `(T_b,)` (special tokens included) and the word of every token
            `(T_b,)` (-1: none).
        sentence_ids: Per document the sentence of every word `(W_b,)`.
        span_threshold: Smallest mention logit (default: `config.span_threshold`).
        pad_token_id: Padding of the encoder calls (masked out).

    Example:
        >>> predict_document_batch(model, [row["input_ids"] for row in rows], [row["word_ids"] for row in rows],
        ...                        [row["sentence_ids"] for row in rows])  # doctest: +SKIP
        [[(0, 0, 0), (5, 5, 0), ...], ...]
    """
    if len(tokens) == 1:  # the model's own reading, as `hf-entity evaluate --conll` reads a document
        return model.predict_clusters(
            sentence_ids[0].unsqueeze(0), input_ids=tokens[0].unsqueeze(0), word_ids=word_ids[0].unsqueeze(0),
            span_threshold=span_threshold,
        )  # fmt: skip
    was_training = model.training
    model.eval()
    try:
        head, config = model.document_head, model.config
        threshold = config.span_threshold if span_threshold is None else float(span_threshold)
        spans, vectors = [], []
        for features, ids, sentence_row in zip(encode_documents(model, tokens, pad_token_id), word_ids, sentence_ids):
            [words], [sentences] = model.document_word_features(
                sentence_row.unsqueeze(0), encoder_features=features.unsqueeze(0), word_ids=ids.unsqueeze(0)
            )
            states = head.states(words)
            candidates, logits = head.candidates(states, sentences)
            kept = keep_top_spans(candidates, logits, threshold, config.max_mentions_per_word, words.shape[0])
            spans.append(kept)
            vectors.append((states, head.proposer(states, kept)[0]) if kept.shape[0] else (states, None))
        if head.memory.max_entities is None:
            entities = cluster_in_lockstep(head.memory, [v for _, v in vectors], [s[:, 0] for s in spans])
        else:
            entities = [head.cluster_spans(states, kept) for (states, _), kept in zip(vectors, spans)]
        return [[(int(a), int(b), entity) for (a, b), entity in zip(kept.tolist(), found)]
                for kept, found in zip(spans, entities)]
    finally:
        model.train(was_training)


def encode_documents(model: Any, tokens: Sequence[torch.Tensor], pad_token_id: int = 0) -> list[torch.Tensor]:
    """The encoder features `(T_b, F)` of every document, as `model.get_encoder_features` gives them for the document
    alone (a document longer than the encoder's window is read in overlapping windows, each token taking the window
    where it has most context), with the windows of all documents read together, longest first, in calls of at most
    `ENCODER_TOKENS_PER_CALL` tokens."""
    window, overlap = model.config.max_encoder_window, model.config.effective_window_overlap
    pieces = []  # (document, first token, length) of every window
    for index, ids in enumerate(tokens):
        length = ids.shape[0]
        starts = [0] if length <= window else _window_starts(length, window, overlap)
        pieces += [(index, start, min(window, length - start)) for start in starts]
    order = sorted(range(len(pieces)), key=lambda piece: -pieces[piece][2])
    per_call = max(1, ENCODER_TOKENS_PER_CALL // window)
    encoded: list[torch.Tensor | None] = [None] * len(pieces)
    for first in range(0, len(order), per_call):
        call = order[first : first + per_call]
        ids = tokens[0].new_full((len(call), pieces[call[0]][2]), pad_token_id)
        mask = torch.zeros_like(ids)
        for row, piece in enumerate(call):
            document, start, length = pieces[piece]
            ids[row, :length], mask[row, :length] = tokens[document][start : start + length], 1
        features = model.get_encoder_features(ids, mask)
        for row, piece in enumerate(call):
            encoded[piece] = features[row, : pieces[piece][2]]
    documents = []
    for index, ids in enumerate(tokens):
        windows = [piece for piece, (document, _, _) in enumerate(pieces) if document == index]
        if len(windows) == 1:
            documents.append(encoded[windows[0]])
            continue
        starts = [pieces[piece][1] for piece in windows]
        best_window, offset = _best_window_per_token(starts, window, ids.shape[0], ids.device)
        documents.append(torch.stack([encoded[piece] for piece in windows])[best_window, offset])
    return documents


@torch.no_grad()
def cluster_in_lockstep(
    memory: Any, mention_vectors: Sequence[torch.Tensor | None], mention_starts: Sequence[torch.Tensor]
) -> list[list[int]]:
    """`memory.cluster` (the unbounded entity memory's greedy clustering) of several documents at once: step `i`
    reads the `i`-th mention of every document that has one, so the memory's small per-mention operations run once
    per step for all documents. Returns the entity of every mention of every document, as `memory.cluster` numbers
    them (in order of creation). `mention_vectors` are the documents' span vectors `(K_b, D)` (None: no mention)."""
    lengths = [0 if vectors is None else vectors.shape[0] for vectors in mention_vectors]
    order = sorted((b for b in range(len(lengths)) if lengths[b]), key=lambda b: -lengths[b])  # longest first
    result: list[list[int]] = [[] for _ in lengths]
    if not order:
        return result
    first_layer, rest = memory.pair_scorer[0], memory.pair_scorer[1:]
    mentions = memory.mention_projection(pad_sequence([mention_vectors[b] for b in order], batch_first=True))
    starts = pad_sequence([mention_starts[b] for b in order], batch_first=True)
    documents, steps, size = mentions.shape
    feature_size = memory.distance_embedding.embedding_dim
    # As in `memory.cluster`: the scorer's first layer is linear, so each part's share is computed once.
    entity_weight, mention_weight, product_weight, distance_weight, size_weight = first_layer.weight.split(
        [size, size, size, feature_size, feature_size], dim=1)
    mention_terms = torch.nn.functional.linear(mentions, mention_weight, first_layer.bias)
    distance_terms = memory.distance_embedding.weight @ distance_weight.T
    size_terms = memory.size_embedding.weight @ size_weight.T
    entities = mentions.new_zeros(documents, steps, size)
    entity_terms = mentions.new_zeros(documents, steps, first_layer.out_features)
    sizes, last_starts = starts.new_zeros(documents, steps), starts.new_zeros(documents, steps)
    counts = starts.new_zeros(documents)
    rows, slots = torch.arange(documents, device=starts.device), torch.arange(steps, device=starts.device)
    active, most_entities, chosen = documents, 0, []
    for step in range(steps):
        while lengths[order[active - 1]] <= step:  # documents run out of mentions shortest first
            active -= 1
        mention, start, row = mentions[:active, step], starts[:active, step], rows[:active]
        if most_entities:
            known = slice(0, most_entities)
            distances = log_buckets(start.unsqueeze(1) - last_starts[:active, known], memory.num_distance_buckets)
            hidden = (entity_terms[:active, known] + mention_terms[:active, step].unsqueeze(1)
                      + (entities[:active, known] * mention.unsqueeze(1)) @ product_weight.T + distance_terms[distances]
                      + size_terms[log_buckets(sizes[:active, known], memory.num_size_buckets)])  # fmt: skip
            scores = rest(hidden).squeeze(-1).masked_fill(slots[known] >= counts[:active].unsqueeze(1), float("-inf"))
            top_score, top = scores.max(dim=1)
            joins = top_score > NEW_ENTITY_SCORE
        else:
            joins, top = torch.zeros_like(start, dtype=torch.bool), counts[:active]
        best = torch.where(joins, top, counts[:active])
        old, old_sizes = entities[row, best], sizes[row, best]
        new = torch.where(joins.unsqueeze(1), memory.updated(old, mention, old_sizes), mention)
        entities[row, best], entity_terms[row, best] = new, new @ entity_weight.T
        sizes[row, best] = torch.where(joins, old_sizes + 1, 1)
        last_starts[row, best] = start
        counts[:active] += ~joins
        most_entities = int(counts[:active].max())
        chosen.append(best)
    for position, document in enumerate(order):
        result[document] = [int(step[position]) for step in chosen[: lengths[document]]]
    return result


# ------------------------------------------------------------------------------------------------- tokenizer
def check_tokenizer_matches_model(tokenizer: Any, model: Any) -> None:
    """Raise unless the tokenizer's vocabulary is the one the model's input embeddings were built for.

    The model's input vocabulary is the encoder's ``vocab_size`` when the model reads a pretrained encoder
    (``config.encoder_config``: PeTra, the Referential Reader on BERT), else ``config.vocab_size`` (a reader with its
    own word embeddings). The rule, with ``n = len(tokenizer)`` (added tokens included) and ``V`` that size:

    * ``n <= V``: a larger tokenizer produces ids that have no embedding row;
    * ``V - n <= max(128, V / 100)``: embedding matrices may hold rows no token uses (padding to GPU-friendly sizes,
      reserved rows: GPT-2, T5, DeBERTa-v3). A larger gap means the tokenizer is not the model's: e.g. a checkpoint
      saved without ``tokenizer.json`` loads a 5-token vocabulary that maps every word to ``[UNK]``, and the
      vocabulary of another model (BERT cased, 28996, for uncased, 30522) numbers its words differently.

    Args:
        tokenizer: The tokenizer that will produce the model's ``input_ids``.
        model: A model whose ``config`` has an ``encoder_config`` or a ``vocab_size``.

    Raises:
        ValueError: If there is no tokenizer, the model has no vocabulary size, or the sizes do not fit as above;
            the message gives both sizes and how to fix it.

    Example:
        >>> from transformers import AutoTokenizer  # doctest: +SKIP
        >>> check_tokenizer_matches_model(AutoTokenizer.from_pretrained("runs/petra-gap"), model)  # doctest: +SKIP
    """
    if tokenizer is None:
        raise ValueError(
            "The coreference pipeline needs the model's tokenizer; pass tokenizer=... or save the tokenizer next to "
            "the model (tokenizer.save_pretrained(folder))."
        )
    config = model.config
    encoder_config = getattr(config, "encoder_config", None)
    source = "config.encoder_config.vocab_size" if encoder_config is not None else "config.vocab_size"
    if isinstance(encoder_config, dict):
        vocabulary_size = encoder_config.get("vocab_size")
    else:
        vocabulary_size = getattr(encoder_config if encoder_config is not None else config, "vocab_size", None)
    if not isinstance(vocabulary_size, int) or vocabulary_size < 1:
        raise ValueError(
            f"{type(model).__name__} has no input vocabulary size ({source} is {vocabulary_size!r}), so its tokenizer "
            "cannot be checked; the model's config must give the number of rows of its input embeddings."
        )
    tokenizer_size = len(tokenizer)
    unused_rows = vocabulary_size - tokenizer_size
    if 0 <= unused_rows <= max(UNUSED_EMBEDDING_ROWS, UNUSED_EMBEDDING_SHARE * vocabulary_size):
        return
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    if unused_rows < 0:
        problem = (
            f"ids from {vocabulary_size} to {tokenizer_size - 1} have no embedding row (added tokens need "
            "model.resize_token_embeddings and training)"
        )
    else:
        problem = (
            f"{unused_rows} embedding rows would never be read (more than padding or reserved rows explain), so this "
            "is not the vocabulary the model was trained on (a checkpoint saved without tokenizer.json loads a few "
            "special tokens only and reads every word as [UNK])"
        )
    raise ValueError(
        f"The tokenizer {name!r} has {len(tokenizer)} tokens but {type(model).__name__} reads a vocabulary of "
        f"{vocabulary_size} ({source}): {problem}. Load the tokenizer the model was trained with, e.g. "
        "AutoTokenizer.from_pretrained(<encoder or training checkpoint>).save_pretrained(<checkpoint folder>)."
    )


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
            query = _checked_query(inputs["pronoun"], inputs["candidates"])
        inputs = inputs["text"]
    if not isinstance(inputs, str):
        raise TypeError(f"The coreference pipeline reads strings (or dicts with a 'text'), got {type(inputs).__name__}.")
    return inputs, query


def _checked_query(pronoun: Any, candidates: Any) -> tuple[CharSpan, list[CharSpan]]:
    """The query with every span checked to be a pair of integers (bools and floats are refused, not cast)."""
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise TypeError(
            f"candidates must be a list of (start, end) character spans, got {type(candidates).__name__}: "
            f"{candidates!r}."
        )
    if len(candidates) == 2 and all(_is_integer(value) for value in candidates):
        raise TypeError(
            f"candidates must be a list of (start, end) character spans, got one span {tuple(candidates)}; wrap it "
            f"in a list: candidates=[{tuple(candidates)}]."
        )
    spans = [_checked_char_span(span, f"candidate {index}") for index, span in enumerate(candidates)]
    return _checked_char_span(pronoun, "pronoun"), spans


def _checked_char_span(span: Any, name: str) -> CharSpan:
    if not isinstance(span, (tuple, list)):
        raise TypeError(
            f"The {name} span must be a (start, end) pair of character offsets, got {type(span).__name__}: {span!r}."
        )
    if len(span) != 2:
        raise ValueError(
            f"The {name} span must be a (start, end) pair of character offsets, got {len(span)} values: {span!r}."
        )
    for value in span:
        if not _is_integer(value):
            # bool is an int subclass: (True, 36) would silently read as (1, 36).
            raise TypeError(
                f"The {name} span {tuple(span)!r} holds {value!r} of type {type(value).__name__}; start and end must "
                "be integer character offsets (not bools or floats)."
            )
    return int(span[0]), int(span[1])


def _is_integer(value: Any) -> bool:
    """Python and numpy integers; not bools, which Python counts as integers."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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


def _token_span(text: str, offsets: list[tuple[int, int]], span: CharSpan, name: str) -> list[int]:
    """Token span [first, last + 1) of the tokens that overlap the character span, with clear errors."""
    start, end = span
    if not 0 <= start < end <= len(text):
        raise ValueError(
            f"The {name} span ({start}, {end}) is not a non-empty character span inside the text of length "
            f"{len(text)}; use 0 <= start < end <= len(text)."
        )
    if _inside_word(text, start) or _inside_word(text, end):
        # The model would read the whole word piece anyway: a cut span is a wrong offset, not a smaller mention.
        word_start, word_end = _widen_to_words(text, *_without_edge_spaces(text, start, end))
        raise ValueError(
            f"The {name} span ({start}, {end}) {text[start:end]!r} cuts the word {text[word_start:word_end]!r} at "
            f"({word_start}, {word_end}); a span must start and end on word boundaries (a combining accent belongs "
            f"to the letter before it). Use ({word_start}, {word_end}) for the whole word, or check that the offsets "
            "index this exact string (not, e.g., its NFC-normalised form)."
        )
    tokens = [i for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]
    if not tokens:
        raise ValueError(f"The {name} span ({start}, {end}) covers only whitespace ({text[start:end]!r}).")
    return [tokens[0], tokens[-1] + 1]


def _span_tensors(query_spans: list, device: torch.device) -> dict[str, torch.Tensor]:
    """Pronoun and candidate token spans as tensors on `device`; candidates padded with (-1, -1) rows.

    In a batch that mixes texts with and without a query, a text without one gets the placeholder pronoun span
    [0, 1) and only padding candidates: its candidate scores are 0 and never read, and the memory log does not
    depend on the spans, so every text gets the answer it gets alone.
    """
    if all(spans is None for spans in query_spans):
        return {}
    width = max(len(spans[1]) for spans in query_spans if spans is not None)
    pronouns = [[0, 1] if spans is None else list(spans[0]) for spans in query_spans]
    candidates = [[[-1, -1]] * width for _ in query_spans]
    for row, spans in enumerate(query_spans):
        if spans is not None:
            candidates[row][: len(spans[1])] = [list(span) for span in spans[1]]
    # Built on the host and moved once: the model may sit on a GPU.
    return {
        "pronoun_spans": torch.tensor(pronouns, dtype=torch.long).to(device),
        "candidate_spans": torch.tensor(candidates, dtype=torch.long).to(device),
    }


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


# ------------------------------------------------------------------------------------------------- resolve
_RESOLVE_WITH_QUERY = (
    "resolve=True rewrites the text from its clusters, but a pronoun/candidates query returns link probabilities, "
    "not clusters: drop resolve=True, or the query."
)


def _resolver() -> Callable[[str, Sequence[Any]], dict[str, Any]]:
    """The package's `resolve_coreferences`, a neighbour of this file in the package; a checkpoint's copy of the
    pipeline, run without the package, has none."""
    try:
        return importlib.import_module(".resolved_text", __package__).resolve_coreferences
    except (ImportError, TypeError) as error:  # TypeError: no package to import from
        raise ValueError(
            "resolve=True needs the hf_entity_models package (pip install hf-entity-models), whose "
            "resolve_coreferences rewrites the text; this pipeline was loaded from a checkpoint's own code without it."
        ) from error


def _with_resolved_text(text: str, result: dict[str, Any]) -> dict[str, Any]:
    resolved = _resolver()(text, result["clusters"])
    return {**result, "resolved_text": resolved["text"], "replacements": resolved["replacements"]}


# ---------------------------------------------------------------------------------------- document-mode text
# A word: letters and digits with inner apostrophes ("don't", "O'Brien"), or one other visible character.
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*|[^\s]", re.UNICODE)
_SENTENCE_END = frozenset(".!?")
_CLOSING = frozenset("\"'\u201d\u2019)]")


def document_words(text: str) -> list[CharSpan]:
    """The words of a text as character spans `[start, end)`, in order.

    Example:
        >>> text = "Don't go, Mr. O'Brien!"
        >>> [text[a:b] for a, b in document_words(text)]
        ["Don't", 'go', ',', 'Mr', '.', "O'Brien", '!']
    """
    return [match.span() for match in _WORD.finditer(text) if not unicodedata.category(match.group()[0]).startswith("C")]


def document_sentence_ids(text: str, words: Sequence[CharSpan]) -> list[int]:
    """The sentence of every word: a sentence ends after `.`, `!` or `?` (and the closing quotes or brackets that
    follow it without a space), and at a blank line between two words.

    Example:
        >>> text = 'He ran. "Stop!" she said\\n\\nThe end'
        >>> document_sentence_ids(text, document_words(text))
        [0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3]
    """
    ids, sentence, ended = [], 0, False
    for index, (start, end) in enumerate(words):
        word = text[start:end]
        blank_line = index > 0 and text.count("\n", words[index - 1][1], start) >= 2
        closes = word in _CLOSING and index > 0 and start == words[index - 1][1]  # touches the sentence's end
        if index > 0 and (blank_line or (ended and not closes)):
            sentence += 1
            ended = False
        ids.append(sentence)
        ended = ended or word in _SENTENCE_END
    return ids


def _document_clusters(text: str, words: Sequence[CharSpan], mentions: Sequence[tuple[int, int, int]]) -> list:
    """Clusters of mentions `(first word, last word, entity)` as character spans, entities in order of first mention."""
    clusters: dict[int, list[dict[str, Any]]] = {}
    for first, last, entity in mentions:
        clusters.setdefault(entity, []).append(_mention(text, words[first][0], words[last][1]))
    return list(clusters.values())


def _checked_span_threshold(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"span_threshold is a finite mention logit (e.g. 0.0), got {value!r}.")
    return float(value)


# -------------------------------------------------------------------------------------------------- clusters
def _clusters(
    text: str,
    offsets: list[tuple[int, int]],
    special: list[bool],
    log: dict[str, torch.Tensor],
    mention_threshold: float,
    new_entity_threshold: float | None = None,
) -> list[list[dict[str, Any]]]:
    """Entities from the memory log: overwrite starts an entity in a cell, coref joins the cell's entity
    (`token_entities`)."""
    strength = mention_strength(log["overwrite"], log["coref"]).tolist()
    is_mention = [not special[token] and value >= mention_threshold for token, value in enumerate(strength)]
    token_entity = token_entities(log["overwrite"], log["coref"], is_mention, new_entity_threshold)

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


def mention_strength(overwrite_probs: torch.Tensor, coref_probs: torch.Tensor) -> torch.Tensor:
    """How much a token writes to the memory in all: overwrite + coref summed over cells (PeTra: its e_t).

    A token is a mention when this reaches the mention threshold, however its write is split between cells.
    """
    return (overwrite_probs + coref_probs).sum(dim=-1)


def token_entities(
    overwrite_probs: torch.Tensor,
    coref_probs: torch.Tensor,
    is_mention: Sequence[bool],
    new_entity_threshold: float | None = None,
) -> list[int | None]:
    """The entity (numbered 0, 1, ... in order of first mention) of every token the caller counts as a mention.

    `overwrite_probs` and `coref_probs` are `(tokens, cells)` of one document; other tokens get None. A token starts
    a new entity in a cell, or joins the entity of a cell:

    * `new_entity_threshold=None`: it goes to the cell it writes most (overwrite + coref) and starts a new entity
      there when its overwrite is at least its coref in that cell;
    * a number: it starts a new entity in the cell it overwrites most when the overwrite share of its write
      (overwrite / (overwrite + coref), summed over cells) reaches the threshold, else it joins the entity of the
      cell it corefers with most.

    A token that would join a cell holding no entity yet starts one there.
    """
    if new_entity_threshold is None:
        chosen_cells = (overwrite_probs + coref_probs).argmax(dim=-1, keepdim=True)
        new_cells = join_cells = chosen_cells.squeeze(-1).tolist()
        starts = (overwrite_probs >= coref_probs).gather(-1, chosen_cells).squeeze(-1).tolist()
    else:
        overwritten = overwrite_probs.sum(dim=-1)
        share = overwritten / (overwritten + coref_probs.sum(dim=-1)).clamp_min(1e-7)
        starts = (share >= new_entity_threshold).tolist()
        new_cells, join_cells = overwrite_probs.argmax(dim=-1).tolist(), coref_probs.argmax(dim=-1).tolist()
    entity_in_cell: dict[int, int] = {}
    entities: list[int | None] = []
    entities_started = 0
    for token, starts_entity in enumerate(starts):
        if not is_mention[token]:
            entities.append(None)
            continue
        cell = new_cells[token] if starts_entity else join_cells[token]
        if starts_entity or cell not in entity_in_cell:
            entity_in_cell[cell] = entities_started
            entities_started += 1
        entities.append(entity_in_cell[cell])
    return entities


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
    while start < end and not _is_word_character(text, start):
        start += 1
    while end > start and not _is_word_character(text, end - 1):
        end -= 1
    if start == end:
        return None
    return _widen_to_words(text, start, end)


def _without_edge_spaces(text: str, start: int, end: int) -> CharSpan:
    """The span without the whitespace at its edges (a suggested span ends on the word, not on the space after it)."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _widen_to_words(text: str, start: int, end: int) -> CharSpan:
    while _inside_word(text, start):
        start -= 1
    while _inside_word(text, end):
        end += 1
    return start, end


def _inside_word(text: str, position: int) -> bool:
    """Whether the boundary before ``text[position]`` falls inside a word.

    Words are runs of letters and digits; a combining mark (an NFD accent, e.g. "Zoe\u0301") belongs to the
    character before it, so no word ends before a mark. In scripts written without spaces every character
    boundary counts as a word boundary.
    """
    if not 0 < position < len(text):
        return False
    if unicodedata.category(text[position]).startswith("M"):
        return True
    return (
        _is_word_character(text, position - 1)
        and _is_word_character(text, position)
        and not _is_spaceless(_base_character(text, position - 1))
        and not _is_spaceless(text[position])
    )


def _is_word_character(text: str, position: int) -> bool:
    """A letter or digit, or a combining mark on one."""
    return _base_character(text, position).isalnum()


def _base_character(text: str, position: int) -> str:
    """The character a combining mark sits on (the character itself when it is not a mark)."""
    while position > 0 and unicodedata.category(text[position]).startswith("M"):
        position -= 1
    return text[position]


def _is_spaceless(character: str) -> bool:
    code = ord(character)
    return any(first <= code <= last for first, last in _SPACELESS_SCRIPTS)


def _mention(text: str, start: int, end: int) -> dict[str, Any]:
    return {"start": start, "end": end, "text": text[start:end]}


def _memory_log(text: str, offsets: list[tuple[int, int]], log: dict[str, torch.Tensor]) -> dict[str, Any]:
    memory_log = {"tokens": [text[start:end] for start, end in offsets], "offsets": [list(pair) for pair in offsets]}
    memory_log.update({name: values.tolist() for name, values in log.items()})
    return memory_log
