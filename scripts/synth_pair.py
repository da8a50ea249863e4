"""A synthetic Llama target + EAGLE-3 draft (LlamaForCausalLMEagle3) whose acceptance is known in advance.

    python scripts/synth_pair.py TARGET_DIR DRAFT_DIR [--seed S] [--accept-profile P1,P2,…] [--layer-shift F] [--aux-offset N]

Tokens are one-hot; attention outputs are zero, so every MLP is an exact lookup table (a gated-SiLU row fires only when
its gate coordinate and its token are both set, since silu(0) = 0): the target maps token t to f(t) for a cyclic
permutation f, the draft's step i gets f(y) right for a chosen fraction of tokens (`accept_profile`), and
`layer_shift` / `aux_offset` make the EAGLE-3 aux layers matter. The construction: docs/launcher.md (synthetic pair).
Written with numpy only (safetensors by hand, bf16 rounded to nearest even), so it runs without torch or speclogs.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

RESERVED_DIMS = 64                  # hidden coordinates past the tokens: the bias and the draft's step counter
GATE_SCALE = 2.0                    # gate pre-activation of a firing lookup row: silu(2) ≈ 1.76


class SynthError(ValueError):
    """A size or option the construction cannot honour; `hint` says what to pick instead."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class SynthConfig:
    vocab_size: int = 2048          # == hidden_size; the tokens are the first vocab_size - 64 ids
    num_layers: int = 16
    intermediate_size: int = 5632
    num_heads: int = 16
    num_kv_heads: int = 4
    max_position_embeddings: int = 4096
    seed: int = 0
    random_std: float = 0.02        # q/k/v/gate/up weights (they do not change the output; they cost compute)
    accept_profile: tuple[float, ...] = (1.0,)  # P(draft position i right | positions < i right)
    layer_shift: float = 0.0        # fraction of tokens the layer after the first trained aux layer permutes
    aux_offset: int = 0             # added to the trained aux ids in the draft's config.json (0 = the trained ids)

    @property
    def hidden_size(self) -> int:
        return self.vocab_size

    @property
    def token_count(self) -> int:
        return self.vocab_size - RESERVED_DIMS

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
    first_draft_hit_fraction: float     # fraction of t whose first draft token is right
    expected_accept_len: dict[int, float]   # num_steps → accept length along 500-token walks (topk 1)


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
        """produce(name, shape) → the float32 array of each tensor, in file order (one at a time in memory)."""
        with open(path, "wb") as out:
            out.write(self.header_bytes)
            for name, shape in self.specs:
                out.write(to_bf16_bits(produce(name, shape)).astype("<u2", copy=False).tobytes())
        return self.total_bytes


def write_synth_pair(target_dir: str | Path, draft_dir: str | Path, config: SynthConfig = SynthConfig()) -> SynthPair:
    """Write the target (HF Llama) and the EAGLE-3 draft; returns sizes and the acceptance the weights imply."""
    if config.token_count < 2 or config.vocab_size < config.num_heads:
        raise SynthError(f"synth-pair: vocab {config.vocab_size} leaves no room for {RESERVED_DIMS} reserved "
                            f"coordinates and {config.num_heads} attention heads",
                            hint=f"pick --vocab as a multiple of {config.num_heads}, e.g. 2048 (the default)")
    if config.num_layers < 1:
        raise SynthError(f"synth-pair: a target needs at least one layer, not {config.num_layers}",
                            hint="pick --layers 1 or more (16 by default)")
    if config.hidden_size % config.num_heads or config.num_heads % config.num_kv_heads:
        raise SynthError(f"synth-pair: hidden {config.hidden_size} / heads {config.num_heads} / kv heads "
                            f"{config.num_kv_heads} do not divide", hint="use the defaults")
    target_dir, draft_dir = Path(target_dir), Path(draft_dir)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        draft_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SynthError(f"synth-pair: cannot create {exc.filename}: {exc.strerror}", hint="check the path") from exc
    return _write_pair(target_dir, draft_dir, config)


