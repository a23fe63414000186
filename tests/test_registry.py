"""`model.set_cache_implementation(name, **kwargs)` and the open registry `cachelimit.CACHE_IMPLEMENTATIONS`.

Oracles: a "window"/"sink" setting must give bit-identical tokens and logits to the explicit
`cache_limit=window_length - 1, num_sink_tokens=S` call (same machinery), and "window" must equal transformers'
own Mistral `sliding_window=window_length` (independent implementation). Which cache a run really used is read in
a forward pre-hook, by type or identity.
"""

from __future__ import annotations

import unittest
import warnings

import pytest
import torch
from parameterized import parameterized
from transformers import DynamicCache, GenerationConfig, QuantizedCache, StaticCache
from transformers.utils import is_hqq_available, is_optimum_quanto_available

from cachelimit.hf import cache_setting as registry
from cachelimit.hf import compat

from .common import VOCAB, build_tiny_model, given_cache, left_padded_batch
from .declarations import representative_families
from .registry_helpers import LENGTHS, NEW, run, seen_caches, setting_warnings


class SettingEqualsExplicitTest(unittest.TestCase):
    @parameterized.expand(
        [
            (family, name, kwargs, explicit)
            for family in representative_families()
            for name, kwargs, explicit in (
                ("window", {"window_length": 6}, {"cache_limit": 5}),
                ("sink", {"window_length": 6, "num_sink_tokens": 2}, {"cache_limit": 5, "num_sink_tokens": 2}),
            )
        ]
    )
    def test_same_tokens_and_logits_as_explicit_call(self, family, name, kwargs, explicit):
        model = build_tiny_model(family)
        expected_tokens, expected_logits = run(model, **explicit)
        _, default_logits = run(model)
        model.set_cache_implementation(name, **kwargs)
        with seen_caches(model) as caches:
            tokens, logits = run(model)
        self.assertTrue(torch.equal(tokens, expected_tokens))
        self.assertTrue(torch.equal(logits, expected_logits))
        self.assertFalse(torch.allclose(logits, default_logits))  # the window really bites in this run
        policy = caches[0].policy
        self.assertEqual(
            (policy.limit, policy.num_sinks), (explicit["cache_limit"], explicit.get("num_sink_tokens", 0))
        )

    @parameterized.expand([("short_prompts", [3, 5], {}), ("chunked_prefill", [7, 11], {"prefill_chunk_size": 3})])
    def test_window_equals_native_mistral_sliding_window(self, _, lengths, extra):
        window_length = 5
        native = build_tiny_model("mistral", sliding_window=window_length)
        model = build_tiny_model("mistral")
        model.load_state_dict(native.state_dict())
        unbounded_tokens, _ = run(model, lengths)
        model.set_cache_implementation("window", window_length=window_length)
        tokens, logits = run(model, lengths, **extra)
        native_tokens, native_logits = run(native, lengths)
        self.assertTrue(torch.equal(tokens, native_tokens))
        torch.testing.assert_close(logits, native_logits, rtol=0, atol=1e-5)
        self.assertFalse(torch.equal(tokens, unbounded_tokens))  # the window changes the result


