"""Quality benchmark: what a bounded cache does to a real model's predictions of a long real text.

Teacher-forced negative log-likelihood (NLL) of every token of a text, measured THROUGH `model.generate`: the
prompt is the text's first token, and a logits processor (`ForceText`) records the log-probability the model
gave the text's next token, then forces that token. So every number comes from the code path a user runs
(one decode step per token, the bounded cache, its ring and sink rotation), not from a separate forward.
Runs: the dense cache, `cache_limit=L` (sliding window), `cache_limit=L` with 4 attention sinks, for each L;
with `--policy P` (as `cachelimit generate` spells it) the bounded runs keep what the scored policy P keeps.
One decode step per token costs ~0.07 s of CPU on this 30-layer model (mostly per-step overhead), so the
same numbers are also computed the cheap way (`chunked_nll`: the text as one prompt, read 64 tokens at a time
through generate's `prefill_chunk_size`, which obeys the window and the sinks exactly as decoding does); the
report uses the chunked runs and lists every decode run next to them as a cross-check (`--method`).

Default text: the English reference documentation shipped with every Python (`pydoc_data.topics`); `--text
FILE` for any other. Model: SmolLM2-135M-Instruct (`cachelimit.load_pretrained("smollm2")`). Also writes free
generation samples (sampled, same seed: dense / window / sinks). Entry point: `main(argv)` (also `cachelimit
bench --quality`, `python benchmarks/quality.py`). Every finished run is appended to OUT/quality_runs.jsonl,
so an interrupted benchmark resumes with `--resume`; the report (JSON, table, plot) is written at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
import transformers

from ..cli.flag_types import MAX_SEED, int_in_range
from ..cli.pretrained import MissingModelError, load_pretrained
from ..core.cache import kv_bytes
from ..families.patching import patch
from .arguments import (
    OneLineErrors,
    add_policy_arguments,
    cache_policy_of,
    check_policy,
    count,
    count_or_all,
    int_list,
    settings_or_exit,
    threads,
)
from .progress import RunProgress
from .quality_report import perplexity, write_report
from .scoring import (  # noqa: F401  (the scoring functions were first defined here; they stay reachable)
    SAMPLE_PROMPT,
    ForceText,
    Scored,
    chunked_nll,
    chunked_scores,
    decode_scores,
    default_text,
    free_sample,
    teacher_forced_nll,
    text_tokens,
)

DEFAULT_LIMITS = (64, 256)
SINKS = 4
SAME_AS_TOKENS = object()  # --dense-tokens unset
PARTIAL = "quality_partial.json"  # the positions the running chunked run has scored so far
PARTIAL_EVERY = 8192  # positions between two updates of it


def configurations(limits, policy: str | None = None, protected: int | None = None) -> list[dict]:
    """The dense run, then per limit the bounded runs without and with sinks: the window's, or (`policy`: a scored
    policy's name) that policy's, named after it."""
    runs = [{"name": "dense", "cache_limit": None, "num_sink_tokens": None}]
    scored = {"policy": policy, "protected": protected} if policy not in (None, "window") else {}
    for limit in limits:
        for sinks, name in ((None, f"window L={limit}"), (SINKS, f"sinks L={limit}, S={SINKS}")):
            name = f"{policy} L={limit}" + (f", S={SINKS}" if sinks else "") if scored else name
            runs.append({"name": name, "cache_limit": limit, "num_sink_tokens": sinks, **scored})
    return runs


def _journal(path: Path) -> dict:
    if not path.is_file():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {record["key"]: record for record in records}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog="cachelimit bench --quality",
        description="Teacher-forced NLL of a long real text through model.generate on SmolLM2-135M-Instruct: "
        "dense cache vs cache_limit=L without and with 4 sinks. Writes quality.json, quality_table.md, "
        "quality_nll.png and quality_samples.md to --out.",
    )
    parser.add_argument(
        "--text", type=Path, help="a UTF-8 text file (default: pydoc_data.topics, every Python ships it)"
    )
    parser.add_argument(
        "--tokens", type=count_or_all, default=4096, help="text tokens to score, or `all` (default: 4096)"
    )
    parser.add_argument(
        "--dense-tokens",
        type=count_or_all,
        default=SAME_AS_TOKENS,
        help="text tokens for the dense runs, or `all` (default: --tokens); a dense cache grows with the text, "
        "so a long text is scored by the bounded runs and a shorter prefix by the dense one",
    )
    parser.add_argument(
        "--limits", type=int_list, default=",".join(map(str, DEFAULT_LIMITS)), help="cache limits (default: 64,256)"
    )
    parser.add_argument(
        "--method",
        choices=("chunked", "decode", "both"),
        default="both",
        help="chunked: the text as a prompt read --chunk tokens at a time (minutes); decode: one generate step "
        "per token (hours on 2 cores); both (default): chunked, then decode as a cross-check",
    )
    parser.add_argument(
        "--chunk",
        type=count(),
        default=256,
        help="prefill_chunk_size of the chunked runs (default: 256; any size gives the same numbers, a larger one "
        "fewer forwards)",
    )
    add_policy_arguments(parser)
    parser.add_argument("--sample-tokens", type=count(0), default=1500, help="tokens per free sample (0: none)")
    parser.add_argument("--sample-limit", type=count(), default=256, help="cache limit of the free samples")
    parser.add_argument("--only", help="run only these runs (journal keys, separated by ';')")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--threads", type=threads, default=None, help="torch threads (default: torch's default)")
    parser.add_argument("--seed", type=int_in_range(0, MAX_SEED), default=0, help="seed of the free samples")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/quality_results"), help="output folder")
    parser.add_argument("--resume", action="store_true", help="keep the finished runs in OUT/quality_runs.jsonl")
    parser.add_argument("--report-only", action="store_true", help="write the report from the journal, run nothing")
    return parser


def _jobs(args, limits) -> list[dict]:
    dense_tokens = args.tokens if args.dense_tokens is SAME_AS_TOKENS else args.dense_tokens
    runs = [
        {**run, "tokens": dense_tokens if run["cache_limit"] is None else args.tokens}
        for run in configurations(limits, args.policy, args.protected)
    ]
    jobs = []
    if args.method in ("chunked", "both"):
        jobs += [{**run, "key": f"chunked {run['name']}", "kind": "chunked", "chunk": args.chunk} for run in runs]
    if args.method in ("decode", "both"):
        jobs += [{**run, "key": f"nll {run['name']}", "kind": "nll"} for run in runs]
    if args.sample_tokens:
        for run in configurations([args.sample_limit], args.policy, args.protected):
            jobs.append({**run, "kind": "sample", "key": f"sample {run['name']}"})
            jobs[-1].update(sample_tokens=args.sample_tokens, seed=args.seed)
    if args.only:
        wanted = {part.strip() for part in args.only.split(";")}
        jobs = [job for job in jobs if job["key"] in wanted]
    source = str(args.text or "pydoc_data.topics")
    return [{**job, "dtype": args.dtype, "source": source} for job in jobs]


#: what a journal record must share with a planned job for --resume to keep it instead of running it again
SAME_RUN = (
    "kind", "cache_limit", "num_sink_tokens", "tokens", "chunk", "dtype", "source", "sample_tokens", "seed", "policy",
    "protected",
)  # fmt: skip


def _kept(record: dict | None, job: dict) -> bool:
    return record is not None and all(record.get(key) == job.get(key) for key in SAME_RUN)


class PartialRun:
    """Keeps OUT/quality_partial.json up to date while a chunked run scores a long text (every `every` positions).

    Why: a 100k-token run takes hours on a shared 2-core CPU, and the journal only gets whole runs; if the run is
    stopped, this file still holds the positions it scored, and `--report-only` reports them as a run that
    stopped early (its name says after how many positions), never as the whole text. `--resume` runs it again."""

    def __init__(self, path: Path, job: dict, every: int = PARTIAL_EVERY):
        self.path, self.job, self.every, self.written = path, job, every, 0
        self.started, self.cpu = time.perf_counter(), time.process_time()

    def __call__(self, scored: list[torch.Tensor], cache) -> None:
        count = sum(part.shape[0] for part in scored)
        if count - self.written < self.every:
            return
        self.written = count
        record = {**self.job, "nll": [round(value, 5) for value in torch.cat(scored).tolist()], "partial": True}
        record.update(kv_bytes=kv_bytes(cache), text_tokens=count + 1)
        record.update(seconds=round(time.perf_counter() - self.started, 1))
        record.update(cpu_seconds=round(time.process_time() - self.cpu, 1), load_average=_load())
        draft = self.path.with_suffix(".tmp")
        draft.write_text(json.dumps(record) + "\n")
        draft.replace(self.path)


def partial_records(out: Path, done: dict) -> list[dict]:
    """The partial runs left in OUT (`quality_partial*.json`: one per process that ran the benchmark into OUT, or
    whose partial file was copied there), less those whose run has since finished, each named as one that stopped
    (after how many positions), so that a report never presents it as the whole text."""
    records = []
    for path in sorted(out.glob("quality_partial*.json")):
        record = json.loads(path.read_text())
        if record["key"] not in done:
            records.append({**record, "name": f"{record['name']} (stopped after {len(record['nll']):,} positions)"})
    return records


def run_job(job: dict, model, tokenizer, text_ids, bar, partial: Path | None = None) -> dict:
    """One run: score the text (or sample), with the cache settings of `job`; returns its journal record."""
    window = {} if job["cache_limit"] is None else {
        "cache_limit": job["cache_limit"], "num_sink_tokens": job["num_sink_tokens"]
    }  # fmt: skip
    if (policy := cache_policy_of(job.get("policy"), job.get("protected"))) is not None:
        window["cache_policy"] = policy
    started, cpu = time.perf_counter(), time.process_time()
    if job["kind"] == "sample":
        result = {"text": free_sample(model, tokenizer, job["sample_tokens"], job["seed"], progress=bar, **window)}
        result["prompt"] = SAMPLE_PROMPT
    else:
        ids = text_ids[:, : job["tokens"]]
        if job["kind"] == "nll":
            scored = decode_scores(model, ids, progress=bar, **window)
        else:
            keep = None if partial is None else PartialRun(partial, job)
            scored = chunked_scores(model, ids, job["chunk"], progress=bar, on_scored=keep, **window)
        result = {"nll": [round(value, 5) for value in scored.nll], "kv_bytes": scored.kv_bytes}
        result["text_tokens"] = ids.shape[1]
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    record = {**job, **result, "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1)}
    record.update(context=getattr(model.config, "max_position_embeddings", None), load_average=_load())
    record.update(threads=torch.get_num_threads(), python=platform.python_version())
    record.update(torch=torch.__version__, transformers=transformers.__version__)
    return record


def _load() -> float | None:
    """The 1-minute load average when a run ends: how shared the CPU was (timings on a busy CPU stretch)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _finished_line(record: dict) -> str:
    if record["kind"] == "sample":
        return f"{record['sample_tokens']:,} sampled tokens, {record['seconds']:.0f} s"
    nll = record["nll"]
    held = record["kv_bytes"] / 2**20
    return (
        f"{len(nll):,} positions, perplexity {perplexity(nll):.2f}, KV held at the end {held:.1f} MiB, "
        f"{record['seconds']:.0f} s ({record['cpu_seconds']:.0f} s CPU)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    limits = args.limits
    bounds = [(limit, sinks) for limit in [*limits, args.sample_limit] for sinks in (None, SINKS)]
    settings_or_exit(parser, lambda args: check_policy(args, bounds), args)
    args.out.mkdir(parents=True, exist_ok=True)
    journal = args.out / "quality_runs.jsonl"
    if not args.resume and not args.report_only:
        journal.write_text("")
        for stale in args.out.glob("quality_partial*.json"):
            stale.unlink()
    done = _journal(journal)
    jobs = _jobs(args, limits)
    # a journal record of other settings under a planned key is run again, and replaced
    todo = [] if args.report_only else [job for job in jobs if not _kept(done.get(job["key"]), job)]
    if todo:
        if args.threads:
            torch.set_num_threads(args.threads)
        started = time.perf_counter()
        try:
            model, tokenizer = load_pretrained("smollm2", dtype=getattr(torch, args.dtype))
        except MissingModelError as error:
            print(f"cachelimit bench --quality: error: {error}", file=sys.stderr)
            return 1
        print(f"model loaded in {time.perf_counter() - started:.1f} s; {len(todo)} runs to do", flush=True)
        patch("llama")
        text_ids = text_tokens(tokenizer, args.text.read_text(encoding="utf-8") if args.text else default_text())
        for job in todo:
            if job.get("tokens") is not None and job["tokens"] > text_ids.shape[1]:
                parser.error(f"argument --tokens: the text has only {text_ids.shape[1]:,} tokens, got {job['tokens']}")
        progress = RunProgress(len(todo))
        for job in todo:
            total = job["sample_tokens"] if job["kind"] == "sample" else (job["tokens"] or text_ids.shape[1])
            with progress.run(job["key"], total - (job["kind"] == "nll"), "token") as bar:
                record = run_job(job, model, tokenizer, text_ids, bar, args.out / PARTIAL)
                with journal.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                (args.out / PARTIAL).unlink(missing_ok=True)
                bar.finish(_finished_line(record))
            done[job["key"]] = record
    print(write_report(list(done.values()) + partial_records(args.out, done), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
