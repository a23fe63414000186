"""Every bad input is a clear ValueError/TypeError naming the argument, raised before any token is generated."""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized
from transformers import DynamicCache, GenerationConfig, StaticCache

from cachelimit.core.policy import MAX_CACHE_LIMIT
from cachelimit.hf import compat
from cachelimit.hf.compat import rope_config
from tests.common import build_tiny_model, given_cache, left_padded_batch, returned_cache


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama")
        self.ids, self.mask = left_padded_batch([4, 6])
        self.forwards = self.count_forwards(self.model)

    def count_forwards(self, model) -> list[int]:
        calls = []
        handle = model.register_forward_pre_hook(lambda module, args: calls.append(1))
        self.addCleanup(handle.remove)
        return calls

    def assert_rejected(self, error, fragments, model=None, **kwargs):
        model = model or self.model
        kwargs.setdefault("max_new_tokens", 3)
        with self.assertRaises(error) as caught:
            model.generate(self.ids, attention_mask=self.mask, **kwargs)
        self.assertIs(type(caught.exception), error)
        for fragment in fragments:
            self.assertIn(fragment, str(caught.exception))
        self.assertEqual(self.forwards, [], "a forward ran before the error")

    def test_the_forward_counter_sees_a_valid_run(self):
        """Positive control: the hook behind "no forward ran" does count the forwards of a bounded run."""
        self.model.generate(self.ids, attention_mask=self.mask, max_new_tokens=3, cache_limit=2)
        self.assertEqual(len(self.forwards), 3)

    @parameterized.expand(
        [
            ("zero", 0, ValueError),
            ("negative", -3, ValueError),
            ("float", 2.0, TypeError),
            ("bool", True, TypeError),
            ("string", "4", TypeError),
            ("huge", 10**23, ValueError),
        ]
    )
    def test_cache_limit_must_be_a_positive_int(self, _, value, error):
        self.assert_rejected(error, ["cache_limit", f"[1, {MAX_CACHE_LIMIT}]", repr(value)], cache_limit=value)

    @parameterized.expand(
        [("zero", 0, ValueError), ("negative", -1, ValueError), ("float", 2.0, TypeError), ("huge", 2**63, ValueError)]
    )
    def test_prefill_chunk_size_must_be_a_positive_int(self, _, value, error):
        expected = ["prefill_chunk_size", f"[1, {MAX_CACHE_LIMIT}]"]  # beyond 2^62, transformers overflows int64
        self.assert_rejected(error, expected, cache_limit=3, prefill_chunk_size=value)

    @parameterized.expand([("equal_to_limit", 3, ValueError), ("negative", -1, ValueError), ("float", 1.0, TypeError)])
    def test_num_sink_tokens_must_be_below_the_limit(self, _, value, error):
        self.assert_rejected(error, ["num_sink_tokens", "[0, 2]"], cache_limit=3, num_sink_tokens=value)

    def test_num_sink_tokens_below_the_effective_limit_of_a_native_window(self):
        model = build_tiny_model("mistral", sliding_window=3)  # keeps at most 2 positions
        self.forwards = self.count_forwards(model)
        self.assert_rejected(ValueError, ["num_sink_tokens", "[0, 1]"], model, cache_limit=8, num_sink_tokens=2)

    def test_num_sink_tokens_needs_cache_limit(self):
        self.assert_rejected(ValueError, ["num_sink_tokens", "cache_limit"], num_sink_tokens=2)

    def test_use_cache_false(self):
        self.assert_rejected(ValueError, ["use_cache"], cache_limit=3, use_cache=False)
        config = GenerationConfig(use_cache=False, max_new_tokens=3, pad_token_id=0)
        self.assert_rejected(ValueError, ["use_cache"], cache_limit=3, generation_config=config)

    @parameterized.expand([("static",), ("dynamic",), ("offloaded",)])
    def test_cache_implementation(self, name):
        self.assert_rejected(ValueError, ["cache_implementation", name], cache_limit=3, cache_implementation=name)

    def test_static_cache_passed(self):
        cache = StaticCache(config=self.model.config, max_cache_len=16)
        self.assert_rejected(ValueError, ["past_key_values", "StaticCache"], cache_limit=3, **given_cache(cache))

    def test_dynamic_cache_passed(self):
        cache = DynamicCache(config=self.model.config)
        self.assert_rejected(ValueError, ["past_key_values", "DynamicCache"], cache_limit=3, **given_cache(cache))

    def test_bounded_cache_of_another_limit_passed(self):
        cache = returned_cache(
            self.model.generate(
                self.ids, attention_mask=self.mask, max_new_tokens=2, cache_limit=3, return_dict_in_generate=True
            )
        )
        self.forwards.clear()
        self.assert_rejected(ValueError, ["cache_limit=3", "cache_limit=4"], cache_limit=4, **given_cache(cache))

    @unittest.skipIf(compat.at_least(compat.CHUNKED_PREFILL_AFTER_A_CACHE), "transformers >= 5.21.0 supports it")
    def test_chunked_prefill_after_a_returned_cache_on_old_transformers(self):
        first = self.model.generate(
            self.ids, attention_mask=self.mask, max_new_tokens=2, cache_limit=3, return_dict_in_generate=True
        )
        sequences = torch.cat([first.sequences, first.sequences[:, -2:]], 1)  # the sequence so far + 2 new tokens
        mask = torch.cat([self.mask, self.mask.new_ones(len(sequences), 4)], 1)
        self.forwards.clear()
        with self.assertRaises(ValueError) as caught:
            self.model.generate(
                sequences, attention_mask=mask, max_new_tokens=2, cache_limit=3, prefill_chunk_size=2,
                **given_cache(returned_cache(first)),
            )  # fmt: skip
        for fragment in ("prefill_chunk_size", "transformers >= 5.21.0"):
            self.assertIn(fragment, str(caught.exception))
        self.assertEqual(self.forwards, [], "a forward ran before the error")

    def test_assisted_decoding_with_an_assistant_model(self):
        assistant = build_tiny_model("llama", seed=1)
        assistant_forwards = self.count_forwards(assistant)
        self.assert_rejected(ValueError, ["assistant_model"], cache_limit=3, assistant_model=assistant)
        self.assertEqual(assistant_forwards, [])

    def test_assisted_decoding_with_prompt_lookup(self):
        self.assert_rejected(ValueError, ["prompt_lookup_num_tokens"], cache_limit=3, prompt_lookup_num_tokens=2)

    def test_unsupported_attention_implementation(self):
        # flash attention has no mask builder (docs/how-it-works.md, "Flash attention and GPUs"); set on the config directly,
        # since transformers refuses to switch to it without the `flash_attn` package (none on CPU)
        self.model.config._attn_implementation = "flash_attention_2"
        expected = ["attn_implementation", "flash_attention_2", "eager", "sdpa", "flex_attention"]
        self.assert_rejected(ValueError, expected, cache_limit=3)

    def test_sinks_where_transformers_4_keeps_rotaries_apart_are_refused(self):
        """The 4.x layouts of `compat`: one rotary module per layer type (Gemma 3, OLMo 3, ModernBERT decoder), a
        rotary in each attention layer (JetMoE)."""
        for family in ("gemma3_text", "olmo3", "modernbert-decoder", "jetmoe"):
            with self.subTest(family=family):
                model = build_tiny_model(family)
                if compat.rotaries_apart(model) is None:
                    self.skipTest("transformers >= 5.0.0: one rotary module each, their sinks are tested per family")
                self.forwards = self.count_forwards(model)
                self.assert_rejected(ValueError, ["num_sink_tokens", "transformers >= 5.0.0"], model, cache_limit=3,
                                     num_sink_tokens=1)  # fmt: skip

    @unittest.skipUnless(compat.CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN, "transformers >= 5.0.0 chunks any prompt")
    def test_chunked_one_token_prompt_on_transformers_4(self):
        self.ids, self.mask = self.ids[:, -1:], self.mask[:, -1:]
        self.assert_rejected(ValueError, ["prefill_chunk_size", "one-token prompt", "5.0.0"], cache_limit=3,
                             prefill_chunk_size=2)  # fmt: skip

    def test_gpt2_beyond_n_positions(self):
        model = build_tiny_model("gpt2")
        self.forwards = self.count_forwards(model)
        self.assert_rejected(ValueError, ["n_positions", "max_new_tokens"], model, cache_limit=3, max_new_tokens=300)

    @parameterized.expand([("dynamic", {"rope_type": "dynamic", "factor": 2.0}), ("yarn_is_fine", None)])
    def test_sinks_refused_with_length_dependent_rope(self, rope_type, rope_parameters):
        """Sink keys are moved by composing rotations, which only works when RoPE frequencies are fixed."""
        if rope_parameters is None:
            yarn = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 512, "rope_theta": 1e4}
            model = build_tiny_model("llama", **rope_config(yarn))
            self.assertEqual(len(model.generate(self.ids, attention_mask=self.mask, max_new_tokens=3, cache_limit=3,
                                                num_sink_tokens=1)[0]), self.ids.shape[1] + 3)  # fmt: skip
            return
        model = build_tiny_model("llama", **rope_config({**rope_parameters, "rope_theta": 1e4}))
        self.forwards = self.count_forwards(model)
        self.assert_rejected(ValueError, ["num_sink_tokens", rope_type], model=model, cache_limit=3, num_sink_tokens=1)
