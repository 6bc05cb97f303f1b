"""The parsing and side-file pipeline (installed as ``fairseq_syntax_preprocess``)."""
