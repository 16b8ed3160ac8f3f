"""GPT2E (Entity-Transformers): GPT-2 equivalence of a model loaded from GPT-2 weights, the Entity-Transformer block
(section 3.1) against an independent per-token float64 reference, the entity state update (3.2), entity states
carried across windows and through the document store, the key/value cache and generation with entity ids,
causality, bad input, saving, portable loading (folder without the package, loopback Hub) and Trainer steps.

The reference is written from the paper and the choices the model documents: pre-LN entity attention
(`ln_entity`) with a residual; queries from the token states, keys from the entity representation of each token
through `e_attn`; values from the token states ("hidden") or the entity representations ("entities"); causal and
padding masks; the final hidden state (after `ln_f`) of the last token of an entity's last mention replaces it.
"""

import functools
import json
import math

import pytest
import torch
from conftest import saved_source
from test_hub_portability import NO_PACKAGE_PRELUDE, assert_ships_only_running_code, run_python, subprocess_env
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
    Trainer,
    TrainingArguments,
    pipeline,
)

import hf_entity_models.models.gpt2e.modeling_gpt2e as modeling_gpt2e
from hf_entity_models import CheckpointError, GPT2EConfig, GPT2EForCausalLM, GPT2EModel
from hf_entity_models.models.gpt2e import DocumentEntityStore, initial_entity_states, update_entity_states

VOCAB, MAX_ENTITIES = 97, 6
PAD = 0  # never drawn as a prompt token: generate() infers an attention mask from pad tokens in the prompt
NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny models: extra intra-op threads only add synchronisation on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny_config(**overrides) -> GPT2EConfig:
    """A tiny config of the paper's design (what most tests below check against their reference); tests of what
    both designs must do pass `entity_state` (see DESIGNS)."""
    values = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64, max_entities=MAX_ENTITIES,
                  entity_attention_size=16, bos_token_id=None, eos_token_id=None, entity_state="paper", **NO_DROPOUT)
    values.update(overrides)
    return GPT2EConfig(**values)


DESIGNS = ["memory", "paper"]
# The code a GPT2E checkpoint carries: what runs the model, no card or Hub code.
GPT2E_CODE_FILES = ("configuration_gpt2e.py", "modeling_gpt2e.py", "checkpoints.py")


