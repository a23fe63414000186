"""Exact bookkeeping of `BoundedCache` (no timing): slots and bytes held, which ring slot each token lands in,
no allocation while decoding, kept lengths under left padding, row reordering, and `plan_step` against a
brute-force reading of the column definitions.

The expectations are derived here from the definitions (a column's ring slot is `column % (L - S + 1)`; a token
reads the first S real tokens of its row, the last L - S columns and itself), never from cachelimit's own code.
"""

from __future__ import annotations

import contextlib
import unittest

import torch
from parameterized import parameterized

from cachelimit import BoundedCache, BoundedLayer, WindowPolicy
from cachelimit.step_plan import RowState, plan_step
from tests.common import build_tiny_model, left_padded_batch

NEW = 30  # decode steps per run: the ring wraps several times for every limit below


def kv_shape(model) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a tiny model."""
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return config.num_hidden_layers, heads, config.hidden_size // config.num_attention_heads


def expected_kv_bytes(model, batch: int, limit: int, sinks: int, rope: bool) -> int:
    layers, heads, head_dim = kv_shape(model)
    slots = sinks + (limit - sinks) + 1
    sink_copies = sinks if rope else 0  # RoPE models keep the sinks' un-rotated keys as well
    return layers * batch * heads * head_dim * 4 * (2 * slots + sink_copies)  # float32


class DecodeAudit:
    """Wraps `BoundedLayer.update` and the model's forward to check every decode write against the definitions:
    the new key/value lands in slot S + column % (L - S + 1) of the same buffers, and no other ring slot moves."""

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
            self.model.register_forward_pre_hook(count_columns, with_kwargs=True),
            self.model.register_forward_hook(after_forward, with_kwargs=True),
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
        test.assertEqual(layer.cache.plan.ring_slot, self.column % self.ring)
        test.assertEqual((layer.keys.data_ptr(), layer.values.data_ptr()), (key_ptr, value_ptr), "decode reallocated")
        test.assertTrue(torch.equal(layer.keys[:, :, slot], key_states[:, :, 0]))
        test.assertTrue(torch.equal(layer.values[:, :, slot], value_states[:, :, 0]))
        untouched = [index for index in range(sinks, sinks + self.ring) if index != slot]
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
        expected_bytes = expected_kv_bytes(model, batch, limit, sinks, rope)
        checked_forwards = []

        def after_forward(module, args, kwargs, output):
            cache = kwargs["past_key_values"]
            columns = cache.get_seq_length()
            real_seen = mask[:, : min(columns, width)].sum(1) + max(0, columns - width)
            self.assertTrue(torch.equal(cache.kept_lengths(), real_seen.clamp(max=limit)), f"{columns} columns")
            self.assertEqual(cache.kv_bytes(), expected_bytes)
            for layer in cache.layers:
                self.assertEqual(layer.keys.shape, layer.values.shape)
                self.assertEqual(layer.keys.shape[-2], limit + 1)
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
        expected_bytes = expected_kv_bytes(model, ids.shape[0] * beams, limit, sinks, family != "gpt2")
        steps = []

        def after_forward(module, args, kwargs, output):
            cache = kwargs["past_key_values"]
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
        cache = self.bounded_run(model, ids, mask).past_key_values
        index = torch.tensor([2, 0, 0])
        names = ("keys", "values", "sink_keys")
        before = [
            {name: getattr(layer, name).clone() for name in names if getattr(layer, name) is not None}
            for layer in cache.layers
        ]
        state = cache.state
        rows_before = (state.num_real.clone(), state.sink_column.clone(), state.ring_real.clone(), state.cursor)
        kept_before = cache.kept_lengths()
        cache.reorder_cache(index)
        for layer, tensors in zip(cache.layers, before, strict=True):
            for name, tensor in tensors.items():
                self.assertTrue(torch.equal(getattr(layer, name), tensor[index]), name)
        state = cache.state
        self.assertTrue(torch.equal(state.num_real, rows_before[0][index]))
        self.assertTrue(torch.equal(state.sink_column, rows_before[1][index]))
        self.assertTrue(torch.equal(state.ring_real, rows_before[2][index]))
        self.assertEqual(state.cursor, rows_before[3])
        self.assertTrue(torch.equal(cache.kept_lengths(), kept_before[index]))
        self.assertEqual(cache.kv_bytes(), expected_kv_bytes(model, 3, 4, 1, family != "gpt2"))

    @parameterized.expand([("gpt2",), ("llama",)])
    def test_reordered_cache_continues_like_reordered_rows(self, family):
        """If keys moved without the row state (or the reverse), masks and positions would belong to other rows."""
        model = build_tiny_model(family)
        ids, mask = left_padded_batch([7, 2, 5], seed=6)
        first = self.bounded_run(model, ids, mask)
        full_mask = torch.cat([mask, mask.new_ones(3, first.sequences.shape[1] - ids.shape[1])], dim=1)
        index = torch.tensor([2, 0, 0])
        reordered = self.bounded_run(model, ids, mask).past_key_values
        reordered.reorder_cache(index)
        moved = self.bounded_run(model, first.sequences[index], full_mask[index], past_key_values=reordered)
        stayed = self.bounded_run(model, first.sequences, full_mask, past_key_values=first.past_key_values)
        self.assertTrue(torch.equal(moved.sequences, stayed.sequences[index]))

    def test_batch_repeat_interleave_repeats_rows_and_state(self):
        model = build_tiny_model("llama")
        ids, mask = left_padded_batch([6, 3], seed=7)
        cache = self.bounded_run(model, ids, mask).past_key_values
        keys, kept = [layer.keys.clone() for layer in cache.layers], cache.kept_lengths()
        cache.batch_repeat_interleave(2)
        for layer, old in zip(cache.layers, keys, strict=True):
            self.assertTrue(torch.equal(layer.keys, old.repeat_interleave(2, dim=0)))
        self.assertTrue(torch.equal(cache.kept_lengths(), kept.repeat_interleave(2)))


class FakeRotary:
    """Hands back the requested shifts as the "cos"/"sin", so a test can read which shift each sink copy gets."""

    def cos_sin(self, shift: torch.Tensor):
        return shift.clone(), shift.clone()


def brute_force_visible(real: list[bool], query: int, start: int, limit: int, sinks: int, windowed: bool, native):
    """Columns the token in column `query` may read, from the definitions: every real column k <= query that is
    among the last L - S columns (of the query when windowed, else of the kept past before `start`) or is one of
    the row's first S real tokens; a native window W also requires k > query - W; a query always reads itself."""
    first_real = [column for column, is_real in enumerate(real) if is_real][:sinks]
    lowest = (query if windowed else start) - (limit - sinks)
    visible = {k for k in range(query + 1) if real[k] and (k >= lowest or k in first_real)}
    if native is not None:
        visible = {k for k in visible if k > query - native}
    return visible | {query}


