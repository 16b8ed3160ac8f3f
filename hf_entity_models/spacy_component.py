"""`entity_coref`: a spaCy pipeline component that runs `pipeline("coreference")` and puts its clusters on the Doc.

spaCy finds the factory through the ``spacy_factories`` entry point of setup.py, so that
``nlp.add_pipe("entity_coref", config={"model": ...})`` and ``spacy.load`` of a saved pipeline work without importing
hf_entity_models first. spaCy is an optional dependency (the ``[spacy]`` extra): nothing in the package imports this
module, only spaCy does (the `Language.factory` decorator must run at import, so spaCy is imported at module level).
It imports only spaCy and the standard library, and its parent is the lazy top-level package: spaCy imports every
`spacy_factories` entry point whenever it builds a pipeline, so every spaCy user of this environment pays for this
import (torch and transformers come when the model first loads).

What the component writes on every Doc:

* ``doc.spans["coref_clusters_1"]``, ``doc.spans["coref_clusters_2"]``, ...: one span group per entity, its mentions
  in the pipeline's order (spaCy's coreference convention, as spacy-experimental's components write it; the prefix
  is the ``span_cluster_prefix`` setting). Groups of that prefix already on the Doc are replaced.
* ``doc._.coref_clusters``: the same clusters as the model's exact character offsets, a list of clusters, each a list
  of ``(start_char, end_char)`` tuples, index for index the spans of the span groups. Plain tuples (not Spans) keep
  the model's answer exactly and survive ``Doc.to_bytes`` / ``DocBin`` with the rest of ``doc.user_data``;
  ``doc.char_span(start, end, alignment_mode="expand")`` gives the Span of a pair. Docs the component has not run on
  read ``None``.

A mention is a character span of the pipeline's own word splitting, which is not spaCy's (``"Mr."`` is one spaCy
token but two words for a document-mode model). A mention that starts or ends inside a spaCy token is widened to the
tokens that cover it (``alignment_mode="expand"``), never dropped: its span in ``doc.spans`` is then longer than
its pair in ``doc._.coref_clusters``, which keeps the model's offsets. Two mentions widened to the same tokens stay two
spans. Docs without words (empty, only spaces or zero-width characters) get no clusters without calling the model
(the pipeline refuses such texts).

Loading and saving: the model (a checkpoint folder or a Hub model name, the ``model`` setting) is loaded on first use,
or by ``nlp.initialize()``. ``nlp.to_disk(folder)`` stores a copy of the model and its tokenizer in
``folder/<component name>/model``, and ``spacy.load(folder)`` reads that copy, so a saved spaCy pipeline is
self-contained (the original folder may move or vanish; a Hub model is not downloaded again). ``nlp.to_bytes()`` does
not carry the model: ``nlp.from_bytes`` gets the config only, and loads the model from the ``model`` setting.

Example:

```python
>>> import spacy
>>> nlp = spacy.blank("en")
>>> coref = nlp.add_pipe("entity_coref", config={"model": "runs/petra-litbank"})  # doctest: +SKIP
>>> doc = nlp("Anna met her brother. He was late.")  # doctest: +SKIP
>>> [[span.text for span in doc.spans[f"coref_clusters_{n}"]] for n in (1, 2)]  # doctest: +SKIP
[['Anna', 'her'], ['her brother', 'He']]
>>> doc._.coref_clusters  # doctest: +SKIP
[[(0, 4), (9, 12)], [(9, 20), (22, 24)]]

```
"""

import os
import shutil
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Optional, Union

from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.util import ensure_path, minibatch

FACTORY_NAME = "entity_coref"
CLUSTERS_EXTENSION = "coref_clusters"
DEFAULT_CLUSTER_PREFIX = "coref_clusters"
# Where `to_disk` puts the model inside the component's folder of a saved spaCy pipeline.
MODEL_FOLDER = "model"

CharSpan = tuple[int, int]


