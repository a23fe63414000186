"""What a bounded decode step costs on top of the model: aten ops, host syncs and CPU time (issues 18, 28).

    python benchmarks/step_overhead.py                      # writes docs/step_overhead.json and .md
    python benchmarks/step_overhead.py --out /tmp/steps --steps 60

The built-in tiny model (a 4-layer Llama, batch 1, one thread) reads a seeded prompt of 32 tokens and generates
`--steps` + 40 tokens with a window of L=64 (full from step 33: the last `--steps` are steady). Eager: transformers'
`DynamicCache` (unbounded), the ideal bounded cache (`cachelimit.bench.ideal`: one write into a ring, nothing else),
cachelimit (growing and static ring, with and without 4 sinks). Compiled decoding is measured per steady step
against compiled `StaticCache` at the same length by `benchmarks/compiled_steps.py` (`docs/compiled_steps.md`): whole
`generate` calls, prefill and compiles' warm-up included, against a `StaticCache` sized for the call, did not
decide it (issue 28). Times: `cachelimit.bench.alternate.measure`, one `generate` call per variant per repeat, all variants
alternated in this one process (one untimed warm-up round; each variant's cache built untimed before its call), reported as the process CPU time of the call over that of the unbounded eager call of the
same repeat, median [min, max] over `--repeats`, with the median CPU and wall ms per generated token beside it. A call includes the prefill and the 32 steps that fill the window:
with the default 200 steady steps they are a small share. Ops and host syncs per step: counted eagerly by a dispatch
mode over the last `--steps` steps; exact, not timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if TYPE_CHECKING:
    from cachelimit.bench.alternate import Measurement

PROMPT, LIMIT, SINKS, EXTRA = 32, 64, 4, 40


def variants(model) -> dict:
    """name -> a function returning fresh `generate` arguments for that variant."""
    from transformers.cache_utils import Cache

    from cachelimit import BoundedCache
    from cachelimit.bench.ideal import RingBufferLayer
    from cachelimit.hf.compat import CACHE_ARGUMENT

    layers = model.config.num_hidden_layers
    return {
        "eager dynamic (unbounded)": lambda: {},
        "eager ideal ring": lambda: {
            CACHE_ARGUMENT: Cache(layers=[RingBufferLayer(LIMIT + 1) for _ in range(layers)])
        },
        "eager cachelimit": lambda: {"cache_limit": LIMIT},
        "eager cachelimit + 4 sinks": lambda: {"cache_limit": LIMIT, "num_sink_tokens": SINKS},
        "eager cachelimit static": lambda: {CACHE_ARGUMENT: BoundedCache.from_model(model, LIMIT, static=True)},
    }


def generate(model, ids, steps: int, arguments: dict) -> None:
    """One unit of work: the prompt read and `steps` + EXTRA tokens generated greedily."""
    import torch

    with torch.inference_mode():
        model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps + EXTRA, do_sample=False, **arguments
        )


def count_ops(model, ids, steps: int, arguments: dict) -> dict:
    """The median aten ops and host syncs per step over the last `steps` decode steps (eager only: exact counts)."""
    from cachelimit.bench.op_count import OpCounter, syncs

    counter, marks = OpCounter(), []
    handle = model.register_forward_pre_hook(lambda *_: marks.append((counter.total(), syncs(counter.ops))))
    try:
        with counter:
            generate(model, ids, steps, arguments)
    finally:
        handle.remove()
    marks = marks[-steps - 1 :]
    pairs = list(zip(marks, marks[1:], strict=False))
    return {
        "ops_per_step": statistics.median(b[0] - a[0] for a, b in pairs),
        "syncs_per_step": statistics.median(b[1] - a[1] for a, b in pairs),
    }


EAGER_DYNAMIC = "eager dynamic (unbounded)"


def run_all(steps: int, repeats: int) -> tuple[list[dict], Measurement]:
    """The rows (ops and syncs, CPU ratios to the unbounded call, ms per token) and the measurement."""
    import torch

    import cachelimit
    from cachelimit.bench.alternate import measure
    from cachelimit.cli.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    model, _ = build_tiny_model()
    cachelimit.patch("llama")
    model.generation_config.eos_token_id = None
    ids = torch.randint(1, 256, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    every, prepared = variants(model), {}
    counts = {name: count_ops(model, ids, steps, arguments()) for name, arguments in every.items()}

    def setup(name: str) -> None:  # a fresh cache per call, built untimed
        prepared[name] = every[name]()

    calls = {name: (lambda name=name: generate(model, ids, steps, prepared.pop(name))) for name in every}
    by_eager = measure(calls, baseline=EAGER_DYNAMIC, repeats=repeats, warmup=1, setup=setup)
    tokens = steps + EXTRA
    rows = []
    for name in every:
        eager_ratio = by_eager.summary(name)
        rows.append(
            {
                "variant": name,
                **counts[name],
                "cpu_vs_eager_dynamic": [eager_ratio[k] for k in ("ratio_median", "ratio_min", "ratio_max")],
                "cpu_ms_per_token": eager_ratio["cpu_s_median"] * 1000 / tokens,
                "wall_ms_per_token": eager_ratio["wall_s_median"] * 1000 / tokens,
                "repeats": eager_ratio["n"],
            }
        )
        print(rows[-1], flush=True)
    return rows, by_eager


def _spread(ratio: list[float]) -> str:
    return f"{ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]"


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | ops/step | syncs/step | CPU / eager dynamic | CPU ms/token | wall ms/token |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['ops_per_step']:.0f} | {row['syncs_per_step']:.0f} | "
            f"{_spread(row['cpu_vs_eager_dynamic'])} | {row['cpu_ms_per_token']:.2f} | {row['wall_ms_per_token']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def machine_name() -> str:
    """The CPU model (from /proc/cpuinfo where there is one), so the numbers go with the machine they ran on."""
    import platform

    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        return next(line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="folder for step_overhead.json/.md")
    parser.add_argument("--steps", type=int, default=200, help="steady steps per generate call (default 200)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per variant, alternated (default 5)")
    args = parser.parse_args()
    import datetime

    import torch
    import transformers

    rows, measurement = run_all(args.steps, args.repeats)
    machine = (
        f"{machine_name()}, {measurement.cores} cores, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {datetime.date.today().isoformat()}"
    )
    unit = f"one generate call: a {PROMPT}-token prompt, {args.steps + EXTRA} new tokens, window L={LIMIT}"
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine, "unit": unit, "rows": rows, "measurement": measurement.to_json()}
    (args.out / "step_overhead.json").write_text(json.dumps(report, indent=2) + "\n")
    text = (
        f"Machine: {machine}.\nUnit of work: {unit}. CPU: process CPU time of the call over the baseline's call of "
        f"the same repeat, median [min, max] of {args.repeats} repeats, variants alternated in one process.\n"
        f"{measurement.conditions()}\nCompiled decoding, per steady step against compiled `StaticCache` at the same "
        "length: `docs/compiled_steps.md` (`benchmarks/compiled_steps.py`).\n\n" + table(rows)
    )
    (args.out / "step_overhead.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
