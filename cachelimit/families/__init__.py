"""The families cachelimit serves: the table (`table`, one entry each, `registry` says what an entry holds), and
`patch`/`unpatch`/`patched` over it (`patching`).

This layer sits above the integration (`cachelimit.hf`): it hands its table to the applier, which knows nothing of
it otherwise. `registry` and `table` import no torch, so the command line lists the families at once.
"""
