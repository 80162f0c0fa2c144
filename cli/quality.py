"""`corpusmill quality train` and `corpusmill quality score`."""
from __future__ import annotations

import argparse
import json
import os
import sys

from beamio.beam_options import make_pipeline
from beamio.read import reported_id, resolve_inputs
from beamio.read_beam import ReadCorpus
from cli import positive_int
from cli.analysis import (check_out_path, no_document_exit_code, quarantine_summary, resolve_input_fields,
                          run_config_for)
from pipelines.config import ConfigError, InputConfig, load_section, param_overrides
from pipelines.steps import STEPS, StepContext
from pipelines.twins import TextTwins
from runio.errors import ExitCode
from runio.files import atomic_output
from runio.layout import RunPaths
from transforms.base import step_annotations
from transforms.quality.model import (QualityModel, QualityTrainConfig, binary_metrics, card_languages, load_labeled,
                                      sidecar_paths, split_records, train_quality_model)
from transforms.quality.step import QualityConfig, QualityFilter, ensure_models

SECTION = "quality"
TRAIN_SECTION = "quality.train"


def _train(args: argparse.Namespace) -> int:
    cfg = load_section(None, TRAIN_SECTION, QualityTrainConfig, param_overrides(TRAIN_SECTION, args.params))
    if args.quantize:
        cfg = cfg.model_copy(update={"quantize": True})
    if not os.path.exists(args.data):
        raise ConfigError(f"--data: {args.data} does not exist")
    records, problems = load_labeled(args.data, cfg)
    for problem in problems[:10]:
        print(f"corpusmill quality train: skipped {problem}", file=sys.stderr)
    if len(problems) > 10:
        print(f"corpusmill quality train: ... {len(problems) - 10} more skipped lines", file=sys.stderr)
    if not records:
        raise ConfigError(f"--data: {args.data} holds no usable record")
    try:
        model, card = train_quality_model(records, cfg, log=lambda m: print(m, file=sys.stderr, flush=True))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    card["data"]["path"] = os.path.abspath(args.data)
    card["data"]["skipped_lines"] = len(problems)
    model.save(args.out, card)
    written = [args.out]
    if cfg.quantize:
        ftz = os.path.splitext(args.out)[0] + ".ftz"
        model.quantize(cfg.quantize_cutoff)
        _, heldout = split_records(records, cfg)
        if heldout:
            import numpy as np

            scores = model.score([records[i][cfg.text_field] for i in heldout])["score"]
            truth = np.array([str(records[i][cfg.label_field]) == cfg.positive_label for i in heldout])
            card["metrics_quantized"] = binary_metrics(truth, scores)
        model.save(ftz, card)
        QualityModel.load(ftz)  # fail now, not in a pipeline, if the quantized model does not load
        written.append(ftz)
    print(_metrics_table(card))
    print("wrote " + ", ".join(written) + " (+ .order.npz and .card.json next to each)")
    return ExitCode.OK


def _metrics_table(card: dict) -> str:
    metrics = card.get("metrics")
    if not metrics:
        return "no held-out split (quality.train.heldout_fraction=0): no metrics"
    lines = [f"held-out: {metrics['stacked']['n']} documents sharing no group with training",
             f"{'model':<22}{'accuracy':>9}{'precision':>10}{'recall':>8}{'AUC':>8}"]
    for name in ("stacked", "fasttext_only"):
        m = metrics[name]
        lines.append(f"{name:<22}{m['accuracy']:>9.4f}{m['precision']:>10.4f}{m['recall']:>8.4f}{m['auc']:>8.4f}")
    if "metrics_quantized" in card:
        m = card["metrics_quantized"]
        lines.append(f"{'stacked, quantized':<22}{m['accuracy']:>9.4f}{m['precision']:>10.4f}{m['recall']:>8.4f}"
                     f"{m['auc']:>8.4f}")
    for key, breakdown in metrics.items():
        if key.startswith("by_"):
            lines.append(f"accuracy by {key[3:]} (stacked / fastText alone):")
            for value, m in breakdown.items():
                lines.append(f"  {value:<24}{m['n']:>6}  {m['accuracy']:.3f} / {m['fasttext_only_accuracy']:.3f}")
    return "\n".join(lines)


# The steps before quality whose work it reads, run by `quality score` as `prepare` runs them: normalize rewrites
# the text the model scores and judges its script, langid names the language that picks the model (or keeps the
# document unscored). The other steps before quality only remove documents.
STEPS_QUALITY_READS = ("normalize", "langid")