@Language.factory(
    FACTORY_NAME,
    assigns=["doc.spans", f"doc._.{CLUSTERS_EXTENSION}"],
    default_config={
        "batch_size": 8,
        "device": None,
        "span_threshold": None,
        "mention_threshold": None,
        "span_cluster_prefix": DEFAULT_CLUSTER_PREFIX,
    },
)
def make_entity_coref(
    nlp: Language,
    name: str,
    model: str,
    batch_size: int,
    device: Optional[Union[int, str]],
    span_threshold: Optional[float],
    mention_threshold: Optional[float],
    span_cluster_prefix: str,
) -> "EntityCoref":
    """Build the `entity_coref` component (spaCy calls this for ``nlp.add_pipe("entity_coref", config=...)``).

    Args:
        nlp: The pipeline the component joins.
        name: The component's name in the pipeline.
        model: A coreference checkpoint folder (saved with ``save_pretrained``, its tokenizer next to it) or a Hub
            model name; anything ``pipeline("coreference", model=...)`` loads.
        batch_size: Texts per forward pass of the model in ``nlp.pipe`` (each ``nlp.pipe`` batch of Docs goes to the
            coreference pipeline in one call).
        device: Passed to ``pipeline(..., device=...)`` (``-1``/``"cpu"``, ``0``/``"cuda:0"``, ...); ``None`` lets
            transformers choose.
        span_threshold: The mention logit threshold of a document-mode checkpoint (``None``: its config's).
        mention_threshold: The mention probability threshold of a token-mode checkpoint (``None``: its config's).
        span_cluster_prefix: The span groups are named ``f"{span_cluster_prefix}_{n}"``, ``n`` from 1.

    Returns:
        The component.
    """
    return EntityCoref(
        nlp.vocab,
        name,
        model=model,
        batch_size=batch_size,
        device=device,
        span_threshold=span_threshold,
        mention_threshold=mention_threshold,
        span_cluster_prefix=span_cluster_prefix,
    )


