"""PeTra against an independent reference written from the paper's equations (Toshniwal et al., 2020, Eqs. 1-9).

The reference is plain float64 torch with its own small functions: it reads the model's weight matrices but none of
its modules or code paths, and follows the paper where the paper speaks:

* Eq. 3 masks never-used cells with a true -inf;
* Eq. 5 (evaluation) takes the least used cell; among unused cells (u = 0) the one with the highest similarity
  (section 2.3, "Memory Variants"); remaining exact ties go to the lowest index (`overwrite_tie_breaking="first"`);
* Eq. 6 (training) is a Gumbel-softmax over the overwrite preference. The paper writes GS(1 - u) and states in
  section 2.3 that unused cells are preferred and ranked by similarity without giving the formula; the reference
  uses the authors' form of that preference, (1 - u) + B [u = 0] softmax(sim) with B = 1e5, which the model card
  documents as the package's choice;
* Eq. 9 is a plain product over j = t1+1 .. t2 and a sum over cells.

The GRU outputs h_t are taken from the model (the paper's encoder is a stock GRU); everything after them is
recomputed. The PeTra weights are redrawn with std 0.5 so that the gates move far from their initial values.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_petra_config

from hf_entity_models import PetraForCoreference

# The authors' overwrite bonus for unused cells, only in the training-mode reference (see the module docstring).
AUTHORS_UNUSED_BONUS = 1e5


# ------------------------------------------------------------------------------------------- the reference
def weights_of(model, prefix):
    """(weight, bias) pairs of the linear layers under `prefix`, in order, as float64."""
    names = [n for n, _ in model.named_parameters() if n.startswith(prefix) and n.endswith(".weight")]
    order = {"input_layer": 0, "hidden_layer": 1, "output_layer": 2}
    names.sort(key=lambda n: order[n.split(".")[-2]])
    return [
        (model.get_parameter(n).detach().double(), model.get_parameter(n[: -len("weight")] + "bias").detach().double())
        for n in names
    ]


def relu_mlp(layers, x):
    """Two ReLU hidden layers, linear output (the paper's MLP1-2, section 3.2)."""
    for index, (weight, bias) in enumerate(layers):
        x = x @ weight.T + bias
        if index < len(layers) - 1:
            x = torch.clamp(x, min=0.0)
    return x


def update_candidate(layers, kind, x):
    """MLP3 of Eq. 7: the ReLU MLP, or tanh(linear) as in the authors' code."""
    if kind == "tanh_linear":
        (weight, bias), = layers
        return torch.tanh(x @ weight.T + bias)
    return relu_mlp(layers, x)


def reference_document(model, h, token_mask, training=False, noise=None):
    """Eqs. 1-8 for one document, cell by cell. Returns e, o, c, u (per token) and the final memory."""
    config = model.config
    N, H = config.num_memory_cells, config.hidden_size
    key = config.key_size if config.memory_variant == "fixed_key" else 0
    gamma = config.usage_decay
    tau = model.petra.gumbel_temperature
    entity = weights_of(model, "petra.entity_mlp.")
    similarity = weights_of(model, "petra.similarity_mlp.")
    update = weights_of(model, "petra.coref_update_mlp.")

    if config.memory_variant == "learned_init":
        memory = [model.petra.memory_init[i].detach().double().clone() for i in range(N)]
    elif config.memory_variant == "fixed_key":
        memory = [torch.cat([model.petra.memory_key[i].detach().double(), torch.zeros(H - key, dtype=torch.float64)])
                  for i in range(N)]
    else:
        memory = [torch.zeros(H, dtype=torch.float64) for _ in range(N)]
    usage = [0.0] * N

    e_log, o_log, c_log, u_log = [], [], [], []
    for t in range(h.shape[0]):
        h_t = h[t]
        # Eq. 1, zero on special tokens.
        e = float(torch.sigmoid(relu_mlp(entity, h_t))[0]) if token_mask[t] else 0.0
        # Eq. 2.
        sim = [
            float(relu_mlp(similarity, torch.cat([h_t, memory[i], h_t * memory[i], torch.tensor([usage[i]], dtype=torch.float64)]))[0])
            for i in range(N)
        ]
        # Eq. 3-4.
        scores = [-math.inf if usage[i] == 0 else sim[i] for i in range(N)] + [0.0]
        top = max(scores)
        exps = [math.exp(s - top) for s in scores]
        total = sum(exps)
        coref = [e * x / total for x in exps[:N]]
        new = e * exps[N] / total
        if training:  # Eq. 6
            sim_top = max(sim)
            sim_soft = [math.exp(s - sim_top) for s in sim]
            sim_soft = [x / sum(sim_soft) for x in sim_soft]
            preference = [(1 - usage[i]) + AUTHORS_UNUSED_BONUS * (usage[i] == 0) * sim_soft[i] for i in range(N)]
            if not any(p > 0 for p in preference):  # every cell at usage 1: all cells equally preferred
                preference = [1.0] * N
            logits = [(math.log(p) if p > 0 else -math.inf) + float(noise[t][i]) for i, p in enumerate(preference)]
            top = max(logits)
            weights = [math.exp((x - top) / tau) for x in logits]
            choice = [w / sum(weights) for w in weights]
        else:  # Eq. 5
            least = min(usage)
            candidates = [i for i in range(N) if usage[i] == least]
            if least == 0:
                best_sim = max(sim[i] for i in candidates)
                candidates = [i for i in candidates if sim[i] == best_sim]
            choice = [1.0 if i == candidates[0] else 0.0 for i in range(N)]
        overwrite = [new * choice[i] for i in range(N)]
        # Eq. 7 (the fixed key part of a cell is never written) and Eq. 8.
        new_memory = []
        for i in range(N):
            candidate = update_candidate(update, config.coref_update_mlp, torch.cat([h_t, memory[i]]))
            value = memory[i][key:]
            value = (1 - overwrite[i] - coref[i]) * value + overwrite[i] * h_t[key:] + coref[i] * candidate
            new_memory.append(torch.cat([memory[i][:key], value]))
        memory = new_memory
        usage = [min(1.0, overwrite[i] + coref[i] + gamma * usage[i]) for i in range(N)]
        e_log.append(e)
        o_log.append(overwrite)
        c_log.append(coref)
        u_log.append(list(usage))
    as_tensor = lambda values: torch.tensor(values, dtype=torch.float64)  # noqa: E731
    return as_tensor(e_log), as_tensor(o_log), as_tensor(c_log), as_tensor(u_log), torch.stack(memory)


def link_probability(o, c, t1, t2):
    """Eq. 9: sum_i (o + c)_{t1,i} * prod_{j=t1+1..t2} (1 - o_{j,i}) * c_{t2,i}, for t1 < t2."""
    total = 0.0
    for i in range(o.shape[1]):
        keep = 1.0
        for j in range(t1 + 1, t2 + 1):
            keep *= 1 - float(o[j, i])
        total += (float(o[t1, i]) + float(c[t1, i])) * keep * float(c[t2, i])
    return total


def span_probability(o, c, span_a, span_b):
    """Section 3.5: the max of Eq. 9 over the token pairs of two spans [start, end)."""
    return max(
        link_probability(o, c, min(a, b), max(a, b))
        for a in range(*span_a)
        for b in range(*span_b)
        if a != b
    )


# ------------------------------------------------------------------------------------------------- set-up
def scaled_model(seed=0, **overrides):
    torch.manual_seed(seed)
    overrides.setdefault("overwrite_tie_breaking", "first")  # the reference breaks exact ties by lowest index
    config = tiny_petra_config(key_size=4, num_memory_cells=3, **overrides)
    model = PetraForCoreference(config).double()
    with torch.no_grad():
        for name, parameter in model.petra.named_parameters():
            if not name.startswith("encoder."):
                parameter.normal_(0.0, 0.5)
        for parameter in (model.petra.memory_init, model.petra.memory_key):
            if parameter is not None:
                parameter.normal_(0.0, 1.0)
    return model


LENGTHS = (12, 8)
PRONOUNS = torch.tensor([[6, 7], [5, 6]])
CANDIDATES = torch.tensor([[[1, 3], [9, 11]], [[1, 2], [3, 5]]])


def inputs(model, seed=1):
    generator = torch.Generator().manual_seed(seed)
    batch, length = len(LENGTHS), max(LENGTHS)
    features = torch.randn(batch, length, model.config.encoder_feature_size, generator=generator, dtype=torch.float64)
    attention = (torch.arange(length) < torch.tensor(LENGTHS).unsqueeze(1)).long()
    special = torch.zeros_like(attention)
    special[:, 0] = 1
    for doc, n in enumerate(LENGTHS):
        special[doc, n - 1] = 1
    return dict(encoder_features=features * attention.unsqueeze(-1), attention_mask=attention, special_tokens_mask=special)


def run_with_hidden_states(model, batch):
    """Forward pass that also keeps h_t, the GRU output after dropout that the memory reads."""
    kept = []
    hook = model.petra.dropout.register_forward_hook(lambda module, args, result: kept.append(result.detach()))
    try:
        with torch.no_grad():
            output = model(**batch, **spans())
    finally:
        hook.remove()
    (hidden,) = kept
    return output, hidden


def compare(model, output, hidden, batch, noise_per_doc=None):
    for doc, n in enumerate(LENGTHS):
        token_mask = (batch["special_tokens_mask"][doc, :n] == 0).tolist()
        e, o, c, u, memory = reference_document(
            model,
            hidden[doc, :n],
            token_mask,
            training=model.training,
            noise=None if noise_per_doc is None else noise_per_doc[doc],
        )
        torch.testing.assert_close(output.entity_probs[doc, :n], e, atol=1e-9, rtol=1e-7)
        torch.testing.assert_close(output.coref_probs[doc, :n], c, atol=1e-9, rtol=1e-7)
        torch.testing.assert_close(output.overwrite_probs[doc, :n], o, atol=1e-9, rtol=1e-7)
        torch.testing.assert_close(output.usage[doc, :n], u, atol=1e-9, rtol=1e-7)
        torch.testing.assert_close(output.memory[doc], memory, atol=1e-8, rtol=1e-7)
        expected = torch.tensor(
            [span_probability(o, c, PRONOUNS[doc].tolist(), span.tolist()) for span in CANDIDATES[doc]],
            dtype=torch.float64,
        )
        # The model clamps probabilities at 1e-7 before taking logs (Eq. 9 in log space).
        torch.testing.assert_close(output.candidate_scores[doc], expected, atol=1e-6, rtol=1e-5)
        # The scaled weights make the gates move: real coreference mass and partly used cells.
        yield o, c, u


def spans():
    return dict(pronoun_spans=PRONOUNS, candidate_spans=CANDIDATES)


VARIANTS = [
    dict(memory_variant="vanilla"),
    dict(memory_variant="learned_init"),
    dict(memory_variant="fixed_key"),
    dict(memory_variant="vanilla", coref_update_mlp="tanh_linear"),
    dict(memory_variant="fixed_key", coref_update_mlp="tanh_linear"),
]


# ---------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: "-".join(o.values()))
def test_model_matches_the_paper_equations_at_evaluation(overrides):
    model = scaled_model(**overrides).eval()
    batch = inputs(model)
    output, hidden = run_with_hidden_states(model, batch)
    logs = list(compare(model, output, hidden, batch))
    coref_mass = max(float(c.max()) for _, c, _ in logs)
    assert coref_mass > 0.05, coref_mass
    # Hard overwrites at evaluation: one cell at most per token, and more than one cell gets used.
    for o, _, u in logs:
        assert ((o > 0).sum(-1) <= 1).all()
    assert any(int((u[-1] > 0).sum()) > 1 for _, _, u in logs)


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: "-".join(o.values()))
def test_model_matches_the_paper_equations_in_training_with_the_same_gumbel_noise(overrides, monkeypatch):
    model = scaled_model(**overrides).train()
    model.petra.set_gumbel_temperature(0.5)
    batch = inputs(model)
    generator = torch.Generator().manual_seed(7)
    drawn = []

    def gumbel_softmax_with_recorded_noise(logits, tau=1.0, hard=False, dim=-1):
        assert not hard and dim == -1
        noise = -torch.log(torch.empty_like(logits).exponential_(generator=generator))
        drawn.append(noise.detach().clone())
        return torch.softmax((logits + noise) / tau, dim=-1)

    monkeypatch.setattr(F, "gumbel_softmax", gumbel_softmax_with_recorded_noise)
    output, hidden = run_with_hidden_states(model, batch)
    # The model reads the documents longest first and drops each after its last token: row r of step t.
    order = sorted(range(len(LENGTHS)), key=lambda d: -LENGTHS[d])
    noise_per_doc = [[drawn[t][order.index(doc)] for t in range(LENGTHS[doc])] for doc in range(len(LENGTHS))]
    logs = list(compare(model, output, hidden, batch, noise_per_doc))
    # Soft overwrites in training: several cells share the new entity.
    assert any(((o > 1e-4).sum(-1) > 1).any() for o, _, _ in logs)


def test_reference_follows_the_paper_where_it_differs_from_a_naive_argmin():
    # Hand check of the reference's Eq. 5 rule: with unused cells left, the unused cell with the higher similarity
    # wins even though another unused cell comes first.
    model = scaled_model(seed=1, memory_variant="learned_init").eval()
    output, hidden = run_with_hidden_states(model, inputs(model))
    h = hidden[0, :3]
    _, o, _, _, _ = reference_document(model, h, [False, True, True])
    first_write = int(o[1].argmax())
    similarity = weights_of(model, "petra.similarity_mlp.")
    sims = [
        float(relu_mlp(similarity, torch.cat([h[1], m, h[1] * m, torch.zeros(1, dtype=torch.float64)]))[0])
        for m in model.petra.memory_init.detach().double()
    ]
    assert first_write == max(range(len(sims)), key=sims.__getitem__) != 0
    assert int(output.overwrite_probs[0, 1].argmax()) == first_write
