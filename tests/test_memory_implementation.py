"""The compiled memory recurrence (`memory_implementation="compiled"`) against the eager loop it replaces.

Both models keep the eager per-token loop as the reference. The compiled path reads the same tokens in fixed-shape
chunks (finished documents stay in the batch as no-op steps) and draws its randomness before the scan. Most tests
run the chunked scan without compiling it (`compiled_chunk` replaced by the identity), which checks the fixed-shape
step, the masking and the chunk padding in a second; a few compile for real on CPU, and on CUDA when present.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_encoder_config, tiny_petra_config

import hf_entity_models.models._shared.recurrence as recurrence
import hf_entity_models.models.petra.modeling_petra as modeling_petra
import hf_entity_models.models.refreader.modeling_refreader as modeling_refreader
from hf_entity_models import PetraConfig, PetraForCoreference, RefReaderConfig, RefReaderForCoreference

LENGTHS = [11, 4, 9, 1]  # 11 tokens with chunks of 4: the last chunk is padded with a no-op step


@pytest.fixture
def uncompiled(monkeypatch):
    """Run the chunked scan as plain eager code (the function torch.compile would trace)."""
    monkeypatch.setattr(recurrence, "compiled_chunk", lambda function, device_type: function)


def petra(implementation, **overrides):
    torch.manual_seed(0)
    values = dict(num_memory_cells=3, memory_chunk_size=4, initializer_range=0.5, memory_implementation=implementation)
    values.update(overrides)
    return PetraForCoreference(tiny_petra_config(**values)).double()


def refreader(implementation, **overrides):
    torch.manual_seed(0)
    values = dict(vocab_size=50, embedding_size=6, hidden_size=8, key_size=4, num_memory_cells=3, pad_token_id=0)
    values.update(memory_chunk_size=4, initializer_range=0.5, memory_implementation=implementation)
    values.update(overrides)
    return RefReaderForCoreference(RefReaderConfig(**values)).double()


def batch(model, lengths=LENGTHS, left_padding=False, seed=0):
    """Random documents with special first tokens, GAP-like spans and labelled pairs for both models."""
    generator = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    positions = torch.arange(longest).unsqueeze(0)
    lengths_tensor = torch.tensor(lengths).unsqueeze(1)
    mask = positions >= longest - lengths_tensor if left_padding else positions < lengths_tensor
    input_ids = torch.randint(1, 50, (len(lengths), longest), generator=generator).masked_fill(~mask, 0)
    special = torch.zeros_like(input_ids)
    special[:, 0] = 1
    inputs = {"input_ids": input_ids, "attention_mask": mask.long(), "special_tokens_mask": special * mask.long()}
    if not left_padding:
        pairs = torch.tensor([[1, 2], [1, 3], [2, 3]]).repeat(len(lengths), 1, 1)
        labels = torch.tensor([[2, 1, 0]]).repeat(len(lengths), 1)
        too_short = torch.tensor(lengths) < 4
        labels[too_short] = -100
        pairs[too_short] = -1
        inputs.update(link_pairs=pairs, link_labels=labels)
    if isinstance(model, PetraForCoreference):
        inputs["encoder_features"] = model.get_encoder_features(inputs.pop("input_ids"), inputs["attention_mask"])
    return inputs


LOGS = {
    PetraForCoreference: ("entity_probs", "overwrite_probs", "coref_probs", "usage", "memory"),
    RefReaderForCoreference: ("entity_probs", "reference_probs", "overwrite_probs", "coref_probs", "salience"),
}


def gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_function(eager, compiled, inputs, with_loss=True):
    """Outputs of every log, the loss and every parameter gradient agree."""
    outputs = []
    for model in (eager, compiled):
        model.zero_grad(set_to_none=True)
        output = model(**inputs)
        if with_loss:
            output.loss.backward()
        outputs.append(output)
    for name in LOGS[type(eager)]:
        torch.testing.assert_close(outputs[1][name], outputs[0][name], rtol=1e-9, atol=1e-10, msg=name)
    if with_loss:
        torch.testing.assert_close(outputs[1].loss, outputs[0].loss)
        eager_gradients, compiled_gradients = gradients(eager), gradients(compiled)
        assert eager_gradients.keys() == compiled_gradients.keys() and len(eager_gradients) > 5
        for name, gradient in eager_gradients.items():
            assert gradient.abs().sum() > 0 or compiled_gradients[name].abs().sum() == 0, name
            torch.testing.assert_close(compiled_gradients[name], gradient, rtol=1e-8, atol=1e-10, msg=name)
    return outputs


# ------------------------------------------------------------------------------------------ evaluation mode
PETRA_VARIANTS = [
    {},
    {"memory_variant": "learned_init"},
    {"memory_variant": "fixed_key", "key_size": 5},
    {"overwrite_tie_breaking": "random", "coref_update_mlp": "tanh_linear"},
]


@pytest.mark.parametrize("overrides", PETRA_VARIANTS, ids=lambda o: "-".join(map(str, o.values())) or "vanilla")
def test_petra_chunked_scan_is_the_eager_recurrence_at_evaluation(uncompiled, overrides):
    eager, compiled = petra("eager", **overrides).eval(), petra("compiled", **overrides).eval()
    outputs = assert_same_function(eager, compiled, batch(eager))
    # The comparison is not vacuous: documents wrote to several cells and read from them; padding logs stay zero.
    assert ((outputs[0].overwrite_probs.sum(1) > 0).sum(-1) > 1).any() and outputs[0].coref_probs.sum() > 0
    assert (outputs[1].usage[3, 1:] == 0).all() and (outputs[1].overwrite_probs[1, 4:] == 0).all()


@pytest.mark.parametrize("left_padding", [False, True], ids=["right-padding", "left-padding"])
def test_refreader_chunked_scan_is_the_eager_recurrence_at_evaluation(uncompiled, left_padding):
    eager, compiled = refreader("eager").eval(), refreader("compiled").eval()
    inputs = batch(eager, left_padding=left_padding)
    outputs = assert_same_function(eager, compiled, inputs, with_loss=not left_padding)
    assert float(outputs[0].overwrite_probs.detach().sum()) > 1.0
    masked = inputs["attention_mask"] == 0
    assert (outputs[1].salience[masked] == 0).all()


def test_encoder_reader_chunked_scan_is_the_eager_recurrence(uncompiled):
    overrides = dict(encoder_config=tiny_encoder_config(), encoder_layers=[-2, -1], num_memory_cells=2)
    eager, compiled = refreader("eager", **overrides).eval(), refreader("compiled", **overrides).eval()
    assert_same_function(eager, compiled, batch(eager))


# -------------------------------------------------------------------------------- training mode, same noise
def recorded_gumbel_noise(monkeypatch, module):
    """Make the compiled path record the Gumbel noise it draws, so the eager path can be fed the same draws."""
    drawn = []
    original = module.gumbel_noise

    def record(shape, reference):
        drawn.append(original(shape, reference))
        return drawn[-1]

    monkeypatch.setattr(module, "gumbel_noise", record)
    return drawn


def replay_noise_in_eager_order(monkeypatch, noise, lengths):
    """F.gumbel_softmax for the eager loop, fed the recorded noise: step t reads the documents still active,
    longest first (the eager loop's row order)."""
    order = sorted(range(len(lengths)), key=lambda doc: -lengths[doc])
    steps = iter(range(max(lengths)))

    def gumbel_softmax(logits, tau=1.0, hard=False, dim=-1):
        assert not hard and dim == -1
        step = next(steps)
        rows = [doc for doc in order if lengths[doc] > step]
        return torch.softmax((logits + noise[rows, step]) / tau, dim=-1)

    monkeypatch.setattr(F, "gumbel_softmax", gumbel_softmax)


@pytest.mark.parametrize("name", ["petra", "refreader"])
def test_training_step_matches_eager_with_the_same_gumbel_noise(uncompiled, monkeypatch, name):
    build, module = {"petra": (petra, modeling_petra), "refreader": (refreader, modeling_refreader)}[name]
    eager, compiled = build("eager", dropout=0.0).train(), build("compiled", dropout=0.0).train()
    for model in (eager, compiled):
        model.set_gumbel_temperature(0.7)
    inputs = batch(eager)
    drawn = recorded_gumbel_noise(monkeypatch, module)
    compiled.zero_grad(set_to_none=True)
    compiled_output = compiled(**inputs)
    compiled_output.loss.backward()
    (noise,) = drawn
    replay_noise_in_eager_order(monkeypatch, noise, LENGTHS)
    eager_output = eager(**inputs)
    eager_output.loss.backward()
    for log in LOGS[type(eager)]:
        torch.testing.assert_close(compiled_output[log], eager_output[log], rtol=1e-9, atol=1e-10, msg=log)
    # Soft overwrites (several cells share a token) show the Gumbel-softmax branch ran.
    assert ((eager_output.overwrite_probs > 1e-3).sum(-1) > 1).any()
    for parameter_name, gradient in gradients(eager).items():
        torch.testing.assert_close(gradients(compiled)[parameter_name], gradient, rtol=1e-8, atol=1e-10)


class ScaleDropout(torch.nn.Module):
    """A deterministic stand-in for dropout (x 1.5 in training) that shows where the masks act."""

    def forward(self, tensor):
        return tensor * 1.5 if self.training else tensor


def test_refreader_dropout_masks_drawn_before_the_scan_act_where_eager_dropout_acts(uncompiled, monkeypatch):
    eager, compiled = refreader("eager").train(), refreader("compiled").train()
    for model in (eager, compiled):
        model.refreader.dropout = ScaleDropout()
        model.set_gumbel_temperature(0.7)
    inputs = batch(eager)
    drawn = recorded_gumbel_noise(monkeypatch, modeling_refreader)
    compiled_output = compiled(**inputs)
    replay_noise_in_eager_order(monkeypatch, drawn[0], LENGTHS)
    eager_output = eager(**inputs)
    for log in LOGS[RefReaderForCoreference]:
        torch.testing.assert_close(compiled_output[log], eager_output[log], rtol=1e-9, atol=1e-10, msg=log)


def test_compiled_training_draws_fresh_noise_every_call(uncompiled):
    model = petra("compiled").train()
    inputs = batch(model)
    first, second = model(**inputs).overwrite_probs, model(**inputs).overwrite_probs
    assert not torch.equal(first, second)


# ------------------------------------------------------------------------------------- torch.compile for real
@pytest.fixture
def traced_without_inductor(monkeypatch):
    """`torch.compile` with the package's settings (fullgraph, static shapes) but the "aot_eager" backend.

    Dynamo must capture each chunk as one graph and AOTAutograd must derive its backward: that is where the
    recurrence code can break (a graph break, data-dependent control flow, an in-place update autograd cannot
    replay). Inductor's C++ code generation for the CPU adds only compiler time here (about 75 s per model on two
    cores); `benchmarks/bench_memory_step.py` runs the real CPU compile, and the CUDA test below the real GPU one.
    """
    compiled_functions = {}

    def compile_with_aot_eager(function, device_type):
        if function not in compiled_functions:
            compiled_functions[function] = torch.compile(function, backend="aot_eager", dynamic=False, fullgraph=True)
        return compiled_functions[function]

    monkeypatch.setattr(recurrence, "compiled_chunk", compile_with_aot_eager)
    return compiled_functions


@pytest.mark.parametrize("name", ["petra", "refreader"])
def test_torch_compile_gives_the_eager_outputs_and_gradients_on_cpu(name, traced_without_inductor):
    build = {"petra": petra, "refreader": refreader}[name]
    # Chunks of 2 steps: the same code path as 16, at a fraction of the compile time.
    eager, compiled = build("eager").float().eval(), build("compiled", memory_chunk_size=2).float().eval()
    inputs = {key: value.float() if value.is_floating_point() else value for key, value in batch(eager).items()}
    outputs = []
    for model in (eager, compiled):
        output = model(**inputs)
        output.loss.backward()
        outputs.append(output)
    for log in LOGS[type(eager)]:
        torch.testing.assert_close(outputs[1][log], outputs[0][log], rtol=1e-4, atol=1e-5, msg=log)
    for parameter_name, gradient in gradients(eager).items():
        torch.testing.assert_close(gradients(compiled)[parameter_name], gradient, rtol=1e-3, atol=1e-5)
    assert traced_without_inductor, "the compiled path never went through torch.compile"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (runs on the GPU machine)")
@pytest.mark.parametrize("name", ["petra", "refreader"])
def test_cuda_graphs_give_the_eager_outputs_and_gradients_on_cuda(name):
    build = {"petra": petra, "refreader": refreader}[name]
    eager, compiled = build("eager").float().cuda().eval(), build("compiled").float().cuda().eval()
    inputs = {key: value.cuda() for key, value in batch(eager.cpu()).items()}
    eager.cuda()
    inputs = {key: value.float() if value.is_floating_point() else value for key, value in inputs.items()}
    for _ in range(3):  # CUDA graphs are recorded on a later call than the first: compare the replays too
        outputs = []
        for model in (eager, compiled):
            model.zero_grad(set_to_none=True)
            # cuDNN's GRU (PeTra's encoder-side recurrence) refuses a backward pass in evaluation mode.
            with torch.backends.cudnn.flags(enabled=False):
                output = model(**inputs)
                output.loss.backward()
            outputs.append(output)
        for log in LOGS[type(eager)]:
            torch.testing.assert_close(outputs[1][log], outputs[0][log], rtol=1e-4, atol=1e-5, msg=log)
        for parameter_name, gradient in gradients(eager).items():
            torch.testing.assert_close(gradients(compiled)[parameter_name], gradient, rtol=1e-3, atol=1e-5)


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("config_class", [PetraConfig, RefReaderConfig])
def test_bad_memory_implementation_settings_are_refused(config_class):
    with pytest.raises(ValueError, match="memory_implementation must be one of"):
        config_class(memory_implementation="triton")
    with pytest.raises(ValueError, match="memory_chunk_size must be >= 1"):
        config_class(memory_chunk_size=0)


def test_compiled_setting_survives_save_and_the_checkpoint_carries_the_recurrence_code(tmp_path, uncompiled):
    model = petra("compiled", memory_chunk_size=5).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "recurrence.py").is_file()
    loaded = PetraForCoreference.from_pretrained(tmp_path).double().eval()
    assert (loaded.config.memory_implementation, loaded.config.memory_chunk_size) == ("compiled", 5)
    inputs = batch(model)
    torch.testing.assert_close(loaded(**inputs).coref_probs, model(**inputs).coref_probs)


def test_run_in_chunks_refuses_a_chunk_size_below_one():
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        recurrence.run_in_chunks(lambda *args: args, None, (), (torch.zeros(1, 3),), chunk_size=0)
