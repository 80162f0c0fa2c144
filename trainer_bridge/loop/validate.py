"""Validation: the loss on a fixed held-out slice (the first ``eval.max_rows`` rows of the 'val' split), per
domain too, and greedy samples from fixed prompts.

The slice is split evenly across the data-parallel ranks; every target token weighs the same, whatever the
split into ranks and micro-batches, as in training. A run without a 'val' split, or with one too small for the
ranks and the pipeline's micro-batches, trains without validation (and says so once).

Per-domain loss: the shards' rows carry each segment's document id (``doc_ids``); the run's ``docs/`` maps an id
to its domain (``eval.domain_key`` of the input record, kept in ``meta``, else the ``source`` column: the input
file). Nothing is added to the shards. The ``eval.max_domains`` domains with the most validation tokens get their
own loss, the others are pooled as ``(other)``; ids missing from ``docs/`` count as ``(unknown)``. Without
``docs/`` (shards built elsewhere), or with pipeline or tensor parallelism, only the overall loss is computed.

Samples (``Sampler``): every ``eval.sample_interval`` steps the model's full weights are gathered on rank 0
(FSDP2: an all-gather on every rank), rebuilt as a plain model, and each prompt is continued greedily for
``eval.sample_tokens`` tokens with the KV cache (``trainer_bridge.model.generate``); rank 0 appends the results to
``train/samples.jsonl``. Pipeline-parallel runs do not sample.
"""
from __future__ import annotations

import json
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from runio.files import append_jsonl
from runio.layout import RunPaths
from tokenizer.docs import iter_doc_batches, list_doc_files
from trainer_bridge.parallel import device as devices
from trainer_bridge.checkpoint.run_model import build_model, special_tokens_of_run
from trainer_bridge.config import TrainConfig
from trainer_bridge.loop.data import IGNORE_INDEX, has_split, open_split, validation_batches
from trainer_bridge.model.generate import SamplingConfig, generate
from trainer_bridge.parallel.parallelize import ModelParts

OTHER, UNKNOWN = "(other)", "(unknown)"


def read_domains(paths: RunPaths, doc_ids: set[int], domain_key: str | None) -> dict[int, str]:
    """Domain of each of ``doc_ids`` found in the run's docs/ (``FileNotFoundError`` without docs/)."""
    files = list_doc_files(str(paths.docs))
    columns = ["id", "source"] + (["meta"] if domain_key else [])
    out: dict[int, str] = {}
    wanted = np.fromiter(doc_ids, dtype=np.int64, count=len(doc_ids))
    for batch in iter_doc_batches(files, columns=[c for c in columns]):
        ids = batch.column("id").to_numpy(zero_copy_only=False)
        hit = np.nonzero(np.isin(ids, wanted))[0]
        if not len(hit):
            continue
        sources = batch.column("source").to_pylist()
        metas = batch.column("meta").to_pylist() if domain_key and "meta" in batch.schema.names else None
        for i in hit.tolist():
            name = sources[i] or UNKNOWN
            if metas is not None and metas[i]:
                try:
                    value = json.loads(metas[i]).get(domain_key)
                except (ValueError, AttributeError):
                    value = None
                if isinstance(value, (str, int)) and str(value):
                    name = str(value)
            out[int(ids[i])] = name
    return out


class Validator:
    """The training loop's validation component: ``due(step)`` after every step, ``run()`` when it is."""
