"""Which SDPA kernel a one-query decode step takes on the CPU, with and without a mask, and what each costs (issue 28).

    python benchmarks/sdpa_mask_kernels.py                       # writes docs/sdpa_mask_kernels.md and .json
    python benchmarks/sdpa_mask_kernels.py --keys 2048 --repeats 5 --out /tmp/sdpa

Plain `torch.nn.functional.scaled_dot_product_attention` on SmolLM2-135M's attention shapes (batch 1, 9 query heads
sharing 3 key/value heads of 64 dims, one query, `--keys` keys, `is_causal=False`), in bf16 and fp32, called the three
ways transformers' `sdpa_attention_forward` (integrations/sdpa_attention.py, 5.24.0) calls it for a decode step:
- no mask: `enable_gqa=True` on the 3 key/value heads (`use_gqa_in_sdpa` holds only when the mask is None);
- a mask, eager: `pack_gqa`, the 9 query heads folded into 3 heads of 3 queries each, the [1, 1, 1, keys] mask
  broadcast over them;
- a mask, under `torch.compile`: `repeat_kv`, the keys and values expanded to 9 heads;
plus the mask-free call on the packed and the repeated layouts, to tell the mask's cost from the layout's. Masks: an
all-true boolean (what SDPA gets from transformers' builders, and cachelimit's decode steps once every slot is read)
and an additive zero mask of the same dtype (what eager attention gets). Each case's outputs are checked equal to the
mask-free `enable_gqa` call's (the masks allow every key), and the aten ops under it are listed (torch.profiler):
which fused kernel (`_scaled_dot_product_flash_attention_for_cpu`) or the math path
(`_scaled_dot_product_attention_math`: matmul, softmax, matmul) ran. Times: `cachelimit.bench.alternate.measure`,
one unit = `--calls` calls of one case, the cases of one dtype and length alternated in one process, CPU-time ratio
to the eager masked call (pack_gqa, boolean) of the same repeat, median [min, max]; one thread (`--threads`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M
GROUPS = HEADS // KV_HEADS
BASELINE = "pack_gqa, bool mask"
KERNEL_OPS = ("flash_attention", "attention_math", "efficient_attention", "bmm", "matmul", "softmax", "baddbmm")


def cases(keys: int, dtype):
    """name -> (query, key, value, mask, enable_gqa), for one dtype and number of keys (seeded)."""
    import torch

    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    query, key, value = (
        randn(1, HEADS, 1, HEAD_DIM),
        randn(1, KV_HEADS, keys, HEAD_DIM),
        randn(1, KV_HEADS, keys, HEAD_DIM),
    )
    packed = query.reshape(1, KV_HEADS, GROUPS, HEAD_DIM)  # transformers' pack_gqa for one query
    repeated = [
        t[:, :, None].expand(1, KV_HEADS, GROUPS, keys, HEAD_DIM).reshape(1, HEADS, keys, HEAD_DIM)
        for t in (key, value)
    ]
    boolean = torch.ones(1, 1, 1, keys, dtype=torch.bool)
    additive = torch.zeros(1, 1, 1, keys, dtype=dtype)
    return {
        "enable_gqa, no mask": (query, key, value, None, True),
        "pack_gqa, no mask": (packed, key, value, None, False),
        BASELINE: (packed, key, value, boolean, False),
        "pack_gqa, additive mask": (packed, key, value, additive, False),
        "repeat_kv, no mask": (query, *repeated, None, False),
        "repeat_kv, bool mask": (query, *repeated, boolean, False),
        "repeat_kv, additive mask": (query, *repeated, additive, False),
        "enable_gqa, bool mask": (query, key, value, boolean, True),
    }


def attend(query, key, value, mask, enable_gqa):
    import torch

    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, is_causal=False, enable_gqa=enable_gqa
    )
    return out.reshape(1, HEADS, 1, HEAD_DIM)  # undo pack_gqa (a no-op view for the others)


def kernel_ops(arguments) -> list[str]:
    """The aten ops that ran under one call (profiled), the kernels among them first."""
    from torch.profiler import ProfilerActivity, profile

    attend(*arguments)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        attend(*arguments)
    names = []
    for event in prof.events():
        if event.name.startswith("aten::") and event.name not in names:
            names.append(event.name)
    return names


def kernel_of(ops: list[str]) -> str:
    if "aten::_scaled_dot_product_flash_attention_for_cpu" in ops:
        return "flash (CPU)"
    if "aten::_scaled_dot_product_attention_math" in ops:
        return "math"
    return "other: " + ", ".join(op for op in ops if any(k in op for k in KERNEL_OPS))


def run(keys: int, dtype_name: str, calls: int, repeats: int) -> dict:
    import torch

    from cachelimit.bench.alternate import measure

    dtype = getattr(torch, dtype_name)
    every = cases(keys, dtype)
    reference = attend(*every["enable_gqa, no mask"]).float()
    rows = {}
    for name, arguments in every.items():
        difference = (attend(*arguments).float() - reference).abs().max().item()
        ops = kernel_ops(arguments)
        rows[name] = {"kernel": kernel_of(ops), "ops": ops, "max_abs_diff_vs_enable_gqa": difference}

    def unit(arguments):
        def call():
            for _ in range(calls):
                attend(*arguments)

        return call

    with torch.inference_mode():
        measurement = measure({name: unit(a) for name, a in every.items()}, baseline=BASELINE, repeats=repeats)
    for name in every:
        summary = measurement.summary(name)
        rows[name].update(
            ratio=[summary[k] for k in ("ratio_median", "ratio_min", "ratio_max")],
            us_per_call=summary["cpu_s_median"] / calls * 1e6,
        )
    return {"keys": keys, "dtype": dtype_name, "rows": rows, "conditions": measurement.conditions()}


LEGEND = """\
`python benchmarks/sdpa_mask_kernels.py` (see its docstring). One query, batch 1, 9 query heads over 3 key/value
heads of 64 dims (SmolLM2-135M), `is_causal=False`. The rows are the ways transformers 5.24.0's
`sdpa_attention_forward` calls SDPA for a decode step: **enable_gqa, no mask** (its path whenever the mask is None),
**pack_gqa, bool mask** (eager with a mask: the 9 query heads folded into 3 heads of 3 queries; the baseline),
**repeat_kv, bool mask** (with a mask under `torch.compile`: keys and values expanded to 9 heads), and the other
combinations of layout and mask to tell the mask's cost from the layout's. Kernel: the aten op torch.profiler saw
under the call (`flash (CPU)` = `aten::_scaled_dot_product_flash_attention_for_cpu`, `math` =
`aten::_scaled_dot_product_attention_math`). Every mask allows every key, so every row computes the same attention
(the max abs difference to the first row is the rounding of another summation order)."""


def table(result: dict) -> str:
    lines = [
        f"**{result['dtype']}, {result['keys']} keys**\n",
        f"| call | kernel | CPU / {BASELINE} | CPU µs per call | max abs diff vs enable_gqa, no mask |",
        "|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        ratio = row["ratio"]
        lines.append(
            f"| {name} | {row['kernel']} | {ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}] | "
            f"{row['us_per_call']:.0f} | {row['max_abs_diff_vs_enable_gqa']:.2g} |"
        )
    return "\n".join(lines) + "\n\n" + result["conditions"] + "\n"


def render(report: dict) -> str:
    head = f"Machine: {report['machine']}; torch.backends: {report['backends']}.\n\n{LEGEND}\n\n"
    return head + "\n".join(table(result) for result in report["results"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="folder for sdpa_mask_kernels.md/.json")
    parser.add_argument("--keys", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--calls", type=int, default=0, help="calls per timed unit (default: 400k / keys)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the .json in --out")
    args = parser.parse_args()
    if args.render:
        (args.out / "sdpa_mask_kernels.md").write_text(
            render(json.loads((args.out / "sdpa_mask_kernels.json").read_text()))
        )
        return
    import datetime

    import torch

    from benchmarks.step_overhead import machine_name

    torch.set_num_threads(args.threads)
    results = []
    for dtype in args.dtypes:
        for keys in args.keys:
            results.append(run(keys, dtype, args.calls or max(10, 400_000 // keys), args.repeats))
            print(table(results[-1]), flush=True)
    machine = (
        f"{machine_name()}, {torch.get_num_threads()} thread(s), torch {torch.__version__}, {datetime.date.today()}"
    )
    backends = {
        "flash_sdp_enabled": torch.backends.cuda.flash_sdp_enabled(),
        "math_sdp_enabled": torch.backends.cuda.math_sdp_enabled(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine, "backends": backends, "results": results}
    (args.out / "sdpa_mask_kernels.json").write_text(json.dumps(report, indent=2) + "\n")
    text = render(report)
    (args.out / "sdpa_mask_kernels.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