def randomise_entity_attention(model, scale: float = 0.4) -> None:
    """Nonzero entity attention or memory (their output projections start at zero) and distinct layer norms
    everywhere, so that a wrong choice of layer norm, projection or mask shows in the outputs."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "entity_attn" in name or "entity_memory" in name:
                parameter.normal_(0.0, scale)
            elif ".ln_" in name or name.startswith(("ln_", "transformer.ln_")):
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)


def entity_lm(seed: int = 0, **overrides) -> GPT2EForCausalLM:
    torch.manual_seed(seed)
    model = GPT2EForCausalLM(tiny_config(**overrides)).eval()
    randomise_entity_attention(model)
    return model


def random_states(batch: int, config: GPT2EConfig, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, config.max_entities + 1, config.n_embd, generator=generator)


def random_inputs(batch: int, length: int, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(PAD + 1, VOCAB, (batch, length), generator=generator)
    entity_ids = torch.randint(0, MAX_ENTITIES + 1, (batch, length), generator=generator)
    return input_ids, entity_ids


# ------------------------------------------------------------------------------------------ GPT-2 equivalence
def gpt2_folder(tmp_path, head: bool):
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64, **NO_DROPOUT)
    gpt2 = (GPT2LMHeadModel if head else GPT2Model)(config).eval()
    with torch.no_grad():  # not the init values: loading must really map every weight
        for parameter in gpt2.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    folder = tmp_path / ("gpt2-lm" if head else "gpt2")
    gpt2.save_pretrained(folder)
    return gpt2, folder


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize("head", [True, False], ids=["GPT2LMHeadModel", "GPT2Model"])
def test_gpt2_weights_load_every_weight_and_compute_gpt2(tmp_path, head, design):
    gpt2, folder = gpt2_folder(tmp_path, head)
    gpt2_base = gpt2.transformer if head else gpt2
    input_ids, entity_ids = random_inputs(2, 12)
    mask = torch.ones_like(input_ids)
    mask[1, 8:] = 0  # right padding in row 1
    with torch.no_grad():
        expected = gpt2_base(input_ids, output_hidden_states=True)
        expected_logits = expected.last_hidden_state @ gpt2_base.wte.weight.T  # the tied LM head
        expected_padded = gpt2_base(input_ids, attention_mask=mask).last_hidden_state
    for ours_class in (GPT2EForCausalLM, GPT2EModel):  # either class from either kind of GPT-2 folder
        for implementation in ("eager", "sdpa"):
            ours, info = ours_class.from_pretrained(folder, attn_implementation=implementation,
                                                    output_loading_info=True, entity_state=design)
            ours.eval()
            assert ours.config.entity_state == design
            assert ours.config._attn_implementation == implementation
            assert info["unexpected_keys"] == set() and info["mismatched_keys"] == set()
            assert info["missing_keys"] and all("entity" in key for key in info["missing_keys"])
            base = ours.transformer if ours_class is GPT2EForCausalLM else ours
            ours_state, gpt2_state = base.state_dict(), gpt2_base.state_dict()
            for key, value in gpt2_state.items():
                torch.testing.assert_close(ours_state[key], value, rtol=0, atol=0, msg=key)
            assert {key for key in ours_state if key not in gpt2_state} == {k for k in ours_state if "entity" in k}
            outputs_into_residual = (
                [block.entity_attn.c_proj for block in base.h] if design == "paper" else [base.entity_memory.read]
            )
            for projection in outputs_into_residual:
                assert projection.weight.abs().max() == 0 == projection.bias.abs().max()
            with torch.no_grad():
                for entities in (None, entity_ids):
                    out = base(input_ids, entity_ids=entities, output_hidden_states=True)
                    torch.testing.assert_close(out.last_hidden_state, expected.last_hidden_state, rtol=0, atol=1e-5)
                    assert len(out.hidden_states) == len(expected.hidden_states)
                    for got, want in zip(out.hidden_states, expected.hidden_states):
                        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
                    if ours_class is GPT2EForCausalLM:
                        logits = ours(input_ids, entity_ids=entities).logits
                        torch.testing.assert_close(logits, expected_logits, rtol=0, atol=1e-5)
                        if head:
                            torch.testing.assert_close(logits, gpt2(input_ids).logits, rtol=0, atol=1e-5)
                states = random_states(2, ours.config)
                got = base(input_ids, entity_ids=entity_ids, entity_states=states, attention_mask=mask)
                got = got.last_hidden_state
                torch.testing.assert_close(got[0], expected_padded[0], rtol=0, atol=1e-5)
                torch.testing.assert_close(got[1, :8], expected_padded[1, :8], rtol=0, atol=1e-5)


def test_eager_and_sdpa_agree_with_entity_attention_and_padding():
    torch.manual_seed(0)
    eager = entity_lm(attn_implementation="eager")
    sdpa = GPT2EForCausalLM(tiny_config(attn_implementation="sdpa")).eval()
    sdpa.load_state_dict(eager.state_dict())
    assert sdpa.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    input_ids, entity_ids = random_inputs(2, 10)
    mask = torch.ones_like(input_ids)
    mask[1, 6:] = 0
    states = random_states(2, eager.config)
    with torch.no_grad():
        for attention_mask in (None, mask):
            a = eager(input_ids, entity_ids=entity_ids, entity_states=states, attention_mask=attention_mask)
            b = sdpa(input_ids, entity_ids=entity_ids, entity_states=states, attention_mask=attention_mask)
            real = slice(None) if attention_mask is None else mask.bool()
            torch.testing.assert_close(a.logits[real], b.logits[real], rtol=0, atol=1e-5)
            torch.testing.assert_close(a.entity_states, b.entity_states, rtol=0, atol=1e-5)


# -------------------------------------------------------------------------------- slow per-token reference
def _layer_norm(x, weights, prefix, eps):
    mean = x.mean()
    variance = ((x - mean) ** 2).mean()
    return (x - mean) / math.sqrt(variance + eps) * weights[prefix + ".weight"] + weights[prefix + ".bias"]


def _affine(x, weights, prefix):
    # Conv1D: weight (in, out)
    return x @ weights[prefix + ".weight"] + weights[prefix + ".bias"]


def _gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _causal_attention(queries, keys, values, heads):
    """Token by token, head by head: position i attends to positions 0..i."""
    head_size = len(queries[0]) // heads
    outputs = []
    for i, query in enumerate(queries):
        parts = []
        for h in range(heads):
            part = slice(h * head_size, (h + 1) * head_size)
            scores = torch.stack([query[part] @ keys[j][part] / math.sqrt(head_size) for j in range(i + 1)])
            weights = torch.softmax(scores, 0)
            parts.append(sum(weights[j] * values[j][part] for j in range(i + 1)))
        outputs.append(torch.cat(parts))
    return outputs


def reference_forward(model: GPT2EModel, input_ids: list[int], entity_ids: list[int], entity_states: torch.Tensor):
    """One unpadded row in float64, from the paper: h_0 = U W_e + W_p; per block GPT-2's pre-LN self-attention and
    feed-forward with residuals, then the entity attention (keys: the entity representation E[e_j] of token j);
    a final layer norm. Returns the final hidden states and the entity states after the row (3.2)."""
    config = model.config
    weights = {key: value.detach().double() for key, value in model.state_dict().items()}
    eps, size = config.layer_norm_epsilon, config.entity_attention_size
    states = entity_states.double()
    x = [weights["wte.weight"][token] + weights["wpe.weight"][t] for t, token in enumerate(input_ids)]
    for layer in range(config.n_layer):
        p = f"h.{layer}."
        normed = [_layer_norm(v, weights, p + "ln_1", eps) for v in x]
        qkv = [_affine(v, weights, p + "attn.c_attn") for v in normed]
        n = config.n_embd
        context = _causal_attention([v[:n] for v in qkv], [v[n : 2 * n] for v in qkv], [v[2 * n :] for v in qkv],
                                    config.n_head)
        x = [v + _affine(c, weights, p + "attn.c_proj") for v, c in zip(x, context)]
        x = [v + _affine(_gelu_new(_affine(_layer_norm(v, weights, p + "ln_2", eps), weights, p + "mlp.c_fc")),
                         weights, p + "mlp.c_proj") for v in x]
        normed = [_layer_norm(v, weights, p + "ln_entity", eps) for v in x]
        token_part = [_affine(v, weights, p + "entity_attn.q_attn") for v in normed]
        entity_part = [_affine(states[e], weights, p + "entity_attn.e_attn") for e in entity_ids]
        if config.entity_attention_values == "hidden":
            queries, values = [v[:size] for v in token_part], [v[size:] for v in token_part]
            keys = entity_part
        else:
            queries = token_part
            keys, values = [v[:size] for v in entity_part], [v[size:] for v in entity_part]
        context = _causal_attention(queries, keys, values, config.n_head)
        x = [v + _affine(c, weights, p + "entity_attn.c_proj") for v, c in zip(x, context)]
    final = torch.stack([_layer_norm(v, weights, "ln_f", eps) for v in x])
    new_states = states.clone()
    for t, entity in enumerate(entity_ids):  # in order: the last mention's last token is written last
        if entity != 0:
            new_states[entity] = final[t]
    return final, new_states


@pytest.mark.parametrize("values", ["hidden", "entities"])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_entity_transformer_blocks_match_the_per_token_reference(values, implementation):
    torch.manual_seed(0)
    model = GPT2EModel(tiny_config(entity_attention_values=values, attn_implementation=implementation)).eval()
    randomise_entity_attention(model)
    rows = [([5, 17, 3, 3, 60, 8, 91, 2, 44], [1, 0, 2, 1, 0, 3, 1, 2, 0]),
            ([9, 9, 31, 70, 12], [0, 4, 4, 1, 6])]  # row 1: right-padded to 9 tokens
    length = len(rows[0][0])
    input_ids = torch.tensor([ids + [0] * (length - len(ids)) for ids, _ in rows])
    entity_ids = torch.tensor([ents + [5] * (length - len(ents)) for _, ents in rows])  # padding carries an entity
    mask = torch.tensor([[1] * len(ids) + [0] * (length - len(ids)) for ids, _ in rows])
    states = random_states(2, model.config)
    with torch.no_grad():
        model_double = model.double()
        out = model_double(input_ids, entity_ids=entity_ids, entity_states=states.double(), attention_mask=mask)
    for row, (ids, ents) in enumerate(rows):
        expected, expected_states = reference_forward(model, ids, ents, states[row])
        torch.testing.assert_close(out.last_hidden_state[row, : len(ids)], expected, rtol=0, atol=1e-10)
        torch.testing.assert_close(out.entity_states[row], expected_states, rtol=0, atol=1e-10)
    # The entity attention changes the output: the reference is not just checking GPT-2.
    with torch.no_grad():
        for block in model_double.h:
            block.entity_attn.c_proj.weight.zero_()
            block.entity_attn.c_proj.bias.zero_()
        plain = model_double(input_ids, entity_ids=entity_ids, entity_states=states.double(), attention_mask=mask)
    assert (plain.last_hidden_state[0] - out.last_hidden_state[0]).abs().max() > 1e-2


# -------------------------------------------------------------------------------------- entity state update
def test_update_entity_states_by_hand():
    states = torch.arange(2 * 5 * 2, dtype=torch.float).view(2, 5, 2) + 100  # max_entities 4, hidden 2
    hidden = torch.arange(2 * 6 * 2, dtype=torch.float).view(2, 6, 2)  # hidden[b, t] = [12b + 2t, 12b + 2t + 1]
    entity_ids = torch.tensor([[1, 2, 1, 0, 1, 3], [2, 2, 0, 4, 4, 0]])
    token_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]]).bool()
    new = update_entity_states(states, entity_ids, hidden, token_mask)
    expected = states.clone()
    expected[0, 1] = torch.tensor([8.0, 9.0])  # entity 1: mentions at 0, 2, 4 -> position 4
    expected[0, 2] = torch.tensor([2.0, 3.0])  # entity 2: position 1
    # entity 3 only on padding (position 5): unchanged; entity 4 not mentioned: unchanged; row 0 unchanged
    expected[1, 2] = torch.tensor([14.0, 15.0])  # entity 2: positions 0, 1 -> 1
    expected[1, 4] = torch.tensor([18.0, 19.0])  # entity 4: position 3 (position 4 is padding)
    torch.testing.assert_close(new, expected, rtol=0, atol=0)
    torch.testing.assert_close(states, torch.arange(20, dtype=torch.float).view(2, 5, 2) + 100)  # input untouched


def test_the_model_returns_the_final_hidden_states_of_last_mentions_detached():
    torch.manual_seed(0)
    model = GPT2EModel(tiny_config())
    randomise_entity_attention(model)
    model.eval()
    input_ids, _ = random_inputs(2, 7)
    entity_ids = torch.tensor([[0, 2, 0, 2, 1, 0, 0], [3, 3, 0, 1, 0, 6, 6]])
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])  # row 1: entity 6 only on padding
    states = random_states(2, model.config)
    out = model(input_ids, entity_ids=entity_ids, entity_states=states, attention_mask=mask)
    hidden = out.last_hidden_state
    assert hidden.requires_grad and not out.entity_states.requires_grad
    expected = states.clone()
    expected[0, 2], expected[0, 1] = hidden[0, 3], hidden[0, 4]
    expected[1, 3], expected[1, 1] = hidden[1, 1], hidden[1, 3]
    torch.testing.assert_close(out.entity_states, expected.detach(), rtol=0, atol=0)
    fresh = model(input_ids, entity_ids=entity_ids).entity_states
    assert fresh[0, 0].eq(1).all() and fresh[0, 5].eq(1).all(), "unmentioned entities start as vectors of ones"


# ------------------------------------------------------------------------------------- windows and the store
@pytest.mark.parametrize("design", DESIGNS)
def test_entity_states_carry_over_windows(design):
    model = entity_lm(entity_state=design)
    first_ids, second_ids = torch.tensor([[4, 8, 15, 16, 23, 42]]), torch.tensor([[11, 22, 33, 44, 55]])
    first_entities = torch.tensor([[1, 1, 0, 2, 0, 0]])
    with torch.no_grad():
        first = model(first_ids, entity_ids=first_entities)
        recurring = torch.tensor([[0, 2, 0, 1, 0]])
        carried = model(second_ids, entity_ids=recurring, entity_states=first.entity_states).logits
        fresh = model(second_ids, entity_ids=recurring).logits
        explicit_fresh = model(second_ids, entity_ids=recurring,
                               entity_states=initial_entity_states(1, model.config)).logits
        torch.testing.assert_close(explicit_fresh, fresh, rtol=0, atol=0)
        assert (carried - fresh).abs().max() > 1e-3
        # Entities the first window never mentioned still hold their initial representation.
        new_entities = torch.tensor([[0, 3, 0, 4, 3]])
        torch.testing.assert_close(
            model(second_ids, entity_ids=new_entities, entity_states=first.entity_states).logits,
            model(second_ids, entity_ids=new_entities).logits, rtol=0, atol=1e-6,
        )


def test_the_document_store_refuses_windows_out_of_order_and_rows_without_a_window_index():
    """A window read out of order would get the states written by a later window of its document (information from
    further on in the text): the store refuses it, and refuses rows that do not say which window they are."""
    model = entity_lm()
    input_ids, entity_ids = random_inputs(2, 6, seed=3)
    documents = torch.tensor([10, 11])

    def read(windows):
        return model(input_ids, entity_ids=entity_ids, document_ids=documents, window_index=torch.tensor(windows))

    with torch.no_grad():
        with pytest.raises(ValueError, match="need window_index"):
            model(input_ids, entity_ids=entity_ids, document_ids=documents)
        for window in range(4):
            read([window, window])
        with pytest.raises(ValueError, match="arrives at window 1 after window 3.*later in the document"):
            read([0, 1])  # window 1 of document 11 after its window 3: it would read window 3's entities
        with pytest.raises(ValueError, match="after window 3.*read entities from a gap"):
            read([4, 5])
        with pytest.raises(ValueError, match="after window 3"):
            read([4, 3])  # the same window again would read its own states
        with pytest.raises(ValueError, match="numbered 0, 1, 2"):
            read([4, -1])
        read([4, 0])  # in order, and a restart at window 0, are both accepted after the refusals
        read([0, 1])
        with pytest.raises(ValueError, match="after window 0"):
            read([2, 2])
        model.reset_entity_stores()
        with pytest.raises(ValueError, match="never read"):
            read([1, 1])


@pytest.mark.parametrize("design", DESIGNS)
def test_the_document_store_matches_passing_states_by_hand(design):
    model = entity_lm(entity_state=design)
    windows = [random_inputs(2, 6, seed=s) for s in (3, 4, 5)]
    documents = torch.tensor([10, 11])
    with torch.no_grad():
        states, manual = None, []
        for input_ids, entity_ids in windows:
            out = model(input_ids, entity_ids=entity_ids, entity_states=states)
            states = out.entity_states
            manual.append(out.logits)
        for index, (input_ids, entity_ids) in enumerate(windows):
            out = model(input_ids, entity_ids=entity_ids, document_ids=documents,
                        window_index=torch.tensor([index, index]))
            torch.testing.assert_close(out.logits, manual[index], rtol=0, atol=0)
        assert len(model.entity_stores["eval"]) == 2 and len(model.entity_stores["train"]) == 0
        assert (manual[1] - model(windows[1][0], entity_ids=windows[1][1]).logits).abs().max() > 1e-3  # states matter
        # Window 0 starts a document afresh although the store holds it; the other document goes on to window 3.
        input_ids, entity_ids = windows[1]
        restarted = model(input_ids, entity_ids=entity_ids, document_ids=documents, window_index=torch.tensor([0, 3]))
        torch.testing.assert_close(restarted.logits[0], model(input_ids, entity_ids=entity_ids).logits[0])
        torch.testing.assert_close(
            restarted.logits[1],
            model(input_ids, entity_ids=entity_ids, entity_states=states).logits[1],
        )
        # Training reads and writes its own store: documents 10 and 11 are new there, so they cannot start at
        # window 1 (their entity states are unknown), only at window 0.
        model.train()
        with pytest.raises(ValueError, match="earlier windows were never read"):
            model(input_ids, entity_ids=entity_ids, document_ids=documents, window_index=torch.tensor([1, 1]))
        trained = model(input_ids, entity_ids=entity_ids, document_ids=documents, window_index=torch.tensor([0, 0]))
        model.eval()
        torch.testing.assert_close(trained.logits, model(input_ids, entity_ids=entity_ids).logits)
        assert set(model.entity_stores["train"]._states) == {10, 11}
        with pytest.raises(ValueError, match="repeat a document"):
            model(input_ids, entity_ids=entity_ids, document_ids=torch.tensor([7, 7]), window_index=torch.tensor([0, 0]))
        with pytest.raises(ValueError, match="not both"):
            model(input_ids, entity_ids=entity_ids, document_ids=documents, entity_states=states)
        model.reset_entity_stores()
        assert len(model.entity_stores["train"]) == len(model.entity_stores["eval"]) == 0


def test_the_store_keeps_detached_states_per_document():
    config = tiny_config()
    store = DocumentEntityStore()
    fresh = store.read(torch.tensor([3, 4]), torch.tensor([0, 0]), config, torch.device("cpu"), torch.float32)
    assert fresh.shape == (2, MAX_ENTITIES + 1, 32) and fresh.eq(1).all()
    written = random_states(2, config).requires_grad_()
    with pytest.raises(ValueError, match="Document 6 is written without being read"):
        store.write(torch.tensor([3, 6]), written * 2)
    store.write(torch.tensor([3, 4]), written * 2)
    read = store.read(torch.tensor([4, 3, 5]), torch.tensor([1, 0, 0]), config, torch.device("cpu"), torch.float32)
    torch.testing.assert_close(read[0], written[1].detach() * 2)
    assert read[1].eq(1).all() and read[2].eq(1).all() and not read.requires_grad
    with pytest.raises(ValueError, match="Document 5 arrives at window 2"):
        store.read(torch.tensor([5]), torch.tensor([2]), config, torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match="window_index"):
        store.read(torch.tensor([3, 4]), torch.tensor([1]), config, torch.device("cpu"), torch.float32)


# -------------------------------------------------------------------------------------- cache and generation
def test_incremental_decoding_with_the_cache_equals_a_full_pass():
    model = entity_lm()
    input_ids, entity_ids = random_inputs(2, 9)
    states = random_states(2, model.config)
    with torch.no_grad():
        full = model(input_ids, entity_ids=entity_ids, entity_states=states)
        step = model(input_ids[:, :4], entity_ids=entity_ids[:, :4], entity_states=states, use_cache=True)
        logits, cache = [step.logits], step.cache
        for t in range(4, 9):
            step = model(input_ids[:, t : t + 1], entity_ids=entity_ids[:, t : t + 1], entity_states=states,
                         cache=cache, use_cache=True)
            logits.append(step.logits)
            cache = step.cache
    torch.testing.assert_close(torch.cat(logits, 1), full.logits, rtol=0, atol=1e-5)
    assert len(cache.layers) == 2 * model.config.n_layer and cache.get_seq_length() == 9


def test_the_cache_goes_by_both_names_on_every_supported_transformers():
    """transformers 5.24 renamed `past_key_values` to `cache`; the output field follows the installed version (so
    `generate` finds it), both attribute names read it, and `forward` takes it under either name (once)."""
    model = entity_lm()
    input_ids, entity_ids = random_inputs(1, 6)
    with torch.no_grad():
        full = model(input_ids, entity_ids=entity_ids).logits
        first = model(input_ids[:, :4], entity_ids=entity_ids[:, :4], use_cache=True)
        assert list(first.keys()) == ["logits", modeling_gpt2e.CACHE_NAME, "entity_states"]
        assert first.cache is first.past_key_values is first[modeling_gpt2e.CACHE_NAME]
        old_name = model(input_ids[:, 4:], entity_ids=entity_ids[:, 4:], past_key_values=first.cache)
        torch.testing.assert_close(old_name.logits, full[:, 4:], rtol=0, atol=1e-5)
        cache = model(input_ids[:, :4], entity_ids=entity_ids[:, :4], use_cache=True).cache
        with pytest.raises(ValueError, match="Pass the key/value cache once"):
            model(input_ids[:, 4:], entity_ids=entity_ids[:, 4:], cache=cache, past_key_values=cache)
        base = model.transformer(input_ids, entity_ids=entity_ids, use_cache=True)
        assert base.cache is base.past_key_values and base.cache.get_seq_length() == 6


@pytest.mark.parametrize("design", DESIGNS)
def test_generate_reads_one_new_token_per_step_from_the_cache(design):
    """Each step after the prompt reads the newest token only, with the cache of everything before it: generate
    carries the cache under the installed transformers' name from output to the next forward."""
    model = entity_lm(entity_state=design)
    prompt, prompt_entities = random_inputs(1, 6)
    seen = []
    forward = model.forward

    def recording_forward(*args, **kwargs):
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        seen.append((kwargs["input_ids"].shape[1], cache.get_seq_length() if cache is not None else None))
        return forward(*args, **kwargs)

    model.forward = recording_forward
    with torch.no_grad():
        model.generate(prompt, entity_ids=prompt_entities, **_generation_kwargs())
    assert seen == [(6, 0), (1, 6), (1, 7), (1, 8), (1, 9)]