class EntityCoref(Pipe):
    """Coreference clusters from a hf_entity_models checkpoint on spaCy Docs; see the module docstring.

    Example:
        >>> nlp = spacy.blank("en")  # doctest: +SKIP
        >>> nlp.add_pipe("entity_coref", config={"model": "runs/petra-litbank", "batch_size": 4})  # doctest: +SKIP
        >>> # 16 Docs per call of the coreference pipeline, 4 texts per forward pass
        >>> docs = list(nlp.pipe(texts, batch_size=16))  # doctest: +SKIP
    """

    def __init__(
        self,
        vocab: Any,
        name: str = FACTORY_NAME,
        *,
        model: str,
        batch_size: int = 8,
        device: Optional[Union[int, str]] = None,
        span_threshold: Optional[float] = None,
        mention_threshold: Optional[float] = None,
        span_cluster_prefix: str = DEFAULT_CLUSTER_PREFIX,
    ):
        if not isinstance(model, str) or not model.strip():
            raise ValueError(
                f"{FACTORY_NAME}: `model` must name a coreference checkpoint folder or a Hub model, got {model!r}; "
                'e.g. config={"model": "runs/petra-litbank"} (a Path as str(path)).'
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"{FACTORY_NAME}: `batch_size` is a number of texts, at least 1; got {batch_size!r}.")
        if not isinstance(span_cluster_prefix, str) or not span_cluster_prefix:
            raise ValueError(
                f"{FACTORY_NAME}: `span_cluster_prefix` must be a non-empty string, got {span_cluster_prefix!r}."
            )
        self.vocab = vocab
        self.name = name
        self.model_source = model
        self.batch_size = batch_size
        self.device = device
        self.span_cluster_prefix = span_cluster_prefix
        self.call_options = {
            option: value
            for option, value in (("span_threshold", span_threshold), ("mention_threshold", mention_threshold))
            if value is not None
        }
        self._coref_pipeline = None
        if not Doc.has_extension(CLUSTERS_EXTENSION):
            Doc.set_extension(CLUSTERS_EXTENSION, default=None)

    # ------------------------------------------------------------------------------------------------- the model
    @property
    def coref_pipeline(self) -> Any:
        """The transformers ``CoreferencePipeline`` (loaded on first use)."""
        if self._coref_pipeline is None:
            self._coref_pipeline = self._load(self.model_source)
        return self._coref_pipeline

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Any]]] = None, *, nlp: Any = None) -> None:
        """Load the model now (``nlp.initialize()``) rather than on the first Doc; nothing is trained."""
        self.coref_pipeline  # noqa: B018 - loading is the point

    def _load(self, source: str) -> Any:
        coref = load_coreference_pipeline(source, device=self.device)
        if self.call_options:
            # Options the checkpoint does not take (span_threshold for a token-mode one, ...) fail here, when the
            # model loads, rather than on the first Doc; the pipeline's message says which option goes with which mode.
            coref._sanitize_parameters(**self.call_options)
        return coref

    # --------------------------------------------------------------------------------------------------- running
    def __call__(self, doc: Doc) -> Doc:
        """Find the clusters of one Doc (``nlp(text)``)."""
        self._annotate([doc])
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Find the clusters of a stream of Docs (``nlp.pipe(texts, batch_size=...)``), in order.

        Every ``batch_size`` Docs go to the coreference pipeline in one call (``pipe(texts, batch_size=...)``, this
        component's ``batch_size`` texts per forward pass). A batch that fails goes to the error handler
        (``nlp.set_error_handler``; by default the error is raised).
        """
        error_handler = self.get_error_handler()
        for docs in minibatch(stream, size=batch_size):
            try:
                self._annotate(docs)
            except Exception as error:  # noqa: BLE001 - spaCy's contract: the handler decides (default: raise)
                error_handler(self.name, self, docs, error)
            else:
                yield from docs

    def _annotate(self, docs: list[Doc]) -> None:
        # The pipeline refuses a text without words; such a Doc simply has no entities.
        texts = [doc.text for doc in docs if has_words(doc.text)]
        answers: list[dict[str, Any]] = []
        if texts:
            answers = self.coref_pipeline(texts, batch_size=min(self.batch_size, len(texts)), **self.call_options)
        answer_of_text = iter(answers)
        for doc in docs:
            clusters = next(answer_of_text)["clusters"] if has_words(doc.text) else []
            self.set_annotations(doc, clusters)

    def set_annotations(self, doc: Doc, clusters: list[list[dict[str, Any]]]) -> None:
        """Write the pipeline's clusters (mentions with character ``start``/``end``) on the Doc."""
        pairs = [[(int(mention["start"]), int(mention["end"])) for mention in cluster] for cluster in clusters]
        for cluster in clusters:
            for mention in cluster:
                found = doc.text[mention["start"] : mention["end"]]
                if "text" in mention and mention["text"] != found:
                    # The pipeline's offsets index the text it was given, which is doc.text: a mismatch is a bug.
                    raise ValueError(
                        f"{self.name}: the coreference pipeline returned the mention {mention!r}, whose offsets point "
                        f"at {found!r} in the Doc."
                    )
        for key in [key for key in doc.spans if _is_cluster_key(key, self.span_cluster_prefix)]:
            del doc.spans[key]
        for number, cluster in enumerate(pairs, start=1):
            spans = [covering_span(doc, start, end) for start, end in cluster]
            doc.spans[f"{self.span_cluster_prefix}_{number}"] = spans
        doc._.set(CLUSTERS_EXTENSION, pairs)

    # ----------------------------------------------------------------------------------------------- serialization
    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = ()) -> None:
        """Save the model and its tokenizer in ``path/model`` (``nlp.to_disk`` calls this); see the module docstring."""
        path = ensure_path(path)
        path.mkdir(parents=True, exist_ok=True)
        coref = self.coref_pipeline
        target = path / MODEL_FOLDER
        # Written next to the target, then swapped in: the model may have been loaded from the target itself
        # (spacy.load, then to_disk to the same folder), whose weight files must not be rewritten while in use.
        staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_FOLDER}-", dir=path))
        try:
            coref.model.save_pretrained(staging)
            coref.tokenizer.save_pretrained(staging)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = ()) -> "EntityCoref":
        """Load the model saved by `to_disk` (``spacy.load`` calls this) instead of the ``model`` setting's."""
        folder = ensure_path(path) / MODEL_FOLDER
        if not folder.is_dir():
            raise OSError(
                f"{self.name}: {ensure_path(path)} holds no saved coreference model (no '{MODEL_FOLDER}' folder); "
                f"save the spaCy pipeline with nlp.to_disk, or load it with spacy.load(..., exclude=[{self.name!r}]) "
                f"and add the component again."
            )
        self._coref_pipeline = self._load(str(folder))
        return self