class TransformersNamesTest(unittest.TestCase):
    @parameterized.expand([("gpt2", False), ("llama", False), ("llama", True)])
    def test_static_equals_dynamic_default(self, family, via_generation_config):
        model = build_tiny_model(family)
        expected_tokens, expected_logits = run(model)
        model.set_cache_implementation("static")
        kwargs = {}
        if via_generation_config:  # the setting joins a passed config (no mix of config and kwargs)
            kwargs["generation_config"] = GenerationConfig(max_new_tokens=NEW, pad_token_id=0)
        with seen_caches(model) as caches:
            tokens, logits = run(model, **kwargs)
        self.assertIsInstance(caches[0], StaticCache)
        self.assertTrue(torch.equal(tokens, expected_tokens))
        torch.testing.assert_close(logits, expected_logits, rtol=0, atol=1e-5)

    def test_offloaded_on_cpu_is_a_clear_error_before_any_token(self):
        # transformers' offloading synchronises CUDA streams: on a CPU model it would fail mid-forward.
        model = build_tiny_model("llama")
        model.set_cache_implementation("offloaded")
        with seen_caches(model) as caches, self.assertRaisesRegex(ValueError, "'offloaded'.*CUDA"):
            run(model)
        self.assertEqual(caches, [])

    @unittest.skipUnless(torch.cuda.is_available(), "offloading needs a CUDA device")
    def test_offloaded_on_cuda_equals_dynamic_default(self):
        model = build_tiny_model("llama").cuda()
        ids, mask = (t.cuda() for t in left_padded_batch(LENGTHS, seed=1))
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
        model.set_cache_implementation("offloaded")
        with seen_caches(model) as caches:
            tokens = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False)
        self.assertTrue(caches[0].offloading)
        self.assertTrue(torch.equal(tokens, expected))

    @unittest.skipUnless(
        compat.at_least(compat.FP8_QUANTIZED_CACHE), "fp8 QuantizedCache needs transformers >= 5.21.0"
    )
    def test_quantized_fp8_backend_builds_transformers_quantized_cache(self):
        model = build_tiny_model("llama")
        model.set_cache_implementation("quantized", backend="fp8")
        with seen_caches(model) as caches:
            tokens, _ = run(model)
        self.assertIsInstance(caches[0], QuantizedCache)
        self.assertEqual(tokens.shape, (len(LENGTHS), max(LENGTHS) + NEW))

    @unittest.skipIf(compat.at_least(compat.FP8_QUANTIZED_CACHE), "transformers >= 5.21.0 has the fp8 backend")
    def test_quantized_fp8_backend_refused_naming_the_release(self):
        model = build_tiny_model("llama")
        with self.assertRaisesRegex(ValueError, r"backend='fp8'.*transformers >= 5\.21\.0.*is installed"):
            model.set_cache_implementation("quantized", backend="fp8")
        self.assertIsNone(getattr(model, "_cachelimit_setting", None))

    @parameterized.expand(
        [("quanto", "optimum-quanto", is_optimum_quanto_available), ("hqq", "hqq", is_hqq_available)]
    )
    def test_quantized_backend_package(self, backend, package, available):
        model = build_tiny_model("llama")
        if available():
            model.set_cache_implementation("quantized", backend=backend)
            with seen_caches(model) as caches:
                run(model)
            self.assertIsInstance(caches[0], QuantizedCache)
        else:  # a missing optional dependency fails when the implementation is set, naming the package
            with self.assertRaisesRegex(ImportError, f"`{package}`.*pip install {package}"):
                model.set_cache_implementation("quantized", backend=backend)
            self.assertIsNone(getattr(model, "_cachelimit_setting", None))


class ValidationTest(unittest.TestCase):
    def test_unknown_name_lists_names_and_suggests_closest(self):
        model = build_tiny_model("llama")
        model.set_cache_implementation("window", window_length=4)
        before = model._cachelimit_setting
        with self.assertRaisesRegex(ValueError, r"'statc'.*'dynamic'.*'window'.*Did you mean 'static'\?"):
            model.set_cache_implementation("statc")
        with self.assertRaises(ValueError) as raised:
            model.set_cache_implementation("zzzz")
        self.assertNotIn("Did you mean", str(raised.exception))
        self.assertIs(model._cachelimit_setting, before)  # a failed call changes nothing

    @parameterized.expand(
        [
            ("window_missing", "window", {}, TypeError, r"'window'.*window_length"),
            ("sink_missing", "sink", {"window_length": 8}, TypeError, r"'sink'.*num_sink_tokens"),
            ("static_unexpected", "static", {"window_length": 8}, TypeError, r"'static'.*window_length"),
            ("dynamic_unexpected", "dynamic", {"cache_limit": 8}, TypeError, r"'dynamic'.*cache_limit"),
            ("window_too_small", "window", {"window_length": 1}, ValueError, r"window_length.*>= 2.*1"),
            ("window_not_int", "window", {"window_length": 4.0}, TypeError, r"window_length.*int"),
            ("sinks_fill_window", "sink", {"window_length": 6, "num_sink_tokens": 5}, ValueError, r"\[0, 4\]"),
            ("negative_sinks", "sink", {"window_length": 6, "num_sink_tokens": -1}, ValueError, "num_sink_tokens"),
            ("static_len", "static", {"max_cache_len": 0}, ValueError, "max_cache_len"),
            ("backend", "quantized", {"backend": "int3"}, ValueError, "backend.*'int3'"),
            ("fp8_options", "quantized", {"backend": "fp8", "nbits": 4}, ValueError, "nbits"),
        ]
    )
    def test_bad_arguments_fail_at_set_time(self, _, name, kwargs, error, pattern):
        model = build_tiny_model("llama")
        with self.assertRaisesRegex(error, pattern):
            model.set_cache_implementation(name, **kwargs)
        self.assertIsNone(getattr(model, "_cachelimit_setting", None))

    def test_sinks_must_fit_a_native_sliding_window(self):
        model = build_tiny_model("mistral", sliding_window=4)  # keeps at most 3 past positions
        with self.assertRaisesRegex(ValueError, r"num_sink_tokens.*\[0, 2\].*sliding_window=4"):
            model.set_cache_implementation("sink", window_length=16, num_sink_tokens=3)
        model.set_cache_implementation("sink", window_length=16, num_sink_tokens=2)

    def test_unpatched_model_is_refused(self):
        with self.assertRaisesRegex(ValueError, "not patched"):
            registry.set_cache_implementation(torch.nn.Linear(2, 2), "window", window_length=4)


