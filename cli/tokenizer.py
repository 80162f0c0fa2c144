"""`corpusmill inspect SHARDS [--row N]` and `corpusmill tokenizer train ...`."""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from beamio.read import Quarantined, iter_records
from pipelines.config import ConfigError, InputConfig, load_section, param_overrides
from runio.errors import ExitCode
from runio.files import sha256_file
from runio.layout import RunPaths
from tokenizer.config import TokenizerConfig
from tokenizer.docs import list_doc_files, stable_hash
from tokenizer.language_check import format_check
from tokenizer.shards import ShardFormatError, ShardReader
from tokenizer.train import sample_texts, train_tokenizer

SECTION = "tokenizer"
SEGMENT_OPEN = "\u27e6"  # ⟦ marks where a document segment starts in a decoded row
SEGMENT_CLOSE = "\u27e7"


def register(subparsers) -> None:
    inspect = subparsers.add_parser(
        "inspect", help="summarize a shard directory and decode rows with document boundaries marked",
        description="Print the shard manifest summary; with --row, decode rows back to text, each document "
        f"segment introduced by {SEGMENT_OPEN}doc ID tokens START:END{SEGMENT_CLOSE}.",
    )
    inspect.add_argument("shards", help="shard directory (holds manifest.json), e.g. runs/demo/shards, or the run "
                                        "directory holding it (runs/demo)")
    inspect.add_argument("--row", type=int, action="append", help="row to decode (repeatable; negative from the end)")
    inspect.add_argument("--split", default="train", help="split to read (default: train)")
    inspect.add_argument("--tokenizer", help="tokenizer.json (default: ../tokenizer/tokenizer.json next to SHARDS)")
    inspect.add_argument("--tokens", action="store_true", help="also print the token ids of decoded rows")
    inspect.add_argument("--verify", action="store_true", help="check every shard's sha256 and structure")
    inspect.set_defaults(handler=_inspect)

    tokenizer = subparsers.add_parser("tokenizer", help="tokenizer tools")
    tok_sub = tokenizer.add_subparsers(dest="tokenizer_command", required=True, metavar="ACTION")
    train = tok_sub.add_parser(
        "train", help="train a tokenizer on kept documents (docs/*.parquet) or an input file with 'text'",
        description="Train a HF tokenizers tokenizer on a deterministic sample; --param KEY=VALUE sets any "
        "tokenizer config key (model, vocab_size, normalization, sample_bytes, sample_seed, special tokens).",
    )
    train.add_argument("input", help="a docs folder of Parquet files (runs/<name>/docs), or a file or folder the "
                                     "pipeline reads (JSONL/.gz/.zst with 'text', Parquet, .txt)")
    train.add_argument("--out", required=True, help="where to write tokenizer.json")
    train.add_argument("--param", dest="params", action="append", default=[], metavar="KEY=VALUE")
    train.set_defaults(handler=_train)


def _say_why_a_run_has_no_shards(folder: str) -> None:
    """A run directory without shards (an empty result, or a run stopped before its shards stage): raise the
    ShardFormatError that says so, instead of reading the run's manifest as a shards manifest."""
    paths = RunPaths(folder)
    try:
        manifest = json.loads(paths.manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not a run directory
    if not isinstance(manifest, dict) or "stages_done" not in manifest:
        return
    reason = (manifest.get("skipped") or {}).get("shards")
    if reason:
        raise ShardFormatError(f"{folder} is a run without shards: its shards stage was skipped ({reason})")
    raise ShardFormatError(f"{folder} is a run without shards yet (stages done: "
                           f"{', '.join(manifest['stages_done']) or 'none'}): `corpusmill prepare` or `run` builds them")


def _inspect(args: argparse.Namespace) -> int:
    from tokenizers import Tokenizer

    try:
        try:
            reader = ShardReader(args.shards, split=args.split)
        except ShardFormatError:
            if not os.path.isfile(os.path.join(args.shards, "shards", "manifest.json")):
                _say_why_a_run_has_no_shards(args.shards)
                raise
            args.shards = os.path.join(args.shards, "shards")  # a run directory: its shards (the path is printed)
            reader = ShardReader(args.shards, split=args.split)
        if args.verify:  # every split, not only the one being decoded
            for split in reader.manifest["splits"]:
                ShardReader(args.shards, split=split).verify()
    except ShardFormatError as err:
        print(f"corpusmill inspect: {err}", file=sys.stderr)
        return ExitCode.NOT_USABLE
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

    for line in format_check(m.get("tokenizer_check")):
        print(line)
    if args.verify:
        count = sum(len(entries) for entries in m["splits"].values())
        print(f"verify: all {count} shards ({', '.join(m['splits'])}) match their sha256 and schema")
    if not args.row:
        return ExitCode.OK
    # Default: the tokenizer of the run directory these shards are in.
    tok_path = args.tokenizer or str(RunPaths(os.path.dirname(os.path.abspath(args.shards))).tokenizer_json)
    if not os.path.exists(tok_path):
        print(f"corpusmill inspect: no tokenizer at {tok_path} (pass --tokenizer)", file=sys.stderr)
        return ExitCode.NOT_USABLE
    if sha256_file(tok_path) != reader.tokenizer_sha256:
        print(f"corpusmill inspect: {tok_path} is not the tokenizer these shards were written with "
              f"(sha256 differs from the manifest's)", file=sys.stderr)
        return ExitCode.NOT_USABLE
    tok = Tokenizer.from_file(tok_path)
    for r in args.row:
        if not -len(reader) <= r < len(reader):
            print(f"corpusmill inspect: --row {r} out of range: split {args.split!r} has {len(reader)} rows",
                  file=sys.stderr)
            return ExitCode.NOT_USABLE
        print(format_row(reader, tok, r, show_tokens=args.tokens))
    return ExitCode.OK


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


def _input_sample(path: str, cfg) -> list[str]:
    """The training sample of an input file read by the pipeline's reader: the same seeded stable-hash order
    as for kept documents, with record numbers (from 1) standing in for document ids."""
    import numpy as np

    input_cfg = InputConfig(paths=[path])
    records = []
    for source, index, item in iter_records(input_cfg):
        if isinstance(item, Quarantined):
            print(f"corpusmill tokenizer train: {source}:{index + 1}: {item.reason}, skipped", file=sys.stderr)
        else:
            records.append((index + 1, item["text"]))
    order = np.lexsort((np.arange(len(records)), stable_hash([n for n, _ in records], cfg.sample_seed)))
    texts, used = [], 0
    for i in order.tolist():
        size = len(records[i][1].encode("utf-8"))
        if texts and used + size > cfg.sample_bytes:
            break
        texts.append(records[i][1])
        used += size
    return texts


def _train(args: argparse.Namespace) -> int:
    cfg = load_section(None, SECTION, TokenizerConfig, param_overrides(SECTION, args.params))
    if not os.path.exists(args.input):
        raise ConfigError(f"input {args.input} does not exist")
    if os.path.isdir(args.input) and glob.glob(os.path.join(glob.escape(args.input), "*.parquet")):
        try:
            texts = sample_texts(list_doc_files(args.input), cfg)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError(str(err)) from None
    else:
        texts = _input_sample(args.input, cfg)
    if not texts:
        raise ConfigError(f"input {args.input} holds no document text")
    tok = train_tokenizer(texts, cfg, args.out)
    print(json.dumps({
        "out": os.path.abspath(args.out), "sha256": sha256_file(args.out), "model": cfg.model,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True), "documents": len(texts),
        "sample_bytes": sum(len(t.encode("utf-8")) for t in texts),
    }, indent=1))
    return ExitCode.OK
