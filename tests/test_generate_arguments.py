"""Where a bounded run's arguments come from, and what is refused: GenerationConfig fields, continuation under a
model-level setting, factory-built caches, user `position_ids`, right padding, assistants, learned positions.

Oracle: the same run spelled with explicit `cache_limit=`/`num_sink_tokens=` keyword arguments (itself tested
against the banded and StreamingLLM references); a refused run must fail before any forward.
"""

from __future__ import annotations

import tempfile
import unittest
import warnings

import torch
from parameterized import parameterized
from transformers import AutoModelForCausalLM, DynamicCache, GenerationConfig

from cachelimit import BoundedCache
from cachelimit.hf import compat

from .common import build_tiny_model, given_cache, left_padded_batch, returned_cache
from .registry_helpers import registered, run, seen_caches, setting_warnings

NEW = 12


def bounded_run(model, **kwargs):
    """Greedy tokens and logits of a left-padded batch whose 5 + 12 tokens exceed the small limits used here."""
    return run(model, [5, 3], max_new_tokens=NEW, **kwargs)


class GenerationConfigTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama")
        self.expected = bounded_run(self.model, cache_limit=4, num_sink_tokens=1)

    def assert_bounded(self, result, caches):
        self.assertIsInstance(caches[0], BoundedCache)
        self.assertEqual((caches[0].policy.limit, caches[0].policy.num_sinks), (4, 1))
        self.assertTrue(torch.equal(result[0], self.expected[0]))
        torch.testing.assert_close(result[1], self.expected[1], rtol=0, atol=0)

    def test_fields_of_a_passed_generation_config(self):
        config = GenerationConfig(max_new_tokens=NEW, pad_token_id=0, cache_limit=4, num_sink_tokens=1)
        with seen_caches(self.model) as caches:
            result = bounded_run(self.model, generation_config=config)
        self.assert_bounded(result, caches)

    def test_fields_of_the_model_generation_config(self):
        self.model.generation_config.cache_limit = 4
        self.model.generation_config.num_sink_tokens = 1
        with seen_caches(self.model) as caches:
            result = bounded_run(self.model)
        self.assert_bounded(result, caches)

    def test_fields_saved_in_generation_config_json_and_reloaded(self):
        # A config of the user's own: transformers drops unknown fields of one derived from the model config
        # (`_from_model_config`) when it loads it (see README).
        self.model.generation_config = GenerationConfig(pad_token_id=0, cache_limit=4, num_sink_tokens=1)
        with tempfile.TemporaryDirectory() as directory:
            self.model.save_pretrained(directory)
            reloaded = AutoModelForCausalLM.from_pretrained(directory).eval()
        reloaded.generation_config.eos_token_id = None
        with seen_caches(reloaded) as caches:
            result = bounded_run(reloaded)
        self.assert_bounded(result, caches)

    def test_keyword_arguments_win_over_the_config(self):
        config = GenerationConfig(max_new_tokens=NEW, pad_token_id=0, cache_limit=9, num_sink_tokens=1)
        with seen_caches(self.model) as caches:
            result = bounded_run(self.model, generation_config=config, cache_limit=4)
        self.assert_bounded(result, caches)

    @parameterized.expand(
        [
            ("zero", {"cache_limit": 0}, ValueError, "`cache_limit` (from generation_config) must be an int in [1, "),
            (
                "string",
                {"cache_limit": "4"},
                TypeError,
                "`cache_limit` (from generation_config) must be an int in [1, ",
            ),
            ("sinks_at_limit", {"cache_limit": 4, "num_sink_tokens": 4}, ValueError, "[0, 3]"),
            ("sinks_alone", {"num_sink_tokens": 1}, ValueError, "needs `cache_limit`"),
        ]
    )
    def test_same_validation_as_keyword_arguments(self, _, fields, error, fragment):
        config = GenerationConfig(max_new_tokens=NEW, pad_token_id=0, **fields)
        forwards = []
        self.model.register_forward_pre_hook(lambda *args: forwards.append(1))
        with self.assertRaises(error) as caught:
            run(self.model, [5, 3], generation_config=config)
        self.assertIn(fragment, str(caught.exception))
        self.assertIn("generation_config", str(caught.exception))
        self.assertEqual(forwards, [])


