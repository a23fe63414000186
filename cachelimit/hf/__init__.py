"""The integration with transformers: what cachelimit installs on model classes and how a bounded `generate` runs.

`applier` installs and removes the methods (`installed` keeps the originals); `generate` turns a call into a bounded
run, with its arguments resolved once into a `request.BoundedRequest` (`generation_config` reads where they were set,
`run_checks` refuses what cannot be served, `continuation` checks a cache handed back in) and the cache fitted to the
model (`layout`, from `layer_types`); `prepare` is the shared `prepare_inputs_for_generation`, `masks` the
attention-backend seam (one mask builder per attention implementation), `attention_maps` the `output_attentions`
order; `cache_setting` and `cache_kinds` are `set_cache_implementation`; `compat` holds every difference between the
transformers releases cachelimit supports. It depends on the cache core (`cachelimit.core`) and on nothing above it.

This package and `request`/`validation` import no torch, so the command line validates its flags before loading it.
"""
