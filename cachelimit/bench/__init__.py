"""The benchmark's parts; `cachelimit.benchmark` is the entry point.

- `worker`: the models, variants and step clock of a timed run, and the duration calibration; `cell`: one cell's
  variants alternated in one worker process (`python -m cachelimit.bench.cell`);
- `alternate`: the measuring method of every benchmark (variants alternated in one process, CPU-time ratios to a
  baseline of the same repeat, median [min, max], wall time beside them, the load average);
- `ideal`: the speed-bound cache (one in-place write per step, nothing else);
- `report`: statistics, target ratios and the JSON; `tables`: the markdown; `plots`: the PNGs.
"""
