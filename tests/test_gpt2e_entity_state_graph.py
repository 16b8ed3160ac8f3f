"""GPT2E's `entity_states` come back detached, so a hand-written loop that carries them from window to window and
calls `backward()` once per window works; `keep_entity_state_graph=True` keeps the graph (truncated
back-propagation through several windows)."""

import pytest
import torch

from hf_entity_models import GPT2EConfig, GPT2EForCausalLM

VOCAB, MAX_ENTITIES = 40, 4


def tiny_lm(entity_state: str) -> GPT2EForCausalLM:
    torch.manual_seed(0)
    config = GPT2EConfig(n_layer=2, n_embd=16, n_head=2, vocab_size=VOCAB, n_positions=32, max_entities=MAX_ENTITIES,
                         entity_attention_size=8, bos_token_id=None, eos_token_id=None, entity_state=entity_state,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2EForCausalLM(config).train()
    with torch.no_grad():  # the memory's read starts at zero: make the carried states matter
        for name, parameter in model.named_parameters():
            if "entity_memory" in name or "entity_attn" in name:
                parameter.normal_(0.0, 0.3)
    return model


def windows(count: int = 2, length: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randint(1, VOCAB, (2, length), generator=generator),
             torch.randint(0, MAX_ENTITIES + 1, (2, length), generator=generator)) for _ in range(count)]


@pytest.mark.parametrize("entity_state", ["memory", "paper"])
def test_a_hand_written_loop_carries_the_states_and_steps_once_per_window(entity_state):
    model = tiny_lm(entity_state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    states = None
    for input_ids, entity_ids in windows():  # the README's "pass them with the next window"
        output = model(input_ids, entity_ids=entity_ids, entity_states=states, labels=input_ids)
        output.loss.backward()  # the second window's used to fail: "backward through the graph a second time"
        optimizer.step()
        optimizer.zero_grad()
        states = output.entity_states
        assert not states.requires_grad
    assert states.abs().sum() > 0


def test_keep_entity_state_graph_back_propagates_into_the_previous_window():
    model = tiny_lm("memory")
    (first_ids, first_entities), (second_ids, second_entities) = windows()
    first = model(first_ids, entity_ids=first_entities, keep_entity_state_graph=True)
    assert first.entity_states.requires_grad and first.entity_states.grad_fn is not None
    carried = first.entity_states
    carried.retain_grad()
    second = model(second_ids, entity_ids=second_entities, entity_states=carried, labels=second_ids)
    second.loss.backward()
    assert carried.grad is not None and carried.grad.abs().sum() > 0  # the second window's loss reached the first
    # The default detaches: the same second window's loss then stops at the boundary.
    detached = model(first_ids, entity_ids=first_entities).entity_states
    assert not detached.requires_grad
    torch.testing.assert_close(detached, carried.detach())
