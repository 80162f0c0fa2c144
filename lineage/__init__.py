"""Lineage: what a run's outputs were made of, and taking documents back out of them (`corpusmill forget`)."""
