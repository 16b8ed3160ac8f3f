"""`hf-entity`: train, evaluate, run and publish the package's models from the command line.

Commands (``hf-entity COMMAND --help`` lists the options of each):

* ``train petra`` / ``train refreader``: the coreference models on GAP-format data (TSV files or Hub dataset ids) or
  the built-in people-and-pronouns corpus; the decision threshold is tuned on validation;
* ``train forcereader``: ForceReader (any rung of its ablation ladder, ``--preset``) on SQuAD 1.1 / 2.0, split by
  article, with the official EM / F1;
* ``train gpt2e``: the GPT2E entity language model on CoNLL-2012 coreference files split by book, with the
  held-out perplexities with and without entity ids;
* ``evaluate``: GAP scores of a coreference checkpoint, SQuAD scores of a question-answering one (ForceReader or any
  ``AutoModelForQuestionAnswering``), perplexities of a language model (GPT2E or GPT-2; CoNLL, LAMBADA);
* ``predict``: entities of a text, a pronoun query, GAP predictions in the official scorer's format; the answer to a
  question (and ForceReader's attention figures); the continuation of a prompt;
* ``push``: upload the files a checkpoint consists of to the Hugging Face Hub;
* ``export``: a question-answering checkpoint as an ONNX graph (and its int8 quantisation), checked against PyTorch;
* ``definitions``: rebuild a model's rare-token embeddings from dictionary definitions (DefinitionEMB).

Nothing of the user's is replaced silently: ``train`` saves into a new folder next to --output-dir and moves it into
place; a non-empty --output-dir that is not a checkpoint of this package needs --overwrite, which replaces only the
checkpoint files there; an --output-dir that holds an input of the run is refused. Output paths are checked before
any data or model is loaded. Under ``accelerate launch`` the main process alone evaluates, saves and reports.

Errors print one line on stderr and exit with status 1 (2 for bad usage); set ``HF_ENTITY_DEBUG=1`` to see the
traceback instead. The modules of this package import torch, transformers and datasets only inside the commands, so
``--help`` answers at once.

Example:
    $ hf-entity train petra --synthetic 1200 --epochs 5 --output-dir runs/petra-people
    $ hf-entity evaluate runs/petra-people gap-validation.tsv --sweep --output metrics.json
    $ hf-entity predict runs/petra-people --text "Zoe met Maggie. She smiled." --pronoun 16 19 \\
          --candidate 0 3 --candidate 8 14
    $ hf-entity train refreader --incremental --init-from runs/refreader-lm --train gap-development.tsv \\
          --validation gap-validation.tsv --output-dir runs/refreader-incremental
    $ hf-entity train forcereader --squad squad-v1.1-dev-public.json.gz --validation-articles 8 \\
          --max-length 256 --doc-stride 96 --epochs 2 --output-dir runs/forcereader-squad
    $ hf-entity predict runs/forcereader-squad --question "Who founded Microsoft?" \\
          --context "Bill Gates founded Microsoft." --top-k 3 --attention-figures attention --question-word who
    $ hf-entity train gpt2e --conll litbank/conll --tokenizer tokenizers/gpt2 --n-layer 6 --n-embd 384 \\
          --n-head 6 --window-length 256 --epochs 3 --output-dir runs/gpt2e-litbank
    $ hf-entity evaluate runs/gpt2e-litbank --conll litbank/conll --split test --lambada lambada_test.jsonl
    $ hf-entity push runs/gpt2e-litbank my-user/gpt2e-litbank
"""

from .common import CliError
from .coreference import candidate_probabilities
from .main import build_parser, main, package_version

__all__ = ["CliError", "build_parser", "candidate_probabilities", "main", "package_version"]