class ContinuationUnderASettingTest(unittest.TestCase):
    """`generate(o.sequences, past_key_values=o.past_key_values)` under "sink"/"window": equal to one long run."""

    @parameterized.expand([("sink", {"window_length": 5, "num_sink_tokens": 1}), ("window", {"window_length": 5})])
    def test_continue_from_the_returned_cache(self, name, kwargs):
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([5, 3], seed=2)
        sinks = kwargs.get("num_sink_tokens")
        whole = model.generate(ids, attention_mask=mask, max_new_tokens=8, cache_limit=4, num_sink_tokens=sinks)
        model.set_cache_implementation(name, **kwargs)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            first = model.generate(ids, attention_mask=mask, max_new_tokens=4, return_dict_in_generate=True)
            mask = torch.cat([mask, torch.ones_like(first.sequences[:, ids.shape[1] :])], 1)
            second = model.generate(
                first.sequences, attention_mask=mask, **given_cache(returned_cache(first)), max_new_tokens=4
            )
            explicit = {"cache_limit": 4, "num_sink_tokens": sinks}
            third = model.generate(first.sequences, attention_mask=mask, max_new_tokens=4, **explicit)
        self.assertEqual(setting_warnings(records), [])
        self.assertTrue(torch.equal(second, whole))
        self.assertEqual(third.shape, whole.shape)

    def test_a_cache_of_another_window_still_warns(self):
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([5, 3], seed=2)
        out = model.generate(ids, attention_mask=mask, max_new_tokens=2, cache_limit=3, return_dict_in_generate=True)
        model.set_cache_implementation("window", window_length=5)
        mask = torch.cat([mask, torch.ones(2, 2, dtype=mask.dtype)], 1)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            model.generate(out.sequences, attention_mask=mask, **given_cache(returned_cache(out)), max_new_tokens=2)
        self.assertEqual(len(setting_warnings(records)), 1)


class FactoryBuiltBoundedCacheTest(unittest.TestCase):
    @parameterized.expand([("window", 0), ("sinks", 1)])
    def test_factory_returning_a_bounded_cache(self, _, sinks):
        model = build_tiny_model("llama")
        expected = bounded_run(model, cache_limit=4, num_sink_tokens=sinks)
        with registered("mine", lambda config, generation: BoundedCache(4, sinks)):
            model.set_cache_implementation("mine")
            with seen_caches(model) as caches:
                result = bounded_run(model)
        self.assertIsInstance(caches[0], BoundedCache)
        self.assertTrue(torch.equal(result[0], expected[0]))
        torch.testing.assert_close(result[1], expected[1], rtol=0, atol=0)


def refused_before_any_token(test, model, pattern, **kwargs):
    forwards = []
    handle = model.register_forward_pre_hook(lambda *args: forwards.append(1))
    try:
        with test.assertRaisesRegex(ValueError, pattern):
            bounded_run(model, **kwargs)
    finally:
        handle.remove()
    test.assertEqual(forwards, [])


@unittest.skipUnless(compat.at_least(compat.GENERATE_ADVANCES_POSITION_IDS), "refused before 5.2.0 (see below)")
class PositionIdsTest(unittest.TestCase):
    """User `position_ids` are fed to the model as an unbounded run feeds them (equal to transformers' own run
    while the bound does not cut); with RoPE sinks, whose rotation needs the standard positions, others are refused."""

    def positions(self, scale=1):
        _, mask = left_padded_batch([5, 3], seed=1)
        return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1) * scale  # the shape transformers' own tests pass

    @parameterized.expand([("gpt2", None), ("llama", None), ("llama", 1)])
    def test_standard_positions_are_accepted(self, family, sinks):
        model = build_tiny_model(family)
        expected = bounded_run(model, cache_limit=4, num_sink_tokens=sinks)
        result = bounded_run(model, cache_limit=4, num_sink_tokens=sinks, position_ids=self.positions())
        self.assertTrue(torch.equal(result[0], expected[0]))
        torch.testing.assert_close(result[1], expected[1], rtol=0, atol=1e-6)

    @parameterized.expand([("gpt2",), ("llama",)])
    def test_other_positions_are_honoured_exactly(self, family):
        model = build_tiny_model(family)
        unbounded = bounded_run(model, position_ids=self.positions(scale=2))
        bounded = bounded_run(model, cache_limit=64, position_ids=self.positions(scale=2))
        self.assertTrue(torch.equal(bounded[0], unbounded[0]))
        torch.testing.assert_close(bounded[1], unbounded[1], rtol=0, atol=1e-5)
        self.assertFalse(
            torch.allclose(bounded[1], bounded_run(model, cache_limit=64)[1])
        )  # positions matter (spread: RoPE ignores a uniform shift)

    def test_other_positions_with_rope_sinks_are_refused_before_any_token(self):
        model = build_tiny_model("llama")
        positions = self.positions(scale=2)
        refused_before_any_token(
            self, model, r"position_ids.*row 0", cache_limit=4, num_sink_tokens=1, position_ids=positions
        )


