"""Every family cachelimit serves: one entry each, named by the config's `model_type`.

Adding a family is one line here (and one test declaration, `tests/models/test_<family>.py`): `rope(...)` for a
decoder whose keys carry rotary positions, `learned(...)` for learned absolute positions, `sinusoidal(...)` for a
sinusoidal table added to the embeddings. Everything else (the attention type and window of each layer, which layers
rotate, partial rotary, NoPE layers) is read from the model itself (`cachelimit.hf.layout`). What a family cannot
serve exactly is refused by its `check_request` (`families.checks`); the model types cachelimit does not serve at all
are refused, with the reason, in `families.refusals`.
"""

from __future__ import annotations

from types import MappingProxyType

from .checks import NORM_AFTER_ROTATION, no_alibi, query_scale_by_position
from .registry import Family, learned, no_positions, rope, sinusoidal


def rotaries(name: str):
    """`cachelimit.families.rotaries.<name>`, imported at its first call (this table imports no torch)."""

    def call(*args):
        from . import rotaries as module

        return getattr(module, name)(*args)

    call.__name__ = call.__qualname__ = name
    return call


#: why a family needs a release: (what needs it, the name of that release's constant in `cachelimit.hf.compat`)
RECURRENT = ("recurrent layers in a cache made of layers", "RECURRENT_LAYERS")
PHIMOE_4X = ("4.x PhiMoE's rotary and window mask are its own", "MODELING_TAKES_MASKS")
QWEN2_MOE_4X = ("4.x Qwen2-MoE's window mask is its own", "MODELING_TAKES_MASKS")
XGLM_4X = ("4.x XGLM requires a 4D mask as wide as the past", "MODELING_TAKES_MASKS")
SHARED_KV = ("KV-sharing layers that read `shared_kv_states`", "SHARED_KV_STATES")
QWEN3_5_ROTARY = ("Qwen 3.5's text rotary on 2D positions (before: 3D multimodal ones only)", "QWEN3_5_TEXT_ROTARY")

