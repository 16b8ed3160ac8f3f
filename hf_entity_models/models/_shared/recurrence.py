"""A launch-cheap way to run a per-token memory recurrence: fixed-shape time chunks compiled as one graph.

The eager recurrence of the coreference models runs a few dozen small tensor operations per token, each a separate
kernel launch; on a GPU the launches, not the arithmetic, set the step time. Here the whole batch keeps one shape
for every token (a finished document's steps are no-ops that its `alive` mask turns off, instead of dropping it from
the batch), so `chunk_size` consecutive steps can be traced into one graph by `torch.compile`: elementwise work is
fused across the steps, and on CUDA the graph is replayed with CUDA graphs (one launch per chunk). The backward pass
is compiled the same way.

Randomness (Gumbel noise, dropout masks) is drawn outside the compiled graph, for all tokens at once, and passed
in: the compiled and eager paths then see the same distribution, and a test can feed both the same draws.

It imports only torch, so that saving copies it next to a checkpoint (see `hf_entity_models.hub.portable_code`).
"""

from collections.abc import Callable

import torch

# "eager": the reference per-token loop. "compiled": fixed-shape chunks through torch.compile (CUDA graphs on CUDA).
MEMORY_IMPLEMENTATIONS = ("eager", "compiled")

_COMPILED_CHUNKS: dict[tuple[Callable, str], Callable] = {}


def compiled_chunk(chunk_function: Callable, device_type: str) -> Callable:
    """`torch.compile` of a chunk function, built once per function and device type.

    On CUDA the "reduce-overhead" mode records CUDA graphs, so a chunk costs one launch instead of one per
    operation. Shapes are static: a new batch size or chunk length compiles once more, then hits the cache.
    """
    key = (chunk_function, device_type)
    if key not in _COMPILED_CHUNKS:
        mode = "reduce-overhead" if device_type == "cuda" else "default"
        _COMPILED_CHUNKS[key] = torch.compile(chunk_function, mode=mode, dynamic=False, fullgraph=True)
    return _COMPILED_CHUNKS[key]


def run_in_chunks(
    chunk_function: Callable,
    module: torch.nn.Module,
    state: tuple[torch.Tensor, ...],
    step_inputs: tuple[torch.Tensor, ...],
    chunk_size: int,
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Run `chunk_function(module, state, chunk_inputs) -> (state, log)` over consecutive time chunks.

    Args:
        chunk_function: reads every step of a chunk; `chunk_inputs` are `step_inputs` cut to `(B, C, ...)` and
            `log` is `(B, C, D)`. It must treat a step whose inputs are all zeros as a no-op (the `alive` mask of a
            padded step is 0), because the last chunk is padded with zeros up to `chunk_size` steps.
        module: passed to `chunk_function` (its parameters become graph inputs of the compiled chunk).
        state: the recurrent state before the first token.
        step_inputs: per-token tensors `(B, T, ...)`.
        chunk_size: steps per compiled chunk; every chunk has exactly this many, so one graph serves them all.

    Returns:
        The state after the last step and the log of every step `(B, T, D)`.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    length = step_inputs[0].shape[1]
    padding = (-length) % chunk_size
    if padding:
        step_inputs = tuple(_pad_steps(tensor, padding) for tensor in step_inputs)
    on_cuda_graphs = step_inputs[0].device.type == "cuda"
    run = compiled_chunk(chunk_function, step_inputs[0].device.type)
    if on_cuda_graphs:
        # A new forward pass: earlier replays' memory may be reused (everything returned below is a copy).
        torch.compiler.cudagraph_mark_step_begin()
    logs = []
    for start in range(0, length + padding, chunk_size):
        chunk_inputs = tuple(tensor[:, start : start + chunk_size] for tensor in step_inputs)
        state, log = run(module, state, chunk_inputs)
        if on_cuda_graphs:
            # CUDA-graph outputs live in memory the next replay overwrites; keep this chunk's results.
            state, log = tuple(part.clone() for part in state), log.clone()
        logs.append(log)
    return state, torch.cat(logs, dim=1)[:, :length]


def alive_steps(lengths: torch.LongTensor, length: int) -> torch.Tensor:
    """`(B, T)` mask that is 1 while a right-padded document still has tokens (in the dtype of a float mask)."""
    return torch.arange(length, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def gumbel_noise(shape: tuple[int, ...], reference: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise `-log(E)`, `E ~ Exponential(1)`: what `F.gumbel_softmax` adds to the logits."""
    return -torch.empty(shape, dtype=reference.dtype, device=reference.device).exponential_().log()


def _pad_steps(tensor: torch.Tensor, padding: int) -> torch.Tensor:
    shape = (tensor.shape[0], padding, *tensor.shape[2:])
    return torch.cat([tensor, tensor.new_zeros(shape)], dim=1)


__all__ = ["MEMORY_IMPLEMENTATIONS", "alive_steps", "compiled_chunk", "gumbel_noise", "run_in_chunks"]
