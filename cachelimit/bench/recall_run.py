"""One trial of the recall benchmark under one cache variant: what the model answers, and whether it is right.

The variants (`VARIANTS`): the unbounded cache; the sliding window; the window with 4 sinks; each scored policy
(keydiff, tova, snapkv) with 4 sinks; and the oracle keep-set (`bench.recall_oracle`: sinks + the fact's tokens + the
most recent positions). Every variant but the oracle runs through `model.generate` (the chat case through
`cli.conversation.Conversation`, which continues the returned cache turn after turn as `cachelimit chat` does), so a
number is what a user's run gives. Answers are greedy.
"""

from __future__ import annotations

import os
import time

import torch

from ..cli.conversation import Conversation, PlainTurns, turn_format
from .recall_oracle import OracleCache, eos_ids, oracle_generate
from .recall_prompts import CHAT_FACT, CHAT_QUESTION, Prompt, fact_span, score_answer, trial_key
from .scoring import chunked_scores

SINKS = 4
#: variant name -> (cache_policy, sinks); None policy: the window; "oracle": the oracle keep-set; "unbounded": no limit
VARIANTS = {
    "unbounded": ("unbounded", None),
    "window": ("window", None),
    "window+sinks": ("window", SINKS),
    "keydiff": ("keydiff", SINKS),
    "tova": ("tova", SINKS),
    "snapkv": ("snapkv", SINKS),
    "oracle": ("oracle", SINKS),
}


def policy_options(variant: str, budget: int | None, protected: int | None = None) -> dict:
    """The `generate` keyword arguments of `variant` at `budget` (not for the oracle)."""
    policy, sinks = VARIANTS[variant]
    if policy == "unbounded":
        return {}
    options = {"cache_limit": budget, "num_sink_tokens": sinks}
    if policy != "window":
        from ..core.eviction import POLICIES

        options["cache_policy"] = policy if protected is None else POLICIES[policy](protected=protected)
    return options


def _answer_ids(model, ids: list[int], options: dict, chunk: int | None, max_new: int) -> list[int]:
    tensor = torch.tensor([ids], device=model.device)
    extra = {} if chunk is None else {"prefill_chunk_size": chunk}
    with torch.inference_mode():
        out = model.generate(
            tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=max_new, do_sample=False, **extra, **options
        )
    return out[0, len(ids) :].tolist()


def answer_prompt(model, prompt: Prompt, variant: str, budget, chunk, max_new: int, protected=None) -> list[int]:
    """The greedy answer (token ids) to a single-prompt trial under `variant` at `budget`."""
    if variant == "oracle":
        oracle = OracleCache(model, budget, SINKS, set(range(*prompt.needle)))
        return oracle_generate(oracle, prompt.ids, max_new, chunk)
    return _answer_ids(model, prompt.ids, policy_options(variant, budget, protected), chunk, max_new)


def _first_turn_text(turns, message: str) -> str:
    if isinstance(turns, PlainTurns):
        return turns.FIRST.format(message=message)
    return turns._render([{"role": "user", "content": message}])


def chat_trial(model, tokenizer, messages: list[str], key: str, variant: str, budget, turn_tokens: int, max_new: int,
               protected=None, chunk: int | None = None) -> tuple[list[int], int]:  # fmt: skip
    """Turn 1 tells the fact, `messages` are the other turns (each answered with at most `turn_tokens` tokens), the
    last turn asks for it: (the answer's ids, the conversation's length in tokens before the answer). `chunk`: each
    turn read `chunk` tokens per forward. The oracle pins the fact sentence's tokens inside turn 1."""
    fact = CHAT_FACT.format(key=key)
    turns = [fact, *messages, CHAT_QUESTION]
    if variant != "oracle":
        options = {"max_new_tokens": turn_tokens, "do_sample": False, **policy_options(variant, budget, protected)}
        if chunk is not None:
            options["prefill_chunk_size"] = chunk
        conversation = Conversation(model, tokenizer, options, "llama")
        with torch.inference_mode():
            for message in turns[:-1]:
                conversation.answer(message)
            conversation.options["max_new_tokens"] = max_new
            count = conversation.answer(turns[-1])
        return conversation.history[0, conversation.length - count :].tolist(), conversation.length - count
    formats = turn_format(tokenizer, eos_ids(model))
    first = formats.first(fact)
    pinned = set(range(*fact_span(tokenizer, _first_turn_text(formats, fact), first, fact)))
    oracle = OracleCache(model, budget, SINKS, pinned)
    answer: list[int] = []
    for index, message in enumerate(turns):
        # a later turn also reads the previous answer's last token (generated, not yet read), as `generate` does
        pending = first if not index else [answer[-1], *formats.after(message, answer[-1])]
        last = index == len(turns) - 1
        before = oracle.next_column + len(pending)
        answer = oracle_generate(oracle, pending, max_new if last else turn_tokens, chunk)
    return answer, before


def perplexity_run(model, text_ids: torch.Tensor, variant: str, budget, chunk: int, protected=None) -> dict:
    """Teacher-forced NLL of the text (read `chunk` tokens per forward through generate) under `variant`."""
    options = policy_options(variant, budget, protected)
    scored = chunked_scores(model, text_ids, chunk, **options)
    nll = scored.nll
    mean = sum(nll) / len(nll)
    return {"positions": len(nll), "mean_nll": round(mean, 5), "perplexity": round(float(torch.tensor(mean).exp()), 4),
            "kv_bytes": scored.kv_bytes}  # fmt: skip


def timed(run, *args, **kwargs) -> tuple[object, dict]:
    """`run(...)` and its wall and CPU seconds, with the load average when it ended (timings on a busy CPU
    stretch)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = run(*args, **kwargs)
    figures = {"seconds": round(time.perf_counter() - started, 2), "cpu_seconds": round(time.process_time() - cpu, 2)}
    figures["load_average"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    return result, figures


__all__ = ["VARIANTS", "answer_prompt", "chat_trial", "perplexity_run", "policy_options", "score_answer", "timed",
           "trial_key"]  # fmt: skip
