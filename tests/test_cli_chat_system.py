"""`cachelimit chat --system TEXT --pin-system`: the whole system prompt stays in the cache, for the window and for
a scored policy, however many turns the chat goes; refused, before any turn, where the limit leaves no room.

The conversation is driven in process through the same pieces `cachelimit chat` runs (its parser and checks,
`cli.chat.start_conversation`, `Conversation.answer` for every turn), so the returned cache can be read. The
turn format and the system line are written here from docs/cli.md, not imported; the references share no code
with cachelimit's cache:
- the window: `tests/sink_reference.StreamingReference` (StreamingLLM on the unmodified model) with the system
  prompt's tokens as its sinks must give every answer token as its greedy pick; with the default 4 sinks it must
  not (so the comparison can fail);
- keydiff: `tests/scored_reference.slow_reference` (the paper's score recomputed from the full history at every
  forward) replays the conversation's forwards and must keep the same columns per layer and head; and the cache's
  kept columns hold every system token in every head, where the default 4 sinks lose some.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from cachelimit.cli.chat import start_conversation
from cachelimit.cli.parser import build_parser, check_arguments
from cachelimit.cli.tiny_model import build_tiny_model, printable_token_ids

from .cli_helpers import REPO
from .scored_recording import recorded_kept
from .scored_reference import keydiff_score, slow_reference
from .sink_reference import StreamingReference

SYSTEM = "Answer briefly, as a pirate would."
#: the plain turn format of a model without a chat template, with its system line (docs/cli.md, "Chat")
SYSTEM_LINE, FIRST_TURN, NEXT_TURN = (
    "System: {system}\n",
    "User: {message}\nAssistant: ",
    "\nUser: {message}\nAssistant: ",
)
PINNED = len(SYSTEM_LINE.format(system=SYSTEM).encode())  # the built-in tokenizer's ids are bytes
LIMIT, ANSWER, TURNS = 64, 6, 12


def run_chat(*flags: str) -> subprocess.CompletedProcess:
    """`cachelimit chat FLAGS` on the built-in model, one message piped in."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "cachelimit", "chat", "--max-new-tokens", "3", *flags]
    return subprocess.run(command, input="hello\n", capture_output=True, text=True, timeout=300, env=env, cwd=REPO)


def parsed(*flags: str):
    parser = build_parser()
    args = parser.parse_args(["chat", "--cache-limit", str(LIMIT), "--max-new-tokens", str(ANSWER), *flags])
    check_arguments(args.parser, args)
    return args


def chat(dtype: torch.dtype, *flags: str):
    """A conversation of TURNS turns under `flags`, with the forwards it ran: [(start, end)] columns."""
    model, tokenizer = build_tiny_model(dtype)
    conversation, label = start_conversation(parsed(*flags), model, tokenizer, "llama")
    conversation.options["min_new_tokens"] = ANSWER  # every answer reads ANSWER - 1 tokens: known forwards
    spans = []
    with torch.inference_mode():
        for turn in range(TURNS):
            start = max(conversation.length - 1, 0)  # the last answer token is read with the next turn
            end = conversation.inputs_for(f"message {turn}").shape[1]
            conversation.answer(f"message {turn}")
            spans += [(start, end)] + [(column, column + 1) for column in range(end, conversation.length - 1)]
    return model, conversation, label, spans


def system_columns_kept(cache) -> bool:
    kept = recorded_kept(cache)
    assert kept, "no scored layer"
    return all(set(range(PINNED)) <= head for layer in kept.values() for row in layer for head in row)


def test_the_system_prompt_opens_the_history_and_is_the_sinks():
    _, conversation, label, _ = chat(torch.float32, "--system", SYSTEM, "--pin-system")
    expected = (SYSTEM_LINE.format(system=SYSTEM) + FIRST_TURN.format(message="message 0")).encode()
    assert conversation.history[0, : len(expected)].tolist() == list(expected)
    assert conversation.options["num_sink_tokens"] == PINNED
    assert label == f"limit {LIMIT}, {PINNED} sinks (the system prompt)"
    assert conversation.length > 5 * LIMIT, "the chat must turn the window over many times"