def _generation_kwargs(**extra):
    return dict(do_sample=False, max_new_tokens=5, output_logits=True, return_dict_in_generate=True, pad_token_id=PAD,
                **extra)


@pytest.mark.parametrize("design", DESIGNS)
def test_greedy_generation_with_entity_ids_follows_full_passes(design):
    model = entity_lm(entity_state=design)
    prompt, prompt_entities = random_inputs(1, 6)
    states = random_states(1, model.config)
    with torch.no_grad():
        generated = model.generate(prompt, entity_ids=prompt_entities, entity_states=states, **_generation_kwargs())
        sequence = generated.sequences
        # Generated tokens carry entity id 0.
        entities = torch.cat([prompt_entities, torch.zeros(1, sequence.shape[1] - 6, dtype=torch.long)], 1)
        full = model(sequence, entity_ids=entities, entity_states=states).logits
    for step, step_logits in enumerate(generated.logits):
        torch.testing.assert_close(step_logits, full[:, 5 + step], rtol=0, atol=1e-5)
        assert sequence[0, 6 + step] == full[0, 5 + step].argmax()
    # The entity ids of the prompt matter (entity states differ per entity).
    with torch.no_grad():
        other = model.generate(prompt, entity_ids=torch.zeros_like(prompt_entities), entity_states=states,
                               **_generation_kwargs())
    assert (other.logits[0] - generated.logits[0]).abs().max() > 1e-3


