"""`corpusmill inspect SHARDS [--row N]` and `corpusmill tokenizer train ...`."""
from __future__ import annotations

import argparse
import json
import os
import sys

SEGMENT_OPEN = "\u27e6"  # ⟦ marks where a document segment starts in a decoded row
SEGMENT_CLOSE = "\u27e7"


def register(subparsers) -> None:
    inspect = subparsers.add_parser(
        "inspect", help="summarize a shard directory and decode rows with document boundaries marked",
        description="Print the shard manifest summary; with --row, decode rows back to text, each document "
        f"segment introduced by {SEGMENT_OPEN}doc ID tokens START:END{SEGMENT_CLOSE}.",
    )
    inspect.add_argument("shards", help="shard directory (holds manifest.json), e.g. runs/demo/shards")
    inspect.add_argument("--row", type=int, action="append", help="row to decode (repeatable; negative from the end)")
    inspect.add_argument("--split", default="train", help="split to read (default: train)")
    inspect.add_argument("--tokenizer", help="tokenizer.json (default: ../tokenizer/tokenizer.json next to SHARDS)")
    inspect.add_argument("--tokens", action="store_true", help="also print the token ids of decoded rows")
    inspect.add_argument("--verify", action="store_true", help="check every shard's sha256 and structure")
    inspect.set_defaults(handler=_inspect)

    tokenizer = subparsers.add_parser("tokenizer", help="tokenizer tools")
    tok_sub = tokenizer.add_subparsers(dest="tokenizer_command", required=True, metavar="ACTION")
    train = tok_sub.add_parser(
        "train", help="train a tokenizer on kept documents (docs/*.parquet) or JSONL(.gz) files with 'text'",
        description="Train a HF tokenizers tokenizer on a deterministic sample; --param KEY=VALUE sets any "
        "tokenizer config key (model, vocab_size, normalization, sample_bytes, sample_seed, special tokens).",
    )
    train.add_argument("input", help="a docs folder of Parquet files (runs/<name>/docs) or a JSONL(.gz) file")
    train.add_argument("--out", required=True, help="where to write tokenizer.json")
    train.add_argument("--param", dest="params", action="append", default=[], metavar="KEY=VALUE")
    train.set_defaults(handler=_train)


def _config_error(message: str):
    from pipelines.config import ConfigError

    return ConfigError(message)


def _inspect(args: argparse.Namespace) -> int:
    from tokenizers import Tokenizer

    from tokenizer.shards import ShardFormatError, ShardReader
    from tokenizer.train import sha256_file

    try:
        reader = ShardReader(args.shards, split=args.split)
        if args.verify:  # every split, not only the one being decoded
            for split in reader.manifest["splits"]:
                ShardReader(args.shards, split=split).verify()
    except ShardFormatError as err:
        print(f"corpusmill inspect: {err}", file=sys.stderr)
        return 1
    m = reader.manifest
    print(f"shards: {os.path.abspath(args.shards)}  (format {m['format']} v{m['format_version']})")
    print(f"seq_len {m['seq_len']}  dtype {m['dtype']}  vocab {m['vocab_size']}  pad {m['pad_id']}  "
          f"bos {m['bos_id']}  eos {m['eos_id']}")
    print(f"tokenizer sha256 {m['tokenizer_sha256']}")
    print(f"packing: {json.dumps(m['packing'], sort_keys=True)}")
    for split, t in m["totals"].items():
        extra = ""
        if "docs" in t:
            extra = f"  docs {t['docs']}  split across rows {t.get('docs_split', 0)} ({t.get('split_share', 0):.2%})"
        print(f"{split}: {t['shards']} shards  {t['rows']} rows  {t['tokens']} tokens  {t['padding']} padding  "
              f"fill {t['fill_ratio']:.4%}{extra}")
    if args.verify:
        count = sum(len(entries) for entries in m["splits"].values())
        print(f"verify: all {count} shards ({', '.join(m['splits'])}) match their sha256 and schema")
    if not args.row:
        return 0
    tok_path = args.tokenizer or os.path.join(os.path.dirname(os.path.abspath(args.shards)), "tokenizer",
                                              "tokenizer.json")
    if not os.path.exists(tok_path):
        print(f"corpusmill inspect: no tokenizer at {tok_path} (pass --tokenizer)", file=sys.stderr)
        return 1
    if sha256_file(tok_path) != reader.tokenizer_sha256:
        print(f"corpusmill inspect: {tok_path} is not the tokenizer these shards were written with "
              f"(sha256 differs from the manifest's)", file=sys.stderr)
        return 1
    tok = Tokenizer.from_file(tok_path)
    for r in args.row:
        if not -len(reader) <= r < len(reader):
            print(f"corpusmill inspect: --row {r} out of range: split {args.split!r} has {len(reader)} rows",
                  file=sys.stderr)
            return 1
        print(format_row(reader, tok, r, show_tokens=args.tokens))
    return 0


