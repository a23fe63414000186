"""What a run of the external test bed must show, from its outcomes (JUnit) and the plugin's generate calls: the
runner's checks, and the named lists that apply to a run, printed with their reasons.

- every file and mode: no failure outside the named lists (`peer_reasons`), and at least one test passed;
- (a) `patched` gives every test the outcome it has `unpatched`, wherever both ran;
- (b) `limit`: some call got the default limit, and none grew past it (its results are compared with
  transformers' own, which is only right while the bound never cuts);
- (c) `limit-cut`: some call got the default limit and some call was cut by it, and every cross-path test
  (`peer_reasons.CROSS_PATH`, two generation paths that must agree) the file collects passed, or was skipped by
  the suite itself (the plugin refuses to skip or expect to fail one), at least one of them passed.
"""

from __future__ import annotations

from collections import Counter

import peer_plan
import peer_reasons

FAILING = ("failed", "error")


def cross_path_lines(family: str, found: dict[str, str]) -> tuple[list[str], bool]:
    """(c) for one `limit-cut` file's outcomes: its report lines, and whether every cross-path test it collected
    passed or was skipped by the suite, at least one passed."""
    tests = {test: outcome for test, outcome in found.items() if test.split("::")[-1] in peer_reasons.CROSS_PATH}
    counts = Counter(tests.values())
    bad = sorted(test for test, outcome in tests.items() if outcome not in ("passed", "skipped"))
    lines = [
        f"(c) {family} limit-cut: cross-path tests {counts['passed']} passed, {counts['skipped']} skipped by the "
        f"suite, {len(bad)} not passed"
    ]
    for test in bad:
        lines.append(f"    {test}: {tests[test]} (must agree: {peer_reasons.CROSS_PATH[test.split('::')[-1]]})")
    if not counts["passed"]:
        lines.append(f"    {family} limit-cut: no cross-path test passed: no two paths were compared")
    return lines, not bad and counts["passed"] > 0


def bounded_lines(family: str, mode: str, found: dict[str, str], counts: list[int]) -> tuple[list[str], bool]:
    """(b) or (c) for one file in a bounded mode, from its outcomes and its calls `[bounded, kept, cut]`."""
    bounded, kept, cut = counts
    lines = [
        f"    generate calls: {bounded} bounded by the default limit ({cut} of them cut by it), {kept} chose their "
        "own cache"
    ]
    held = True
    if not bounded:  # the wrapper never ran: nothing of cachelimit's bounded path was checked
        lines.append(f"    {family} {mode}: no generate call got the default limit; see its log")
        held = False
    if mode == "limit" and cut:
        lines.append(f"    {family} limit: {cut} call(s) grew past the limit, which must never cut in this mode")
        held = False
    if mode == "limit-cut":
        if not cut:
            lines.append(f"    {family} limit-cut: no call grew past the limit: nothing was cut")
            held = False
        more, agreed = cross_path_lines(family, found)
        lines += more
        held &= agreed
    return lines, held


def checks(
    results: dict[tuple[str, str], dict[str, str]], calls: dict[tuple[str, str], list[int]] | None = None
) -> tuple[list[str], bool]:
    """The report's check lines and whether every check holds (`calls`: (family, mode) -> the bounded runs'
    generate calls, `[bounded by the default limit, chose their own cache, bounded and cut]`)."""
    lines, ok = [], True
    for (family, mode), found in results.items():
        bad = sorted(test for test, outcome in found.items() if outcome in FAILING)
        label = "(b) " if mode == "limit" else ""
        lines.append(f"{label}{family} {mode}: {len(bad)} failure(s) outside the named lists")
        lines += [f"    {test}: {found[test]}" for test in bad]
        if mode in peer_plan.DEFAULT_LIMITS:
            more, held = bounded_lines(family, mode, found, (calls or {}).get((family, mode), [0, 0, 0]))
            lines += more
            bad = bad or ([] if held else [f"{mode} checks"])
        elif bad:
            lines.append("    (the suite's own? list each in peer_reasons with its reason: BASELINE for a test, FILES")
            lines.append("    for a file that does not collect; a listed test that passes fails as XPASS(strict))")
        if not Counter(found.values())["passed"]:  # no JUnit XML or nothing ran: a run that checked nothing
            lines.append(f"    {family} {mode}: no test passed; see its log")
            bad = bad or ["nothing passed"]
        ok &= not bad
    for family in sorted({family for family, _ in results}):
        if (family, "unpatched") in results and (family, "patched") in results:
            base, patched = results[family, "unpatched"], results[family, "patched"]
            changed = sorted(test for test in base.keys() | patched.keys() if base.get(test) != patched.get(test))
            lines.append(f"(a) {family}: {len(changed)} outcome(s) differ patched vs unpatched")
            lines += [f"    {test}: {base.get(test)} -> {patched.get(test)}" for test in changed]
            ok &= not changed
    return lines, ok


def named_lists(families: list[str], modes: list[str]) -> list[str]:
    """Every named exception that applies to this run, with its reason: nothing is skipped without one; and the
    cross-path tests `limit-cut` requires."""
    lines = []
    if set(modes) & set(peer_plan.DEFAULT_LIMITS):
        lines += [f"skipped in the bounded modes, any file: {name}: {why}" for name, why in peer_reasons.SKIPS.items()]
    if "limit-cut" in modes:
        lines += [f"skipped in limit-cut, any file: {name}: {why}" for name, why in peer_reasons.CUT.items()]
        lines += [f"required to pass in limit-cut: {name}: {why}" for name, why in peer_reasons.CROSS_PATH.items()]
    lines += [
        f"expected to fail, any file (checks nothing): {name}: {why}" for name, why in peer_reasons.VACUOUS.items()
    ]
    for family in families:
        for name, reason in peer_reasons.BASELINE.get(family, {}).items():
            lines.append(f"expected to fail (the suite's own), {family}: {name}: {reason}")
    return lines
