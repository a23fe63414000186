"""GPT-2: learned absolute position embeddings, so a run can never go past `n_positions` tokens.

Sinks keep the positions they were written with (there is no rotation to adjust).
"""

from ..family import learned_family

FAMILY = learned_family(
    "gpt2",
    "GPT2LMHeadModel",
    max_positions="n_positions",
    label="GPT-2",
    tiny_config={"n_embd": 32, "n_head": 4, "n_positions": 256},
    notes="at most `n_positions` tokens",
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
