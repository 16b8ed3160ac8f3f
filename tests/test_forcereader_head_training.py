"""ForceReader's two answer heads (the QCP token head and the separate-encoding branch) and how the loss trains them
(`head_training`, `detach_branch_from_encoder`, `branch_dropout`, `branch_gate`): each switch against a loss or a
gradient computed by hand from the heads' own logits."""

import json

import pytest
import torch
import torch.nn.functional as F
from test_forcereader_model import ANSWERABLE, ENCODER, packed, reader

from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.models.forcereader import MASKED_LOGIT
from hf_entity_models.models.forcereader.configuration_forcereader import SUMMED_HEAD_TRAINING
from hf_entity_models.training import two_rate_adamw

STARTS, ENDS = torch.tensor([6, 3]), torch.tensor([7, 4])


def span_loss(start_logits, end_logits):
    """Eq. 7 halved, by hand: the mean over the batch of the start and end cross-entropies, averaged."""
    return (F.cross_entropy(start_logits, STARTS) + F.cross_entropy(end_logits, ENDS)) / 2


def heads_of(model):
    return model.head_logits(**packed())


def gradients(loss, parameters):
    return [torch.zeros_like(p) if g is None else g for p, g in zip(
        parameters, torch.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True))]


def test_head_logits_are_the_two_heads_and_their_sum_which_forward_returns():
    model = reader("forcereader")
    with torch.no_grad():
        heads, out = heads_of(model), model(**packed())
    assert sorted(heads) == ["combined", "qcp_tokens", "separate_encoding"]
    torch.testing.assert_close(heads["combined"][0], out.start_logits)
    torch.testing.assert_close(heads["combined"][1], out.end_logits)
    for row, allowed in enumerate(ANSWERABLE):
        for side in (0, 1):
            torch.testing.assert_close(
                heads["combined"][side][row, allowed],
                heads["qcp_tokens"][side][row, allowed] + heads["separate_encoding"][side][row, allowed],
            )
            others = [i for i in range(INPUT_WIDTH) if i not in allowed]
            assert (heads["qcp_tokens"][side][row, others] == MASKED_LOGIT).all()
            assert (heads["separate_encoding"][side][row, others] == MASKED_LOGIT).all()


INPUT_WIDTH = packed()["input_ids"].shape[1]


def test_a_one_head_rung_has_only_the_combined_logits():
    assert sorted(heads_of(reader("sep-bert-reader"))) == ["combined"]


