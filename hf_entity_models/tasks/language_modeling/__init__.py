"""Language modeling: unlabelled corpora (GAP texts, SQuAD contexts, LitBank) as blocked causal-LM data, the
collator, and perplexity; entity-annotated data for GPT2E (CoNLL coreference -> input_ids + entity_ids, LAMBADA), and the synthetic entity
recall task."""

from ..coreference.conll import CorefDocument, coref_documents_from_dataset, read_conll_coreference
from .collator import IGNORE_INDEX, EntityLanguageModelingCollator, LanguageModelingCollator, lm_data_collator
from .corpus import (
    LanguageModelingCorpus,
    SplitStatistics,
    build_lm_corpus,
    load_lm_corpus_from_shared_data,
    resolve_separator_token_id,
    split_documents_by_source,
)
from .corpus_readers import (
    DEFAULT_GAP_FILE,
    DEFAULT_LITBANK_DIR,
    DEFAULT_SQUAD_FILES,
    read_gap_texts,
    read_litbank_documents,
    read_shared_data_documents,
    read_squad_contexts,
)
from .entity_alignment import entity_ids_for_document, entity_ids_from_clusters, entity_ids_from_text
from .entity_evaluation import (
    PRONOUNS,
    LambadaScores,
    MentionSimilarities,
    assign_documents_to_processes,
    NLLSums,
    entity_nll,
    entity_nll_sums,
    entity_perplexity,
    lambada_scores,
    mention_similarities,
    reads_entities,
)
from .entity_generation import generate_with_entities
from .entity_recall import HE_TOKEN, recall_documents, recall_name_nats, recall_vocab_size, recall_window_logits
from .entity_training import (
    EntityLMCollatorFor,
    EntityLMTrainer,
    build_entity_lm_trainer,
    entity_lm_training_arguments,
    evaluate_entity_lm,
    order_windows_for_processes,
)
from .entity_windows import document_windows, entity_lm_windows
from .lambada import lambada_examples, read_lambada
from .litbank_entity_lm import entity_lm_document_names, load_litbank_entity_lm
from .metrics import perplexity_from_loss
from .refreader_pretraining import build_refreader_lm_trainer, refreader_lm_training_arguments
from .stream_order import order_windows_for_streams

__all__ = [
    "HE_TOKEN",
    "recall_documents",
    "recall_name_nats",
    "recall_vocab_size",
    "recall_window_logits",
    "CorefDocument",
    "DEFAULT_GAP_FILE",
    "DEFAULT_LITBANK_DIR",
    "DEFAULT_SQUAD_FILES",
    "EntityLMCollatorFor",
    "EntityLMTrainer",
    "EntityLanguageModelingCollator",
    "IGNORE_INDEX",
    "LambadaScores",
    "LanguageModelingCollator",
    "LanguageModelingCorpus",
    "MentionSimilarities",
    "PRONOUNS",
    "SplitStatistics",
    "assign_documents_to_processes",
    "build_entity_lm_trainer",
    "build_lm_corpus",
    "build_refreader_lm_trainer",
    "coref_documents_from_dataset",
    "document_windows",
    "entity_ids_for_document",
    "entity_ids_from_clusters",
    "entity_ids_from_text",
    "entity_lm_document_names",
    "entity_lm_training_arguments",
    "entity_lm_windows",
    "NLLSums",
    "entity_nll",
    "entity_nll_sums",
    "entity_perplexity",
    "evaluate_entity_lm",
    "generate_with_entities",
    "lambada_examples",
    "lambada_scores",
    "lm_data_collator",
    "load_litbank_entity_lm",
    "load_lm_corpus_from_shared_data",
    "mention_similarities",
    "order_windows_for_processes",
    "order_windows_for_streams",
    "perplexity_from_loss",
    "read_conll_coreference",
    "read_gap_texts",
    "read_lambada",
    "read_litbank_documents",
    "read_shared_data_documents",
    "read_squad_contexts",
    "reads_entities",
    "refreader_lm_training_arguments",
    "resolve_separator_token_id",
    "split_documents_by_source",
]
