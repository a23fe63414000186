"""The GPU check: what cachelimit claims on CUDA, run in one go on one GPU, at most 8 minutes (issue 18).

    python benchmarks/gpu_check.py                          # every check, results in docs/gpu_check/
    python benchmarks/gpu_check.py --only exactness,compile --out /tmp/gpu

Checks (`cachelimit.bench.gpu_checks`), each skipped once the time budget (`--budget-s`, default 480) is spent:
- exactness: a bounded run equals transformers' native sliding window, bf16 and fp32, SDPA, flex attention and
  flash attention where `flash_attn` is installed (flash attention is refused today: its row says "refused").
- compile: the static ring under transformers' automatic CUDA compile: graphs compiled, recompiles in a second run
  (must be 0), tokens equal to the eager run, ms per token vs eager bounded and compiled `StaticCache`.
- policies: each scored policy (keydiff, tova, snapkv) on CUDA against the same run on CPU, where the test suite checks
  it against the slow reference and the replay (`cachelimit.bench.gpu_decode`).
- host syncs: synchronizing calls per decode step (torch's sync debug mode) of the window and each policy against the
  unbounded run.
- decode speed: a model of SmolLM2-135M's shapes (seeded random weights: the real one's file cannot travel to the GPU
  machine), bf16, at each total length of `--lengths`: ms per decode step and peak memory of unbounded, window, window
  + 4 sinks, each policy, and (at `--compiled-at`) compiled `StaticCache` and the compiled static ring with and
  without sinks; variants alternated, repeated, ratios median [min, max].
- cache kinds: `set_cache_implementation("offloaded")` and `("quantized", backend="fp8")` against the dynamic cache.
- two devices: a model split across cuda:0 and cuda:1 equals the one-device run (skipped with one GPU).

Writes `results.json` (every row, the machine) and `results.md` (one table) to `--out`, for `docs/`. Without CUDA it
fails at once: one line on stderr, exit status 2. Its pure parts (arguments, result files) are tested on CPU
(tests/test_gpu_check.py), and so is the exactness check itself, on CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHECKS = ("exactness", "policies", "host syncs", "compile", "decode speed", "cache kinds", "two devices")
#: seconds a check is expected to take at most: it is skipped when less than that is left of the budget
EXPECTED_S = {
    "exactness": 30,
    "policies": 20,
    "host syncs": 20,
    "compile": 90,
    "decode speed": 60,
    "cache kinds": 20,
    "two devices": 20,
}
NO_CUDA = "gpu_check: no CUDA device (torch.cuda.is_available() is False): this script checks cachelimit on a GPU only"


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def lengths(text: str) -> tuple[int, ...]:
    found = tuple(positive(part) for part in text.split(",") if part.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return found


def lengths_or_none(text: str) -> tuple[int, ...]:
    return () if text.strip().lower() == "none" else lengths(text)


def check_names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in CHECKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown check(s) {unknown or [text]}: choose from {', '.join(CHECKS)}")
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/gpu_check"), help="folder for results.json/.md")
    parser.add_argument("--only", type=check_names, default=CHECKS, help=f"comma-separated, of: {', '.join(CHECKS)}")
    parser.add_argument("--budget-s", type=positive, default=480, help="seconds for all checks (default 480)")
    parser.add_argument("--lengths", type=lengths, default=(2048, 8192, 32768), help="decode speed: total tokens")
    parser.add_argument("--new-tokens", type=positive, default=32, help="decode speed: decoded tokens (default 32)")
    parser.add_argument("--repeats", type=positive, default=3, help="decode speed: timed repeats (default 3)")
    parser.add_argument(
        "--compiled-at", type=lengths_or_none, default=(32768,), help="decode speed: lengths run compiled, or none"
    )
    args = parser.parse_args(argv)
    if args.new_tokens < 2 or args.new_tokens >= min(args.lengths):
        parser.error(f"--new-tokens ({args.new_tokens}) must be at least 2 and below every --lengths value")
    if not set(args.compiled_at) <= set(args.lengths):
        parser.error(f"--compiled-at {args.compiled_at} must be among --lengths {args.lengths}")
    return args


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "/")


def markdown(results: dict) -> str:
    """One table of every row, after the machine it ran on."""
    columns = ["check", "case", "status", "value", "unit", "ratio", "max_logit_diff", "detail"]
    lines = [f"# GPU check, {results['started']}", "", f"Machine: {results['machine']}", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(name)) for name in columns) + " |" for row in results["rows"]]
    return "\n".join(lines) + "\n"


def write_results(results: dict, out: Path) -> tuple[Path, Path]:
    """`results.json` (everything) and `results.md` (the table) in `out`, created if missing."""
    out.mkdir(parents=True, exist_ok=True)
    as_json, as_markdown = out / "results.json", out / "results.md"
    as_json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    as_markdown.write_text(markdown(results))
    return as_json, as_markdown


def run_checks(names, budget_s: int, args: argparse.Namespace, progress=None) -> list[dict]:
    """Every check in `names` within `budget_s`; `progress(rows)` after each, so a run cut short leaves its files."""
    import torch

    from cachelimit.bench import gpu_checks, gpu_decode

    deadline, rows = time.monotonic() + budget_s, []
    with tempfile.TemporaryDirectory() as tmp_dir:
        calls = {
            "exactness": lambda: gpu_checks.exactness("cuda"),
            "compile": lambda: gpu_checks.compiled("cuda"),
            "policies": lambda: gpu_decode.policies_across_devices("cuda"),
            "host syncs": lambda: gpu_decode.host_syncs("cuda"),
            "decode speed": lambda: gpu_decode.decode_speed(
                gpu_decode.smollm2_shaped("cuda", positions=max(args.lengths) + 64),
                args.lengths,
                args.new_tokens,
                args.repeats,
                compiled_at=args.compiled_at,
                deadline=deadline - 30,
            ),
            "cache kinds": lambda: gpu_checks.cache_kinds("cuda"),
            "two devices": lambda: gpu_checks.two_devices(tmp_dir),
        }
        for name in names:
            if deadline - time.monotonic() < EXPECTED_S[name]:
                rows.append({"check": name, "status": "skipped", "detail": "time budget spent"})
                continue
            started = time.monotonic()
            try:
                found = calls[name]()
            except Exception as error:  # one failing check must not hide the others' results
                found = [{"check": name, "status": "error", "detail": f"{type(error).__name__}: {error}"}]
                traceback.print_exc()
            torch.cuda.empty_cache()
            for row in found:
                row.setdefault("seconds", time.monotonic() - started)
            rows += found
            print(f"gpu_check: {name}: {', '.join(row['status'] for row in found)}", flush=True)
            if progress is not None:
                progress(rows)
    return rows


def machine() -> str:
    import torch
    import transformers

    devices = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return f"{devices}; torch {torch.__version__}, CUDA {torch.version.cuda}, transformers {transformers.__version__}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {"started": started, "machine": machine(), "python": platform.python_version(), "rows": []}

    def progress(rows: list[dict]) -> None:
        write_results({**results, "rows": rows}, args.out)

    rows = run_checks(args.only, args.budget_s, args, progress)
    results["rows"] = rows
    for path in write_results(results, args.out):
        print(f"gpu_check: wrote {path}")
    return 0 if all(row["status"] in ("pass", "refused", "skipped") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
