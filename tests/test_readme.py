"""The README as a user meets it: every ```python block runs as written, and every relative link leads somewhere.

The blocks run in order in one fresh interpreter (a later block may use what an earlier one defined, as a reader
would type them), offline, with any FutureWarning an error: transformers' notices of the cache's pre-5.24 name are
FutureWarnings, so a block that spells the cache the old way fails too, and so does one that reads
`out.past_key_values` (transformers logs that one; its text is looked for in the output). Each block is compiled
under the README's name and its first line, so a failure names where it is. The runner and the link check are each
run once on a broken text as well, so that neither can pass by finding nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cachelimit.hf import compat

pytestmark = pytest.mark.tooling  # the project's own tools: CI runs these on the main leg (tests/conftest.py)

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
#: what transformers logs when code reads or passes the cache under its pre-5.24 name (tests/conftest.py)
CACHE_NAME_NOTICE = "`past_key_values`/`cache_params` are deprecated"

#: runs the blocks given as JSON [[first line, source], ...] on stdin, each compiled under the README's name
RUNNER = """
import json, sys

namespace = {"__name__": "__main__"}
for line, source in json.load(sys.stdin):
    exec(compile("\\n" * (line - 1) + source, sys.argv[1], "exec"), namespace)
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(the line of the block's first code line, its source) for every ```python fence, dedented as written."""
    blocks, lines = [], text.splitlines()
    index = 0
    while index < len(lines):
        fence = re.fullmatch(r"( *)```python\s*", lines[index])
        index += 1
        if not fence:
            continue
        indent, start, body = len(fence.group(1)), index + 1, []
        while index < len(lines) and lines[index].strip() != "```":
            body.append(lines[index][indent:])
            index += 1
        index += 1
        blocks.append((start, "\n".join(body) + "\n"))
    return blocks


def run_blocks(blocks: list[tuple[int, str]], name: str = "README.md") -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "error::FutureWarning",
    }
    return subprocess.run(
        [sys.executable, "-W", "error::FutureWarning", "-c", RUNNER, name],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment,
        timeout=600,
    )


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) and GitHub give a heading like the docs' ones."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text, fence, found = page.read_text(encoding="utf-8"), False, set()
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and (heading := re.match(r"#+ (.+)", line)):
            found.add(slug(heading.group(1)))
    return found


def broken_links(text: str, base: Path) -> list[str]:
    """Relative links and images of a Markdown text whose file (or anchor in a Markdown file) does not exist."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor of the README itself (GitHub makes those)
        path, _, anchor = target.partition("#")
        resolved = (base / path).resolve()
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor in {path}")
    return broken


def test_the_readme_has_the_blocks_the_front_page_promises():
    """A complete load -> patch -> bounded generate -> returned cache snippet, then the policy example."""
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 2, blocks
    first = blocks[0][1]
    for needed in ("from transformers import", "cachelimit.patch()", "cache_limit=", "num_sink_tokens=", "out.cache"):
        assert needed in first, needed
    assert any("cache_policy=" in source for _, source in blocks[1:])
    # the pinned release's spelling in code (cachelimit's generate accepts the old name silently, so only this
    # check sees it there; a comment may still name it for older releases)
    code = [re.sub(r"#.*", "", line) for _, source in blocks for line in source.splitlines()]
    assert [line for line in code if "past_key_values" in line] == []


@pytest.mark.skipif(
    not compat.at_least("5.24.0"),
    reason=f"the README spells the cache as its pinned transformers 5.24.0 does (`out.cache`); "
    f"transformers {compat.TRANSFORMERS} names it past_key_values",
)
def test_every_python_block_of_the_readme_runs():
    result = run_blocks(python_blocks(README.read_text(encoding="utf-8")))
    assert result.returncode == 0, result.stderr[-4000:]
    assert CACHE_NAME_NOTICE not in result.stdout + result.stderr
    assert "tokens;" in result.stdout  # the first block's print ran


def test_a_broken_block_fails_and_names_its_line():
    text = "intro\n\n```python\nvalue = 1\n```\n\nmore\n\n```python\nassert value == 2, 'broken on purpose'\n```\n"
    blocks = python_blocks(text)
    assert blocks == [(4, "value = 1\n"), (10, "assert value == 2, 'broken on purpose'\n")]
    result = run_blocks(blocks)
    assert result.returncode != 0
    assert 'File "README.md", line 10' in result.stderr and "broken on purpose" in result.stderr


def test_a_block_that_warns_of_a_deprecation_fails():
    result = run_blocks([(1, "import warnings\nwarnings.warn('`past_key_values` is deprecated', FutureWarning)\n")])
    assert result.returncode != 0 and "FutureWarning" in result.stderr


def test_every_relative_link_of_the_readme_resolves():
    text = README.read_text(encoding="utf-8")
    assert re.findall(r"\]\((docs/[^)\s]+)\)", text), "the front page links into the docs"
    assert broken_links(text, REPO) == []


def test_a_broken_link_is_found():
    text = (
        "[ok](README.md) [file](docs/no-such-page.md) [anchor](docs/semantics.md#no-such-heading) [web](https://x.y)"
    )
    assert broken_links(text, REPO) == [
        "docs/no-such-page.md: no such file",
        "docs/semantics.md#no-such-heading: no heading with that anchor in docs/semantics.md",
    ]
