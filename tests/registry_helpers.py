"""Shared helpers of the registry tests: a bounded run, the caches a run used, temporary registrations."""

from __future__ import annotations

from contextlib import contextmanager

import torch

import cachelimit
from cachelimit.hf.compat import passed_cache

from .common import left_padded_batch

NEW = 14
LENGTHS = [5, 9]


def run(model, lengths=LENGTHS, **kwargs):
    """Greedy sequences and per-step logits of one left-padded batch."""
    ids, mask = left_padded_batch(lengths, seed=1)
    kwargs.setdefault("max_new_tokens", NEW)
    out = model.generate(
        ids, attention_mask=mask, do_sample=False, output_logits=True, return_dict_in_generate=True, **kwargs
    )
    return out.sequences, torch.stack(out.logits, 1)


@contextmanager
def seen_caches(model):
    """The `past_key_values` of every forward run inside the block."""
    caches = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: caches.append(passed_cache(kwargs)), with_kwargs=True
    )
    try:
        yield caches
    finally:
        handle.remove()


@contextmanager
def registered(name, factory):
    cachelimit.register_cache_implementation(name, factory)
    try:
        yield
    finally:
        cachelimit.CACHE_IMPLEMENTATIONS.pop(name)


def setting_warnings(records) -> list[str]:
    return [str(r.message) for r in records if "set_cache_implementation" in str(r.message)]
