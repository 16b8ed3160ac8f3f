"""Definition embeddings (DefinitionEMB): prompts, definitions, replacement, isotropy, word similarity, GLUE."""
