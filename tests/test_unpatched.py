"""A model whose family is not patched: what a user who forgot `cachelimit.patch()` sees (docs/getting-started.md, "Forgot
`cachelimit.patch()`?"). transformers refuses the bounded keywords itself, before anything cachelimit could hook;
where cachelimit does see the model, its own error names `cachelimit.patch()`."""

from __future__ import annotations

import re
import unittest
from pathlib import Path

import cachelimit
from tests.common import build_tiny_model, given_cache, left_padded_batch

GETTING_STARTED = (Path(__file__).resolve().parent.parent / "docs" / "getting-started.md").read_text(encoding="utf-8")


class UnpatchedModelTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama")  # patches llama; unpatched for the test, patched again after it
        self.ids, self.mask = left_padded_batch([4, 3])
        cachelimit.unpatch("llama")
        self.addCleanup(cachelimit.patch, "llama")

    def generate(self, **kwargs):
        return self.model.generate(self.ids, attention_mask=self.mask, max_new_tokens=2, **kwargs)

    def test_bounded_keywords_get_transformers_error_which_the_docs_explain(self):
        with self.assertRaises(ValueError) as raised:
            self.generate(cache_limit=4, num_sink_tokens=1)
        message = str(raised.exception)
        self.assertRegex(message, r"model_kwargs` are not used by the model: \['cache_limit', 'num_sink_tokens'\]")
        quoted = re.search(
            r"fails with transformers' own error, ``The\s+following `model_kwargs` are not used", GETTING_STARTED
        )
        self.assertIsNotNone(quoted, "Getting started must quote the error a user sees")
        self.assertIn("call `cachelimit.patch()` (every family) before `generate`", GETTING_STARTED)

    def test_what_cachelimit_sees_names_patch(self):
        with self.assertRaisesRegex(ValueError, re.escape("LlamaForCausalLM is not patched; call cachelimit.patch()")):
            cachelimit.BoundedCache.from_model(self.model, 4)
        with self.assertRaisesRegex(RuntimeError, re.escape("cachelimit.patch()")):
            self.generate(**given_cache(cachelimit.BoundedCache(4)))

    def test_patched_again_it_runs(self):
        cachelimit.patch("llama")
        out = self.generate(cache_limit=4)
        self.assertEqual(out.shape, (2, self.ids.shape[1] + 2))
