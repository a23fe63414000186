"""Every test of transformers' suites that the external test bed does not count as a pass, each with its reason.

One module for the lists, read by the plugin (which marks the tests) and by the runner (which skips files,
checks the required tests and prints the lists), so that nothing is left out silently and a reason is never far
from its entry:

- `SKIPS`: skipped in the bounded modes (`limit`, `limit-cut`) only; a default `cache_limit` cannot give
  transformers' own result for a reason of cachelimit's design (documented, and checked by cachelimit's own tests
  instead). Keyed by test name, any model file.
- `CUT`: skipped in `limit-cut` only: tests whose outcome a bound that cuts changes by design (a bounded run
  compared with one that keeps everything). Skipped, not expected to fail: the suite compares two runs' scores only
  up to their first differing token, so where a tiny random model's greedy tokens happen to coincide the two
  runs still "agree" (measured: Llama's `test_generate_with_static_cache` passes with `cache_limit=4`, Mistral's
  fails), and a strict expected failure would be a coin toss. Keyed by test name, any model file.
- `CROSS_PATH`: not an exception but the opposite: the tests that compare two generation paths of one model with
  each other, which must still agree when the bound cuts. In `limit-cut` each one a file collects must pass (or be
  skipped by the suite itself, as it is unpatched); none may be named in `SKIPS` or `CUT`. Exact names.
- `BASELINE`: fails `unpatched`, because the suite is a 2026-08 transformers main snapshot (5.16.0.dev0) whose
  model files do not all match the installed release (the mixins are 5.23.0's), or because the file itself is
  broken: the snapshot's failures, not cachelimit's. Keyed by family, then test name. Marked
  `xfail(strict=True)` in every mode, so an entry that starts passing fails the run (remove it then) and a
  listed test still runs, so `patched` and `limit` see it.
- `VACUOUS`: "passes" on the installed release without running its body (the snapshot's decorators do not fit
  5.23.0's, so the test method returns the function it should have run). The plugin makes every test that returns
  a value fail (unittest only warns), so none passes silently; these are `xfail(strict=True)` on that error,
  every mode, any file, matched by exact name (a `parameterized.expand` base name is not its variants).
- `FILES`: a served family's file that is not run at all (it does not collect on the installed release); keyed
  by family.

A failure of cachelimit's own goes in none of them: it fails the run until it is fixed.
Test names match exactly or as `parameterized.expand` variants (`name_0_...`, `name_1_...`).
"""

from __future__ import annotations

_RING_STORAGE = (
    "checks each cache layer's raw key/value tensors against [batch, heads, positions, head_dim]; a BoundedCache "
    "layer's tensors are its ring, grown geometrically (up to twice the positions it holds, in slot order), so "
    "they are larger; the positions it holds are `get_seq_length()` / `kept_lengths()`, checked exactly by "
    "cachelimit's tests/test_growth.py"
)

#: test name (the method, any model file) -> why it cannot pass with a default cache_limit (`limit` mode only)
SKIPS: dict[str, str] = {
    "test_generate_compile_model_forward_fullgraph": (
        "compiles the forward with fullgraph=True around a DynamicCache by default; a BoundedCache plans every step "
        "in Python (data-dependent slots and masks) and is not meant to be compiled"
    ),
    "test_greedy_generate_dict_outputs_use_cache": _RING_STORAGE,
    "test_beam_search_generate_dict_outputs_use_cache": _RING_STORAGE,
    "test_assisted_decoding_matches_greedy_search": _RING_STORAGE + " (of its greedy run)",
}

#: test name (the method, any model file) -> why a bound that cuts changes its outcome (`limit-cut` only: skipped)
CUT: dict[str, str] = {
    "test_generate_with_static_cache": (
        'compares `generate` with `cache_implementation="static"` (a call that chooses its cache, left unbounded: '
        "cachelimit refuses a limit on transformers' static cache) with the same call on the default cache, which the "
        "default limit bounds: over 7 + 20 positions the two attend over different windows. The suite compares scores "
        "only up to the first differing token, so it passes where the tiny model's greedy tokens coincide anyway "
        "(Llama) and fails where they do not (Mistral)"
    ),
    "test_generate_with_and_without_cache": (
        "Nemotron-H's own test: compares `generate(use_cache=True)`, which the default limit bounds (5 + 5 positions), "
        "with `use_cache=False` (a call that chooses its cache: none, every step a full forward over the whole "
        "sequence, unbounded); with the bound cutting the two attend over different spans, so their tokens differ "
        "(measured: it fails with cache_limit=4; it passes in `limit`, where nothing is cut)"
    ),
}

#: test name (exact, any model file) -> the two generation paths it compares (`limit-cut`: required to pass)
CROSS_PATH: dict[str, str] = {
    "test_generate_continue_from_past_key_values": (
        "one `generate` of 4 new tokens vs 3, then 1 more continuing the returned cache (scores and caches equal)"
    ),
    "test_generate_continue_from_inputs_embeds": (
        "one `generate` from embeddings vs 3 tokens, then 1 more from the longer embeddings and the returned cache"
    ),
    "test_generate_from_inputs_embeds_0_greedy": "greedy from `input_ids` vs from `inputs_embeds` (with, without ids)",
    "test_generate_from_inputs_embeds_1_beam_search": "beam search from `input_ids` vs from `inputs_embeds`",
    "test_generate_with_and_without_position_ids": "left-padded `generate` with positions inferred vs passed",
    "test_generate_methods_with_logits_to_keep": "`logits_to_keep=0` (every position's logits) vs the default (1)",
}