@pytest.mark.parametrize("design", DESIGNS)
def test_an_entity_id_policy_labels_generated_tokens(design):
    model = entity_lm(entity_state=design)
    prompt, prompt_entities = random_inputs(1, 6)
    states = random_states(1, model.config)
    calls = []

    def policy(input_ids, entity_ids):
        calls.append((input_ids.clone(), entity_ids.clone()))
        return torch.tensor([3])

    with torch.no_grad():
        default = model.generate(prompt, entity_ids=prompt_entities, entity_states=states, **_generation_kwargs())
        labelled = model.generate(prompt, entity_ids=prompt_entities, entity_states=states, entity_id_policy=policy,
                                  **_generation_kwargs())
        sequence = labelled.sequences
        entities = torch.cat([prompt_entities, torch.full((1, sequence.shape[1] - 6), 3)], 1)
        full = model(sequence, entity_ids=entities, entity_states=states).logits
    assert len(calls) == 4  # once per generated token that is fed back (the fifth is never read)
    for index, (seen_ids, seen_entities) in enumerate(calls):
        assert torch.equal(seen_ids, sequence[:, : 7 + index])
        assert seen_entities[0, :6].tolist() == prompt_entities[0].tolist()
        assert seen_entities[0, 6:].tolist() == [3] * index + [0]  # the newest one still 0
    torch.testing.assert_close(labelled.logits[0], default.logits[0], rtol=0, atol=0)  # same prompt step
    for step, step_logits in enumerate(labelled.logits):
        torch.testing.assert_close(step_logits, full[:, 5 + step], rtol=0, atol=1e-5)
    assert (labelled.logits[1] - default.logits[1]).abs().max() > 1e-3


