"""What the model card of a ForceReader checkpoint says about the model: overview, configuration table, limits,
citation, usage.

The rest of the card (Hub metadata, data, results, loading without the package) is written by `hub/model_cards.py`;
the package writes the card when it saves or pushes a model (the checkpoint does not carry this file).
"""

from ..model_cards import ModelCardSpec, encoder_summary

from ...models.forcereader.configuration_forcereader import ForceReaderConfig

_EXAMPLE = 'question="Who founded Microsoft?", context="I know from the book that Bill Gates founded Microsoft."'

_CITATION = """@inproceedings{chen2020forcereader,
  title = {ForceReader: a BERT-based Interactive Machine Reading Comprehension Model with Attention Separation},
  author = {Chen, Zheng and Wu, Kangjian},
  booktitle = {Proceedings of COLING},
  year = {2020}
}"""

# The paper's name of each rung of its ablation ladder (Table 1).
_RUNG_NAMES = {
    "joint-bert": "the joint BERT baseline",
    "sep-bert-reader": "SepBERTReader",
    "multi-mode-reader": "MultiModeReader",
    "cond-attention-reader": "CondAttentionReader",
    "forcereader": "ForceReader",
    "forcereader-sum": "ForceReader trained on the summed logits of its two heads only (the issue-22 design, which "
    "generalises to half the joint baseline's F1)",
    "forcereader-paper": "ForceReader with every part read as printed (the QCP pair's [CLS] only, Eq. 3 on the key side, "
    "the classifier on the interaction features alone)",
}


def _overview(config: ForceReaderConfig, class_name: str) -> str:
    rung = _RUNG_NAMES.get(config.preset or "", "a combination of ForceReader's switches outside the paper's ladder")
    return (
        "A ForceReader reading-comprehension model (Chen and Wu, 2020, *ForceReader: a BERT-based Interactive "
        "Machine Reading Comprehension Model with Attention Separation*), packaged with the `hf-entity-models` "
        "package. It encodes the question and the passage separately (Attention Separate Representation), lets "
        "each read the other (Q2P and P2Q modes) under the [CLS] of the jointly encoded pair (QCP mode, Conditional "
        "Background Attention), and predicts the answer span from convolutions over the cosine / L1 interaction of "
        f"every passage and question token (Interactive Reasoning). This checkpoint is **{rung}**. It reads the "
        "same packed question-passage features as `BertForQuestionAnswering` and returns start / end logits over "
        "them (position 0 scores \"no answer\")."
        + (f" Its separate-encoding branch weighs {config.branch_weight:g} in the answer (`train_on_squad` "
           "chooses it on validation questions; 0 answers with the joint QCP token head alone)."
           if config.has_two_heads else "")
    )


def _config_rows(config: ForceReaderConfig, class_name: str) -> list[tuple[str, str]]:
    return [
        ("Encoder", f"{encoder_summary(config.encoder_config)}, fine-tuned"),
        ("Ladder rung", f"`{config.preset}`" if config.preset else "custom"),
        ("Separate encoding", str(config.separate_encoding)),
        ("Reading modes", ", ".join(config.reading_modes) or "none"),
        ("QCP token states score the answer (`qcp_passage_logits`; the paper keeps only the [CLS])",
         str(config.qcp_passage_logits) if "qcp" in config.reading_modes else "no QCP mode"),
        ("Training of the two answer heads (QCP token head + separate-encoding branch)",
         _head_training_summary(config) if config.has_two_heads else "one head"),
        ("Conditional background attention", f"{config.conditional_background_attention} "
                                             f"(h_QCP on the {config.background_attention_side} side)"
                                             if config.conditional_background_attention else "False"),
        ("Interactive reasoning", f"{config.interactive_reasoning} (kernels {config.interaction_kernel_sizes}, "
                                  f"{config.interaction_channels} channels, head `{config.interaction_head}`)"
                                  if config.interactive_reasoning else "False"),
    ]


def _head_training_summary(config: ForceReaderConfig) -> str:
    parts = [f"`{config.head_training}`"]
    if config.detach_branch_from_encoder:
        parts.append("branch detached from the encoder")
    if config.branch_dropout:
        parts.append(f"branch dropout {config.branch_dropout:g}")
    if config.branch_gate:
        parts.append("gated branch")
    return ", ".join(parts)


def _limitations(config: ForceReaderConfig, datasets: list[str]) -> list[str]:
    return [
        "Extractive: every answer is a span of the given context (or no answer, position 0, for SQuAD 2.0 models).",
        "Where the paper is silent, choices were made and are documented in the code: the reading modes read the "
        "separate encodings in parallel; without Conditional Background Attention h_QCP is added to the question "
        "summary; the L1 channel is the mean absolute difference; depthwise-then-pointwise convolutions with ReLU; "
        "the loss is the mean of the start and end cross-entropies (Eq. 7 halved, as BertForQuestionAnswering); "
        "Eq. 3 adds h_QCP to the attending token (as printed it adds a constant the softmax ignores); the full "
        "model's answer head is the CondAttentionReader's plus a zero-initialised projection of the interaction "
        "features (interaction_head='residual'; 'paper' classifies them alone and hardly learns).",
        "Departure from the paper's single loss (head_training='stacked', detach_branch_from_encoder=True): trained "
        "on the summed logits with every encoder pass back-propagated, the separate passes' gradient into the shared "
        "encoder unlearned joint reading (held-out F1 about half the joint baseline's, MiniLM-L6 on 1,200 SQuAD "
        "questions); so only the QCP token head trains the encoder, exactly as the joint baseline, the branch learns "
        "what it misses, and the branch's weight in the answer (config.branch_weight) is chosen on validation "
        "questions by train_on_squad. The preset 'forcereader-sum' keeps the earlier training.",
        "Separate encoding runs the encoder on the question, the passage and (QCP mode) the pair: about two to "
        "three times the encoder cost of the joint baseline at inference (less in training with the branch "
        "detached: the separate passes need no backward pass).",
    ]


def _usage_with_package(class_name: str, location: str) -> str:
    return (
        "```python\n"
        "import hf_entity_models  # registers ForceReader with the Auto classes and pipeline(\"question-answering\")\n"
        "from transformers import AutoModelForQuestionAnswering, pipeline\n\n"
        f"model = AutoModelForQuestionAnswering.from_pretrained(\"{location}\")\n"
        f"qa = pipeline(\"question-answering\", model=\"{location}\")\n"
        f"qa({_EXAMPLE})\n```\n"
    )


FORCEREADER_MODEL_CARD = ModelCardSpec(
    tags=("forcereader", "question-answering", "squad"),
    pipeline_tag="question-answering",
    citation=_CITATION,
    overview=_overview,
    config_rows=_config_rows,
    limitations=_limitations,
    usage_with_package=_usage_with_package,
    usage_note=(
        "Answers carry character offsets into the context (`context[start:end] == answer`); contexts longer than "
        "the model's window are read in overlapping windows, never truncated."
    ),
)
