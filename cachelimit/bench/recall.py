"""Recall benchmark at a fixed memory budget (`cachelimit bench --recall`): does a bounded cache still find the fact?

Cases (issue 25): `passkey` (a 5-digit pass key at a given depth of repeated filler), `text` (a secret number
in the real text of the default quality text, `pydoc_data.topics`), `chat` (a fact told in turn 1, asked after N
tokens of other turns, each turn continuing the returned cache as `cachelimit chat` does) and `ppl` (teacher-forced
perplexity of the default text, the fluency cost of a policy). Each at every budget for every variant
(`bench.recall_run.VARIANTS`), the prompt read whole and in chunks (`prefill_chunk_size`). Defaults are the
issue's full grid; every dimension is a flag.

Deterministic (seeded keys, greedy answers, scoring: `recall_prompts.score_answer`), one JSONL record per trial in
OUT/recall_trials.jsonl, resumable (a trial whose record is there is not run again), and `--report-only` writes
the tables and the plot (`bench.recall_report`) from that file alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..cli.flag_types import MAX_SEED, int_in_range
from .arguments import OneLineErrors, count, count_or_all, int_list, threads
from .recall_coverage import BUDGETS, CHAT_GAPS, DEPTHS, KEYS_PER_CELL, LENGTHS, PREFILLS

CASES = ("passkey", "text", "chat", "ppl")
MODELS = ("smollm2", "gemma3", "tiny")
JOURNAL = "recall_trials.jsonl"
#: the record fields that make a trial what it is (its resume key)
TRIAL_FIELDS = (
    "case", "length", "depth", "trial", "prefill", "variant", "budget", "chunk", "seed", "answer_tokens",
    "turn_tokens", "turn_answer_tokens", "protected", "model", "dtype",
)  # fmt: skip


def names(allowed):
    """A comma-separated list of names from `allowed` (`--cases passkey,chat`)."""

    def parse(text: str) -> list[str]:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        wrong = [part for part in parts if part not in allowed]
        if not parts or wrong:
            raise argparse.ArgumentTypeError(f"expected names from {', '.join(allowed)}, got {text!r}")
        return list(dict.fromkeys(parts))

    return parse


def percents(text: str) -> list[int]:
    """`--depths 10,50,90`: percentages 0 to 100."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected comma-separated percentages 0 to 100, got {text!r}")
    return [int_in_range(0, 100)(part) for part in parts]


def build_parser() -> argparse.ArgumentParser:
    from .recall_run import VARIANTS

    parser = OneLineErrors(
        prog="cachelimit bench --recall",
        description="Recall at a fixed KV budget on SmolLM2-135M-Instruct or Gemma 3 270M: pass key, needle in real text, chat "
        "turns and perplexity, for the unbounded cache, the window, the window + 4 sinks, keydiff/tova/snapkv "
        "(4 sinks) and an oracle keep-set. Writes recall_trials.jsonl, recall_tables.md, recall_accuracy.png.",
    )
    add = parser.add_argument
    add("--cases", type=names(CASES), default=list(CASES), help=f"(default: {','.join(CASES)})")
    add("--lengths", type=int_list, default=list(LENGTHS), help="prompt tokens (default: 1024,2048,4096)")
    add("--depths", type=percents, default=list(DEPTHS), help="needle depth, %% of the prompt (default: 10,50,90)")
    add("--n", type=count(), default=KEYS_PER_CELL, help="trials (keys) per cell (default: 20)")
    add("--budgets", type=int_list, default=list(BUDGETS), help="cache limits (default: 64,...,1024)")
    add("--variants", type=names(tuple(VARIANTS)), default=list(VARIANTS), help=f"(default: {','.join(VARIANTS)})")
    add("--prefill", type=names(PREFILLS), default=list(PREFILLS), help="whole, chunked or both (default: both)")
    add("--chunk", type=count(), default=256, help="prefill_chunk_size of the chunked reads (default: 256)")
    add("--chat-gaps", type=int_list, default=list(CHAT_GAPS), help="chat: tokens of other turns between the "
        "fact and the question (default: 1024,2048,4096)")  # fmt: skip
    add("--turn-tokens", type=count(), default=256, help="chat: tokens of each other turn's message (default: 256)")
    add("--turn-answer-tokens", type=count(), default=16, help="chat: new tokens per other turn (default: 16)")
    add("--answer-tokens", type=count(), default=10, help="new tokens of the answer to the question (default: 10)")
    add("--ppl-tokens", type=count_or_all, default=None, help="ppl: text tokens, or `all` (default: all, 113,107)")
    add("--ppl-chunk", type=count(), default=256, help="ppl: prefill_chunk_size (default: 256)")
    add("--protected", type=count(0), default=None, help="a scored policy's protected window (default: its own)")
    add("--model", choices=MODELS, default="smollm2", help="smollm2, gemma3 (Gemma 3 270M base: no chat case) or "
        "tiny (the built-in random model, for tests) (default: smollm2)")  # fmt: skip
    add("--dtype", choices=("float32", "bfloat16"), default="float32")
    add("--threads", type=threads, default=None, help="torch threads (default: torch's default)")
    add("--seed", type=int_in_range(0, MAX_SEED), default=0, help="seed of the keys and text offsets (default: 0)")
    add("--out", type=Path, default=Path("docs/recall"), help="output folder (default: docs/recall)")
    add("--report-only", action="store_true", help="write the tables and plot from the journal, run nothing")
    return parser


