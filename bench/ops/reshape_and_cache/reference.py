import torch
import torch.nn as nn


class Model(nn.Module):
    """Write new tokens' K and V into a paged cache in place (vLLM reshape_and_cache_flash).

    key, value [T, Hkv, D]; key_cache, value_cache [num_blocks, block_size, Hkv, D];
    slot_mapping [T] int64: token t goes to block slot // block_size, offset slot % block_size;
    slot -1 means the token is padding and is not written. Slots are unique. Every other cache
    entry keeps its value. Returns the two (mutated) caches.
    """

    def __init__(self):
        super().__init__()

    def forward(self, key, value, key_cache, value_cache, slot_mapping):
        block_size = key_cache.shape[1]
        keep = slot_mapping >= 0
        slots = slot_mapping[keep]
        block, offset = slots // block_size, slots % block_size
        key_cache[block, offset] = key[keep].to(key_cache.dtype)
        value_cache[block, offset] = value[keep].to(value_cache.dtype)
        return key_cache, value_cache
