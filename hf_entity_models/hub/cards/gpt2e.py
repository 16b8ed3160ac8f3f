"""What the model card of a GPT2E checkpoint says about the model: overview, configuration table, limits, citation,
usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by `hub/model_cards.py`;
the package writes the card when it saves or pushes a model (the checkpoint does not carry this file).
"""

from ..measured_figures import GPT2E_RECALL
from ..model_cards import ModelCardSpec

from ...models.gpt2e.configuration_gpt2e import GPT2EConfig

_CITATION = """@inproceedings{stylianou2021et,
  title = {E.T.: Entity-Transformers. Coreference augmented Neural Language Model for richer mention representations via Entity-Transformer blocks},
  author = {Stylianou, Nikolaos and Vlahavas, Ioannis},
  booktitle = {Proceedings of the Fourth Workshop on Computational Models of Reference, Anaphora and Coreference},
  year = {2021}
}"""


def _overview(config: GPT2EConfig, class_name: str) -> str:
    common = (
        "A GPT2E language model (Stylianou and Vlahavas, 2021, *E.T.: Entity-Transformers*), packaged with the "
        "`hf-entity-models` package. Besides its tokens, the model reads one entity id per token (0 = not part of a "
        "mention; coreferent mentions share an id) and keeps one state per entity; `forward` takes and returns the "
        "entity states, as it does the key/value cache, so that a document longer than one window carries its "
        "entities on. "
    )
    if config.entity_state == "memory":
        return common + (
            "This model uses the **entity memory** (`entity_state=\"memory\"`, the package's default design): after "
            f"block {config.entity_memory_layer} (of {config.n_layer}) every mention token writes a gated update of "
            "its entity's state, s <- (1 - g) s + g v, where v is the layer norm of the token's hidden state there "
            "plus that of its token embedding and the gate g is learned, and then reads its entity's state back "
            "into the residual stream through a projection that starts at zero. A mention therefore sees what "
            "every earlier mention of its entity wrote, in its own window and in earlier ones."
        )
    return common + (
        "This model uses the **paper's design** (`entity_state=\"paper\"`): every block is an Entity-Transformer "
        "block that attends, after GPT-2's self-attention and feed-forward layers, over the entity representations "
        "of the tokens (entity attention); an entity's representation is a vector of ones until a window ends, then "
        "the final hidden state of its last mention."
    )


def _config_rows(config: GPT2EConfig, class_name: str) -> list[tuple[str, str]]:
    rows = [
        ("Layers / width / heads", f"{config.n_layer} / {config.n_embd} / {config.n_head}"),
        ("Context window", str(config.n_positions)),
        ("Vocabulary", str(config.vocab_size)),
        ("Entity store", f"{config.max_entities} entities per document"),
        ("Design (preset)", f"{config.entity_state} ({config.preset})"),
    ]
    if config.entity_state == "memory":
        rows.append(("Entity memory", f"written and read after block {config.entity_memory_layer}"))
    else:
        rows.append(
            ("Entity attention", f"keys from the entities, values from the "
                                 f"{'entities' if config.entity_attention_values == 'entities' else 'token states'}, "
                                 f"width {config.entity_attention_size}")
        )
    return rows


_WHY_THE_MEMORY = (
    "Why the entity memory is the default and the paper's reading a preset: on a recall task (two windows per "
    "document; window 0 names two entities, window 1 says \"he NAME\" for each, a window-local model can do no "
    f"better than ln 16 = {GPT2E_RECALL['window_local_level_nats']:.2f} nats on the names; "
    "`benchmarks/bench_gpt2e_recall.py`, 3 seeds, tiny models trained as the Trainer reads documents) the paper's "
    f"design scores {GPT2E_RECALL['paper_design_nats']:.2f} nats, the same as GPT-2 ({GPT2E_RECALL['gpt2_nats']:.2f}) "
    "and as itself with the ids zeroed: the final hidden state it stores becomes a next-token predictor that no "
    "longer says which entity it was, and within a window every entity reads the same vector of ones. The entity "
    f"memory scores {GPT2E_RECALL['memory_nats']:.2f} nats ({GPT2E_RECALL['memory_ids_zeroed_nats']:.1f} with the ids "
    "zeroed). Its write is not learned (only its gate is): the store carries states across windows detached, so a "
    "learned write gets no signal from the next window, and measured so it forgot the entity; the token embedding is "
    "added to the hidden state because the hidden state alone lost the token (both stayed at "
    f"{GPT2E_RECALL['learned_write_nats']:.2f})."
)