def check_settings(args) -> None:
    """What no single flag can say: budgets with room beyond the sinks, prompts longer than their fixed parts."""
    if "chat" in args.cases and args.model != "tiny":
        from ..cli.known_models import PRETRAINED

        spec = PRETRAINED[args.model]
        if not spec.chat:  # a base model has no chat template to hold the turns
            raise ValueError(f"argument --cases: the chat case needs a chat model; {args.model!r} is {spec.kind} "
                             f"with no chat template (use --cases passkey,text,ppl)")  # fmt: skip
    if min(args.budgets) <= 4:
        raise ValueError(f"argument --budgets: the variants with 4 sinks need budgets > 4, got {min(args.budgets)}")
    if any(case in args.cases for case in ("passkey", "text")) and min(args.lengths) < 64:
        raise ValueError(f"argument --lengths: a prompt needs room for its header, key and question (>= 64), got "
                         f"{min(args.lengths)}")  # fmt: skip


def plan(args) -> list[dict]:
    """Every trial, in the order they run: per case, length, depth and trial, every prefill, variant and budget
    (variants alternate inside a trial, so a stopped run leaves whole trials, comparable across variants)."""
    common = {"seed": args.seed, "answer_tokens": args.answer_tokens, "protected": args.protected,
              "model": args.model, "dtype": args.dtype}  # fmt: skip
    jobs = []

    def variants(base: dict, oracle: bool = True) -> None:
        for variant in args.variants:
            if variant == "oracle" and not oracle:
                continue
            for budget in [None] if variant == "unbounded" else args.budgets:
                jobs.append({**common, **base, "variant": variant, "budget": budget})

    for case in args.cases:
        if case == "ppl":
            variants({"case": case, "length": args.ppl_tokens, "depth": None, "trial": 0, "prefill": "chunked",
                      "chunk": args.ppl_chunk}, oracle=False)  # fmt: skip
            continue
        chat = case == "chat"
        extra = {"turn_tokens": args.turn_tokens, "turn_answer_tokens": args.turn_answer_tokens} if chat else {}
        for length in args.chat_gaps if chat else args.lengths:
            for depth in [None] if chat else args.depths:
                for trial in range(args.n):
                    for prefill in args.prefill:
                        chunk = args.chunk if prefill == "chunked" else None
                        base = {"case": case, "length": length, "depth": depth, "trial": trial, "prefill": prefill}
                        variants({**base, "chunk": chunk, **extra})
    return jobs


def trial_key(record: dict) -> str:
    return json.dumps([record.get(field) for field in TRIAL_FIELDS])


def read_journal(path: Path) -> list[dict]:
    """The records of the journal, one per trial: a torn last line (a run killed while writing) is skipped, and a
    trial recorded twice (two runs into one folder at once) counts once, its first record (trials are
    deterministic: the same answer)."""
    if not path.is_file():
        return []
    records: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records.setdefault(trial_key(record), record)
    return list(records.values())


def load_model(name: str, dtype: str):
    import torch

    from ..families.patching import patch

    if name == "tiny":
        from ..cli.tiny_model import build_tiny_model

        model, tokenizer = build_tiny_model(getattr(torch, dtype))
    else:
        from ..cli.pretrained import load_pretrained

        model, tokenizer = load_pretrained(name, dtype=getattr(torch, dtype))
    patch(model.config.model_type)
    return model, tokenizer


def main(argv: list[str] | None = None) -> int:
    from .arguments import settings_or_exit
    from .recall_report import write_report

    parser = build_parser()
    args = parser.parse_args(argv)
    settings_or_exit(parser, check_settings, args)
    args.out.mkdir(parents=True, exist_ok=True)
    journal = args.out / JOURNAL
    records = read_journal(journal)
    done = {trial_key(record) for record in records}
    todo = [] if args.report_only else [job for job in plan(args) if trial_key(job) not in done]
    if todo:
        import torch

        from .recall_trials import Trials

        if args.threads:
            torch.set_num_threads(args.threads)
        started = time.perf_counter()
        try:
            model, tokenizer = load_model(args.model, args.dtype)
        except ImportError as error:
            print(f"cachelimit bench --recall: error: {error}", file=sys.stderr)
            return 1
        print(f"model loaded in {time.perf_counter() - started:.1f} s; {len(todo)} trials to do", flush=True)
        trials = Trials(model, tokenizer, args)
        with journal.open("a") as handle:
            for index, job in enumerate(todo, 1):
                record = trials.run(job)
                handle.write(json.dumps(record) + "\n")
                handle.flush()
                records.append(record)
                print(f"[{index}/{len(todo)}] {trials.describe(record)}", flush=True)
    print(write_report(records, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