@pytest.mark.parametrize("head_training", ["sum", "deep-supervision", "stacked"])
def test_each_head_training_is_its_sum_of_span_losses(head_training):
    model = reader("forcereader", head_training=head_training)
    with torch.no_grad():
        heads = heads_of(model)
        loss = model(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    combined, pair, branch = (span_loss(*heads[name]) for name in ("combined", "qcp_tokens", "separate_encoding"))
    expected = {"sum": combined, "deep-supervision": combined + pair + branch, "stacked": pair + combined}
    assert loss.item() == pytest.approx(expected[head_training].item(), rel=1e-5)


def test_stacked_training_gives_the_qcp_head_the_gradient_of_its_own_loss_alone():
    """"stacked": the sum's loss sees the QCP head detached, so the QCP head learns exactly as if it were alone."""
    model = reader("forcereader", head_training="stacked").train()
    parameters = list(model.pair_outputs.parameters())
    loss = model(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    alone = span_loss(*heads_of(model)["qcp_tokens"])
    for ours, reference in zip(gradients(loss, parameters), gradients(alone, parameters)):
        torch.testing.assert_close(ours, reference)
    summed = reader("forcereader", head_training="sum").train()
    summed_loss = summed(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    differs = [not torch.allclose(a, b) for a, b in zip(
        gradients(summed_loss, list(summed.pair_outputs.parameters())), gradients(alone, parameters))]
    assert any(differs), "the summed loss should give the QCP head another gradient (the control)"


def test_a_detached_branch_sends_no_gradient_into_the_encoder():
    """`detach_branch_from_encoder`: the encoder's gradient is that of the QCP head's logits alone, whatever the
    branch does; with "stacked" the encoder and the QCP head then train exactly as the joint baseline."""
    model = reader("forcereader", head_training="stacked", detach_branch_from_encoder=True).train()
    encoder = [p for p in model.forcereader.encoder.parameters()]
    loss = model(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    alone = span_loss(*heads_of(model)["qcp_tokens"])
    for ours, reference in zip(gradients(loss, encoder), gradients(alone, encoder)):
        torch.testing.assert_close(ours, reference)
    branch = heads_of(model)["separate_encoding"][0]
    assert all(g is None for g in torch.autograd.grad(branch.sum(), encoder, allow_unused=True))
    # The branch itself still learns.
    assert model.start_bilinear.weight.requires_grad
    assert torch.autograd.grad(loss, model.start_bilinear.weight)[0].abs().sum() > 0


def test_an_attached_branch_trains_the_encoder_too():
    model = reader("forcereader", detach_branch_from_encoder=False).train()
    encoder = [p for p in model.forcereader.encoder.parameters()]
    branch = heads_of(model)["separate_encoding"][0]
    assert any(g is not None and g.abs().sum() > 0 for g in torch.autograd.grad(branch.sum(), encoder, allow_unused=True))


def test_branch_dropout_scores_dropped_rows_by_the_qcp_head_alone_in_training_only():
    model = reader("forcereader", head_training="sum", branch_dropout=1.0).train()
    heads = heads_of(model)
    loss = model(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    assert loss.item() == pytest.approx(span_loss(*heads["qcp_tokens"]).item(), rel=1e-5)
    model.eval()
    with torch.no_grad():
        heads = heads_of(model)
        evaluation_loss = model(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    assert evaluation_loss.item() == pytest.approx(span_loss(*heads["combined"]).item(), rel=1e-5)
    assert abs(evaluation_loss.item() - span_loss(*heads["qcp_tokens"]).item()) > 1e-3


def test_a_gated_branch_starts_silent_with_random_maps_and_its_gate_learns():
    torch.manual_seed(0)
    model = ForceReaderForQuestionAnswering(
        ForceReaderConfig.from_preset("forcereader", encoder_config=ENCODER, branch_gate=True)
    ).train()
    assert model.branch_gate.weight.item() == 0.0
    assert model.start_bilinear.weight.abs().sum() > 0, "a zero branch behind a zero gate would never learn"
    heads = heads_of(model.eval())
    for side in (0, 1):
        torch.testing.assert_close(heads["combined"][side], heads["qcp_tokens"][side])
    loss = model.train()(**packed(start_positions=STARTS, end_positions=ENDS)).loss
    assert torch.autograd.grad(loss, model.branch_gate.weight)[0].abs() > 0


def test_a_gated_checkpoint_round_trips_with_its_gate(tmp_path):
    model = reader("forcereader", branch_gate=True)
    with torch.no_grad():
        model.branch_gate.weight.fill_(0.7)
    model.save_pretrained(tmp_path)
    loaded = ForceReaderForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert loaded.branch_gate.weight.item() == pytest.approx(0.7)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**packed()).start_logits, model(**packed()).start_logits)


def test_a_checkpoint_saved_before_the_head_training_switches_loads_as_trained(tmp_path):
    model = reader("forcereader", **SUMMED_HEAD_TRAINING)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    for field in SUMMED_HEAD_TRAINING:
        del saved[field]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = ForceReaderConfig.from_pretrained(tmp_path)
    assert {field: getattr(loaded, field) for field in SUMMED_HEAD_TRAINING} == SUMMED_HEAD_TRAINING


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"head_training": "boosted"}, "head_training must be one of"),
        ({"branch_dropout": 1.5}, "branch_dropout must be a probability"),
    ],
)
def test_bad_head_training_values_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ForceReaderConfig.from_preset("forcereader", encoder_config=ENCODER, **fields)


def test_the_new_layers_can_decay_apart_from_the_encoder():
    model = reader("forcereader")
    optimizer = two_rate_adamw(model, model.forcereader.encoder, 1e-4, 3e-4, 1e-4, new_weight_decay=10.0)
    assert [group["weight_decay"] for group in optimizer.param_groups] == [1e-4, 10.0]
    assert [group["weight_decay"] for group in two_rate_adamw(model, model.forcereader.encoder).param_groups] == [
        1e-4, 1e-4]


def test_the_branch_weight_scales_the_branch_in_the_answer():
    full = reader("forcereader")
    half = reader("forcereader", branch_weight=0.5)
    half.load_state_dict(full.state_dict())
    with torch.no_grad():
        unweighted, weighted = heads_of(full), heads_of(half)
    for row, allowed in enumerate(ANSWERABLE):
        for side in (0, 1):
            torch.testing.assert_close(
                weighted["combined"][side][row, allowed],
                unweighted["qcp_tokens"][side][row, allowed] + 0.5 * unweighted["separate_encoding"][side][row, allowed],
            )
    silent = reader("forcereader", branch_weight=0.0)
    with torch.no_grad():
        heads = heads_of(silent)
    torch.testing.assert_close(heads["combined"][0], heads["qcp_tokens"][0])


@pytest.mark.parametrize("weight", [-0.5, float("nan"), float("inf")])
def test_a_negative_or_non_finite_branch_weight_is_refused(weight):
    with pytest.raises(ValueError, match="branch_weight"):
        ForceReaderConfig.from_preset("forcereader", encoder_config=ENCODER, branch_weight=weight)
