"""Tiny seeded models for the tests: no hub, a few hundred parameters per layer, two or more layers.

Every family's shape comes from its own test declaration (`tests/models/test_<family>.py`: `tiny_config`, on top of
`ROPE_TINY` for RoPE families), so a new family needs nothing here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

import cachelimit
from cachelimit.families.registry import ROPE
from cachelimit.families.table import SERVED_TYPES
from cachelimit.hf import compat

VOCAB = 61
PAD = 0
#: the attention implementations every family is run with (where transformers gives it both)
ATTENTION = ("eager", "sdpa")

#: The tiny shape shared by the RoPE families (the keys their config declares; a declaration's `tiny_config` is
#: applied on top): 4 query heads of 8 dims sharing 2 key/value heads, explicit `head_dim` (several configs default it
#: to 128 or 256), and pad id 0 (several configs default it beyond a tiny vocabulary).
ROPE_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 1024,
    "pad_token_id": 0,
}


def declared(family: str):
    """The test declaration of `family` (its `unittest.TestCase` in `tests/models/`)."""
    # imported here: the declarations import the mixins, which import this module
    return importlib.import_module("tests.declarations").declared_tests()[family]


def tiny_config(family: str, num_hidden_layers: int = 2, vocab_size: int = VOCAB, **overrides: Any):
    """A config of the family's tiny shape (its declaration's `tiny_config`, then `overrides`); a `layer_types` tuple
    is a pattern repeated over the layers, and a callable value is called with the number of layers (Gemma 4's KV
    sharing covers all layers but the first two). `family` is a served model type: a family or an alias (its own
    config, its family's class)."""
    from transformers import CONFIG_MAPPING

    runtime = SERVED_TYPES[family]
    config_class = CONFIG_MAPPING[family]
    declared_fields = compat.config_fields(config_class)
    # pad_token_id is every config's (5.0.0's Phi and StableLM configs do not declare it, but their models read it)
    shared = {key: value for key, value in ROPE_TINY.items() if key in declared_fields or key == "pad_token_id"}
    shared = shared if runtime.positions == ROPE else {}
    values = {**shared, **declared(family).tiny_config, **overrides}
    values = {key: value(num_hidden_layers) if callable(value) else value for key, value in values.items()}
    for key in ("layer_types", "layers_block_type"):
        pattern = values.get(key)
        if isinstance(pattern, tuple):
            values[key] = [pattern[i % len(pattern)] for i in range(num_hidden_layers)]
    return config_class(vocab_size=vocab_size, num_hidden_layers=num_hidden_layers, **values)


def build_tiny_model(
    family: str,
    attn_implementation: str = "sdpa",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    layers: int = 2,
    **config_overrides,
):
    """A randomly initialised (seeded) model of `family`, in eval mode, patched, with no EOS so runs are never
    cut short (tests that want EOS set it themselves). `layers=N` sets the depth (default 2)."""
    cachelimit.patch(family)
    config = tiny_config(family, layers, VOCAB, **config_overrides)
    config._attn_implementation = attn_implementation  # at construction: 4.x cannot switch StableLM's afterwards
    torch.manual_seed(seed)
    model = SERVED_TYPES[family].model_classes[0](config)
    if model.config._attn_implementation != attn_implementation:
        model.set_attn_implementation(attn_implementation)
    model = model.to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD
    model.generation_config.bos_token_id = None
    return model


def returned_cache(output):
    """The cache a `generate`/forward output returns, read under the installed release's name (`.cache` from
    transformers 5.24.0 on, where reading `.past_key_values` logs a deprecation notice the suite turns into an error;
    `.past_key_values` before)."""
    return compat.output_cache(output)


def given_cache(cache) -> dict[str, Any]:
    """`generate(..., **given_cache(cache))`: the cache under the name the installed release takes (`cache` from
    5.24.0 on, `past_key_values` before), so that no call a test makes goes through transformers' renaming."""
    return {compat.CACHE_ARGUMENT: cache}


def left_padded_batch(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random prompts of the given real lengths, left padded with PAD to the longest (ids never equal PAD)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, width - length :] = torch.randint(1, VOCAB, (length,), generator=generator)
        mask[row, width - length :] = 1
    return ids, mask


def _missing_config(model_type: str) -> tuple[str, ...]:
    from transformers import CONFIG_MAPPING

    return () if model_type in CONFIG_MAPPING else (f"model type {model_type!r}",)


def not_served_here(family: str) -> str | None:
    """Why the installed transformers cannot run `family`: it lacks it (a later release added it), or it has it but
    cachelimit refuses its modeling code here (`Family.since`); None if it can. Tests of such a family are skipped
    with this reason; the refusals themselves are tested (`tests/test_families.py`)."""
    runtime = SERVED_TYPES[family]
    missing = runtime.missing if family == runtime.name else (*runtime.missing, *_missing_config(family))
    if missing:
        return f"{family}: transformers {compat.TRANSFORMERS} lacks {', '.join(missing)}"
    if runtime.release_needed is not None:
        return f"{family} needs transformers >= {runtime.release_needed} ({runtime.since[0]})"
    return None


class FamilyTestBase:
    """What every family test reads: the family's runtime entry (`SERVED_TYPES[family]`: a family, or the family an
    alias is built into) and, from its test declaration, what the tests need to know about it. Tests of a model type
    the installed transformers lacks are skipped, saying what is missing; so are those of a family whose modeling
    code in this release cachelimit refuses, with the reason (`not_served_here`)."""

    def setUp(self):
        super().setUp()
        reason = not_served_here(self.family)  # what this transformers lacks, or a release cachelimit refuses
        if reason is not None:
            self.skipTest(reason)

    family: str
    #: config keyword arguments of its tiny shape (on top of `ROPE_TINY` for RoPE families); layer mixes as the
    #: real checkpoints have them (a `layer_types` tuple is a pattern repeated over the layers)
    tiny_config: dict = {}
    #: the attention implementations transformers gives this family (some refuse SDPA)
    attention: tuple[str, ...] = ATTENTION
    #: one line for the families table (docs/models.md): what is particular about this family
    notes: str = ""
    #: where the family refuses `num_sink_tokens` (its keys cannot be moved exactly): a phrase of the reason its
    #: ValueError gives (the tests expect it, the families table's "sinks" column shows it); "" where sinks are served
    sink_refusal: str = ""

    @property
    def runtime(self) -> cachelimit.Family:
        return SERVED_TYPES[self.family]

    @property
    def uses_rope(self) -> bool:
        return self.runtime.positions == ROPE

    @property
    def attentions(self) -> tuple[str, ...]:
        return declared(self.family).attention

    def require_attention(self, attn: str) -> None:
        if attn not in self.attentions:
            self.skipTest(f"{self.family} runs with attention {self.attentions} only (transformers)")


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def kv_heads(config) -> int:
    if getattr(config, "multi_query", False) and not getattr(config, "new_decoder_architecture", False):
        return 1  # Falcon's multi-query attention: one key/value head
    return getattr(config, "num_key_value_heads", None) or config.num_attention_heads


def skip_where_the_family_refuses_sinks(test, family: str) -> None:
    """Skip a sink test of a family whose declaration says it refuses sinks (`sink_refusal`): the refusal itself is
    tested by the family's own declaration (`SinkTesterMixin.assert_sinks_refused`)."""
    refusal = declared(family).sink_refusal
    if refusal:
        test.skipTest(f"{family} refuses num_sink_tokens ({refusal}...), tested by its declaration")


#: the reason a run that reads several tokens in a forward after the first (a chunked prefill, new text after a
#: returned cache) is refused on a model whose recurrent layers restart their state there (its ValueError's words)
RESTARTS = (
    r"recurrent layers restart their .*state on a forward of several tokens after the first.*transformers itself"
)


def multi_token_refusal(model: torch.nn.Module) -> str | None:
    """What refuses a chunked prefill or new text after a cache on `model` (a regex of the ValueError), or None where
    it is served: the model's own recurrent layers restarting their state there (cachelimit's probe, itself checked
    against transformers' own runs of every recurrent family by `tests/recurrent_mixin.py`), or a release whose
    recurrent layers misapply the state they read."""
    from cachelimit.hf.recurrent_state import has_recurrent_layers, restart_reason

    if not has_recurrent_layers(model.config):
        return None
    if not compat.at_least(compat.RECURRENT_STATE_CARRIED):
        return f"recurrent layers.*{compat.RECURRENT_STATE_CARRIED}"
    return RESTARTS if restart_reason(model) is not None else None


def refused_as_restarting(test, model: torch.nn.Module, run) -> bool:
    """Where `model` refuses several tokens in a forward after the first, `run()` (such a run) must raise with the
    reason, and the test has nothing more to compare (True); elsewhere nothing is run (False)."""
    refusal = multi_token_refusal(model)
    if refusal is None:
        return False
    with test.assertRaisesRegex(ValueError, refusal):
        run()
    return True


def skip_where_sinks_are_refused(test, model: torch.nn.Module) -> None:
    """Skip a sink test on a model whose sinks this transformers cannot serve (refused: `test_bad_input`)."""
    apart = compat.rotaries_apart(model)
    if apart is not None:
        test.skipTest(f"transformers 4.x {type(model).__name__} keeps {apart}: sinks need 5.0.0")


@dataclass(frozen=True)
class LayerWidths:
    """What one bounded layer stores per slot (elements: heads x dims), as transformers' own cache stores it: `key`,
    `value`, and `rotated`, the width of the tensor its positions are in (0: none; a RoPE layer with sinks keeps an
    un-rotated copy of that tensor's sink slots). MLA layers store values of their own size, or (recent releases) the
    compressed latent as keys and the rotary key as values."""

    key: int
    value: int
    rotated: int


def kv_layout(model) -> list[LayerWidths]:
    """Per decoder layer that keeps keys and values of its own, read from transformers' own cache (not cachelimit's)
    after two forwards over the same tokens at positions 0.. and 7..: in a RoPE model, the stored tensor that changes
    with the positions is the one that carries them (layers without positions: neither)."""
    from transformers import DynamicCache

    known = vars(model).get("_tests_kv_layout")  # once per model: its forwards would reach the hooks of a run
    if known is not None:
        return known
    stored = []
    for offset in (0, 7):
        cache = DynamicCache(config=model.config)
        tokens = torch.tensor([[1, 2, 3]])
        with torch.no_grad():
            model(input_ids=tokens, position_ids=torch.arange(3)[None] + offset, use_cache=True,
                  **{compat.CACHE_ARGUMENT: cache})  # fmt: skip
        layers = [layer for layer in cache.layers if isinstance(getattr(layer, "keys", None), torch.Tensor)]
        stored.append([(layer.keys, layer.values) for layer in layers if layer.keys.numel()])
    rope = SERVED_TYPES[model.config.model_type].uses_rope
    layout = []
    for (keys, values), (moved_keys, moved_values) in zip(*stored, strict=True):
        key, value = keys.shape[1] * keys.shape[-1], values.shape[1] * values.shape[-1]
        rotated = 0
        if rope and not torch.allclose(keys, moved_keys, atol=1e-6):
            rotated = key
        elif rope and not torch.allclose(values, moved_values, atol=1e-6):
            rotated = value
        layout.append(LayerWidths(key, value, rotated))
    vars(model)["_tests_kv_layout"] = layout
    return layout


def expected_bytes(model, batch: int, sinks: int, capacity: int, bytes_per_element: int = 4) -> int:
    """Bytes a bounded cache of `model` holds for `batch` rows with `sinks` sink slots and `capacity` ring slots in
    every bounded layer (the un-rotated sink copies of its RoPE layers included)."""
    per_row = sum((layer.key + layer.value) * (sinks + capacity) + layer.rotated * sinks for layer in kv_layout(model))
    return batch * per_row * bytes_per_element
