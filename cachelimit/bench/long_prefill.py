"""The long-context prefill (`cachelimit bench --long`): CPU time and memory of reading a T-token prompt.

Three cases on SmolLM2-135M: unbounded, `cache_limit=L` (one forward over the prompt, keeping its last L), and
`cache_limit=L, prefill_chunk_size=C` (the prompt read C tokens at a time, each chunk attending to its window only).
Each case runs in a fresh process (`python -m cachelimit.bench.long_prefill CASE.json`), so its memory is its own:
the model is loaded and run once on 8 tokens (so its memory-mapped weights are resident), the kernel's
peak-RSS mark is reset (`/proc/self/clear_refs` 5), then one `generate` reads the
prompt and makes one token; reported are that call's process CPU time (`time.process_time`, which a child alone
can read, so these timings are the children's and not `measure`'s: the cases are run in `measure`'s rotating order
and paired per repeat the same way, `Measurement` built from them), its wall time, the RSS before it and the peak
RSS during it (VmHWM; growth = peak - before).

Time and memory come from different children, because what makes one honest spoils the other. The timed children
run with glibc's default allocator, as a user's process does. Memory comes from one more child per case
(`memory_runs`) with glibc's mmap threshold fixed (`MMAP_THRESHOLD`), so that its peak follows the live tensors
rather than the heap's reuse; that setting costs CPU time (every large tensor is a fresh mapping, faulted in page by
page: at 8k tokens in bf16, 3.6 million page faults against 0.2 million, +26 % CPU for the chunked prefill, +10 % for
the unbounded one), so its time is kept in the raw figures and never enters a ratio.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .alternate import Measurement, Timing

CASES = ("unbounded", "cache_limit=L", "cache_limit=L, chunked")
#: glibc serves every allocation of at least this many bytes with its own mmap, returned to the system when freed, so
#: the peak RSS follows the tensors alive at once. Left to glibc, the threshold rises as large blocks are freed, and
#: later tensors come from a heap that keeps freed memory: at 16k tokens the same case's growth then varied 444-818
#: MiB between runs; with this setting the same runs repeat to the MiB (SmolLM2 bf16 at 8k: 288 and 129 MiB, twice).
MMAP_THRESHOLD = 128 * 1024


def case_arguments(case: str, limit: int, chunk: int) -> dict:
    if case == "unbounded":
        return {}
    if case == "cache_limit=L":
        return {"cache_limit": limit}
    if case == "cache_limit=L, chunked":
        return {"cache_limit": limit, "prefill_chunk_size": chunk}
    raise ValueError(f"unknown prefill case {case!r}; known: {', '.join(CASES)}")


def _status() -> dict[str, int]:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":")
                fields[name] = int(value.split()[0]) * 1024
    return fields


def run_case(spec: dict) -> dict:
    """In the child: load the model, reset the peak mark, time one prefill (+ 1 token), read the peak."""
    import torch

    from ..cli.pretrained import load_pretrained
    from ..families.patching import patch

    torch.set_num_threads(spec["threads"])
    model, _ = load_pretrained("smollm2", dtype=getattr(torch, spec["dtype"]))
    model.generation_config.eos_token_id = None
    patch("llama")
    ids = torch.randint(3, model.config.vocab_size, (1, spec["total"]), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():  # fault the (memory-mapped) weights in first: the peak is then the prefill's own
        model(ids[:, :8])
    try:
        Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS (Linux >= 4.0)
        reset = True
    except OSError:
        reset = False
    before = _status()
    cpu, wall = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=1,
            do_sample=False,
            **case_arguments(spec["case"], spec["limit"], spec["chunk"]),
        )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = _status()
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "rss_before_bytes": before["VmRSS"],
        "peak_rss_bytes": after["VmHWM"],
        "growth_bytes": after["VmHWM"] - before["VmRSS"],
        "peak_reset": reset,
        "threads": torch.get_num_threads(),
        "malloc_mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
    }


def _child(spec: dict, env: dict) -> dict:
    command = [sys.executable, "-m", "cachelimit.bench.long_prefill", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"prefill child {spec} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_prefill(
    dtype: str, total: int, limit: int, chunk: int, repeats: int, threads: int, memory_runs: int = 1
) -> tuple[Measurement, dict[str, list[dict]], dict[str, list[dict]]]:
    """Every case once per repeat, each in a fresh process with glibc's default allocator, in `measure`'s rotating
    order, then `memory_runs` more per case with the mmap threshold fixed; the Measurement of the timed children's
    CPU times (baseline `unbounded`), their raw figures, and the memory children's."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    memory_env = dict(env, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD))
    timings: dict[str, list[Timing]] = {case: [] for case in CASES}
    raw: dict[str, list[dict]] = {case: [] for case in CASES}
    memory: dict[str, list[dict]] = {case: [] for case in CASES}
    orders, load_before = [], os.getloadavg()
    for repeat in range(repeats):
        order = list(CASES[repeat % len(CASES) :] + CASES[: repeat % len(CASES)])
        orders.append(order)
        for case in order:
            spec = {"dtype": dtype, "total": total, "limit": limit, "chunk": chunk, "case": case, "threads": threads}
            figures = _child(spec, env)
            raw[case].append(figures)
            timings[case].append(Timing(figures["cpu_s"], figures["wall_s"]))
            print(f"  prefill {dtype} T={total} {case}: {figures['cpu_s']:.1f} CPU s", flush=True)
    load_after = os.getloadavg()
    for _ in range(memory_runs):
        for case in CASES:
            spec = {"dtype": dtype, "total": total, "limit": limit, "chunk": chunk, "case": case, "threads": threads}
            figures = _child(spec, memory_env)
            memory[case].append(figures)
            print(f"  prefill {dtype} T={total} {case}: {figures['growth_bytes'] / 2**20:.0f} MiB growth", flush=True)
    measurement = Measurement(timings, CASES[0], load_before, load_after, threads, os.cpu_count(), orders)
    return measurement, raw, memory


if __name__ == "__main__":
    print(json.dumps(run_case(json.loads(sys.argv[1]))))
