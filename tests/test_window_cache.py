"""Exact bookkeeping of `BoundedCache` (no timing): slots and bytes held, which ring slot each token lands in,
no allocation while decoding (except when the ring grows), kept lengths under left padding and row reordering
(the window policy's plans alone: tests/test_step_plan.py; growth across its boundaries: tests/test_growth.py).

The expectations are derived here from the definitions (a column's ring slot is `column % (L - S + 1)`; a token
reads the first S real tokens of its row, the last L - S columns and itself; the ring grows as
`tests.growth_spec` specifies), never from cachelimit's own code.
"""

from __future__ import annotations

import contextlib
import unittest

import torch
from parameterized import parameterized

from cachelimit import BoundedCache, BoundedLayer
from cachelimit.hf import compat
from cachelimit.hf.compat import passed_cache
from tests.common import build_tiny_model, expected_bytes, given_cache, kv_layout, left_padded_batch, returned_cache
from tests.growth_spec import ring_capacities, widths_between

NEW = 30  # decode steps per run: the ring wraps several times for every limit below


def expected_kv_bytes(model, batch: int, limit: int, sinks: int, capacity: int | None = None) -> int:
    """Bytes of a float32 cache whose ring has `capacity` slots allocated (default: the full ring, L - S + 1); RoPE
    layers keep the sinks' un-rotated keys as well, layers without positions (SmolLM3's NoPE) do not (`kv_layout`
    reads which, and every layer's widths, from transformers' own cache)."""
    return expected_bytes(model, batch, sinks, (limit - sinks) + 1 if capacity is None else capacity)


