"""Every family cachelimit serves: one entry each, named by the config's `model_type`.

Adding a family is one line here (and one test declaration, `tests/models/test_<family>.py`): `rope(...)` for a
decoder whose keys carry rotary positions, `learned(...)` for learned absolute positions. Everything else (the
attention type and window of each layer, which layers rotate, partial rotary, NoPE layers) is read from the model
itself (`cachelimit.hf.layout`).
"""

from __future__ import annotations

from types import MappingProxyType

from .registry import Family, learned, no_positions, rope


def rotaries(name: str):
    """`cachelimit.families.rotaries.<name>`, imported at its first call (this table imports no torch)."""

    def call(*args):
        from . import rotaries as module

        return getattr(module, name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


#: why a family needs a release: (what needs it, the name of that release's constant in `cachelimit.hf.compat`)
RECURRENT = ("recurrent layers in a cache made of layers", "RECURRENT_LAYERS")
SHARED_KV = ("KV-sharing layers that read `shared_kv_states`", "SHARED_KV_STATES")

TABLE: tuple[Family, ...] = (
    rope("bamba", "BambaForCausalLM", since=RECURRENT),  # Mamba 2 layers and a few attention layers
    rope("cohere", "CohereForCausalLM"),  # interleaved rotary pairs: its own apply_rotary_pos_emb moves them
    rope("cohere2", "Cohere2ForCausalLM", rope_layers=rotaries("sliding_layers_rotate")),  # full layers are NoPE
    rope("deepseek_v2", "DeepseekV2ForCausalLM", rotary=rotaries("deepseek_v2_rotary")),  # MLA
    rope("deepseek_v3", "DeepseekV3ForCausalLM", rotary=rotaries("deepseek_v3_rotary")),  # MLA
    rope("exaone4", "Exaone4ForCausalLM", rope_layers=rotaries("exaone4_layers_rotate")),
    rope("falcon_h1", "FalconH1ForCausalLM", since=RECURRENT),  # attention and Mamba 2 in every layer
    rope("gemma", "GemmaForCausalLM"),
    rope("gemma2", "Gemma2ForCausalLM"),  # sliding and full layers alternate
    rope("gemma3_text", "Gemma3ForCausalLM"),  # one rotary base per layer type
    rope("gemma3n_text", "Gemma3nForCausalLM", since=SHARED_KV),  # KV sharing
    rope("gemma4_text", "Gemma4ForCausalLM"),  # KV sharing, proportional RoPE on full layers
    rope("glm4", "Glm4ForCausalLM"),
    learned("gpt2", "GPT2LMHeadModel", max_positions="n_positions", label="GPT-2"),
    rope("gpt_neox", "GPTNeoXForCausalLM"),  # partial rotary
    rope("gpt_oss", "GptOssForCausalLM", rotary=rotaries("half_tables")),  # learned per-head sink logits
    rope("granite", "GraniteForCausalLM"),
    rope("granitemoehybrid", "GraniteMoeHybridForCausalLM", since=RECURRENT),
    rope("helium", "HeliumForCausalLM"),
    no_positions("jamba", "JambaForCausalLM", since=RECURRENT),  # Mamba layers and NoPE attention
    rope("lfm2", "Lfm2ForCausalLM", since=RECURRENT),  # short convolutions and attention
    rope("llama", "LlamaForCausalLM"),
    rope("llama4_text", "Llama4ForCausalLM", rotary=rotaries("llama4_rotary")),  # chunked RoPE and global NoPE
    rope("ministral", "MinistralForCausalLM"),
    rope("mistral", "MistralForCausalLM"),
    rope("mixtral", "MixtralForCausalLM"),
    no_positions("nemotron_h", "NemotronHForCausalLM", since=RECURRENT),
    rope("olmo", "OlmoForCausalLM"),
    rope("olmo2", "Olmo2ForCausalLM"),
    rope("olmo3", "Olmo3ForCausalLM"),  # one rotary per layer type
    # OPT offsets its position table by 2 inside the model: cachelimit passes the real-token index, as transformers does
    learned("opt", "OPTForCausalLM", max_positions="max_position_embeddings", label="OPT"),
    rope("phi", "PhiForCausalLM"),
    rope("phi3", "Phi3ForCausalLM"),
    rope("qwen2", "Qwen2ForCausalLM"),
    rope("qwen3", "Qwen3ForCausalLM"),
    rope("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", since=RECURRENT),
    rope("qwen3_5_text", "Qwen3_5ForCausalLM", since=RECURRENT),  # gated delta net layers
    rope("qwen3_moe", "Qwen3MoeForCausalLM"),
    rope("qwen3_next", "Qwen3NextForCausalLM", since=RECURRENT),
    rope("smollm3", "SmolLM3ForCausalLM"),  # NoPE layers keep their sinks as written
    rope("stablelm", "StableLmForCausalLM"),
    rope("starcoder2", "Starcoder2ForCausalLM"),
    rope("zamba2", "Zamba2ForCausalLM", since=RECURRENT),  # Mamba 2 layers with shared attention blocks
)

#: model_type -> Family, for every served family
FAMILIES = MappingProxyType({family.name: family for family in TABLE})
