"""Teacher-forced scoring through `model.generate`, the measuring instrument of the quality benchmark.

Every number comes from the code path a user runs. `decode_scores`: the prompt is the text's first token, and a
logits processor (`ForceText`) records the log-probability the model gave the text's next token, then forces that
token (one decode step per token: the bounded cache, its ring and sink rotation). `chunked_scores`: the text as
one prompt, read `chunk` tokens at a time through generate's `prefill_chunk_size`, which obeys the window and the
sinks exactly as decoding does (`tests/test_quality.py` checks the two equal, and both equal independent
references, on a tiny model), at a fraction of the cost. Both also report the KV bytes the cache held at the end,
read from the cache object (`cachelimit.core.cache.kv_bytes`), so a report's memory column is measured, not
computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria

from ..core.cache import kv_bytes
from ..hf.compat import decoder_body, output_cache, passed_cache

SAMPLE_PROMPT = "Chapter 1\n\nThe lighthouse keeper had not seen a ship in eleven years. One night in November,"


def default_text() -> str:
    """The standard library's English reference topics (the text of `help('assert')` etc.), in name order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name].strip() for name in sorted(topics))


def text_tokens(tokenizer, text: str, count: int | None = None) -> torch.Tensor:
    """The first `count` tokens of `text` ([1, count]; None: all of them), without special tokens."""
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    if count is not None and ids.shape[1] < count:
        raise ValueError(f"--tokens {count}: the text has only {ids.shape[1]:,} tokens")
    return ids[:, :count]


class ForceText(LogitsProcessor):
    """Records -log p(next text token) from the scores it is given, then forces that token.

    Put alone in the processor list of a greedy run: the scores it sees are then the model's raw logits (what
    `output_logits=True` returns; `tests/test_real_model.py` checks it), and the argmax is the text's token.
    """

    def __init__(self, tokens: torch.Tensor, progress=None):
        self.tokens, self.progress = tokens[0], progress
        self.nll: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        target = self.tokens[input_ids.shape[1]]
        self.nll.append(-torch.log_softmax(scores[0].float(), -1)[target])
        forced = torch.full_like(scores, float("-inf"))
        forced[:, target] = 0.0
        if self.progress is not None:
            self.progress.update(1)
        return forced


@dataclass
class Scored:
    """One teacher-forced run: the NLL of every scored token and the KV bytes its cache held when `generate`
    returned (`cachelimit.core.cache.kv_bytes`, read from the cache object itself)."""

    nll: list[float]
    kv_bytes: int


class _CacheWatch:
    """Keeps the cache `generate` hands the model (under either argument name), to read its bytes at the end."""

    def __init__(self, model):
        self.cache = None
        self.handle = model.register_forward_pre_hook(self._grab, with_kwargs=True)

    def _grab(self, module, args, kwargs):
        if self.cache is None:
            self.cache = passed_cache(kwargs)

    def held(self) -> int:
        return kv_bytes(self.cache)


def teacher_forced_nll(model, tokens: torch.Tensor, cache_limit=None, num_sink_tokens=None) -> list[float]:
    """NLL of tokens[1:] given everything before, through `generate` with the given cache settings."""
    return decode_scores(model, tokens, cache_limit, num_sink_tokens).nll


def decode_scores(
    model, tokens: torch.Tensor, cache_limit=None, num_sink_tokens=None, progress=None, cache_policy=None
) -> Scored:
    """`teacher_forced_nll` with the bytes held at the end; `progress.update(1)` after every decode step.
    `cache_policy`: a scored policy (`bench --quality --policy`), None for the window."""
    force = ForceText(tokens, progress)
    window = {} if cache_limit is None else {"cache_limit": cache_limit, "num_sink_tokens": num_sink_tokens}
    if cache_policy is not None:
        window["cache_policy"] = cache_policy
    watch = _CacheWatch(model)
    try:
        with torch.inference_mode():
            out = model.generate(
                tokens[:, :1],
                attention_mask=torch.ones_like(tokens[:, :1]),
                max_new_tokens=tokens.shape[1] - 1,
                do_sample=False,
                logits_processor=LogitsProcessorList([force]),
                **window,
            )
    finally:
        watch.handle.remove()
    if not torch.equal(out, tokens):
        raise RuntimeError("teacher forcing failed: generate did not reproduce the text")
    return Scored(torch.stack(force.nll).tolist(), watch.held())


