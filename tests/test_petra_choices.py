"""PeTra's configurable departures between the paper, the authors' code and this package (issue 13).

Every default is today's behaviour; each alternative is checked by hand here.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import tiny_petra_config
from torch import nn

from hf_entity_models import PetraConfig, PetraForCoreference
from hf_entity_models.models.petra import LINK_NEGATIVE, LINK_POSITIVE, LINK_SELF, pair_coref_loss
from hf_entity_models.tasks.coreference import GapGold, score_gap_probabilities, sweep_threshold
from hf_entity_models.tasks.coreference.metrics import (
    read_people_counts,
    select_counting_threshold,
    threshold_grid,
)
from hf_entity_models.tasks.coreference.training import GapMetrics, build_gap_trainer, gap_training_arguments
from hf_entity_models.training import GumbelTemperatureCallback


# ---------------------------------------------------------------------------------------------- the config
def test_defaults_are_the_ablation_outcomes():
    config = PetraConfig()
    assert config.coref_loss == "cross_entropy"
    assert config.coref_update_mlp == "mlp"
    assert config.overwrite_tie_breaking == "random"
    assert config.overwrite_tie_seed == 0
    assert config.entity_loss_reduction == "per_document"
    assert config.linear_init == "normal"


@pytest.mark.parametrize(
    "field", ["coref_loss", "coref_update_mlp", "overwrite_tie_breaking", "entity_loss_reduction", "linear_init"]
)
def test_unknown_choices_are_refused(field):
    with pytest.raises(ValueError, match=field):
        tiny_petra_config(**{field: "something_else"})


def test_choices_survive_save_and_load(tmp_path):
    choices = dict(
        coref_loss="bce_with_logits_of_log_p",
        coref_update_mlp="tanh_linear",
        overwrite_tie_breaking="random",
        overwrite_tie_seed=3,
        entity_loss_reduction="per_token",
        linear_init="pytorch_default",
    )
    model = PetraForCoreference(tiny_petra_config(**choices))
    model.save_pretrained(tmp_path)
    loaded = PetraForCoreference.from_pretrained(tmp_path)
    for name, value in choices.items():
        assert getattr(loaded.config, name) == value
    for (name, expected), (_, actual) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(expected, actual), name


# -------------------------------------------------------------------------------------------- 1. coref loss
# (P, positive?) -> hand-computed losses: cross-entropy on P, and BCE-with-logits of log P = cross-entropy on P/(1+P).
HAND_LOSSES = [
    (0.5, True, -math.log(0.5), math.log(3.0)),  # -log(0.5 / 1.5)
    (0.5, False, -math.log(0.5), math.log(1.5)),
    (0.9, True, -math.log(0.9), math.log(1.9 / 0.9)),
    (0.9, False, -math.log(0.1), math.log(1.9)),
    (0.1, True, -math.log(0.1), math.log(11.0)),  # -log(0.1 / 1.1)
    (0.1, False, -math.log(0.9), math.log(1.1)),
]


@pytest.mark.parametrize("p, positive, cross_entropy, bce_of_log_p", HAND_LOSSES)
def test_pair_losses_by_hand(p, positive, cross_entropy, bce_of_log_p):
    log_p = torch.tensor([math.log(p)], dtype=torch.float64)
    target = torch.tensor([positive])
    assert pair_coref_loss(log_p, target, "cross_entropy").item() == pytest.approx(cross_entropy, rel=1e-12)
    assert pair_coref_loss(log_p, target, "bce_with_logits_of_log_p").item() == pytest.approx(bce_of_log_p, rel=1e-12)


@pytest.mark.parametrize("kind, column", [("cross_entropy", 2), ("bce_with_logits_of_log_p", 3)])
def test_model_coref_loss_uses_the_configured_pair_loss_with_the_link_weights(kind, column):
    model = PetraForCoreference(tiny_petra_config(coref_loss=kind))
    probabilities = torch.tensor([[0.5, 0.9, 0.1]], dtype=torch.float64)
    labels = torch.tensor([[LINK_SELF, LINK_POSITIVE, LINK_NEGATIVE]])
    pairs = torch.tensor([[[0, 1], [1, 2], [2, 3]]])
    loss = model._coref_loss(lambda _: probabilities.log(), pairs, labels)
    table = {(p, positive): row for p, positive, *row in HAND_LOSSES}
    per_pair = [table[(0.5, True)][column - 2], table[(0.9, True)][column - 2], table[(0.1, False)][column - 2]]
    expected = (1 * per_pair[0] + 5 * per_pair[1] + 50 * per_pair[2]) / (1 + 5 + 50)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


# --------------------------------------------------------------------------------------- 2. coref update MLP
def test_tanh_linear_update_is_tanh_of_one_linear_layer_by_hand():
    model = PetraForCoreference(tiny_petra_config(coref_update_mlp="tanh_linear", hidden_size=2, mlp_hidden_size=4))
    update = model.petra.coref_update_mlp
    assert [name for name, _ in update.named_parameters()] == ["input_layer.weight", "input_layer.bias"]
    assert update.input_layer.weight.shape == (2, 4)  # [h; m] -> cell
    with torch.no_grad():
        update.input_layer.weight.copy_(torch.tensor([[1.0, -2.0, 0.5, 0.0], [0.0, 3.0, -1.0, 2.0]]))
        update.input_layer.bias.copy_(torch.tensor([0.1, -0.2]))
    h, m = [0.3, -0.4], [1.0, 0.5]
    expected = [
        math.tanh(1.0 * 0.3 - 2.0 * -0.4 + 0.5 * 1.0 + 0.0 * 0.5 + 0.1),
        math.tanh(0.0 * 0.3 + 3.0 * -0.4 - 1.0 * 1.0 + 2.0 * 0.5 - 0.2),
    ]
    with torch.no_grad():
        value = update(torch.tensor(h + m))
    assert value.tolist() == pytest.approx(expected, rel=1e-6)
    with torch.no_grad():
        large = update(100 * torch.randn(50, 4))
    assert large.abs().max() <= 1.0


def test_tanh_linear_update_bounds_the_memory_and_the_relu_mlp_does_not():
    features = 30 * torch.randn(1, 12, tiny_petra_config().encoder_feature_size)
    memories = {}
    for kind in ("mlp", "tanh_linear"):
        torch.manual_seed(0)
        model = PetraForCoreference(tiny_petra_config(coref_update_mlp=kind)).eval()
        with torch.no_grad():
            for name, parameter in model.petra.named_parameters():
                if not name.startswith("encoder."):
                    parameter.normal_(0.0, 1.0)
            memories[kind] = model.petra(encoder_features=features).memory
    # h_t is a GRU output in [-1, 1] and every write is a convex mix of the old cell, h_t and the update.
    assert memories["tanh_linear"].abs().max() <= 1.0
    assert memories["mlp"].abs().max() > 1.0


# ------------------------------------------------------------------------------------ 3. overwrite tie-break
def overwrite_choices(model, usage, similarity, noise):
    unused = usage == 0
    return model.petra._overwrite_choice(similarity, usage, unused, noise).argmax(-1)


def test_random_tie_breaking_picks_only_among_the_tied_least_used_cells():
    model = PetraForCoreference(tiny_petra_config(num_memory_cells=5, overwrite_tie_breaking="random")).eval()
    draws = 400
    usage = torch.tensor([[0.3, 0.1, 0.1, 0.5, 0.1]]).expand(draws, -1)
    similarity = torch.randn(draws, 5)
    noise = torch.rand(draws, 5, generator=torch.Generator().manual_seed(0))
    chosen = overwrite_choices(model, usage, similarity, noise)
    assert set(chosen.tolist()) == {1, 2, 4}
    # Without a tie the least used cell wins, whatever the noise.
    usage = torch.tensor([[0.3, 0.1, 0.2, 0.5, 0.15]]).expand(draws, -1)
    assert set(overwrite_choices(model, usage, similarity, noise).tolist()) == {1}
    # "first" (no noise) takes the lowest index among the tied cells.
    usage = torch.tensor([[0.3, 0.1, 0.1, 0.5, 0.1]]).expand(draws, -1)
    assert set(overwrite_choices(model, usage, similarity, None).tolist()) == {1}


def test_random_tie_breaking_prefers_unused_cells_and_breaks_exact_similarity_ties_only():
    model = PetraForCoreference(tiny_petra_config(num_memory_cells=4, overwrite_tie_breaking="random")).eval()
    draws = 200
    usage = torch.tensor([[0.5, 0.0, 0.0, 0.0]]).expand(draws, -1)
    noise = torch.rand(draws, 4, generator=torch.Generator().manual_seed(1))
    tied = torch.tensor([[3.0, 0.2, 0.2, -1.0]]).expand(draws, -1)  # cells 1 and 2 tie on similarity
    assert set(overwrite_choices(model, usage, tied, noise).tolist()) == {1, 2}
    distinct = torch.tensor([[3.0, 0.2, 0.3, -1.0]]).expand(draws, -1)
    assert set(overwrite_choices(model, usage, distinct, noise).tolist()) == {2}


def first_written_cells(model, features):
    with torch.no_grad():
        overwrite = model.petra(encoder_features=features).overwrite_probs
    return overwrite[:, 0].argmax(-1)  # token 0: every cell is unused and identical, an exact tie


def test_random_tie_breaking_is_deterministic_per_call_and_depends_on_the_seed():
    features = torch.randn(64, 5, tiny_petra_config().encoder_feature_size)
    torch.manual_seed(0)
    first = PetraForCoreference(tiny_petra_config(overwrite_tie_breaking="first")).eval()
    assert set(first_written_cells(first, features).tolist()) == {0}

    torch.manual_seed(0)
    model = PetraForCoreference(tiny_petra_config()).eval()  # "random" is the default
    rng_state = torch.get_rng_state()
    once, twice = first_written_cells(model, features), first_written_cells(model, features)
    assert torch.equal(rng_state, torch.get_rng_state())  # the global random state is left alone
    assert torch.equal(once, twice)
    chosen_per_seed = set()
    for seed in range(12):
        model.config.overwrite_tie_seed = seed
        chosen_per_seed.update(first_written_cells(model, features).tolist())
    assert len(chosen_per_seed) > 1  # ties go to different cells, not always to cell 0
    # Training is unaffected: soft Gumbel-softmax overwrites over all cells.
    model.train()
    with torch.no_grad():
        overwrite = model.petra(encoder_features=features).overwrite_probs
    assert ((overwrite[:, 0] > 1e-4).sum(-1) > 1).any()


def test_random_tie_breaking_gives_a_document_the_same_choices_alone_and_in_a_longer_batch():
    torch.manual_seed(0)
    model = PetraForCoreference(tiny_petra_config(num_memory_cells=6)).eval()
    size = model.config.encoder_feature_size
    short, long = torch.randn(1, 7, size), torch.randn(1, 300, size)  # longer than one block of tie priorities
    batch = torch.cat([torch.cat([short, torch.zeros(1, 293, size)], dim=1), long])
    mask = torch.ones(2, 300, dtype=torch.long)
    mask[0, 7:] = 0
    with torch.no_grad():
        alone_short = model.petra(encoder_features=short).overwrite_probs[0]
        alone_long = model.petra(encoder_features=long).overwrite_probs[0]
        together = model.petra(encoder_features=batch, attention_mask=mask).overwrite_probs
    torch.testing.assert_close(together[0, :7], alone_short)
    torch.testing.assert_close(together[1], alone_long)


# -------------------------------------------------------------------------------- 4. entity loss reduction
@pytest.mark.parametrize("reduction", ["per_document", "per_token"])
def test_entity_loss_reduction_by_hand_on_two_documents_of_different_lengths(reduction):
    model = PetraForCoreference(tiny_petra_config(entity_loss_reduction=reduction))
    entity = torch.tensor([[0.0, 0.2, 0.9, 0.4, 0.6, 0.8, 0.0], [0.0, 0.1, 0.7, 0.3, 0.0, 0.0, 0.0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
    special = torch.tensor([[1, 0, 0, 0, 0, 0, 1], [1, 0, 0, 0, 1, 0, 0]])
    pairs = torch.tensor([[[2, 3], [-1, -1]], [[1, 2], [-1, -1]]])  # labelled: tokens 2, 3 and tokens 1, 2
    loss = model._entity_loss(entity, attention, special, pairs)
    # Document 0 keeps tokens 1, 4, 5 (0.2, 0.6, 0.8); document 1 keeps token 3 (0.3).
    per_document = ((0.2 + 0.6 + 0.8) / 3 + 0.3) / 2
    per_token = (0.2 + 0.6 + 0.8 + 0.3) / 4
    expected = per_document if reduction == "per_document" else per_token
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert per_document != pytest.approx(per_token)


# ------------------------------------------------------------------------------------------ 5. linear init
def petra_linears(model):
    return [(name, module) for name, module in model.petra.named_modules()
            if isinstance(module, nn.Linear) and not name.startswith("encoder")]


def test_pytorch_default_init_matches_nn_linear_bounds():
    model = PetraForCoreference(tiny_petra_config(linear_init="pytorch_default", coref_update_mlp="tanh_linear"))
    linears = petra_linears(model)
    assert len(linears) == 7
    for name, module in linears:
        bound = 1.0 / math.sqrt(module.in_features)
        assert module.weight.abs().max() <= bound, name
        assert module.bias.abs().max() <= bound, name
        assert module.bias.abs().max() > 0, name
        if module.weight.numel() >= 200:  # uniform(-b, b): std b / sqrt(3), the range filled
            assert module.weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.15), name
            assert module.weight.abs().max() > 0.9 * bound, name
    reference = nn.Linear(16, 16)  # torch's own initialisation, for the same shape
    assert reference.weight.abs().max() <= 0.25 and model.petra.entity_mlp.hidden_layer.weight.abs().max() <= 0.25


def test_normal_init_is_unchanged_and_the_encoder_keeps_its_own_init():
    for linear_init in ("normal", "pytorch_default"):
        model = PetraForCoreference(tiny_petra_config(linear_init=linear_init))
        encoder_weight = model.petra.encoder.encoder.layer[0].intermediate.dense.weight
        assert encoder_weight.std().item() == pytest.approx(0.02, rel=0.2)
        if linear_init == "normal":
            for name, module in petra_linears(model):
                assert torch.count_nonzero(module.bias) == 0, name
            big = model.petra.similarity_mlp.input_layer.weight
            assert big.std().item() == pytest.approx(0.02, rel=0.15)


@pytest.mark.parametrize("saved, loaded", [("normal", "pytorch_default"), ("pytorch_default", "normal")])
def test_a_loaded_checkpoint_is_never_reinitialised(tmp_path, saved, loaded):
    model = PetraForCoreference(tiny_petra_config(linear_init=saved))
    model.save_pretrained(tmp_path)
    for restored in (
        PetraForCoreference.from_pretrained(tmp_path),
        PetraForCoreference.from_pretrained(tmp_path, linear_init=loaded),
    ):
        for (name, expected), (_, actual) in zip(
            model.state_dict().items(), restored.state_dict().items(), strict=True
        ):
            assert torch.equal(expected, actual), name


# ---------------------------------------------------------------------------------- 6. Gumbel temperature
def temperatures(callback, epochs):
    model = PetraForCoreference(tiny_petra_config(gumbel_temperature=1.0))
    seen = {}
    for epoch in epochs:
        callback.on_epoch_begin(None, SimpleNamespace(epoch=float(epoch)), None, model=model)
        seen[epoch] = model.petra.gumbel_temperature
    return seen


def test_gumbel_epoch_offset_one_halves_at_epoch_ten_counting_from_one():
    # 0-based epochs: the authors train epochs 1-9 (0-8) at tau = 1 and halve before epoch 10 (index 9).
    seen = temperatures(GumbelTemperatureCallback(epoch_offset=1), [0, 8, 9, 18, 19, 29])
    assert seen == {0: 1.0, 8: 1.0, 9: 0.5, 18: 0.5, 19: 0.25, 29: 0.125}
    default = temperatures(GumbelTemperatureCallback(), [8, 9, 10])
    assert default == {8: 1.0, 9: 1.0, 10: 0.5}
    with pytest.raises(ValueError, match="epoch_offset"):
        GumbelTemperatureCallback(epoch_offset=-1)


def test_build_gap_trainer_passes_the_gumbel_offset(tmp_path):
    model = PetraForCoreference(tiny_petra_config())
    gold = [GapGold("validation-1", "he", True, False)]
    args = gap_training_arguments(
        str(tmp_path), use_cpu=True, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
        lr_scheduler_type="constant",
    )
    trainer = build_gap_trainer(model, args, None, None, gold, gumbel_epoch_offset=1)
    (callback,) = [c for c in trainer.callback_handler.callbacks if isinstance(c, GumbelTemperatureCallback)]
    assert callback.epoch_offset == 1
    default = build_gap_trainer(model, args, None, None, gold)
    (callback,) = [c for c in default.callback_handler.callbacks if isinstance(c, GumbelTemperatureCallback)]
    assert callback.epoch_offset == 0


# -------------------------------------------------------------------------------------- 7. threshold grids
def test_named_threshold_grids():
    package, comparison = threshold_grid("package")
    assert comparison == ">=" and len(package) == 100 and package[0] == 0.0 and package[-1] == 0.99
    paper, comparison = threshold_grid("paper")
    assert comparison == ">" and len(paper) == 100 and paper[0] == 0.01 and paper[-1] == 1.0
    authors, comparison = threshold_grid("authors_code")
    assert comparison == ">" and authors[0] == 0.0 and authors[-1] == 0.99
    with pytest.raises(ValueError, match="threshold grid"):
        threshold_grid("other")


def test_strict_comparison_excludes_a_probability_equal_to_the_threshold():
    gold = [GapGold("t-1", "he", True, False), GapGold("t-2", "she", False, False)]
    # A positive at exactly 0.30, a negative at 0.20 and one at 0.30 + tiny.
    probabilities = {"t-1": (0.30, 0.20), "t-2": (0.2, 0.1)}
    at_least = sweep_threshold(gold, probabilities)
    assert at_least.best_threshold == 0.21 and at_least.best_f1 == 1.0 and at_least.comparison == ">="
    thresholds, comparison = threshold_grid("paper")
    strict = sweep_threshold(gold, probabilities, thresholds, comparison)
    # "> 0.20" already excludes the negatives at 0.20, so 0.20 is the smallest perfect threshold.
    assert strict.best_threshold == 0.2 and strict.best_f1 == 1.0 and strict.comparison == ">"
    # The >= equivalent reproduces the same decisions with the package's scorer and pipeline rule.
    assert 0.2 < strict.decision_threshold < 0.2000001
    assert score_gap_probabilities(gold, probabilities, strict.decision_threshold).f1 == 1.0
    assert score_gap_probabilities(gold, probabilities, strict.best_threshold).f1 < 1.0


def test_gap_metrics_report_the_decision_threshold_of_their_grid():
    gold = [GapGold("t-1", "he", True, False), GapGold("t-2", "she", False, False)]
    scores = [[0.30, 0.20], [0.2, 0.1]]
    assert GapMetrics(gold).sweep(scores).best_threshold == 0.21
    sweep = GapMetrics(gold, threshold_grid="paper").sweep(scores)
    assert sweep.best_threshold == 0.2 and sweep.comparison == ">"


# ------------------------------------------------------------------------------------- 8. people counting
def test_read_people_counts_in_the_authors_layout(tmp_path):
    path = tmp_path / "num_people.tsv"
    path.write_text(
        "ID\tText\tCount\tAdditional comments\n"
        "validation-1\tHe met Ann. She smiled.\t2\t\n"
        "validation-3\tShe left ``early''.\t10\tThe first pronoun is not resolved.\n",
        encoding="utf-8",
    )
    documents = read_people_counts(path)
    assert [(d.example_id, d.count) for d in documents] == [("validation-1", 2), ("validation-3", 10)]
    assert documents[0].text == "He met Ann. She smiled." and documents[0].comment == ""
    assert documents[1].comment == "The first pronoun is not resolved."
    # The counts plug into the counting-threshold selection with the model's overwrite probabilities.
    overwrites = [[[0.9, 0.0], [0.0, 0.8]], [[0.95, 0.0]] * 10]
    result = select_counting_threshold(overwrites, [d.count for d in documents])
    assert result.total_absolute_error == 0


@pytest.mark.parametrize(
    "content, message",
    [
        ("ID\tText\n", "missing column"),
        ("ID\tText\tCount\tAdditional comments\nvalidation-1\tx\tthree\t\n", "non-negative integer"),
        ("ID\tText\tCount\nvalidation-1\tx\t2\nvalidation-1\ty\t3\n", "duplicate id"),
        ("", "empty"),
    ],
)
def test_read_people_counts_rejects_malformed_files(tmp_path, content, message):
    path = tmp_path / "counts.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_people_counts(path)
