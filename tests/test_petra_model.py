"""PeTra model: Eq. 9, losses, batching, long documents, bad input.

The memory itself is checked against an independent reference of the paper's equations in test_petra_reference.py.
"""

import math

import pytest
import torch
from conftest import tiny_petra_config

from hf_entity_models import PetraForCoreference
from hf_entity_models.models.petra import (
    IGNORE_INDEX,
    LINK_NEGATIVE,
    LINK_POSITIVE,
    LINK_SELF,
    LinkLogProbability,
)


# ------------------------------------------------------------------------------------------ slow references
def reference_link_probability(overwrite, coref, t1, t2):
    """Eq. 9 with plain products (t1 < t2), the product over j = t1+1 .. t2 inclusive."""
    total = 0.0
    for i in range(overwrite.shape[-1]):
        keep = 1.0
        for j in range(t1 + 1, t2 + 1):
            keep *= 1 - overwrite[j, i].item()
        total += (overwrite[t1, i].item() + coref[t1, i].item()) * keep * coref[t2, i].item()
    return total


def random_memory_log(length=7, cells=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    raw = torch.rand(length, cells, 3, generator=generator)
    split = raw / raw.sum(-1, keepdim=True)  # overwrite + coref + ignore = 1 per cell
    return split[..., 0], split[..., 1]


# ---------------------------------------------------------------------------------------------------- tests
def test_first_entity_goes_to_a_new_cell_and_never_corefers_with_an_unused_cell():
    model = PetraForCoreference(tiny_petra_config()).eval()
    with torch.no_grad():
        output = model(input_ids=torch.randint(1000, 2000, (1, 5)))
    # Before any write every cell is unused: coref is (numerically) impossible, the new-entity mass is e_1.
    assert output.coref_probs[0, 0].max() < 1e-6
    torch.testing.assert_close(output.overwrite_probs[0, 0].sum(), output.entity_probs[0, 0])


def test_link_probability_hand_computed():
    # One cell. Token 0 is written with certainty, token 1 neither overwrites nor corefers, token 2 corefers with
    # probability 0.5 and overwrites with 0.2. The product includes t2: 1 * (1 - 0) * (1 - 0.2) * 0.5 = 0.4.
    overwrite = torch.tensor([[[1.0], [0.0], [0.2]]])
    coref = torch.tensor([[[0.0], [0.0], [0.5]]])
    link = LinkLogProbability(overwrite, coref)
    value = link(torch.tensor([[[0, 2]]])).exp().item()
    assert value == pytest.approx(0.4, abs=1e-6)


def test_link_probability_matches_slow_reference_for_all_pairs():
    overwrite, coref = random_memory_log(length=8, cells=3)
    pairs = torch.tensor([[t1, t2] for t1 in range(8) for t2 in range(t1 + 1, 8)])
    link = LinkLogProbability(overwrite.unsqueeze(0), coref.unsqueeze(0))
    fast = link(pairs.unsqueeze(0)).exp().squeeze(0)
    slow = torch.tensor([reference_link_probability(overwrite, coref, int(a), int(b)) for a, b in pairs])
    torch.testing.assert_close(fast, slow.to(fast.dtype), atol=1e-6, rtol=1e-4)


def test_link_probability_of_distant_pairs_in_long_documents_stays_accurate():
    overwrite, coref = random_memory_log(length=3000, cells=2, seed=3)
    overwrite = overwrite * 0.01  # rare overwrites so that distant links keep a measurable probability
    link = LinkLogProbability(overwrite.unsqueeze(0), coref.unsqueeze(0))
    fast = link(torch.tensor([[[10, 2900]]])).item()
    slow = math.log(reference_link_probability(overwrite.double(), coref.double(), 10, 2900))
    assert fast == pytest.approx(slow, abs=1e-3)


def test_candidate_scores_are_the_max_over_token_pairs_in_either_order():
    model = PetraForCoreference(tiny_petra_config()).eval()
    input_ids = torch.randint(1000, 2000, (1, 12))
    pronoun = torch.tensor([[5, 6]])
    candidates = torch.tensor([[[1, 3], [8, 11]]])  # one name before the pronoun, one after it
    with torch.no_grad():
        output = model(input_ids=input_ids, pronoun_spans=pronoun, candidate_spans=candidates)
    o, c = output.overwrite_probs[0], output.coref_probs[0]
    expected_before = max(reference_link_probability(o, c, a, 5) for a in (1, 2))
    expected_after = max(reference_link_probability(o, c, 5, b) for b in (8, 9, 10))
    torch.testing.assert_close(
        output.candidate_scores[0], torch.tensor([expected_before, expected_after]), atol=1e-6, rtol=1e-4
    )


def test_coref_loss_is_weighted_cross_entropy_normalised_by_total_weight():
    model = PetraForCoreference(tiny_petra_config(entity_loss_weight=0.0)).eval()
    input_ids = torch.randint(1000, 2000, (1, 10))
    pairs = torch.tensor([[[1, 2], [2, 6], [1, 6], [4, 6], [-1, -1]]])
    labels = torch.tensor([[LINK_SELF, LINK_POSITIVE, LINK_POSITIVE, LINK_NEGATIVE, IGNORE_INDEX]])
    with torch.no_grad():
        output = model(input_ids=input_ids, link_pairs=pairs, link_labels=labels)
    o, c = output.overwrite_probs[0], output.coref_probs[0]
    p = {pair: reference_link_probability(o, c, *pair) for pair in [(1, 2), (2, 6), (1, 6), (4, 6)]}
    expected = (
        1 * -math.log(p[(1, 2)]) + 5 * -math.log(p[(2, 6)]) + 5 * -math.log(p[(1, 6)]) + 50 * -math.log(1 - p[(4, 6)])
    ) / (1 + 5 + 5 + 50)
    assert output.loss.item() == pytest.approx(expected, rel=1e-4)
    assert output.coref_loss.item() == pytest.approx(expected, rel=1e-4)


def test_entity_loss_averages_unlabelled_non_special_tokens():
    model = PetraForCoreference(tiny_petra_config()).eval()
    input_ids = torch.randint(1000, 2000, (2, 8))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    special = torch.zeros_like(input_ids)
    special[:, 0] = 1
    special[0, 7] = 1
    special[1, 5] = 1
    pairs = torch.tensor([[[2, 4]], [[1, 3]]])
    labels = torch.tensor([[LINK_NEGATIVE], [LINK_POSITIVE]])
    with torch.no_grad():
        output = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            special_tokens_mask=special,
            link_pairs=pairs,
            link_labels=labels,
        )
    e = output.entity_probs
    # Document 0 keeps tokens 1, 3, 5, 6; document 1 keeps tokens 2 and 4.
    expected = (e[0, [1, 3, 5, 6]].mean() + e[1, [2, 4]].mean()) / 2
    assert output.entity_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    # Special tokens and padding can never be entity mentions.
    assert e[0, 0] == 0 and e[0, 7] == 0 and e[1, 5] == 0 and (e[1, 6:] == 0).all()


