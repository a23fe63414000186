"""What cachelimit needs to know about a model family at run time, declared once per family (`families.table`).

A family is named by its config's `model_type` (a loaded model's family is `model.config.model_type`). The entry is
runtime data only (and imports no torch, so the command line lists the families at once): its causal-LM classes, the
kind of positions its keys carry, how to find the rotary that moves RoPE sink keys, where a family's positions end,
what it refuses (a configuration, or sinks, that it cannot serve exactly), and the other model types transformers
builds into the same classes (`aliases`). What the tests need about a family (its tiny configs, the attention
implementations transformers gives it, the models page notes) lives in its test declaration
(`tests/models/test_<model_type>.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..hf.validation import last_position

#: The kinds of positional information a family uses (the "positions" column of docs/models.md's table): rotary
#: positions (sink keys are moved to StreamingLLM's positions), learned absolute positions, sinusoidal absolute
#: positions (XGLM: a fixed table added to the embeddings), or none at all (Jamba, Nemotron-H: the order comes from
#: their recurrent layers); all but RoPE keep the sinks' keys as written.
ROPE, LEARNED, SINUSOIDAL, NONE = "rope", "learned", "sinusoidal", "none"
POSITION_KINDS = (ROPE, LEARNED, SINUSOIDAL, NONE)


@dataclass(frozen=True)
class Family:
    """One supported model family."""

    #: the config's `model_type` (`"qwen3"`, `"gemma3_text"`, ...)
    name: str
    #: the causal-LM classes in `transformers`, looked up on first use (importing every modeling module up front
    #: would make `import cachelimit` and the CLI's `--help` seconds slower)
    class_names: tuple[str, ...]
    #: ROPE, LEARNED, SINUSOIDAL or NONE
    positions: str
    #: RoPE: (model, rotary kind of a layer) -> the `RotaryShift` moving those layers' sink keys with the model's own
    #: rotary module; None: the default (`hf.layout.rotary_shift`). Absolute positions: sinks keep theirs.
    rotary: Callable[[Any, str | None], Any] | None = None
    #: (model, longest row in real tokens, max new tokens) -> raise before generating if the run cannot fit (a
    #: family whose position table ends: learned positions, GPT-J's sinusoidal rotary table)
    check_generation: Callable[[Any, int, int], None] | None = None
    #: (model, the run's `hf.request.BoundedRequest`) -> raise a ValueError, before any token, for what this family
    #: cannot serve exactly (a configuration such as Falcon's ALiBi, or sinks where its keys cannot be moved)
    check_request: Callable[[Any, Any], None] | None = None
    #: other model types whose configs transformers builds into these same classes (InternLM3 and EXAONE into
    #: `LlamaForCausalLM`): `patch(alias)` patches this family, and each alias with a config of its own has its own
    #: test declaration
    aliases: tuple[str, ...] = ()
    #: model -> per decoder layer, the rotary kind its keys carry (None: no positions), for a family whose model does
    #: not say it the default way (`hf.layout.layer_rotary_kinds`): Cohere 2 and EXAONE 4 rotate their sliding layers
    #: only, Granite SWA has one rotary per base. None: the default reading
    rotary_layers: Callable[[Any], list[str | None]] | None = None
    #: (what needs it, the name of a release constant in `cachelimit.hf.compat`): the first transformers release whose
    #: modeling code cachelimit can serve for this family, where the family itself is older (4.x XGLM checks its 4D
    #: mask against the whole past; recurrent layers before 5.14). On an earlier release the family is patched as
    #: usual, its bounded runs are refused with this reason (`hf.layout.check_family`), and the coverage table lists
    #: it as refused there.
    since: tuple[str, str] | None = None

    def __post_init__(self):
        if self.positions not in POSITION_KINDS:
            raise ValueError(f"Family.positions must be one of {POSITION_KINDS}, got {self.positions!r}.")

    @property
    def uses_rope(self) -> bool:
        """Whether its keys carry rotary positions (RoPE sinks are then moved to StreamingLLM positions)."""
        return self.positions == ROPE

    @property
    def model_classes(self) -> tuple[type, ...]:
        import transformers  # lazy: `transformers` resolves its model classes on attribute access

        return tuple(getattr(transformers, name) for name in self.class_names)

    @property
    def config_class(self) -> type:
        from transformers import CONFIG_MAPPING

        return CONFIG_MAPPING[self.name]

    @property
    def missing(self) -> tuple[str, ...]:
        """The names this family needs that the installed transformers lacks (its config, its classes): a family
        added in a later release than the one installed. Empty when the family is available."""
        import transformers
        from transformers import CONFIG_MAPPING

        names = [] if self.name in CONFIG_MAPPING else [f"model type {self.name!r}"]
        return (*names, *(name for name in self.class_names if not hasattr(transformers, name)))

    @property
    def available(self) -> bool:
        """Whether the installed transformers has this family (`patch()` patches only the available ones)."""
        return not self.missing

    @property
    def release_needed(self) -> str | None:
        """The release `since` names, where the installed transformers is older than it (else None)."""
        if self.since is None:
            return None
        from ..hf import compat  # lazy: compat imports torch, and this table must not

        release = getattr(compat, self.since[1])
        return None if compat.at_least(release) else release


def rope(
    name: str,
    *class_names: str,
    rotary: Callable[[Any, str | None], Any] | None = None,
    check_request: Callable[[Any, Any], None] | None = None,
    max_positions: str | None = None,
    label: str = "",
    aliases: tuple[str, ...] = (),
    rotary_layers: Callable[[Any], list[str | None]] | None = None,
    since: tuple[str, str] | None = None,
) -> Family:
    """A RoPE family: its sinks are moved with the model's own rotary module, found by `rotary` (by default
    `model.base_model.rotary_emb` and its modeling module's `apply_rotary_pos_emb`: `hf.layout.rotary_shift`).
    `max_positions` names the config field where a rotary *table* ends (GPT-J, CodeGen: positions past it fail)."""
    check = None if max_positions is None else position_table_check(max_positions, label or name, "rotary table")
    return Family(
        name,
        class_names,
        ROPE,
        rotary=rotary,
        check_generation=check,
        check_request=check_request,
        aliases=aliases,
        rotary_layers=rotary_layers,
        since=since,
    )


def no_positions(name: str, *class_names: str, since: tuple[str, str] | None = None) -> Family:
    """A family whose attention layers carry no positions (the order comes from its recurrent layers): sinks keep
    their keys as written."""
    return Family(name, class_names, NONE, since=since)


def position_table_check(attribute: str, label: str, table: str) -> Callable[[Any, int, int], None]:
    """`check_generation` of a family whose positions come from a table of `config.<attribute>` rows.

    transformers fails mid-run with `IndexError: index out of range in self` past the table's last row; a bounded
    cache does not change that (positions stay absolute), so the run is refused up front.
    """

    def check_generation(model, longest_prompt: int, max_new_tokens: int) -> None:
        limit = getattr(model.config, attribute)
        if last_position(longest_prompt, max_new_tokens) >= limit:
            raise ValueError(
                f"{label} has a {table} of {attribute}={limit} positions: the prompt ({longest_prompt} tokens) plus "
                f"max_new_tokens ({max_new_tokens}) exceeds it. Lower max_new_tokens to at most "
                f"{max(limit - longest_prompt + 1, 0)}, or use a RoPE model (llama, mistral, qwen3, ...)."
            )

    return check_generation


def learned_position_check(attribute: str, label: str) -> Callable[[Any, int, int], None]:
    """`check_generation` of a family with learned absolute positions: at most `config.<attribute>` of them."""
    return position_table_check(attribute, label, "table of learned absolute positions")


def learned(
    name: str,
    *class_names: str,
    max_positions: str,
    label: str,
    check_request: Callable[[Any, Any], None] | None = None,
    aliases: tuple[str, ...] = (),
) -> Family:
    """A family with learned absolute positions (at most `config.<max_positions>` tokens per row); sinks keep the
    positions they were written with."""
    check = learned_position_check(max_positions, label)
    return Family(name, class_names, LEARNED, check_generation=check, check_request=check_request, aliases=aliases)


def sinusoidal(
    name: str, *class_names: str, aliases: tuple[str, ...] = (), since: tuple[str, str] | None = None
) -> Family:
    """A family with sinusoidal absolute positions added to the embeddings (XGLM): no rotation to adjust (sinks keep
    their positions) and no end (the model extends its table as the sequence grows)."""
    return Family(name, class_names, SINUSOIDAL, aliases=aliases, since=since)
