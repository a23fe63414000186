"""GPT-2: learned absolute position embeddings, so a run can never go past `n_positions` tokens.

Sinks keep the positions they were written with (there is no rotation to adjust).
"""

from __future__ import annotations

from ..patches import Family, register_family
from ..utils.generation import make_prepare_inputs
from ..utils.validation import last_position


def check_generation(model, longest_prompt: int, max_new_tokens: int) -> None:
    """transformers fails mid-run with `IndexError: index out of range in self` past the last learned
    position; a bounded cache does not change that, so refuse the run up front."""
    n_positions = model.config.n_positions
    if last_position(longest_prompt, max_new_tokens) >= n_positions:
        raise ValueError(
            f"GPT-2 has learned absolute positions: the prompt ({longest_prompt} tokens) plus max_new_tokens "
            f"({max_new_tokens}) exceeds n_positions={n_positions}. Lower max_new_tokens to at most "
            f"{max(n_positions - longest_prompt + 1, 0)}, or use a RoPE model (llama, mistral)."
        )


prepare_inputs_for_generation = make_prepare_inputs("gpt2")

FAMILY = register_family(
    Family(
        name="gpt2",
        class_names=("GPT2LMHeadModel",),
        prepare_inputs_for_generation=prepare_inputs_for_generation,
        check_generation=check_generation,
    )
)
