"""Our metrics as local `evaluate` modules (`hf_entity_models/metrics/<name>/<name>.py`).

They load offline with `evaluate.load(path)`, give hand-computed values on small cases, agree with the package's
GAP scorer on real GAP rows, refuse bad input with a clear error, and ship inside the package (so in the wheel).
"""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import evaluate
import pytest
import torch
import torch.nn.functional as F

from hf_entity_models.metrics import METRICS_DIR, available_metrics, load, metric_path
from hf_entity_models.tasks.coreference import load_gap
from hf_entity_models.tasks.coreference import CorefDocument, score_coreference
from hf_entity_models.tasks.coreference.metrics import read_gap_gold, score_gap

REPO_ROOT = Path(__file__).resolve().parents[1]
GAP_KEYS = [
    "precision", "recall", "f1",
    "masculine_precision", "masculine_recall", "masculine_f1",
    "feminine_precision", "feminine_recall", "feminine_f1",
    "bias",
]


@pytest.fixture
def gap():
    return evaluate.load(metric_path("gap"))


@pytest.fixture
def perplexity():
    return evaluate.load(metric_path("perplexity"))


def decisions(a: bool, b: bool) -> dict:
    return {"a_coref": a, "b_coref": b}


def gold(pronoun: str, a: bool, b: bool) -> dict:
    return {"pronoun": pronoun, "a_coref": a, "b_coref": b}


# ------------------------------------------------------------------------------------------------ layout and loading
def test_the_metrics_are_found_by_name():
    assert {"coreference", "gap", "perplexity"} <= set(available_metrics())
    for name in available_metrics():
        path = Path(metric_path(name))
        assert path.is_absolute() and path.is_dir() and path.parent == METRICS_DIR
    with pytest.raises(ValueError, match=r"No metric named 'bleu'.*\[.*'gap', 'perplexity'"):
        metric_path("bleu")


@pytest.mark.parametrize("name", available_metrics())
def test_each_metric_folder_is_an_evaluate_module_with_real_metadata(name):
    folder = METRICS_DIR / name
    # __init__.py makes find_packages ship the folder; <name>.py is what evaluate.load(folder) runs.
    assert (folder / "__init__.py").is_file() and (folder / f"{name}.py").is_file()
    source = (folder / f"{name}.py").read_text(encoding="utf-8")
    assert "from hf_entity_models.tasks." in source, "the metric must delegate to the tested scorer in tasks/"
    assert "from ." not in source, "the script runs from evaluate's module cache: import our code absolutely"

    metric = evaluate.load(metric_path(name))
    assert isinstance(metric, evaluate.Metric) and metric.name == name
    assert len(metric.description) > 200
    assert metric.citation.lstrip().startswith("@")
    assert ">>>" in metric.inputs_description and "Args:" in metric.inputs_description
    assert isinstance(metric.features, datasets.Features)
    for feature in metric.features:
        assert feature in metric.inputs_description
    assert load(name).name == name


def test_metrics_load_offline_in_a_fresh_process_without_importing_evaluate_up_front(tmp_path):
    # A fresh process, an empty module cache, no network, another working directory: what a user has.
    script = textwrap.dedent(
        """
        import json, sys
        import hf_entity_models.metrics as metrics
        assert "evaluate" not in sys.modules, "importing hf_entity_models.metrics must not import evaluate"
        import evaluate
        gap = evaluate.load(metrics.metric_path("gap"))
        perplexity = evaluate.load(metrics.metric_path("perplexity"))
        print(json.dumps({
            "gap": gap.compute(
                predictions=[{"a_coref": True, "b_coref": False}],
                references=[{"pronoun": "She", "a_coref": True, "b_coref": False}],
            ),
            "perplexity": perplexity.compute(negative_log_likelihood=[3.0], num_tokens=[3]),
        }))
        """
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
    }
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    assert results["gap"]["f1"] == 1.0 and results["gap"]["feminine_f1"] == 1.0
    assert results["perplexity"]["perplexity"] == pytest.approx(math.e)
    # The modules were copied into the empty cache from our folders, not found anywhere else.
    assert list((tmp_path / "modules").rglob("gap.py")) and list((tmp_path / "modules").rglob("perplexity.py"))


