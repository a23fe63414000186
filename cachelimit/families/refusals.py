"""Every causal-LM model type of transformers that cachelimit does not serve, with the reason, in one line each.

`cachelimit.patch(name)`, the command line and the coverage table (`docs/coverage/`) read these, so a user
of a refused type reads why, and a model type that is neither served (`families.table`) nor refused here is
*unclassified*: `tests/test_coverage.py` fails on it, so a new transformers release is classified before it is
claimed. Like the family table, this module imports no torch.
"""

from __future__ import annotations

from types import MappingProxyType

from .checks import ALIBI
from .table import SERVED_TYPES

ENCODER_DECODER = (
    "the decoder half of an encoder-decoder model (its layers also attend to the encoder's states through a "
    "cross-attention cache); cachelimit serves decoder-only language models"
)
ENCODER = (
    "an encoder (BERT-style, bidirectional by design) that transformers can run with a causal LM head for "
    "fine-tuning; cachelimit serves decoder-only language models"
)
STATE_SPACE = "no attention KV cache to bound: a recurrent (state-space) model whose state already has a fixed size"
INDEXED = (
    "indexed sparse attention (a learned indexer picks the top-k keys, with a second cache of index keys): its "
    "selection over a bounded cache is not served"
)
LATENT = (
    "multi-head latent attention (kv_lora_rank: keys split into position-free and rotary parts with their own head "
    "dims): not served yet"
)
LINEAR = (
    "linear-attention or state-space layers (their recurrent state is not a window of keys) between its attention "
    "layers: not served yet"
)
NOPE_FULL = (
    "only its sliding layers rotate their keys (its full layers are NoPE, set by the layer type), which "
    "cachelimit does not read yet, so sink keys would be moved on the wrong layers: not served yet"
)
LEARNED_SINKS = (
    "learned per-head attention sinks (`s_aux`) in its sliding layers, between full layers of their own kind: not "
    "served yet"
)
DEPRECATED = "deprecated by transformers (kept unmaintained under transformers.models.deprecated, removed in 5.0)"
SPEECH = "a speech or audio model: its decoder reads audio or codebook streams, not a text KV cache cachelimit serves"


def multimodal(text_model: str) -> str:
    """The reason of a multimodal wrapper, naming its text model (and whether cachelimit serves it)."""
    status = "which cachelimit serves" if text_model in SERVED_TYPES else "which cachelimit does not serve either"
    return f"a multimodal model: its text decoder is model type {text_model!r} ({status}); load and bound that"


def hybrid(feature: str) -> str:
    """A hybrid whose layer kind cachelimit does not serve yet (the served hybrids' layer kinds: `hf.layer_types`)."""
    return f"not served yet: {feature}"


