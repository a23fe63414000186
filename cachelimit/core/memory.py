"""How many bytes of keys and values a cache holds: one counter for the cache, the command line and the benchmarks."""

from __future__ import annotations

import torch


def kv_bytes(cache) -> int:
    """Bytes of key/value storage any transformers `Cache` holds right now: the storages behind every layer's
    keys, values and (cachelimit's RoPE sinks) un-rotated sink keys, each counted once and whole.

    The one counter behind `BoundedCache.kv_bytes`, the CLI's live figure and the benchmarks, so that they all
    measure the same thing: a sliced view counts the whole storage it keeps alive (as transformers'
    `DynamicSlidingWindowLayer` window does), which is what the process really holds.
    """
    storages: dict[int, int] = {}
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values", "sink_keys"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def fixed_address(*tensors: torch.Tensor) -> None:
    """Mark a layer's buffers as keeping their address from one compiled step to the next, as transformers' static
    caches mark theirs. A compiled step writes them in place; inductor runs such a step as a CUDA graph only when
    the mutated inputs are marked, and otherwise skips CUDA graphs for the whole step ("skipping cudagraphs due to
    mutated inputs", seen for the static ring on an H200, docs/gpu.md). A buffer that grows is a new tensor and is
    marked again; eager runs ignore the mark, and a compiled forward may not set it (it is done outside)."""
    if torch.compiler.is_compiling():
        return
    for tensor in tensors:
        torch._dynamo.mark_static_address(tensor)
