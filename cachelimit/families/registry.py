"""What cachelimit needs to know about a model family at run time, declared once per family (`families.table`).

A family is named by its config's `model_type` (a loaded model's family is `model.config.model_type`). The entry is
runtime data only (and imports no torch, so the command line lists the families at once): its causal-LM classes, the kind of positions its keys carry, how to find the rotary that moves
RoPE sink keys, and where a learned-position family's positions end. What the tests need about a family (its tiny
configs, the attention implementations transformers gives it, the README notes) lives in its test declaration
(`tests/models/test_<family>.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..hf.validation import last_position

#: The kinds of positional information a family uses (the "positions" column of the README table): rotary
#: positions in its keys (sinks are moved), learned absolute positions, or none at all (Jamba, Nemotron-H: the order
#: comes from their recurrent layers; sinks, like learned positions, keep their keys as written).
ROPE, LEARNED, NONE = "rope", "learned", "none"
POSITIONS = (ROPE, LEARNED, NONE)


@dataclass(frozen=True)
class Family:
    """One supported model family."""

    #: the config's `model_type` (`"qwen3"`, `"gemma3_text"`, ...)
    name: str
    #: the causal-LM classes in `transformers`, looked up on first use (importing every modeling module up front
    #: would make `import cachelimit` and the CLI's `--help` seconds slower)
    class_names: tuple[str, ...]
    #: ROPE or LEARNED
    positions: str
    #: RoPE: (model, rotary kind of a layer) -> the `RotaryShift` moving those layers' sink keys with the model's own
    #: rotary module; None: the default (`hf.layout.rotary_shift`). Learned positions: sinks keep theirs.
    rotary: Callable[[Any, str | None], Any] | None = None
    #: (model, longest row in real tokens, max new tokens) -> raise before generating if the run cannot fit
    check_generation: Callable[[Any, int, int], None] | None = None
    #: config -> per decoder layer, whether its keys carry rotary positions, for a family whose config does not say
    #: (Cohere 2 and EXAONE 4 rotate their sliding layers only); None: every layer, or `config.no_rope_layers`
    rope_layers: Callable[[Any], list[bool]] | None = None
    #: (what needs it, the name of a release constant in `cachelimit.hf.compat`): the first transformers release whose
    #: modeling code cachelimit can serve for this family; earlier releases refuse a bounded run with that reason
    since: tuple[str, str] | None = None

    def __post_init__(self):
        if self.positions not in POSITIONS:
            raise ValueError(f"Family.positions must be one of {POSITIONS}, got {self.positions!r}.")

    @property
    def uses_rope(self) -> bool:
        """Whether its keys carry rotary positions (RoPE sinks are then moved to StreamingLLM positions)."""
        return self.positions == ROPE

    @property
    def available(self) -> bool:
        """Whether the installed transformers has this family's model classes (newer families are missing from older
        releases: `patch()` leaves them out, and patching one by name says so)."""
        import transformers

        return all(hasattr(transformers, name) for name in self.class_names)

    @property
    def model_classes(self) -> tuple[type, ...]:
        import transformers  # lazy: `transformers` resolves its model classes on attribute access

        return tuple(getattr(transformers, name) for name in self.class_names)

    @property
    def config_class(self) -> type:
        from transformers import CONFIG_MAPPING

        return CONFIG_MAPPING[self.name]


def rope(name: str, *class_names: str, rotary: Callable[[Any, str | None], Any] | None = None, **options) -> Family:
    """A RoPE family: its sinks are moved with the model's own rotary module, found by `rotary` (by default
    `model.base_model.rotary_emb` and its modeling module's `apply_rotary_pos_emb`: `hf.layout.rotary_shift`).
    `options`: `rope_layers`, `since` (see `Family`)."""
    return Family(name, class_names, ROPE, rotary=rotary, **options)


def no_positions(name: str, *class_names: str, **options) -> Family:
    """A family whose attention layers carry no positions (the order comes from its recurrent layers): sinks keep
    their keys as written. `options`: `since` (see `Family`)."""
    return Family(name, class_names, NONE, **options)


def learned_position_check(attribute: str, label: str) -> Callable[[Any, int, int], None]:
    """`check_generation` of a family with learned absolute positions: at most `config.<attribute>` of them.

    transformers fails mid-run with `IndexError: index out of range in self` past the last learned position; a
    bounded cache does not change that, so the run is refused up front.
    """

    def check_generation(model, longest_prompt: int, max_new_tokens: int) -> None:
        limit = getattr(model.config, attribute)
        if last_position(longest_prompt, max_new_tokens) >= limit:
            raise ValueError(
                f"{label} has learned absolute positions: the prompt ({longest_prompt} tokens) plus "
                f"max_new_tokens ({max_new_tokens}) exceeds {attribute}={limit}. Lower max_new_tokens to at most "
                f"{max(limit - longest_prompt + 1, 0)}, or use a RoPE model (llama, mistral, qwen3, ...)."
            )

    return check_generation


def learned(name: str, *class_names: str, max_positions: str, label: str) -> Family:
    """A family with learned absolute positions (at most `config.<max_positions>` tokens per row); sinks keep the
    positions they were written with."""
    return Family(name, class_names, LEARNED, check_generation=learned_position_check(max_positions, label))