def test_the_metric_files_ship_in_the_built_package(tmp_path):
    # build_py is the step of `pip wheel` / `python -m build` that decides which files of the package go in.
    completed = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path / "lib")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    shipped = tmp_path / "lib" / "hf_entity_models" / "metrics"

    def files(root: Path) -> set[str]:
        return {
            str(path.relative_to(root))
            for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
        }

    assert files(shipped) == files(METRICS_DIR)
    assert {f"{name}/{name}.py" for name in available_metrics()} <= files(shipped)


# ------------------------------------------------------------------------------------------------ GAP
def test_gap_scores_a_hand_made_case(gap):
    predictions = [decisions(True, False), decisions(True, False), decisions(True, False), decisions(False, True),
                   decisions(False, False), decisions(False, True), decisions(True, False)]
    references = [gold("he", True, False),        # masculine: A true positive
                  gold("His", False, True),       # masculine: A false positive, B false negative
                  gold("she", True, False),       # feminine: A true positive
                  gold("her", False, False),      # feminine: B false positive
                  gold("She", False, True),       # feminine: no answer -> B false negative
                  gold("Herself", False, True),   # feminine: B true positive
                  gold("him", False, False)]      # masculine: A false positive
    results = gap.compute(predictions=predictions, references=references)
    # masculine: TP 1, FP 2, FN 1 -> P 1/3, R 1/2, F1 2PR/(P+R) = (1/3)/(5/6) = 2/5
    # feminine:  TP 2, FP 1, FN 1 -> P 2/3, R 2/3, F1 2/3
    # overall:   TP 3, FP 3, FN 2 -> P 1/2, R 3/5, F1 (3/5)/(11/10) = 6/11;  bias (2/3)/(2/5) = 5/3
    expected = {
        "precision": 1 / 2, "recall": 3 / 5, "f1": 6 / 11,
        "masculine_precision": 1 / 3, "masculine_recall": 1 / 2, "masculine_f1": 2 / 5,
        "feminine_precision": 2 / 3, "feminine_recall": 2 / 3, "feminine_f1": 2 / 3,
        "bias": 5 / 3,
    }
    assert list(results) == GAP_KEYS
    assert results == pytest.approx(expected)  # the bias ratio is computed from rounded F1s: last-digit differences

    # The same rows one at a time, and in two batches, give the same scores.
    for prediction, reference in zip(predictions, references):
        gap.add(prediction=prediction, reference=reference)
    assert gap.compute() == pytest.approx(expected)
    gap.add_batch(predictions=predictions[:3], references=references[:3])
    gap.add_batch(predictions=predictions[3:], references=references[3:])
    assert gap.compute() == pytest.approx(expected)


def test_gap_accepts_numpy_torch_and_integer_decisions_and_has_nan_bias_without_masculine_hits(gap):
    import numpy as np

    results = gap.compute(
        predictions=[decisions(np.bool_(True), torch.tensor(0)), decisions(0, 1)],
        references=[gold("HER", True, False), gold("him", True, False)],
    )
    # feminine: TP 1 -> F1 1;  masculine: FP 1, FN 1 -> F1 0, so the bias F1_f / F1_m is undefined.
    assert results["feminine_f1"] == 1.0 and results["masculine_f1"] == 0.0
    assert math.isnan(results["bias"])
    assert results["f1"] == pytest.approx(2 / 4)


