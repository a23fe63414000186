"""A bounded `generate` under transformers' tensor parallelism (`tp_plan="auto"`, torch.distributed) on CPU (gloo),
two processes started by torchrun, equals the one-process run (issue 18).

Each rank holds half of the attention heads, so its cache holds half of the key/value heads: the plan (slots,
visibility, positions) is computed from the inputs alone, which every rank has whole, so both ranks plan alike. The
workers are this file run by `torch.distributed.run`; they write what they saw to a folder the test reads.
"""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import pytest
import torch

from tests.common import returned_cache

LIMIT, SINKS, NEW = 8, 2, 24
ABORT = "terminate called without an active exception"  # what libstdc++ prints when a rank aborts (`launch`)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def bounded_run(model) -> tuple[torch.Tensor, list[int]]:
    """A bounded greedy run with sinks over a batch of two; its tokens and the KV heads each layer's cache holds."""
    model.generation_config.eos_token_id = None
    ids = torch.randint(1, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW,
            do_sample=False,
            cache_limit=LIMIT,
            num_sink_tokens=SINKS,
            return_dict_in_generate=True,
        )
    return out.sequences, [layer.keys.shape[1] for layer in returned_cache(out).layers]


def worker(folder: str) -> None:
    """One rank: load the saved model with the automatic tensor-parallel plan, run, write what it saw."""
    from transformers import LlamaForCausalLM

    import cachelimit

    cachelimit.patch("llama")
    model = LlamaForCausalLM.from_pretrained(folder, tp_plan="auto").eval()
    sequences, heads = bounded_run(model)
    weight = model.model.layers[0].self_attn.k_proj.weight  # a DTensor on some releases, a local shard on others
    rows = (weight.to_local() if hasattr(weight, "to_local") else weight).shape[0]
    seen = {"sequences": sequences.tolist(), "cache_heads": heads, "k_proj_rows": rows}
    (Path(folder) / f"rank{os.environ['RANK']}.json").write_text(json.dumps(seen))
    if torch.distributed.is_initialized():  # leave no gloo thread running at exit
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def launch(folder: str, attempts: int = 3) -> subprocess.CompletedProcess:
    """Both ranks under torchrun. A launch in which a rank aborted (`terminate called without an active exception`, most
    often a C++ thread torn down while still joinable) is tried again from scratch, up to `attempts` launches: CI saw
    such aborts now and then (5.23.0 and 5.12.1 in the full-suite pytest; run on their own, 4.57.6 once soon after the
    launch and 5.12.1 once right after both ranks had loaded the weights), never in dozens of runs here, loaded or not.
    The abort is matched by that message, not by the signal: once the rank's fault handler crashed while printing the
    other threads' stacks and torchrun reported SIGSEGV. Retrying cannot hide a wrong result: the test still needs one
    launch in which both ranks exit cleanly and agree with the one-process run, and any other failure ends the retries
    at once.

    The ranks load the weights without transformers' loader threads (`HF_DEACTIVATE_ASYNC_LOAD`): 5.x shuts that pool
    down without waiting, so its threads end while the rank already generates, the likeliest source of a thread torn
    down under the rank's feet (not proven: the abort was never reproduced). The fault handler prints the aborting
    thread's stack only (the `__main__` block), which is safe; dumping every thread once crashed."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_DEACTIVATE_ASYNC_LOAD": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        __file__,
        folder,
    ]
    for _attempt in range(attempts):
        for stale in Path(folder).glob("rank*.json"):
            stale.unlink()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        if done.returncode == 0 or ABORT not in done.stderr:
            return done
    return done


@pytest.mark.slow  # in CI's full-suite pytest, beside its workers, gloo aborted a rank on 5.23.0 and 5.12.1
@unittest.skipUnless(torch.distributed.is_available(), "this torch build has no torch.distributed")
class TensorParallelTest(unittest.TestCase):
    def test_two_processes_equal_one(self):
        import cachelimit

        cachelimit.patch("llama")
        model = tiny_llama()
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            expected, heads = bounded_run(model)
            done = launch(folder)
            self.assertEqual(done.returncode, 0, done.stderr[:3000] + "\n[...]\n" + done.stderr[-2000:])
            ranks = [json.loads((Path(folder) / f"rank{rank}.json").read_text()) for rank in (0, 1)]
        self.assertEqual(heads, [2, 2])
        for seen in ranks:
            self.assertEqual(
                seen["k_proj_rows"], model.config.head_dim, "not sharded: each rank holds 1 of 2 KV heads"
            )
            self.assertEqual(seen["cache_heads"], [1, 1])  # each rank caches its own half of the KV heads
            self.assertEqual(seen["sequences"], expected.tolist())


if __name__ == "__main__":
    if len(sys.argv) == 2 and "RANK" in os.environ:
        faulthandler.enable(all_threads=False)
        worker(sys.argv[1])
    else:
        unittest.main()
