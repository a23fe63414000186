"""Quality benchmark: what a bounded cache does to a real model's predictions of a long real text.

Teacher-forced negative log-likelihood (NLL) of every token of a text, measured THROUGH `model.generate`: the
prompt is the text's first token, and a logits processor (`ForceText`) records the log-probability the model
gave the text's next token, then forces that token. So every number comes from the code path a user runs
(one decode step per token, the bounded cache, its ring and sink rotation), not from a separate forward.
Runs: the dense cache, `cache_limit=L` (sliding window), `cache_limit=L` with 4 attention sinks, for each L.
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
import sys
import time
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from ..cli.pretrained import MissingModelError, load_pretrained
from ..families.patching import patch
from ..hf.compat import decoder_body
from .quality_report import write_report

DEFAULT_LIMITS = (64, 256)
SINKS = 4
SAMPLE_PROMPT = "Chapter 1\n\nThe lighthouse keeper had not seen a ship in eleven years. One night in November,"


def default_text() -> str:
    """The standard library's English reference topics (the text of `help('assert')` etc.), in name order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name].strip() for name in sorted(topics))


def text_tokens(tokenizer, text: str, count: int) -> torch.Tensor:
    """The first `count` tokens of `text` ([1, count]), without special tokens."""
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if ids.shape[1] < count:
        raise ValueError(f"--tokens {count}: the text has only {ids.shape[1]:,} tokens")
    return ids[:, :count]


class ForceText(LogitsProcessor):
    """Records -log p(next text token) from the scores it is given, then forces that token.

    Put alone in the processor list of a greedy run: the scores it sees are then the model's raw logits (what
    `output_logits=True` returns; `tests/test_real_model.py` checks it), and the argmax is the text's token.
    """

    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens[0]
        self.nll: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        target = self.tokens[input_ids.shape[1]]
        self.nll.append(-torch.log_softmax(scores[0].float(), -1)[target])
        forced = torch.full_like(scores, float("-inf"))
        forced[:, target] = 0.0
        return forced


def configurations(limits) -> list[dict]:
    runs = [{"name": "dense", "cache_limit": None, "num_sink_tokens": None}]
    for limit in limits:
        runs.append({"name": f"window L={limit}", "cache_limit": limit, "num_sink_tokens": None})
        runs.append({"name": f"sinks L={limit}, S={SINKS}", "cache_limit": limit, "num_sink_tokens": SINKS})
    return runs


def teacher_forced_nll(model, tokens: torch.Tensor, cache_limit=None, num_sink_tokens=None) -> list[float]:
    """NLL of tokens[1:] given everything before, through `generate` with the given cache settings."""
    force = ForceText(tokens)
    window = {} if cache_limit is None else {"cache_limit": cache_limit, "num_sink_tokens": num_sink_tokens}
    with torch.inference_mode():
        out = model.generate(
            tokens[:, :1],
            attention_mask=torch.ones_like(tokens[:, :1]),
            max_new_tokens=tokens.shape[1] - 1,
            do_sample=False,
            logits_processor=LogitsProcessorList([force]),
            **window,
        )
    if not torch.equal(out, tokens):
        raise RuntimeError("teacher forcing failed: generate did not reproduce the text")
    return torch.stack(force.nll).tolist()


def chunked_nll(model, tokens: torch.Tensor, chunk: int = 64, cache_limit=None, num_sink_tokens=None) -> list[float]:
    """The same NLL, with the text as the prompt of one `generate` call read `chunk` tokens at a time
    (`prefill_chunk_size`): with a cache limit every prompt token then obeys the window (and the sinks), which
    is exactly what decoding it token by token does (the sink and window tests prove the two equal), at a
    fraction of the cost of one decode step per token. The hidden states are taken from the model's body with a
    forward hook (generate only keeps the last position's logits) and scored with the model's own head."""
    states: list[torch.Tensor] = []
    handle = decoder_body(model).register_forward_hook(lambda module, args, output: states.append(output[0][0]))
    window = {} if cache_limit is None else {"cache_limit": cache_limit, "num_sink_tokens": num_sink_tokens}
    try:
        with torch.inference_mode():
            model.generate(
                tokens,
                attention_mask=torch.ones_like(tokens),
                max_new_tokens=1,
                do_sample=False,
                prefill_chunk_size=chunk,
                **window,
            )
    finally:
        handle.remove()
    # the prompt's forwards (transformers 4.x reads its last token in a decoding step); position t -> t + 1
    hidden = torch.cat(states)[: tokens.shape[1] - 1]
    nll = []
    with torch.inference_mode():
        for start in range(0, hidden.shape[0], chunk):
            logits = model.lm_head(hidden[start : start + chunk]).float()
            targets = tokens[0, start + 1 : start + 1 + logits.shape[0], None]
            nll.append(-torch.log_softmax(logits, -1).gather(-1, targets)[:, 0])
    return torch.cat(nll).tolist()


