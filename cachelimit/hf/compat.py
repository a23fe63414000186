"""Every difference between the transformers releases cachelimit supports, in one place.

cachelimit bridges transformers 4.57.6 (the last 4.x) through 5.24.x (`SUPPORTED_RANGE`, as pyproject.toml). Each
difference that matters is one constant or function here, commented with its release, so the rest of the code never
compares versions and a new release is one entry here (and a leg: `python tools/leg.py <version>`). A difference that
can be bridged is (a name, a missing method); a feature an old release lacks is refused naming the release (`require`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from packaging.version import Version
from transformers import GenerationConfig, PreTrainedModel, cache_utils
from transformers.cache_utils import CacheLayerMixin

# the supported range and the release checks, re-exported: code that bridges a difference imports `compat` only
from .releases import (  # noqa: F401
    EXCLUDED_SERIES,
    FIRST_UNSUPPORTED,
    OLDEST_SUPPORTED,
    SUPPORTED_RANGE,
    TRANSFORMERS,
    at_least,
    check_supported,
    is_supported,
    require,
)

# --- 5.24.0: `past_key_values` is renamed `cache` (generate, prepare_inputs_for_generation, forward, outputs).
# The old name is still accepted by 5.24's `generate` (with a FutureWarning); outputs keep a
# `past_key_values` property. Users may pass either name; cachelimit hands the cache on under the release's.
CACHE_ARGUMENT = "cache" if at_least("5.24.0") else "past_key_values"
_CACHE_NAMES = ("cache", "past_key_values")


def passed_cache(kwargs: dict[str, Any]):
    """The cache a `generate`/`prepare_inputs_for_generation` call was given, under either name (or None)."""
    for name in (CACHE_ARGUMENT, "past_key_values"):
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def with_cache(kwargs: dict[str, Any], cache) -> dict[str, Any]:
    """`kwargs` with `cache` under the installed release's argument name (any other spelling removed)."""
    kwargs = {key: value for key, value in kwargs.items() if key not in _CACHE_NAMES}
    kwargs[CACHE_ARGUMENT] = cache
    return kwargs


def output_cache(output):
    """The cache a `generate`/forward output returns (`.cache` from 5.24.0 on, `.past_key_values` before)."""
    return getattr(output, CACHE_ARGUMENT, None)


# --- 5.0.0: RoPE settings live in one config field, `rope_parameters` (theta included); 4.x spread them over
# `rope_theta` and `rope_scaling`.
def rope_config(rope_parameters: dict[str, Any]) -> dict[str, Any]:
    """Config keyword arguments that give a RoPE model `rope_parameters` (5.x spelling) on this release."""
    if at_least("5.0.0"):
        return {"rope_parameters": dict(rope_parameters)}
    scaling = {key: value for key, value in rope_parameters.items() if key != "rope_theta"}
    config = {"rope_scaling": scaling if scaling.get("rope_type", "default") != "default" else None}
    if "rope_theta" in rope_parameters:
        config["rope_theta"] = rope_parameters["rope_theta"]
    return config


def uses_rope(config) -> bool:
    """Whether a model's config sets RoPE (5.x: `rope_parameters`; 4.x: `rope_theta`; GPT-J and CodeGen, whose
    rotary table has a fixed base: `rotary_dim`, None for the whole head)."""
    if hasattr(config, "rotary_dim"):
        return True
    return getattr(config, "rope_parameters", None) is not None or getattr(config, "rope_theta", None) is not None


# --- 5.2.0: generate keeps `position_ids` among its model kwargs and advances them every step (a user's too);
# before, `prepare_inputs_for_generation` derived them from the mask at each step, with pads at position 1, and
# passed a user's unchanged (so after the prompt every step reused its last column).
GENERATE_ADVANCES_POSITION_IDS = "5.2.0"
#: The position transformers gives a pad when its prepare step derives positions from the mask (None: it does not).
MASK_POSITION_OF_PADS = None if at_least(GENERATE_ADVANCES_POSITION_IDS) else 1


