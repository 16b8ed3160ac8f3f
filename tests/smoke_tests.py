"""The smoke subset: the tests that the dependency-floors environment runs (tests/test_dependency_floors.py).

Together they touch every public entry point once: importing the package and the Auto classes, each model's
forward / save / load (and generate where it generates) and one stock `Trainer` run, each pipeline, loading without
the package from a folder and from the (loopback) Hub, the data readers built on `datasets`, the metrics built on
`evaluate`, and the command line's `--help`. Each entry is a test id or the prefix of parametrised ids; an entry that
matches no collected test fails the floors run (conftest.py), so a renamed test cannot silently drop out.
"""

SMOKE_TESTS = (
    # PeTra
    "tests/test_petra_config_and_io.py::test_auto_classes_resolve_petra",
    "tests/test_petra_config_and_io.py::test_save_and_load_give_identical_outputs",
    "tests/test_petra_training.py::test_evaluation_reports_gap_metrics_and_tunes_the_threshold",
    # Referential Reader
    "tests/test_refreader_config_and_io.py::test_save_and_load_give_identical_outputs",
    "tests/test_refreader_config_and_io.py::test_generate_equals_a_manual_greedy_loop",
    "tests/test_refreader_training.py::test_trainer_lowers_the_coreference_loss_on_real_gap_rows",
    # ForceReader
    "tests/test_forcereader_model.py::test_save_and_load_through_the_auto_classes_gives_the_same_logits",
    "tests/test_squad_training.py::test_squad_2_threshold_is_chosen_on_validation_and_applied",
    # GPT2E
    "tests/test_gpt2e_model.py::test_gpt2_weights_load_every_weight_and_compute_gpt2",
    "tests/test_gpt2e_model.py::test_save_and_load_through_auto_model_for_causal_lm",
    "tests/test_gpt2e_model.py::test_greedy_generation_with_entity_ids_follows_full_passes",
    "tests/test_gpt2e_model.py::test_trainer_steps_lower_the_loss_and_fill_the_store",
    # DefinitionEMB
    "tests/test_definition_emb_model.py::test_save_and_load_give_identical_outputs",
    "tests/test_definition_emb_model.py::test_trainer_steps_lower_the_loss",
    "tests/test_definition_replacement.py::test_saved_checkpoint_loads_as_plain_bert_without_the_package_and_its_card_lists_the_rows",
    # Pipelines
    "tests/test_coreference_pipeline.py::test_clusters_carry_character_offsets_into_the_text",
    "tests/test_coreference_pipeline.py::test_refreader_clusters_carry_character_offsets_into_the_text",
    "tests/test_qa_pipeline.py::test_registered_for_any_question_answering_model",
    "tests/test_qa_pipeline.py::test_answer_offsets_round_trip_on_random_non_ascii_contexts",
    # Loading without the package, from a folder and from the loopback Hub
    "tests/test_hub_portability.py::test_push_to_hub_then_load_from_the_hub_without_the_package",
    # Data (datasets) and metrics (evaluate)
    "tests/test_gap_data.py::test_load_real_gap_files_keep_every_row",
    "tests/test_squad_data.py::test_explicit_versions",
    "tests/test_lm_corpus.py::test_cache_dir_writes_and_reuses_arrow_files",
    # The tokenizer of transformers 5.6 records every call's padding in its backend: the corpus cache must not care.
    "tests/test_lm_corpus.py::test_the_cache_is_reused_whatever_padding_and_truncation_the_tokenizer_last_applied",
    "tests/test_evaluate_metrics.py::test_metrics_load_offline_in_a_fresh_process_without_importing_evaluate_up_front",
    # CoNLL-2012 metrics (CEAF's alignment by scipy)
    "tests/test_conll_metrics.py::test_a_hand_computed_case",
    # Command line
    "tests/test_cli.py::test_console_script_is_installed",
)