def _score(args: argparse.Namespace) -> int:
    import apache_beam as beam

    values = {"mode": args.mode} if args.mode else {}
    if args.threshold is not None:
        values["threshold"] = args.threshold
    cfg = load_section(args.config, SECTION, QualityConfig, param_overrides(SECTION, args.params), values=values)
    resolve_input_fields(args)
    input_cfg = InputConfig(paths=[args.input], id_field=args.id_field, text_field=args.text_field)
    run_cfg = run_config_for("quality-score", args.config, input_cfg, quality=cfg)  # a misspelt section: exit 2
    check_out_path(args.out)
    if args.model:
        for path in (args.model, sidecar_paths(args.model)[0]):
            if not os.path.exists(path):
                raise ConfigError(f"--model: {path} does not exist (train one with `corpusmill quality train`)")
    paths = RunPaths.of(run_cfg)  # (its cache, shared by the runs of output.runs_dir, is all that is used)
    ctx = StepContext(paths=paths, progress=False)
    before = [step for step in STEPS if step.name in STEPS_QUALITY_READS and step.enabled(run_cfg)]
    for step in before:
        step.check(run_cfg, ctx)  # as prepare checks them before any worker starts (a missing langid.model)
    # raises ConfigError naming a path that matches nothing; a byte-identical second file is read once, and a
    # text file's copy gets its line
    twins = TextTwins()
    files = resolve_inputs(input_cfg.paths, on_twin=twins.add,
                           log=lambda line: print(f"corpusmill quality score: {line}", file=sys.stderr))
    # --model alone (for the languages its card records), else the models `prepare` uses (quality.model and
    # quality.models, else the default ones)
    model_path = model_by_language(args.model, cfg.model_lang) if args.model else _default_model(
        cfg, paths.cache_for(SECTION))
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp_prefix = os.path.join(out_dir, f".{os.path.basename(args.out)}.{os.getpid()}.part")
    id_field = args.id_field

    def to_row(doc: dict, keep: bool) -> str:
        doc_id = reported_id(doc, id_field, default=doc["id"])  # its id field, a text file's name, else the internal id
        mine = step_annotations(doc["annotations"], SECTION)
        row = {"id": doc_id, "score": mine.get("score"), "keep": keep}
        if mine.get("skipped"):  # no configured model covers its language (or script)
            row["skipped"] = mine["skipped"]
        if mine.get("route"):  # no model judges it surely: the policy for its route decided
            row.update(route=mine["route"], policy=mine["policy"])
        if mine.get("textness") is not None:
            row["textness"] = mine["textness"]
        if not keep and doc.get("removed_by") == SECTION and doc.get("reason") != "low_quality":
            row["reason"] = doc["reason"]
        if doc.get("removed_by") not in (None, SECTION):  # removed before the quality step, as prepare removes it
            row.update(removed_by=doc["removed_by"], reason=doc["reason"])
        return json.dumps(row, ensure_ascii=False)

    pipeline = make_pipeline(args.runner, args.workers)
    with pipeline:
        read = pipeline | "Read" >> ReadCorpus(input_cfg, files)
        docs, removed_before = read["docs"], []
        for step in before:  # prepare's steps, built by prepare's code
            out = docs | step.name >> step.build(run_cfg, ctx)
            docs = out["kept"]
            removed_before.append(out["removed"])
        decided = docs | "Quality" >> QualityFilter(cfg, model_path)
        kept = decided["kept"] | "KeptRows" >> beam.Map(to_row, True)
        removed = ((decided["removed"], *removed_before) | "AllRemoved" >> beam.Flatten()
                   | "RemovedRows" >> beam.Map(to_row, False))
        _ = ((kept, removed) | "AllRows" >> beam.Flatten()
             | "WriteRows" >> beam.io.WriteToText(tmp_prefix + "-rows", file_name_suffix=".jsonl"))
        _ = (read["quarantined"] | "QuarantineRows" >> beam.Map(json.dumps)
             | "WriteQuarantine" >> beam.io.WriteToText(tmp_prefix + "-quarantine", file_name_suffix=".jsonl"))

    decoded = [json.loads(line) for line in _collect(tmp_prefix + "-rows")]
    decoded += [copy for row in decoded for copy in twins.rows(row)]
    decoded.sort(key=lambda row: _sort_key(row["id"]))
    quarantined = [json.loads(line) for line in _collect(tmp_prefix + "-quarantine")]
    quarantined += twins.quarantined(quarantined)
    with atomic_output(args.out, "w") as fh:
        for row in decoded:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    kept_n = sum(1 for row in decoded if row["keep"])
    unscored = sum(1 for row in decoded if row.get("skipped") and row["keep"])
    judged = sum(1 for row in decoded if row.get("skipped") and row["keep"] and "textness" in row)
    earlier = sum(1 for row in decoded if "removed_by" in row)
    also = (f" (of them {unscored} unscored: no configured model covers their language; {judged} of those "
            f"passed the text-ness judge)") if unscored else ""
    by = f" ({earlier} of them by {'/'.join(s.name for s in before)} before scoring)" if earlier else ""
    print(f"scored {len(decoded)} documents ({cfg.mode}): kept {kept_n}{also}, removed {len(decoded) - kept_n}{by} "
          f"-> {args.out}")
    if quarantined:
        print(f"corpusmill quality score: {quarantine_summary(quarantined)}", file=sys.stderr)
    return no_document_exit_code("quality score", "to score", len(decoded), quarantined, args.text_field)


