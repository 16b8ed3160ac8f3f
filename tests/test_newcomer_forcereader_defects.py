"""ForceReader defects 4, 9 and 16: the branch weight is checked when it is set, saved and chosen; choosing it on a
reader without a branch says so; each preset's model card claims only what its config does."""

import pytest
import torch
from datasets import Dataset
from test_forcereader_model import ENCODER, INPUT_IDS, MASK, TOKEN_TYPES, reader

from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.hub.cards.forcereader import branch_weight_chosen_on_validation, runs_qcp_pass
from hf_entity_models.hub.checkpoint_writer import CHECKPOINT_WRITER
from hf_entity_models.models.forcereader import PRESETS
from hf_entity_models.models.forcereader.modeling_forcereader import ForceReaderModel
from hf_entity_models.tasks.question_answering.training import choose_branch_weight, record_branch_weight

TINY = dict(encoder_config=ENCODER, interaction_channels=4, interaction_kernel_sizes=[3, 5])


def tiny_config(preset: str = "forcereader", **overrides) -> ForceReaderConfig:
    return ForceReaderConfig.from_preset(preset, **{**TINY, **overrides})


# --- 4: a negative branch weight is refused when set, when saved and when offered as a candidate ---------------------


@pytest.mark.parametrize("weight", [-1.0, -1, float("nan"), float("inf")])
def test_assigning_a_negative_or_non_finite_branch_weight_is_refused_and_keeps_the_weight(weight):
    config = tiny_config(branch_weight=0.5)
    with pytest.raises(ValueError, match=r"branch_weight must be a finite number >= 0, got .*\.") as raised:
        config.branch_weight = weight
    assert "\n" not in str(raised.value)
    assert config.branch_weight == 0.5


@pytest.mark.parametrize(
    "field, value",
    [("branch_dropout", 1.5), ("head_training", "joint"), ("classifier_dropout", 1.0),
     ("null_score_diff_threshold", float("-inf")), ("interaction_kernel_sizes", [4]), ("reading_modes", ["x2y"])],
)
def test_assigning_any_out_of_range_field_is_refused_by_the_same_check_as_building_it(field, value):
    with pytest.raises(ValueError, match=field) as built:
        tiny_config(**{field: value})
    config = tiny_config()
    before = getattr(config, field)
    with pytest.raises(ValueError, match=field) as assigned:
        setattr(config, field, value)
    assert str(built.value).endswith(str(assigned.value)), "the same message, whether built or assigned"
    assert getattr(config, field) == before


def test_a_valid_assignment_and_a_round_trip_still_work(tmp_path):
    config = tiny_config()
    config.branch_weight = 0.25
    config.save_pretrained(tmp_path)
    assert ForceReaderConfig.from_pretrained(tmp_path).branch_weight == 0.25
    assert ForceReaderConfig.from_dict(config.to_dict()).branch_weight == 0.25


def test_saving_a_config_made_invalid_past_the_checks_writes_nothing(tmp_path):
    config = tiny_config()
    config.__dict__["branch_weight"] = -1.0  # past __setattr__, as a careless caller or an old code path may
    folder = tmp_path / "saved"
    with pytest.raises(ValueError, match="branch_weight must be a finite number >= 0, got -1.0") as raised:
        config.save_pretrained(folder)
    assert "\n" not in str(raised.value)
    assert not folder.exists()


def features_and_examples() -> tuple[Dataset, Dataset]:
    features = Dataset.from_dict(
        {"input_ids": INPUT_IDS.tolist(), "token_type_ids": TOKEN_TYPES.tolist(), "attention_mask": MASK.tolist()}
    )
    examples = Dataset.from_list([
        {"id": "a", "question": "q", "context": "p", "answers": {"text": ["p"], "answer_start": [0]}},
        {"id": "b", "question": "q", "context": "p", "answers": {"text": ["p"], "answer_start": [0]}},
    ])
    return features, examples


