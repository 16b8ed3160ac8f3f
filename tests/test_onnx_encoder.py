"""The encoder of a coreference checkpoint exported to ONNX (issue 39): hidden states within 1e-4 of PyTorch on
shapes other than the export's, the same clusters from `pipeline("coreference")` with the graph in place of the
PyTorch encoder, and its int8 quantisation running."""

import pytest
import torch
from conftest import saved_tiny_petra, tiny_petra_config
from transformers import BertConfig, BertForQuestionAnswering, pipeline

from hf_entity_models import PetraForCoreference  # (and registers the coreference pipeline)
from hf_entity_models.tasks.coreference.onnx_encoder import (
    OnnxEncoder,
    coreference_encoder,
    export_coreference_encoder,
    use_onnx_encoder,
)
from hf_entity_models.tasks.question_answering import quantize_onnx_int8

STORY = ("Anna met her brother Tom in Paris. He was late, and she told him so. Tom laughed at her. "
         "The next day Anna left the city; her brother stayed behind with his friends. ") * 3


@pytest.fixture(scope="module")
def document_pipe(tmp_path_factory, one_torch_thread):
    folder = saved_tiny_petra(tmp_path_factory.mktemp("petra-document"), coreference_mode="document",
                              document_hidden_size=16, max_span_width=3, span_width_size=4, span_threshold=-1.0,
                              encoder_window_size=64)
    return pipeline("coreference", model=str(folder), device=-1)


@pytest.fixture(scope="module")
def exported(document_pipe, tmp_path_factory):
    return export_coreference_encoder(document_pipe.model, tmp_path_factory.mktemp("encoder-onnx"))


def test_the_graph_gives_the_encoder_hidden_states_on_other_shapes(document_pipe, exported):
    encoder = coreference_encoder(document_pipe.model)
    graph = OnnxEncoder(exported)
    input_ids = torch.randint(1000, 2000, (3, 29), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 20:] = 0
    with torch.no_grad():
        expected = encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    produced = graph(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
    assert len(produced) == len(expected) == encoder.config.num_hidden_layers + 1
    kept = attention_mask.bool()
    for layer, (mine, reference) in enumerate(zip(produced, expected)):
        assert torch.allclose(mine[kept], reference[kept], atol=1e-4), layer


def test_the_pipeline_finds_the_same_clusters_with_the_graph(document_pipe, exported, tmp_path):
    expected = document_pipe(STORY)["clusters"]
    assert sum(len(cluster) for cluster in expected) > 5  # a threshold low enough for mentions to be proposed
    onnx_pipe = pipeline("coreference", model=document_pipe.model.name_or_path, device=-1)
    use_onnx_encoder(onnx_pipe.model, exported)
    assert onnx_pipe(STORY)["clusters"] == expected
    int8 = quantize_onnx_int8(exported, tmp_path / "encoder.int8.onnx")
    assert int8.stat().st_size < exported.stat().st_size
    use_onnx_encoder(onnx_pipe.model, int8)
    assert isinstance(onnx_pipe(STORY)["clusters"], list)  # runs; how much int8 changes is measured, not asserted


def test_other_models_and_paths_are_refused(tmp_path, exported):
    reader = BertForQuestionAnswering(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=16))
    with pytest.raises(TypeError, match="not a PeTra or Referential Reader"):
        export_coreference_encoder(reader, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="No ONNX graph"):
        OnnxEncoder(tmp_path / "missing.onnx")
    with pytest.raises(FileExistsError, match="overwrite=True"):  # refused before exporting anything
        export_coreference_encoder(PetraForCoreference(tiny_petra_config()), exported.parent)
