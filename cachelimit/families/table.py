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

from .registry import Family, learned, rope

TABLE: tuple[Family, ...] = (
    rope("apertus", "ApertusForCausalLM"),
    rope("arcee", "ArceeForCausalLM"),
    rope("cohere", "CohereForCausalLM"),  # interleaved rotary pairs: its own apply_rotary_pos_emb moves them
    rope("ernie4_5", "Ernie4_5ForCausalLM"),  # interleaved rotary pairs
    rope("gemma", "GemmaForCausalLM"),
    rope("gemma2", "Gemma2ForCausalLM"),  # sliding and full layers alternate
    rope("gemma3_text", "Gemma3ForCausalLM"),  # one rotary base per layer type
    rope("glm", "GlmForCausalLM"),  # interleaved, partial rotary
    rope("glm4", "Glm4ForCausalLM"),
    learned("gpt2", "GPT2LMHeadModel", max_positions="n_positions", label="GPT-2", aliases=("gpt-sw3",)),
    rope("gpt_neox", "GPTNeoXForCausalLM"),  # partial rotary
    rope("granite", "GraniteForCausalLM"),
    rope("granitemoe", "GraniteMoeForCausalLM"),
    rope("helium", "HeliumForCausalLM"),
    rope("llama", "LlamaForCausalLM", aliases=("exaone", "internlm3", "iquestcoder")),  # their configs, Llama's class
    rope("ministral", "MinistralForCausalLM"),
    rope("mistral", "MistralForCausalLM"),
    rope("mixtral", "MixtralForCausalLM"),
    rope("olmo", "OlmoForCausalLM"),
    rope("olmo2", "Olmo2ForCausalLM"),
    rope("olmoe", "OlmoeForCausalLM"),
    # OPT offsets its position table by 2 inside the model: cachelimit passes the real-token index, as transformers does
    learned("opt", "OPTForCausalLM", max_positions="max_position_embeddings", label="OPT"),
    rope("phi", "PhiForCausalLM"),
    rope("phi3", "Phi3ForCausalLM"),
    rope("phimoe", "PhimoeForCausalLM"),
    rope("qwen2", "Qwen2ForCausalLM"),
    rope("qwen2_moe", "Qwen2MoeForCausalLM"),
    rope("qwen3", "Qwen3ForCausalLM"),
    rope("qwen3_moe", "Qwen3MoeForCausalLM"),
    rope("seed_oss", "SeedOssForCausalLM"),
    rope("smollm3", "SmolLM3ForCausalLM"),  # NoPE layers keep their sinks as written
    rope("stablelm", "StableLmForCausalLM"),
    rope("starcoder2", "Starcoder2ForCausalLM"),
)

#: model_type -> Family, for every served family
FAMILIES = MappingProxyType({family.name: family for family in TABLE})

#: model_type -> Family, for every model type cachelimit serves: the families and their aliases (model types whose
#: configs transformers builds into a family's classes)
SERVED_TYPES = MappingProxyType(
    {**{alias: family for family in TABLE for alias in family.aliases}, **{family.name: family for family in TABLE}}
)