def test_batched_documents_match_documents_read_alone():
    model = PetraForCoreference(tiny_petra_config()).eval()
    long_doc = torch.randint(1000, 2000, (1, 11))
    short_doc = torch.randint(1000, 2000, (1, 6))
    batch = torch.zeros(2, 11, dtype=torch.long)
    batch[0] = long_doc[0]
    batch[1, :6] = short_doc[0]
    mask = (torch.arange(11) < torch.tensor([[11], [6]])).long()
    with torch.no_grad():
        together = model(input_ids=batch, attention_mask=mask)
        alone = model(input_ids=short_doc)
    torch.testing.assert_close(together.overwrite_probs[1, :6], alone.overwrite_probs[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(together.coref_probs[1, :6], alone.coref_probs[0], atol=1e-5, rtol=1e-4)


def test_long_documents_are_encoded_in_overlapping_windows_without_truncation():
    config = tiny_petra_config(encoder_window_size=16, encoder_window_overlap=4)
    model = PetraForCoreference(config).eval()
    input_ids = torch.randint(1000, 2000, (1, 40))
    with torch.no_grad():
        features = model.get_encoder_features(input_ids)
        # Windows start at 0, 12, 24 (stride 12). Token 14 has 1 token of right context in the window at 0 but
        # 2 on its left in the window at 12, so it takes the window at 12; token 13 keeps the window at 0.
        window_at_12 = model.petra._encode_window(input_ids[:, 12:28], torch.ones(1, 16, dtype=torch.long))
        window_at_0 = model.petra._encode_window(input_ids[:, 0:16], torch.ones(1, 16, dtype=torch.long))
        output = model(input_ids=input_ids)
    assert features.shape == (1, 40, config.encoder_feature_size)
    torch.testing.assert_close(features[0, 14], window_at_12[0, 2])
    torch.testing.assert_close(features[0, 13], window_at_0[0, 13])
    torch.testing.assert_close(features[0, 3], window_at_0[0, 3])
    assert output.overwrite_probs.shape[1] == 40  # the memory reads every token


def test_frozen_encoder_gets_no_gradient_and_the_head_does():
    model = PetraForCoreference(tiny_petra_config()).train()
    pairs = torch.tensor([[[1, 3], [2, 3]]])
    labels = torch.tensor([[LINK_POSITIVE, LINK_NEGATIVE]])
    model(input_ids=torch.randint(1000, 2000, (1, 6)), link_pairs=pairs, link_labels=labels).loss.backward()
    assert all(p.grad is None for p in model.petra.encoder.parameters())
    assert all(not p.requires_grad for p in model.petra.encoder.parameters())
    for name in ["gru.weight_ih_l0", "similarity_mlp.input_layer.weight", "coref_update_mlp.output_layer.weight"]:
        grad = model.petra.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert not model.petra.encoder.training  # a frozen encoder runs without dropout


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(), "exactly one of"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), encoder_features=torch.zeros(1, 3, 64)), "exactly one of"),
        (dict(input_ids=torch.tensor([[1, 2, 40000]])), "vocabulary"),
        (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), r"shape \(1, 0\) .*at least one document of at least one"),
        (dict(input_ids=torch.zeros(0, 5, dtype=torch.long)), r"shape \(0, 5\) .*at least one document of at least one"),
        (dict(encoder_features=torch.zeros(1, 3, 7)), "encoder_features must have shape"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), attention_mask=torch.tensor([[0, 1, 1]])), "pad on the right"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), attention_mask=torch.tensor([[1, 1]])), "shape"),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), pronoun_spans=torch.tensor([[1, 2]]),
                 candidate_spans=torch.tensor([[[2, 5]]])),
            "0 <= start < end <= 3",
        ),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), pronoun_spans=torch.tensor([[1, 2]])),
            "together",
        ),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), link_pairs=torch.tensor([[[1, 1]]]),
                 link_labels=torch.tensor([[LINK_POSITIVE]])),
            "two different token positions",
        ),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), link_pairs=torch.tensor([[[0, 1]]]),
                 link_labels=torch.tensor([[7]])),
            "LINK_NEGATIVE",
        ),
    ],
)
def test_bad_input_raises_a_clear_error(kwargs, message):
    model = PetraForCoreference(tiny_petra_config()).eval()
    with pytest.raises(ValueError, match=message):
        model(**kwargs)