def test_window_pinned_system_prompt_is_streaming_llm_with_those_sinks():
    model, conversation, _, spans = chat(torch.float32, "--system", SYSTEM, "--pin-system")
    tokens = conversation.history[0].tolist()
    allowed = torch.ones(model.config.vocab_size, dtype=torch.bool)
    allowed[printable_token_ids()] = False

    def agrees(sinks: int) -> bool:
        reference, ok = StreamingReference(build_tiny_model()[0], LIMIT, sinks), True
        for start, end in spans:
            logits = reference.feed(torch.tensor([tokens[start:end]]))[-1].masked_fill(allowed, float("-inf"))
            ok &= bool(logits[tokens[end]] >= logits.max() - 1e-4)  # the token generated after this forward
        return ok

    assert agrees(PINNED)
    assert not agrees(4), "the default 4 sinks must answer differently, or the comparison cannot fail"


@pytest.mark.parametrize("policy", ["keydiff", "tova"])
def test_scored_policy_keeps_every_system_token(policy):
    _, pinned, _, _ = chat(torch.float32, "--system", SYSTEM, "--pin-system", "--policy", policy)
    assert system_columns_kept(pinned.cache)
    _, default, _, _ = chat(torch.float32, "--system", SYSTEM, "--policy", policy)
    assert default.options["num_sink_tokens"] == 4
    assert not system_columns_kept(default.cache), "without pinning the system prompt must lose columns"


def test_keydiff_pinned_system_prompt_matches_the_slow_reference():
    model, conversation, _, spans = chat(torch.float64, "--system", SYSTEM, "--pin-system", "--policy", "keydiff")
    sequence = conversation.history[:, : spans[-1][1]]
    protected = min(32, (LIMIT - PINNED) // 2)  # the documented default protected window
    reference, gap = slow_reference(
        model, sequence, torch.ones_like(sequence), spans[0][1], limit=LIMIT, sinks=PINNED, protected=protected,
        score=keydiff_score, spans=spans,
    )  # fmt: skip
    assert gap > 1e-9, f"the reference met a tie ({gap:.2e})"
    assert reference[-1] == recorded_kept(conversation.cache)


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (["--cache-limit", "30"], ["argument --pin-system", f"takes {PINNED} tokens", "--cache-limit 30"]),
        (["--policy", "keydiff", "--protected", "40"], ["argument --pin-system", "--protected 40"]),
        (["--sinks", "4"], ["argument --pin-system", "give --pin-system or --sinks"]),
    ],
)
def test_refused_before_any_turn(flags, fragments):
    result = run_chat("--system", SYSTEM, "--pin-system", "--cache-limit", str(LIMIT), *flags)
    assert result.returncode == 2
    err = result.stderr
    assert err.count("error:") == 1 and "Traceback" not in err and "turn 1" not in err, err
    assert all(fragment in err for fragment in fragments), err


def test_pin_system_needs_a_system_prompt():
    result = run_chat("--pin-system")
    assert result.returncode == 2 and "needs --system TEXT" in result.stderr


#: a ChatML template written here (the format SmolLM2's template writes), for the built-in byte-level tokenizer
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_template_system_prompt_is_the_templates_own_prefix():
    from cachelimit.cli.conversation import TemplateTurns

    tokenizer = build_tiny_model()[1]
    tokenizer.chat_template = CHATML
    turns = TemplateTurns(tokenizer, set(), SYSTEM)
    system = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    assert turns.system_tokens() == list(system.encode())
    whole = system + "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert turns.first("hi") == list(whole.encode())
    assert turns.after("next", 65) == list(b"<|im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>assistant\n")


def test_template_that_drops_the_system_prompt_is_refused():
    from cachelimit.cli.conversation import TemplateTurns
    from cachelimit.cli.errors import CliError

    tokenizer = build_tiny_model()[1]
    tokenizer.chat_template = CHATML.replace(
        "{% for m in messages %}", "{% for m in messages if m.role != 'system' %}"
    )
    with pytest.raises(CliError, match="does not write the system prompt ahead of the first message"):
        TemplateTurns(tokenizer, set(), SYSTEM)
