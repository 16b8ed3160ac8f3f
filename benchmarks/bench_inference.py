"""Inference throughput beside the stock models, and what bf16, int8 and ONNX cost in accuracy (issue 39, CPU).

Three sections, each in this one process, every row of a section timed in turn within each repeat (interleaved:
a slow spell of the machine falls on every row alike); a row's time is its median over the repeats and its
accuracy is measured on the same run.

* ``qa``: ForceReader against the joint BERT baseline, both trained by `bench_forcereader_squad.py --save-models`
  (SQuAD 1.1, 1,200 training questions, one epoch, seed 0); the baseline runs as transformers' own
  ``BertForQuestionAnswering`` holding its weights (checked to give the same logits), on the report part of
  that benchmark's split (held-out articles, 300 questions): questions per second through `evaluate_squad`
  (features, model, answer spans) and the official EM / F1.
* ``lm``: GPT2E against ``GPT2LMHeadModel`` of the same size: greedy ``generate`` tokens per second (batch 1, a
  64-token prompt, 64 new tokens; GPT-2's weights are fresh, speed does not depend on them), and GPT2E's
  perplexity on LitBank books 71-80 with gold entity ids (a GPT2E trained by `bench_gpt2e_predicted_entities.py
  --save-model` on books 1-60).
* ``coref``: ``pipeline("coreference")`` on LitBank books 71-80 (words joined by spaces, raw text in) against the
  rule baseline: words per second and CoNLL F1 of the clusters (a document-mode PeTra trained by ``hf-entity train
  petra --conll``).

Rows: ``fp32``; ``bf16``: the call under ``torch.autocast("cpu", dtype=torch.bfloat16)``; ``int8``: torch's
dynamic quantisation of the ``nn.Linear`` layers (QA: the whole model; coreference: the encoder, which holds nearly
all the arithmetic; GPT-2 and GPT2E: only the LM head, the largest matrix product here, because GPT-2's blocks are
``Conv1D`` modules that dynamic quantisation does not convert); ``onnx`` / ``onnx-int8``: the exported
graph in onnxruntime, fp32 and with onnxruntime's dynamic int8 quantisation (coreference: the encoder's graph,
`export_coreference_encoder`, under the PyTorch memory; the memory recurrences are not exported: see the README's
ONNX section).

    python benchmarks/bench_inference.py --sections qa lm coref --threads 2 \\
        --qa runs/squad-models/v1.1/forcereader/seed0/final runs/squad-models/v1.1/joint-bert/seed0/final \\
        --lm runs/gpt2e-books1-60 --coref runs/petra-doc-books1-20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.ao.quantization import quantize_dynamic
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, pipeline

import hf_entity_models  # noqa: F401  (registers the models and the coreference pipeline)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpt2e_litbank import machine  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
RESULTS = Path(__file__).parent / "results"
LITBANK_REPORT = slice(70, 80)  # books 71-80 of the 80 files in sorted name order, as every LitBank benchmark


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="+", choices=["qa", "lm", "coref"], default=["qa", "lm", "coref"])
    parser.add_argument("--qa", nargs=2, metavar=("FORCEREADER", "JOINT_BERT"), help="the two trained readers")
    parser.add_argument("--lm", metavar="GPT2E", help="a GPT2E saved by bench_gpt2e_predicted_entities.py --save-model")
    parser.add_argument("--coref", metavar="CHECKPOINT", help="a document-mode coreference checkpoint")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per row (interleaved)")
    parser.add_argument("--report-questions", type=int, default=300)
    parser.add_argument("--report-books", type=int, default=10, help="LitBank books 71.. scored (at most 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch (and onnxruntime) threads")
    parser.add_argument("--output-dir", default="runs/bench-inference", help="exported ONNX files")
    parser.add_argument("--results", default=str(RESULTS / "inference.json"))
    parser.add_argument("--summarise", action="store_true", help="print the tables of --results and stop")
    return parser.parse_args(argv)


# ------------------------------------------------------------------------------------------------ rows
def bf16_autocast() -> contextlib.AbstractContextManager:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def int8_linear(module: torch.nn.Module) -> torch.nn.Module:
    """`module` with its nn.Linear layers dynamically quantised to int8 (weights int8, activations per batch)."""
    return quantize_dynamic(module, {torch.nn.Linear}, dtype=torch.qint8)


def interleaved(rows: dict[str, Callable[[], dict]], repeats: int) -> dict[str, dict]:
    """Run every row once per repeat, in turn; keep the first run's measurements and every run's seconds."""
    results: dict[str, dict] = {}
    for repeat in range(repeats):
        for name, run in rows.items():
            started = time.perf_counter()
            measured = run()
            seconds = time.perf_counter() - started
            if repeat == 0:
                results[name] = {**measured, "seconds": []}
            results[name]["seconds"].append(seconds)
            print(f"  repeat {repeat}, {name}: {seconds:.1f} s {json.dumps(measured) if repeat == 0 else ''}",
                  flush=True)
    for result in results.values():
        result["median_seconds"] = statistics.median(result["seconds"])
    return results


# ------------------------------------------------------------------------------------------------ QA
def qa_section(args) -> dict:
    from hf_entity_models.tasks.question_answering import evaluate_squad
    from bench_forcereader_squad import FILES, split_version

    split_args = argparse.Namespace(heldout_articles=8, split_seed=0, train_questions=1200, selection_articles=4,
                                    report_questions=args.report_questions)
    report = split_version("1.1", split_args)["report"]
    answer_options = {"max_length": 192, "doc_stride": 64}
    section = {"report": {"file": FILES["1.1"].name, "articles": sorted(set(report["title"])),
                          "questions": len(report)}, "models": {}}
    for checkpoint in args.qa:
        from transformers import AutoModelForQuestionAnswering

        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        model = as_stock_bert_qa(AutoModelForQuestionAnswering.from_pretrained(checkpoint).eval(), tokenizer)
        quantized = int8_linear(model)

        def scores(reader, context=contextlib.nullcontext) -> dict:
            with context(), torch.inference_mode():
                evaluation = evaluate_squad(reader, tokenizer, report, **answer_options)
            return {"exact_match": evaluation.scores["exact_match"], "f1": evaluation.scores["f1"]}

        rows = {"fp32": lambda: scores(model), "bf16": lambda: scores(model, bf16_autocast),
                "int8": lambda: scores(quantized)}
        rows.update(onnx_rows(checkpoint, model, tokenizer, report, answer_options, args))
        name = f"{type(model).__name__} ({Path(checkpoint).parent.parent.name})"
        print(f"QA {name} ({checkpoint}), {len(report)} questions", flush=True)
        measured = interleaved(rows, args.repeats)
        for result in measured.values():
            result["questions_per_second"] = len(report) / result["median_seconds"]
        section["models"][name] = {"checkpoint": str(checkpoint), "rows": measured}
    return section


def as_stock_bert_qa(reader, tokenizer):
    """The joint BERT baseline (a ForceReader whose only weights are the encoder's and one start/end layer) as
    transformers' own ``BertForQuestionAnswering`` with the same weights, checked to compute the same logits over the
    passage (where the answers come from); any other reader as it is."""
    from transformers import BertForQuestionAnswering

    weights = reader.state_dict()
    prefix = f"{reader.base_model_prefix}.encoder."
    if any(not key.startswith((prefix, "qa_outputs.")) for key in weights):
        return reader
    stock = BertForQuestionAnswering(reader.config.encoder_config).eval()
    renamed = {("bert." + key[len(prefix):] if key.startswith(prefix) else key): value for key, value in weights.items()}
    renamed = {key: value for key, value in renamed.items() if not key.startswith("bert.pooler.")}
    stock.load_state_dict(renamed, strict=True)
    sample = tokenizer("Who founded Microsoft?", "Bill Gates founded Microsoft in 1975.", return_tensors="pt")
    with torch.inference_mode():
        expected = reader(**sample).start_logits
        # The reader masks the positions outside the passage (a large negative logit); the answer is read from the
        # passage only either way.
        passage = expected > -1000
        difference = (stock(**sample).start_logits - expected)[passage].abs().max().item()
    if difference > 1e-4:
        raise RuntimeError(f"BertForQuestionAnswering differs from the joint baseline by {difference}")
    return stock


def onnx_rows(checkpoint, model, tokenizer, report, answer_options, args) -> dict[str, Callable[[], dict]]:
    """The model exported by the package (`export_onnx`, checked against PyTorch within 1e-4 there) and its int8
    quantisation (`quantize_onnx_int8`), run by onnxruntime with the same number of threads."""
    from hf_entity_models.tasks.question_answering import (
        OnnxQuestionAnswering,
        evaluate_squad,
        export_onnx,
        quantize_onnx_int8,
    )

    folder = Path(args.output_dir) / Path(checkpoint).parent.parent.name
    export = export_onnx(model, tokenizer, folder, overwrite=True)
    int8_path = quantize_onnx_int8(export.path, overwrite=True)
    sizes = {"onnx": export.path.stat().st_size, "onnx-int8": int8_path.stat().st_size}
    graphs = {"onnx": OnnxQuestionAnswering(export.path, threads=args.threads),
              "onnx-int8": OnnxQuestionAnswering(int8_path, threads=args.threads)}

    def scores(name: str) -> Callable[[], dict]:
        def run() -> dict:
            evaluation = evaluate_squad(graphs[name], tokenizer, report, **answer_options)
            return {"exact_match": evaluation.scores["exact_match"], "f1": evaluation.scores["f1"],
                    "file_megabytes": sizes[name] / 2**20,
                    **({"export_check_max_abs_logit_difference": export.max_abs_difference} if name == "onnx" else {})}
        return run

    return {name: scores(name) for name in graphs}


# ------------------------------------------------------------------------------------------------ LM
def lm_section(args) -> dict:
    from hf_entity_models import GPT2EForCausalLM
    from hf_entity_models.tasks.coreference import read_conll_coreference
    from hf_entity_models.tasks.language_modeling import entity_lm_windows, evaluate_entity_lm, generate_with_entities

    tokenizer = AutoTokenizer.from_pretrained(DATA / "tokenizers" / "gpt2")
    books = read_conll_coreference(sorted((DATA / "litbank" / "conll").glob("*.conll"))[LITBANK_REPORT][
        : args.report_books])
    gpt2e = GPT2EForCausalLM.from_pretrained(args.lm).eval()
    windows = entity_lm_windows(books, tokenizer, gpt2e.config.n_positions)
    gpt2e.config.max_entities = max(gpt2e.config.max_entities, max(max(ids) for ids in windows["entity_ids"]) + 1)
    size = {key: getattr(gpt2e.config, key) for key in ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size")}
    gpt2 = GPT2LMHeadModel(GPT2Config(**size)).eval()
    prompt = torch.tensor([windows["input_ids"][0][:64]])
    prompt_entities = torch.tensor([windows["entity_ids"][0][:64]])
    new_tokens = 64
    models = {"fp32": (gpt2e, gpt2), "int8": (int8_linear(gpt2e), int8_linear(gpt2))}

    def generation(model, context, with_entities: bool) -> Callable[[], dict]:
        def run() -> dict:
            with context(), torch.inference_mode():
                if with_entities:
                    output = generate_with_entities(model, prompt, prompt_entities, max_new_tokens=new_tokens,
                                                    do_sample=False, min_new_tokens=new_tokens)
                else:
                    output = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                            do_sample=False, pad_token_id=0)
            return {"new_tokens": int(output.shape[1] - prompt.shape[1])}
        return run

    rows = {}
    for precision, (entity_model, plain_model) in models.items():
        rows[f"GPT2E {precision}"] = generation(entity_model, contextlib.nullcontext, True)
        rows[f"GPT-2 {precision}"] = generation(plain_model, contextlib.nullcontext, False)
    rows["GPT2E bf16"] = generation(gpt2e, bf16_autocast, True)
    rows["GPT-2 bf16"] = generation(gpt2, bf16_autocast, False)
    print(f"LM generate, {new_tokens} new tokens after a {prompt.shape[1]}-token prompt", flush=True)
    measured = interleaved(rows, args.repeats)
    for result in measured.values():
        result["tokens_per_second"] = result["new_tokens"] / result["median_seconds"]

    perplexity = {}
    for precision, context, model in (("fp32", contextlib.nullcontext, gpt2e), ("bf16", bf16_autocast, gpt2e),
                                      ("int8", contextlib.nullcontext, models["int8"][0])):
        with context():
            scores = evaluate_entity_lm(model, windows, batch_size=16, progress=False)
        perplexity[precision] = {key: scores[key] for key in ("perplexity", "perplexity_without_entities",
                                                              "mention_perplexity")}
        print(f"  GPT2E {precision} perplexity: {json.dumps(perplexity[precision])}", flush=True)
    return {"books": [book.name for book in books], "model_size": size, "gpt2e": str(args.lm),
            "generate": measured, "gpt2e_perplexity_books_71_80": perplexity}


# ------------------------------------------------------------------------------------------------ coreference
def coref_section(args) -> dict:
    from bench_gpt2e_predicted_entities import word_clusters

    from hf_entity_models.tasks.coreference import read_conll_coreference, rule_baseline_clusters

    books = read_conll_coreference(sorted((DATA / "litbank" / "conll").glob("*.conll"))[LITBANK_REPORT][
        : args.report_books])
    texts = [" ".join(book.words) for book in books]
    words = sum(len(book.words) for book in books)
    fp32 = pipeline("coreference", model=args.coref, device=-1)
    int8 = pipeline("coreference", model=args.coref, device=-1)
    body = getattr(int8.model, int8.model.base_model_prefix)  # PetraModel / RefReaderModel: the encoder is theirs
    body.encoder = int8_linear(body.encoder)

    def clusters_of(resolver, context=contextlib.nullcontext) -> Callable[[], dict]:
        def run() -> dict:
            with context(), torch.inference_mode():
                found = [resolver(text)["clusters"] for text in texts]
            responses = [word_clusters(book, text, clusters) for book, text, clusters in zip(books, texts, found)]
            return conll(books, responses)
        return run

    def rules() -> dict:
        return conll(books, rule_baseline_clusters(books, mentions="rule"))

    rows = {"fp32": clusters_of(fp32), "bf16": clusters_of(fp32, bf16_autocast), "int8": clusters_of(int8)}
    rows.update({name: clusters_of(resolver) for name, resolver in onnx_encoder_pipelines(args).items()})
    rows["rule baseline"] = rules
    print(f"coreference on {len(books)} books, {words} words", flush=True)
    measured = interleaved(rows, args.repeats)
    for result in measured.values():
        result["words_per_second"] = words / result["median_seconds"]
    return {"books": [book.name for book in books], "words": words, "checkpoint": str(args.coref), "rows": measured}


def onnx_encoder_pipelines(args) -> dict:
    """Pipelines whose encoder is the package's ONNX export of it (`export_coreference_encoder`, checked within 1e-4
    of PyTorch at export) and its int8 quantisation, in onnxruntime with the same number of threads."""
    from hf_entity_models.tasks.coreference.onnx_encoder import export_coreference_encoder, use_onnx_encoder
    from hf_entity_models.tasks.question_answering import quantize_onnx_int8

    pipelines = {name: pipeline("coreference", model=args.coref, device=-1) for name in ("onnx", "onnx-int8")}
    graph = export_coreference_encoder(pipelines["onnx"].model, Path(args.output_dir) / "coref-encoder", overwrite=True)
    int8 = quantize_onnx_int8(graph, graph.with_name("encoder.int8.onnx"), overwrite=True)
    use_onnx_encoder(pipelines["onnx"].model, graph, threads=args.threads)
    use_onnx_encoder(pipelines["onnx-int8"].model, int8, threads=args.threads)
    return pipelines


def conll(books, responses) -> dict:
    from hf_entity_models.tasks.coreference import mention_scores, score_coreference

    return {"conll_f1": score_coreference(books, responses)["conll_f1"],
            "mention_f1": mention_scores(books, responses)["mention_f1"]}


# ------------------------------------------------------------------------------------------------ tables
def markdown_tables(results: dict) -> str:
    """The RESULTS.md tables of a results file: each row's speed and its accuracy change against fp32."""
    lines = []
    for name, model in results.get("qa", {}).get("models", {}).items():
        rows = model["rows"]
        lines += [f"\n{name} ({model['checkpoint']}), {results['qa']['report']['questions']} report questions",
                  "| row | questions/s | x fp32 | EM | F1 | F1 change | file MB |", "|---|---|---|---|---|---|---|"]
        for row, result in rows.items():
            lines.append(
                f"| {row} | {result['questions_per_second']:.1f} | "
                f"{result['questions_per_second'] / rows['fp32']['questions_per_second']:.2f} | "
                f"{result['exact_match']:.1f} | {result['f1']:.1f} | {result['f1'] - rows['fp32']['f1']:+.1f} | "
                f"{result.get('file_megabytes', float('nan')):.0f} |")
    if "lm" in results:
        lm = results["lm"]
        lines += ["\nGPT2E and GPT-2 generate", "| row | tokens/s |", "|---|---|"]
        lines += [f"| {row} | {result['tokens_per_second']:.1f} |" for row, result in lm["generate"].items()]
        lines += ["\nGPT2E perplexity, books 71-80 (gold entity ids)",
                  "| row | perplexity | change | without entities | mention perplexity |", "|---|---|---|---|---|"]
        reference = lm["gpt2e_perplexity_books_71_80"]["fp32"]["perplexity"]
        for row, scores in lm["gpt2e_perplexity_books_71_80"].items():
            lines.append(f"| {row} | {scores['perplexity']:.2f} | {scores['perplexity'] - reference:+.2f} | "
                         f"{scores['perplexity_without_entities']:.2f} | {scores['mention_perplexity']:.2f} |")
    if "coref" in results:
        rows = results["coref"]["rows"]
        lines += [f"\ncoreference, {len(results['coref']['books'])} books, {results['coref']['words']} words",
                  "| row | words/s | x fp32 | CoNLL F1 | change | mention F1 |", "|---|---|---|---|---|---|"]
        for row, result in rows.items():
            lines.append(
                f"| {row} | {result['words_per_second']:.0f} | "
                f"{result['words_per_second'] / rows['fp32']['words_per_second']:.2f} | {result['conll_f1']:.1f} | "
                f"{result['conll_f1'] - rows['fp32']['conll_f1']:+.1f} | {result['mention_f1']:.1f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.summarise:
        print(markdown_tables(json.loads(Path(args.results).read_text())))
        return
    torch.set_num_threads(args.threads)
    results_path = Path(args.results)
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    command = "python benchmarks/bench_inference.py " + " ".join(sys.argv[1:] if argv is None else argv)
    sections = {"qa": qa_section, "lm": lm_section, "coref": coref_section}
    for name in args.sections:
        started = time.perf_counter()
        results[name] = {**sections[name](args), "wall_seconds": time.perf_counter() - started,
                          "machine": machine(), "command": command}
        results_path.write_text(json.dumps(results, indent=1) + "\n")  # each section saved as it finishes
        print(f"{name}: saved to {results_path}", flush=True)


if __name__ == "__main__":
    main()
