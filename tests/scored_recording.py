"""What a bounded run with a scored policy kept, recorded as it runs: the kept sets after each forward and the
columns each forward read, for the references of `tests.scored_reference`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def recorded_kept(cache, layers=None) -> dict[int, list[list[set[int]]]]:
    """The real columns each head of each scored layer of `cache` keeps now (`ScoredLayer.kept_columns`)."""
    from cachelimit.core.scored_layer import ScoredLayer

    found = {}
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, ScoredLayer) and (layers is None or index in layers):
            columns = layer.kept_columns()
            found[index] = [[set(c for c in head.tolist() if c >= 0) for head in row] for row in columns]
    return found


class History(list):
    """The kept sets after each forward (a list), and `spans`: the (start, end) columns each forward read."""

    def __init__(self):
        super().__init__()
        self.spans: list[tuple[int, int]] = []


@contextlib.contextmanager
def recording(model, cache) -> Iterator[History]:
    """Record `recorded_kept(cache)` after every forward on `cache`, and the columns each forward read: taken when
    the cache plans its next forward (`begin_step`) and once more at the end, so every forward is seen however the
    release calls the model (transformers 4.x runs a chunked prefill's chunks where a model hook does not see them,
    and reads the last prompt token apart)."""
    history = History()
    plan_next = cache.begin_step

    def record() -> None:
        start = history.spans[-1][1] if history.spans else 0
        end = cache.get_seq_length() if cache.fitted else 0
        if end > start:
            history.spans.append((start, end))
            history.append(recorded_kept(cache))

    def begin_step(*args, **kwargs):
        record()
        return plan_next(*args, **kwargs)

    cache.begin_step = begin_step
    try:
        yield history
    finally:
        del cache.begin_step
        record()
