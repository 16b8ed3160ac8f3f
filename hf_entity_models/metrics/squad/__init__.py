"""The SQuAD metric folder; load it with ``evaluate.load(hf_entity_models.metrics.metric_path("squad"))`` (v1.1) or
``evaluate.load(hf_entity_models.metrics.metric_path("squad"), "v2.0")``."""
