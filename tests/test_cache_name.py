"""The cache's name: transformers 5.24.0 renamed `past_key_values` to `cache`, and the suite fails on the old one.

Both ways of using the old name on 5.24.0 must fail a test under the suite's own warning filters (pyproject.toml's
filterwarnings, tests/conftest.py's bridge for the logged notice): these tests use no `pytest.warns`, no
`catch_warnings`, so an entry that stopped matching transformers' text, or an `ignore` that swallowed it, shows here.
On earlier releases the old name is the only one and reading it is silent.
"""

from __future__ import annotations

import unittest
import warnings

import pytest
import torch

from cachelimit.hf import compat
from tests.common import build_tiny_model, given_cache, left_padded_batch, returned_cache

RENAMED = compat.at_least("5.24.0")


def _run(model, **kwargs):
    ids, mask = left_padded_batch([5, 3])
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=2, do_sample=False, return_dict_in_generate=True, **kwargs
    )


class CacheNameTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = build_tiny_model("llama")

    def test_the_release_name(self):
        self.assertEqual(compat.CACHE_ARGUMENT, "cache" if RENAMED else "past_key_values")

    def test_the_helpers_read_and_pass_the_cache_silently(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # any warning at all fails here
            first = _run(self.model, cache_limit=4)
            cache = returned_cache(first)
            self.assertEqual(type(cache).__name__, "BoundedCache")
            second = self.model.generate(
                first.sequences,
                attention_mask=torch.ones_like(first.sequences),
                max_new_tokens=2,
                return_dict_in_generate=True,
                **given_cache(cache),
            )
            self.assertIs(returned_cache(second), cache)

    @unittest.skipUnless(RENAMED, "before transformers 5.24.0 `past_key_values` is the only name")
    def test_reading_the_old_name_fails_the_test(self):
        out = _run(self.model, cache_limit=4)
        with pytest.raises(FutureWarning, match="past_key_values"):
            out.past_key_values  # noqa: B018  (the read itself is what is tested)

    @unittest.skipUnless(RENAMED, "before transformers 5.24.0 `past_key_values` is the only name")
    def test_passing_the_old_name_to_transformers_fails_the_test(self):
        from transformers import DynamicCache, GenerationMixin

        # transformers' own generate (cachelimit's patched one takes either name and passes the release's on)
        with pytest.raises(FutureWarning, match="`past_key_values` is deprecated"):
            GenerationMixin.generate(self.model, torch.ones(1, 3, dtype=torch.long), past_key_values=DynamicCache())

    @unittest.skipIf(RENAMED, "from transformers 5.24.0 the old name is deprecated (tested above)")
    def test_the_old_name_is_silent_before_the_rename(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = _run(self.model, cache_limit=4)
            self.assertIs(out.past_key_values, returned_cache(out))
