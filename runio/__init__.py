"""The ground floor every package may import: the run directory's layout (``runio.layout``) and the few file
operations every part needs (``runio.files``: atomic writes, JSON, sha256, JSONL). Nothing here imports
another corpusmill package."""