@pytest.mark.parametrize("design", DESIGNS)
def test_left_padded_batches_generate_what_single_prompts_generate(design):
    model = entity_lm(entity_state=design)
    prompts = [random_inputs(1, 7, seed=8), random_inputs(1, 4, seed=9)]
    states = random_states(2, model.config)
    input_ids = torch.full((2, 7), PAD)
    entity_ids = torch.full((2, 7), 2)  # an entity id on padding too: the attention mask must keep it out
    mask = torch.zeros(2, 7, dtype=torch.long)
    for row, (ids, ents) in enumerate(prompts):
        length = ids.shape[1]
        input_ids[row, 7 - length :], entity_ids[row, 7 - length :], mask[row, 7 - length :] = ids[0], ents[0], 1
    with torch.no_grad():
        batch = model.generate(input_ids, entity_ids=entity_ids, attention_mask=mask, entity_states=states,
                               **_generation_kwargs())
        for row, (ids, ents) in enumerate(prompts):
            single = model.generate(ids, entity_ids=ents, entity_states=states[row : row + 1], **_generation_kwargs())
            assert batch.sequences[row, 7:].tolist() == single.sequences[0, ids.shape[1] :].tolist()
            for step in range(5):
                torch.testing.assert_close(batch.logits[step][row], single.logits[step][0], rtol=0, atol=1e-4)


# ------------------------------------------------------------------------------------------------- causality
@pytest.mark.parametrize("design", DESIGNS)
def test_future_tokens_and_entity_ids_never_change_earlier_logits(design):
    model = entity_lm(entity_state=design)
    input_ids, entity_ids = random_inputs(1, 10)
    states = random_states(1, model.config)
    with torch.no_grad():
        base = model(input_ids, entity_ids=entity_ids, entity_states=states).logits
        for t in (3, 7):
            changed_token, changed_entity = input_ids.clone(), entity_ids.clone()
            changed_token[0, t] = changed_token[0, t] % (VOCAB - 1) + 1
            changed_entity[0, t] = (changed_entity[0, t] + 1) % (MAX_ENTITIES + 1)
            for ids, ents in ((changed_token, entity_ids), (input_ids, changed_entity)):
                logits = model(ids, entity_ids=ents, entity_states=states).logits
                torch.testing.assert_close(logits[:, :t], base[:, :t], rtol=0, atol=1e-6)
                assert (logits[:, t:] - base[:, t:]).abs().max() > 1e-4


# ------------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "entity_ids, error, message",
    [
        (torch.zeros(1, 6, dtype=torch.long), ValueError, "one entity id per token"),
        (torch.zeros(1, 4, dtype=torch.long), ValueError, "one entity id per token"),
        (torch.zeros(2, 5, dtype=torch.long), ValueError, "one entity id per token"),
        (torch.tensor([[0, 1, -1, 0, 0]]), ValueError, ">= 0"),
        (torch.tensor([[0, 1, MAX_ENTITIES + 1, 0, 0]]), ValueError, "max_entities"),
        (torch.zeros(1, 5), TypeError, "integer tensor"),
        (torch.zeros(1, 5, dtype=torch.bool), TypeError, "integer tensor"),
        ([[0, 0, 0, 0, 0]], TypeError, "integer tensor"),
    ],
)
def test_bad_entity_ids_are_refused(entity_ids, error, message):
    model = GPT2EForCausalLM(tiny_config()).eval()
    with pytest.raises(error, match=message):
        model(torch.tensor([[1, 2, 3, 4, 5]]), entity_ids=entity_ids)
    model(torch.tensor([[1, 2, 3, 4, 5]]), entity_ids=torch.tensor([[0, 1, MAX_ENTITIES, 0, 0]]))  # the edges pass


@pytest.mark.parametrize(
    "entity_states",
    [torch.ones(1, MAX_ENTITIES, 32), torch.ones(2, MAX_ENTITIES + 1, 32), torch.ones(1, MAX_ENTITIES + 1, 16),
     torch.ones(MAX_ENTITIES + 1, 32), "states"],
)
def test_bad_entity_states_are_refused(entity_states):
    model = GPT2EForCausalLM(tiny_config()).eval()
    with pytest.raises(ValueError, match=r"entity_states must have shape \(batch, max_entities \+ 1, n_embd\)"):
        model(torch.tensor([[1, 2, 3]]), entity_states=entity_states)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(entity_attention_size=10), "multiple of n_head"),
        (dict(entity_attention_size=0), "multiple of n_head"),
        (dict(entity_attention_values="keys"), "entity_attention_values"),
        (dict(max_entities=0), "max_entities"),
        (dict(max_entities=-3), "max_entities"),
        (dict(add_cross_attention=True), "add_cross_attention"),
    ],
)
def test_bad_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**fields)


def test_generation_past_n_positions_is_refused_before_the_first_step():
    model = entity_lm()  # n_positions=64: prompt + max_new_tokens may be at most 65 (the last token is never read)
    calls = []
    forward = model.forward
    model.forward = lambda *args, **kwargs: calls.append(1) or forward(*args, **kwargs)
    prompt = torch.randint(1, VOCAB, (1, 60), generator=torch.Generator().manual_seed(3))
    options = dict(do_sample=False, pad_token_id=PAD)
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"prompt \(60 tokens\) \+ max_new_tokens \(10\) = 70 tokens exceeds the "
                           r"model's n_positions=64.*lower max_new_tokens to at most 5 or keep only the last 55"):
            model.generate(prompt, max_new_tokens=10, **options)
        with pytest.raises(ValueError, match="keep only the last 60 prompt tokens"):
            model.generate(torch.cat([prompt, prompt], 1), max_new_tokens=5, **options)
        assert not calls
        assert model.generate(prompt, max_new_tokens=5, **options).shape == (1, 65)  # exactly fits


def test_explicit_position_ids_beyond_the_position_embeddings_are_refused():
    model = entity_lm()
    input_ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match=r"position_ids run from 62 to 64.*n_positions=64"):
        model(input_ids, position_ids=torch.tensor([[62, 63, 64]]))
    with pytest.raises(ValueError, match=r"position_ids run from -1 to 1"):
        model(input_ids, position_ids=torch.tensor([[-1, 0, 1]]))


@pytest.mark.parametrize("shape", [(1, 0), (0, 5), (0, 0)])
def test_empty_inputs_are_refused_with_their_shape(shape):
    model = entity_lm()
    input_ids = torch.zeros(shape, dtype=torch.long)
    pattern = rf"input_ids has shape \({shape[0]}, {shape[1]}\).*at least one row of at least one token"
    with pytest.raises(ValueError, match=pattern):
        model(input_ids)
    with pytest.raises(ValueError, match=pattern):
        model.transformer(input_ids, entity_ids=torch.zeros(shape, dtype=torch.long))
    with pytest.raises(ValueError, match=r"inputs_embeds has shape"):
        model(inputs_embeds=torch.zeros(*shape, model.config.n_embd))


def test_generation_refuses_entity_ids_that_do_not_match_the_prompt():
    model = GPT2EForCausalLM(tiny_config()).eval()
    with pytest.raises(ValueError, match="one entity id per prompt token"):
        model.generate(torch.tensor([[1, 2, 3]]), entity_ids=torch.tensor([[0, 1]]), max_new_tokens=2,
                       do_sample=False, pad_token_id=0)


