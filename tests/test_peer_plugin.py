"""The external test bed's plugin (tests/external/peer_plugin.py): which `generate` calls get the default limit.

A call that chooses its cache keeps it (a default limit would only be refused); every other call of a patched
model becomes a bounded run. Read from the cache the forward actually received.
"""

from __future__ import annotations

import importlib.util
import unittest

from transformers import DynamicCache, GenerationConfig

from cachelimit import BoundedCache

from .cli_helpers import REPO
from .common import build_tiny_model, left_padded_batch
from .registry_helpers import seen_caches


def load_plugin():
    spec = importlib.util.spec_from_file_location("peer_plugin", REPO / "tests" / "external" / "peer_plugin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class DefaultLimitTest(unittest.TestCase):
    def setUp(self):
        self.plugin = load_plugin()
        self.model = build_tiny_model("llama")
        self.ids, self.mask = left_padded_batch([3, 4])

    def first_cache(self, **kwargs):
        generate = self.plugin._with_default_limit(type(self.model).generate)
        with seen_caches(self.model) as caches:
            generate(self.model, self.ids, attention_mask=self.mask, max_new_tokens=2, **kwargs)
        return caches[0]

    def test_plain_call_gets_the_default_limit(self):
        cache = self.first_cache()
        self.assertIsInstance(cache, BoundedCache)
        self.assertEqual(cache.policy.limit, self.plugin.LIMIT)

    def test_calls_that_choose_their_cache_keep_it(self):
        given = DynamicCache(config=self.model.config)
        self.assertIs(self.first_cache(past_key_values=given), given)
        self.assertNotIsInstance(self.first_cache(cache_implementation="static"), BoundedCache)
        config = GenerationConfig(max_new_tokens=2, pad_token_id=0, use_cache=False)
        self.assertIsNone(self.first_cache(generation_config=config))
        self.assertEqual(self.first_cache(cache_limit=3).policy.limit, 3)

    def test_skips_are_named_with_a_reason(self):
        for name, reason in self.plugin.SKIPS.items():
            self.assertTrue(name.startswith("test_"), name)
            self.assertGreater(len(reason), 40, name)

    def test_skips_cover_parameterized_variants_only(self):
        reason = self.plugin.SKIPS["test_assisted_decoding_matches_greedy_search"]
        self.assertEqual(self.plugin.skip_reason("test_assisted_decoding_matches_greedy_search_0_random"), reason)
        self.assertEqual(self.plugin.skip_reason("test_assisted_decoding_matches_greedy_search"), reason)
        self.assertIsNone(self.plugin.skip_reason("test_assisted_decoding_matches_greedy_search_with_sampling"))
        self.assertIsNone(self.plugin.skip_reason("test_left_padding_compatibility"))
