"""A Dask worker preload that profiles the runner's stage tasks (``beam_dask.execute.run_stage``) with cProfile
and writes one stats file per worker process when the worker closes:

    dask worker tcp://127.0.0.1:8786 --nworkers 2 --nthreads 1 --preload beam_dask.execute \
        --preload benchmarks/dask_stage_profile.py      # then run jobs against the scheduler; stop the workers
    python -c "import pstats,glob; s=pstats.Stats(*glob.glob('/tmp/dask_stage_profile/*.out')); \
        s.sort_stats('cumulative').print_stats(40)"

DASK_STAGE_PROFILE_DIR sets the folder (default /tmp/dask_stage_profile). Tasks are pickled by reference to
``run_stage``, so the wrapper installed here is what the workers run.
"""
import cProfile
import functools
import os

import beam_dask.execute as execute

# Dask may load a preload file more than once in a process (a copy of it per load): one profile and one wrapper
# per process, kept on the runner's module.
if not hasattr(execute, "_stage_profile"):
    execute._stage_profile = cProfile.Profile()
    _run_stage = execute.run_stage

    @functools.wraps(_run_stage)
    def _profiled_run_stage(*args, **kwargs):
        execute._stage_profile.enable()
        try:
            return _run_stage(*args, **kwargs)
        finally:
            execute._stage_profile.disable()

    execute.run_stage = _profiled_run_stage


def dask_teardown(worker):
    folder = os.environ.get("DASK_STAGE_PROFILE_DIR", "/tmp/dask_stage_profile")
    os.makedirs(folder, exist_ok=True)
    execute._stage_profile.dump_stats(os.path.join(folder, f"worker-{os.getpid()}.out"))