# ------------------------------------------------------------------------------------- saving and loading
@pytest.mark.parametrize("design", DESIGNS)
def test_save_and_load_through_auto_model_for_causal_lm(tmp_path, design):
    model = entity_lm(entity_state=design)
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is GPT2EForCausalLM and loaded.config.model_type == "gpt2e"
    input_ids, entity_ids = random_inputs(2, 8)
    states = random_states(2, model.config)
    with torch.no_grad():
        expected = model(input_ids, entity_ids=entity_ids, entity_states=states)
        got = loaded(input_ids, entity_ids=entity_ids, entity_states=states)
    torch.testing.assert_close(got.logits, expected.logits, rtol=0, atol=0)
    torch.testing.assert_close(got.entity_states, expected.entity_states, rtol=0, atol=0)
    assert loaded.lm_head.weight.data_ptr() == loaded.transformer.wte.weight.data_ptr()


@pytest.mark.parametrize("design", DESIGNS)
def test_missing_entity_weights_load_finite_and_start_at_zero(tmp_path, design):
    from safetensors.torch import load_file, save_file

    entity_lm(entity_state=design).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    kept = {name: tensor for name, tensor in weights.items() if "entity_attn" not in name and "entity_memory" not in name}
    assert len(kept) < len(weights)
    save_file(kept, tmp_path / "model.safetensors", metadata={"format": "pt"})
    # from_pretrained refuses a checkpoint that lacks weights its config asks for ...
    with pytest.raises(CheckpointError, match=r"model.safetensors does not fit .*it lacks \d+ weights the config asks "
                                              r"for \(transformer.*entity_"):
        GPT2EForCausalLM.from_pretrained(tmp_path)
    # ... and strict=False loads as transformers does: they start as in a fresh model, never from leftover memory.
    loaded = GPT2EForCausalLM.from_pretrained(tmp_path, strict=False).eval()
    assert loaded.config.entity_state == design
    assert all(torch.isfinite(p).all() for p in loaded.parameters())
    if design == "paper":
        for block in loaded.transformer.h:
            assert block.entity_attn.c_proj.weight.abs().max() == 0 and block.entity_attn.c_proj.bias.abs().max() == 0
            assert block.entity_attn.q_attn.weight.abs().max() > 0  # initialised, not left at zero
    else:
        read = loaded.transformer.entity_memory.read
        assert read.weight.abs().max() == 0 and read.bias.abs().max() == 0
    # With the entity attention (memory read) at zero, entity ids no longer change anything.
    input_ids, entity_ids = random_inputs(1, 6)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids, entity_ids=entity_ids).logits, loaded(input_ids).logits)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A saved GPT2E language model with the real GPT-2 tokenizer, and its outputs computed in this process."""
    from conftest import SHARED_DATA

    folder = tmp_path_factory.mktemp("gpt2e-portable")
    tokenizer = AutoTokenizer.from_pretrained(SHARED_DATA / "tokenizers" / "gpt2")
    torch.manual_seed(0)
    model = GPT2EForCausalLM(tiny_config(vocab_size=len(tokenizer), n_embd=16, n_head=2, n_layer=1,
                                         entity_state="memory")).eval()
    randomise_entity_attention(model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    input_ids = tokenizer("Zoe met Maggie in Paris. She", return_tensors="pt").input_ids
    entity_ids = torch.zeros_like(input_ids)
    entity_ids[0, 0], entity_ids[0, 2], entity_ids[0, -1] = 1, 2, 1
    with torch.no_grad():
        logits = model(input_ids, entity_ids=entity_ids).logits
        generated = model.generate(input_ids, entity_ids=entity_ids, max_new_tokens=4, do_sample=False,
                                   pad_token_id=tokenizer.eos_token_id)
        short_prompt = tokenizer("Zoe met Maggie", return_tensors="pt").input_ids
        greedy = model.generate(short_prompt, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    text = pipeline("text-generation", model=str(folder), device="cpu")("Zoe met Maggie", max_new_tokens=4,
                                                                        do_sample=False)
    return dict(folder=folder, model=model, input_ids=input_ids, entity_ids=entity_ids, logits=logits,
                generated=generated, text=text, greedy_text=tokenizer.decode(greedy[0]))


# argv[1]: JSON {"locations": [...], "input_ids": [...], "entity_ids": [...]}
REMOTE_LM = NO_PACKAGE_PRELUDE + r'''
import json
import torch
from transformers import AutoModelForCausalLM, pipeline

job = json.loads(open(sys.argv[1]).read())
results = []
for location in job["locations"]:
    try:
        AutoModelForCausalLM.from_pretrained(location)
        refused = None
    except Exception as error:
        refused = f"{type(error).__name__}: {error}"
    model = AutoModelForCausalLM.from_pretrained(location, trust_remote_code=True).eval()
    input_ids, entity_ids = torch.tensor(job["input_ids"]), torch.tensor(job["entity_ids"])
    with torch.no_grad():
        logits = model(input_ids, entity_ids=entity_ids).logits
        generated = model.generate(input_ids, entity_ids=entity_ids, max_new_tokens=4, do_sample=False,
                                   pad_token_id=model.config.eos_token_id)
    pipe = pipeline("text-generation", model=location, trust_remote_code=True, device="cpu")
    results.append({
        "refused": refused,
        "model_class": type(model).__name__,
        "model_module": type(model).__module__,
        "logits": logits.tolist(),
        "generated": generated.tolist(),
        "text": pipe("Zoe met Maggie", max_new_tokens=4, do_sample=False),
    })
print("\nRESULT " + json.dumps({"results": results,
                                 "package_imported": any(m.startswith("hf_entity_models") for m in sys.modules)}))
'''

PUSH = r'''
import json, sys
from transformers import AutoTokenizer
from hf_entity_models import GPT2EForCausalLM
folder, repo_id = sys.argv[1:3]
commits = [str(GPT2EForCausalLM.from_pretrained(folder).push_to_hub(repo_id)),
           str(AutoTokenizer.from_pretrained(folder).push_to_hub(repo_id))]
print("RESULT " + json.dumps({"commits": commits}))
'''


def test_a_saved_checkpoint_carries_its_code_and_generates_text(checkpoint):
    folder = checkpoint["folder"]
    stored = json.loads((folder / "config.json").read_text())
    assert stored["model_type"] == "gpt2e"
    assert stored["auto_map"] == {"AutoConfig": "configuration_gpt2e.GPT2EConfig",
                                  "AutoModelForCausalLM": "modeling_gpt2e.GPT2EForCausalLM"}
    for name in ("configuration_gpt2e.py", "modeling_gpt2e.py"):
        assert (folder / name).read_text() == saved_source(modeling_gpt2e.__file__.replace("modeling_gpt2e.py", name))
    # Only the code that runs the model (the card is written by the package, not shipped as code).
    assert_ships_only_running_code((path.name for path in folder.glob("*.py")), GPT2E_CODE_FILES)
    assert "GPT2E" in (folder / "README.md").read_text()
    [answer] = checkpoint["text"]
    assert answer["generated_text"] == checkpoint["greedy_text"]
    assert len(answer["generated_text"]) > len("Zoe met Maggie")


def test_the_checkpoint_loads_without_the_package_from_a_folder_and_from_the_hub(checkpoint, tmp_path):
    from hub_server import LoopbackHub

    repo_id = "tester/gpt2e-tiny"
    job = dict(locations=[str(checkpoint["folder"]), repo_id], input_ids=checkpoint["input_ids"].tolist(),
               entity_ids=checkpoint["entity_ids"].tolist())
    (tmp_path / "job.json").write_text(json.dumps(job))
    with LoopbackHub() as hub:
        pushed = run_python(PUSH, str(checkpoint["folder"]), repo_id,
                            env=subprocess_env(tmp_path / "hf_push", hub.endpoint), cwd=tmp_path)
        remote = run_python(REMOTE_LM, str(tmp_path / "job.json"),
                            env=subprocess_env(tmp_path / "hf_remote", hub.endpoint), cwd=tmp_path)
        files = hub.files(repo_id)
        unhandled = list(hub.unhandled)
    assert unhandled == []
    assert all(commit.startswith(f"{hub.endpoint}/{repo_id}/commit/") for commit in pushed["commits"])
    assert {"model.safetensors", "config.json", "README.md", "tokenizer.json", "modeling_gpt2e.py",
            "configuration_gpt2e.py", "checkpoints.py"} <= set(files)
    assert_ships_only_running_code(files, GPT2E_CODE_FILES)
    assert files["model.safetensors"] == (checkpoint["folder"] / "model.safetensors").read_bytes()
    assert not remote["package_imported"]
    for result in remote["results"]:
        assert result["refused"] is not None and "trust_remote_code" in result["refused"]
        assert result["model_class"] == "GPT2EForCausalLM"
        assert result["model_module"].startswith("transformers_modules.")
        torch.testing.assert_close(torch.tensor(result["logits"]), checkpoint["logits"], rtol=1e-5, atol=1e-6)
        assert result["generated"] == checkpoint["generated"].tolist()
        assert result["text"] == checkpoint["text"]


# --------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("design", DESIGNS)
def test_trainer_steps_lower_the_loss_and_fill_the_store(tmp_path, design):
    torch.manual_seed(0)
    model = GPT2EForCausalLM(tiny_config(entity_state=design))
    randomise_entity_attention(model, scale=0.1)
    # Two documents of two windows; batches pair the documents' windows: [d0 w0, d1 w0], [d0 w1, d1 w1].
    windows = {(document, window): random_inputs(1, 8, seed=10 * document + window + 20)
               for document in (0, 1) for window in (0, 1)}
    rows = []
    for window in (0, 1):
        for document in (0, 1):
            input_ids, entity_ids = windows[document, window]
            rows.append(dict(input_ids=input_ids[0], entity_ids=entity_ids[0], document_ids=document,
                             window_index=window, labels=input_ids[0]))
    arguments = TrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=15, per_device_train_batch_size=2, learning_rate=3e-3,
        lr_scheduler_type="constant", save_strategy="no", logging_steps=1, report_to="none", disable_tqdm=True,
        use_cpu=True, seed=0, train_sampling_strategy="sequential",
    )
    seen, last_output = [], {}
    original_forward = model.forward

    @functools.wraps(original_forward)  # the Trainer keeps the columns named in the signature
    def recording_forward(*args, **kwargs):
        seen.append((kwargs["document_ids"].tolist(), kwargs["window_index"].tolist()))
        last_output["entity_states"] = (output := original_forward(*args, **kwargs)).entity_states
        return output

    model.forward = recording_forward
    trainer = Trainer(model=model, args=arguments, train_dataset=rows)
    trainer.train()
    assert seen == [([0, 1], [0, 0]), ([0, 1], [1, 1])] * 15
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 30 and losses[-1] < losses[0] - 1.0, losses
    store = model.entity_stores["train"]
    assert set(store._states) == {0, 1} and len(model.entity_stores["eval"]) == 0
    for document in (0, 1):
        states = store._states[document]
        torch.testing.assert_close(states, last_output["entity_states"][document].detach(), rtol=0, atol=0)
        mentioned = (set(windows[document, 0][1][0].tolist()) | set(windows[document, 1][1][0].tolist())) - {0}
        initial = 0.0 if design == "memory" else 1.0
        for entity in range(MAX_ENTITIES + 1):
            assert bool(states[entity].eq(initial).all()) == (entity not in mentioned), (document, entity)


def test_a_policy_needs_the_prompt_entity_ids_and_a_passed_cache_is_used_in_training_mode_too():
    model = entity_lm()
    input_ids, entity_ids = random_inputs(1, 6)
    with pytest.raises(ValueError, match="pass the prompt's entity_ids"):
        model.generate(input_ids, entity_id_policy=lambda ids, entities: entities[:, -1], **_generation_kwargs())
    states = random_states(1, model.config)
    with torch.no_grad():
        full = model(input_ids, entity_ids=entity_ids, entity_states=states).logits
        cache = model(input_ids[:, :4], entity_ids=entity_ids[:, :4], entity_states=states, use_cache=True).cache
        model.train()  # no dropout in the tiny config: training mode changes only the cache default
        rest = model(input_ids[:, 4:], entity_ids=entity_ids[:, 4:], entity_states=states, cache=cache).logits
    torch.testing.assert_close(rest, full[:, 4:], rtol=0, atol=1e-5)


def test_inputs_beyond_the_position_embeddings_are_refused():
    model = entity_lm()
    too_long = torch.zeros(1, model.config.n_positions + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="beyond the model's n_positions"):
        model(too_long)


# ------------------------------------------------------------------------------------------ the entity memory
def memory_reference(entity_states, entity_ids, values, gate_logits, token_mask):
    """The memory's recurrence token by token: s_k <- (1 - g) s_k + g v at every mention of k, in order."""
    states, out = entity_states.clone(), torch.zeros_like(values)
    for row in range(entity_ids.shape[0]):
        for t in range(entity_ids.shape[1]):
            entity = int(entity_ids[row, t])
            if entity == 0 or not token_mask[row, t]:
                continue
            gate = torch.sigmoid(gate_logits[row, t])
            states[row, entity] = (1 - gate) * states[row, entity] + gate * values[row, t]
            out[row, t] = states[row, entity]
    return out, states


