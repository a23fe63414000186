"""What kvpress 0.5.5 does in the cases its source suggests, on a tiny random Llama (no download, a second of CPU).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 .venvs/kvpress/bin/python benchmarks/kvpress_probe.py

Prints: (1) SnapKVPress as a decoding press (PrefillDecodingPress + DecodingPress, interval 1): its decode step;
(2) a prompt read in two chunks under KeyDiffPress(0.5): what each chunk leaves (only a forward into an empty cache is
compressed); (3) DecodingPress's defaults; (4) whether TOVAPress and KeyDiffPress keep the same positions in every KV
head of a layer (found by matching each kept key to the unpressed run's keys). `docs/recall/kvpress_peer.md` quotes
the output.
"""

import kvpress
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
cfg = LlamaConfig(
    vocab_size=100,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
model = LlamaForCausalLM(cfg).eval()
ids = torch.randint(0, 100, (1, 128))


def lengths(c):
    return [c.get_seq_length(i) for i in range(len(c))]


# 1. decoding-time SnapKV
press = kvpress.PrefillDecodingPress(
    prefilling_press=kvpress.SnapKVPress(0.5),
    decoding_press=kvpress.DecodingPress(kvpress.SnapKVPress(), compression_interval=1, target_size=64),
)
cache = DynamicCache()
with torch.no_grad(), press(model):
    model(input_ids=ids, past_key_values=cache)
    print("snapkv prefill ->", lengths(cache))
    try:
        model(input_ids=ids[:, :1], past_key_values=cache, position_ids=torch.tensor([[128]]))
        print("decode ->", lengths(cache))
    except AssertionError as e:
        print("snapkv decode step: AssertionError:", e)
# 2. chunked prefill: only a forward into an empty cache is compressed
cache = DynamicCache()
with torch.no_grad(), kvpress.KeyDiffPress(0.5)(model):
    model(input_ids=ids[:, :64], past_key_values=cache)
    a = lengths(cache)
    model(input_ids=ids[:, 64:], past_key_values=cache, position_ids=torch.arange(64, 128)[None])
    b = lengths(cache)
print("keydiff 0.5, chunks of 64: after chunk 1", a, "after chunk 2", b)
# 3. default DecodingPress: interval 512, target 2048
d = kvpress.DecodingPress(kvpress.KeyDiffPress())
print("DecodingPress defaults:", d.compression_interval, d.target_size)
# 4. TOVA: same positions for every KV head of a layer? keydiff: per head?
for name, p in (("tova", kvpress.TOVAPress(0.5)), ("keydiff", kvpress.KeyDiffPress(0.5))):
    cache = DynamicCache()
    full = DynamicCache()
    with torch.no_grad():
        model(input_ids=ids, past_key_values=full)
        with p(model):
            model(input_ids=ids, past_key_values=cache)
    k, kf = cache.layers[0].keys[0], full.layers[0].keys[0]  # [H, n, d]
    kept = [
        sorted(int((kf[h] - k[h, j]).abs().sum(-1).argmin()) for j in range(k.shape[1])) for h in range(k.shape[0])
    ]
    print(name, "layer 0: KV heads keep the same positions:", kept[0] == kept[1], "; kept", len(kept[0]), "of 128")