def forward_refused(model: ForceReaderForQuestionAnswering) -> ForceReaderForQuestionAnswering:
    def forward(*args, **kwargs):
        raise AssertionError("a forward pass ran before the arguments were checked")

    model.forward = forward
    return model


@pytest.mark.parametrize("weights", [(-1.0, 0.5), (0.5, float("nan")), (0.5, float("inf"))])
def test_choose_branch_weight_refuses_a_negative_or_non_finite_candidate_before_any_forward_pass(weights):
    features, examples = features_and_examples()
    model = forward_refused(reader("forcereader"))
    with pytest.raises(ValueError, match=r"weights must be finite numbers >= 0, got .*: pass .*") as raised:
        choose_branch_weight(model, examples, features, weights=weights)
    assert "\n" not in str(raised.value)
    assert model.config.branch_weight == 1.0


# --- 9: a reader without a branch, or no candidate weight -----------------------------------------------------------


@pytest.mark.parametrize("preset", ["joint-bert", "sep-bert-reader", "forcereader-paper"])
def test_choose_branch_weight_on_a_reader_without_a_branch_says_so(preset):
    features, examples = features_and_examples()
    model = forward_refused(reader(preset))
    assert not model.config.has_two_heads
    with pytest.raises(ValueError, match=rf"has no separate-encoding branch to weigh \(preset {preset!r}") as raised:
        choose_branch_weight(model, examples, features)
    assert "\n" not in str(raised.value)


def test_choose_branch_weight_on_a_model_that_is_no_forcereader_says_so():
    class Plain(torch.nn.Module):
        config = object()

    features, examples = features_and_examples()
    with pytest.raises(ValueError, match="has no separate-encoding branch to weigh"):
        choose_branch_weight(Plain(), examples, features)


def test_choose_branch_weight_without_candidates_asks_for_one():
    features, examples = features_and_examples()
    with pytest.raises(ValueError, match="pass at least one weight >= 0"):
        choose_branch_weight(forward_refused(reader("forcereader")), examples, features, weights=())


# --- 16: each preset's card describes that preset --------------------------------------------------------------------


def card_text(config: ForceReaderConfig) -> str:
    torch.manual_seed(0)
    return str(CHECKPOINT_WRITER.create_model_card(ForceReaderForQuestionAnswering(config), "me/reader"))


def section(card: str, heading: str) -> str:
    return card.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def cited(config: ForceReaderConfig, field: str) -> str:
    """How a claim names the config field it follows from (`field=value`, the value as Python writes it)."""
    return f"{field}={getattr(config, field)!r}"


def claims_made(config: ForceReaderConfig) -> dict[str, bool]:
    """Each field a Limitations claim follows from, and whether the config makes that claim true, read from the
    fields themselves (not from the config's helper properties)."""
    modes = set(config.reading_modes)
    two_heads = "qcp" in modes and config.qcp_passage_logits
    return {
        "separate_encoding": config.separate_encoding,
        "head_training": two_heads,
        "detach_branch_from_encoder": two_heads,
        "qcp_passage_logits": two_heads,
        "conditional_background_attention": "qcp" in modes and not config.conditional_background_attention,
        "background_attention_side": config.conditional_background_attention and bool({"q2p", "p2q"} & modes),
        "interaction_head": config.interactive_reasoning,
    }