def chunked_nll(model, tokens: torch.Tensor, chunk: int = 64, cache_limit=None, num_sink_tokens=None) -> list[float]:
    """The same NLL, with the text as the prompt of one `generate` call read `chunk` tokens at a time
    (`prefill_chunk_size`): with a cache limit every prompt token then obeys the window (and the sinks), which
    is exactly what decoding it token by token does (the sink and window tests prove the two equal, for chunks
    smaller and larger than the limit), at a fraction of the cost of one decode step per token."""
    return chunked_scores(model, tokens, chunk, cache_limit, num_sink_tokens).nll


def chunked_scores(
    model,
    tokens,
    chunk: int = 64,
    cache_limit=None,
    num_sink_tokens=None,
    progress=None,
    on_scored=None,
    cache_policy=None,
) -> Scored:
    """`chunked_nll` with the bytes held at the end; `progress.update(n)` after every forward of `n` tokens.

    The hidden states of each forward are taken from the model's body with a forward hook (generate only keeps the
    last position's logits) and scored at once with the model's own head, so a long run holds no hidden states
    and can report as it goes: `on_scored(nll_so_far, cache)` after every forward (the quality benchmark journals
    a partial run with it, so a run stopped after hours still leaves the positions it scored). `cache_policy`: a
    scored policy (`bench --recall`'s perplexity case), None for the window."""
    scored: list[torch.Tensor] = []
    predicted = tokens.shape[1] - 1  # position t predicts text token t + 1
    watch = _CacheWatch(model)

    def score(module, args, output):
        hidden = output[0][0]
        start = sum(part.shape[0] for part in scored)
        end = min(start + hidden.shape[0], predicted)  # transformers 4.x reads the last token in a decoding step
        if end > start:
            logits = model.lm_head(hidden[: end - start]).float()
            targets = tokens[0, start + 1 : end + 1, None]
            scored.append(-torch.log_softmax(logits, -1).gather(-1, targets)[:, 0])
            if on_scored is not None:  # the body returns its cache (4.x passes it to the first forwards unnamed)
                on_scored(scored, output_cache(output) or watch.cache)
        if progress is not None:
            progress.update(output[0].shape[1])

    handle = decoder_body(model).register_forward_hook(score)
    window = {} if cache_limit is None else {"cache_limit": cache_limit, "num_sink_tokens": num_sink_tokens}
    if cache_policy is not None:
        window["cache_policy"] = cache_policy
    try:
        with torch.inference_mode():
            model.generate(
                tokens,
                attention_mask=torch.ones_like(tokens),
                max_new_tokens=1,
                do_sample=False,
                prefill_chunk_size=chunk,
                **window,
            )
    finally:
        handle.remove()
        watch.handle.remove()
    return Scored(torch.cat(scored).tolist(), watch.held())


class _Tick(StoppingCriteria):
    """Never stops; moves a progress bar by one per generated token (`generate` copies its criteria: not this)."""

    def __init__(self, progress, batch: int):
        self.progress, self.never = progress, torch.zeros(batch, dtype=torch.bool)

    def __call__(self, input_ids, scores, **kwargs):
        self.progress.update(1)
        return self.never

    def __deepcopy__(self, memo):
        return self


def free_sample(model, tokenizer, new_tokens: int, seed: int, progress=None, **window) -> str:
    """Sampled text (temperature 0.8, top-p 0.95, same seed for every cache setting) after SAMPLE_PROMPT."""
    ids = tokenizer(SAMPLE_PROMPT, return_tensors="pt")
    ticks = [] if progress is None else [_Tick(progress, 1)]
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(
            **ids,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=0.8,
            top_p=0.95,
            stopping_criteria=ticks,
            **window,
        )
    return tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