#: family -> test name -> why it fails unpatched on the installed release (every mode: strict xfail)
GEMMA4_LAYERS = (
    "fails unpatched on 5.23.0 (`AssertionError: 2 != 4`: the snapshot's Gemma 4 tester and 5.23.0's Gemma 4 disagree "
    "on the number of cache layers)"
)
HUB = "fails unpatched: it loads a checkpoint from the Hugging Face hub, which this machine cannot reach (OSError)"
NEMOTRON_H_DUMMY = (
    "fails unpatched on 5.23.0 (`'DummyLayer' object has no attribute 'conv_states'`: the snapshot's tester reads "
    "a recurrent state from every cache layer)"
)
BASELINE: dict[str, dict[str, str]] = {
    "gemma4": {
        "test_assisted_decoding_matches_greedy_search": GEMMA4_LAYERS,
        "test_assisted_decoding_sample": GEMMA4_LAYERS,
        "test_beam_search_generate_dict_outputs_use_cache": GEMMA4_LAYERS,
        "test_generate_compilation_all_outputs": GEMMA4_LAYERS,
        "test_generate_from_inputs_embeds_with_static_cache": GEMMA4_LAYERS,
        "test_generate_with_static_cache": GEMMA4_LAYERS,
        "test_greedy_generate_dict_outputs_use_cache": GEMMA4_LAYERS,
        "test_past_key_values_format": GEMMA4_LAYERS,
        "Gemma4Audio2TextModelTest::test_get_image_features_pooler_output": (
            "fails unpatched on 5.23.0: the snapshot calls `get_image_features()` without the `pixel_values` 5.23.0 "
            "requires (an audio model's image features)"
        ),
        "test_vision_axial_rope": "fails unpatched on 5.23.0 (`AssertionError: 8 != 64`, a vision-encoder test)",
    },
    "gpt_bigcode": {"test_mqa_reduces_to_mha": HUB},
    "gpt_oss": {
        "test_moe_parallel_plans_shard_experts": (
            "fails unpatched on 5.23.0: the snapshot's expected tensor-parallel plan of the experts differs from "
            "5.23.0's (no generation involved)"
        ),
    },
    "nemotron_h": {
        "test_beam_search_generate_dict_outputs_use_cache": NEMOTRON_H_DUMMY,
        "test_generate_compilation_all_outputs": NEMOTRON_H_DUMMY,
        "test_generate_with_static_cache": NEMOTRON_H_DUMMY,
        "test_greedy_generate_dict_outputs_use_cache": NEMOTRON_H_DUMMY,
        "test_past_key_values_format": NEMOTRON_H_DUMMY,
    },
    "olmoe": {
        "test_fast_special_tokens": "fails unpatched: its tokenizer comes from the hub, which this machine cannot reach",
        "test_simple_encode_decode": "fails unpatched: its tokenizer comes from the hub, which this machine cannot reach",
    },
    "qwen3_5": {
        "Qwen3_5ModelTest::test_model_rope_scaling_frequencies": (
            "fails unpatched on 5.23.0 with ZeroDivisionError in the snapshot's rope-scaling test of the text model"
        ),
        "Qwen3_5ModelTest::test_model_rope_scaling_from_config_1_dynamic": (
            "fails unpatched on 5.23.0 with ZeroDivisionError in the snapshot's rope-scaling test (its dynamic variant)"
        ),
    },
}

#: test name (exact, any model file) -> why it checks nothing on the installed release (every mode: strict xfail)
VACUOUS: dict[str, str] = {
    "test_prompt_lookup_decoding_matches_greedy_search": (
        "the snapshot's tests/generation/test_utils.py decorates it with a bare `@is_flaky` (no parentheses); "
        "5.23.0's `is_flaky` is a decorator factory, so the test method returns the decorator and its body never "
        "runs (assisted decoding keeps its DynamicCache under cachelimit anyway: a documented refusal)"
    ),
    "test_generate_from_inputs_embeds": (
        "the bare name of a `parameterized.expand` test: 5.23.0's ModelTesterMixin.__init_subclass__ wraps every "
        "test_* attribute in hub_retry, which makes the expanded-away base collectable again; it returns a bound "
        "method and checks nothing. Its variants (_0_greedy, _1_beam_search) are the real tests and run"
    ),
}

#: family -> why its file is not run
FILES: dict[str, str] = {
    "olmo3": (
        "the snapshot's file imports `_init_distributed` from tests/test_modeling_common.py, which 5.23.0's mixins do "
        "not have: it does not collect (the suite's README)"
    ),
    "gemma3n_text": "the snapshot's gemma3n file needs the `datasets` package to collect (the suite's README)",
    "llama4_text": (
        "the snapshot's llama4 file has no generation-mixin suite: it collects 2 tests, which skip here (nothing of "
        "cachelimit's would be checked)"
    ),
}


def match(name: str, reasons: dict[str, str]) -> str | None:
    """The reason for test `name` in `reasons`: its own entry, or that of the test it is a `parameterized.expand`
    variant of (`name_<digit>...`; `test_x_with_sampling` is another test than `test_x`)."""
    for listed, reason in reasons.items():
        suffix = name[len(listed) :]
        if name.startswith(listed) and (not suffix or (suffix[0] == "_" and suffix[1:2].isdigit())):
            return reason
    return None
