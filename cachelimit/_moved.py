"""Module paths of cachelimit 0.1 that moved in 0.2, when the package was split into layers: importing one fails
with an ImportError that says where its contents went (instead of a bare "No module named ...").

Installed by `cachelimit/__init__.py` as the first finder of `sys.meta_path` (so that no stale copy of an old
module, an older install's, can answer for it); it answers only for the names below, which no module of this
version has. It imports nothing of cachelimit.
"""

from __future__ import annotations

import importlib.abc

#: old module -> where its contents live now
MOVED = {
    "cachelimit.attention_order": "cachelimit.hf.attention_maps (the order itself: WindowPolicy.key_order)",
    "cachelimit.benchmark": "cachelimit.bench.sweep",
    "cachelimit.cache_kinds": "cachelimit.hf.cache_kinds",
    "cachelimit.cli_errors": "cachelimit.cli.errors",
    "cachelimit.compat": "cachelimit.hf.compat",
    "cachelimit.demo": "cachelimit.cli.demo",
    "cachelimit.family": "cachelimit.families (FAMILIES) and cachelimit.families.registry (Family)",
    "cachelimit.layered_cache": "cachelimit.core.cache: one BoundedCache holds a group per attention type; build it "
    "with BoundedCache.from_model(model, cache_limit, num_sink_tokens)",
    "cachelimit.live": "cachelimit.cli.terminal",
    "cachelimit.loading": "cachelimit.cli.model_argument",
    "cachelimit.models": "cachelimit.families.table (one entry per family)",
    "cachelimit.patches": "cachelimit (patch, unpatch, patched, is_patched) and cachelimit.hf.applier",
    "cachelimit.policy": "cachelimit.core.window (WindowPolicy) and cachelimit.core.policy (MAX_CACHE_LIMIT)",
    "cachelimit.pretrained": "cachelimit.cli.pretrained (load_pretrained is also cachelimit.load_pretrained)",
    "cachelimit.quality": "cachelimit.bench.quality",
    "cachelimit.quality_report": "cachelimit.bench.quality_report",
    "cachelimit.registry": "cachelimit.hf.cache_setting (CACHE_IMPLEMENTATIONS is also cachelimit.CACHE_IMPLEMENTATIONS)",
    "cachelimit.step_plan": "cachelimit.core.window_plan (StepPlan: cachelimit.core.plan)",
    "cachelimit.stream": "cachelimit.cli.generate_command",
    "cachelimit.tiny_model": "cachelimit.cli.tiny_model",
    "cachelimit.utils": "cachelimit.hf (validation, masks, prepare, installed, layer_types) and cachelimit.core.rotary",
    "cachelimit.window_cache": "cachelimit.core.cache (BoundedCache is also cachelimit.BoundedCache)",
}


class MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        old = next((name for name in MOVED if fullname == name or fullname.startswith(name + ".")), None)
        if old is None:
            return None
        raise ImportError(f"{fullname} is gone since cachelimit 0.2.0: see {MOVED[old]}.", name=fullname)
