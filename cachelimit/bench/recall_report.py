"""The report of the recall benchmark, from its journal alone: markdown tables (accuracy with n in every cell) and a
plot of accuracy against budget. No model, no torch: `bench --recall --report-only` rewrites it from the JSONL.

A cell is `right/n (percent)` over the trials that got a verdict; trials the oracle could not serve (`error`) are
counted apart, never as wrong. The unbounded cache has no budget: its column is `no limit`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..core.eviction import SCORED
from .recall_coverage import coverage_table
from .recall_run import VARIANTS

MODEL_NAMES = {"smollm2": "SmolLM2-135M-Instruct", "gemma3": "Gemma 3 270M", "tiny": "the tiny test model"}
TABLES = "recall_tables.md"
PLOT = "recall_accuracy.png"
NO_LIMIT = "no limit"
#: the variants that are scored policies (a `--protected` run of one is its own row)
SCORED_NAMES = {policy.name for policy in SCORED}


def _variants(records) -> list[str]:
    """The variants present, in `VARIANTS` order; a labelled one (`labelled`) after its own."""
    known, seen = list(VARIANTS), {record["variant"] for record in records}
    return sorted(
        seen, key=lambda name: (known.index(base) if (base := name.split(" (")[0]) in known else len(known), name)
    )


def labelled(records) -> list[dict]:
    """The records, a scored policy run with a protected window of its own (`--protected`) named for it ("keydiff
    (protected 64)"), so that its cells stand beside the default's instead of being counted with them."""
    return [
        {**record, "variant": f"{record['variant']} (protected {record['protected']})"}
        if record.get("protected") is not None and record["variant"] in SCORED_NAMES
        else record
        for record in records
    ]


def _depths(records) -> list[int]:
    """The needle depths the records have (none for chat and perplexity), sorted."""
    return sorted({record["depth"] for record in records if record.get("depth") is not None})


def _percents(depths) -> str:
    return ", ".join(f"{depth} %" for depth in depths)


def _budgets(records) -> list[int]:
    return sorted({record["budget"] for record in records if record["budget"] is not None})


def tally(records) -> dict:
    """(variant, budget) -> [right, n] over the records with a verdict."""
    counts: dict = defaultdict(lambda: [0, 0])
    for record in records:
        if record.get("correct") is None:
            continue
        cell = counts[(record["variant"], record["budget"])]
        cell[0] += bool(record["correct"])
        cell[1] += 1
    return counts


def cell(right: int, n: int) -> str:
    return f"{right}/{n} ({100 * right / n:.0f} %)" if n else "-"


def accuracy_table(records) -> str:
    """Rows: variants; columns: budgets (and `no limit` for the unbounded cache); cells: right/n (percent)."""
    counts, budgets = tally(records), _budgets(records)
    header = "| variant | " + " | ".join([f"L={budget}" for budget in budgets] + [NO_LIMIT]) + " |"
    lines = [header, "|" + "---|" * (len(budgets) + 2)]
    for variant in _variants(records):
        values = [cell(*counts.get((variant, budget), (0, 0))) for budget in budgets]
        values.append(cell(*counts.get((variant, None), (0, 0))))
        lines.append(f"| {variant} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def depth_table(records) -> str:
    """The same trials by needle depth: rows variants, a column per (budget, depth) that has trials; "" with one
    depth (the accuracy table says it all). Why: at a fixed budget the window finds a key only when it lies in its
    last L positions, so depth separates recall from mere recency."""
    depths = _depths(records)
    if len(depths) < 2:
        return ""
    counts: dict = defaultdict(lambda: [0, 0])
    for record in records:
        if record.get("correct") is not None:
            counts[(record["variant"], record["budget"], record["depth"])][0] += bool(record["correct"])
            counts[(record["variant"], record["budget"], record["depth"])][1] += 1
    columns = [(b, d) for b in [*_budgets(records), None] for d in depths if any(
        (v, b, d) in counts for v in _variants(records))]  # fmt: skip
    names = [f"{NO_LIMIT if b is None else f'L={b}'}, {d} %" for b, d in columns]
    lines = ["| variant | " + " | ".join(names) + " |", "|" + "---|" * (len(columns) + 1)]
    for variant in _variants(records):
        values = [cell(*counts.get((variant, b, d), (0, 0))) for b, d in columns]
        lines.append(f"| {variant} | " + " | ".join(values) + " |")
    return "By depth of the needle:\n\n" + "\n".join(lines)


def perplexity_table(records) -> str:
    budgets = _budgets(records)
    values = {(record["variant"], record["budget"]): record for record in records}
    lines = [
        "| variant | " + " | ".join([f"L={b}" for b in budgets] + [NO_LIMIT]) + " |",
        "|" + "---|" * (len(budgets) + 2),
    ]
    for variant in _variants(records):
        row = [values.get((variant, budget)) for budget in [*budgets, None]]
        lines.append(f"| {variant} | " + " | ".join(f"{r['perplexity']:.3f}" if r else "-" for r in row) + " |")
    positions = sorted({record["positions"] for record in records})
    return "\n".join(lines) + f"\n\nScored positions per run: {', '.join(f'{p:,}' for p in positions)}."


def model_of(record) -> str:
    return record.get("model") or "smollm2"  # the first journal's records were all SmolLM2's and say so


def groups(records) -> dict:
    """(model, case, length, prefill) -> records, in a stable order."""
    grouped: dict = defaultdict(list)
    for record in records:
        grouped[(model_of(record), record["case"], record["length"], record["prefill"])].append(record)
    models, cases = list(MODEL_NAMES), {"passkey": 0, "text": 1, "chat": 2, "ppl": 3}

    def order(item) -> tuple:
        model, case, length, prefill = item[0]
        whole = 2**62  # a run over the whole text (no length) after every shorter one
        return (models.index(model) if model in models else 9, model, cases.get(case, 9), length or whole, prefill)

    return dict(sorted(grouped.items(), key=order))


def _title(model: str, case: str, length, prefill: str, records) -> str:
    return f"### {MODEL_NAMES.get(model, model)}: " + _subject(case, length, prefill, records)


def _subject(case: str, length, prefill: str, records) -> str:
    if case == "ppl":
        text = "the whole default text" if length is None else f"the first {length:,} tokens of the default text"
        return f"perplexity of {text} (prefill_chunk_size {records[0]['chunk']})"
    depths = _depths(records)
    read = "read whole" if prefill == "whole" else f"read in chunks of {records[0]['chunk']}"
    if case == "chat":
        return f"chat recall, {length} tokens of other turns between fact and question ({read} per turn)"
    name = {"passkey": "pass key in filler", "text": "secret number in real text"}[case]
    return f"{name}, {length}-token prompt, depths {_percents(depths)} ({read})"


def by_model(grouped: dict) -> dict:
    """model -> its records, in the tables' order, from `groups`' result (every record is in exactly one group)."""
    split: dict = {}
    for (model, *_), members in grouped.items():
        split.setdefault(model, []).extend(members)
    return split


def headline(records_by_model: dict) -> str:
    """Per model, one line per budget over every retrieval trial (pass key, text, chat): each variant's accuracy
    (models are never pooled: their recall differs)."""
    parts = [_model_headline(model, records) for model, records in records_by_model.items()]
    return "\n".join(part for part in parts if part)


def _model_headline(model: str, records) -> str:
    retrieval = [record for record in records if record["case"] != "ppl"]
    if not retrieval:
        return ""
    counts, lines = tally(retrieval), [f"{MODEL_NAMES.get(model, model)}:"]
    for budget in _budgets(retrieval):
        parts = [f"{v} {cell(*counts[(v, budget)])}" for v in _variants(retrieval) if (v, budget) in counts]
        lines.append(f"- L={budget}: " + ", ".join(parts))
    if (("unbounded", None)) in counts:
        lines.append(f"- unbounded: {cell(*counts[('unbounded', None)])}")
    return "\n".join(lines)


def markdown(records) -> str:
    errors = [record for record in records if record.get("error")]
    grouped = groups(records)  # the journal grouped once: the headline, coverage and tables all read these groups
    records_by_model = by_model(grouped)
    parts = ["# Recall at a fixed KV budget (`cachelimit bench --recall`)", "",
             f"{len(records)} trial records. Cells: right/n (percent); a trial is right when the first run of "
             "digits in the greedy answer is the key.", "", "## All retrieval trials, by budget", "",
             headline(records_by_model) or "(no retrieval trials)", ""]  # fmt: skip
    parts += ["## Coverage of the issue's grid (`bench.recall_coverage`)", "",
              coverage_table(records_by_model, MODEL_NAMES), ""]  # fmt: skip
    for (model, case, length, prefill), members in grouped.items():
        parts += [_title(model, case, length, prefill, members), ""]
        parts += [perplexity_table(members) if case == "ppl" else accuracy_table(members), ""]
        if case != "ppl" and (by_depth := depth_table(members)):
            parts += [by_depth, ""]
    if errors:
        parts += [
            f"{len(errors)} trials not served (no verdict): " + "; ".join(sorted({r["error"] for r in errors})),
            "",
        ]
    machines = sorted({(r.get("threads"), r.get("torch"), r.get("transformers")) for r in records if r.get("torch")})
    loads = [r["load_average"] for r in records if r.get("load_average") is not None]
    if machines:
        parts.append("Runs: " + "; ".join(f"{t} threads, torch {a}, transformers {b}" for t, a, b in machines)
                     + (f"; load average {min(loads):.1f} to {max(loads):.1f}" if loads else "") + ".")  # fmt: skip
    return "\n".join(parts).rstrip() + "\n"


def comparable(members) -> tuple[list, list]:
    """A panel's records at the depths every budget has (a budget curve of one depth with a point that pools three
    would compare unlike trials: at 90 % a key can sit inside the window), the unbounded trials at the same depths,
    and those depths ([] when every budget has them all, or when no depth is common to all: then pooled)."""
    bounded = [r for r in members if r["budget"] is not None and r.get("correct") is not None]
    per_budget = [{r.get("depth") for r in bounded if r["budget"] == b} for b in _budgets(bounded)]
    everywhere = set.intersection(*per_budget) if per_budget else set()
    if not everywhere or all(depths == everywhere for depths in per_budget):
        return members, []
    return [r for r in members if r.get("depth") in everywhere], sorted(everywhere)


def plot(records, path: Path) -> bool:
    """Accuracy against budget, one panel per (model, case, length, prefill), one line per variant (the unbounded cache a
    dashed level). False when there is nothing to plot."""
    panels = [(key, members) for key, members in groups(records).items() if key[1] != "ppl"]
    if not panels:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import save_figure

    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for axis, ((model, case, length, prefill), members) in zip(axes.flat, panels, strict=False):
        members, depths = comparable(members)
        counts, budgets = tally(members), _budgets(members)
        for variant in _variants(members):
            if variant == "unbounded":
                right, n = counts.get(("unbounded", None), (0, 0))
                if n:
                    axis.axhline(100 * right / n, linestyle="--", color="black", label=f"unbounded (n={n})")
                continue
            points = [(b, counts[(variant, b)]) for b in budgets if counts.get((variant, b), (0, 0))[1]]
            if points:
                n = min(value[1] for _, value in points)
                xs, ys = [b for b, _ in points], [100 * value[0] / value[1] for _, value in points]
                axis.plot(xs, ys, marker="o", label=f"{variant} (n={n})")
        axis.set_xscale("log", base=2)
        axis.set_xticks(budgets, [str(b) for b in budgets])
        axis.set_ylim(-5, 105)
        axis.set_xlabel("cache budget L (positions per layer)")
        axis.set_ylabel("accuracy (%)")
        if not depths and len(_depths(members)) == 1:
            depths = _depths(members)  # one depth in the panel: say which
        at = f", depth {_percents(depths)}" if depths else ""
        axis.set_title(f"{MODEL_NAMES.get(model, model)}: {case}, {length} tokens, {prefill}{at}", fontsize=10)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    save_figure(figure, path)
    return True


def write_report(records, out: Path) -> str:
    """Writes OUT/recall_tables.md and OUT/recall_accuracy.png; returns the markdown."""
    records = labelled(records)
    text = markdown(records)
    (out / TABLES).write_text(text)
    if plot(records, out / PLOT):
        text += f"\nPlot: {out / PLOT}\n"
    return text
