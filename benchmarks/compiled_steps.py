"""Compiled bounded decoding against compiled `StaticCache`, per steady decode step at the same length (issue 28).

    python benchmarks/compiled_steps.py                       # writes docs/compiled_steps.json and .md
    python benchmarks/compiled_steps.py --steps 200 --repeats 5 --out /tmp/steps

The built-in tiny model (a 4-layer Llama, batch 1, one thread), every variant compiled by transformers' `generate`
(inductor, `CompileConfig(fullgraph=True)` with `_compile_all_devices` on CPU), each attending over the same number of
key slots, `L + 1` (L=64):
- compiled `StaticCache` of `L + 1` slots: a 1-token prompt and `L` new tokens per `generate` call (all a static cache
  of that length can hold; a decode step costs the same at every position: one shape, every slot read under a mask),
  as many calls as it takes to reach `--steps` timed steps;
- compiled cachelimit static ring (`BoundedCache(static=True)`, `L + 1` slots), without and with 4 RoPE sinks: an
  `L`-token prompt, so the window is full from the first decode step, then `--steps` timed steps in one call.
Only steady decode steps are timed: a stopping criterion (called by `generate` after every forward, outside the
compiled graph) reads `time.process_time()` and `time.perf_counter()` after `--skip` decode steps of each call and
after its last, and the variant returns that section's `Timing` to `cachelimit.bench.alternate.measure`, which
alternates the variants in this one process (rotating order, one untimed warm-up round where the compiles happen;
caches, prefills and warm-up steps outside the timed sections) and pairs each with the baseline of the same repeat:
CPU ratio median [min, max], the middle half of the ratios and how many repeats are below 1.
`--profile` prints instead, per variant, where a steady step's work is (torch.profiler over `--steps` steps): the aten
ops run outside the compiled graph per step and the compiled regions entered per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LIMIT, SINKS = 64, 4
STATIC = "compiled StaticCache (L + 1 slots)"


class SteadyClock:
    """A stopping criterion that reads both clocks after `skip` decode steps and after the last of `total` calls
    (`generate` calls it once per generated token: after the prefill, then after each decode step)."""

    def __init__(self, skip: int, total: int):
        self.skip, self.total, self.calls, self.marks = skip, total, 0, []

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        self.calls += 1
        if self.calls in (1 + self.skip, self.total):
            self.marks.append((time.process_time(), time.perf_counter()))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def section(self):
        (cpu0, wall0), (cpu1, wall1) = self.marks
        return cpu1 - cpu0, wall1 - wall0, self.total - 1 - self.skip


def compile_config():
    from transformers import CompileConfig

    config = CompileConfig(fullgraph=True)
    config._compile_all_devices = True  # transformers compiles on CPU only when told to
    return config


def variants(model) -> dict:
    """name -> (prompt length, new tokens per call, a function building a fresh cache)."""
    from transformers import StaticCache

    from cachelimit import BoundedCache

    def static_cache():
        return StaticCache(config=model.config, max_cache_len=LIMIT + 1)

    return {
        STATIC: (1, LIMIT, static_cache),
        "compiled cachelimit static": (LIMIT, None, lambda: BoundedCache.from_model(model, LIMIT, static=True)),
        "compiled cachelimit static + 4 sinks": (
            LIMIT,
            None,
            lambda: BoundedCache.from_model(model, LIMIT, SINKS, static=True),
        ),
    }


def run_steps(model, prompt_length: int, per_call: int | None, make_cache, steps: int, skip: int):
    """Generate until `steps` steady decode steps are timed; the `Timing` of those steps only."""
    import torch
    from transformers import StoppingCriteriaList

    from cachelimit.bench.alternate import Timing
    from cachelimit.hf.compat import CACHE_ARGUMENT

    ids = torch.randint(1, 200, (1, prompt_length), generator=torch.Generator().manual_seed(0))
    cpu = wall = 0.0
    timed = 0
    while timed < steps:
        new = per_call if per_call is not None else steps + skip + 1
        new = min(new, steps - timed + skip + 1)
        clock = SteadyClock(skip, new)
        with torch.inference_mode():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                do_sample=False,
                compile_config=compile_config(),
                stopping_criteria=StoppingCriteriaList([clock]),
                **{CACHE_ARGUMENT: make_cache()},
            )
        section_cpu, section_wall, section_steps = clock.section()
        cpu, wall, timed = cpu + section_cpu, wall + section_wall, timed + section_steps
    return Timing(cpu_s=cpu / timed * steps, wall_s=wall / timed * steps)


def run_all(steps: int, repeats: int, skip: int):
    import torch

    import cachelimit
    from cachelimit.bench.alternate import measure
    from cachelimit.cli.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    model, _ = build_tiny_model()
    cachelimit.patch("llama")
    model.generation_config.suppress_tokens = None  # a logits processor of its own, the same for every variant
    every = variants(model)
    calls = {
        name: (lambda spec=spec: run_steps(model, spec[0], spec[1], spec[2], steps, skip))
        for name, spec in every.items()
    }
    torch._dynamo.reset()
    return measure(calls, baseline=STATIC, repeats=repeats, warmup=1)


def profile_steps(steps: int, skip: int) -> None:
    """Per variant: aten ops outside the compiled graph per steady step (top-level profiler events), and compiled
    regions entered per step (one: the forward; a second is a frame dynamo compiled around it)."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    import cachelimit
    from cachelimit.cli.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    model, _ = build_tiny_model()
    cachelimit.patch("llama")
    model.generation_config.suppress_tokens = None
    for name, (prompt, per_call, make_cache) in variants(model).items():
        run_steps(model, prompt, per_call, make_cache, skip + 4, skip)  # compiles here
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run_steps(model, prompt, per_call, make_cache, steps, skip)
        top = [e.name for e in prof.events() if e.cpu_parent is None]
        regions = collections.Counter(n for n in top if n.startswith("Torch-Compiled Region"))
        forwards = max(regions.values())
        eager = collections.Counter(n for n in top if n.startswith("aten::"))
        print(
            f"{name}: {sum(eager.values()) / forwards:.1f} eager aten ops and {sum(regions.values()) / forwards:.1f} "
            f"compiled regions per forward ({forwards} forwards, {dict(regions)})"
        )
        print("   " + ", ".join(f"{op} {count / forwards:.1f}" for op, count in eager.most_common(12)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="folder for compiled_steps.json/.md")
    parser.add_argument("--steps", type=int, default=400, help="timed steady decode steps per variant and repeat")
    parser.add_argument("--skip", type=int, default=8, help="decode steps of each call left untimed (warm-up)")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="print where a steady step's work is, time nothing")
    args = parser.parse_args()
    if args.profile:
        profile_steps(args.steps, args.skip)
        return
    import datetime

    import torch
    import transformers

    from benchmarks.step_overhead import machine_name

    measurement = run_all(args.steps, args.repeats, args.skip)
    machine = (
        f"{machine_name()}, {measurement.cores} cores, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, {datetime.date.today().isoformat()}"
    )
    unit = (
        f"{args.steps} steady decode steps (after {args.skip} untimed ones per call), L={LIMIT}, {LIMIT + 1} key slots"
    )
    rows = {}
    for name in measurement.variants:
        summary, ratios = measurement.summary(name), measurement.ratios(name)
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        rows[name] = {
            "cpu_vs_static": [summary[k] for k in ("ratio_median", "ratio_min", "ratio_max")],
            "cpu_vs_static_quartiles": [quartiles[0], quartiles[2]],
            "repeats_below_1": sum(r < 1 for r in ratios),
            "cpu_ms_per_step": summary["cpu_s_median"] * 1000 / args.steps,
            "wall_ms_per_step": summary["wall_s_median"] * 1000 / args.steps,
        }
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine, "unit": unit, "rows": rows, "measurement": measurement.to_json()}
    (args.out / "compiled_steps.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "| variant | CPU / StaticCache median [min, max] | middle half [q1, q3] | repeats below 1 | CPU ms/step |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        (median, low, high), (q1, q3) = row["cpu_vs_static"], row["cpu_vs_static_quartiles"]
        lines.append(
            f"| {name} | {median:.2f} [{low:.2f}, {high:.2f}] | [{q1:.2f}, {q3:.2f}] | "
            f"{row['repeats_below_1']} of {args.repeats} | {row['cpu_ms_per_step']:.3f} |"
        )
    text = (
        f"Machine: {machine}.\nUnit of work: {unit}.\n\n"
        + "\n".join(lines)
        + "\n\n"
        + measurement.table(per=f"{args.steps} steps")
    )
    (args.out / "compiled_steps.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
