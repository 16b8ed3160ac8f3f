"""Language modeling: unlabelled corpora (GAP texts, SQuAD contexts, LitBank) as blocked causal-LM data, the
collator, and perplexity."""

from .collator import IGNORE_INDEX, LanguageModelingCollator, lm_data_collator
from .corpus import (
    DEFAULT_GAP_FILE,
    DEFAULT_LITBANK_DIR,
    DEFAULT_SQUAD_FILES,
    LanguageModelingCorpus,
    SplitStatistics,
    build_lm_corpus,
    load_lm_corpus_from_shared_data,
    read_gap_texts,
    read_litbank_documents,
    read_shared_data_documents,
    read_squad_contexts,
    resolve_separator_token_id,
    split_documents_by_source,
)
from .metrics import perplexity_from_loss

__all__ = [
    "DEFAULT_GAP_FILE",
    "DEFAULT_LITBANK_DIR",
    "DEFAULT_SQUAD_FILES",
    "IGNORE_INDEX",
    "LanguageModelingCollator",
    "LanguageModelingCorpus",
    "SplitStatistics",
    "build_lm_corpus",
    "lm_data_collator",
    "load_lm_corpus_from_shared_data",
    "perplexity_from_loss",
    "read_gap_texts",
    "read_litbank_documents",
    "read_shared_data_documents",
    "read_squad_contexts",
    "resolve_separator_token_id",
    "split_documents_by_source",
]
