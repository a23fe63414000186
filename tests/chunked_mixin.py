"""Chunked attention (Llama 4's `chunked_attention` layers, `attention_chunk_size` C): a query reads only the keys of
its own chunk of C positions, chunks counted from each row's first real token (transformers' chunked masks discount
left padding). A chunked layer's visibility is its chunk intersected with the bound: it keeps min(L, S + C - 1)
positions (a query reads at most C - 1 keys of its chunk; the sinks, visible from the first chunk only, take none).
Llama 4's global NoPE layers scale their queries by a temperature of the position, which transformers reads from
the cache length: the columns seen (the true position of an unpadded row; transformers counts left pads too). A
bounded cache reports the columns it has seen there, as transformers' own cache does, not what it keeps.
"""

from __future__ import annotations

import torch
from parameterized import parameterized

from tests.common import left_padded_batch, returned_cache
from tests.family_mixin import ATOL, ATTENTION, NEW, OracleHelpers
from tests.reference import banded_logits, banded_visibility, extended_mask, generated_step_logits
from tests.sink_helpers import SinkHelpers
from tests.sink_reference import StreamingReference

CHUNKED, FULL = "chunked_attention", "full_attention"


class ChunkedOracleMixin(OracleHelpers, SinkHelpers):
    chunk = 4

    def build_chunked(self, attn=None, chunk: int | None = None):
        model = self.build(attn, attention_chunk_size=chunk or self.chunk)
        self.assertEqual(list(model.config.layer_types), [CHUNKED, FULL])
        return model

    @parameterized.expand([(attn,) for attn in ATTENTION])
    def test_chunked_not_cutting_equals_transformers(self, attn):
        """cache_limit=40 on a 20-column run: only the chunks act (rows of 9 and 5 real tokens: their chunks start at
        their own first token), and the chunked layers keep what a chunk can show, C - 1 = 3 positions."""
        model = self.build_chunked(attn)
        ids, mask = left_padded_batch([9, 5], seed=1)
        bounded = self.generate(model, ids, mask, 40, max_new_tokens=12)
        self.assert_same_run(bounded, self.generate(model, ids, mask, None, max_new_tokens=12))
        kept = returned_cache(bounded).kept_lengths_by_type()
        self.assertTrue(torch.equal(kept[CHUNKED], torch.tensor([3, 3])))
        self.assertTrue(torch.equal(kept[FULL], torch.tensor([9, 5]) + 11))

    @parameterized.expand([(attn, chunk) for attn in ATTENTION for chunk in (None, 2)])
    def test_chunked_cutting_matches_banded_reference(self, attn, chunk):
        """L = 2 cuts inside the chunks of 4 (a query there would read up to 3 keys of its chunk)."""
        model = self.build_chunked(attn)
        ids, mask = left_padded_batch([11, 6], seed=2)
        bounded = self.generate(model, ids, mask, 2, prefill_chunk_size=chunk, max_new_tokens=12)
        expected = self.assert_reference(model, bounded, mask, 2, window_prefill=chunk is not None)
        # the comparison can fail: the window without the chunks, or chunks counted from column 0 (the left pads)
        sequences, full = bounded.sequences, extended_mask(mask, bounded.sequences)
        spans = [] if chunk else [(0, ids.shape[1])]
        plain = generated_step_logits(model, sequences, mask, 2, window_prefill=chunk is not None,
                                      every_layer_reads=FULL)  # fmt: skip
        column = torch.arange(full.shape[1])
        same_chunk = torch.div(column[:, None], self.chunk, rounding_mode="floor") == torch.div(
            column[None, :], self.chunk, rounding_mode="floor"
        )
        by_column = {
            CHUNKED: banded_visibility(full, 2, spans) & same_chunk | torch.eye(full.shape[1], dtype=torch.bool),
            FULL: banded_visibility(full, 2, spans),
        }
        columns = banded_logits(model, sequences, full, by_column)[:, ids.shape[1] - 1 : -1]
        for wrong in (plain, columns):
            self.assertGreater((wrong - expected).abs().max().item(), 100 * ATOL)

    @parameterized.expand([(None,), (2,)])
    def test_chunked_sinks_match_reference(self, chunk):
        """Chunks of 3, L = 5, S = 2: the chunked layers keep min(L, S + C - 1) = 4, the full (NoPE) layers 5; the
        sinks are visible from the first chunk only."""
        model = self.build_chunked(chunk=3)
        ids, mask = left_padded_batch([8, 3], seed=4)
        out, logits = self.run_sinks(model, ids, mask, 5, 2, NEW + 6, prefill_chunk_size=chunk)
        kept = returned_cache(out).kept_lengths_by_type()
        self.assertTrue(torch.equal(kept[CHUNKED], torch.tensor([4, 4])))
        self.assert_sinks_match_reference(model, ids, mask, out, logits, 5, 2, window_prefill=chunk is not None)

    def test_nope_temperature_sees_the_true_position(self):
        """With sinks, the NoPE layers' temperature is that of each query's true position (transformers computes it
        from the columns its cache has seen, which a bounded cache reports too): a reference that takes it from the
        kept cache's length instead differs far beyond the tolerance (the tiny `floor_scale` makes it act early)."""
        model = self.build_chunked()
        ids, _ = left_padded_batch([9], seed=5)
        out, logits = self.run_sinks(model, ids, None, 5, 2, NEW + 6)
        self.assert_sinks_match_reference(model, ids, torch.ones_like(ids), out, logits, 5, 2)
        wrong = StreamingReference(model, 5, 2, true_temperature=False).greedy(ids, NEW + 6)[1]
        self.assertGreater((logits[0] - wrong).abs().max().item(), 10 * self.sink_atol)
