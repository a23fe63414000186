"""`custom_generate/` as transformers loads it: `generate(custom_generate=PATH, trust_remote_code=True, ...)`.

The folder is loaded from the local path exactly as transformers loads a Hub `custom_generate` repo (it copies
`custom_generate/generate.py` into its modules cache, checks `requirements.txt`, imports `generate`), on a model
nobody patched. What it must show: the bounded semantics hold (against the banded full-sequence reference and the
StreamingLLM reference, neither sharing code with cachelimit's cache), the old `sink_cache` repo's `window_length`
spelling means `cache_limit = window_length - 1`, the refusals are cachelimit's, and the model is left unpatched.
"""

from __future__ import annotations

import unittest
from pathlib import Path

import torch
from packaging.requirements import Requirement
from transformers import GenerationConfig
from transformers.dynamic_module_utils import check_python_requirements

import cachelimit
from cachelimit.hf.compat import output_cache, with_cache

from .common import build_tiny_model, left_padded_batch
from .reference import generated_step_logits
from .sink_reference import StreamingReference

REPO = str(Path(__file__).resolve().parents[1])  # the folder that holds custom_generate/, as a Hub repo would
LIMIT, NEW_TOKENS = 8, 24
TOLERANCE = 1e-4


class TestCustomGenerate(unittest.TestCase):
    def setUp(self):
        cachelimit.unpatch()
        self.model = build_tiny_model("llama")
        cachelimit.unpatch()  # the helper patches; the recipe must work on an unpatched model
        self.addCleanup(cachelimit.unpatch)
        self.ids, self.mask = left_padded_batch([12, 9])
        self.original = type(self.model).prepare_inputs_for_generation

    def recipe(self, ids=None, mask=None, **arguments):
        ids = self.ids if ids is None else ids
        mask = self.mask if mask is None else mask
        options = {"max_new_tokens": NEW_TOKENS, "do_sample": False, "return_dict_in_generate": True}
        options.update(output_logits=True, **arguments)
        with torch.no_grad():
            return self.model.generate(
                input_ids=ids, attention_mask=mask, custom_generate=REPO, trust_remote_code=True, **options
            )

    def assert_left_unpatched(self):
        self.assertFalse(cachelimit.is_patched("llama"))
        self.assertIs(type(self.model).prepare_inputs_for_generation, self.original)

    def test_cache_limit_is_the_banded_window(self):
        out = self.recipe(cache_limit=LIMIT)
        self.assert_left_unpatched()
        self.assertIsInstance(output_cache(out), cachelimit.BoundedCache)
        reference = generated_step_logits(self.model, out.sequences, self.mask, LIMIT)
        logits = torch.stack(out.logits, dim=1).float()
        torch.testing.assert_close(logits, reference, atol=TOLERANCE, rtol=0)
        self.assertTrue(torch.equal(out.sequences[:, self.ids.shape[1] :], reference.argmax(-1)))
        # The bound cut (the run is longer than the window), so the unbounded run is measurably different.
        with torch.no_grad():
            plain = self.model.generate(
                input_ids=self.ids, attention_mask=self.mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                return_dict_in_generate=True, output_logits=True,
            )  # fmt: skip
        self.assertGreater((torch.stack(plain.logits, dim=1) - logits).abs().max().item(), 100 * TOLERANCE)

    def test_window_length_with_sinks_is_streaming_llm(self):
        """sink_cache's spelling: `window_length` counts the new token, so window_length=9 keeps 8 positions."""
        prompt = self.ids[:1, self.ids.shape[1] - 12 :]  # the unpadded row
        out = self.recipe(prompt, torch.ones_like(prompt), window_length=LIMIT + 1, num_sink_tokens=2)
        self.assert_left_unpatched()
        tokens, _ = StreamingReference(self.model, LIMIT, 2).greedy(prompt, NEW_TOKENS)
        self.assertEqual(out.sequences[0, prompt.shape[1] :].tolist(), tokens.tolist())
        wrong, _ = StreamingReference(self.model, LIMIT + 1, 2).greedy(prompt, NEW_TOKENS)  # window_length as L
        self.assertNotEqual(wrong.tolist(), tokens.tolist())
        windowed = self.recipe(prompt, torch.ones_like(prompt), window_length=LIMIT + 1)
        self.assertEqual(
            windowed.sequences.tolist(),
            self.recipe(prompt, torch.ones_like(prompt), cache_limit=LIMIT).sequences.tolist(),
        )

    def test_a_limit_in_the_generation_config_is_honoured(self):
        config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, cache_limit=LIMIT)
        out = self.recipe(generation_config=config)
        self.assertEqual(out.sequences.tolist(), self.recipe(cache_limit=LIMIT).sequences.tolist())
        self.assert_left_unpatched()

    def test_a_returned_cache_continues(self):
        """The returned cache, passed back with the extended ids, continues as one long call (README
        "Continuation"): the cache carries the limit, so none is given again."""
        first = self.recipe(cache_limit=LIMIT, max_new_tokens=10)
        ids = first.sequences
        mask = torch.cat([self.mask, self.mask.new_ones(2, 10)], dim=1)
        second = self.recipe(ids, mask, max_new_tokens=NEW_TOKENS - 10, **with_cache({}, output_cache(first)))
        self.assertEqual(second.sequences.tolist(), self.recipe(cache_limit=LIMIT).sequences.tolist())
        self.assert_left_unpatched()

    def test_a_family_patched_before_stays_patched(self):
        cachelimit.patch("llama")
        self.recipe(cache_limit=LIMIT)
        self.assertTrue(cachelimit.is_patched("llama"))

    def test_the_requirement_is_what_this_checkout_installs(self):
        """transformers checks `requirements.txt` against the installed packages when it loads the recipe; the
        wheel built from this checkout (version `__version__`) must satisfy it (tests/test_custom_generate_wheel.py
        installs that wheel into a fresh virtualenv and runs the recipe)."""
        lines = (Path(REPO) / "custom_generate" / "requirements.txt").read_text(encoding="utf-8").splitlines()
        requirements = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
        self.assertEqual([requirement.name for requirement in requirements], ["cachelimit"])
        self.assertIn(cachelimit.__version__, requirements[0].specifier)
        check_python_requirements(REPO, requirements_file="custom_generate/requirements.txt")  # the installed one

    def test_refusals_before_any_token(self):
        cases = {
            "cache_limit": ({"cache_limit": 0}, ValueError),
            "cache_limit ": ({"cache_limit": 2.5}, TypeError),
            "num_sink_tokens": ({"cache_limit": LIMIT, "num_sink_tokens": LIMIT}, ValueError),
            "window_length": ({"window_length": 1}, ValueError),
            "num_sink_tokens ": ({"window_length": 4, "num_sink_tokens": 3}, ValueError),  # at most W - 2
            "not both": ({"window_length": 9, "cache_limit": 8}, ValueError),
            "cache_limit=L": ({}, ValueError),
            "use_cache": ({"cache_limit": LIMIT, "use_cache": False}, ValueError),
        }
        for fragment, (arguments, error) in cases.items():
            with self.subTest(fragment.strip()), self.assertRaisesRegex(error, fragment.strip()):
                self.recipe(**arguments)
            self.assert_left_unpatched()


if __name__ == "__main__":
    unittest.main()
