"""Run cachelimit's benchmark sweep: `python benchmarks/run_benchmarks.py [--quick] [--out DIR] ...` (see --help).

A thin front for `cachelimit.bench.sweep.main`, which `cachelimit bench` also calls; it works from a source checkout
without installing the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
