"""Custom cache implementations: registered factories build the cache each call uses."""

from __future__ import annotations

import unittest

import torch
from transformers import DynamicCache

import cachelimit

from .common import build_tiny_model
from .registry_helpers import NEW, registered, run, seen_caches


class CustomFactoryTest(unittest.TestCase):
    def test_custom_factory_cache_is_used_fresh_every_call(self):
        built, seen_configs = [], []

        def factory(model_config, generation_config, *, note: str):
            seen_configs.append((model_config, generation_config, note))
            built.append(DynamicCache(config=model_config))
            return built[-1]

        model = build_tiny_model("llama")
        expected_tokens, expected_logits = run(model)
        with registered("mine", factory):
            model.set_cache_implementation("mine", note="hello")
            self.assertEqual(built, [])  # built per call, not at set time
            with seen_caches(model) as caches:
                tokens, logits = run(model)
                run(model, max_new_tokens=3)
        self.assertEqual(len(built), 2)
        self.assertIsNot(built[0], built[1])
        self.assertTrue(all(cache is built[0] for cache in caches[:NEW]))
        self.assertTrue(all(cache is built[1] for cache in caches[NEW:]))
        model_config, generation_config, note = seen_configs[1]
        self.assertIs(model_config, model.config)
        self.assertEqual((generation_config.max_new_tokens, note), (3, "hello"))
        self.assertTrue(torch.equal(tokens, expected_tokens))
        torch.testing.assert_close(logits, expected_logits, rtol=0, atol=0)

    def test_cache_subclass_as_factory_and_plain_dict_entry(self):
        class NotedCache(DynamicCache):
            def __init__(self, model_config, generation_config, note: str = "none"):
                super().__init__(config=model_config)
                self.note = note

        model = build_tiny_model("gpt2")
        cachelimit.CACHE_IMPLEMENTATIONS["noted"] = NotedCache  # the registry is a plain dict
        try:
            model.set_cache_implementation("noted", note="x")
            with seen_caches(model) as caches:
                run(model, max_new_tokens=2)
        finally:
            del cachelimit.CACHE_IMPLEMENTATIONS["noted"]
        self.assertIsInstance(caches[0], NotedCache)
        self.assertEqual(caches[0].note, "x")

    def test_factory_may_return_generate_arguments(self):
        model = build_tiny_model("llama")
        expected, _ = run(model, cache_limit=4, num_sink_tokens=1)
        with registered("streaming", lambda config, generation: cachelimit.GenerateArguments(4, 1)):
            model.set_cache_implementation("streaming")
            tokens, _ = run(model)
        self.assertTrue(torch.equal(tokens, expected))

    def test_factory_returning_something_else_is_a_type_error(self):
        model = build_tiny_model("llama")
        with registered("broken", lambda config, generation: "a cache"):
            model.set_cache_implementation("broken")
            with self.assertRaisesRegex(TypeError, "'broken' returned str"):
                run(model)

    def test_register_rejects_bad_factories(self):
        with self.assertRaisesRegex(TypeError, "callable"):
            cachelimit.register_cache_implementation("bad", 3)
        with self.assertRaisesRegex(TypeError, "two positional"):
            cachelimit.register_cache_implementation("bad", lambda *, window_length: None)
        self.assertNotIn("bad", cachelimit.CACHE_IMPLEMENTATIONS)
