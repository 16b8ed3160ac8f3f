"""Run several of the `ddp_train_<model>.py` scripts one after the other in ONE data-parallel launch.

Starting two processes costs several seconds (the launcher, importing torch and transformers twice, the gloo group);
the tests therefore train every model in a single launch:

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no --main_process_port 29510 tests/scripts/ddp_train_models.py OUT petra gpt2e ...

Each model writes into ``OUT/<model>``; see its script. `tests/ddp_launch.py` launches this.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import torch

SCRIPTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS_DIR))

MODELS = ("petra", "refreader", "forcereader", "gpt2e", "definition_emb")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("models", nargs="+", choices=MODELS)
    options = parser.parse_args()
    # Two processes share the machine's cores: one thread each avoids oversubscription (tiny models gain nothing).
    torch.set_num_threads(1)
    for model in options.models:
        importlib.import_module(f"ddp_train_{model}").train(options.output_dir / model)


if __name__ == "__main__":
    main()
