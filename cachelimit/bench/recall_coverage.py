"""The recall grid of issue 25, and how much of it a journal holds.

The grid is the defaults of `bench --recall` (`recall.py` reads them from here, so the two cannot drift): pass key
and real text at 1,024, 2,048 and 4,096 tokens and 10, 50 and 90 % depth, chat at 1,024, 2,048 and 4,096 tokens of
other turns (a chat model only), each read whole and in chunks, every bounded variant at every budget, 20 keys per
cell. The unbounded cache is one cell per prompt: read in chunks it attends to everything before, as read whole.
Perplexity runs are not counted (one run each, no cells). Why a table: the prose lists of what was not run went
stale as cells were added; this one is written from the JSONL, with the accuracy tables.
"""

from __future__ import annotations

from collections import Counter

from ..cli.known_models import PRETRAINED

LENGTHS = (1024, 2048, 4096)
DEPTHS = (10, 50, 90)
BUDGETS = (64, 128, 256, 512, 1024)
CHAT_GAPS = (1024, 2048, 4096)
PREFILLS = ("whole", "chunked")
KEYS_PER_CELL = 20
CASE_NAMES = {"passkey": "pass key", "text": "real text", "chat": "chat"}


def _cases(model: str) -> tuple[str, ...]:
    spec = PRETRAINED.get(model)
    return ("passkey", "text") + (("chat",) if spec is None or spec.chat else ())


def grid_cells(case: str, prefill: str) -> list[tuple]:
    """The grid's cells (depth, variant, budget) of one prompt kind read one way."""
    from .recall_run import VARIANTS  # imports torch: not at import time, which the command line's parser needs

    depths = [None] if case == "chat" else DEPTHS
    cells = [(depth, v, budget) for depth in depths for v in VARIANTS if v != "unbounded" for budget in BUDGETS]
    return cells + ([(depth, "unbounded", None) for depth in depths] if prefill == "whole" else [])


def _counts(records) -> Counter:
    """Trials with a verdict per cell (of one model's records); a `--protected` run is not the policy's default, so
    not the grid's."""
    counts: Counter = Counter()
    for r in records:
        if r["case"] in CASE_NAMES and r.get("correct") is not None and r.get("protected") is None:
            prefill = "whole" if r["variant"] == "unbounded" else r["prefill"]
            counts[(r["case"], r["length"], prefill, r["depth"], r["variant"], r["budget"])] += 1
    return counts


def coverage(records, model: str) -> list[tuple[str, int, dict[str, tuple[int, int]]]]:
    """Per (case, length) of `model`'s grid, from its records: {prefill: (cells with at least 20 keys, grid cells)}."""
    counts, rows = _counts(records), []
    for case in _cases(model):
        for length in CHAT_GAPS if case == "chat" else LENGTHS:
            done = {}
            for prefill in PREFILLS:
                cells = grid_cells(case, prefill)
                full = sum(counts[(case, length, prefill, *cell)] >= KEYS_PER_CELL for cell in cells)
                done[prefill] = (full, len(cells))
            rows.append((case, length, done))
    return rows


def coverage_table(records_by_model: dict[str, list], names: dict[str, str]) -> str:
    """A markdown table: cells run (n >= 20) of the grid's cells, per model, prompt kind and read; totals last."""
    lines = ["| model | case | length | read whole | read in chunks |", "|---|---|---|---|---|"]
    total = {prefill: [0, 0] for prefill in PREFILLS}
    for model, records in records_by_model.items():
        for case, length, done in coverage(records, model):
            cells = " | ".join(f"{done[p][0]}/{done[p][1]}" for p in PREFILLS)
            lines.append(f"| {names.get(model, model)} | {CASE_NAMES[case]} | {length:,} | {cells} |")
            for prefill in PREFILLS:
                total[prefill][0] += done[prefill][0]
                total[prefill][1] += done[prefill][1]
    run, cells = sum(t[0] for t in total.values()), sum(t[1] for t in total.values())
    sums = " | ".join(f"{total[p][0]}/{total[p][1]}" for p in PREFILLS)
    lines.append(f"| all | | | {sums} |")
    return "\n".join(lines) + f"\n\n{run} of the grid's {cells} cells hold {KEYS_PER_CELL} or more keys."
