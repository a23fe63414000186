"""The checks of `benchmarks/gpu_check.py`, one function each, that need a CUDA device (issue 18).

No GPU is lent to the machine that builds this project, so these checks are written to run unattended on one: each
returns result rows (`{"check", "case", "status", ...}`, status "pass", "fail", "refused", "skipped") and records
what it measured, so a run leaves evidence even where a case fails. `exactness` takes a `device` and runs on CPU
too (the tests run it there, with a deliberately wrong oracle to show it can fail); the others need CUDA.
"""

from __future__ import annotations

import copy
import importlib.util
import time

import torch
from transformers import MistralConfig, MistralForCausalLM

from ..core.cache import BoundedCache
from ..families.patching import patch
from ..hf.compat import CACHE_ARGUMENT, output_cache

VOCAB, LIMIT, NEW = 512, 15, 48
#: the largest logit difference a case may show against the oracle, by dtype (bf16: a few of its ulps at |logit| ~ 1)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}


def tiny_mistral(device, dtype=torch.float32, attention: str = "sdpa", sliding_window: int = 4096, layers: int = 4):
    """A seeded 4-layer Mistral (grouped KV heads, RoPE), patched, without EOS so runs are never cut short."""
    patch("mistral")
    config = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        sliding_window=sliding_window,
        max_position_embeddings=8192,
    )
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = MistralForCausalLM(config).to(device=device, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def native_window(model, window: int):
    """The same weights with transformers' own `sliding_window = window` (the key count, the new token included)."""
    config = copy.deepcopy(model.config)
    config.sliding_window = window
    oracle = type(model)(config).to(device=model.device, dtype=model.dtype).eval()
    oracle.load_state_dict(model.state_dict())
    oracle.generation_config = copy.deepcopy(model.generation_config)
    return oracle


def prompts(device, lengths=(40, 25)) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded prompts, left padded with token 0 to the longest (ids never 0)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, -length:] = torch.randint(1, VOCAB, (length,), generator=generator)
        mask[row, -length:] = 1
    return ids.to(device), mask.to(device)


def greedy(model, ids, mask, new: int = NEW, **options):
    with torch.inference_mode():
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
            **options,
        )


def compare(case: dict, run, oracle, tolerance: float) -> dict:
    """Tokens equal and the largest logit difference, over the steps up to the first differing token (the two runs
    may lie on different devices)."""
    new = run.sequences.shape[1] - len(run.logits)
    same = (run.sequences[:, new:].cpu() == oracle.sequences[:, new:].cpu()).all(0).tolist()
    steps = same.index(False) + 1 if False in same else len(same)
    diff = max(
        (a.float().cpu() - b.float().cpu()).abs().max().item()
        for a, b in zip(run.logits[:steps], oracle.logits[:steps], strict=True)
    )
    status = "pass" if all(same) and diff <= tolerance else "fail"
    return {**case, "status": status, "tokens_equal": all(same), "max_logit_diff": diff, "tolerance": tolerance}


def attentions() -> list[str]:
    found = ["sdpa", "flex_attention"]
    return found + ["flash_attention_2"] * (importlib.util.find_spec("flash_attn") is not None)


def exactness(device, dtypes=(torch.float32, torch.bfloat16), attention=None, oracle_window: int = LIMIT + 1):
    """Bounded (`cache_limit=LIMIT`, a chunked prefill: window semantics from the first token) against transformers'
    native sliding window of `LIMIT + 1` keys, on a left padded batch whose prompts are longer than the window. `oracle_window` other than that is a wrong oracle (the
    tests use it to show the comparison fails)."""
    rows = []
    for dtype in dtypes:
        for attn in attention or attentions():
            case = {"check": "exactness", "case": f"{attn} {str(dtype).removeprefix('torch.')}"}
            model = tiny_mistral(device, dtype, attn)
            ids, mask = prompts(device)
            try:
                run = greedy(model, ids, mask, cache_limit=LIMIT, prefill_chunk_size=8)
            except ValueError as refused:  # flash attention: refused until a GPU test exists (docs/how-it-works.md)
                rows.append({**case, "status": "refused", "detail": str(refused).splitlines()[0]})
                continue
            oracle = greedy(native_window(model, oracle_window), ids, mask, cache_limit=None)
            rows.append(compare(case, run, oracle, TOLERANCE[dtype]))
    return rows


