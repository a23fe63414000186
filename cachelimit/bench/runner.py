"""Runs the planned benchmark jobs in worker processes, with a progress bar, and estimates how long they take.

Each worker is `python -m cachelimit.bench.cell`: a fresh interpreter per cell (unless --shared-process), which
times the cell's variants alternated in it. Its stdout carries `@job i` / `@steps n` lines for the progress bar.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _run_worker(
    specs, workdir: Path, index, on_line, module: str = "cachelimit.bench.cell"
) -> tuple[list[dict] | dict | None, str]:
    """Run `specs` (a list of runs, or a calibration) in one fresh worker process (`python -m module SPECS RESULTS`);
    `on_line` sees its stdout lines. Returns (results, stderr); results is None when the worker failed."""
    spec_path, result_path, error_path = (workdir / f"{name}{index}.json" for name in ("spec", "result", "stderr"))
    spec_path.write_text(json.dumps(specs))
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding `cachelimit`
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    threads = (specs[0] if isinstance(specs, list) else specs).get("threads")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [sys.executable, "-m", module, str(spec_path), str(result_path)]
    with open(error_path, "w") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        for line in process.stdout:
            on_line(line.strip())
        process.wait()
    stderr = error_path.read_text()
    if process.returncode != 0 or not result_path.exists():
        return None, stderr
    return json.loads(result_path.read_text()), stderr


class _GroupProgress:
    """Turns a worker's `@job i` / `@steps n` lines into progress-bar updates."""

    def __init__(self, group: list[dict], progress):
        self.group, self.progress, self.job, self.steps = group, progress, 0, 0
        progress.set_description(describe(group[0]))

    def finish_job(self) -> None:
        self.progress.update(max(0, job_steps(self.group[self.job]) - self.steps))
        self.steps = 0

    def __call__(self, line: str) -> None:
        kind, _, value = line.partition(" ")
        if kind == "@job" and int(value) != self.job:
            self.finish_job()
            self.job = int(value)
            self.progress.set_description(describe(self.group[self.job]))
        elif kind == "@steps":
            self.steps += int(value)
            self.progress.update(int(value))


def job_key(job: dict) -> str:
    """What identifies a run: its spec (the figures a result adds are left out)."""
    return json.dumps({key: job.get(key) for key in JOB_KEYS}, sort_keys=True)


JOB_KEYS = (
    "role", "family", "variants", "baseline", "limit", "batch", "prompt_tokens", "new_tokens", "shape", "seed",
    "threads", "repeats", "warmup", "positions", "sample_every",
)  # fmt: skip


def job_steps(job: dict) -> int:
    """Decode steps a cell's timed and warm-up calls report (each call continues the prefill for new - 1 tokens)."""
    return (job["new_tokens"] - 1) * len(job["variants"]) * (job["repeats"] + job["warmup"])


def load_journal(journal: Path, jobs: list[dict]) -> list[dict]:
    """Results of a previous, interrupted sweep that match planned jobs (see --resume)."""
    planned = {job_key(job) for job in jobs}
    if not journal.exists():
        return []
    lines = journal.read_text().splitlines()
    return [result for result in map(json.loads, filter(None, lines)) if job_key(result) in planned]


def run_sweep(jobs, settings, workdir: Path, progress, journal: Path) -> tuple[list[dict], list[str]]:
    """Run every job (one fresh process each, or one process for all); returns the results and the failures.
    Each result is appended to `journal` as soon as its process ends, so an interrupted sweep can resume."""
    groups = ([jobs] if jobs else []) if settings["shared_process"] else [[job] for job in jobs]
    results, failures = [], []
    for index, group in enumerate(groups):
        tracker = _GroupProgress(group, progress)
        output, stderr = _run_worker(group, workdir, index, tracker)
        tracker.finish_job()
        if output is None:
            failures.append(f"{describe(group[0])}: {(stderr.strip().splitlines() or ['no output'])[-1]}")
            progress.write(f"FAILED {describe(group[0])}:\n{stderr[-2000:]}")
        else:
            results.extend(output)
            with journal.open("a") as handle:
                handle.writelines(json.dumps(result) + "\n" for result in output)
    return results, failures


def calibrate(settings: dict, workdir: Path) -> dict | None:
    """Time a model build, a prefill and a few decode steps per family and batch in a worker (see `estimate`)."""
    spec = {key: settings[key] for key in ("shape", "batches", "seed", "threads")}
    spec["families"] = settings["models"]
    started = time.perf_counter()
    figures, _ = _run_worker(spec, workdir, "calibration", lambda line: None)
    if figures is not None:
        figures["startup_s"] = max(0.0, time.perf_counter() - started - figures["compute_s"])
    return figures


def estimate(jobs: list[dict], settings: dict, figures: dict | None) -> float | None:
    """Seconds the sweep should take: per run, a process start, a model build, the prefill and the decode steps,
    each step costing the calibrated one plus the KV bytes it reads or copies at the measured copy bandwidth
    (dynamic and native sliding: read + copy of the whole cache; static: roll + copy back; else: read)."""
    if figures is None:
        return None
    total = figures["startup_s"] * (1 if settings["shared_process"] else len(jobs))
    for job in jobs:
        family, batch = figures["families"][job["family"]], str(job["batch"])
        rounds = job["repeats"] + job["warmup"]
        total += family["build_s"] * (1 + any(variant.startswith("native") for _, variant, _ in job["variants"]))
        for _, variant, limit in job["variants"]:
            dynamic = variant == "dynamic" or not limit
            context = job["prompt_tokens"] + job["new_tokens"] / 2  # the cache's mean length over the run
            context = context if dynamic else min(context, limit + 1)  # a bounded ring holds at most L + 1
            touches = {"dynamic": 3, "native_sliding": 3, "native_static": 5}.get(variant, 1)
            kv_bytes = touches * context * family["kv_bytes_per_position"] * job["batch"]
            step = family["step_ms"][batch] / 1e3 + kv_bytes / figures["copy_bytes_per_s"]
            prefill = job["prompt_tokens"] * job["batch"] * family["prefill_s_per_token"][batch]
            total += prefill + rounds * job["new_tokens"] * step
    return total


def describe(job: dict) -> str:
    return f"{job['role']} {job['family']} L={job['limit']} B={job['batch']}"