def test_unknown_forward_argument_is_refused():
    model = PetraForCoreference(tiny_petra_config())
    with pytest.raises(TypeError, match="labels"):
        model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([1]))


def test_long_document_features_do_not_depend_on_the_rest_of_the_batch():
    model = PetraForCoreference(tiny_petra_config(encoder_window_size=16, encoder_window_overlap=4)).eval()
    long_doc = torch.randint(1000, 2000, (1, 30))
    batch = torch.zeros(3, 45, dtype=torch.long)
    batch[0, :30] = long_doc[0]
    batch[1, :45] = torch.randint(1000, 2000, (45,))
    batch[2, :10] = torch.randint(1000, 2000, (10,))
    mask = (torch.arange(45) < torch.tensor([[30], [45], [10]])).long()
    with torch.no_grad():
        together = model.get_encoder_features(batch, mask)
        alone = model.get_encoder_features(long_doc)
        short_alone = model.get_encoder_features(batch[2:, :10])
    torch.testing.assert_close(together[0, :30], alone[0])
    torch.testing.assert_close(together[2, :10], short_alone[0])
    assert (together[0, 30:] == 0).all() and (together[2, 10:] == 0).all()


def test_entity_loss_keeps_a_labelled_token_at_position_zero_despite_padding_pairs():
    model = PetraForCoreference(tiny_petra_config()).eval()
    input_ids = torch.randint(1000, 2000, (1, 4))
    pairs = torch.tensor([[[0, 1], [-1, -1], [-1, -1]]])
    labels = torch.tensor([[LINK_SELF, IGNORE_INDEX, IGNORE_INDEX]])
    with torch.no_grad():
        output = model(input_ids=input_ids, link_pairs=pairs, link_labels=labels)
    # Tokens 0 and 1 are labelled; the loss averages tokens 2 and 3 only.
    assert output.entity_loss.item() == pytest.approx(output.entity_probs[0, 2:].mean().item(), rel=1e-6)


def test_padding_positions_are_skipped_and_hold_zeros_in_training_too():
    model = PetraForCoreference(tiny_petra_config(dropout=0.0)).train()
    input_ids = torch.randint(1000, 2000, (3, 8))
    mask = (torch.arange(8) < torch.tensor([[5], [8], [3]])).long()
    pairs = torch.tensor([[[1, 3]], [[2, 6]], [[0, 2]]])
    labels = torch.tensor([[LINK_POSITIVE], [LINK_NEGATIVE], [LINK_POSITIVE]])
    output = model(input_ids=input_ids, attention_mask=mask, link_pairs=pairs, link_labels=labels)
    output.loss.backward()
    padding = mask == 0
    for log in (output.overwrite_probs, output.coref_probs, output.usage):
        assert (log[padding] == 0).all()
    # Real tokens all write somewhere (nothing can corefer at the first token, when every cell is unused).
    assert (output.overwrite_probs[~padding].sum(-1) > 0).all()
    assert (output.coref_probs[:, 1:][~padding[:, 1:]].sum(-1) > 0).all()
    assert model.petra.similarity_mlp.input_layer.weight.grad.abs().sum() > 0