@pytest.mark.parametrize("file_name", ["gap-validation.tsv", "gap-development.tsv"])
def test_gap_agrees_with_the_scorer_on_real_rows(gap, shared_data, file_name):
    rows = read_gap_gold(shared_data / "gap" / file_name)
    # Fixed predictions that are right on some rows and wrong on others: A on every third row, B on the next.
    fixed = {row.example_id: (index % 3 == 0, index % 3 == 1) for index, row in enumerate(rows)}
    expected = score_gap(rows, fixed)
    results = gap.compute(
        predictions=[decisions(*fixed[row.example_id]) for row in rows],
        references=[gold(row.pronoun, row.a_coref, row.b_coref) for row in rows],
    )
    assert 0.1 < results["f1"] < 0.9 and results["masculine_f1"] != results["feminine_f1"]
    assert results["f1"] == expected.f1 and results["bias"] == expected.bias
    assert results["precision"] == expected.overall.precision and results["recall"] == expected.overall.recall
    for gender, counts in (("masculine", expected.masculine), ("feminine", expected.feminine)):
        assert results[f"{gender}_precision"] == counts.precision
        assert results[f"{gender}_recall"] == counts.recall
        assert results[f"{gender}_f1"] == counts.f1


def test_gap_takes_the_rows_of_load_gap_as_references(gap, shared_data):
    path = shared_data / "gap" / "gap-validation.tsv"
    dataset = load_gap(path)
    predictions = [decisions(index % 2 == 0, False) for index in range(len(dataset))]
    fixed = {row["id"]: (p["a_coref"], p["b_coref"]) for row, p in zip(dataset, predictions)}
    expected = score_gap(read_gap_gold(path), fixed)
    assert gap.compute(predictions=predictions, references=dataset)["f1"] == expected.f1


@pytest.mark.parametrize(
    "predictions, references, message",
    [
        ([decisions(True, False)] * 2, [gold("he", True, False)],
         r"number of predictions \(2\) and references \(1\)"),
        ([(True, False)], [gold("he", True, False)], r"predictions\[0\] must be a dict"),
        ([decisions("no", False)], [gold("he", True, False)], r"predictions\[0\]\['a_coref'\] must be a boolean.*'no'"),
        ([decisions(True, 2)], [gold("he", True, False)], r"\['b_coref'\] must be a boolean.*got 2"),
        ([decisions(None, False)], [gold("he", True, False)], r"must be a boolean.*None"),
        ([{"a_coref": True, "B-coref": False}], [gold("he", True, False)], r"predictions\[0\] has no \['b_coref'\]"),
        ([decisions(True, False)], [gold(5, True, False)], r"references\[0\]\['pronoun'\] must be the pronoun's text"),
        ([decisions(True, False)], [gold("it", True, False)], r"references\[0\]: Cannot assign a gender to pronoun"),
        ([decisions(True, False)], [gold("he", True, True)], r"references\[0\]: .*both a_coref and b_coref True"),
        ({"a_coref": True, "b_coref": False}, [gold("he", True, False)], r"predictions must be a list"),
        ([decisions(True, False)], None, r"references is missing"),
        ([], [], r"No GAP rows to score"),
    ],
)
def test_gap_refuses_bad_input_with_a_clear_error(gap, predictions, references, message):
    with pytest.raises(ValueError, match=message):
        gap.compute(predictions=predictions, references=references)


# ------------------------------------------------------------------------------------------------ perplexity
def test_perplexity_is_exp_of_total_nats_over_total_tokens(perplexity):
    nll, tokens = [3.2, 10.5, 0.7], [2, 7, 1]
    results = perplexity.compute(negative_log_likelihood=nll, num_tokens=tokens)
    assert results["num_tokens"] == 10
    assert results["nll_per_token"] == pytest.approx(14.4 / 10)
    assert results["perplexity"] == pytest.approx(math.exp(1.44))
    # Not the mean of per-row perplexities, nor exp of the mean of per-row means.
    assert results["perplexity"] != pytest.approx(math.exp((3.2 / 2 + 10.5 / 7 + 0.7 / 1) / 3))

    perplexity.add_batch(negative_log_likelihood=nll[:2], num_tokens=tokens[:2])
    perplexity.add(negative_log_likelihood=nll[2], num_tokens=tokens[2])
    assert perplexity.compute()["perplexity"] == pytest.approx(math.exp(1.44))
    assert perplexity.compute(negative_log_likelihood=[2000.0], num_tokens=[1])["perplexity"] == math.inf