# --- 5.0.0: one rotary module at the decoder body. 4.x keeps others where nothing maps them to layers generically: one
# per layer type (Gemma 3's `rotary_emb_local`, OLMo 3's `rotary_embs`, ModernBERT decoder's `local_rotary_emb`), or
# one inside every attention layer (JetMoE, DBRX).
def rotaries_apart(model: torch.nn.Module) -> str | None:
    """Where a 4.x model keeps its rotaries apart (attention sinks, which move keys with the layer's own rotary, are
    refused there: `require(..., "5.0.0")`), or None."""
    body = decoder_body(model)
    # 4.x OLMo 3 keeps `rotary_embs` per layer type; 5.x Granite SWA one per base, which its family finds itself
    apart = ("rotary_emb_local", "local_rotary_emb") + (() if at_least("5.0.0") else ("rotary_embs",))
    if any(getattr(body, name, None) is not None for name in apart):
        return "one rotary module per layer type"
    if at_least("5.0.0") or getattr(body, "rotary_emb", None) is not None:
        return None
    in_each_layer = any(name.endswith(".rotary_emb") for name, _ in model.named_modules())
    return "a rotary module in each attention layer" if in_each_layer else None


# --- 5.24.0: GPT-J and CodeGen read their sinusoidal rotary table through one rotary module at the decoder body, which
# returns (sin, cos); before, each attention layer held a copy of the table (`embed_positions`) and read it itself.
def rotary_table(model: torch.nn.Module):
    """`(probe, positions) -> (sin, cos)`: the rows of GPT-J's or CodeGen's rotary table at `positions` (>= 0)."""
    rotary = getattr(decoder_body(model), "rotary_emb", None)
    if rotary is not None:
        return rotary
    tables = (getattr(module, "embed_positions", None) for module in model.modules())
    table = next(table for table in tables if isinstance(table, torch.Tensor))

    def sin_cos(probe: torch.Tensor, positions: torch.Tensor):
        rows = table.to(positions.device)[positions].to(probe.dtype)
        return rows.split(rows.shape[-1] // 2, dim=-1)

    return sin_cos


# --- 5.0.0: 4.x PhiMoE computes its rotary from the sequence length and builds its own window mask, 4.x Qwen2-MoE
# builds its own window mask, and 4.x XGLM requires a 4D mask as wide as the whole past: their bounded runs need 5.x
# modeling code (`Family.since`).
MODELING_TAKES_MASKS = "5.0.0"


# --- 5.0.0: `get_decoder()` finds every causal LM's decoder body through its `base_model`; 4.x looked for a
# `decoder` or `model` attribute and returned the LM itself when it had neither (GPT-2: `transformer`), while
# 4.x Gemma3ForCausalLM's `base_model` is the LM itself (its prefix names an attribute it lacks).
def decoder_body(model: torch.nn.Module) -> torch.nn.Module:
    """The module that holds the decoder layers and the rotary embedding, and that every forward of a generation
    passes through (OPT's LM calls its decoder past its base model; 4.x runs prefill chunks through the LM's
    `forward`). Only a `PreTrainedModel` counts: ModernBERT decoder's `decoder` attribute is its output projection."""
    decoder = model.get_decoder()
    body = model.base_model if decoder is model or not isinstance(decoder, PreTrainedModel) else decoder
    if body is model:  # a prefix that names no attribute (Llama 4's `language_model`): the decoder is its `model`
        body = getattr(model, "model", model)
    return body


# --- 5.0.0: a chunked prefill runs every chunk through the model's `__call__` (4.x called `forward`) and the whole
# prompt (4.x held the last token back for the first decoding step): the same tokens; tests counting forwards care.
CHUNKED_PREFILL_HOLDS_BACK_LAST_TOKEN = not at_least("5.0.0")


# --- 5.0.0: 4.x's chunked prefill also passes `position_ids = cache_position[None]`, counted from 0 on every row
# whatever its left padding (5.0.0 leaves them out, so positions come from the attention mask).
CHUNKED_PREFILL_IGNORES_PADDING = not at_least("5.0.0")


def chunk_positions_ignore_padding(position_ids: torch.Tensor | None, cache_position: torch.Tensor | None) -> bool:
    """Whether `position_ids` are the padding-blind ones a 4.x chunked prefill passes (a bounded run then uses
    the positions it computes from the mask, as every 5.x release and the non-chunked path do)."""
    if not CHUNKED_PREFILL_IGNORES_PADDING or position_ids is None or cache_position is None:
        return False
    same_shape = position_ids.dim() == 2 and position_ids.shape[-1] == cache_position.shape[-1]
    return same_shape and bool((position_ids == cache_position.to(position_ids.device)[None]).all())


# --- 5.0.0: `GenerationConfig.update(..., defaults_only=True)` fills only the fields a config leaves unset (None);
# 4.x had no such flag (its update overwrote every field) and `generate` filled, from the model's defaults, the
# fields a passed config left at the library default.
def fill_generation_defaults(config: GenerationConfig, defaults: dict[str, Any]) -> None:
    """Complete a passed generation config with the model's defaults the way the installed `generate` does."""
    if at_least("5.0.0"):
        config.update(**defaults, defaults_only=True)
        return
    library = GenerationConfig()
    for key, value in defaults.items():
        if hasattr(config, key) and getattr(config, key) == getattr(library, key, None):
            setattr(config, key, value)


# --- 5.4.0: the mask builders (`masking_utils.sdpa_mask`, `eager_mask`) take `q_length` (and `q_offset`) where
# earlier releases took `cache_position`, the tensor of the queries' columns.
def query_arguments(queries: int, device: torch.device) -> dict[str, Any]:
    """The keyword arguments that tell a mask builder there are `queries` queries, starting at column 0."""
    if at_least("5.4.0"):
        return {"q_length": queries}
    return {"cache_position": torch.arange(queries, device=device)}


# --- 5.4.0: likewise a cache layer's `get_mask_sizes` gets the number of queries (before: `cache_position`).
def query_length(argument: int | torch.Tensor) -> int:
    """The number of queries from what `get_mask_sizes` was given, on any release."""
    return argument.shape[0] if isinstance(argument, torch.Tensor) else int(argument)


# --- <= 5.12.1 (and 4.57.6): `CacheLayerMixin.get_max_cache_shape` is abstract (later releases dropped it).
class CacheLayer(CacheLayerMixin):
    """`CacheLayerMixin` with the methods some releases declare abstract, for the benchmark's ideal layer."""

    def get_max_cache_shape(self) -> int:
        return self.get_max_length()


# --- 5.21.0: transformers' `QuantizedCache` gains the `fp8` backend (before: "Unknown quantization backend fp8").
FP8_QUANTIZED_CACHE = "5.21.0"

# --- 5.21.0: a chunked prefill starts after what the given cache already holds; before, it re-read the prompt
# from column 0, so a returned cache cannot be continued with `prefill_chunk_size` (refused, naming 5.21.0).
CHUNKED_PREFILL_AFTER_A_CACHE = "5.21.0"

# --- 5.23.0: `generate`'s repetition penalty skips each row's left padding (`prompt_ignore_length` per row);
# before, pad tokens in the prompt counted as seen tokens and were penalised too.
REPETITION_PENALTY_SKIPS_LEFT_PADDING = at_least("5.23.0")


# --- 5.0.0: configs are dataclasses; 4.x configs declare their settings as `__init__` keyword arguments.
def config_fields(config_class: type) -> set[str]:
    """The settings a config class declares. 5.x configs are dataclasses (their fields); 4.x configs take them
    as `__init__` keyword arguments. Both, plus the class's `attribute_map` aliases."""
    fields = set(getattr(config_class, "__dataclass_fields__", ()))
    fields |= set(inspect.signature(config_class.__init__).parameters) - {"self", "kwargs"}
    return fields | set(config_class.attribute_map)


# --- 5.6.0: 5.3.0 to 5.5.x read a GGUF Llama's tokenizer as a CodeLlamaTokenizer, and SmolLM2 loaded that way
# continues "The capital of France is" with " a country in" (4.57.6 and 5.6.0 on: " Paris."). Measured on 5.3.0,
# 5.4.0, 5.5.0 (wrong) and 5.6.0, 5.7.0, 5.8.0, 5.11.0 (right).
GGUF_LLAMA_MISREAD = ("5.3.0", "5.6.0")


def gguf_llama_misread(installed: Version = TRANSFORMERS) -> bool:
    """Whether this transformers loads a GGUF Llama wrongly (the real model `smollm2` is refused there)."""
    return Version(GGUF_LLAMA_MISREAD[0]) <= installed < Version(GGUF_LLAMA_MISREAD[1])


# --- 5.6.0: Gemma 3n's KV-sharing layers read what the layer they share with returned from the forward's
# `shared_kv_states`; before, from `past_key_values.shared_layers` (transformers' own DynamicCache). Gemma 4 came later.
SHARED_KV_STATES = "5.6.0"

# --- Recurrent layers (SSM, linear attention, short convolutions). 5.13.0: their padding mask comes in the
# per-layer-type mask dict (`create_recurrent_attention_mask`; before, the 2D mask). 5.14.0: their cache is built from
# layers (`get_layer_types_and_kwargs`, `LinearAttentionLayer`). 5.15.0: their mixers carry the cached state through a
# forward of several tokens after the first, where they do at all (`hf.recurrent_state` probes which; 5.14.0's LFM2,
# Nemotron-H and Zamba 2 misapply it), as a chunked prefill or new text after a cache needs. Served from 5.15.0: on
# 5.14.0 Nemotron-H's MLP blocks have no cache layer class, Zamba 2's mask dict is read as a tensor and transformers'
# own runs of one prompt disagree (measured 2026-12-02).
RECURRENT_LAYERS = "5.15.0"
RECURRENT_STATE_CARRIED = "5.15.0"

# --- 5.19.0: Qwen 3.5's text models (gated delta net and attention layers) rotate by 2D positions; before, their
# rotary took the 3D positions of the multimodal model only (measured on 5.18.0: an IndexError on sink keys' positions).
QWEN3_5_TEXT_ROTARY = "5.19.0"

# --- 5.15.0: DeepSeek V2/V3 (MLA) cache the compressed latent as keys and the shared rotary key as values; before,
# the keys were `[nope | rope]` per head and the values had their own head dimension.
MLA_CACHES_LATENT = at_least("5.15.0")

# --- 5.23.0: `cache_utils.DummyLayer` holds the place of a layer that keeps no cache (a KV-sharing consumer, an MLP
# block of a hybrid); before, transformers' DynamicCache left the trailing KV-sharing layers out.
DUMMY_LAYER = getattr(cache_utils, "DummyLayer", None)


def cache_layer_types(config) -> tuple[list[str], list[dict[str, Any]]]:
    """transformers' cache layer type of every decoder layer ("linear_attention", "conv", "hybrid", "dummy" beside the
    attention types) and its layer class's keyword arguments. From 5.14.0 `get_layer_types_and_kwargs` (to 5.18.0:
    one keyword dict for all, trailing KV-sharing layers left out; from 5.19.0: a dict per layer, sharers "dummy")."""
    if hasattr(cache_utils, "get_layer_types_and_kwargs"):
        layer_types, layer_kwargs = cache_utils.get_layer_types_and_kwargs(config)
        if isinstance(layer_kwargs, list):
            return layer_types, layer_kwargs
        layer_types = list(layer_types) + [""] * (config.num_hidden_layers - len(layer_types))
    else:
        window = getattr(config, "sliding_window", None)
        uniform = "sliding_attention" if isinstance(window, int) and window > 0 else "full_attention"
        layer_types = list(getattr(config, "layer_types", None) or [uniform] * config.num_hidden_layers)
        layer_kwargs = {}
    shared = kv_shared_layers(config)
    layer_types = ["dummy" if reuse else kind for kind, reuse in zip(layer_types, shared, strict=True)]
    return layer_types, [dict(layer_kwargs) for _ in layer_types]


def placeholder_types() -> tuple[str, ...]:
    """Cache layer types of layers without attention (Nemotron-H's MLP and MoE blocks) that releases before 5.23.0
    give a placeholder layer of their own class, so the layer indices line up (5.23.0 on: "dummy")."""
    mapping = getattr(cache_utils, "DYNAMIC_LAYER_TYPE_MAPPING", {})
    return tuple(kind for kind in ("moe", "mlp") if kind in mapping)


def kv_shared_layers(config) -> list[bool]:
    """Per layer: whether it reads another's keys and values (Gemma 3n, 4): `kv_sharing_modes`, else the last
    `num_kv_shared_layers`."""
    modes = getattr(config, "kv_sharing_modes", None)
    if modes is not None:
        return [mode == "reuse" for mode in modes]
    shared, layers = getattr(config, "num_kv_shared_layers", 0) or 0, config.num_hidden_layers
    return [0 < layers - shared <= index for index in range(layers)]


def recurrent_mask(config, attention_mask: torch.Tensor | None, num_new: int, cache) -> torch.Tensor | None:
    """transformers' mask of recurrent layers (their padding, or None) for `num_new` new tokens (5.13.0)."""
    from transformers.masking_utils import create_recurrent_attention_mask

    shape_only = torch.empty(attention_mask.shape[0] if attention_mask is not None else 1, num_new, 0)
    return create_recurrent_attention_mask(
        config=config, inputs_embeds=shape_only, attention_mask=attention_mask, **{CACHE_ARGUMENT: cache}
    )
