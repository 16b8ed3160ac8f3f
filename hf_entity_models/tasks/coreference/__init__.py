"""Coreference task: GAP data, batching, cached encoder features, the GAP scorer and Trainer wiring."""

from .collator import CoreferenceCollator
from .features import CachedFeatureDataset, cache_encoder_features, encoder_features_fingerprint
from .gap import (
    GAP_COLUMNS,
    GapExampleBuilder,
    build_link_pairs,
    char_span_to_token_span,
    gap_gold,
    load_gap,
    prepare_gap_dataset,
)
from .metrics import (
    BinaryCounts,
    CountingResult,
    GapGold,
    GapScores,
    ThresholdSweep,
    count_unique_people,
    pronoun_gender,
    read_gap_gold,
    score_gap,
    score_gap_probabilities,
    select_counting_threshold,
    sweep_threshold,
)
from .pipeline import CoreferencePipeline
from .plots import plot_memory_log
from .synthetic import (
    PEOPLE_CORPUS_ID,
    PEOPLE_CORPUS_NAME,
    PeopleStory,
    Person,
    generate_people_corpus,
    generate_people_stories,
    write_people_corpus_tsv,
)
from .training import (
    GapMetrics,
    GapTrainingResult,
    build_gap_trainer,
    gap_training_arguments,
    keep_candidate_scores,
    train_on_gap,
    tune_threshold,
)

__all__ = [
    "PEOPLE_CORPUS_ID",
    "PEOPLE_CORPUS_NAME",
    "PeopleStory",
    "Person",
    "generate_people_corpus",
    "generate_people_stories",
    "write_people_corpus_tsv",
    "GAP_COLUMNS",
    "BinaryCounts",
    "CachedFeatureDataset",
    "CoreferenceCollator",
    "CoreferencePipeline",
    "CountingResult",
    "GapExampleBuilder",
    "GapGold",
    "GapMetrics",
    "GapScores",
    "GapTrainingResult",
    "ThresholdSweep",
    "build_gap_trainer",
    "build_link_pairs",
    "cache_encoder_features",
    "char_span_to_token_span",
    "count_unique_people",
    "encoder_features_fingerprint",
    "gap_gold",
    "gap_training_arguments",
    "keep_candidate_scores",
    "load_gap",
    "plot_memory_log",
    "prepare_gap_dataset",
    "pronoun_gender",
    "read_gap_gold",
    "score_gap",
    "score_gap_probabilities",
    "select_counting_threshold",
    "sweep_threshold",
    "train_on_gap",
    "tune_threshold",
]