def _limitations(config: GPT2EConfig, datasets: list[str]) -> list[str]:
    shared = [
        _WHY_THE_MEMORY,
        "Entity ids come from gold coreference (LitBank, OntoNotes) or from a coreference model of this package; "
        "with noisy ids the model reads noisy entities.",
    ]
    if config.entity_state == "memory":
        return [
            "Design choices beyond the paper (entity memory): one memory after a middle block instead of an entity "
            "attention in every block (each mention reads its own entity's state, a lookup, not an attention over "
            "positions, in one layer instead of every block: see the step-time ratio in benchmarks/RESULTS.md); "
            "states start at "
            "zero; the states returned by `forward` are detached, unless `keep_entity_state_graph=True` asks for "
            "their graph (back-propagation across windows).",
            "Generation continues a prompt as a window of its document: pass the `entity_states` of the text before "
            "it (none at the start of a document); the memory updates as the prompt and the continuation are read. "
            "Generated tokens carry the no-entity id unless `generate(..., entity_id_policy=fn)` assigns ids. Beam "
            "search with entity ids is refused (the states are not reordered with the beams).",
            *shared,
        ]
    return [
        "The paper's Figure 1 is not available as text; where it is silent these choices were made: the entity "
        "attention reads a layer norm of the block output and is added back by a residual; its keys are a learned "
        "projection of each token's entity representation, its queries (and by default values) the token states; its "
        "output projection starts at zero, so a model initialised from GPT-2 weights computes exactly GPT-2; the "
        "representation that replaces an entity's state is the final hidden state (after the final layer norm) at "
        "the last token of its last mention, detached.",
        "Within one input (window) every mention reads the entity states from before the window; the states are "
        "updated once, at the end (the paper updates them at the end of each training step). Generation keeps the "
        "states passed to it for the whole window, as training does: a prompt's entity ids matter only through the "
        "`entity_states` of an earlier window.",
        *shared,
    ]


def _usage_with_package(class_name: str, location: str) -> str:
    return (
        "```python\n"
        "import torch\n"
        "import hf_entity_models  # registers GPT2E with the Auto classes\n"
        "from hf_entity_models.tasks.language_modeling import generate_with_entities\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"model = AutoModelForCausalLM.from_pretrained(\"{location}\")\n"
        f"tokenizer = AutoTokenizer.from_pretrained(\"{location}\")\n"
        "input_ids = tokenizer(\"Anna met Tom. She\", return_tensors=\"pt\").input_ids\n"
        "entity_ids = torch.tensor([[1, 0, 2, 0, 1]])  # one id per token: Anna and She are entity 1, Tom entity 2\n"
        "generate_with_entities(model, input_ids, entity_ids, max_new_tokens=20)  # the prompt as a first window\n"
        "states = model(input_ids, entity_ids=entity_ids).entity_states  # carry these into the next window\n```\n"
    )


GPT2E_MODEL_CARD = ModelCardSpec(
    tags=("gpt2e", "gpt2", "coreference", "text-generation"),
    pipeline_tag="text-generation",
    citation=_CITATION,
    overview=_overview,
    config_rows=_config_rows,
    limitations=_limitations,
    usage_with_package=_usage_with_package,
    usage_note=(
        "Without entity ids every token carries the no-entity id 0: the entity memory then adds nothing (the model "
        "computes what a GPT-2 with its weights would); the paper's design still attends over the no-entity "
        "representation. A window reads the entity states left by earlier windows: pass the `entity_states` of the "
        "text read before, as above. `pipeline(\"text-generation\")` works as for GPT-2."
    ),
)
