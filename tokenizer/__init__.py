"""Tokenizer training/loading, encoding, sequence packing, and the shard format (Contract 3)."""
