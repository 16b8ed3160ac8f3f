"""The CoNLL-2012 coreference metric folder; load it with
``evaluate.load(hf_entity_models.metrics.metric_path("coreference"))`` (clusters of word spans per document) or
``evaluate.load(hf_entity_models.metrics.metric_path("coreference"), "conll_files")`` (CoNLL file paths)."""
