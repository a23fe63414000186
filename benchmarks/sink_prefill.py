"""What 4 RoPE sinks cost in a chunked prefill, against the same prefill without sinks (issue 28).

    python benchmarks/sink_prefill.py                                # writes docs/sink_prefill/sink_prefill.{json,md}
    python benchmarks/sink_prefill.py --lengths 2048 8192 16384 --repeats 3
    PYTHONPATH=/path/to/other/checkout python benchmarks/sink_prefill.py --out /tmp/before   # another version

SmolLM2-135M (`cachelimit.load_pretrained("smollm2")`, bfloat16, SDPA, one torch thread) reads a seeded prompt of
each length with `prefill_chunk_size=1024` (`--chunk`), `cache_limit=1024` and `max_new_tokens=1`, with and
without `num_sink_tokens=4`; both variants of a length run back to back in each repeat (round robin, so a burst of
load on the shared machine hits both alike). Per repeat: the CPU time (`time.process_time`) of the sink run over the
run without, and the wall times beside it; reported as the median [min, max] over the repeats, with the load
average (`os.getloadavg`) before and after. The cachelimit imported (this checkout unless PYTHONPATH names another)
is recorded, so a run of the code before a change compares with one after it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

LIMIT, SINKS = 1024, 4


def prefill(model, ids, chunk: int, sinks: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one chunked prefill plus its one generated token."""
    import torch

    cpu, wall = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=1,
            do_sample=False,
            cache_limit=LIMIT,
            num_sink_tokens=sinks,
            prefill_chunk_size=chunk,
        )
    return time.process_time() - cpu, time.perf_counter() - wall


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(lengths: list[int], repeats: int, chunk: int, threads: int, out: Path) -> dict:
    import torch

    import cachelimit

    torch.set_num_threads(threads)
    model, _ = cachelimit.load_pretrained("smollm2", dtype=torch.bfloat16)
    cachelimit.patch()
    model.generation_config.eos_token_id = None
    result = {
        "model": "smollm2 (SmolLM2-135M), bfloat16, sdpa",
        "cachelimit": str(Path(cachelimit.__file__).resolve().parent),
        "torch_threads": threads,
        "chunk": chunk,
        "cache_limit": LIMIT,
        "sinks": SINKS,
        "load_before": os.getloadavg(),
        "lengths": {},
    }
    prefill(model, torch.randint(1, 40000, (1, 2 * chunk)), chunk, SINKS)  # warm-up (first allocations)
    for length in lengths:
        ids = torch.randint(1, 40000, (1, length), generator=torch.Generator().manual_seed(length))
        runs = []
        for repeat in range(repeats):
            plain = prefill(model, ids, chunk, 0)
            sinks = prefill(model, ids, chunk, SINKS)
            runs.append({"cpu_s": [plain[0], sinks[0]], "wall_s": [plain[1], sinks[1]], "load": os.getloadavg()})
            print(f"{length} tokens, repeat {repeat}: {runs[-1]}", flush=True)
        result["lengths"][length] = {
            "runs": runs,
            "cpu_ratio": spread([run["cpu_s"][1] / run["cpu_s"][0] for run in runs]),
            "wall_ratio": spread([run["wall_s"][1] / run["wall_s"][0] for run in runs]),
            "cpu_s_without_sinks": spread([run["cpu_s"][0] for run in runs]),
            "cpu_s_with_sinks": spread([run["cpu_s"][1] for run in runs]),
        }
        result["load_after"] = os.getloadavg()
        write(result, out)  # after each length: a long run interrupted keeps what it measured
    return result


def write(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "sink_prefill.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "sink_prefill.md").write_text(table(result))


def table(result: dict) -> str:
    def cell(s: dict, digits: int = 2) -> str:
        return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}, {s['max']:.{digits}f}]"

    lines = [
        f"{result['model']}, {result['torch_threads']} torch thread(s), `prefill_chunk_size={result['chunk']}`, "
        f"`cache_limit={result['cache_limit']}`, `max_new_tokens=1`; sinks: `num_sink_tokens={result['sinks']}`. "
        f"Median [min, max] over {len(next(iter(result['lengths'].values()))['runs'])} repeats; load average "
        f"{result['load_before'][0]:.1f} before, {result['load_after'][0]:.1f} after (2-core machine, shared).",
        "",
        "| prompt tokens | CPU s without sinks | CPU s with sinks | CPU ratio sinks / none | wall ratio |",
        "|---:|---:|---:|---:|---:|",
    ]
    for length, row in result["lengths"].items():
        lines.append(
            f"| {int(length):,} | {cell(row['cpu_s_without_sinks'], 1)} | {cell(row['cpu_s_with_sinks'], 1)} | "
            f"{cell(row['cpu_ratio'])} | {cell(row['wall_ratio'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "sink_prefill")
    args = parser.parse_args()
    print(table(measure(args.lengths, args.repeats, args.chunk, args.threads, args.out)))


if __name__ == "__main__":
    main()