def test_perplexity_from_the_documented_recipe_equals_exp_of_the_corpus_cross_entropy(perplexity):
    # The recipe in the metric's input description, on logits and labels shaped like our causal-LM batches.
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 6, 11, generator=generator)
    labels = torch.randint(0, 11, (3, 6), generator=generator)
    labels[1, 4:] = -100  # padding
    labels[2, 2:] = -100
    per_token = F.cross_entropy(
        logits[:, :-1].transpose(1, 2), labels[:, 1:], ignore_index=-100, reduction="none"
    )
    sums, counts = per_token.sum(dim=1), (labels[:, 1:] != -100).sum(dim=1)
    corpus = F.cross_entropy(logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1), ignore_index=-100)

    results = perplexity.compute(negative_log_likelihood=sums, num_tokens=counts)
    assert results["num_tokens"] == 5 + 3 + 1
    assert results["perplexity"] == pytest.approx(math.exp(corpus.item()), rel=1e-6)
    # Per batch: mean loss times predicted tokens gives the same corpus perplexity.
    batch_means = [
        F.cross_entropy(logits[i, :-1], labels[i, 1:], ignore_index=-100).item() for i in range(3)
    ]
    by_batch = perplexity.compute(
        negative_log_likelihood=[mean * int(count) for mean, count in zip(batch_means, counts)],
        num_tokens=counts.tolist(),
    )
    assert by_batch["perplexity"] == pytest.approx(results["perplexity"], rel=1e-6)


@pytest.mark.parametrize(
    "inputs, message",
    [
        (dict(negative_log_likelihood=[1.0, 2.0], num_tokens=[1]),
         r"number of negative_log_likelihood \(2\) and num_tokens \(1\)"),
        (dict(negative_log_likelihood=["1.0"], num_tokens=[1]), r"negative_log_likelihood\[0\] must be a number"),
        (dict(negative_log_likelihood=[[1.0, 2.0]], num_tokens=[2]), r"sum each sequence's token losses first"),
        (dict(negative_log_likelihood=[1.0], num_tokens=[2.5]), r"num_tokens\[0\] must be a whole number"),
        (dict(negative_log_likelihood=[1.0], num_tokens=[-1]), r"num_tokens\[0\] must be a whole number >= 0"),
        (dict(negative_log_likelihood=[-0.5], num_tokens=[1]), r"negative_log_likelihood\[0\] is -0.5"),
        (dict(negative_log_likelihood=[float("nan")], num_tokens=[1]), r"negative_log_likelihood\[0\] is nan"),
        (dict(negative_log_likelihood=[1.0, 0.5], num_tokens=[1, 0]),
         r"Row 1 has num_tokens 0 but negative_log_likelihood"),
        (dict(negative_log_likelihood=[0.0], num_tokens=[0]), r"no tokens to compute a perplexity over"),
        (dict(negative_log_likelihood=[1.0]), r"num_tokens is missing"),
        (dict(predictions=[1.0], references=[1]),
         r"inputs are missing: \['negative_log_likelihood', 'num_tokens'\]"),
    ],
)
def test_perplexity_refuses_bad_input_with_a_clear_error(perplexity, inputs, message):
    with pytest.raises(ValueError, match=message):
        perplexity.compute(**inputs)


# ------------------------------------------------------------------------------------------------ coreference (CoNLL)
REFERENCE_SCORER_FILES = Path(__file__).resolve().parent / "fixtures" / "reference_scorer"


@pytest.fixture
def coreference():
    return evaluate.load(metric_path("coreference"))


