"""`output_attentions=True` in a bounded run: key columns in sequence order, the current token last (issue 11).

Where the bound does not cut, the attention maps equal an unbounded run's (transformers' own, unpatched path);
where it cuts, they equal the attention probabilities of one full-sequence forward with the banded visibility
(`tests.reference`; with sink columns for GPT-2), restricted to the kept columns: `[sinks | window, oldest
first]`, a sink's weight shown at its sink position once the window has moved past it. Eager attention (SDPA
returns no weights). One test class per supported family (from cachelimit's family registry).
"""

from __future__ import annotations

import unittest
from functools import partial

import torch
from parameterized import parameterized

import cachelimit
from cachelimit.families.table import FAMILIES
from cachelimit.hf import compat
from tests.common import (
    build_tiny_model,
    left_padded_batch,
    not_served_here,
    refused_as_restarting,
    skip_where_sinks_are_refused,
    skip_where_the_family_refuses_sinks,
)
from tests.layer_masks import attention_types, model_masks
from tests.reference import extended_mask, real_positions
from tests.sink_reference import StreamingReference, sink_visibility

ATOL = 3e-6  # probabilities, float32 (Gemma 4's full layers, unscaled scores after q/k norms, measured 1.3e-6 noise)


class AttentionOrderTesterMixin:
    family: str
    uses_rope: bool

    def setUp(self):
        super().setUp()
        reason = not_served_here(self.family)
        if reason is not None:
            self.skipTest(reason)

    def generate(self, model, ids, mask, limit, new, **kwargs):
        if kwargs.get("num_sink_tokens"):
            skip_where_the_family_refuses_sinks(self, self.family)
            skip_where_sinks_are_refused(self, model)
        options = dict(max_new_tokens=new, do_sample=False, return_dict_in_generate=True, output_attentions=True)
        return model.generate(ids, attention_mask=mask, cache_limit=limit, **{**options, **kwargs})

    @torch.no_grad()
    def reference_attentions(self, model, sequences, full_mask, limit, sinks, spans):
        """Per layer [B, H, T, T]: one cache-free forward where each token reads what it read when generated."""
        visible = sink_visibility(full_mask, limit, sinks, spans)
        # one visibility for every attention type (the tiny models' native windows and chunks exceed these runs), and
        # the padding mask for recurrent layers
        mask = model_masks(model, dict.fromkeys(attention_types(model.config), visible), full_mask)
        output = model(
            input_ids=sequences, attention_mask=mask, position_ids=real_positions(full_mask), output_attentions=True
        )
        return output.attentions

    @parameterized.expand([(None, None), (2, None), (None, 3)])
    def test_uncut_attentions_equal_the_unbounded_run(self, sinks, chunk):
        model = build_tiny_model(self.family, "eager")
        # transformers 4.x's own chunked prefill numbers left-padded rows from 0 (not a reference; a bounded run
        # follows the mask, as the banded reference checks below): compare it on unpadded rows there
        padded = not (chunk and compat.CHUNKED_PREFILL_IGNORES_PADDING)
        ids, mask = left_padded_batch([4, 7] if padded else [7, 7], seed=1)
        new = 6
        run = partial(self.generate, model, ids, mask, 40, new, num_sink_tokens=sinks, prefill_chunk_size=chunk)
        if chunk is not None and refused_as_restarting(self, model, run):
            return
        bounded = run()
        unbounded = self.generate(model, ids, mask, None, new, prefill_chunk_size=chunk)
        self.assertTrue(torch.equal(bounded.sequences, unbounded.sequences))
        real = extended_mask(mask, bounded.sequences).bool()
        width = ids.shape[1]
        for step, (mine, theirs) in enumerate(zip(bounded.attentions, unbounded.attentions, strict=True)):
            for layer, (got, expected) in enumerate(zip(mine, theirs, strict=True)):
                self.assertEqual(got.shape, expected.shape, f"step {step} layer {layer}")
                queries = got.shape[2]
                end = width + step  # columns seen after this step
                row, query = real[:, end - queries : end].nonzero(as_tuple=True)  # pad queries: not compared
                torch.testing.assert_close(got[row, :, query], expected[row, :, query], atol=ATOL, rtol=0)

    @parameterized.expand([(3, 0, None), (4, 0, 2), (5, 2, None), (4, 1, 3), (6, 2, 4)])
    def test_cut_attentions_equal_the_banded_reference(self, limit, sinks, chunk):
        if sinks and self.uses_rope:
            self.skipTest("RoPE sinks follow StreamingLLM positions, not the banded forward's")
        model = build_tiny_model(self.family, "eager")
        ids, mask = left_padded_batch([4, 9], seed=2)
        new, width, recent = 3 * limit, ids.shape[1], limit - sinks
        run = partial(
            self.generate, model, ids, mask, limit, new, num_sink_tokens=sinks or None, prefill_chunk_size=chunk
        )
        if chunk is not None and refused_as_restarting(self, model, run):
            return
        output = run()
        full = extended_mask(mask, output.sequences)
        reference = self.reference_attentions(
            model, output.sequences, full, limit, sinks, [] if chunk else [(0, width)]
        )
        sink_columns = torch.stack([row.nonzero()[:sinks, 0] for row in full])  # [B, S] each row's first real tokens
        cuts = 0
        for step, layers in enumerate(output.attentions):
            end = width + step  # columns seen after this step's forward
            start = end - layers[0].shape[2]  # its first query's column
            shown = torch.arange(max(0, start - recent), end)  # the window part: kept past, then the new tokens
            cuts += int(shown[0] > 0)
            for query in range(start, end):
                lowest = query - recent if chunk or query >= width else start - recent
                read_as_sink = sink_columns < lowest  # [B, S]: read through the sink slots, not the window
                for layer, got in enumerate(layers):
                    weights = reference[layer][:, :, query]  # [B, H, T]
                    in_window = weights[:, :, shown].clone()
                    for row in range(full.shape[0]):
                        hidden = torch.isin(shown, sink_columns[row][read_as_sink[row]])
                        in_window[row][:, hidden] = 0
                    expected = in_window
                    if sinks and shown[0] > 0:
                        sink_part = weights.gather(-1, sink_columns[:, None, :].expand(-1, weights.shape[1], -1))
                        expected = torch.cat([sink_part * read_as_sink[:, None, :], in_window], dim=-1)
                    where = f"step {step}, query column {query}, layer {layer}"
                    self.assertEqual(got.shape[-1], expected.shape[-1], where)
                    real = full[:, query].bool()  # a pad query's map is transformers' own (checked below)
                    torch.testing.assert_close(
                        got[real, :, query - start], expected[real], atol=ATOL, rtol=0, msg=where
                    )
        self.assertGreater(cuts, 2)  # the bound did cut: these maps are not the unbounded ones
        if chunk is not None:  # generate returns no attention maps for the chunks of a chunked prefill
            return
        # the first forward reads nothing cached and cuts nothing: its maps, pad queries included, are transformers'
        unbounded = self.generate(model, ids, mask, None, 1)
        for layer, (got, theirs) in enumerate(zip(output.attentions[0], unbounded.attentions[0], strict=True)):
            torch.testing.assert_close(got, theirs, atol=ATOL, rtol=0, msg=f"first forward, layer {layer}")

    @parameterized.expand([(5, 2, 9), (6, 4, 3)])
    def test_rope_sink_attentions_equal_the_streaming_reference(self, limit, sinks, prompt_length):
        """RoPE sinks: the StreamingLLM reference attends over its kept keys in order [sinks | window | current];
        each shown column's weight must be the reference's weight for that column."""
        if not self.uses_rope:
            self.skipTest("GPT-2 sinks are checked against the banded reference above")
        model = build_tiny_model(self.family, "eager")
        ids, _ = left_padded_batch([prompt_length], seed=4)
        new, recent = 3 * limit, limit - sinks
        output = self.generate(model, ids, None, limit, new, num_sink_tokens=sinks)
        reference = StreamingReference(model, limit, sinks)  # before the hook: it runs forwards of its own to check
        recorded = []
        hook = model.register_forward_hook(lambda module, args, out: recorded.append(out.attentions))
        model.config.output_attentions = True
        try:
            tokens, _ = reference.greedy(ids, new)
        finally:
            model.config.output_attentions = False
            reference.close()
            hook.remove()
        self.assertEqual(output.sequences[0, prompt_length:].tolist(), tokens.tolist())
        cuts = 0
        for step, (layers, expected_layers) in enumerate(zip(output.attentions, recorded, strict=True)):
            end = prompt_length + step
            start = end - layers[0].shape[2]
            kept = sorted(set(range(min(sinks, start))) | set(range(max(0, start - recent), start)))
            columns = kept + list(range(start, end))  # the reference's key columns, in its cache order
            shown = list(range(max(0, start - recent), end))
            lowest = start - recent if step else -recent  # the prefill reads everything (full attention)
            sink_part = [columns.index(j) if j < lowest else None for j in range(sinks)] if shown[0] > 0 else []
            cuts += bool(sink_part)
            for layer, (got, theirs) in enumerate(zip(layers, expected_layers, strict=True)):
                window = theirs[..., [columns.index(column) for column in shown]]
                sink = [
                    theirs[..., i : i + 1] if i is not None else torch.zeros_like(theirs[..., :1]) for i in sink_part
                ]
                expected = torch.cat([*sink, window], dim=-1)
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, msg=f"step {step} layer {layer}")
        self.assertGreater(cuts, 2)


#: one test class per served family below: CI's older legs run a share of them (tests/conftest.py)
ONE_CLASS_PER_FAMILY = True

for _name in cachelimit.supported_families():
    _class_name = f"{_name.title().replace('_', '')}AttentionOrderTest"
    globals()[_class_name] = type(
        _class_name,
        (AttentionOrderTesterMixin, unittest.TestCase),
        {"family": _name, "uses_rope": FAMILIES[_name].uses_rope},
    )


if __name__ == "__main__":
    unittest.main()
