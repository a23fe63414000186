"""A chunked prefill with RoPE sinks costs about what it costs without sinks, at every prompt length (issue 28).

A windowed multi-token forward gives each query that reads a sink its own copy of the S sinks (rotated to its own
StreamingLLM position: `core.window_plan`), so a chunk of n such queries reads n * S keys more each. Read in the
chunks asked for (1024), that tripled the attention of every chunk past the limit, and so the cost of a long prompt.
A chunked prefill with RoPE sinks is read in smaller chunks (`WindowPolicy.sink_chunk`), and a query whose window
still holds the sinks gets no copy. Counted here exactly: the (query, key) pairs every attention call of a prefill
computes (the keys each layer returns, times its new tokens), on a tiny Llama; and the sub-chunked run is checked
against the StreamingLLM reference.
"""

from __future__ import annotations

import unittest
from unittest import mock

import torch

from cachelimit import WindowPolicy
from cachelimit.core.layers import BoundedLayer
from cachelimit.hf import compat
from tests.common import VOCAB, build_tiny_model, left_padded_batch
from tests.sink_helpers import SinkHelpers

LIMIT, SINKS, CHUNK = 256, 4, 256
#: the cost a sink prefill may have over the same prefill without sinks (issue 28: about 1.2x at most)
BOUND = 1.2


def attention_pairs(model, chunks: int, sinks: int) -> int:
    """(query, key) pairs the attention of every layer computes over a prefill of `chunks` chunks of `CHUNK`."""
    ids = torch.randint(1, VOCAB, (1, chunks * CHUNK), generator=torch.Generator().manual_seed(chunks))
    pairs = []
    update = BoundedLayer.update

    def counted(layer, key_states, value_states, *args, **kwargs):
        keys, values = update(layer, key_states, value_states, *args, **kwargs)
        pairs.append(key_states.shape[-2] * keys.shape[-2])
        return keys, values

    with mock.patch.object(BoundedLayer, "update", counted), torch.inference_mode():
        model.generate(
            ids,
            max_new_tokens=1,
            do_sample=False,
            cache_limit=LIMIT,
            num_sink_tokens=sinks,
            prefill_chunk_size=CHUNK,
        )
    return sum(pairs)


class SinkPrefillWorkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = build_tiny_model("llama")
        lengths = (4, 8, 16)
        cls.plain = {chunks: attention_pairs(cls.model, chunks, 0) for chunks in lengths}
        cls.sinks = {chunks: attention_pairs(cls.model, chunks, SINKS) for chunks in lengths}

    def test_sink_prefill_within_bound_of_the_plain_one(self):
        for chunks, plain in self.plain.items():
            self.assertLessEqual(self.sinks[chunks], BOUND * plain, f"{chunks} chunks")

    def test_cost_per_chunk_does_not_grow_with_the_prompt(self):
        """Past the limit every chunk of the sink prefill computes the same pairs, at 4, 8 or 16 chunks, exactly
        what its sub-chunks of b = `sink_chunk` tokens read (b * S sink copies, the L - S kept before, b new), and
        within the bound of what a chunk without sinks reads (the L kept before, the chunk)."""
        layers = self.model.config.num_hidden_layers
        for low, high in ((4, 8), (8, 16)):
            plain = (self.plain[high] - self.plain[low]) / (high - low)
            self.assertEqual(plain, layers * CHUNK * (LIMIT + CHUNK))
            sinks = (self.sinks[high] - self.sinks[low]) / (high - low)
            self.assertLessEqual(sinks, BOUND * plain, (low, high))
            sub = WindowPolicy(LIMIT, SINKS, window_prefill=True).sink_chunk(CHUNK)
            self.assertLess(sub, CHUNK)
            self.assertEqual(sinks, layers * CHUNK * (sub * SINKS + LIMIT - SINKS + sub), (low, high))


class SinkSubChunkTest(SinkHelpers, unittest.TestCase):
    """The sub-chunked prefill is the StreamingLLM reference's, and it is a real sub-chunking: the forwards read
    `sink_chunk` tokens, except where the caller asks for the prefill's attention maps (those of the last chunk)."""

    family = "llama"

    def widths(self, model, sinks: int = 2, **kwargs) -> tuple[list[int], object, torch.Tensor]:
        ids, mask = left_padded_batch([150, 131], seed=3)
        widths = []
        body = compat.decoder_body(model)  # 4.x runs prefill chunks through `forward`, past the top module's hooks
        handle = body.register_forward_pre_hook(lambda module, args, kwargs: widths.append(_width(args, kwargs)),
                                                with_kwargs=True)  # fmt: skip
        try:
            out, logits = self.run_sinks(model, ids, mask, 12, sinks, 6, prefill_chunk_size=100, **kwargs)
        finally:
            handle.remove()
        return widths, (ids, mask, out), logits

    def assert_chunks(self, widths: list[int], chunk: int) -> None:
        """The prompt's 150 columns read `chunk` at a time, then 5 decode steps (4.x holds the prompt's last token
        back for the first of them)."""
        prefill = [width for width in widths if width > 1]
        self.assertEqual(len(prefill), -(-150 // chunk))
        self.assertEqual(prefill[:-1], [chunk] * (len(prefill) - 1))  # every chunk but the last is full
        self.assertLessEqual(prefill[-1], chunk)
        self.assertEqual(sum(widths), 150 + 5)

    def test_sub_chunked_prefill_matches_reference(self):
        model = self.sink_build()
        self.assertEqual(WindowPolicy(12, 2, window_prefill=True).sink_chunk(100), 64)
        widths, (ids, mask, out), logits = self.widths(model)
        self.assert_chunks(widths, 64)
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 12, 2, window_prefill=True)

    def test_chunks_asked_for_kept_with_attention_maps_or_without_sinks(self):
        model = self.sink_build("eager")  # (SDPA gives no attention maps)
        widths, *_ = self.widths(model, output_attentions=True)
        self.assert_chunks(widths, 100)
        widths, *_ = self.widths(model, output_hidden_states=True)
        self.assert_chunks(widths, 100)
        widths, *_ = self.widths(model, sinks=0)
        self.assert_chunks(widths, 100)
        self.assertEqual(WindowPolicy(12, 0, window_prefill=True).sink_chunk(100), 100)


def _width(args, kwargs) -> int:
    tokens = kwargs.get("input_ids")
    if tokens is None:
        tokens = kwargs.get("inputs_embeds", args[0] if args else None)
    return tokens.shape[1]


if __name__ == "__main__":
    unittest.main()
