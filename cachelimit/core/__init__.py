"""The cache core: a transformers `Cache` that keeps at most `L` positions per layer, with no knowledge of `generate`.

Vocabulary (one word per concept, used throughout the package):
- *bounded*: the cache and its layers (`BoundedCache`, `BoundedLayer`), which never hold more than the limit;
- *limit*: `L`, the user's `cache_limit`, the most positions a layer keeps between steps;
- *policy*: what is kept and where (`policy.Policy`); the *window* with *sinks* (`window.WindowPolicy`: the first `S`
  real tokens of each row plus the most recent `L - S`) is the first policy;
- *column*, *slot*, *ring*, *growth*: where a token's key and value live (`ring`, the one place that explains them);
- *plan*: one forward's program for every layer of a group (`plan.StepPlan`), computed once per step by the policy;
- *group*: the layers that share one policy and therefore one plan (one per attention type of a hybrid model);
- *scored*: a policy that keeps, per layer and KV head, the keys its score ranks best (`eviction`: KeyDiff, TOVA,
  SnapKV; planned in `scored`, carried out by `scored_layer.ScoredLayer`).

Modules: `ring` (placement and growth), `policy` (what a policy provides), `rows` (per-row bookkeeping), `plan`
(the step program), `window` and `window_plan` (the window-with-sinks policy), `rotary` (moving sink keys with a
model's own RoPE), `layers` (the slot store), `group` (the layers of one attention type), `cache` (the cache made
of groups of layers), `memory` (the bytes a cache holds), `eviction`, `scored` and `scored_layer` (the scored
policies).

Nothing here imports transformers' generation code: only `transformers.cache_utils` (the `Cache` base classes).
`policy` and this package import no torch, so argument validation can use the limits without loading it.
"""
