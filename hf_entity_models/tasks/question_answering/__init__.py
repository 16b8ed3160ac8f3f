"""Extractive question answering: SQuAD 1.1 / 2.0 data, features with doc stride, post-processing, the official
EM/F1, the question-answering pipeline and the attention pictures of the ForceReader paper."""

from .metrics import (
    BestThresholds,
    SquadV1Scores,
    SquadV2Scores,
    SquadVersion,
    exact_match,
    find_best_threshold,
    find_best_thresholds,
    normalize_answer,
    read_squad_gold,
    score_answer,
    score_squad,
    score_squad_v1,
    score_squad_v2,
    token_f1,
)
from .pipeline import QuestionAnsweringPipeline
from .plots import AttentionMap, attention_maps, plot_attention_figures, plot_attention_map
from .postprocess import SquadPredictions, postprocess_predictions

__all__ = [
    "AttentionMap",
    "BestThresholds",
    "QuestionAnsweringPipeline",
    "SquadPredictions",
    "SquadV1Scores",
    "SquadV2Scores",
    "SquadVersion",
    "attention_maps",
    "exact_match",
    "find_best_threshold",
    "find_best_thresholds",
    "normalize_answer",
    "plot_attention_figures",
    "plot_attention_map",
    "postprocess_predictions",
    "read_squad_gold",
    "score_answer",
    "score_squad",
    "score_squad_v1",
    "score_squad_v2",
    "token_f1",
]
