"""`corpusmill export`, `corpusmill import-hf` and `corpusmill generate`: the model to and from Hugging Face.

- `export RUN_DIR --out DIR [--step N | --best]`: a checkpoint as a `transformers` model folder.
- `import-hf MODEL_DIR --out RUN_DIR/init`: a local Llama-family folder as an init for continued pretraining
  (prints the run-config lines that use it).
- `generate RUN_DIR|MODEL_DIR --prompt TEXT | --prompts-file FILE`: sampling with a KV cache; the continuation
  goes to stdout (one JSON line per prompt with --prompts-file or --json).

export and import-hf need the optional extra `hf` (safetensors); generate from a run directory needs nothing
beyond the base install. A missing extra is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runio.errors import ExitCode


def register(subparsers) -> None:
    export = subparsers.add_parser(
        "export", help="write a checkpoint as a Hugging Face model folder (transformers, vLLM, llama.cpp converters)",
        description="Load the newest sound checkpoint of RUN_DIR (or --step N, or --best: lowest validation loss) "
                    "model-only in this process and write config.json, generation_config.json, model.safetensors, "
                    "the tokenizer files and a model card to --out. Needs the optional extra 'hf'.")
    export.add_argument("run_dir", help="a run directory (runs/<name>) or an import-hf output")
    export.add_argument("--out", required=True, help="the model folder to write (must not exist or be empty)")
    which = export.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="export checkpoint step-N instead of the newest")
    which.add_argument("--best", action="store_true", help="export the checkpoint with the lowest validation loss")
    export.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="dtype of the saved weights (default float32, as trained)")
    export.add_argument("--max-shard-size", default="5GB", help="split model.safetensors above this size (default 5GB)")
    export.set_defaults(handler=_export)

    imp = subparsers.add_parser(
        "import-hf", help="convert a local Hugging Face Llama folder into an init for continued pretraining",
        description="Read MODEL_DIR (config.json, safetensors weights, tokenizer.json; Llama family: MHA or GQA, "
                    "tied or untied embeddings, default/linear/llama3 rope) and write a model-only checkpoint and the "
                    "tokenizer to --out; prints the run-config lines (tokenizer.path, train.model, train.init_from) "
                    "that continue pretraining it on a corpus. Nothing is downloaded. Needs the optional extra 'hf'.")
    imp.add_argument("model_dir", help="a local Hugging Face model folder")
    imp.add_argument("--out", required=True, help="directory to write, e.g. runs/<name>/init")
    imp.set_defaults(handler=_import)

    gen = subparsers.add_parser(
        "generate", help="sample a continuation from a run's checkpoint or a Hugging Face folder (KV cache)",
        description="Continue a prompt with the model of RUN_DIR (newest sound checkpoint, or --step/--best) or of "
                    "a Hugging Face MODEL_DIR. Stops at the end token, --max-new-tokens or the model's context. "
                    "--temperature 0 is greedy decoding.")
    gen.add_argument("source", help="a run directory, an import-hf output, or a Hugging Face model folder")
    prompts = gen.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", help="the prompt text")
    prompts.add_argument("--prompts-file", help="a text file, one prompt per line (blank lines skipped); prints one "
                                                "JSON line per prompt")
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=1.0, help="0: greedy (default 1.0)")
    gen.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0: off)")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (1.0: off)")
    gen.add_argument("--seed", type=int, help="seed of the sampler (reproducible output)")
    gen.add_argument("--batch-size", type=int, default=8, help="prompts decoded together (default 8)")
    gen.add_argument("--json", action="store_true", help="print a JSON line (prompt, completion, token ids, stop)")
    which = gen.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="run directory: use checkpoint step-N")
    which.add_argument("--best", action="store_true", help="run directory: use the best-validation checkpoint")
    gen.set_defaults(handler=_generate)


def _fail(command: str, message: str) -> int:
    _note(command, message)
    return ExitCode.CONFIG


def _note(command: str, message: str) -> None:
    """One line on stderr (stdout is the command's output: a model's continuations, JSON lines)."""
    print(f"corpusmill {command}: {message}", file=sys.stderr, flush=True)


def _guard(command: str, action) -> int:
    # deferred: the trainer's Hugging Face module imports torch, which `corpusmill --help` must not
    from trainer_bridge.hf import ConversionError, MissingExtra

    try:
        return action()
    except MissingExtra as error:
        return _fail(command, str(error))
    except (ConversionError, FileNotFoundError, FileExistsError, ValueError) as error:
        return _fail(command, str(error))


def _export(args: argparse.Namespace) -> int:
    # deferred: imports torch (see _guard)
    from trainer_bridge.hf import export_run, parse_size

    def run() -> int:
        result = export_run(args.run_dir, args.out, step=args.step, best=args.best, dtype=args.dtype,
                            max_shard_bytes=parse_size(args.max_shard_size), say=lambda line: _note("export", line))
        print(f"corpusmill export: {result.checkpoint} → {result.out_dir} ({', '.join(result.files)})")
        return ExitCode.OK

    return _guard("export", run)


def _import(args: argparse.Namespace) -> int:
    # deferred: imports torch (see _guard)
    from trainer_bridge.hf import import_hf

    def run() -> int:
        result = import_hf(args.model_dir, args.out)
        c = result.config
        print(f"corpusmill import-hf: {args.model_dir} → {result.checkpoint} ({c.n_layers} layers, dim {c.dim}, "
              f"{c.n_heads} heads / {c.n_kv_heads} kv, vocabulary {c.vocab_size}, context {c.max_seq_len})")
        print("corpusmill import-hf: continue pretraining it with these run-config lines:")
        print(result.run_config_snippet())
        return ExitCode.OK

    return _guard("import-hf", run)


def _read_prompts(args) -> list[str]:
    """The prompts; a --prompts-file that cannot be read as UTF-8 text is a bad argument (ValueError: exit 2)."""
    if args.prompt is not None:
        return [args.prompt]
    path = Path(args.prompts_file)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"--prompts-file {path}: not UTF-8 text (byte {error.start}); one prompt per line, "
                         "in UTF-8") from None
    except OSError as error:  # missing, a folder, not readable
        raise ValueError(f"--prompts-file {path}: cannot be read ({error.strerror})") from None
    prompts = [line for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"--prompts-file {path}: no prompts (one per line)")
    return prompts


def _generate(args: argparse.Namespace) -> int:
    def run() -> int:
        from tokenizers import Tokenizer

        from trainer_bridge.checkpoint.run_model import build_model  # deferred: torch (see _guard)
        from trainer_bridge.hf import load_for_inference  # deferred: torch
        from trainer_bridge.model.generate import SamplingConfig, generate  # deferred: torch

        sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                  top_k=args.top_k, top_p=args.top_p, seed=args.seed)
        if args.batch_size < 1:
            raise ValueError("--batch-size must be >= 1")
        texts = _read_prompts(args)
        loaded = load_for_inference(args.source, step=args.step, best=args.best,
                                    say=lambda line: _note("generate", line))
        model = build_model(loaded.config, loaded.state)
        tok = Tokenizer.from_file(str(loaded.tokenizer_json))
        special = loaded.special
        prefix = [special.bos_id] if special.add_bos and special.bos_id is not None else []
        encoded = [prefix + tok.encode(t, add_special_tokens=False).ids for t in texts]
        pad = special.pad_id if special.pad_id is not None else 0
        as_json = args.json or args.prompts_file is not None
        for start in range(0, len(encoded), args.batch_size):
            batch = encoded[start:start + args.batch_size]
            for text, result in zip(texts[start:], generate(model, batch, sampling, eos_ids=special.eos_ids,
                                                            pad_id=pad)):
                shown = [t for t in result.tokens if t not in special.eos_ids]
                completion = tok.decode(shown, skip_special_tokens=True)
                if as_json:
                    print(json.dumps({"prompt": text, "completion": completion, "prompt_tokens": result.prompt,
                                      "tokens": result.tokens, "stop": result.stop}, ensure_ascii=False))
                else:
                    print(completion)
        sys.stdout.flush()
        _note("generate", f"{len(texts)} prompt(s) continued by the model of {loaded.description}")
        return ExitCode.OK

    return _guard("generate", run)


def main(argv: list[str] | None = None) -> int:
    """Run these subcommands alone: ``python -m cli.hf generate RUN_DIR --prompt ...``."""
    parser = argparse.ArgumentParser(prog="corpusmill")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
