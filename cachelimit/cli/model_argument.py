"""Load the model the command line is given, or fail with one line that says what to do.

The family is read from the config before any weight is loaded, so an unsupported model fails in a second,
not after a multi-GB download.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..families.refusals import not_served
from ..families.table import SERVED_TYPES
from .pretrained import PRETRAINED, CacheDirError, MissingModelError, load_pretrained

if TYPE_CHECKING:  # the command line imports this module to check paths, before torch is needed
    import torch


class LoadError(Exception):
    """The model or its tokenizer cannot be loaded (exit status 1)."""


def _first_sentence(error: BaseException) -> str:
    text = " ".join(str(error).split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _looks_like_path(name: str) -> bool:
    """A hub id is `name` or `org/name`; anything else the user typed as a path."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def resolve_source(name: str) -> tuple[str, bool]:
    """`(what from_pretrained gets, whether it is a local directory)`; local mistakes fail here.
    A name of `cachelimit.pretrained.PRETRAINED` ("smollm2") is that model, not a folder of the same name."""
    if name in PRETRAINED:
        return name, True
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise LoadError(f"could not load {name!r}: it is a file; give a model directory (config.json + weights)")
        if not (path / "config.json").is_file():
            raise LoadError(f"could not load {name!r}: the directory has no config.json")
        return str(path), True
    if _looks_like_path(name):
        raise LoadError(f"could not load {name!r}: no such directory")
    return name, False


def load_error(name: str, local: bool, error: BaseException) -> LoadError:
    if local:
        return LoadError(f"could not load {name!r}: {_first_sentence(error)}")
    return LoadError(
        f"could not load {name!r}: not a local path and it could not be downloaded (offline?): "
        f"{_first_sentence(error)}"
    )


def load_model(name: str, dtype: torch.dtype):
    """`(model in eval mode, tokenizer, family name)` for a transformers model name or local directory."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if name in PRETRAINED:
        return _load_named(name, dtype)
    source, local = resolve_source(name)
    if not local and sys.stderr.isatty():
        print(f"cachelimit: loading {name!r} from the Hugging Face Hub (or its local cache)...", file=sys.stderr)
    try:
        config = AutoConfig.from_pretrained(source)
    except Exception as error:
        raise load_error(name, local, error) from None
    family = config.model_type
    if family not in SERVED_TYPES:  # a refused type says why (families.refusals), any other lists the served ones
        raise LoadError(f"{name!r} has model_type {family!r}: {not_served(family)}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except Exception as error:
        raise load_error(name, local, error) from None
    classes = SERVED_TYPES[family].model_classes
    if not isinstance(model, classes):
        raise LoadError(
            f"{name!r} loads as {type(model).__name__}; cachelimit's {family} family covers "
            f"{', '.join(cls.__name__ for cls in classes)}"
        )
    return model.eval(), tokenizer, family


def _load_named(name: str, dtype: torch.dtype):
    """A model shipped in a pip package (`cachelimit.pretrained`): loaded offline, converted copy cached."""
    if sys.stderr.isatty():
        print(f"cachelimit: loading {name!r} ({PRETRAINED[name].description})...", file=sys.stderr)
    try:
        model, tokenizer = load_pretrained(name, dtype)
    except MissingModelError as error:
        raise LoadError(str(error)) from None
    except CacheDirError as error:  # found before the conversion: the message says which directory and what to do
        raise LoadError(f"could not load {name!r}: {error}") from None
    except Exception as error:
        raise load_error(name, True, error) from None
    return model, tokenizer, model.config.model_type