def test_coreference_scores_a_hand_made_case(coreference):
    # Document 0: key {0, 4} {2, 7}, response {0, 4, 7}. MUC: 2 key links, 2 response links, 1 correct -> 50/50.
    # Document 1: key {(1, 2)}, a singleton; response empty -> costs B-cubed recall, not MUC.
    results = coreference.compute(
        predictions=[[[[0, 0], [4, 4], [7, 7]]], []],
        references=[[[[0, 0], [4, 4]], [[2, 2], [7, 7]]], [[[1, 2]]]],
    )
    assert results["muc"] == {"recall": 50.0, "precision": 50.0, "f1": 50.0}
    # B-cubed recall over 5 key mentions: 1 + 1 + 0 + 1/2 + 0 = 2.5.
    assert results["bcub"]["recall"] == pytest.approx(50.0)
    words = ["_"] * 8
    expected = score_coreference(
        [
            CorefDocument("k0", 0, words, [(0, 0, 0), (4, 4, 0), (2, 2, 1), (7, 7, 1)]),
            CorefDocument("k1", 0, words, [(1, 2, 0)]),
        ],
        [CorefDocument("k0", 0, words, [(0, 0, 0), (4, 4, 0), (7, 7, 0)])],
    )
    assert results == expected
    without = coreference.compute(predictions=[[], [[[0, 0]]]], references=[[], [[[0, 0]]]], keep_singletons=False)
    assert without["muc"]["f1"] == 0.0 and without["bcub"]["f1"] == 0.0


def test_coreference_adds_documents_one_by_one_and_in_batches(coreference):
    coreference.add(prediction=[[[0, 0], [3, 4]]], reference=[[[0, 0], [3, 4]]])
    coreference.add_batch(predictions=[[], [[[1, 1], [2, 2]]]], references=[[[[5, 5], [6, 6]]], [[[1, 1], [2, 2]]]])
    results = coreference.compute()
    assert results["muc"] == {"recall": pytest.approx(200 / 3), "precision": 100.0, "f1": 80.0}


def test_coreference_reads_conll_files_as_the_scorer_does():
    files = evaluate.load(metric_path("coreference"), "conll_files")
    key, response = REFERENCE_SCORER_FILES / "TC-A.key", REFERENCE_SCORER_FILES / "TC-A-4.response"
    # The suite's response renames the words of its invented mentions ("jnk" -> "x"): scored by word position.
    results = files.compute(predictions=[str(response)], references=[str(key)], check_words=False)
    assert results == score_coreference(key, response, check_words=False)
    # The reference scorer's test case A4: MUC (1/3, 1/3), CEAF-e (0.73333, 0.55).
    assert results["muc"]["f1"] == pytest.approx(100 / 3)
    assert results["ceafe"]["recall"] == pytest.approx(73.333, abs=1e-3)
    with pytest.raises(ValueError, match="Unknown configuration 'bcub'"):
        evaluate.load(metric_path("coreference"), "bcub")


@pytest.mark.parametrize(
    ("predictions", "references", "message"),
    [
        ([[]], [[], []], r"Mismatch in the number of predictions \(1\) and references \(2\)"),
        ([[[[0, 1, 2]]]], [[]], r"predictions\[0\]\[0\]\[0\] must be a mention \[first_word, last_word\]"),
        ([[[[3, 1]]]], [[]], r"need 0 <= first_word <= last_word"),
        ([[[["a", "b"]]]], [[]], r"two ints"),
        (["clusters"], [[]], r"predictions\[0\] must be a list of clusters"),
        ([[5]], [[]], r"predictions\[0\]\[0\] must be a cluster"),
        ([], [], r"No documents to score"),
    ],
)
def test_coreference_refuses_bad_input_with_a_clear_error(coreference, predictions, references, message):
    with pytest.raises(ValueError, match=message):
        coreference.compute(predictions=predictions, references=references)