def _mlp_tensors(prefix: str, mlp) -> dict:
    return {f"{prefix}{name}.weight": weight for name, weight in zip(("gate_proj", "up_proj", "down_proj"), mlp)}


def _write_weights(target_dir: Path, draft_dir: Path, config: SynthConfig, V: int, FF: int, target: dict,
                   draft: dict) -> tuple[int, int]:
    """Both models' safetensors and configs. A tensor not given is ones (norms), zeros (attention and MLP outputs:
    the layer adds nothing) or random (q/k/v/gate/up: compute only), drawn in file order."""
    import numpy as np

    rng = np.random.default_rng(config.seed + 1)

    def tensors(given: dict):
        def produce(name, shape):
            if name in given:
                return given[name]
            if name.endswith("norm.weight"):
                return np.ones(shape, dtype=np.float32)
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                return np.zeros(shape, dtype=np.float32)
            return rng.standard_normal(shape, dtype=np.float32) * config.random_std
        return produce

    target_bytes = _SafetensorsWriter(_target_specs(config, V)).write(target_dir / "model.safetensors", tensors(target))
    _write_target_config(target_dir, config, V)
    draft_bytes = _SafetensorsWriter(_draft_specs(config, FF)).write(draft_dir / "model.safetensors", tensors(draft))
    _write_draft_config(draft_dir, config, V, FF)
    return target_bytes, draft_bytes


def _target_specs(config: SynthConfig, V: int) -> list[tuple[str, tuple[int, ...]]]:
    H, FF, NH, NKV = config.hidden_size, config.intermediate_size, config.num_heads, config.num_kv_heads
    hd = H // NH
    specs = [("model.embed_tokens.weight", (V, H))]
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        specs += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,)),
                  (p + "self_attn.q_proj.weight", (NH * hd, H)), (p + "self_attn.k_proj.weight", (NKV * hd, H)),
                  (p + "self_attn.v_proj.weight", (NKV * hd, H)), (p + "self_attn.o_proj.weight", (H, NH * hd)),
                  (p + "mlp.gate_proj.weight", (FF, H)), (p + "mlp.up_proj.weight", (FF, H)),
                  (p + "mlp.down_proj.weight", (H, FF))]
    return specs + [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]


def _draft_specs(config: SynthConfig, FF: int) -> list[tuple[str, tuple[int, ...]]]:
    H, NH, NKV = config.hidden_size, config.num_heads, config.num_kv_heads
    hd = H // NH
    return [("fc.weight", (H, 3 * H)), ("norm.weight", (H,)), ("midlayer.input_layernorm.weight", (H,)),
            ("midlayer.hidden_norm.weight", (H,)), ("midlayer.post_attention_layernorm.weight", (H,)),
            ("midlayer.self_attn.q_proj.weight", (NH * hd, 2 * H)), ("midlayer.self_attn.k_proj.weight", (NKV * hd, 2 * H)),
            ("midlayer.self_attn.v_proj.weight", (NKV * hd, 2 * H)), ("midlayer.self_attn.o_proj.weight", (H, NH * hd)),
            ("midlayer.mlp.gate_proj.weight", (FF, H)), ("midlayer.mlp.up_proj.weight", (FF, H)),
            ("midlayer.mlp.down_proj.weight", (H, FF))]


def _write_target_config(target_dir: Path, config: SynthConfig, V: int) -> None:
    H = config.hidden_size
    _write_json(target_dir / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": H,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": H // config.num_heads, "hidden_act": "silu", "max_position_embeddings": config.max_position_embeddings,
        "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "tie_word_embeddings": False,
        "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
        "mlp_bias": False, "pretraining_tp": 1, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
    })
    _write_json(target_dir / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})