def load_coreference_pipeline(source: str, device: Optional[Union[int, str]] = None) -> Any:
    """``pipeline("coreference", model=source, device=device)``, with an error that names a missing folder.

    Raises:
        OSError: If ``source`` is a path (absolute, or starting with ``.`` or ``~``, or of more than two parts) that
            does not exist or is not a folder, or if transformers cannot load it (the message names ``source``).
    """
    local = Path(source).expanduser()
    if local.exists() and not local.is_dir():
        raise OSError(
            f"{FACTORY_NAME}: the coreference model {source!r} is a file; pass the checkpoint folder that "
            "save_pretrained wrote (config.json, model.safetensors and the tokenizer files)."
        )
    if not local.exists() and _looks_like_a_path(source):
        raise OSError(
            f"{FACTORY_NAME}: the coreference model folder {source!r} does not exist; pass a checkpoint folder saved "
            "with save_pretrained (its tokenizer next to it) or a Hub model name."
        )
    import hf_entity_models  # noqa: F401 - registers the "coreference" task with transformers
    from transformers import pipeline

    try:
        return pipeline("coreference", model=str(local) if local.exists() else source, device=device)
    except OSError as error:
        raise OSError(
            f"{FACTORY_NAME} could not load the coreference model {source!r} (a checkpoint folder or a Hub model "
            f"name): {error}"
        ) from error


def covering_span(doc: Doc, start: int, end: int) -> Span:
    """The Span of the tokens that cover the characters ``[start, end)`` of the Doc (never None for a non-empty span
    inside the text).

    Example:
        >>> doc = spacy.blank("en")("Mr. Darcy left.")  # doctest: +SKIP
        >>> covering_span(doc, 0, 2).text  # "Mr" cuts the token "Mr."  # doctest: +SKIP
        'Mr.'
    """
    if not 0 <= start < end <= len(doc.text):
        raise ValueError(
            f"The mention ({start}, {end}) is not a non-empty span of the Doc's {len(doc.text)} characters."
        )
    span = doc.char_span(start, end, alignment_mode="expand")
    if span is None or not len(span):
        # `expand` gives None, or an empty Span, when an edge falls in the whitespace after a token; take every
        # token that shares a character with the mention instead.
        touched = [token.i for token in doc if token.idx < end and token.idx + len(token.text) > start]
        if not touched:
            raise ValueError(f"No token of the Doc covers the mention ({start}, {end}) {doc.text[start:end]!r}.")
        span = doc[touched[0] : touched[-1] + 1]
    return span


def has_words(text: str) -> bool:
    """Whether the text has a word for the coreference pipeline: a character that is neither a space nor a control
    or format character (the pipeline refuses texts without one, e.g. only spaces or zero-width spaces).

    Example:
        >>> has_words(" \\u200b\\n"), has_words("...")
        (False, True)
    """
    return any(not character.isspace() and not unicodedata.category(character).startswith("C") for character in text)


def _is_cluster_key(key: str, prefix: str) -> bool:
    return key.startswith(f"{prefix}_") and key[len(prefix) + 1 :].isdigit()


def _looks_like_a_path(source: str) -> bool:
    """Whether ``source`` can only be a local path: a Hub name is ``name`` or ``namespace/name``."""
    return (
        Path(source).expanduser().is_absolute()
        or source.startswith((".", "~"))
        or source.count("/") > 1
        or "\\" in source
    )