def test_entity_memory_states_match_the_token_by_token_recurrence():
    generator = torch.Generator().manual_seed(0)
    batch, length, entities, width = 3, 19, 4, 5
    entity_ids = torch.randint(0, entities + 1, (batch, length), generator=generator)
    token_mask = torch.rand(batch, length, generator=generator) > 0.2
    before = torch.randn(batch, entities + 1, width, generator=generator, dtype=torch.float64)
    values = torch.randn(batch, length, width, generator=generator, dtype=torch.float64)
    gate_logits = 4 * torch.randn(batch, length, generator=generator, dtype=torch.float64)  # gates near 0 and 1 too
    got = modeling_gpt2e.entity_memory_states(before, entity_ids, values, gate_logits, token_mask)
    want, after = memory_reference(before, entity_ids, values, gate_logits, token_mask)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    # The states returned for the next window: each entity's state after its last mention, the others unchanged.
    torch.testing.assert_close(update_entity_states(before, entity_ids, got, token_mask), after, rtol=1e-10, atol=1e-10)


def test_the_memory_model_matches_a_reference_of_its_layers():
    """GPT2EModel with the memory = GPT-2's blocks, then after block `entity_memory_layer` the memory written from
    layer norms of the hidden state and the token embedding, read through `read` at the mentions only."""
    model = entity_lm(entity_state="memory", n_layer=3, entity_memory_layer=1).transformer.double()
    input_ids, entity_ids = random_inputs(2, 11)
    states = random_states(2, model.config).double()
    embeddings = model.wte(input_ids)
    hidden = embeddings + model.wpe(torch.arange(11))
    memory = model.entity_memory
    with torch.no_grad():
        for index, block in enumerate(model.h):
            hidden = hidden + block.attn(block.ln_1(hidden), None, None)
            hidden = hidden + block.mlp(block.ln_2(hidden))
            if index == 1:
                normalise = functools.partial(torch.nn.functional.layer_norm, normalized_shape=(32,), eps=1e-5)
                values = normalise(hidden) + normalise(embeddings)
                gate_logits = values @ memory.gate.weight[:, 0] + memory.gate.bias[0]
                read_states, after = memory_reference(states, entity_ids, values, gate_logits,
                                                      torch.ones_like(entity_ids, dtype=torch.bool))
                read = read_states @ memory.read.weight + memory.read.bias
                hidden = hidden + read * (entity_ids != 0).unsqueeze(-1)
        expected = model.ln_f(hidden)
        got = model(input_ids, entity_ids=entity_ids, entity_states=states)
    torch.testing.assert_close(got.last_hidden_state, expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(got.entity_states, after, rtol=1e-9, atol=1e-9)


def test_the_memory_makes_the_first_window_see_earlier_mentions():
    """Fresh entity states (a document's first window): a later mention of an entity reads what its earlier
    mentions wrote, so the ids change its logits; the paper's design cannot (every entity is the same ones)."""
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
    entity_ids = torch.tensor([[1, 0, 0, 0, 1, 0, 0, 0]])
    for design, matters in (("memory", True), ("paper", False)):
        model = entity_lm(entity_state=design)
        with torch.no_grad():
            with_ids = model(input_ids, entity_ids=entity_ids).logits
            renumbered = model(input_ids, entity_ids=torch.tensor([[1, 0, 0, 0, 2, 0, 0, 0]])).logits
        assert ((with_ids[0, 4] - renumbered[0, 4]).abs().max() > 1e-3) == matters, design
        torch.testing.assert_close(with_ids[0, :4], renumbered[0, :4], rtol=0, atol=1e-6)


def test_reading_a_window_in_pieces_with_the_memory_equals_reading_it_at_once():
    """Incremental decoding: each piece reads the cache and the entity states returned for the tokens before it."""
    model = entity_lm(entity_state="memory")
    input_ids, entity_ids = random_inputs(2, 9)
    entity_ids[:, 2] = entity_ids[:, 8] = 3  # the last token mentions an entity mentioned earlier in the window
    states = random_states(2, model.config)
    with torch.no_grad():
        full = model(input_ids, entity_ids=entity_ids, entity_states=states)
        step = model(input_ids[:, :4], entity_ids=entity_ids[:, :4], entity_states=states, use_cache=True)
        logits = [step.logits]
        for t in range(4, 9):
            step = model(input_ids[:, t : t + 1], entity_ids=entity_ids[:, t : t + 1],
                         entity_states=step.entity_states, cache=step.cache, use_cache=True)
            logits.append(step.logits)
        # Kept fixed instead, the states of before the window miss what this window's mentions wrote.
        fixed = model(input_ids[:, 8:], entity_ids=entity_ids[:, 8:], entity_states=states,
                      cache=model(input_ids[:, :8], entity_ids=entity_ids[:, :8], entity_states=states,
                                  use_cache=True).cache)
    torch.testing.assert_close(torch.cat(logits, 1), full.logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(step.entity_states, full.entity_states, rtol=0, atol=1e-5)
    assert len(step.cache.layers) == model.config.n_layer  # no entity attention layers in the cache
    assert (fixed.logits - full.logits[:, 8:]).abs().max() > 1e-4


def test_the_memory_passes_gradients_through_carried_states_on_request_and_the_store_detaches_them():
    model = entity_lm(entity_state="memory").train()
    input_ids, entity_ids = random_inputs(2, 6)
    first = model(input_ids, entity_ids=entity_ids, keep_entity_state_graph=True)
    assert first.entity_states.requires_grad  # truncated back-propagation across the window boundary, when asked
    second = model(input_ids, entity_ids=entity_ids, entity_states=first.entity_states)
    second.logits.sum().backward()
    assert model.transformer.entity_memory.gate.weight.grad.abs().max() > 0
    stored = model(input_ids, entity_ids=entity_ids, document_ids=torch.tensor([1, 2]), window_index=torch.tensor([0, 0]),
                   keep_entity_state_graph=True)
    assert not model.entity_stores["train"]._states[1].requires_grad and stored.entity_states.requires_grad


def test_the_memory_starts_documents_at_zero_and_never_writes_the_no_entity_row():
    model = entity_lm(entity_state="memory")
    input_ids, entity_ids = random_inputs(2, 10)
    with torch.no_grad():
        states = model(input_ids, entity_ids=entity_ids).entity_states
    assert initial_entity_states(2, model.config).eq(0).all()
    assert states[:, 0].eq(0).all()
    mentioned = torch.zeros(2, MAX_ENTITIES + 1, dtype=torch.bool).scatter(1, entity_ids, True)
    mentioned[:, 0] = False
    assert states[mentioned].abs().amax(-1).gt(0).all() and states[~mentioned].eq(0).all()


def test_beam_search_with_entity_ids_is_refused_by_the_memory_only():
    prompt, prompt_entities = random_inputs(1, 5)
    memory = entity_lm(entity_state="memory")
    with pytest.raises(ValueError, match="num_beams=2 with entity ids"):
        memory.generate(prompt, entity_ids=prompt_entities, num_beams=2, max_new_tokens=2, pad_token_id=PAD)
    with pytest.raises(ValueError, match="or an entity_id_policy"):
        memory.generate(prompt, entity_ids=torch.zeros_like(prompt), entity_id_policy=lambda ids, ents: ents[:, -1],
                        num_beams=2, max_new_tokens=2, pad_token_id=PAD)
    memory.generate(prompt, num_beams=2, max_new_tokens=2, pad_token_id=PAD)  # no entities: nothing to reorder
    entity_lm(entity_state="paper").generate(prompt, entity_ids=prompt_entities, num_beams=2, max_new_tokens=2,
                                             pad_token_id=PAD)


# ---------------------------------------------------------------------------------------------------- config
def test_presets_name_the_designs_and_old_configs_load_as_the_paper_design(tmp_path):
    assert GPT2EConfig().entity_state == "memory" and GPT2EConfig().preset == "entity-memory"
    assert GPT2EConfig.from_preset("paper", n_layer=4).preset == "paper"
    assert [GPT2EConfig(n_layer=n).entity_memory_layer for n in (1, 2, 3, 4, 12)] == [0, 0, 1, 2, 6]
    with pytest.raises(ValueError, match="Unknown GPT2E preset"):
        GPT2EConfig.from_preset("memory")
    # A GPT2E config saved before `entity_state` existed was trained with the paper's entity attention.
    saved = tiny_config().to_dict()
    del saved["entity_state"], saved["entity_memory_layer"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert GPT2EConfig.from_pretrained(tmp_path).entity_state == "paper"
    # A GPT-2 config is not a saved GPT2E config: it gets the default design.
    GPT2Config(n_layer=2, n_embd=32, n_head=4).save_pretrained(tmp_path)
    assert GPT2EConfig.from_pretrained(tmp_path).entity_state == "memory"


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(entity_state="attention"), "entity_state must be one of"),
        (dict(entity_memory_layer=2), r"entity_memory_layer must be a block index in 0..1"),
        (dict(entity_memory_layer=-1), "entity_memory_layer must be a block index"),
    ],
)
def test_bad_memory_configs_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**fields)