#: model_type -> why cachelimit does not serve it (one line: `patch(model_type)` raises a ValueError with it)
REFUSALS = MappingProxyType(
    {
        "axk2": INDEXED,
        "bailing_hybrid": LINEAR,
        "bart": ENCODER_DECODER,
        "beam": "its NoPE layers scale the queries by their absolute position (attention_scaling), so sinks change "
        "their scores and the sliding layers differ from StreamingLLM's: not served yet",
        "bert": ENCODER,
        "bert-generation": ENCODER,
        "big_bird": ENCODER,
        "bigbird_pegasus": ENCODER_DECODER,
        "blenderbot": ENCODER_DECODER,
        "blenderbot-small": ENCODER_DECODER,
        "bloom": ALIBI,
        "blt": "a byte latent transformer: local byte encoders and decoders cross-attend to patch states, which a "
        "bounded self-attention cache does not cover",
        "camembert": ENCODER,
        "cohere_compass_text": "an embedding backbone with bidirectional layers (is_causal=False), not a causal "
        "decoder",
        "cpmant": "a relative position bias (position_bias) computed from the query and key positions of a full "
        "sequence, which a bounded cache's slots do not keep in order",
        "ctrl": "sinusoidal positions and a past of its own layout; not served yet",
        "data2vec-text": ENCODER,
        "deepseek_v32": INDEXED,
        "deepseek_v4": "compressed sparse attention (compressed and heavily compressed key caches with an indexer): "
        "not a window of keys",
        "doge": "dynamic mask attention: the mask is built from the values of every cached key (top-k by content), "
        "not served",
        "dory": "layers that reuse another layer's keys and values (shared_kv_states): not served yet",
        "dots3_note": multimodal("dots3_note_text"),
        "dots3_note_text": INDEXED,
        "electra": ENCODER,
        "emu3": "an image-and-text token model whose causal LM reads the text config of a multimodal checkpoint: not "
        "served",
        "ernie": ENCODER,
        "falcon_mamba": STATE_SPACE,
        "fuyu": multimodal("persimmon"),
        "gemma3": multimodal("gemma3_text"),
        "gemma3n": multimodal("gemma3n_text"),
        "gemma4": multimodal("gemma4_text"),
        "gemma4_assistant": "a drafting assistant for speculative decoding: it reads its target model's keys and "
        "values (shared_kv_states), which assisted decoding needs to roll back",
        "gemma4_unified": multimodal("gemma4_unified_text"),
        "gemma4_unified_assistant": "a drafting assistant for speculative decoding: it reads its target model's keys "
        "and values (shared_kv_states), which assisted decoding needs to roll back",
        "gemma4_unified_text": "layers that share another layer's keys and values (KV sharing): not served yet",
        "git": "an image-to-text model whose text tokens attend to image tokens through one mask it builds itself",
        "glm_moe_dsa": INDEXED,
        "got_ocr2": multimodal("qwen2"),
        "gpt_neo": (
            "its local layers apply their window inside the attention, with a causal buffer indexed by a key's place "
            "in the tensor, not through the mask: a bounded cache keeps keys in ring order, so the buffer would hide "
            "the wrong keys, and its forward takes one mask for all layers, so the local ones cannot get their own"
        ),
        "hrm_text": "it runs its layers several cycles per token, each cycle with a cache layer of its own "
        "(layer_idx + cycle_offset)",
        "hy_v4": INDEXED,
        "inkling2_loop_text": LINEAR,
        "inkling2_text": LINEAR,
        "inkling_text": LINEAR,
        "kimi_linear": LINEAR,
        "lara_mini": LINEAR,
        "lfm2_moe": LINEAR,
        "lfm3": LINEAR,
        "llama4": multimodal("llama4_text"),
        "longcat_flash": LATENT,
        "mamba": STATE_SPACE,
        "mamba2": STATE_SPACE,
        "marian": ENCODER_DECODER,
        "mbart": ENCODER_DECODER,
        "mega": DEPRECATED,
        "megatron-bert": ENCODER,
        "minimax": LINEAR,
        "minimax_m3_vl_text": INDEXED,
        "mllama": "its text model cross-attends to image states in the layers of config.cross_attention_layers, which "
        "a bounded self-attention cache does not cover",
        "moshi": SPEECH,
        "moss_transcribe_diarize": SPEECH,
        "mpt": ALIBI,
        "musicgen": SPEECH,
        "musicgen_melody": SPEECH,
        "mvp": ENCODER_DECODER,
        "olmo_hybrid": LINEAR,
        "open-llama": DEPRECATED,
        "openai-gpt": "no KV cache: OpenAI GPT's generate re-reads the whole sequence at every step",
        "pegasus": ENCODER_DECODER,
        "phi4_multimodal": "a multimodal model whose causal LM mixes LoRA adapters for vision and speech into its "
        "decoder: not served",
        "plbart": ENCODER_DECODER,
        "prophetnet": ENCODER_DECODER,
        "qdqbert": DEPRECATED,
        "qwen3_5": multimodal("qwen3_5_text"),
        "qwen3_5_moe": multimodal("qwen3_5_moe_text"),
        "qwen4_exp": multimodal("qwen4_exp_text"),
        "qwen4_exp_text": INDEXED,
        "recurrent_gemma": LINEAR,
        "reformer": "LSH and chunked local attention with buckets of its own, not a KV cache of positions",
        "rembert": ENCODER,
        "roberta": ENCODER,
        "roberta-prelayernorm": ENCODER,
        "roc_bert": ENCODER,
        "roformer": ENCODER,
        "rwkv": STATE_SPACE,
        "sarvam_mla": hybrid("multi-head latent attention (DeepSeek-V3's classes)"),
        "speech_to_text_2": DEPRECATED,
        "transfo-xl": DEPRECATED,
        "trocr": ENCODER_DECODER,
        "whisper": ENCODER_DECODER,
        "xlm": ENCODER,
        "xlm-prophetnet": DEPRECATED,
        "xlm-roberta": ENCODER,
        "xlm-roberta-xl": ENCODER,
        "xlnet": "relative positions over a memory of past hidden states (mems), not an attention KV cache",
        "xlstm": STATE_SPACE,
        "xmod": ENCODER,
        "zamba": hybrid("Mamba layers with a shared attention block"),
        "zaya": LINEAR,
    }
)


def not_served(model_type: str) -> str:
    """One line saying why `model_type` is not served: its refusal, or that transformers' type is unclassified."""
    reason = REFUSALS.get(model_type)
    if reason is not None:
        return f"cachelimit does not serve model type {model_type!r}: {reason}."
    return (
        f"cachelimit does not serve model type {model_type!r} (families are named by config.model_type); it serves: "
        f"{', '.join(sorted(SERVED_TYPES))}."
    )