class PlanStepTest(unittest.TestCase):
    """Drive `plan_step` over a whole sequence while simulating the ring (slot -> column) from the plan's writes;
    check slots, positions, sink shifts and, for every query, the exact set of key columns it may read."""

    @parameterized.expand(
        [
            # name, limit, sinks, window_prefill, native window, left pads per row, widths of the forwards
            ("window", 4, 0, False, None, [0, 3], [6] + [1] * 8),
            ("limit_one", 1, 0, False, None, [0, 2], [3] + [1] * 5),
            ("sinks", 5, 2, False, None, [0, 4], [7] + [1] * 9),
            ("sinks_chunked", 4, 1, True, None, [0, 5], [2, 3, 2] + [1] * 6),
            ("continuation", 3, 1, False, None, [0, 1], [5, 1, 1, 1, 4, 1, 1]),
            ("native_window", 2, 0, False, 3, [0, 2], [6, 1, 1, 1]),
            ("chunk_longer_than_ring", 3, 0, True, None, [0, 0], [7, 1, 1]),
            ("sinks_found_while_decoding", 6, 3, False, None, [0, 4], [5] + [1] * 6),
        ]
    )
    def test_plan_matches_brute_force(self, _, limit, sinks, window_prefill, native, pads, widths):
        for rotary in (None, FakeRotary()) if sinks else (None,):
            self.check_sequence(limit, sinks, window_prefill, native, pads, widths, rotary)

    def check_sequence(self, limit, sinks, window_prefill, native, pads, widths, rotary):
        policy = WindowPolicy(limit, sinks, window_prefill, native)
        ring_size = limit - sinks + 1
        total = sum(widths)
        real = torch.tensor([[column >= pad for column in range(total)] for pad in pads])
        state = RowState.empty(len(pads), policy, torch.device("cpu"))
        ring: list[int | None] = [None] * ring_size  # simulated: which column each ring slot holds
        start = 0
        for width in widths:
            new_real = real[:, start : start + width]
            plan = plan_step(state, policy, new_real, rotary)
            decode = width == 1
            self.assertEqual((plan.start, plan.num_new, plan.decode), (start, width, decode))
            expected_positions = (real[:, : start + width].long().cumsum(1) - 1).clamp(min=0)[:, start:]
            self.assertTrue(torch.equal(plan.positions, expected_positions))
            if decode:
                self.assertEqual(plan.ring_slot, start % ring_size)
                past_columns = []
                ring[start % ring_size] = start
                ring_columns = list(ring)
            else:
                past_columns = [ring[slot] for slot in plan.past_slots.tolist()]
                self.assertEqual(past_columns, list(range(max(0, start - (limit - sinks)), start)))
                kept = min(width, ring_size)
                self.assertEqual(plan.ring_source.tolist(), list(range(width - kept, width)))
                self.assertEqual(
                    plan.ring_target.tolist(), [(start + i) % ring_size for i in range(width - kept, width)]
                )
                ring_columns = past_columns + list(range(start, start + width))
            self.check_visibility(
                plan, real, start, width, limit, sinks, window_prefill or decode, native, ring_columns
            )
            if rotary is not None:
                self.check_sink_shifts(plan, real, start, width, limit, sinks, window_prefill or decode)
            if not decode:
                for source, target in zip(plan.ring_source.tolist(), plan.ring_target.tolist(), strict=True):
                    ring[target] = start + source
            start += width
            self.assertEqual(state.cursor, start)

    def check_visibility(self, plan, real, start, width, limit, sinks, windowed, native, ring_columns):
        for row in range(real.shape[0]):
            row_real = real[row, : start + width].tolist()
            first_real = [column for column, is_real in enumerate(row_real) if is_real][:sinks]
            sink_columns = [first_real[j] if j < len(first_real) else None for j in range(sinks)]
            for query in range(width):
                keys = sink_columns * plan.sink_copies + ring_columns
                self.assertEqual(plan.allowed.shape[-1], len(keys))
                read = [key for key, allowed in zip(keys, plan.allowed[row, query].tolist(), strict=True) if allowed]
                self.assertNotIn(None, read, "an empty slot or unseen sink is readable")
                self.assertEqual(len(read), len(set(read)), f"a column is read twice: {read}")
                expected = brute_force_visible(row_real, start + query, start, limit, sinks, windowed, native)
                self.assertEqual(set(read), expected, f"row {row}, column {start + query}")

    def check_sink_shifts(self, plan, real, start, width, limit, sinks, windowed):
        """StreamingLLM: sink j, seen from a query at position p, sits at j + max(0, p - L); a full-attention
        forward uses the first new token's position (the row's real tokens seen before it) for all its queries."""
        seen_before = real[:, :start].sum(1)
        if windowed:
            per_query = plan.positions if width > 1 else plan.positions[:, :1]
            expected = (per_query - limit).clamp(min=0).repeat_interleave(sinks, dim=1)
        else:
            expected = (seen_before - limit).clamp(min=0)[:, None].expand(-1, sinks)
        self.assertEqual(plan.sink_copies, width if windowed and width > 1 else 1)
        self.assertTrue(torch.equal(plan.sink_cos, expected))


class BoundedCacheBeforeUseTest(unittest.TestCase):
    def test_empty_cache_reports_nothing_kept_and_no_bytes(self):
        cache = BoundedCache(4, 1)
        self.assertEqual(cache.kept_lengths().numel(), 0)
        self.assertEqual(cache.kv_bytes(), 0)


if __name__ == "__main__":
    unittest.main()