def _write_draft_config(draft_dir: Path, config: SynthConfig, V: int, FF: int) -> None:
    H = config.hidden_size
    _write_json(draft_dir / "config.json", {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H, "intermediate_size": FF,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads, "num_hidden_layers": 1,
        "vocab_size": V, "rms_norm_eps": 1e-6, "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": False, "target_hidden_size": H, "torch_dtype": "bfloat16", "hidden_act": "silu",
        "draft_vocab_size": None,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i + config.aux_offset for i in config.aux_layers]},
    })


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


WALK_TOKENS = 500                   # the benchmark's max_new_tokens: accept length is measured along such walks


@dataclass(frozen=True)
class LayeredDesign:
    """The integer design the layered weights implement (token ids, no floats)."""
    perm: object                    # f: next token, one cycle through the V tokens
    advance: list                   # advance[i]: bool mask over tokens y, draft step i+1 moves y to f(y)
    shifted: object                 # bool mask over tokens: the layer after the first aux layer permutes them
    shift: object                   # τ: the permutation on the shifted tokens (identity elsewhere)


def layered_design(config: SynthConfig) -> LayeredDesign:
    import numpy as np
    V = config.token_count
    rng = np.random.default_rng(config.seed + 2)
    perm = cyclic_permutation(V, config.seed)
    advance, right, power = [], np.arange(V), np.arange(V)    # right: tokens t whose positions so far are right
    for p in config.accept_profile:
        right = np.sort(rng.choice(right, size=round(p * len(right)), replace=False))
        mask = np.zeros(V, dtype=bool)
        mask[power[right]] = True                             # step i sees token f^(i-1)(t)
        advance.append(mask)
        power = perm[power]
    shifted = np.zeros(V, dtype=bool)
    shift = np.arange(V)
    shift_rng = np.random.default_rng(config.seed + 3)        # the same target whatever the draft's profile
    members = np.sort(shift_rng.choice(V, size=round(config.layer_shift * V), replace=False))
    if len(members) >= 2:
        shifted[members] = True
        shift[members] = np.roll(members, 1)                  # one cycle through the members: no fixed point
    return LayeredDesign(perm=perm, advance=advance, shifted=shifted, shift=shift)


def accepted_drafts(design: LayeredDesign, num_steps: int, offset_read: bool = False):
    """Per last-verified token t: how many of the num_steps chain draft tokens the target accepts."""
    import numpy as np
    V = len(design.perm)
    leading = np.ones(V, dtype=bool)
    if offset_read:
        leading &= ~design.shifted                           # the draft read τ(t): its first token is wrong
    accepted, power = np.zeros(V, dtype=np.int64), np.arange(V)
    for i in range(num_steps):
        leading &= design.advance[i][power] if i < len(design.advance) else False
        accepted += leading
        power = design.perm[power]
    return accepted


def walk_accept_len(design: LayeredDesign, num_steps: int, offset_read: bool = False,
                    walk_tokens: int = WALK_TOKENS) -> float:
    """Accept length (tokens per verify) along walks of walk_tokens tokens, one from every start token."""
    import numpy as np
    step = 1 + accepted_drafts(design, num_steps, offset_read)
    V = len(design.perm)
    powers = [np.arange(V)]
    for _ in range(int(step.max())):
        powers.append(design.perm[powers[-1]])
    jump = np.stack(powers)[step, np.arange(V)]               # t → f^(accept len)(t)
    token, produced, cycles = np.arange(V), np.zeros(V, dtype=np.int64), np.zeros(V, dtype=np.int64)
    while (produced < walk_tokens).any():
        active = produced < walk_tokens
        produced[active] += step[token[active]]
        cycles[active] += 1
        token[active] = jump[token[active]]
    return float(produced.sum() / cycles.sum())


