"""``python -m hf_entity_models.cli``: the same as the ``hf-entity`` console script."""

import sys

from .main import main

if __name__ == "__main__":  # a module walk (doctest collection) imports this file too
    sys.exit(main())