@unittest.skipIf(compat.at_least(compat.GENERATE_ADVANCES_POSITION_IDS), "transformers >= 5.2.0 advances them")
class PositionIdsOnOldTransformersTest(unittest.TestCase):
    """Before 5.2.0 transformers does not advance user `position_ids` across steps: a bounded run refuses them."""

    def test_position_ids_are_refused_before_any_token(self):
        model = build_tiny_model("llama")
        _, mask = left_padded_batch([5, 3], seed=1)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        refused_before_any_token(
            self, model, r"position_ids.*transformers >= 5\.2\.0", cache_limit=4, position_ids=positions
        )


class RightPaddingTest(unittest.TestCase):
    """transformers numbers the tokens after right padding from the pads' filler position (it warns that right
    padding is wrong for generation); a bounded run that does not cut gives exactly its result."""

    def right_padded(self):
        ids, mask = left_padded_batch([5, 3], seed=1)
        return ids.flip(1), mask.flip(1)

    @parameterized.expand([("gpt2",), ("llama",), ("mistral",)])
    def test_right_padded_prompt_matches_transformers(self, family):
        model = build_tiny_model(family)
        ids, mask = self.right_padded()
        options = {"max_new_tokens": NEW, "do_sample": False, "output_logits": True, "return_dict_in_generate": True}
        unbounded = model.generate(ids, attention_mask=mask, **options)
        bounded = model.generate(ids, attention_mask=mask, cache_limit=40, **options)
        self.assertTrue(torch.equal(bounded.sequences, unbounded.sequences))
        torch.testing.assert_close(torch.stack(bounded.logits), torch.stack(unbounded.logits), rtol=0, atol=1e-5)

    def test_right_padding_with_rope_sinks_is_refused_before_any_token(self):
        model = build_tiny_model("llama")
        ids, mask = self.right_padded()
        forwards = []
        model.register_forward_pre_hook(lambda *args: forwards.append(1))
        with self.assertRaisesRegex(ValueError, r"attention_mask.*row 1.*right padding"):
            model.generate(ids, attention_mask=mask, max_new_tokens=3, cache_limit=40, num_sink_tokens=1)
        self.assertEqual(forwards, [])


class AssistantTest(unittest.TestCase):
    def test_bounded_assistant_is_refused_before_any_token(self):
        model = build_tiny_model("llama")
        assistant = build_tiny_model("llama", seed=1)
        assistant.set_cache_implementation("window", window_length=5)
        forwards = []
        for module in (model, assistant):
            module.register_forward_pre_hook(lambda *args: forwards.append(1))
        ids, _ = left_padded_batch([5], seed=1)
        with self.assertRaisesRegex(ValueError, "assistant_model.*bounded"):
            model.generate(ids, max_new_tokens=4, assistant_model=assistant)
        self.assertEqual(forwards, [])


class LearnedPositionsTest(unittest.TestCase):
    """GPT-2 with n_positions=32 and a 10-token prompt uses positions 0..31 for 23 new tokens (the last token is
    never fed back), so 23 runs and 24 is the first count refused."""

    def test_the_last_position_is_usable(self):
        model = build_tiny_model("gpt2", n_positions=32)
        ids, _ = left_padded_batch([10], seed=1)
        unbounded = model.generate(ids, max_new_tokens=23, do_sample=False)
        bounded = model.generate(ids, max_new_tokens=23, do_sample=False, cache_limit=64)
        self.assertTrue(torch.equal(bounded, unbounded))
        with self.assertRaisesRegex(ValueError, "n_positions=32.*at most 23"):
            model.generate(ids, max_new_tokens=24, cache_limit=64)


class ContinuationMismatchTest(unittest.TestCase):
    def returned_cache(self, model):
        ids, mask = left_padded_batch([5, 3], seed=2)
        out = model.generate(ids, attention_mask=mask, max_new_tokens=2, cache_limit=4, return_dict_in_generate=True)
        return out.sequences, returned_cache(out)

    def test_model_with_more_layers(self):
        sequences, cache = self.returned_cache(build_tiny_model("llama"))
        deeper = build_tiny_model("llama", layers=3)
        with self.assertRaisesRegex(ValueError, "past_key_values.*another model"):  # tests/test_continuation_checks
            deeper.generate(sequences, **given_cache(cache), max_new_tokens=2, cache_limit=4)

    def test_float32_cache_on_a_bfloat16_model(self):
        sequences, cache = self.returned_cache(build_tiny_model("llama"))
        model = build_tiny_model("llama", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "past_key_values.*another model"):  # the same model cast: refused too
            model.generate(sequences, **given_cache(cache), max_new_tokens=2, cache_limit=4)

    def test_plain_dynamic_cache_is_still_refused(self):
        model = build_tiny_model("llama")
        with self.assertRaisesRegex(ValueError, "DynamicCache"):
            model.generate(torch.ones(1, 3, dtype=torch.long), **given_cache(DynamicCache()), cache_limit=4)
