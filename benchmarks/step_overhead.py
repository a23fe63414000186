"""What a bounded decode step costs on top of the model: aten ops, host syncs and ms per step (issue 18).

    python benchmarks/step_overhead.py                      # writes docs/step_overhead.json and .md
    python benchmarks/step_overhead.py --out /tmp/steps --steps 60

The built-in tiny model (a 4-layer Llama, batch 1, one thread) reads a seeded prompt of 32 tokens and decodes
`--steps` + 40 more with a window of L=64 (full from step 33: the last `--steps` are steady); every variant runs in
this one process, so the ratios compare runs of the same machine and minute. Eager: transformers' `DynamicCache`
(unbounded), the ideal bounded cache (`cachelimit.bench.ideal`: one write into a ring, nothing else), cachelimit
(growing and static ring, with and without 4 sinks). Compiled (inductor, `CompileConfig._compile_all_devices` on
CPU): transformers' `StaticCache` without a window, and cachelimit's static ring. Per variant: the median ms of the
last `--steps` steps (from one stopping check to the next; the median of `--repeats` runs taken round robin), and,
eager only, the aten ops and host syncs per step (a dispatch mode: under compile it would change what the graph
runs), with ratios to the unbounded eager step and to the compiled `StaticCache`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT, LIMIT, SINKS, EXTRA = 32, 64, 4, 40
SYNC_OPS = ("aten._local_scalar_dense", "aten.is_nonzero", "aten.item", "aten.nonzero", "aten.equal")


def variants(model, compiled: bool) -> dict:
    """name -> a function returning fresh `generate` arguments for that variant."""
    from transformers import CompileConfig
    from transformers.cache_utils import Cache

    from cachelimit import BoundedCache
    from cachelimit.bench.ideal import RingBufferLayer
    from cachelimit.hf.compat import CACHE_ARGUMENT

    layers = model.config.num_hidden_layers
    if not compiled:
        return {
            "eager dynamic (unbounded)": lambda: {},
            "eager ideal ring": lambda: {
                CACHE_ARGUMENT: Cache(layers=[RingBufferLayer(LIMIT + 1) for _ in range(layers)])
            },
            "eager cachelimit": lambda: {"cache_limit": LIMIT},
            "eager cachelimit + 4 sinks": lambda: {"cache_limit": LIMIT, "num_sink_tokens": SINKS},
            "eager cachelimit static": lambda: {CACHE_ARGUMENT: BoundedCache.from_model(model, LIMIT, static=True)},
        }
    config = CompileConfig(fullgraph=True)
    config._compile_all_devices = True  # transformers compiles on CPU only when told to
    return {
        "compiled StaticCache (unbounded)": lambda: {"cache_implementation": "static", "compile_config": config},
        "compiled cachelimit static": lambda: {
            CACHE_ARGUMENT: BoundedCache.from_model(model, LIMIT, static=True),
            "compile_config": config,
        },
        "compiled cachelimit static + 4 sinks": lambda: {
            CACHE_ARGUMENT: BoundedCache.from_model(model, LIMIT, SINKS, static=True),
            "compile_config": config,
        },
    }


def run(model, ids, steps: int, arguments: dict, count_ops: bool):
    """Median ms of the last `steps` decode steps, and (count_ops) the median ops and syncs per step."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from transformers import StoppingCriteria

    class Clock(StoppingCriteria):
        def __init__(self):
            self.stamps = []

        def __call__(self, input_ids, scores, **kwargs):
            self.stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.syncs, self.marks = 0, 0, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            self.syncs += str(func.overloadpacket) in SYNC_OPS
            return func(*args, **(kwargs or {}))

    clock, counter = Clock(), Ops()

    def mark(*_):
        counter.marks.append((counter.ops, counter.syncs))

    handle = model.register_forward_pre_hook(mark) if count_ops else None  # a hook would be traced into the graph
    try:
        with torch.inference_mode(), counter if count_ops else _nothing():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=steps + EXTRA,
                do_sample=False,
                stopping_criteria=[clock],
                **arguments,
            )
    finally:
        if handle is not None:
            handle.remove()
    times = [b - a for a, b in zip(clock.stamps, clock.stamps[1:], strict=False)][-steps:]
    row = {"ms_per_step": statistics.median(times) * 1000}
    if count_ops:
        marks = counter.marks[-steps - 1 :]
        row["ops_per_step"] = statistics.median(b[0] - a[0] for a, b in zip(marks, marks[1:], strict=False))
        row["syncs_per_step"] = statistics.median(b[1] - a[1] for a, b in zip(marks, marks[1:], strict=False))
    return row


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def measure(steps: int, repeats: int) -> list[dict]:
    import torch

    import cachelimit
    from cachelimit.cli.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    model, _ = build_tiny_model()
    cachelimit.patch("llama")
    model.generation_config.eos_token_id = None
    ids = torch.randint(1, 256, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    eager, compiled = variants(model, compiled=False), variants(model, compiled=True)
    rows = [
        {"variant": name, **run(model, ids, steps, arguments(), count_ops=True)} for name, arguments in eager.items()
    ]
    rows += [{"variant": name} for name in compiled]
    torch._dynamo.reset()
    for arguments in compiled.values():  # warm-up, the same lengths: the compiles happen here
        run(model, ids, steps, arguments(), count_ops=False)
    times: dict[str, list[float]] = {name: [] for name in [*eager, *compiled]}
    for _ in range(repeats):  # round robin: a burst of load on the shared machine hits every variant alike
        for name, arguments in {**eager, **compiled}.items():
            times[name].append(run(model, ids, steps, arguments(), count_ops=False)["ms_per_step"])
    for row in rows:
        row["ms_per_step"] = statistics.median(times[row["variant"]])  # timed without the dispatch mode
        print(f"{row['variant']}: {row}", flush=True)
    by_name = {row["variant"]: row for row in rows}
    for row in rows:
        row["ms_vs_eager_dynamic"] = row["ms_per_step"] / by_name["eager dynamic (unbounded)"]["ms_per_step"]
        row["ms_vs_compiled_static"] = row["ms_per_step"] / by_name["compiled StaticCache (unbounded)"]["ms_per_step"]
        if "ops_per_step" in row:
            row["ops_vs_eager_dynamic"] = row["ops_per_step"] / by_name["eager dynamic (unbounded)"]["ops_per_step"]
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| variant | ms/step | ops/step | syncs/step | ms / eager dynamic | ms / compiled static |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        ops = f"{row['ops_per_step']:.0f}" if "ops_per_step" in row else "-"
        syncs = f"{row['syncs_per_step']:.0f}" if "syncs_per_step" in row else "-"
        lines.append(
            f"| {row['variant']} | {row['ms_per_step']:.2f} | {ops} | {syncs} | "
            f"{row['ms_vs_eager_dynamic']:.2f} | {row['ms_vs_compiled_static']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="folder for step_overhead.json/.md")
    parser.add_argument("--steps", type=int, default=100, help="steady steps measured per variant (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant, round robin (default 5)")
    args = parser.parse_args()
    import platform

    import torch
    import transformers

    rows = measure(args.steps, args.repeats)
    machine = f"{platform.processor() or platform.machine()}, torch {torch.__version__}, transformers {transformers.__version__}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_overhead.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    (args.out / "step_overhead.md").write_text(f"Machine: {machine}, one thread\n\n" + table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