def model_by_language(model: str, model_lang: str) -> dict[str, str]:
    """``--model`` for each language its card records (a Chinese model scores the Chinese documents); a model
    whose card does not say (trained before cards recorded it) stands for ``quality.model_lang``, as before."""
    try:
        languages = card_languages(model)
    except ValueError as err:
        raise ConfigError(f"--model: {err}") from None
    if languages is None:
        print(f"corpusmill quality score: {model} has no card recording its languages: used as the "
              f"quality.model_lang ({model_lang}) model", file=sys.stderr)
        languages = [model_lang]
    else:
        print(f"corpusmill quality score: {model} scores {'/'.join(languages)} documents (its model card)",
              file=sys.stderr)
    return {lang: model for lang in languages}


def _default_model(cfg, cache_dir) -> dict[str, str]:
    """The models `prepare` would use: ``quality.model`` (and ``quality.models``), or the default ones in the
    runs directory's cache (``<output.runs_dir>/.cache/quality``), trained there the first time (no network).
    A model or training data that does not exist is a StepConfigError naming the field (exit 2)."""
    models = ensure_models(cache_dir, cfg, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"corpusmill quality score: model {', '.join(f'{lang} {path}' for lang, path in models.items())}",
          file=sys.stderr)
    return models


def _collect(prefix: str) -> list[str]:
    """Lines of the shards Beam wrote as ``prefix-*``; the shards are removed."""
    directory, base = os.path.split(prefix)
    lines: list[str] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(base + "-"):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as fh:
                lines.extend(line.rstrip("\n") for line in fh if line.strip())
            os.remove(path)
    return lines


def _sort_key(value) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


def register(subparsers) -> None:
    quality = subparsers.add_parser("quality", help="train and apply the document quality model")
    sub = quality.add_subparsers(dest="quality_command", required=True)

    train = sub.add_parser("train", help="train a quality model on labelled JSONL; print held-out metrics",
                           description="Trains fastText plus the word-order second stage on LABELED records "
                                       "(fields text/label/group by default), holds out a group-disjoint split "
                                       "for accuracy/precision/recall/AUC, and writes MODEL, MODEL.order.npz "
                                       "and the model card MODEL.card.json.")
    train.add_argument("--data", required=True, help="labelled JSONL, .jsonl.gz or .jsonl.zst")
    train.add_argument("--out", required=True, help="model path, e.g. models/quality.bin")
    train.add_argument("--quantize", action="store_true", help="also write a quantized MODEL.ftz")
    train.add_argument("--param", dest="params", action="append", default=[], metavar="KEY=VALUE",
                       help="a quality.train setting (epoch, dim, word_ngrams, label_field, heldout_fraction, "
                            "...); repeatable")
    train.set_defaults(handler=_train)

    score = sub.add_parser("score", help="score documents through the pipeline's quality step",
                           description="Runs what `prepare` runs up to its quality decision, with its code: the "
                                       "normalize and langid steps, then the pipeline's QualityFilter (same "
                                       "scores, same decision), over INPUT, and writes one {\"id\", \"score\", "
                                       "\"keep\"} line per document; a document no configured model covers is "
                                       "kept unscored, as `prepare` keeps it: score null and \"skipped\": why; "
                                       "one an earlier step removes has \"removed_by\" and \"reason\". A text "
                                       "file byte-identical to another input gets the line of the file it copies.")
    score.add_argument("input", help="JSONL(.gz/.zst), Parquet or a folder of .txt files")
    score.add_argument("--model", help="model from `corpusmill quality train`, used alone for the languages its "
                                       "card records (a card that does not say: quality.model_lang); other "
                                       "languages go to the quality.unmodelled policy (default: "
                                       "the models `prepare` uses: quality.model and quality.models of --config, "
                                       "else the default ones, from the runs directory's cache; trained there "
                                       "once if missing)")
    score.add_argument("--config", help="run config YAML, checked as `prepare` checks it: its `quality`, "
                                        "`normalize` and `langid` sections and output.runs_dir (the model cache) "
                                        "are used (default: built-in defaults, runs/)")
    score.add_argument("--out", required=True, help="SCORES.jsonl")
    score.add_argument("--id-field", help="input field reported as id (default: --config's input.id_field, else id; "
                                          "without it: a text file's name, else corpusmill's document id)")
    score.add_argument("--text-field", help="input field holding the text (default: --config's input.text_field, "
                                            "else text)")
    score.add_argument("--mode", choices=["threshold", "top_fraction", "pareto"], help="decision (default threshold)")
    score.add_argument("--threshold", type=float, help="mode=threshold: keep when score >= it (default 0.5)")
    score.add_argument("--param", dest="params", action="append", default=[], metavar="KEY=VALUE",
                       help="another quality setting (top_fraction, pareto_alpha, seed, batch_size); repeatable")
    score.add_argument("--runner", default="direct", help="direct (default), inprocess, or a Beam runner")
    score.add_argument("--workers", type=positive_int, help="local workers (default: one per core)")
    score.set_defaults(handler=_score)