OTHER_VALUES = {
    "separate_encoding": [True, False],
    "head_training": ["sum", "deep-supervision", "stacked"],
    "detach_branch_from_encoder": [True, False],
    "qcp_passage_logits": [True, False],
    "conditional_background_attention": [True, False],
    "background_attention_side": ["query", "key"],
    "interaction_head": ["residual", "concat", "paper"],
}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_each_presets_limitations_claim_what_its_config_does_and_nothing_else(preset):
    config = tiny_config(preset)
    card = card_text(config)
    limitations = section(card, "Limitations")
    for field, applies in claims_made(config).items():
        assert (cited(config, field) in limitations) == applies, (preset, field, applies)
        for value in OTHER_VALUES[field]:
            if value != getattr(config, field):
                assert f"{field}={value!r}" not in limitations, (preset, field, value)
    two_heads = config.has_two_heads
    assert ("branch" in limitations.lower()) == two_heads, "only a two-head reader has a branch"
    assert ("detached" in limitations.lower()) == (two_heads and config.detach_branch_from_encoder)
    assert ("separate" in limitations.lower()) == config.separate_encoding
    assert ("interaction" in limitations.lower()) == config.interactive_reasoning
    assert "chosen on validation" not in limitations, "nothing recorded that the branch weight was chosen"
    this_checkpoint = card.split("This checkpoint is", 1)[1].split("\n\n", 1)[0]
    assert ("separately" in this_checkpoint) == config.separate_encoding, "the overview describes this preset too"


def test_the_joint_baseline_card_claims_none_of_the_two_head_training():
    card = card_text(tiny_config("joint-bert"))
    assert "| Separate encoding | False |" in card
    limitations = section(card, "Limitations")
    for field in ("head_training", "detach_branch_from_encoder", "branch_weight", "separate_encoding"):
        assert field not in limitations


def test_the_summed_training_card_names_its_own_training_not_the_default():
    config = tiny_config("forcereader-sum")
    limitations = section(card_text(config), "Limitations")
    assert cited(config, "head_training") in limitations and "head_training='stacked'" not in limitations
    assert cited(config, "detach_branch_from_encoder") in limitations
    assert "detached" not in limitations


@pytest.mark.parametrize("preset", ["forcereader", "forcereader-sum"])
def test_the_card_says_the_branch_weight_was_chosen_on_validation_only_while_the_record_says_so(preset):
    config = tiny_config(preset)
    record_branch_weight(config, 0.25, {0.0: 40.0, 0.25: 41.5, 1.0: 30.0})
    assert config.branch_weight == 0.25 and branch_weight_chosen_on_validation(config)
    assert "chosen on validation" in section(card_text(config), "Limitations")
    restored = ForceReaderConfig.from_dict(config.to_dict())
    assert restored.branch_weight_validation_f1 == config.branch_weight_validation_f1
    assert branch_weight_chosen_on_validation(restored)
    config.branch_weight = 1.0  # set by hand afterwards: the record no longer explains the weight
    assert not branch_weight_chosen_on_validation(config)
    assert "chosen on validation" not in section(card_text(config), "Limitations")


@pytest.mark.parametrize(
    "record", [{"-1.0": 40.0}, {"0.5": float("nan")}, {"half": 40.0}]
)
def test_an_invalid_branch_weight_record_is_refused(record):
    with pytest.raises(ValueError, match="branch_weight_validation_f1"):
        tiny_config(branch_weight_validation_f1=record)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_card_knows_whether_the_qcp_pass_runs_as_the_model_does(preset):
    """The card counts encoder passes from the config; the model decides whether it runs the QCP pass."""
    config = tiny_config(preset)
    if not config.separate_encoding:
        assert not runs_qcp_pass(config)
        return
    assert runs_qcp_pass(config) == ForceReaderModel(config)._reads_pair()



def test_train_on_squad_records_the_branch_weight_it_chose_and_the_card_says_so(tmp_path):
    from test_squad_training import TOKENIZER, forcereader, small_split

    from hf_entity_models.tasks.question_answering.training import train_on_squad

    train, validation = small_split("1.1", train_questions=2, validation_questions=2)
    model = forcereader("forcereader")
    result = train_on_squad(model, TOKENIZER, train, validation, str(tmp_path), max_length=96, doc_stride=32,
                            max_steps=1, per_device_train_batch_size=2, report_to=[])
    recorded = {str(float(weight)): f1 for weight, f1 in result.branch_weight_f1.items()}
    assert model.config.branch_weight_validation_f1 == pytest.approx(recorded)
    assert branch_weight_chosen_on_validation(model.config)
    assert "chosen on validation" in section(card_text(model.config), "Limitations")
