"""Where the CPU and the memory of ``bench_field.py``'s corpusmill side go: its clean stage on the same grown corpus,
in this process, under cProfile or under an RSS sampler that notes what the main thread runs at each new peak.

    PYTHONPATH=. .venv/bin/python benchmarks/profile_field.py cpu [--mb 100] [--top 30] [--set KEY=VALUE ...]
    PYTHONPATH=. .venv/bin/python benchmarks/profile_field.py memory [--mb 100] [--set KEY=VALUE ...]

``cpu``: cProfile of the whole clean stage (``run_stages(cfg, ("clean",))``, the config of ``bench_field.py``), the
top functions by own time and by cumulative time. ``memory``: RSS every 0.05 s; at each new peak (1 MiB above the
last) the main thread's innermost project and Beam frames are kept, so the figures say which code holds the memory
when it is reached; also the RSS right after the imports, before the pipeline runs. ``--set`` adds config overrides
after bench_field's (e.g. ``near_dedup.enabled=false``) so each step's share can be read from a run without it.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_field import CORPUSMILL_OFF, CORPUSMILL_ON, REPO, build_corpus  # noqa: E402

MiB = 1 << 20


def clean_stage(corpus: Path, out: Path, extra: list[str]):
    from pipelines.config import load_config
    from pipelines.run import run_stages

    overrides = [f"input.paths=[{corpus}]", f"output.runs_dir={out}", "name=profile_field", "runner.name=direct",
                 "runner.workers=1", *CORPUSMILL_OFF, *CORPUSMILL_ON, *extra]
    cfg = load_config(REPO / "configs" / "demo.yaml", overrides)
    return lambda: run_stages(cfg, ("clean",), log=lambda _: None)


def where(frame, keep: int = 6) -> list[str]:
    """The innermost ``keep`` frames of ``frame``'s stack that are the project's or Beam's code."""
    out = []
    for fs in reversed(traceback.extract_stack(frame)):
        path = fs.filename
        if "/apache_beam/" in path or str(REPO) in path or "pyarrow" in path:
            short = path.split("/apache_beam/")[-1] if "/apache_beam/" in path else path.replace(str(REPO) + "/", "")
            out.append(f"{short}:{fs.lineno} {fs.name}")
            if len(out) >= keep:
                break
    return out


def memory(run, interval: float = 0.05) -> None:
    proc, main = psutil.Process(), threading.main_thread().ident
    after_imports = proc.memory_info().rss
    peaks: list[tuple[float, int, list[str]]] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        last = 0
        while not stop.is_set():
            rss = proc.memory_info().rss
            if rss > last + MiB:
                last = rss
                frame = sys._current_frames().get(main)
                peaks.append((time.perf_counter() - t0, rss, where(frame) if frame else []))
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    run()
    stop.set()
    sampler.join()
    print(f"RSS after imports and config: {after_imports / MiB:.0f} MiB; peak {peaks[-1][1] / MiB:.0f} MiB at "
          f"{peaks[-1][0]:.1f} s of {time.perf_counter() - t0:.1f} s")
    # the growth in steps of >= 16 MiB, each with the code running when it was reached
    shown = after_imports
    for t, rss, stack in peaks:
        if rss - shown >= 16 * MiB or (t, rss, stack) == peaks[-1]:
            print(f"{t:7.1f} s {rss / MiB:6.0f} MiB  " + " <- ".join(stack[:4]))
            shown = rss


def cpu(run, top: int) -> None:
    prof = cProfile.Profile()
    prof.runcall(run)
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(top)
        print(buf.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("cpu", "memory"))
    parser.add_argument("--mb", type=float, default=100.0)
    parser.add_argument("--corpus-dir", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--set", action="append", default=[], help="extra config override (repeatable)")
    args = parser.parse_args()
    meta = build_corpus(args.mb, args.corpus_dir or Path(f"/tmp/bench_field_corpus_{args.mb:g}"))
    with tempfile.TemporaryDirectory(prefix="profile_field-") as out:
        run = clean_stage(Path(meta["path"]), Path(out), args.set)
        memory(run) if args.what == "memory" else cpu(run, args.top)


if __name__ == "__main__":
    main()
