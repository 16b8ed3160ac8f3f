"""Extractive question answering: SQuAD 1.1 / 2.0 data, features with doc stride, post-processing, the official
EM/F1, and the question-answering pipeline."""
