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
        "package. The paper's full model encodes the question and the passage apart (Attention Separate "
        "Representation), lets each read the other (Q2P and P2Q modes) under the [CLS] of the jointly encoded pair "
        "(QCP mode, Conditional Background Attention), and predicts the answer span from convolutions over the "
        "cosine / L1 interaction of every passage and question token (Interactive Reasoning); each idea is a switch, "
        f"and each rung of the paper's ablation ladder a preset. This checkpoint is **{rung}**: "
        f"{_what_this_checkpoint_does(config)}. It reads the same packed question-passage features as "
        "`BertForQuestionAnswering` and returns start / end logits over them (position 0 scores \"no answer\")."
        + (f" Its separate-encoding branch weighs {config.branch_weight:g} in the answer "
           f"({_branch_weight_origin(config)}; 0 answers with the joint QCP token head alone)."
           if config.has_two_heads else "")
    )


def _what_this_checkpoint_does(config: ForceReaderConfig) -> str:
    """The parts of the model this config switches on, in the paper's order."""
    if not config.separate_encoding:
        return (
            "one encoder pass over the packed question and passage and a linear start/end classifier, as "
            "`BertForQuestionAnswering` (none of the paper's additions)"
        )
    parts = ["it encodes the question and the passage separately"]
    readings = [mode.upper() for mode in config.reading_modes if mode != "qcp"]
    if readings:
        parts.append(f"the {' and '.join(readings)} mode{'s' if len(readings) > 1 else ''} let each read the other")
    if "qcp" in config.reading_modes and runs_qcp_pass(config):
        parts.append(
            "the QCP mode encodes the pair jointly, its [CLS] h_QCP the background"
            + (", and its token states score the answer too" if config.scores_qcp_tokens else "")
        )
    elif "qcp" in config.reading_modes:
        parts.append("the QCP mode is on, but nothing in this configuration reads the jointly encoded pair, so its "
                     "encoder pass is skipped")
    if config.conditional_background_attention:
        parts.append(f"the reading modes' attention is conditioned on h_QCP (Eq. 3, on the "
                     f"{config.background_attention_side} side)")
    if config.interactive_reasoning:
        parts.append("the answer span is predicted from convolutions over the cosine / L1 interaction of every "
                     "passage and question token")
    else:
        parts.append("start / end scores are bilinear in each passage token and an attention-pooled question vector")
    return "; ".join(parts)


def _branch_weight_origin(config: ForceReaderConfig) -> str:
    """Where the branch weight comes from, as far as the config records it."""
    if branch_weight_chosen_on_validation(config):
        return "chosen on validation questions by `train_on_squad`"
    return "`config.branch_weight`, not chosen on validation questions: `train_on_squad` chooses it there"


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
    """The limits of this checkpoint: each claim only where its config switches the part on, naming the field (as
    `field=value`) it follows from."""
    limitations = [
        "Extractive: every answer is a span of the given context (or no answer, position 0, for SQuAD 2.0 models).",
        "Where the paper is silent, choices were made and are documented in the code: "
        + "; ".join(_choices_where_the_paper_is_silent(config)) + ".",
    ]
    if config.scores_qcp_tokens:
        limitations.append(
            "Departure from the paper (`qcp_passage_logits=True`): the QCP pass's passage tokens also score the answer "
            "through a linear start/end classifier, where sections 3.2-3.3 keep only the pair's [CLS]. Read literally, "
            "every rung that encodes question and passage apart generalised to less than half the joint baseline's F1 "
            "at a fine-tuning budget (MiniLM-L6, SQuAD)."
        )
    if config.has_two_heads:
        limitations.append(_head_training_limitation(config))
        weight = _branch_weight_limitation(config)
        if weight:
            limitations.append(weight)
    if config.separate_encoding:
        limitations.append(_cost_limitation(config))
    if config.interactive_reasoning:
        limitations.append(
            f"The interaction tensor is passage length x question length x {config.interaction_channels} channels "
            f"per window (`interaction_channels={config.interaction_channels!r}`): memory grows with both lengths."
        )
    return limitations


def _choices_where_the_paper_is_silent(config: ForceReaderConfig) -> list[str]:
    choices = [
        "the loss is the mean of the start and end cross-entropies (Eq. 7 halved, as `BertForQuestionAnswering`)"
    ]
    if config.separate_encoding:
        choices.append("the question and passage sequences are rebuilt from the packed input, each with a [CLS] and a "
                       "[SEP]")
    if {"q2p", "p2q"} & set(config.reading_modes):
        choices.append(
            "the reading modes read the separate encodings in parallel"
            + ("" if config.scale_mode_attention else ", their scores not divided by sqrt(d) (Eqs. 2-3 do not scale)")
        )
        if config.conditional_background_attention and config.background_attention_side == "query":
            choices.append(
                "Eq. 3 adds h_QCP to the attending token (`background_attention_side='query'`): as printed, on the "
                "key side, it adds a constant that the softmax ignores"
            )
        elif config.conditional_background_attention:
            choices.append(
                "Eq. 3 is read as printed (`background_attention_side='key'`): it adds a term that is the same for "
                "every key, which the softmax ignores, so h_QCP changes no attention weight"
            )
    if "qcp" in config.reading_modes and not config.conditional_background_attention:
        choices.append("h_QCP is added to the question summary of the answer head (`conditional_background_attention="
                       "False`; the paper does not say how the MultiModeReader fuses it)")
    if config.interactive_reasoning:
        choices.append("the L1 channel of the interaction tensor is the mean absolute difference; its separable "
                       "convolutions are depthwise then pointwise, with ReLU")
        choices.append(_INTERACTION_HEADS[config.interaction_head])
    elif config.separate_encoding:
        choices.append("start / end scores are bilinear in each passage token and an attention-pooled question "
                       "vector (the \"AttentiveReader-like\" prediction the paper names)")
    return choices


