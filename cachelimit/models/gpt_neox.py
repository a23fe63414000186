"""GPT-NeoX (Pythia): partial rotary (`rotary_pct` of each head's dims), fused qkv projection."""

from ..family import rope_family

FAMILY = rope_family("gpt_neox", "GPTNeoXForCausalLM", notes="fused qkv projection")
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
