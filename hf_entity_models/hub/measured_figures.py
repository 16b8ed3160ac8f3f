"""Figures measured by the package's benchmarks that the generated model cards quote, written once.

The benchmark result files in `benchmarks/results/` are the measurements; `benchmarks/RESULTS.md` and the hand-written
cards in `model_cards/` report them. The generated cards cannot read the repository (the package is installed without
it), so the few figures they quote live here, rounded as the cards print them; `tests/test_measured_figures.py`
recomputes each from its result file and checks that RESULTS.md and the hand-written card state the same values.
"""

# `python benchmarks/bench_gpt2e_recall.py` (3 seeds): nats on the recalled names, mean over seeds
# (benchmarks/results/gpt2e_recall.json); the learned-write ablation is a single design run (RESULTS.md, "How the
# memory's write was chosen").
GPT2E_RECALL = {
    "source": "benchmarks/results/gpt2e_recall.json",
    "window_local_level_nats": 2.77,
    "gpt2_nats": 2.80,
    "paper_design_nats": 2.79,
    "memory_nats": 0.01,
    "memory_ids_zeroed_nats": 3.5,
    "learned_write_nats": 2.79,
}