# What the answer head of the full model reads, by `interaction_head`.
_INTERACTION_HEADS = {
    "residual": "the full model's answer head is the CondAttentionReader's plus a zero-initialised projection of the "
    "interaction features (`interaction_head='residual'`: section 4.2 adds the module to the CondAttentionReader)",
    "concat": "the full model's answer head classifies the interaction features and the passage states together "
    "(`interaction_head='concat'`)",
    "paper": "the full model's answer head classifies the interaction features alone, as section 3.5 prints "
    "(`interaction_head='paper'`): they are bounded and start with a tiny spread, so this head hardly learns within a "
    "fine-tuning budget (F1 2.6 against 23 for the joint baseline on 1,200 SQuAD questions)",
}


def _head_training_limitation(config: ForceReaderConfig) -> str:
    heads = "The two answer heads (the QCP token head and the separate-encoding branch)"
    loss = {
        "stacked": f"{heads} train on Eq. 7 over the QCP token head alone plus Eq. 7 over their sum with the QCP token "
        "head's logits held constant (`head_training='stacked'`, a departure from the paper's single loss): the "
        "branch learns what the joint head misses",
        "sum": f"{heads} train on Eq. 7 over their summed logits only (`head_training='sum'`, the paper's single "
        "loss)",
        "deep-supervision": f"{heads} train on Eq. 7 over their summed logits plus Eq. 7 over each head's logits "
        "alone (`head_training='deep-supervision'`, a departure from the paper's single loss)",
    }[config.head_training]
    measured = (
        "the separate passes' gradient into the shared encoder unlearned joint reading (held-out F1 about half the "
        "joint baseline's, MiniLM-L6 on 1,200 SQuAD questions)"
    )
    if config.detach_branch_from_encoder:
        encoder = (
            "The branch is detached from the encoder (`detach_branch_from_encoder=True`): only the QCP token head "
            f"trains it, as the joint baseline's head does, because with every encoder pass trained {measured}."
        )
    else:
        encoder = (
            "Every encoder pass trains the shared encoder (`detach_branch_from_encoder=False`): measured so, "
            f"{measured}."
        )
    return f"{loss}. {encoder}"


def _branch_weight_limitation(config: ForceReaderConfig) -> str | None:
    if branch_weight_chosen_on_validation(config):
        tried = ", ".join(f"{float(weight):g}: {f1:.1f}" for weight, f1 in config.branch_weight_validation_f1.items())
        return (
            f"The branch weighs {config.branch_weight:g} in the answer (`branch_weight`), chosen on validation "
            f"questions by `train_on_squad` (F1 per weight: {tried}): scores measured on those questions are "
            "optimistic."
        )
    if config.branch_weight != 1:
        return (
            f"The branch weighs {config.branch_weight:g} in the answer (`branch_weight`), set in the config: nothing "
            "records that it was chosen on held-out questions."
        )
    return None


def _cost_limitation(config: ForceReaderConfig) -> str:
    if not runs_qcp_pass(config):
        skipped = (
            " (the QCP pass is skipped: nothing in this configuration reads it)" if "qcp" in config.reading_modes else ""
        )
        return (
            "Separate encoding (`separate_encoding=True`) runs the encoder on the question and on the passage where "
            f"the joint baseline runs it once on the packed pair: two shorter passes, about its encoder cost{skipped}."
        )
    backward = (
        " (less in training: the detached separate passes need no backward pass)"
        if config.has_two_heads and config.detach_branch_from_encoder else ""
    )
    return (
        "Separate encoding (`separate_encoding=True`) runs the encoder on the question, the passage and the packed "
        "pair (QCP mode) where the joint baseline runs it once on the pair: about two to three times its encoder "
        f"cost at inference{backward}."
    )


def runs_qcp_pass(config: ForceReaderConfig) -> bool:
    """Whether a model of `config` runs the QCP encoder pass over the packed pair (about one encoder pass more):
    something reads it, i.e. the QCP token head, the conditional attention on its query side, or the question summary
    (which adds h_QCP when the attention is not conditional). Eq. 3 as printed (the key side) changes no attention
    weight, so on its own it does not pay for the pass. The model decides the same (`ForceReaderModel._reads_pair`)."""
    if not config.separate_encoding or "qcp" not in config.reading_modes:
        return False
    if config.scores_qcp_tokens or not config.conditional_background_attention:
        return True
    return config.background_attention_side == "query" and bool({"q2p", "p2q"} & set(config.reading_modes))


def branch_weight_chosen_on_validation(config: ForceReaderConfig) -> bool:
    """Whether `config.branch_weight` is the weight with the best validation F1 recorded in
    `config.branch_weight_validation_f1` (on equal F1 the larger weight, as `choose_branch_weight` picks): False when
    nothing was recorded, or when the weight was set by hand after the choice."""
    record = config.branch_weight_validation_f1
    if not config.has_two_heads or not record:
        return False
    best = max(record, key=lambda weight: (record[weight], float(weight)))
    return float(best) == float(config.branch_weight)


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
