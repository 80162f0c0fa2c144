"""Lineage: which documents a run trained on, where, and which checkpoints saw them (``trace``), what each
checkpoint had seen (``card``), and taking documents back out of a run (``forget``, `corpusmill forget`)."""
