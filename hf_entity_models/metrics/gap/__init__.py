"""The GAP metric folder; load it with ``evaluate.load(hf_entity_models.metrics.metric_path("gap"))``."""