def format_row(reader, tok, r: int, show_tokens: bool = False) -> str:
    """A row decoded to text, each segment introduced by its document id and token range within the row."""
    tokens, doc_lens, doc_ids = reader.row(r)
    lines = [f"--- row {r % len(reader)}: {len(doc_lens)} segments, {int(doc_lens.sum())} tokens, "
             f"{reader.seq_len - int(doc_lens.sum())} padding"]
    at = 0
    for n, doc_id in zip(doc_lens.tolist(), doc_ids.tolist()):
        segment = tokens[at : at + n]
        lines.append(f"{SEGMENT_OPEN}doc {doc_id} tokens {at}:{at + n}{SEGMENT_CLOSE}")
        lines.append(tok.decode(segment.tolist(), skip_special_tokens=False))
        if show_tokens:
            lines.append(" ".join(map(str, segment.tolist())))
        at += n
    if at < reader.seq_len:
        lines.append(f"{SEGMENT_OPEN}padding {at}:{reader.seq_len}{SEGMENT_CLOSE}")
    return "\n".join(lines)


def _iter_jsonl_texts(path: str):
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line).get("text")
            except (ValueError, AttributeError):
                print(f"corpusmill tokenizer train: {path}:{line_no}: not a JSON object, skipped", file=sys.stderr)
                continue
            if isinstance(text, str) and text:
                yield line_no, text


def _train(args: argparse.Namespace) -> int:
    import numpy as np
    from pydantic import ValidationError

    from tokenizer.config import TokenizerConfig
    from tokenizer.docs import list_doc_files, stable_hash
    from tokenizer.train import sample_texts, sha256_file, train_tokenizer

    import yaml

    values = {}
    for pair in args.params:
        if "=" not in pair:
            raise _config_error(f"--param {pair!r}: expected KEY=VALUE")
        key, raw = pair.split("=", 1)
        values[key.strip()] = yaml.safe_load(raw)
    try:
        cfg = TokenizerConfig(**values)
    except ValidationError as err:
        raise _config_error(
            "; ".join(f"tokenizer.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        ) from None
    if not os.path.exists(args.input):
        raise _config_error(f"input {args.input} does not exist")
    if os.path.isdir(args.input):
        try:
            texts = sample_texts(list_doc_files(args.input), cfg)
        except (FileNotFoundError, ValueError) as err:
            raise _config_error(str(err)) from None
    else:
        # JSONL: the same seeded stable-hash order, with line numbers standing in for document ids.
        records = list(_iter_jsonl_texts(args.input))
        order = np.lexsort((np.arange(len(records)), stable_hash([n for n, _ in records], cfg.sample_seed)))
        texts, used = [], 0
        for i in order.tolist():
            size = len(records[i][1].encode("utf-8"))
            if texts and used + size > cfg.sample_bytes:
                break
            texts.append(records[i][1])
            used += size
    if not texts:
        raise _config_error(f"input {args.input} holds no document text")
    tok = train_tokenizer(texts, cfg, args.out)
    print(json.dumps({
        "out": os.path.abspath(args.out), "sha256": sha256_file(args.out), "model": cfg.model,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True), "documents": len(texts),
        "sample_bytes": sum(len(t.encode("utf-8")) for t in texts),
    }, indent=1))
    return 0
