"""Started in every Python process of a floor run: ``bench_scale --floor`` puts this folder
first on PYTHONPATH and sets TOKENFACTORY_BENCH_FLOOR=1, so the driver and every SDK worker
(the pool's processes inherit the environment) run the job with the pure functions
replaced by no-ops (``benchmarks.floor``). Without the variable it does nothing."""

import os

if os.environ.get("TOKENFACTORY_BENCH_FLOOR") == "1":
    from benchmarks.floor import install

    install()
