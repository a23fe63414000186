"""One spelling of a scored policy everywhere a limit can be given (issue 25): `generate` keywords, a
`GenerationConfig` field, `set_cache_implementation`, the command line (`generate`, `chat`) and the
`custom_generate` recipe all run the same policy, so each gives exactly the tokens of `generate(cache_policy=...)`;
bad names and combinations fail before any token, naming the argument."""

from __future__ import annotations

import unittest
from pathlib import Path

import torch
from parameterized import parameterized
from transformers import GenerationConfig

import cachelimit
from cachelimit.core.eviction import KeyDiff
from tests.cli_helpers import FailureMixin, run_in_process
from tests.common import build_tiny_model, left_padded_batch

LIMIT, NEW = 8, 14
CUSTOM = Path(__file__).resolve().parents[1]  # the folder that holds custom_generate/


def reference(model, ids, mask, policy):
    with cachelimit.patched(model.config.model_type):
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            cache_limit=LIMIT,
            num_sink_tokens=1,
            cache_policy=policy,
        )


class SpellingTest(unittest.TestCase):
    def setUp(self):
        self.model = build_tiny_model("llama")
        self.ids, self.mask = left_padded_batch([11, 7], seed=4)

    def run_with(self, **options):
        with cachelimit.patched("llama"):
            return self.model.generate(
                self.ids, attention_mask=self.mask, max_new_tokens=NEW, do_sample=False, **options
            )

    @parameterized.expand([("keydiff",), ("tova",), ("snapkv",)])
    def test_generation_config_field(self, policy):
        config = GenerationConfig(cache_limit=LIMIT, num_sink_tokens=1, cache_policy=policy)
        expected = reference(self.model, self.ids, self.mask, policy)
        self.assertTrue(torch.equal(self.run_with(generation_config=config), expected))

    @parameterized.expand([("keydiff",), ("tova",)])
    def test_set_cache_implementation(self, policy):
        expected = reference(self.model, self.ids, self.mask, policy)
        with cachelimit.patched("llama"):
            self.model.set_cache_implementation(
                "sink", window_length=LIMIT + 1, num_sink_tokens=1, cache_policy=policy
            )
            try:
                got = self.model.generate(self.ids, attention_mask=self.mask, max_new_tokens=NEW, do_sample=False)
            finally:
                self.model.set_cache_implementation("dynamic")
        self.assertTrue(torch.equal(got, expected))

    def test_policy_objects_and_names_agree(self):
        default = reference(self.model, self.ids, self.mask, "keydiff")
        self.assertTrue(torch.equal(reference(self.model, self.ids, self.mask, KeyDiff()), default))
        different = reference(self.model, self.ids, self.mask, KeyDiff(protected=0))
        self.assertEqual(different.shape, default.shape)

    def test_set_cache_implementation_refuses_a_bad_policy_at_once(self):
        with cachelimit.patched("llama"), self.assertRaisesRegex(ValueError, "`cache_policy` must be one of"):
            self.model.set_cache_implementation("window", window_length=9, cache_policy="lru")

    def test_custom_generate_passes_the_policy(self):
        expected = reference(self.model, self.ids, self.mask, "snapkv")
        got = self.model.generate(
            self.ids,
            attention_mask=self.mask,
            max_new_tokens=NEW,
            do_sample=False,
            custom_generate=str(CUSTOM),
            trust_remote_code=True,
            cache_limit=LIMIT,
            num_sink_tokens=1,
            cache_policy="snapkv",
        )
        self.assertTrue(torch.equal(got, expected))


class CommandLineTest(FailureMixin, unittest.TestCase):
    @parameterized.expand(
        [
            ("unknown", ["generate", "--cache-limit", "8", "--policy", "lru"], "argument --policy: invalid choice"),
            ("no_limit", ["generate", "--policy", "keydiff"], "argument --policy: needs --cache-limit"),
            ("window_protected", ["generate", "--cache-limit", "8", "--protected", "2"], "--protected: needs a scored"),
            ("too_protected", ["generate", "--cache-limit", "8", "--sinks", "2", "--policy", "tova", "--protected",
                               "7"], "--protected: must be an int in [0, 6]"),
        ]
    )  # fmt: skip
    def test_bad_flags_are_one_line(self, _, argv, fragment):
        result = run_in_process(argv)
        self.assert_one_line_failure(result, 2, fragment)

    def test_generate_runs_the_policy(self):
        result = run_in_process(
            [
                "generate",
                "--cache-limit",
                "16",
                "--sinks",
                "2",
                "--policy",
                "keydiff",
                "--protected",
                "4",
                "--max-new-tokens",
                "40",
                "--prompt",
                "hello",
            ]
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("keydiff", result.stderr)
