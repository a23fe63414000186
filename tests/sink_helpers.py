"""What the attention-sink tests share: running a bounded generation with sinks and comparing it with the family's
independent reference (`tests.sink_reference`), or checking that the family refuses sinks, with its reason."""

from __future__ import annotations

import re

import torch

from tests.common import FamilyTestBase, build_tiny_model, left_padded_batch, skip_where_sinks_are_refused
from tests.sink_reference import StreamingReference, banded_sink_logits


def full_mask(prompt_mask: torch.Tensor, sequences: torch.Tensor) -> torch.Tensor:
    """The prompt mask followed by ones for every later column (generated and appended tokens are real)."""
    extra = sequences.shape[1] - prompt_mask.shape[1]
    return torch.cat([prompt_mask, prompt_mask.new_ones(sequences.shape[0], extra)], dim=1)


class SinkHelpers(FamilyTestBase):
    """Running a sink generation and comparing it with the family's independent reference."""

    @property
    def sink_atol(self) -> float:
        # RoPE: the reference rotates keys to other positions than the library does (float32 rounding).
        return 1e-4 if self.uses_rope else 1e-5

    # ---- helpers -------------------------------------------------------------------------------------------
    def sink_build(self, attn: str | None = None, **overrides):
        attn = attn or self.attentions[-1]
        self.require_attention(attn)
        return build_tiny_model(self.family, attn, **overrides)

    def run_sinks(self, model, ids, mask, limit, sinks, new, **kwargs):
        skip_where_sinks_are_refused(self, model)
        out = model.generate(
            ids,
            attention_mask=mask,
            cache_limit=limit,
            num_sink_tokens=sinks,
            max_new_tokens=new,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
            **kwargs,
        )
        return out, torch.stack(out.logits, dim=1)

    def assert_sinks_refused(self, model) -> None:
        """A family that cannot move its sink keys exactly refuses sinks with its reason, before any forward (and a
        plain window on the same model still runs)."""
        ids, mask = left_padded_batch([6, 3], seed=4)
        forwards = []
        handle = model.register_forward_pre_hook(lambda module, args: forwards.append(1))
        self.addCleanup(handle.remove)
        with self.assertRaisesRegex(ValueError, re.escape(self.sink_refusal)):
            self.run_sinks(model, ids, mask, 5, 2, 3)
        self.assertEqual(forwards, [])
        self.run_sinks(model, ids, mask, 5, 0, 3)
        self.assertEqual(len(forwards), 3)

    def assert_sinks_match_reference(self, model, ids, mask, out, logits, limit, sinks, window_prefill=False):
        """Every step's logits and every token of a fresh greedy run equal the independent reference."""
        width, new = ids.shape[1], logits.shape[1]
        if not self.uses_rope:
            spans = [] if window_prefill else [(0, width)]
            expected = banded_sink_logits(model, out.sequences, full_mask(mask, out.sequences), limit, sinks, spans)
            expected = expected[:, width - 1 : -1]
            torch.testing.assert_close(logits, expected, atol=self.sink_atol, rtol=0)
            self.assertTrue(torch.equal(expected.argmax(-1), out.sequences[:, width:]))
            return
        for row in range(ids.shape[0]):
            prompt = ids[row : row + 1, mask[row].bool()]
            pads = int((~mask[row].bool()).sum())  # Llama 4's temperature counts them, as transformers does
            reference = StreamingReference(model, limit, sinks, left_pads=pads)
            tokens, expected = reference.greedy(prompt, new, token_by_token_prefill=window_prefill)
            self.assertEqual(out.sequences[row, width:].tolist(), tokens.tolist(), f"row {row}")
            torch.testing.assert_close(logits[row], expected, atol=self.sink_atol, rtol=0, msg=f"row {row}")
