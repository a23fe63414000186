"""Install and remove cachelimit's methods on model classes, keeping the originals.

Patching the class (not an instance) means models created before `patch()` see it too, and `unpatch()`
puts back exactly what was there: the class's own attribute, or nothing when it was inherited.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

_MISSING = object()


@dataclass
class Family:
    """What cachelimit needs to know about one model family."""

    name: str
    #: names of the model classes in `transformers`, imported on first use: loading three modeling modules
    #: up front would make `import cachelimit` (and every CLI `--help`) seconds slower
    class_names: tuple[str, ...]
    prepare_inputs_for_generation: Callable
    #: model -> something with `cos_sin`/`apply` (see utils.rotary) for RoPE models; None for learned positions
    rotary: Callable | None = None
    #: (model, longest row in real tokens, max new tokens) -> raise before generating if the run cannot fit
    check_generation: Callable | None = None
    extra_methods: dict[str, Callable] = field(default_factory=dict)

    @property
    def model_classes(self) -> tuple[type, ...]:
        import transformers

        return tuple(getattr(transformers, name) for name in self.class_names)

    def methods(self) -> dict[str, Callable]:
        from .generate import generate, set_cache_implementation

        return {
            "prepare_inputs_for_generation": self.prepare_inputs_for_generation,
            "generate": generate,
            "set_cache_implementation": set_cache_implementation,
            **self.extra_methods,
        }


FAMILIES: dict[str, Family] = {}
_ORIGINALS: dict[tuple[type, str], object] = {}
_PATCHED: set[str] = set()


def register_family(family: Family) -> Family:
    FAMILIES[family.name] = family
    return family


def _names(families: tuple[str, ...]) -> list[str]:
    if not families:
        return list(FAMILIES)
    unknown = [name for name in families if name not in FAMILIES]
    if unknown:
        raise ValueError(f"Unsupported model family {unknown[0]!r}; supported families: {sorted(FAMILIES)}.")
    return list(dict.fromkeys(families))


def patch(*families: str) -> None:
    """Install cachelimit on the given families (all supported ones when none is named). Idempotent."""
    for name in _names(families):
        if name in _PATCHED:
            continue
        family = FAMILIES[name]
        for cls in family.model_classes:
            for attribute, method in family.methods().items():
                _ORIGINALS[(cls, attribute)] = cls.__dict__.get(attribute, _MISSING)
                setattr(cls, attribute, method)
        _PATCHED.add(name)


def unpatch(*families: str) -> None:
    """Restore the original methods of the given families (all when none is named). Idempotent."""
    for name in _names(families):
        if name not in _PATCHED:
            continue
        family = FAMILIES[name]
        for cls in family.model_classes:
            for attribute in family.methods():
                original = _ORIGINALS.pop((cls, attribute))
                if original is _MISSING:
                    delattr(cls, attribute)
                else:
                    setattr(cls, attribute, original)
        _PATCHED.discard(name)


def is_patched(family: str) -> bool:
    return family in _PATCHED


def family_of(model) -> Family:
    """The patched family a model instance belongs to."""
    for cls in type(model).__mro__:
        for name in _PATCHED:
            if cls in FAMILIES[name].model_classes:
                return FAMILIES[name]
    raise ValueError(f"{type(model).__name__} is not patched; call cachelimit.patch() first.")


def original_attribute(cls: type, attribute: str):
    """The method `patch` replaced on `cls` (or on its nearest patched base class)."""
    for klass in cls.__mro__:
        if (klass, attribute) in _ORIGINALS:
            original = _ORIGINALS[(klass, attribute)]
            # A class without its own attribute inherited it: the original is the next one up the MRO.
            return getattr(super(klass, klass), attribute) if original is _MISSING else original
    raise RuntimeError(f"{cls.__name__}.{attribute} is not patched by cachelimit.")