TABLE: tuple[Family, ...] = (
    rope("afmoe", "AfmoeForCausalLM", rotary_layers=rotaries("local_layers_rotate")),  # full layers are NoPE
    rope("apertus", "ApertusForCausalLM"),
    rope("apertus1p5_text", "Apertus1p5TextForCausalLM"),
    rope("arcee", "ArceeForCausalLM"),
    rope("aria_text", "AriaTextForCausalLM"),
    rope("axk1", "AXK1ForCausalLM", rotary=rotaries("mla_rotary")),  # MLA
    rope("bamba", "BambaForCausalLM", since=RECURRENT),  # Mamba 2 layers and a few attention layers
    learned("biogpt", "BioGptForCausalLM", max_positions="max_position_embeddings", label="BioGPT"),
    rope("bitnet", "BitNetForCausalLM"),
    # GPT-J and CodeGen: interleaved pairs from a rotary table of n_positions rows, rotated as (tensor, sin, cos)
    rope(
        "codegen",
        "CodeGenForCausalLM",
        max_positions="n_positions",
        rotary=rotaries("table_rotary"),
        rotary_layers=rotaries("every_layer_rotates"),
    ),
    rope("cohere", "CohereForCausalLM"),  # interleaved rotary pairs: its own apply_rotary_pos_emb moves them
    rope("cohere2", "Cohere2ForCausalLM", rotary_layers=rotaries("sliding_layers_rotate")),  # full layers are NoPE
    rope("cohere2_moe", "Cohere2MoeForCausalLM", rotary_layers=rotaries("cohere2_moe_layers_rotate")),
    rope("cwm", "CwmForCausalLM"),
    rope("dbrx", "DbrxForCausalLM"),  # fused, clipped qkv projection
    rope("deepseek_v2", "DeepseekV2ForCausalLM", rotary=rotaries("deepseek_v2_rotary")),  # MLA
    rope("deepseek_v3", "DeepseekV3ForCausalLM", rotary=rotaries("mla_rotary")),  # MLA
    rope("diffllama", "DiffLlamaForCausalLM"),
    rope("dots1", "Dots1ForCausalLM"),
    rope("ernie4_5", "Ernie4_5ForCausalLM"),  # interleaved rotary pairs
    rope("ernie4_5_moe", "Ernie4_5_MoeForCausalLM"),
    rope("exaone4", "Exaone4ForCausalLM", rotary_layers=rotaries("exaone4_layers_rotate")),
    rope("exaone_moe", "ExaoneMoeForCausalLM", rotary_layers=rotaries("exaone4_layers_rotate")),
    rope("falcon", "FalconForCausalLM", check_request=no_alibi),  # ALiBi (Falcon-RW) refused
    rope("falcon_h1", "FalconH1ForCausalLM", since=RECURRENT),  # attention and Mamba 2 in every layer
    rope("flex_olmo", "FlexOlmoForCausalLM"),
    rope("flint", "FlintForCausalLM", rotary_layers=rotaries("sliding_layers_rotate")),  # full layers are NoPE
    rope("gemma", "GemmaForCausalLM"),
    rope("gemma2", "Gemma2ForCausalLM"),  # sliding and full layers alternate
    rope("gemma3_text", "Gemma3ForCausalLM"),  # one rotary base per layer type
    rope("gemma3n_text", "Gemma3nForCausalLM", since=SHARED_KV),  # KV sharing
    rope("gemma4_text", "Gemma4ForCausalLM"),  # KV sharing, proportional RoPE on full layers
    rope("glm", "GlmForCausalLM"),  # interleaved, partial rotary
    rope("glm4", "Glm4ForCausalLM"),
    rope("glm4_moe", "Glm4MoeForCausalLM", aliases=("sarvam_moe",)),
    rope("glm4_moe_lite", "Glm4MoeLiteForCausalLM", rotary=rotaries("mla_rotary")),  # MLA
    learned("gpt2", "GPT2LMHeadModel", max_positions="n_positions", label="GPT-2", aliases=("gpt-sw3",)),
    learned("gpt_bigcode", "GPTBigCodeForCausalLM", max_positions="n_positions", label="GPTBigCode"),
    rope("gpt_neox", "GPTNeoXForCausalLM"),  # partial rotary
    rope("gpt_neox_japanese", "GPTNeoXJapaneseForCausalLM"),  # partial rotary
    rope("gpt_oss", "GptOssForCausalLM", rotary=rotaries("half_tables")),  # learned per-head sink logits
    rope(
        "gptj",
        "GPTJForCausalLM",
        max_positions="n_positions",
        rotary=rotaries("table_rotary"),
        rotary_layers=rotaries("every_layer_rotates"),
        label="GPT-J",
    ),
    rope("granite", "GraniteForCausalLM"),
    # Granite SWA: learned per-head sink logits on every layer, one rotary base per layer (0: NoPE)
    rope(
        "granite_swa",
        "GraniteSWAForCausalLM",
        rotary=rotaries("base_rotary"),
        rotary_layers=rotaries("rotary_per_base"),
    ),
    rope("granitemoe", "GraniteMoeForCausalLM"),
    rope(
        "granitemoe_swa",
        "GraniteMoeSWAForCausalLM",
        rotary=rotaries("base_rotary"),
        rotary_layers=rotaries("rotary_per_base"),
    ),
    rope("granitemoehybrid", "GraniteMoeHybridForCausalLM", since=RECURRENT),
    rope("granitemoeshared", "GraniteMoeSharedForCausalLM"),
    rope("helium", "HeliumForCausalLM"),
    rope("hunyuan_v1_dense", "HunYuanDenseV1ForCausalLM", check_request=NORM_AFTER_ROTATION),
    rope("hunyuan_v1_moe", "HunYuanMoEV1ForCausalLM", check_request=NORM_AFTER_ROTATION),
    rope("hy_v3", "HYV3ForCausalLM"),
    rope("hyperclovax", "HyperCLOVAXForCausalLM"),
    rope("jais2", "Jais2ForCausalLM"),
    no_positions("jamba", "JambaForCausalLM", since=RECURRENT),  # Mamba layers and NoPE attention
    rope("jetmoe", "JetMoeForCausalLM"),
    rope("kolibri1", "Kolibri1ForCausalLM", rotary_layers=rotaries("exaone4_layers_rotate")),
    rope("laguna", "LagunaForCausalLM"),  # one rotary base and share per layer type
    rope("lfm2", "Lfm2ForCausalLM", since=RECURRENT),  # short convolutions and attention
    rope("llama", "LlamaForCausalLM", aliases=("code_llama", "exaone", "internlm3", "iquestcoder")),  # Llama's class
    rope("llama4_text", "Llama4ForCausalLM", rotary=rotaries("llama4_rotary")),  # chunked RoPE and global NoPE
    rope("mellum", "MellumForCausalLM"),  # one rotary base per layer type
    rope("mimo_v2_flash", "MiMoV2FlashForCausalLM"),  # learned sink logits on sliding layers, own KV heads there
    rope("minicpm3", "MiniCPM3ForCausalLM", rotary=rotaries("mla_rotary")),  # MLA
    rope("minimax_m2", "MiniMaxM2ForCausalLM"),
    rope("ministral", "MinistralForCausalLM"),
    rope("ministral3", "Ministral3ForCausalLM", check_request=query_scale_by_position),
    rope("mistral", "MistralForCausalLM"),
    rope("mixtral", "MixtralForCausalLM"),
    rope("modernbert-decoder", "ModernBertDecoderForCausalLM"),  # one rotary base per layer type
    rope("nanochat", "NanoChatForCausalLM"),  # weightless q/k norms after the rotation commute with it
    rope("nemotron", "NemotronForCausalLM"),  # partial rotary
    no_positions("nemotron_h", "NemotronHForCausalLM", since=RECURRENT),
    rope("olmo", "OlmoForCausalLM"),
    rope("olmo2", "Olmo2ForCausalLM"),
    rope("olmo3", "Olmo3ForCausalLM"),  # one rotary per layer type
    rope("olmoe", "OlmoeForCausalLM"),
    # OPT offsets its position table by 2 inside the model: cachelimit passes the real-token index, as transformers does
    learned("opt", "OPTForCausalLM", max_positions="max_position_embeddings", label="OPT"),
    rope("persimmon", "PersimmonForCausalLM"),  # partial rotary
    rope("phi", "PhiForCausalLM"),
    rope("phi3", "Phi3ForCausalLM"),
    # 4.x PhiMoE computes its rotary from the sequence length, not the positions, and builds its own window mask
    rope("phimoe", "PhimoeForCausalLM", since=PHIMOE_4X),
    rope("qwen2", "Qwen2ForCausalLM"),
    # 4.x Qwen2-MoE builds its own window mask and slides the layers from max_window_layers on (no layer_types)
    rope("qwen2_moe", "Qwen2MoeForCausalLM", since=QWEN2_MOE_4X),
    rope("qwen3", "Qwen3ForCausalLM"),
    rope("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", since=QWEN3_5_ROTARY),
    rope("qwen3_5_text", "Qwen3_5ForCausalLM", since=QWEN3_5_ROTARY),  # gated delta net layers
    rope("qwen3_moe", "Qwen3MoeForCausalLM"),
    rope("qwen3_next", "Qwen3NextForCausalLM", since=RECURRENT),
    rope("seed_oss", "SeedOssForCausalLM"),
    rope("smollm3", "SmolLM3ForCausalLM"),  # NoPE layers keep their sinks as written
    rope("solar_open", "SolarOpenForCausalLM"),
    rope("stablelm", "StableLmForCausalLM"),
    rope("starcoder2", "Starcoder2ForCausalLM"),
    rope("vaultgemma", "VaultGemmaForCausalLM"),
    # the model extends its table as the sequence grows; 4.x checks the 4D mask's width against the whole past
    sinusoidal("xglm", "XGLMForCausalLM", since=XGLM_4X),
    rope("youtu", "YoutuForCausalLM", rotary=rotaries("mla_rotary")),  # MLA
    rope("zamba2", "Zamba2ForCausalLM", since=RECURRENT),  # Mamba 2 layers with shared attention blocks
)

#: model_type -> Family, for every served family
FAMILIES = MappingProxyType({family.name: family for family in TABLE})

#: model_type -> Family, for every model type cachelimit serves: the families and their aliases (model types whose
#: configs transformers builds into a family's classes)
SERVED_TYPES = MappingProxyType(
    {**{alias: family for family in TABLE for alias in family.aliases}, **{family.name: family for family in TABLE}}
)
