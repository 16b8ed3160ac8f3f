"""Definition embeddings (DefinitionEMB): definition prompts and their corruption, definitions (WordNet glosses,
number words), training the definition reader with Trainer, replacing a model's token embeddings, and the analyses
of the paper: isotropy per frequency group, DelDirection, word similarity, SVD projections, GLUE MRPC / RTE."""

from .collator import DefinitionCollator
from .corruption import corrupt_for_encoder, encoder_decoder_example, masked_all_slots, masked_one_at_a_time
from .definition_embeddings import TokenDefinitionEmbeddings, compute_definition_embeddings
from .definitions import (
    definition_prompt_dataset,
    load_definitions,
    number_to_words,
    number_word_definitions,
    read_wordnet_glosses,
    split_definitions,
)
from .glue import glue_features, read_glue, split_off_selection, task_texts
from .glue_fine_tuning import (
    build_glue_trainer,
    compute_glue_metrics,
    fine_tune_glue,
    glue_training_arguments,
    sequence_classifier_from,
)
from .isotropy import apply_del_direction, frequency_groups, isotropy, isotropy_by_group, remove_dominant_directions
from .plots import plot_embedding_projections
from .prompts import (
    DefinitionPrompt,
    WordDefinition,
    build_definition_prompt,
    slot_token_ids,
    tokenizer_convention,
    word_forms,
)
from .replacement import DefinitionEmbeddingReplacement, apply_definition_embeddings, blended_rows, read_task_texts
from .training import build_definition_trainer, definition_training_arguments, fit_projection_by_least_squares
from .word_similarity import (
    WordSimilarityResult,
    evaluate_word_similarity,
    read_word_similarity,
    spearman,
    word_embedding,
    word_similarity_spearman,
)

__all__ = [
    "DefinitionCollator",
    "DefinitionEmbeddingReplacement",
    "DefinitionPrompt",
    "TokenDefinitionEmbeddings",
    "WordDefinition",
    "WordSimilarityResult",
    "apply_definition_embeddings",
    "apply_del_direction",
    "build_definition_prompt",
    "build_definition_trainer",
    "build_glue_trainer",
    "compute_definition_embeddings",
    "compute_glue_metrics",
    "corrupt_for_encoder",
    "definition_prompt_dataset",
    "definition_training_arguments",
    "encoder_decoder_example",
    "evaluate_word_similarity",
    "fine_tune_glue",
    "frequency_groups",
    "glue_features",
    "glue_training_arguments",
    "isotropy",
    "isotropy_by_group",
    "load_definitions",
    "masked_all_slots",
    "masked_one_at_a_time",
    "slot_token_ids",
    "blended_rows",
    "fit_projection_by_least_squares",
    "number_to_words",
    "number_word_definitions",
    "plot_embedding_projections",
    "read_glue",
    "read_task_texts",
    "read_word_similarity",
    "read_wordnet_glosses",
    "remove_dominant_directions",
    "sequence_classifier_from",
    "spearman",
    "split_definitions",
    "split_off_selection",
    "task_texts",
    "tokenizer_convention",
    "word_embedding",
    "word_forms",
    "word_similarity_spearman",
]