class DecodeAudit:
    """Wraps `BoundedLayer.update` and the model's forward to check every decode write against the definitions:
    the new key/value lands in slot S + column % (L - S + 1) of the same buffers (new ones only when the ring
    grows, with every slot held before copied unchanged), and no other ring slot moves."""

    def __init__(self, test: unittest.TestCase, model, prompt_mask: torch.Tensor, limit: int, sinks: int, rope: bool):
        self.test, self.model, self.prompt_mask = test, model, prompt_mask
        self.limit, self.sinks, self.rope = limit, sinks, rope
        self.ring = limit - sinks + 1
        self.column = 0  # columns fed before the running forward, counted from the inputs
        self.slots_written: list[tuple[int, int]] = []  # (column, slot) of every decode write
        self.pointers: set[tuple[int, ...]] = set()

    @contextlib.contextmanager
    def watching(self):
        original = BoundedLayer.update
        audit = self

        def update(layer, key_states, value_states, *args, **kwargs):
            if key_states.shape[-2] != 1 or not layer.is_initialized:
                return original(layer, key_states, value_states, *args, **kwargs)
            before = (layer.keys.clone(), layer.values.clone(), layer.keys.data_ptr(), layer.values.data_ptr())
            result = original(layer, key_states, value_states, *args, **kwargs)
            audit.check_decode(layer, key_states, value_states, *before)
            return result

        def count_columns(module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.pending = ids.shape[1]

        def after_forward(module, args, kwargs, output):
            self.column += self.pending

        handles = [
            # the base model: transformers 4.x runs prefill chunks through `forward`, past the top module's hooks
            compat.decoder_body(self.model).register_forward_pre_hook(count_columns, with_kwargs=True),
            compat.decoder_body(self.model).register_forward_hook(after_forward, with_kwargs=True),
        ]
        BoundedLayer.update = update
        try:
            yield self
        finally:
            BoundedLayer.update = original
            for handle in handles:
                handle.remove()

    def check_decode(self, layer, key_states, value_states, keys_before, values_before, key_ptr, value_ptr):
        test, sinks = self.test, self.sinks
        slot = sinks + self.column % self.ring
        self.slots_written.append((self.column, slot))
        test.assertEqual(layer.group.plan.ring_slot, self.column % self.ring)
        held = keys_before.shape[-2]
        if layer.keys.shape[-2] == held:
            test.assertEqual((layer.keys.data_ptr(), layer.values.data_ptr()), (key_ptr, value_ptr), "reallocated")
        test.assertTrue(torch.equal(layer.keys[:, :, slot], key_states[:, :, 0]))
        test.assertTrue(torch.equal(layer.values[:, :, slot], value_states[:, :, 0]))
        untouched = [index for index in range(sinks, held) if index != slot]
        test.assertTrue(torch.equal(layer.keys[:, :, untouched], keys_before[:, :, untouched]))
        test.assertTrue(torch.equal(layer.values[:, :, untouched], values_before[:, :, untouched]))
        # Sinks change only where this token is one of its row's first S real tokens (short rows fill them late).
        width = self.prompt_mask.shape[1]
        real_before = self.prompt_mask[:, : min(self.column, width)].sum(1) + max(0, self.column - width)
        expected_sink_values, expected_sink_keys = (
            values_before[:, :, :sinks].clone(),
            keys_before[:, :, :sinks].clone(),
        )
        for row, index in enumerate(real_before.tolist()):
            if index < sinks:
                expected_sink_values[row, :, index] = value_states[row, :, 0]
                expected_sink_keys[row, :, index] = key_states[row, :, 0]
        test.assertTrue(torch.equal(layer.values[:, :, :sinks], expected_sink_values))
        if not self.rope:  # RoPE sink keys are re-rotated every step (from `sink_keys`); GPT-2's stay as written
            test.assertTrue(torch.equal(layer.keys[:, :, :sinks], expected_sink_keys))
        if layer.keys.shape[-2] == sinks + self.ring:  # once the ring is full, its buffers never change
            self.pointers.add((layer.keys.data_ptr(), layer.values.data_ptr()))


class BoundedCacheBookkeepingTest(unittest.TestCase):
    @parameterized.expand(
        [
            ("gpt2", 5, 0, [9, 4], None),
            ("gpt2", 6, 2, [3, 10], None),
            ("gpt2", 4, 3, [7, 2], 2),
            ("llama", 5, 0, [9, 4], None),
            ("llama", 6, 2, [10, 3], 3),
            ("llama", 1, 0, [4, 2], None),
            ("mistral", 3, 1, [6, 1], None),
        ]
    )
    def test_every_decode_step_is_one_in_place_write_into_a_fixed_buffer(self, family, limit, sinks, lengths, chunk):
        model = build_tiny_model(family, layers=2)
        rope = family != "gpt2"
        ids, mask = left_padded_batch(lengths, seed=3)
        batch, width = ids.shape
        checked_forwards = []
        kv_layout(model)  # read from transformers' own cache now: its forwards would reach the hook below

        def after_forward(module, args, kwargs, output):
            cache = passed_cache(kwargs)
            columns = cache.get_seq_length()
            real_seen = mask[:, : min(columns, width)].sum(1) + max(0, columns - width)
            self.assertTrue(torch.equal(cache.kept_lengths(), real_seen.clamp(max=limit)), f"{columns} columns")
            capacity = ring_capacities(widths_between([*checked_forwards, columns]), limit - sinks + 1)[-1]
            self.assertEqual(cache.kv_bytes(), expected_kv_bytes(model, batch, limit, sinks, capacity))
            for layer in cache.layers:
                self.assertEqual(layer.keys.shape, layer.values.shape)
                self.assertEqual(layer.keys.shape[-2], sinks + capacity)
            checked_forwards.append(columns)

        handle = model.register_forward_hook(after_forward, with_kwargs=True)
        audit = DecodeAudit(self, model, mask, limit, sinks, rope)
        try:
            with audit.watching():
                model.generate(
                    ids,
                    attention_mask=mask,
                    max_new_tokens=NEW,
                    do_sample=False,
                    cache_limit=limit,
                    num_sink_tokens=sinks or None,
                    prefill_chunk_size=chunk,
                )
        finally:
            handle.remove()
        layers = model.config.num_hidden_layers
        ring = limit - sinks + 1
        self.assertEqual(checked_forwards[-NEW + 1 :], list(range(width + 1, width + NEW)))
        decode_columns = sorted({column for column, _ in audit.slots_written})
        self.assertEqual(decode_columns[-NEW + 1 :], list(range(width, width + NEW - 1)))  # every generated token
        expected_slots = [(column, sinks + column % ring) for column in decode_columns for _ in range(layers)]
        self.assertEqual(audit.slots_written, expected_slots)
        self.assertEqual(len(audit.pointers), layers, "each layer keeps one buffer for the whole run")

    @parameterized.expand([("gpt2", 4, 0), ("llama", 5, 2)])
    def test_beam_search_keeps_bounded_bytes_and_kept_lengths(self, family, limit, sinks):
        model = build_tiny_model(family)
        ids, mask = left_padded_batch([7, 3], seed=4)
        beams, width = 3, ids.shape[1]
        expected_bytes = expected_kv_bytes(model, ids.shape[0] * beams, limit, sinks)
        steps = []

        def after_forward(module, args, kwargs, output):
            cache = passed_cache(kwargs)
            columns = cache.get_seq_length()
            real_seen = mask[:, : min(columns, width)].sum(1) + max(0, columns - width)
            expected = real_seen.clamp(max=limit).repeat_interleave(beams)
            self.assertTrue(torch.equal(cache.kept_lengths(), expected))
            self.assertEqual(cache.kv_bytes(), expected_bytes)
            steps.append(columns)

        handle = model.register_forward_hook(after_forward, with_kwargs=True)
        try:
            model.generate(
                ids, attention_mask=mask, max_new_tokens=12, num_beams=beams, do_sample=False,
                cache_limit=limit, num_sink_tokens=sinks or None,
            )  # fmt: skip
        finally:
            handle.remove()
        self.assertEqual(len(steps), 12)


class RowReorderingTest(unittest.TestCase):
    def bounded_run(self, model, ids, mask, **kwargs):
        return model.generate(
            ids, attention_mask=mask, max_new_tokens=9, do_sample=False, return_dict_in_generate=True,
            cache_limit=4, num_sink_tokens=1, **kwargs,
        )  # fmt: skip

    @parameterized.expand([("gpt2",), ("llama",)])
    def test_reorder_moves_buffers_and_row_state_together(self, family):
        model = build_tiny_model(family)
        ids, mask = left_padded_batch([7, 2, 5], seed=5)
        cache = returned_cache(self.bounded_run(model, ids, mask))
        index = torch.tensor([2, 0, 0])
        names = ("keys", "values", "sink_keys")
        before = [
            {name: getattr(layer, name).clone() for name in names if getattr(layer, name) is not None}
            for layer in cache.layers
        ]
        state = cache.groups[0].rows
        rows_before = (state.num_real.clone(), state.sink_column.clone(), state.ring_real.clone(), state.cursor)
        kept_before = cache.kept_lengths()
        cache.reorder_cache(index)
        for layer, tensors in zip(cache.layers, before, strict=True):
            for name, tensor in tensors.items():
                self.assertTrue(torch.equal(getattr(layer, name), tensor[index]), name)
        state = cache.groups[0].rows
        self.assertTrue(torch.equal(state.num_real, rows_before[0][index]))
        self.assertTrue(torch.equal(state.sink_column, rows_before[1][index]))
        self.assertTrue(torch.equal(state.ring_real, rows_before[2][index]))
        self.assertEqual(state.cursor, rows_before[3])
        self.assertTrue(torch.equal(cache.kept_lengths(), kept_before[index]))
        self.assertEqual(cache.kv_bytes(), expected_kv_bytes(model, 3, 4, 1))

    @parameterized.expand([("gpt2",), ("llama",)])
    def test_reordered_cache_continues_like_reordered_rows(self, family):
        """If keys moved without the row state (or the reverse), masks and positions would belong to other rows."""
        model = build_tiny_model(family)
        ids, mask = left_padded_batch([7, 2, 5], seed=6)
        first = self.bounded_run(model, ids, mask)
        full_mask = torch.cat([mask, mask.new_ones(3, first.sequences.shape[1] - ids.shape[1])], dim=1)
        index = torch.tensor([2, 0, 0])
        reordered = returned_cache(self.bounded_run(model, ids, mask))
        reordered.reorder_cache(index)
        moved = self.bounded_run(model, first.sequences[index], full_mask[index], **given_cache(reordered))
        stayed = self.bounded_run(model, first.sequences, full_mask, **given_cache(returned_cache(first)))
        self.assertTrue(torch.equal(moved.sequences, stayed.sequences[index]))

    def test_batch_repeat_interleave_repeats_rows_and_state(self):
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([6, 3], seed=7)
        cache = returned_cache(self.bounded_run(model, ids, mask))
        keys, kept = [layer.keys.clone() for layer in cache.layers], cache.kept_lengths()
        cache.batch_repeat_interleave(2)
        for layer, old in zip(cache.layers, keys, strict=True):
            self.assertTrue(torch.equal(layer.keys, old.repeat_interleave(2, dim=0)))
        self.assertTrue(torch.equal(cache.kept_lengths(), kept.repeat_interleave(2)))


class BoundedCacheBeforeUseTest(unittest.TestCase):
    def test_empty_cache_reports_nothing_kept_and_no_bytes(self):
        cache = BoundedCache(4, 1)
        self.assertEqual(cache.kept_lengths().numel(), 0)
        self.assertEqual(cache.kv_bytes(), 0)


if __name__ == "__main__":
    unittest.main()
