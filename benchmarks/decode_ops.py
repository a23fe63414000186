"""How many aten ops one decode step dispatches, per variant: what a host-bound step (a small model at batch 1 on a
GPU, docs/gpu.md) pays for with a kernel launch or a dispatch each.

    python benchmarks/decode_ops.py

A model of SmolLM2-135M's layer and head counts (30 layers, 9 query and 3 KV heads) with tiny widths, so the count is
quick and the same as at full width; a 300-token prompt, `L = 64`; ops counted by a dispatch mode over a run of 20
new tokens minus a run of 10, per step. Counts, not times: they do not depend on the machine's load.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cachelimit.bench.gpu_decode import smollm2_shaped, variants  # noqa: E402
from cachelimit.bench.op_count import OpCounter  # noqa: E402


def ops_per_step(model, ids, options: dict, short: int = 10, long: int = 20) -> collections.Counter:
    """Ops of one decode step, by op: two runs that differ only in length, differenced."""
    counted = []
    for new in (short, long):
        with OpCounter() as counter, torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False, **options)
        counted.append(counter.ops)
    return collections.Counter({op: (counted[1][op] - counted[0][op]) / (long - short) for op in counted[1]})


def main() -> None:
    shapes = {"hidden_size": 72, "intermediate_size": 64, "head_dim": 8, "vocab_size": 128}
    model = smollm2_shaped("cpu", torch.float32, positions=4096, **shapes)
    ids = torch.randint(1, 128, (1, 300), generator=torch.Generator().manual_seed(0))
    base = None
    for name, options in variants(model, 64, compiled=False).items():  # the GPU check's eager variants, at L = 64
        ops = ops_per_step(model, ids, options())
        total = sum(ops.values())
        base = base or total
        top = ", ".join(f"{op.removeprefix('aten.')} {count:g}" for op, count in ops.most_common(6))
        print(f"{name}: {total:g} ops a step ({total / base:.2f}x unbounded); most: {top}")


if __name__ == "__main__":
    main()
