"""The `custom_generate` migration as a user does it: a fresh virtualenv, the wheel, then `custom_generate=PATH`.

A user leaving `transformers-community/sink_cache` has torch and transformers, no cachelimit (no index serves it),
and a model nobody patched. The README and the recipe's card say: install cachelimit from the checkout or its
wheel, then call `generate(custom_generate=PATH, trust_remote_code=True, cache_limit=L)`. This test does exactly
that, in a virtualenv without the system's packages: torch 2.13.0 and the transformers release this suite runs on,
from the package index; then the call, which must fail naming cachelimit (what a user who skipped the install
sees: transformers checks the recipe's imports); then the wheel built from this checkout (`tests/test_packaging.py`
builds it), and the same call, whose recipe's `requirements.txt` transformers now checks against what the wheel
installed. The venv's runs are compared, in this process, with references that share no code with cachelimit's
cache: the banded full-sequence forward (`tests/reference.py`) for the window, StreamingLLM for the sinks.

Slow, so it is marked `slow`: skipped unless `CACHELIMIT_SLOW_TESTS=1` (tests/conftest.py); `.ci/run` runs the slow
tests once, on the main leg. On this project's shared 2-core VM (torch 2.13.0 CPU, transformers 5.24.0) the whole
test took 482 s wall and 69 s CPU at load 11-16; the virtualenv's torch and transformers install alone took 133 s
wall and 45 s CPU at load 5-6.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import pytest
import torch

import cachelimit

from .common import build_tiny_model, left_padded_batch
from .reference import generated_step_logits
from .sink_reference import StreamingReference
from .test_packaging import build_wheel, copy_checkout

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent  # the folder that holds custom_generate/
LIMIT, SINKS, NEW_TOKENS = 8, 2, 24
TOLERANCE = 1e-4
INSTALL_TIMEOUT_S = 1800  # torch from the local index into a fresh virtualenv: 2 min idle, far longer under load
RUN_TIMEOUT_S = 600
PIP_INSTALL = ("-m", "pip", "install", "-q", "--no-input")

#: what the user runs in the fresh virtualenv: an unpatched model from its folder, two calls through the recipe
USER_SCRIPT = textwrap.dedent(
    """
    import sys, torch, transformers
    from transformers import AutoModelForCausalLM
    model_dir, recipe, inputs, results = sys.argv[1:]
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    given = torch.load(inputs)
    options = dict(custom_generate=recipe, trust_remote_code=True, max_new_tokens=given["new_tokens"],
                   do_sample=False, return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        window = model.generate(input_ids=given["ids"], attention_mask=given["mask"], cache_limit=given["limit"],
                                **options)
        row = given["row"]
        sinks = model.generate(input_ids=row, attention_mask=torch.ones_like(row), window_length=given["limit"] + 1,
                               num_sink_tokens=given["sinks"], **options)
    import cachelimit  # imported only now, to report where from and that nothing was left patched
    cache = window.cache if hasattr(window, "cache") else window.past_key_values
    torch.save({"window": window.sequences, "logits": torch.stack(window.logits, dim=1), "sinks": sinks.sequences,
                "cache": type(cache).__name__, "kept": cache.kept_lengths().tolist(),
                "patched": cachelimit.is_patched(model.config.model_type), "cachelimit": cachelimit.__file__,
                "version": cachelimit.__version__}, results)
    """
)


def _run(command: list, timeout: int, **options) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=timeout, **options)


def _checked(run: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if run.returncode != 0:
        raise AssertionError(
            f"{' '.join(run.args)} failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        )
    return run


class CustomGenerateFromTheWheel(unittest.TestCase):
    def test_a_fresh_virtualenv_with_the_wheel_runs_the_recipe_on_an_unpatched_model(self):
        with tempfile.TemporaryDirectory(prefix="cachelimit-migration-") as folder:
            root = Path(folder)
            model, given = self.write_model_and_inputs(root)
            python = self.fresh_virtualenv(root / "venv")
            work = root / "work"  # the user's own directory: no cachelimit source beside the script
            work.mkdir()
            env = dict(os.environ, HF_HOME=str(root / "hf"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
            env.pop("PYTHONPATH", None)
            call = [python, "-c", USER_SCRIPT, root / "model", REPO, root / "inputs.pt", root / "results.pt"]

            skipped_install = _run(call, RUN_TIMEOUT_S, cwd=work, env=env)
            self.assertNotEqual(skipped_install.returncode, 0, "the recipe ran without cachelimit installed")
            self.assertIn("cachelimit", skipped_install.stderr.splitlines()[-1])

            wheel = build_wheel(copy_checkout(root), root / "dist")
            _checked(_run([python, *PIP_INSTALL, wheel], INSTALL_TIMEOUT_S))
            _checked(_run(call, RUN_TIMEOUT_S, cwd=work, env=env))
            results = torch.load(root / "results.pt")

        self.assertTrue(Path(results["cachelimit"]).is_relative_to(root / "venv"), results["cachelimit"])
        self.assertEqual(results["version"], cachelimit.__version__)
        self.assertFalse(results["patched"], "the recipe left the model's family patched")
        self.assertEqual(results["cache"], "BoundedCache")
        self.assertEqual(max(results["kept"]), LIMIT)
        reference = generated_step_logits(model, results["window"], given["mask"], LIMIT)
        torch.testing.assert_close(results["logits"].float(), reference, atol=TOLERANCE, rtol=0)
        self.assertTrue(torch.equal(results["window"][:, given["ids"].shape[1] :], reference.argmax(-1)))
        tokens, _ = StreamingReference(model, LIMIT, SINKS).greedy(given["row"], NEW_TOKENS)
        self.assertEqual(results["sinks"][0, given["row"].shape[1] :].tolist(), tokens.tolist())

    def write_model_and_inputs(self, root: Path):
        """The tiny seeded Llama, saved unpatched as a user's model folder, and the prompts the user runs."""
        model = build_tiny_model("llama")
        cachelimit.unpatch()
        self.addCleanup(cachelimit.unpatch)
        model.save_pretrained(root / "model")
        ids, mask = left_padded_batch([12, 9])
        given = {"ids": ids, "mask": mask, "row": ids[:1], "limit": LIMIT, "sinks": SINKS, "new_tokens": NEW_TOKENS}
        torch.save(given, root / "inputs.pt")
        return model, given

    def fresh_virtualenv(self, venv: Path) -> Path:
        """A virtualenv without the system's site packages, with torch 2.13.0 and this suite's transformers."""
        _checked(_run([sys.executable, "-m", "venv", venv], RUN_TIMEOUT_S))  # no --system-site-packages
        python = venv / "bin" / "python"
        transformers = importlib.metadata.version("transformers")
        _checked(_run([python, *PIP_INSTALL, "torch==2.13.0", f"transformers=={transformers}"], INSTALL_TIMEOUT_S))
        return python


if __name__ == "__main__":
    unittest.main()
