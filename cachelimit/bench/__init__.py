"""The benchmark's parts; `cachelimit.benchmark` is the entry point.

- `worker`: one timed run per process (`python -m cachelimit.bench.worker`), and the duration calibration;
- `ideal`: the speed-bound cache (one in-place write per step, nothing else);
- `report`: statistics, target ratios and the JSON; `tables`: the markdown; `plots`: the PNGs.
"""