class Validator:
    """The training loop's validation component: ``due(step)`` after every step, ``run()`` when it is."""

    def __init__(self, cfg: TrainConfig, paths: RunPaths, runtime: devices.Runtime, *, model: ModelParts, loss_fn,
                 context, dp_group, tokenizer_sha256: str | None, say: Callable[[str], None],
                 verify: str = "manifest"):
        """``verify``: as ``data.open_split``; a 'val' split that exists but is damaged stops the run
        (``ShardFormatError`` naming the shard), only a missing one turns validation off."""
        self.interval = cfg.eval.interval
        self.runtime, self.model, self.loss_fn, self.context, self.dp_group = runtime, model, loss_fn, context, dp_group
        self.batches = []
        self.domains: list[str] = []  # per-domain loss: the names, in index order
        self.domain_tokens: list[torch.Tensor] = []  # per batch: [n, S] domain index of each token, -1: none
        if self.interval <= 0:
            return
        if not has_split(paths.shards, "val"):
            say(f"no 'val' split in {paths.shards}; validation is off")
            return
        source = open_split(paths.shards, "val", tokenizer_sha256, verify=verify)
        self.batches = validation_batches(source, max_rows=cfg.eval.max_rows,
                                          micro_batch_size=cfg.batch.micro_batch_size, dp_rank=model.dp_rank,
                                          dp_size=cfg.mesh.dp,
                                          # pipeline stages keep the micro-batch shapes of training
                                          divisible_by=cfg.batch.micro_batch_size if cfg.mesh.pp > 1 else 1)
        if not self.batches:
            say(f"the 'val' split has {len(source)} row(s): too few for {cfg.mesh.dp} data-parallel rank(s) and "
                "the pipeline's micro-batches; validation is off")
        elif cfg.eval.max_domains > 0 and cfg.mesh.pp == 1 and cfg.mesh.tp == 1 and cfg.mesh.cp == 1:
            self._setup_domains(source, paths, cfg, say)

    def _setup_domains(self, source, paths: RunPaths, cfg: TrainConfig, say) -> None:
        """The same domain list on every rank: computed from every row of the slice, not just this rank's."""
        rows = range(min(cfg.eval.max_rows, len(source)) // cfg.mesh.dp * cfg.mesh.dp)  # the slice's rows
        segments = [source.row(r)[1:] for r in rows]
        ids = {int(i) for _, doc_ids in segments for i in doc_ids}
        if not paths.docs.exists():
            # A run directory that reads shards made elsewhere (a sweep trial links the run's shards and tokenizer,
            # not its docs/): the cleaning may well have run, but not into this directory.
            say(f"per-domain validation loss is off: this run directory has no cleaned documents ({paths.docs} "
                "does not exist) to tell each validation document's domain")
            return
        try:
            names = read_domains(paths, ids, cfg.eval.domain_key)
        except (FileNotFoundError, ValueError) as error:
            say(f"per-domain validation loss is off: the documents' domains are unknown ({error})")
            return
        tokens: dict[str, int] = {}
        for lens, doc_ids in segments:
            for n, i in zip(lens.tolist(), doc_ids.tolist()):
                name = names.get(int(i), UNKNOWN)
                tokens[name] = tokens.get(name, 0) + int(n)
        ranked = sorted(tokens, key=lambda d: (-tokens[d], d))
        kept = ranked[: cfg.eval.max_domains]
        self.domains = sorted(kept) + ([OTHER] if len(ranked) > len(kept) else [])
        index = {d: self.domains.index(d) for d in kept}
        other = len(self.domains) - 1
        for mb in self.batches:
            domain = torch.full(mb.segment_ids.shape, -1, dtype=torch.int64)
            for row, r in enumerate(mb.sample_ids):
                _, lens, doc_ids = source.row(r)
                values = [index.get(names.get(int(i), UNKNOWN), other) for i in doc_ids.tolist()]
                used = int(lens.sum())
                domain[row, :used] = torch.from_numpy(np.repeat(np.asarray(values, dtype=np.int64), lens))
            self.domain_tokens.append(domain)

    def due(self, step: int) -> bool:
        """After ``step`` completed steps."""
        return bool(self.batches) and step % self.interval == 0

    @torch.no_grad()
    def run(self) -> dict:
        """``val_loss``: the mean token loss over the slice, and ``val_loss_by_domain`` ({domain: mean token loss})
        when domains are known (every rank gets the same numbers)."""
        model, loss_fn = self.model, self.loss_fn
        loss_fn.factor, loss_fn.sums = 1.0, []
        pipeline_losses: list[torch.Tensor] = []
        tokens = 0
        device = self.runtime.device
        domain_sums = torch.zeros(len(self.domains), dtype=torch.float64, device=device)
        domain_counts = torch.zeros(len(self.domains), dtype=torch.int64, device=device)
        for b, mb in enumerate(self.batches):
            mb = model.local_batch(mb.to(self.runtime.device))
            tokens += mb.target_tokens
            with self.context:
                if model.schedule is not None:
                    args = (mb.input_ids,) if model.has_first_stage else ()
                    losses: list[torch.Tensor] = []
                    model.schedule.eval(*args, target=mb.labels, losses=losses, position_ids=mb.position_ids,
                                        segment_ids=mb.segment_ids)
                    pipeline_losses.extend(losses)
                else:
                    logits = model.parts[0](mb.input_ids, mb.position_ids, mb.segment_ids)
                    loss_fn(logits, mb.labels)
                    if self.domains:
                        labels = mb.labels.flatten()
                        counted = labels != IGNORE_INDEX
                        per_token = F.cross_entropy(logits.float().flatten(0, 1)[counted], labels[counted],
                                                    reduction="none")
                        domain = self.domain_tokens[b].to(device).flatten()[counted]
                        domain_sums.index_add_(0, domain, per_token.double())
                        domain_counts.index_add_(0, domain, torch.ones_like(domain))
        # Pipeline: the schedule's losses, on the last stage, counted by tp rank 0 alone under tensor parallelism.
        sums = (pipeline_losses if model.reports_loss else []) if model.schedule is not None else loss_fn.sums
        loss_sum = torch.stack([l.float() for l in sums]).sum() if sums else torch.zeros(())
        totals = torch.tensor([float(loss_sum), 0.0], dtype=torch.float64, device=self.runtime.device)
        counted = torch.tensor([tokens], dtype=torch.int64, device=self.runtime.device)
        self.runtime.all_reduce(totals)
        self.runtime.all_reduce(counted, self.dp_group)
        out: dict = {"val_loss": float(totals[0]) / max(1, int(counted[0]))}
        if self.domains:
            self.runtime.all_reduce(domain_sums, self.dp_group)
            self.runtime.all_reduce(domain_counts, self.dp_group)
            out["val_loss_by_domain"] = {d: float(domain_sums[i]) / int(domain_counts[i])
                                         for i, d in enumerate(self.domains) if int(domain_counts[i]) > 0}
        return out


class Sampler:
    """Greedy continuations of ``eval.sample_prompts`` every ``eval.sample_interval`` steps (``due``/``run``), for
    ``train/samples.jsonl``. Off (said once) without a tokenizer in the run directory or with pipeline stages."""

    def __init__(self, cfg: TrainConfig, paths: RunPaths, runtime: devices.Runtime, *, model: ModelParts,
                 say: Callable[[str], None]):
        self.cfg, self.paths, self.runtime, self.model = cfg, paths, runtime, model
        interval = cfg.eval.interval if cfg.eval.sample_interval is None else cfg.eval.sample_interval
        self.interval = interval if cfg.eval.sample_prompts else 0
        self.prompts: list[list[int]] = []
        if self.interval <= 0:
            return
        if cfg.mesh.pp > 1:
            say("samples are off with pipeline parallelism (mesh.pp > 1)")
            self.interval = 0
            return
        if not paths.tokenizer_json.is_file():
            say(f"samples are off: no tokenizer at {paths.tokenizer_json}")
            self.interval = 0
            return
        from tokenizers import Tokenizer  # the tokenizer library loads only when samples are on

        self.tokenizer = Tokenizer.from_file(str(paths.tokenizer_json))
        self.special = special_tokens_of_run(paths, None)
        prefix = [self.special.bos_id] if self.special.add_bos and self.special.bos_id is not None else []
        self.texts = list(cfg.eval.sample_prompts)
        self.prompts = [prefix + self.tokenizer.encode(t, add_special_tokens=False).ids for t in self.texts]
        limit = cfg.model.max_seq_len or 0
        for text, ids in zip(self.texts, self.prompts):
            if not ids or (limit and len(ids) >= limit):
                raise ValueError(f"train.eval.sample_prompts: {text!r} encodes to {len(ids)} tokens; it needs "
                                 f"1 to {limit - 1} (model.max_seq_len {limit})")

    def due(self, step: int) -> bool:
        return self.interval > 0 and step % self.interval == 0

    def run(self, step: int) -> list[dict]:
        """All ranks call it (the weights are gathered); rank 0 generates, appends and returns the records."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict


        part = self.model.parts[0]
        state = get_model_state_dict(part, options=StateDictOptions(full_state_dict=True,
                                                                    cpu_offload=self.runtime.distributed))
        if not self.runtime.is_main:
            return []
        state = {k: v.detach().float() for k, v in state.items()}
        if self.cfg.model.tie_embeddings and "output.weight" not in state:
            state["output.weight"] = state["tok_embeddings.weight"]
        model = build_model(self.cfg.model, state, self.runtime.device)
        results = generate(model, self.prompts, SamplingConfig(max_new_tokens=self.cfg.eval.sample_tokens,
                                                               temperature=0.0),
                           eos_ids=self.special.eos_ids, pad_id=self.special.pad_id or 0)
        records = []
        for text, result in zip(self.texts, results):
            shown = [t for t in result.tokens if t not in self.special.eos_ids]
            record = {"step": step, "prompt": text, "completion": self.tokenizer.decode(shown, skip_special_tokens=True),
                      "tokens": result.tokens, "stop": result.stop}
            append_jsonl(self.paths.samples_jsonl, record)
            records.append(record)
        return records
