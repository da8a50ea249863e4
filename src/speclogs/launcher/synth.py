"""A synthetic Llama target + EAGLE-3 draft (LlamaForCausalLMEagle3) whose acceptance is known in advance.

Construction (vocab V == hidden H; E = a random orthogonal V×H matrix, rows e_t):
- target: embed_tokens = √H·E; every layer's o_proj and down_proj are zero, so each layer adds nothing and the
  final hidden state is √H·e_t; lm_head = E[f⁻¹], so logit_j = √H·⟨e_{f⁻¹(j)}, e_t⟩ and the next token is f(t) for a
  fixed cyclic permutation f (one cycle through all V tokens: no fixed points).
- draft: fc (H × 3H) maps the first aux hidden state e_t to e_{f(t)} (the block E[t]ᵀ-rotation M = Eᵀ E[f]); its
  attention o_proj and MLP down_proj are zero, so its hidden state stays e_{f(t)} and the shared lm_head proposes
  f(f(t)): the first draft token is always right. The later draft steps reuse that hidden state and propose f(f(t))
  again, which is wrong (f has no fixed point). So with topk 1 every verify accepts exactly 1 draft token + the
  target's own token: accept length 2.00 whatever num_steps ≥ 1 (accept rate 1/num_steps, 0.20 for 5 steps).
- noise n mixes a random orthogonal map R into fc: (1-n)·M + n·R. The first draft stays right while
  (1-n) beats n × (largest of V-1 coordinates of a random unit vector), i.e. up to n ≈ 0.9 for V = 2048.

Written with numpy only (safetensors by hand: 8-byte little-endian header length, JSON header, raw little-endian
bytes; bf16 = float32's upper 16 bits, rounded to nearest even), so it runs without torch.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from speclogs.errors import SpeclogsError


@dataclass(frozen=True)
class SynthConfig:
    vocab_size: int = 2048          # == hidden_size (the construction needs V == H)
    num_layers: int = 16
    intermediate_size: int = 5632
    num_heads: int = 16
    num_kv_heads: int = 4
    max_position_embeddings: int = 4096
    noise: float = 0.0
    seed: int = 0
    random_std: float = 0.02        # q/k/v/gate/up weights (they do not change the output; they cost compute)

    @property
    def hidden_size(self) -> int:
        return self.vocab_size

    @property
    def aux_layers(self) -> list[int]:
        return [1, self.num_layers // 2 - 1, self.num_layers - 3]


@dataclass(frozen=True)
class SynthPair:
    target_dir: Path
    draft_dir: Path
    config: SynthConfig
    target_bytes: int
    draft_bytes: int
    target_next_token_exact: float      # fraction of tokens t whose target argmax is f(t) (1.0 by construction)
    first_draft_hit_fraction: float     # fraction of t whose first draft token is right, from the written bf16 weights
    predicted_accept_len: float         # for steps 5 / topk 1 / draft tokens 6


def predicted_accept_len(num_steps: int, topk: int, num_draft_tokens: int, noise: float,
                         vocab_size: int = 2048) -> float:
    """Accept length (accepted draft tokens + 1 per verify) the construction predicts for a chain draft (topk 1).

    noise 0 → exactly 2.0 (for num_steps ≥ 1). For noise n > 0 the first draft token is right with probability
    p = ∫ φ(z) Φ(z + k)^(V-1) dz, k = √V·(1-n)/n (coordinates of a random unit vector ≈ N(0, 1/V)); result 1 + p.
    """
    if topk != 1:
        raise SpeclogsError(f"predicted_accept_len: topk {topk} is not modelled (only topk 1, a chain draft)",
                            hint="use --speculative-eagle-topk 1")
    if num_steps < 0 or num_draft_tokens != num_steps + 1:
        raise SpeclogsError(f"predicted_accept_len: with topk 1, num_draft_tokens must be num_steps + 1 "
                            f"(got steps {num_steps}, draft tokens {num_draft_tokens})",
                            hint="e.g. --speculative-num-steps 5 --speculative-num-draft-tokens 6")
    if not 0.0 <= noise <= 1.0:
        raise SpeclogsError(f"predicted_accept_len: noise {noise} is outside [0, 1]", hint="pick noise in [0, 1]")
    if num_steps == 0:
        return 1.0
    return 1.0 + first_draft_hit_probability(noise, vocab_size)


def first_draft_hit_probability(noise: float, vocab_size: int = 2048) -> float:
    if noise == 0.0:
        return 1.0
    k = math.sqrt(vocab_size) * (1.0 - noise) / noise
    # trapezoid over z in [-10, 10]: φ(z)·Φ(z+k)^(V-1)
    steps = 4000
    lo, hi = -10.0, 10.0
    width = (hi - lo) / steps
    total = 0.0
    for index in range(steps + 1):
        z = lo + index * width
        phi = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1.0 + math.erf((z + k) / math.sqrt(2)))
        value = phi * cdf ** (vocab_size - 1)
        total += value * (0.5 if index in (0, steps) else 1.0)
    return min(1.0, total * width)


def cyclic_permutation(vocab_size: int, seed: int):
    """f as an array: f[t] = next token. One cycle through all tokens (Sattolo's algorithm), so no fixed points."""
    import numpy as np
    rng = np.random.default_rng(seed)
    perm = np.arange(vocab_size)
    for i in range(vocab_size - 1, 0, -1):
        j = int(rng.integers(0, i))
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def to_bf16_bits(array):
    """float32 → bf16 bit patterns (uint16), round to nearest even."""
    import numpy as np
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def from_bf16_bits(bits):
    import numpy as np
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def read_safetensors(path: Path) -> tuple[dict, dict]:
    """(header, tensors as float32 numpy arrays) of a safetensors file holding BF16/F32 tensors."""
    import numpy as np
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[base + begin: base + end]
        if info["dtype"] == "BF16":
            tensors[name] = from_bf16_bits(np.frombuffer(raw, dtype="<u2")).reshape(info["shape"])
        elif info["dtype"] == "F32":
            tensors[name] = np.frombuffer(raw, dtype="<f4").reshape(info["shape"])
        else:
            raise SpeclogsError(f"{path}: tensor {name} has dtype {info['dtype']}, only BF16/F32 are read here",
                                hint="this reader is for speclogs' synthetic models")
    return header, tensors


class _SafetensorsWriter:
    """Stream BF16 tensors into one file: shapes first (header), then each tensor's bytes produced on demand."""

    def __init__(self, specs: list[tuple[str, tuple[int, ...]]]):
        self.specs = specs
        header: dict = {"__metadata__": {"format": "pt"}}
        offset = 0
        for name, shape in specs:
            size = 2 * math.prod(shape)
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * ((8 - len(raw) % 8) % 8)
        self.header_bytes = struct.pack("<Q", len(raw)) + raw
        self.total_bytes = len(self.header_bytes) + offset

    def write(self, path: Path, produce) -> int:
        """produce(name, shape) → float32 array (or iterable of row blocks) for each tensor, in order."""
        import numpy as np
        with open(path, "wb") as out:
            out.write(self.header_bytes)
            for name, shape in self.specs:
                produced = produce(name, shape)
                blocks = produced if isinstance(produced, list) else [produced]
                written = 0
                for block in blocks:
                    bits = to_bf16_bits(block).astype("<u2", copy=False)
                    out.write(bits.tobytes())
                    written += bits.size
                if written != math.prod(shape):
                    raise SpeclogsError(f"synth: tensor {name} produced {written} values, expected {math.prod(shape)}",
                                        hint="internal error in speclogs.launcher.synth")
        return np.int64(self.total_bytes).item()


def write_synth_pair(target_dir: str | Path, draft_dir: str | Path, config: SynthConfig = SynthConfig()) -> SynthPair:
    """Write the target (HF Llama) and the EAGLE-3 draft; returns sizes and the acceptance the weights imply."""
    import numpy as np
    if not 0.0 <= config.noise <= 1.0:
        raise SpeclogsError(f"synth-pair: noise {config.noise} is outside [0, 1]", hint="pick --noise in [0, 1]")
    if config.vocab_size < config.num_heads:
        raise SpeclogsError(f"synth-pair: vocab {config.vocab_size} is below the {config.num_heads} attention heads",
                            hint=f"pick --vocab as a multiple of {config.num_heads}, e.g. 2048 (the default)")
    if config.num_layers < 1:
        raise SpeclogsError(f"synth-pair: a target needs at least one layer, not {config.num_layers}",
                            hint="pick --layers 1 or more (16 by default)")
    if config.hidden_size % config.num_heads or config.num_heads % config.num_kv_heads:
        raise SpeclogsError(f"synth-pair: hidden {config.hidden_size} / heads {config.num_heads} / kv heads "
                            f"{config.num_kv_heads} do not divide", hint="use the defaults")
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        draft_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpeclogsError(f"synth-pair: cannot create {exc.filename}: {exc.strerror}", hint="check the path") from exc
    H = V = config.vocab_size
    L, FF, NH, NKV = config.num_layers, config.intermediate_size, config.num_heads, config.num_kv_heads
    hd = H // NH
    rng = np.random.default_rng(config.seed)
    E = np.linalg.qr(rng.standard_normal((V, H)))[0].astype(np.float32)   # orthogonal: rows orthonormal
    perm = cyclic_permutation(V, config.seed)                             # f(t) = perm[t]
    inv = np.argsort(perm)
    M = E.T @ E[perm]                                                     # e_t @ M = e_{f(t)}
    R = np.linalg.qr(rng.standard_normal((H, H)))[0].astype(np.float32)
    W = ((1.0 - config.noise) * M + config.noise * R).T                   # Linear: y = x @ W.T

    weights_rng = np.random.default_rng(config.seed + 1)

    def random_rows(shape):
        rows_per_block = max(1, (1 << 22) // shape[1])
        return [(weights_rng.standard_normal((min(rows_per_block, shape[0] - start), shape[1]), dtype=np.float32)
                 * config.random_std) for start in range(0, shape[0], rows_per_block)]

    # --- target ---
    specs = [("model.embed_tokens.weight", (V, H))]
    for i in range(L):
        p = f"model.layers.{i}."
        specs += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,)),
                  (p + "self_attn.q_proj.weight", (NH * hd, H)), (p + "self_attn.k_proj.weight", (NKV * hd, H)),
                  (p + "self_attn.v_proj.weight", (NKV * hd, H)), (p + "self_attn.o_proj.weight", (H, NH * hd)),
                  (p + "mlp.gate_proj.weight", (FF, H)), (p + "mlp.up_proj.weight", (FF, H)),
                  (p + "mlp.down_proj.weight", (H, FF))]
    specs += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]

    def target_tensor(name, shape):
        if name == "model.embed_tokens.weight":
            return E * np.float32(math.sqrt(H))
        if name == "lm_head.weight":
            return E[inv]
        if name.endswith("norm.weight"):
            return np.ones(shape, dtype=np.float32)
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            return np.zeros(shape, dtype=np.float32)
        return random_rows(shape)

    target_bytes = _SafetensorsWriter(specs).write(target_dir / "model.safetensors", target_tensor)
    target_config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": H,
        "intermediate_size": FF, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
        "head_dim": hd, "hidden_act": "silu", "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "tie_word_embeddings": False,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
        "mlp_bias": False, "pretraining_tp": 1, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    }
    _write_json(target_dir / "config.json", target_config)
    _write_json(target_dir / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})

    # --- draft ---
    dspecs = [("fc.weight", (H, 3 * H)), ("norm.weight", (H,)), ("midlayer.input_layernorm.weight", (H,)),
              ("midlayer.hidden_norm.weight", (H,)), ("midlayer.post_attention_layernorm.weight", (H,)),
              ("midlayer.self_attn.q_proj.weight", (NH * hd, 2 * H)), ("midlayer.self_attn.k_proj.weight", (NKV * hd, 2 * H)),
              ("midlayer.self_attn.v_proj.weight", (NKV * hd, 2 * H)), ("midlayer.self_attn.o_proj.weight", (H, NH * hd)),
              ("midlayer.mlp.gate_proj.weight", (FF, H)), ("midlayer.mlp.up_proj.weight", (FF, H)),
              ("midlayer.mlp.down_proj.weight", (H, FF))]

    def draft_tensor(name, shape):
        if name == "fc.weight":
            fc = np.zeros(shape, dtype=np.float32)
            fc[:, :H] = W
            return fc
        if name.endswith("norm.weight"):
            return np.ones(shape, dtype=np.float32)
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            return np.zeros(shape, dtype=np.float32)
        return random_rows(shape)

    draft_bytes = _SafetensorsWriter(dspecs).write(draft_dir / "model.safetensors", draft_tensor)
    draft_config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H, "intermediate_size": FF,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "num_hidden_layers": 1, "vocab_size": V,
        "rms_norm_eps": 1e-6, "max_position_embeddings": config.max_position_embeddings, "tie_word_embeddings": False,
        "target_hidden_size": H, "torch_dtype": "bfloat16", "hidden_act": "silu", "draft_vocab_size": None,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": config.aux_layers},
    }
    _write_json(draft_dir / "config.json", draft_config)

    # what the written (bf16-rounded) weights imply, over every token
    embed_b = from_bf16_bits(to_bf16_bits(E * np.float32(math.sqrt(H))))
    lm_head_b = from_bf16_bits(to_bf16_bits(E[inv]))
    fc_b = from_bf16_bits(to_bf16_bits(W))
    target_hits = float(np.mean(np.argmax(embed_b @ lm_head_b.T, axis=1) == perm))
    draft_hidden = embed_b @ fc_b.T
    draft_hits = float(np.mean(np.argmax(draft_hidden @ lm_head_b.T, axis=1) == perm[perm]))
    pair = SynthPair(target_dir=target_dir, draft_dir=draft_dir, config=config, target_bytes=target_bytes,
                     draft_bytes=draft_bytes, target_next_token_exact=target_hits, first_draft_hit_fraction=draft_hits,
                     predicted_accept_len=round(1.0 + draft_hits, 4))
    _write_json(draft_dir / "speclogs_synth.json", {
        "construction": "speclogs.launcher.synth", "seed": config.seed, "noise": config.noise, "vocab_size": V,
        "num_layers": L, "aux_layers": config.aux_layers, "target_dir": str(target_dir),
        "target_next_token_exact": target_hits, "first_draft_hit_fraction": draft_hits,
        "predicted_accept_len_steps5_topk1_draft6": pair.predicted_accept_len,
        "predicted_accept_len_model": predicted_accept_len(5, 1, 6, config.noise, V),
    })
    return pair


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