def free_sample(model, tokenizer, new_tokens: int, seed: int, **window) -> str:
    """Sampled text (temperature 0.8, top-p 0.95, same seed for every cache setting) after SAMPLE_PROMPT."""
    ids = tokenizer(SAMPLE_PROMPT, return_tensors="pt")
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(
            **ids,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=0.8,
            top_p=0.95,
            **window,
        )
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)


def _journal(path: Path) -> dict:
    if not path.is_file():
        return {}
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {record["key"]: record for record in records}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachelimit bench --quality",
        description="Teacher-forced NLL of a long real text through model.generate on SmolLM2-135M-Instruct: "
        "dense cache vs cache_limit=L without and with 4 sinks. Writes quality.json, quality_table.md, "
        "quality_nll.png and quality_samples.md to --out.",
    )
    parser.add_argument(
        "--text", type=Path, help="a UTF-8 text file (default: pydoc_data.topics, every Python ships it)"
    )
    parser.add_argument("--tokens", type=int, default=4096, help="text tokens to score (default: 4096)")
    parser.add_argument("--limits", default=",".join(map(str, DEFAULT_LIMITS)), help="cache limits (default: 64,256)")
    parser.add_argument(
        "--method",
        choices=("chunked", "decode", "both"),
        default="both",
        help="chunked: the text as a prompt read 64 tokens at a time (minutes); decode: one generate step per "
        "token (hours on 2 cores); both (default): chunked, then decode as a cross-check",
    )
    parser.add_argument("--sample-tokens", type=int, default=1500, help="tokens per free sample (0: none)")
    parser.add_argument("--sample-limit", type=int, default=256, help="cache limit of the free samples")
    parser.add_argument("--only", help="run only these runs (journal keys, separated by ';')")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the free samples")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/quality_results"), help="output folder")
    parser.add_argument("--resume", action="store_true", help="keep the finished runs in OUT/quality_runs.jsonl")
    parser.add_argument("--report-only", action="store_true", help="write the report from the journal, run nothing")
    return parser


def _jobs(args, limits) -> list[dict]:
    jobs = []
    if args.method in ("chunked", "both"):
        jobs += [{**run, "key": f"chunked {run['name']}", "kind": "chunked"} for run in configurations(limits)]
    if args.method in ("decode", "both"):
        jobs += [{**run, "key": f"nll {run['name']}", "kind": "nll"} for run in configurations(limits)]
    if args.sample_tokens:
        limit = args.sample_limit
        for name, sinks in (("dense", None), (f"window L={limit}", None), (f"sinks L={limit}, S={SINKS}", SINKS)):
            cache_limit = None if name == "dense" else limit
            jobs.append({"name": name, "cache_limit": cache_limit, "num_sink_tokens": sinks, "kind": "sample"})
            jobs[-1]["key"] = f"sample {name}"
    if args.only:
        wanted = {part.strip() for part in args.only.split(";")}
        jobs = [job for job in jobs if job["key"] in wanted]
    return jobs


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    limits = [int(part) for part in args.limits.split(",") if part.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    journal = args.out / "quality_runs.jsonl"
    if not args.resume and not args.report_only:
        journal.write_text("")
    done = _journal(journal)
    todo = [] if args.report_only else [job for job in _jobs(args, limits) if job["key"] not in done]
    if todo:
        if args.threads:
            torch.set_num_threads(args.threads)
        started = time.perf_counter()
        try:
            model, tokenizer = load_pretrained("smollm2", dtype=getattr(torch, args.dtype))
        except MissingModelError as error:
            print(f"cachelimit bench --quality: error: {error}", file=sys.stderr)
            return 1
        print(f"model loaded in {time.perf_counter() - started:.1f} s", flush=True)
        patch("llama")
        text = args.text.read_text(encoding="utf-8") if args.text else default_text()
        tokens = text_tokens(tokenizer, text, args.tokens)
        for job in todo:
            window = {"cache_limit": job["cache_limit"], "num_sink_tokens": job["num_sink_tokens"]}
            window = {} if job["cache_limit"] is None else window
            print(f"{job['key']}: running...", flush=True)
            started = time.perf_counter()
            if job["kind"] in ("nll", "chunked"):
                score = teacher_forced_nll if job["kind"] == "nll" else chunked_nll
                result = {"nll": [round(value, 5) for value in score(model, tokens, **window)]}
            else:
                result = {"text": free_sample(model, tokenizer, args.sample_tokens, args.seed, **window)}
            seconds = time.perf_counter() - started
            record = {**job, **result, "seconds": round(seconds, 1), "threads": torch.get_num_threads()}
            record.update(dtype=args.dtype, source=str(args.text or "pydoc_data.topics"), tokens=args.tokens)
            if job["kind"] == "sample":
                record.update(prompt=SAMPLE_PROMPT, sample_tokens=args.sample_tokens, seed=args.seed)
            with journal.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(f"{job['key']}: {seconds:.0f} s", flush=True)
    print(write_report(list(_journal(journal).values()), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
