"""What the model card of a GPT2E checkpoint says about the model: overview, configuration table, limits, citation,
usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by the shared
`entity_hub.py`, from `GPT2E_MODEL_CARD`. Shipped next to the weights with the other code files.
"""

from hf_entity_models.models._shared.entity_hub import ModelCardSpec

from .configuration_gpt2e import GPT2EConfig

_CITATION = """@inproceedings{stylianou2021et,
  title = {E.T.: Entity-Transformers. Coreference augmented Neural Language Model for richer mention representations via Entity-Transformer blocks},
  author = {Stylianou, Nikolaos and Vlahavas, Ioannis},
  booktitle = {Proceedings of the Fourth Workshop on Computational Models of Reference, Anaphora and Coreference},
  year = {2021}
}"""


def _overview(config: GPT2EConfig, class_name: str) -> str:
    return (
        "A GPT2E language model (Stylianou and Vlahavas, 2021, *E.T.: Entity-Transformers*), packaged with the "
        "`hf-entity-models` package: GPT-2 whose blocks are Entity-Transformer blocks. Besides its tokens, the model "
        "reads one entity id per token (0 = not part of a mention; coreferent mentions share an id) and keeps one "
        "representation per entity, a vector of ones until the entity is mentioned, then the final hidden state of "
        "its last mention. Every block attends, after GPT-2's self-attention and feed-forward layers, over the "
        "entity representations of the tokens (entity attention). `forward` takes and returns the entity states, as "
        "it does the key/value cache, so that a document longer than one window carries its entities on."
    )


def _config_rows(config: GPT2EConfig, class_name: str) -> list[tuple[str, str]]:
    return [
        ("Layers / width / heads", f"{config.n_layer} / {config.n_embd} / {config.n_head}"),
        ("Context window", str(config.n_positions)),
        ("Vocabulary", str(config.vocab_size)),
        ("Entity store", f"{config.max_entities} entities per document"),
        ("Entity attention", f"keys from the entities, values from the "
                             f"{'entities' if config.entity_attention_values == 'entities' else 'token states'}, "
                             f"width {config.entity_attention_size}"),
    ]


def _limitations(config: GPT2EConfig, datasets: list[str]) -> list[str]:
    return [
        "The paper's Figure 1 is not available as text; where it is silent these choices were made: the entity "
        "attention reads a layer norm of the block output and is added back by a residual; its keys are a learned "
        "projection of each token's entity representation, its queries (and by default values) the token states; its "
        "output projection starts at zero, so a model initialised from GPT-2 weights computes exactly GPT-2; the "
        "representation that replaces an entity's state is the final hidden state (after the final layer norm) at "
        "the last token of its last mention, detached.",
        "Within one input (window) every mention reads the entity states from before the window; the states are "
        "updated once, at the end (the paper updates them at the end of each training step).",
        "Tokens generated after a prompt carry the no-entity id unless `generate(..., entity_id_policy=fn)` assigns "
        "ids; `generate` reads the entity states passed to it and does not update them while generating. The ids of "
        "a prompt read on its own change nothing (every entity still has its starting representation): read the "
        "prompt first and pass its `entity_states`.",
        "Entity ids come from gold coreference (LitBank, OntoNotes) or from a coreference model of this package; "
        "with noisy ids the entity attention reads noisy entities.",
    ]


def _usage_with_package(class_name: str, location: str) -> str:
    return (
        "```python\n"
        "import torch\n"
        "import hf_entity_models  # registers GPT2E with the Auto classes\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"model = AutoModelForCausalLM.from_pretrained(\"{location}\")\n"
        f"tokenizer = AutoTokenizer.from_pretrained(\"{location}\")\n"
        "input_ids = tokenizer(\"Anna met Tom. She\", return_tensors=\"pt\").input_ids\n"
        "entity_ids = torch.tensor([[1, 0, 2, 0, 1]])  # one id per token: Anna and She are entity 1, Tom entity 2\n"
        "states = model(input_ids, entity_ids=entity_ids).entity_states  # the entities after reading the prompt\n"
        "model.generate(input_ids, entity_ids=entity_ids, entity_states=states, max_new_tokens=20)\n```\n"
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
        "Without entity ids every token carries the no-entity id 0. A window reads the entity representations left "
        "by earlier windows (within a window every entity starts as the same vector of ones), so pass the "
        "`entity_states` of the text read before, as above. `pipeline(\"text-generation\")` works as for GPT-2."
    ),
)
