"""The family registry: what cachelimit needs to know about one model family, declared once per family.

A family is named by its config's `model_type` (so a loaded model's family is `model.config.model_type`) and
declared by ONE module under `cachelimit/models/`, which calls `rope_family(...)` or `learned_family(...)`
(or builds a `Family` itself) and thereby registers it. `cachelimit.patch()` installs every registered family;
the tests, the CLI and the README table read this registry, so nothing else lists families by hand.

This module sits below the applier (`patches/applier.py`) and above the cache core: it imports only the
shared `prepare_inputs_for_generation` body and the rotary helpers, never the applier, `generate` or the
cache-implementation registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .compat import config_fields
from .utils.generation import make_prepare_inputs
from .utils.originals import is_replaced
from .utils.rotary import RotaryShift, rotary_shift
from .utils.validation import last_position

#: The kinds of positional information a family uses (the "positions" column of the README table).
ROPE, LEARNED = "rope", "learned"

#: The tiny shape shared by the RoPE families (the keys their config declares; a family's own `tiny_config`
#: is applied on top): 4 query heads
#: of 8 dims sharing 2 key/value heads, explicit `head_dim` (several configs default it to 128 or 256), and
#: pad id 0 (several configs default it beyond a tiny vocabulary).
ROPE_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "max_position_embeddings": 1024,
    "pad_token_id": 0,
}


@dataclass(frozen=True)
class Family:
    """One supported model family."""

    #: the config's `model_type` (`"qwen3"`, `"gemma3_text"`, ...)
    name: str
    #: the causal-LM classes in `transformers`, looked up on first use (importing every modeling module up
    #: front would make `import cachelimit` and the CLI's `--help` seconds slower)
    class_names: tuple[str, ...]
    #: its patched `prepare_inputs_for_generation`, taking `cache_limit`/`num_sink_tokens` as named parameters
    prepare_inputs_for_generation: Callable
    #: ROPE or LEARNED
    positions: str
    #: RoPE: (model, rotary kind of a layer group) -> `RotaryShift` moving those layers' sink keys with the model's
    #: own rotary module (see `utils.rotary`); None for learned positions
    rotary: Callable[[Any, str | None], RotaryShift | None] | None = None
    #: (model, longest row in real tokens, max new tokens) -> raise before generating if the run cannot fit
    check_generation: Callable | None = None
    #: a few-thousand-parameter shape of this family (config keyword arguments) for tests and demos, on top
    #: of `ROPE_TINY` for RoPE families; `num_hidden_layers` and `vocab_size` are set by `tiny()`
    tiny_config: Mapping[str, Any] = field(default_factory=dict)
    #: one line for the README table: what is particular about this family
    notes: str = ""
    #: attention implementations cachelimit serves for it (transformers refuses SDPA for some families)
    attention: tuple[str, ...] = ("eager", "sdpa")

    @property
    def model_classes(self) -> tuple[type, ...]:
        import transformers  # lazy: `transformers` resolves its model classes on attribute access

        return tuple(getattr(transformers, name) for name in self.class_names)

    @property
    def config_class(self) -> type:
        from transformers import CONFIG_MAPPING

        return CONFIG_MAPPING[self.name]

    def tiny(self, num_hidden_layers: int = 2, vocab_size: int = 61, **overrides: Any):
        """A config of this family's tiny shape (`tiny_config`, then `overrides`); a `layer_types` tuple is a
        pattern repeated over the layers."""
        config_class = self.config_class
        declared = config_fields(config_class)
        # pad_token_id is every config's (5.0.0's Phi and StableLM configs do not declare it, but their models read it)
        shared = {key: value for key, value in ROPE_TINY.items() if key in declared or key == "pad_token_id"}
        shared = shared if self.positions == ROPE else {}
        values = {**shared, **self.tiny_config, **overrides}
        pattern = values.get("layer_types")
        if isinstance(pattern, tuple):
            values["layer_types"] = [pattern[i % len(pattern)] for i in range(num_hidden_layers)]
        return config_class(vocab_size=vocab_size, num_hidden_layers=num_hidden_layers, **values)


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add `family` to the registry (replacing one of the same name); returns it."""
    if family.positions not in (ROPE, LEARNED):
        raise ValueError(f"Family.positions must be {ROPE!r} or {LEARNED!r}, got {family.positions!r}.")
    FAMILIES[family.name] = family
    return family


def rope_family(
    name: str,
    *class_names: str,
    tiny_config: Mapping[str, Any] | None = None,
    notes: str = "",
    rotary: Callable[[Any, str | None], RotaryShift | None] = rotary_shift,
    attention: tuple[str, ...] = ("eager", "sdpa"),
) -> Family:
    """Register a RoPE family: its sinks are moved with the model's own rotary module, found by `rotary`
    (by default `model.base_model.rotary_emb` and its modeling module's `apply_rotary_pos_emb`)."""
    return register_family(
        Family(
            name=name,
            class_names=class_names,
            prepare_inputs_for_generation=make_prepare_inputs(name),
            positions=ROPE,
            rotary=rotary,
            tiny_config=MappingProxyType(dict(tiny_config or {})),
            notes=notes,
            attention=attention,
        )
    )


def learned_position_check(attribute: str, family_label: str) -> Callable:
    """`check_generation` of a family with learned absolute positions: at most `config.<attribute>` of them.

    transformers fails mid-run with `IndexError: index out of range in self` past the last learned position;
    a bounded cache does not change that, so the run is refused up front.
    """

    def check_generation(model, longest_prompt: int, max_new_tokens: int) -> None:
        limit = getattr(model.config, attribute)
        if last_position(longest_prompt, max_new_tokens) >= limit:
            raise ValueError(
                f"{family_label} has learned absolute positions: the prompt ({longest_prompt} tokens) plus "
                f"max_new_tokens ({max_new_tokens}) exceeds {attribute}={limit}. Lower max_new_tokens to at most "
                f"{max(limit - longest_prompt + 1, 0)}, or use a RoPE model (llama, mistral, qwen3, ...)."
            )

    return check_generation


def learned_family(
    name: str,
    *class_names: str,
    max_positions: str,
    label: str,
    tiny_config: Mapping[str, Any] | None = None,
    notes: str = "",
) -> Family:
    """Register a family with learned absolute positions (at most `config.<max_positions>` tokens per row);
    sinks keep the positions they were written with."""
    return register_family(
        Family(
            name=name,
            class_names=class_names,
            prepare_inputs_for_generation=make_prepare_inputs(name),
            positions=LEARNED,
            check_generation=learned_position_check(max_positions, label),
            tiny_config=MappingProxyType(dict(tiny_config or {})),
            notes=notes,
        )
    )


def family_for_class(cls: type) -> Family | None:
    """The registered family whose model classes include `cls` or one of its bases (None if none does)."""
    for klass in cls.__mro__:
        for family in FAMILIES.values():
            if klass.__name__ in family.class_names and klass in family.model_classes:
                return family
    return None


def family_of(model) -> Family:
    """The family of a model whose class `cachelimit.patch` has patched (an error naming the fix otherwise)."""
    family = family_for_class(type(model))
    if family is None or not is_replaced(type(model), "prepare_inputs_for_generation"):
        raise ValueError(f"{type(model).__name__} is not patched; call cachelimit.patch() first.")
    return family