class SettingLifecycleTest(unittest.TestCase):
    def test_replacement_and_dynamic_restores_default(self):
        model = build_tiny_model("llama")
        default_tokens, default_logits = run(model)
        window_tokens, _ = run(model, cache_limit=3)
        sink_tokens, _ = run(model, cache_limit=5, num_sink_tokens=2)
        model.set_cache_implementation("window", window_length=4)
        self.assertTrue(torch.equal(run(model)[0], window_tokens))
        model.set_cache_implementation("sink", window_length=6, num_sink_tokens=2)
        self.assertTrue(torch.equal(run(model)[0], sink_tokens))
        model.set_cache_implementation("dynamic")
        self.assertIsNone(model._cachelimit_setting)
        with seen_caches(model) as caches:
            tokens, logits = run(model)
        self.assertIs(type(caches[0]), DynamicCache)
        self.assertTrue(torch.equal(tokens, default_tokens))
        self.assertTrue(torch.equal(logits, default_logits))

    def test_setting_belongs_to_one_instance(self):
        first, second = build_tiny_model("llama"), build_tiny_model("llama")
        expected, _ = run(second)
        first.set_cache_implementation("sink", window_length=5, num_sink_tokens=1)
        with seen_caches(second) as caches:
            tokens, _ = run(second)
        self.assertTrue(torch.equal(tokens, expected))
        self.assertIs(type(caches[0]), DynamicCache)
        self.assertNotIn("_cachelimit_setting", vars(second))
        self.assertFalse(torch.equal(run(first)[0], expected))

    def test_explicit_past_key_values_wins_with_a_warning(self):
        model = build_tiny_model("llama")
        expected, _ = run(model)
        model.set_cache_implementation("sink", window_length=5, num_sink_tokens=1)
        given = DynamicCache(config=model.config)
        with seen_caches(model) as caches, pytest.warns(UserWarning, match="past_key_values.*ignored"):
            tokens, _ = run(model, **given_cache(given))
        self.assertIs(caches[0], given)
        self.assertTrue(torch.equal(tokens, expected))

    @parameterized.expand(
        [
            ("conflicting_limit", {"cache_limit": 3}, True),
            ("conflicting_sinks", {"cache_limit": 5, "num_sink_tokens": 1}, True),
            ("same_window", {"cache_limit": 5}, False),
        ]
    )
    def test_explicit_cache_limit_wins(self, _, explicit, warns):
        reference = build_tiny_model("llama")
        expected, _ = run(reference, **explicit)
        model = build_tiny_model("llama")
        model.set_cache_implementation("window", window_length=6)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            tokens, _ = run(model, **explicit)
        self.assertTrue(torch.equal(tokens, expected))
        self.assertEqual(len(setting_warnings(records)), int(warns))

    def test_explicit_cache_implementation_wins_with_a_warning(self):
        model = build_tiny_model("llama")
        model.set_cache_implementation("window", window_length=6)
        with seen_caches(model) as caches, pytest.warns(UserWarning, match="cache_implementation='static'.*ignored"):
            run(model, cache_implementation="static")
        self.assertIsInstance(caches[0], StaticCache)


class PipelineTest(unittest.TestCase):
    def test_text_generation_pipeline_uses_the_setting(self):
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast, pipeline

        vocab = {"[PAD]": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
        backend = Tokenizer(models.WordLevel(vocab, unk_token="[PAD]"))
        backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]")
        model = build_tiny_model("llama")
        prompt = "w5 w9 w3 w17 w22 w40"
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        default = model.generate(ids, max_new_tokens=NEW, do_sample=False)
        explicit = model.generate(ids, max_new_tokens=NEW, do_sample=False, cache_limit=4, num_sink_tokens=2)
        model.set_cache_implementation("sink", window_length=5, num_sink_tokens=2)
        expected = model.generate(ids, max_new_tokens=NEW, do_sample=False)
        generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
        [with_ids] = generator(prompt, max_new_tokens=NEW, do_sample=False, return_tensors=True)
        [with_text] = generator(prompt, max_new_tokens=NEW, do_sample=False, return_full_text=False)
        self.assertTrue(torch.equal(expected, explicit))
        self.assertFalse(torch.equal(expected, default))
        self.assertEqual(list(with_ids["generated_token_ids"]), expected[0].tolist())
        # older pipelines cut the decoded prompt's characters off the decoded whole, so the space between stays
        self.assertEqual(with_text["generated_text"].lstrip(" "), tokenizer.decode(expected[0, ids.shape[1] :]))
