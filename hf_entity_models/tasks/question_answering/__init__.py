"""Extractive question answering: SQuAD 1.1 / 2.0 data, features with doc stride, post-processing, the official
EM/F1, the question-answering pipeline, the attention pictures of the ForceReader paper, and ONNX export (with int8
quantisation) checked against PyTorch."""

from .data import load_squad, split_by_article, squad_version
from .features import prepare_train_features, prepare_validation_features, squad_features
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
from .onnx_export import BFloat16Autocast, OnnxExport, OnnxQuestionAnswering, export_onnx, quantize_onnx_int8
from .pipeline import QuestionAnsweringPipeline
from .plots import AttentionMap, attention_maps, plot_attention_figures, plot_attention_map
from .postprocess import SquadPredictions, postprocess_predictions
from .training import (
    SquadEvaluation,
    SquadTrainingResult,
    answer_squad,
    build_squad_trainer,
    choose_branch_weight,
    record_branch_weight,
    choose_null_threshold,
    evaluate_squad,
    score_answers,
    squad_head_logits,
    squad_logits,
    squad_training_arguments,
    train_on_squad,
)

__all__ = [
    "BFloat16Autocast",
    "OnnxExport",
    "OnnxQuestionAnswering",
    "export_onnx",
    "quantize_onnx_int8",
    "AttentionMap",
    "BestThresholds",
    "QuestionAnsweringPipeline",
    "SquadEvaluation",
    "SquadPredictions",
    "SquadTrainingResult",
    "SquadV1Scores",
    "SquadV2Scores",
    "SquadVersion",
    "answer_squad",
    "attention_maps",
    "build_squad_trainer",
    "choose_branch_weight",
    "record_branch_weight",
    "choose_null_threshold",
    "evaluate_squad",
    "exact_match",
    "find_best_threshold",
    "find_best_thresholds",
    "load_squad",
    "normalize_answer",
    "plot_attention_figures",
    "plot_attention_map",
    "postprocess_predictions",
    "prepare_train_features",
    "prepare_validation_features",
    "read_squad_gold",
    "score_answer",
    "score_answers",
    "score_squad",
    "score_squad_v1",
    "score_squad_v2",
    "split_by_article",
    "squad_features",
    "squad_head_logits",
    "squad_logits",
    "squad_training_arguments",
    "squad_version",
    "token_f1",
    "train_on_squad",
]