def _write_pair(target_dir: Path, draft_dir: Path, config: SynthConfig) -> SynthPair:
    import numpy as np
    H, V, L = config.hidden_size, config.token_count, config.num_layers
    K = len(config.accept_profile)
    aux = config.aux_layers[0]
    if not all(0.0 <= p <= 1.0 for p in config.accept_profile) or not 0.0 <= config.layer_shift <= 1.0:
        raise SynthError(f"synth-pair: accept profile {config.accept_profile} / layer shift {config.layer_shift} "
                            "outside [0, 1]", hint="e.g. --accept-profile 0.9,0.7,0.5 --layer-shift 0.3")
    if K + 2 > RESERVED_DIMS or aux + 3 > L:
        raise SynthError(f"synth-pair: the construction needs at most {RESERVED_DIMS - 2} profile positions, "
                            f"and {aux + 3}+ layers (got {K} positions, {L} layers)",
                            hint="use --layers 16")
    design = layered_design(config)
    bias, counter = V, V + 1                                  # coordinates past the tokens
    rows_needed = sum(int(m.sum()) for m in design.advance) + K
    FF = max(config.intermediate_size, -(-rows_needed // 128) * 128)
    if int(design.shifted.sum()) > config.intermediate_size:
        raise SynthError(f"synth-pair: layer shift {config.layer_shift} needs {int(design.shifted.sum())} MLP rows, "
                            f"the target has {config.intermediate_size}", hint="lower --layer-shift")
    # norm(h) of a stream e_y·s + e_bias·s reads √(H/2) on both coordinates (RMSNorm weight 1)
    read = math.sqrt(H / 2)
    gate = GATE_SCALE / read
    fired = GATE_SCALE / (1.0 + math.exp(-GATE_SCALE)) * read   # silu(gate·read) × up·read

    def lookup(moves: list[tuple[int, int, int]], scale: float, rows: int):
        """(gate, up, down) of an MLP whose row r moves coordinate src → dst (× scale) when gate_coord is set."""
        g = np.zeros((rows, H), dtype=np.float32)
        u = np.zeros((rows, H), dtype=np.float32)
        d = np.zeros((H, rows), dtype=np.float32)
        for row, (src, dst, gate_coord) in enumerate(moves):
            g[row, gate_coord] = gate
            u[row, src] = 1.0
            d[dst, row] += scale / fired
            d[src, row] -= scale / fired
        return g, u, d

    members = np.flatnonzero(design.shifted)
    target_mlps = {}
    if len(members):
        shift = [(int(t), int(design.shift[t]), bias) for t in members]
        target_mlps[aux + 1] = lookup(shift, math.sqrt(H), config.intermediate_size)
        target_mlps[aux + 2] = lookup([(dst, src, b) for src, dst, b in shift], math.sqrt(H), config.intermediate_size)
    draft_moves = []
    for i, mask in enumerate(design.advance):
        draft_moves += [(int(y), int(design.perm[y]), counter + i) for y in np.flatnonzero(mask)]
        draft_moves.append((counter + i, counter + i + 1, counter + i))
    dg, du, dd = lookup(draft_moves, 1.0, FF)
    embed = np.zeros((V, H), dtype=np.float32)
    embed[np.arange(V), np.arange(V)] = math.sqrt(H)
    embed[:, bias] = math.sqrt(H)
    lm_head = np.zeros((V, H), dtype=np.float32)
    lm_head[np.arange(V), np.argsort(design.perm)] = 1.0      # logit j reads token f⁻¹(j): argmax = f(y)
    fc = np.zeros((H, 3 * H), dtype=np.float32)
    fc[np.arange(V), np.arange(V)] = 1.0 / math.sqrt(H)       # first aux block: e_t·√H → e_t
    fc[counter, bias] = 1.0 / math.sqrt(H)                    # the target's bias → counter c_0

    target = {"model.embed_tokens.weight": embed, "lm_head.weight": lm_head}
    for layer, mlp in target_mlps.items():
        target.update(_mlp_tensors(f"model.layers.{layer}.mlp.", mlp))
    draft = {"fc.weight": fc, **_mlp_tensors("midlayer.mlp.", (dg, du, dd))}
    target_bytes, draft_bytes = _write_weights(target_dir, draft_dir, config, V, FF, target, draft)

    offset_read = config.aux_offset == 1 and len(members) > 0
    expected = {k: round(walk_accept_len(design, k, offset_read), 4) for k in range(1, max(K, 5) + 1)}
    uniform = {k: round(1.0 + float(accepted_drafts(design, k, offset_read).mean()), 4) for k in expected}
    first_hit = float(np.mean(accepted_drafts(design, 1, offset_read)))
    pair = SynthPair(target_dir=target_dir, draft_dir=draft_dir, config=config, target_bytes=target_bytes,
                     draft_bytes=draft_bytes, first_draft_hit_fraction=first_hit, expected_accept_len=expected)
    _write_json(draft_dir / "speclogs_synth.json", {
        "construction": "scripts/synth_pair.py (layered)", "seed": config.seed, "vocab_size": V, "hidden_size": H,
        "num_layers": L, "accept_profile": list(config.accept_profile), "layer_shift": config.layer_shift,
        "trained_aux_layers": config.aux_layers,
        "config_aux_layers": [i + config.aux_offset for i in config.aux_layers],
        "shifted_layer": aux + 1 if len(members) else None, "target_dir": str(target_dir),
        "draft_intermediate_size": FF, "first_draft_hit_fraction": first_hit,
        "expected_accept_len_by_steps": {str(k): v for k, v in expected.items()},
        "uniform_start_accept_len_by_steps": {str(k): v for k, v in uniform.items()},
        "walk_tokens": WALK_TOKENS,
    })
    return pair


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/synth_pair.py", description=__doc__.splitlines()[0])
    parser.add_argument("target_dir", type=Path, help="Where the HF Llama target is written (config.json + model.safetensors).")
    parser.add_argument("draft_dir", type=Path, help="Where the EAGLE-3 draft (LlamaForCausalLMEagle3) is written.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the embeddings, the permutation and the random weights.")
    parser.add_argument("--vocab", type=int, default=2048, help="Hidden size (the vocabulary is 64 ids less).")
    parser.add_argument("--layers", type=int, default=16, help="Target layers.")
    parser.add_argument("--accept-profile", default="1.0", help="P(draft position i right | earlier right), e.g. 0.9,0.7,0.5.")
    parser.add_argument("--layer-shift", type=float, default=0.0,
                        help="Fraction of tokens the layer after the first aux layer permutes (0..1).")
    parser.add_argument("--aux-offset", type=int, default=0, help="Add this to the trained aux layer ids in the draft's config.")
    args = parser.parse_args(argv)
    try:
        try:
            profile = tuple(float(p) for p in args.accept_profile.split(",") if p.strip())
        except ValueError:
            raise SynthError(f"--accept-profile {args.accept_profile!r} is not a list of numbers",
                             hint="e.g. --accept-profile 0.9,0.7,0.5") from None
        config = SynthConfig(vocab_size=args.vocab, num_layers=args.layers, seed=args.seed, accept_profile=profile,
                             layer_shift=args.layer_shift, aux_offset=args.aux_offset)
        pair = write_synth_pair(args.target_dir, args.draft_dir, config)
    except SynthError as error:
        sys.stderr.write(f"Error: {error}\n  hint: {error.hint}\n")
        return 1
    expected = ("expected accept len by --speculative-num-steps (topk 1, draft tokens steps+1): "
                + ", ".join(f"{k}: {v:.2f}" for k, v in pair.expected_accept_len.items()))
    sys.stderr.write(
        f"wrote {pair.target_dir} ({pair.target_bytes / 2**30:.2f} GiB) and {pair.draft_dir} ({pair.draft_bytes / 2**20:.0f} MiB); "
        f"first draft token right for {pair.first_draft_hit_fraction:.4f} of tokens; {expected}; prompts need "
        f"token ids < {config.token_count} and --skip-tokenizer-init\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