def per_token_ms(run_once, new: int, warm_up: bool = False) -> float:
    """Milliseconds per token of `run_once()`; `warm_up` runs it once untimed first (a compile, CUDA graphs)."""
    if warm_up:
        run_once()
    torch.cuda.synchronize()
    started = time.perf_counter()
    run_once()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) * 1000 / new


def compiled(device, steps: int = 200):
    """The static ring under transformers' automatic CUDA compile: compiles counted with dynamo's counters over
    `steps` decode steps, tokens against the eager bounded run, ms per token against compiled `StaticCache`."""
    from torch._dynamo.utils import counters

    model = tiny_mistral(device)
    ids, mask = prompts(device, (40, 40))

    def bounded(**options):
        cache = BoundedCache.from_model(model, LIMIT, 4, static=True)
        return greedy(model, ids, mask, steps, **{CACHE_ARGUMENT: cache}, **options)

    eager = bounded(disable_compile=True)
    torch._dynamo.reset()
    counters.clear()
    warm = bounded()  # the compiles happen here
    graphs = counters["stats"]["unique_graphs"]
    again = bounded()  # a second run of the same shapes: no compile at all
    rows = [
        {**compare({"check": "compile", "case": "static ring + 4 sinks vs eager"}, warm, eager, 1e-4)},
        # nothing compiled means transformers did not compile the run (the cache not compileable?): a failure
        {
            "check": "compile",
            "case": "graphs compiled (first run)",
            "status": "pass" if graphs else "fail",
            "value": graphs,
        },
        {
            "check": "compile",
            "case": "recompiles in a second run",
            "value": counters["stats"]["unique_graphs"] - graphs,
            "status": "pass" if counters["stats"]["unique_graphs"] == graphs else "fail",
        },
    ]
    del again
    timings = {
        "eager bounded": per_token_ms(lambda: bounded(disable_compile=True), steps),
        "compiled bounded": per_token_ms(bounded, steps),
        "compiled StaticCache (no window)": per_token_ms(  # warmed up: its first run compiles
            lambda: greedy(model, ids, mask, steps, cache_implementation="static", cache_limit=None), steps, True
        ),
    }
    baseline = timings["compiled StaticCache (no window)"]
    for case, ms in timings.items():
        rows.append(
            {"check": "compile", "case": f"ms/token {case}", "status": "pass", "value": ms, "ratio": ms / baseline}
        )
    return rows


def cache_kinds(device):
    """transformers' offloaded and fp8-quantized caches set through `set_cache_implementation`, against the default
    dynamic cache: the offloaded one must give the same tokens; the quantized one's agreement is recorded."""
    model = tiny_mistral(device)
    ids, mask = prompts(device, (40, 40))
    reference = greedy(model, ids, mask)
    rows = []
    for case, arguments, exact in [("offloaded", {}, True), ("quantized fp8", {"backend": "fp8"}, False)]:
        model.set_cache_implementation(case.split()[0], **arguments)
        run = greedy(model, ids, mask)
        agreement = (run.sequences == reference.sequences).float().mean().item()
        status = "pass" if agreement == 1.0 or not exact else "fail"
        rows.append({"check": "cache kinds", "case": case, "status": status, "token_agreement": agreement})
    model.set_cache_implementation("dynamic")
    return rows


def two_devices(tmp_dir: str):
    """A model split across cuda:0 and cuda:1 (`device_map`): a bounded run with sinks equals the one-device run,
    and each layer's cache tensors lie on that layer's device."""
    if torch.cuda.device_count() < 2:
        return [{"check": "two devices", "case": "split model", "status": "skipped", "detail": "one CUDA device"}]
    model = tiny_mistral("cuda:0")
    model.save_pretrained(tmp_dir)
    layout = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.norm": 1, "lm_head": 1}
    layout.update({f"model.layers.{i}": int(i >= 2) for i in range(4)})
    split = MistralForCausalLM.from_pretrained(tmp_dir, device_map=layout, dtype=torch.float32).eval()
    split.generation_config = copy.deepcopy(model.generation_config)
    ids, mask = prompts("cuda:0")
    one = greedy(model, ids, mask, cache_limit=LIMIT, num_sink_tokens=4)
    run = greedy(split, ids, mask, cache_limit=LIMIT, num_sink_tokens=4)
    row = compare({"check": "two devices", "case": "split model, 4 sinks"}, run, one, 1e-4)
    devices = [str(layer.keys.device) for layer in output_cache(run).layers]
    row["cache_devices"] = devices
    if devices != ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]:
        row["status"] = "fail"
    return [row]
