"""`plan_step` against a brute-force reading of the column definitions (no model): which ring slot each column
lands in, the positions, the sink shifts, and for every query the exact set of key columns it may read.

The expectations come from the definitions (a column's ring slot is `column % (L - S + 1)`; a token reads the
first S real tokens of its row, the last L - S columns and itself), never from cachelimit's own code.
"""

from __future__ import annotations

import unittest

import torch
from parameterized import parameterized

from cachelimit import WindowPolicy
from tests.growth_spec import ring_capacities


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
            # the ring grows (2 -> 4 -> 8 -> 10 slots), with pads, sinks, chunks and a native window
            ("growth", 9, 0, False, None, [0, 1], [2] + [1] * 12),
            ("growth_sinks_chunked", 10, 2, True, None, [0, 3], [2, 3, 1, 4] + [1] * 8),
            ("growth_native_window", 6, 0, False, 7, [0, 2], [3] + [1] * 8),
        ]
    )
    def test_plan_matches_brute_force(self, _, limit, sinks, window_prefill, native, pads, widths):
        for rotates in (False, True) if sinks else (False,):  # learned positions, RoPE sinks
            self.check_sequence(limit, sinks, window_prefill, native, pads, widths, rotates)

    def check_sequence(self, limit, sinks, window_prefill, native, pads, widths, rotates):
        policy = WindowPolicy(limit, sinks, window_prefill, native)
        ring_size = limit - sinks + 1
        total = sum(widths)
        real = torch.tensor([[column >= pad for column in range(total)] for pad in pads])
        state = policy.new_rows(len(pads), torch.device("cpu"))
        ring: list[int | None] = [None] * ring_size  # simulated: which column each ring slot holds
        capacities = ring_capacities(widths, ring_size)
        start = 0
        for width, capacity in zip(widths, capacities, strict=True):
            new_real = real[:, start : start + width]
            model_mask = policy.first_forward_is_causal(state.cursor, width)
            plan = policy.plan(state, new_real, model_mask=model_mask, rotates_sinks=rotates)
            decode = width == 1
            self.assertEqual((plan.start, plan.num_new, plan.decode), (start, width, decode))
            expected_positions = (real[:, : start + width].long().cumsum(1) - 1).clamp(min=0)[:, start:]
            self.assertTrue(torch.equal(plan.positions, expected_positions))
            self.assertEqual((plan.capacity, state.capacity), (capacity, capacity))
            if decode:
                self.assertEqual(plan.ring_slot, start % ring_size)
                past_columns = []
                ring[start % ring_size] = start
                ring_columns = ring[: min(start + 1, ring_size)]  # a decode step reads the slots written so far
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
            if rotates and not plan.model_mask:  # (no sink is read before anything is cut)
                self.check_sink_shifts(plan, real, start, width, limit, sinks, window_prefill or decode)
            if not decode:
                for source, target in zip(plan.ring_source.tolist(), plan.ring_target.tolist(), strict=True):
                    ring[target] = start + source
            start += width
            self.assertEqual(state.cursor, start)

    def check_visibility(self, plan, real, start, width, limit, sinks, windowed, native, ring_columns):
        if plan.model_mask:  # the model masks the forward itself (causal over the new tokens, its own window)
            self.check_model_mask(plan, real, start, width, limit, sinks, windowed, native)
            return
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

    def check_model_mask(self, plan, real, start, width, limit, sinks, windowed, native):
        """A plan may leave the mask to the model only where that is exact: nothing is cached (the keys returned are
        the new tokens, no sink copies) and, by the definitions, every real query reads every earlier real column
        (within the model's own window, which its mask applies)."""
        self.assertEqual((start, plan.sink_copies, plan.allowed), (0, 0, None))
        for row in range(real.shape[0]):
            row_real = real[row, :width].tolist()
            for query in range(width):
                if row_real[query]:
                    causal = {k for k in range(query + 1) if row_real[k] and (native is None or k > query - native)}
                    expected = brute_force_visible(row_real, query, start, limit, sinks, windowed, native)
                    self.assertEqual(causal, expected, f"row {row}, column {query}: the bound cuts here")

    def check_sink_shifts(self, plan, real, start, width, limit, sinks, windowed):
        """StreamingLLM: sink j, seen from a query at position p, sits at j + max(0, p - L); a full-attention
        forward uses the first new token's position (the row's real tokens seen before it) for all its queries. A
        windowed multi-token forward copies the sinks for each query that reads a sink outside its window in some
        row (the earliest sink is the earliest first real column of any row), at least one: the last queries."""
        seen_before = real[:, :start].sum(1)
        if windowed and width > 1:
            first_real = [row.index(True) for row in real[:, : start + width].tolist() if True in row]
            readers = [q for q in range(width) if first_real and start + q - (limit - sinks) > min(first_real)]
            copies = max(1, len(readers))
            self.assertEqual(readers, list(range(width - len(readers), width)))  # the last queries
            per_query = plan.positions[:, width - copies :]
            expected = (per_query - limit).clamp(min=0).repeat_interleave(sinks, dim=1)
        else:
            copies = 1
            first = plan.positions[:, :1] if windowed else seen_before[:, None]
            expected = (first - limit).clamp(min=0).expand(-1, sinks)
        self.assertEqual(plan.sink_copies, copies)
        self.assertTrue(torch.equal(plan.sink_shift, expected))


if __name__ == "__main__":
    unittest.main()
