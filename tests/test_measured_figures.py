"""Measured figures are written once: the generated cards quote `hub.measured_figures`, which must agree with the
benchmark result files, and the hand-written cards (model_cards/*.md) must state only figures that RESULTS.md states."""

import json
import math
import re
from pathlib import Path

import pytest

from hf_entity_models import GPT2EConfig
from hf_entity_models.hub.cards.gpt2e import GPT2E_MODEL_CARD
from hf_entity_models.hub.measured_figures import GPT2E_RECALL

ROOT = Path(__file__).resolve().parent.parent
RESULTS = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")
# Numbers in the hand-written cards that are not measurements of ours, each with its reason.
NOT_OUR_MEASUREMENTS = {
    "definition_emb.md": {"5.1": "a paper section number"},
    "petra.md": {"85.3": "the paper's reported GAP test F1", "4.4": "a paper section number"},
    "forcereader.md": {
        # The paper's Table 2 (BERT-base / BERT-large and ForceReader, EM / F1 on SQuAD 1.1 and 2.0).
        **dict.fromkeys(
            ["83.3", "90.5", "78.7", "82.0", "84.1", "90.8", "79.9", "82.9", "86.4", "91.6", "81.1", "85.2", "87.3",
             "92.2", "82.3", "86.6", "88.1", "93.4", "84.7"],
            "a figure of the paper's results table",
        ),
        # A loss trajectory read from a training log while diagnosing issue 30, not a reported result.
        **dict.fromkeys(["9.55", "9.48", "9.59", "9.7"], "a training-loss value quoted from a log"),
    },
}


def _recall_means() -> dict:
    results = json.loads((ROOT / GPT2E_RECALL["source"]).read_text(encoding="utf-8"))
    return results["window_local_level_nats"], results["mean_over_seeds"]


def test_the_quoted_recall_figures_are_the_benchmark_means_as_the_cards_round_them():
    level, means = _recall_means()
    assert GPT2E_RECALL["window_local_level_nats"] == round(level, 2) == round(math.log(16), 2)
    assert GPT2E_RECALL["gpt2_nats"] == round(means["gpt2"]["name_nats"], 2)
    assert GPT2E_RECALL["paper_design_nats"] == round(means["gpt2e-paper"]["name_nats"], 2)
    assert GPT2E_RECALL["memory_nats"] == round(means["gpt2e"]["name_nats"], 2)
    assert GPT2E_RECALL["memory_ids_zeroed_nats"] == round(means["gpt2e"]["name_nats_ids_zeroed"], 1)


def test_results_md_and_the_gpt2e_card_state_the_same_recall_figures():
    level, means = _recall_means()
    memory = f"{means['gpt2e']['name_nats']:.3f} ± "  # RESULTS and the card give mean ± std over seeds
    card = (ROOT / "model_cards" / "gpt2e.md").read_text(encoding="utf-8")
    for text in (RESULTS, card):
        assert memory in text
        assert f"{means['gpt2e']['name_nats_ids_zeroed']:.2f}" in text
        assert f"{means['gpt2']['name_nats']:.2f} ± " in text
    learned_write_row = next(line for line in RESULTS.splitlines() if line.startswith("| a learned projection"))
    assert f"| {GPT2E_RECALL['learned_write_nats']:.2f} |" in learned_write_row


@pytest.mark.parametrize("entity_state", ["memory", "paper"])
def test_the_generated_gpt2e_card_quotes_the_figures_from_their_one_place(entity_state):
    config = GPT2EConfig(n_layer=2, n_embd=16, n_head=2, vocab_size=50, entity_state=entity_state)
    limitations = " ".join(GPT2E_MODEL_CARD.limitations(config, []))
    assert f"design scores {GPT2E_RECALL['paper_design_nats']:.2f} nats" in limitations
    assert f"memory scores {GPT2E_RECALL['memory_nats']:.2f} nats" in limitations
    assert f"GPT-2 ({GPT2E_RECALL['gpt2_nats']:.2f})" in limitations


@pytest.mark.parametrize("card", sorted(path.name for path in (ROOT / "model_cards").glob("*.md")))
def test_every_figure_of_a_hand_written_card_is_one_results_md_states(card):
    """A figure changed in RESULTS.md but not in the card (or the reverse) fails here; the few numbers that are not
    our measurements are listed above with their reason."""
    stated = set(NUMBER.findall(RESULTS))
    exceptions = NOT_OUR_MEASUREMENTS.get(card, {})
    numbers = NUMBER.findall((ROOT / "model_cards" / card).read_text(encoding="utf-8"))
    assert numbers, "a card without any figure: nothing to compare"
    unstated = sorted({number for number in numbers if number not in stated and number not in exceptions})
    assert not unstated, f"model_cards/{card} states figures that RESULTS.md does not: {unstated}"
    stale_exceptions = sorted(set(exceptions) - set(numbers))
    assert not stale_exceptions, f"exceptions no longer in model_cards/{card}: {stale_exceptions}"
