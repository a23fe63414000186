"""OPT: learned absolute positions like GPT-2, at most `max_position_embeddings` tokens per row.

Its position table is offset by 2 inside the model (`OPTLearnedPositionalEmbedding`); cachelimit passes the
real-token index as `position_ids`, as transformers' own generation does, and the model adds the offset.
"""

from ..family import learned_family

FAMILY = learned_family(
    "opt",
    "OPTForCausalLM",
    max_positions="max_position_embeddings",
    label="OPT",
    tiny_config={
        "hidden_size": 32,
        "ffn_dim": 64,
        "num_attention_heads": 4,
        "word_embed_proj_dim": 32,
        "max_position_embeddings": 256,
        "pad_token_id": 0,
    },
    notes="at most `max_position_embeddings` tokens; the model offsets its position table by 2",
)
prepare_inputs_for_generation = FAMILY.prepare_inputs_for_generation
