"""The synthetic target/draft pair: valid safetensors, shapes that match config.json, and the algebra that makes
the accept length known (target next token = f(t); by default the first draft token is right, later ones wrong)."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "synth_pair.py"
sys.path.insert(0, str(SCRIPT.parent))
from synth_pair import SynthConfig, SynthError, cyclic_permutation, to_bf16_bits, write_synth_pair  # noqa: E402

SMALL = SynthConfig(vocab_size=256, num_layers=4, intermediate_size=512, num_heads=4, num_kv_heads=2)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    return write_synth_pair(root / "t", root / "d", SMALL)


def from_bf16_bits(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def read_safetensors(path):
    """(header, tensors as float32 arrays) of a safetensors file of BF16 tensors."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    return header, {name: from_bf16_bits(np.frombuffer(data[8 + length + info["data_offsets"][0]:
                                                            8 + length + info["data_offsets"][1]], dtype="<u2"))
                    .reshape(info["shape"]) for name, info in header.items() if name != "__metadata__"}


def rms_norm(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def test_files_are_valid_safetensors_with_shapes_of_config(pair):
    for directory in (pair.target_dir, pair.draft_dir):
        raw = (directory / "model.safetensors").read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        assert length % 8 == 0
        header = json.loads(raw[8:8 + length])
        spans = sorted(info["data_offsets"] for name, info in header.items() if name != "__metadata__")
        assert spans[0][0] == 0 and spans[-1][1] == len(raw) - 8 - length
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))        # contiguous, no gaps
        for name, info in header.items():
            if name != "__metadata__":
                assert info["dtype"] == "BF16" and (info["data_offsets"][1] - info["data_offsets"][0]) == 2 * math.prod(info["shape"])
    config = json.loads((pair.target_dir / "config.json").read_text())
    _, tensors = read_safetensors(pair.target_dir / "model.safetensors")
    H, V, L = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    assert tensors["model.embed_tokens.weight"].shape == (V, H) and tensors["lm_head.weight"].shape == (V, H)
    assert tensors[f"model.layers.{L - 1}.mlp.gate_proj.weight"].shape == (config["intermediate_size"], H)
    kv = config["num_key_value_heads"] * H // config["num_attention_heads"]
    assert tensors["model.layers.0.self_attn.k_proj.weight"].shape == (kv, H)
    assert f"model.layers.{L}.mlp.gate_proj.weight" not in tensors
    draft_config = json.loads((pair.draft_dir / "config.json").read_text())
    assert draft_config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert draft_config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 1, 1]
    _, draft = read_safetensors(pair.draft_dir / "model.safetensors")
    assert draft["fc.weight"].shape == (H, 3 * H) and "lm_head.weight" not in draft


def test_the_default_draft_is_right_at_its_first_position_only(pair):
    target_next, accepted, per_position = sglang_chain(pair.target_dir, pair.draft_dir, steps=2)
    assert (target_next == cyclic_permutation(SMALL.token_count, SMALL.seed)).all()
    assert per_position[:2] == [1.0, 0.0] and (accepted == 1).all()
    assert pair.first_draft_hit_fraction == 1.0 and pair.expected_accept_len[5] == 2.0


def test_bf16_rounding_is_round_to_nearest_even():
    values = np.array([1.0, -2.5, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 3.14159], dtype=np.float32)
    bits = to_bf16_bits(values)
    assert bits[0] == 0x3F80 and bits[1] == 0xC020
    assert bits[2] == 0x3F80                     # halfway → even (down)
    assert bits[3] == 0x3F82                     # halfway → even (up)
    assert abs(from_bf16_bits(bits)[4] - 3.14159) < 0.01


def test_hf_transformers_loads_the_target_and_greedy_decoding_follows_the_permutation(pair):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.LlamaForCausalLM.from_pretrained(str(pair.target_dir), dtype=torch.bfloat16)
    perm = cyclic_permutation(SMALL.token_count, SMALL.seed)
    prompt = [5, 17, 150, 33]
    generated = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                               max_new_tokens=12, do_sample=False, pad_token_id=0)[0].tolist()[len(prompt):]
    expected, token = [], prompt[-1]
    for _ in range(12):
        token = int(perm[token])
        expected.append(token)
    assert generated == expected


LAYERED = SynthConfig(vocab_size=256, num_layers=6, intermediate_size=256, num_heads=4, num_kv_heads=2,
                      accept_profile=(0.9, 0.7, 0.5), layer_shift=0.25)


def silu(z):
    return z / (1.0 + np.exp(-z))


def sglang_chain(target_dir, draft_dir, steps):
    """What SGLang computes with every attention output zero, read back from the written files: the target's
    greedy next token for every token t, and how many of `steps` chain draft tokens it would accept after t."""
    _, t = read_safetensors(target_dir / "model.safetensors")
    _, d = read_safetensors(draft_dir / "model.safetensors")
    config = json.loads((target_dir / "config.json").read_text())
    capture = json.loads((draft_dir / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    V = config["vocab_size"]
    h = t["model.embed_tokens.weight"].copy()
    captured = {}
    for i in range(config["num_hidden_layers"]):
        captured[i] = h.copy()                         # SGLang captures the input of layer id + 1
        p = f"model.layers.{i}.mlp."
        x = rms_norm(h)
        h = h + (silu(x @ t[p + "gate_proj.weight"].T) * (x @ t[p + "up_proj.weight"].T)) @ t[p + "down_proj.weight"].T
    lm_head = t["lm_head.weight"]
    target_next = (rms_norm(h) @ lm_head.T).argmax(axis=1)
    aux = np.concatenate([captured[i + 1] for i in capture], axis=1)
    x = aux @ d["fc.weight"].T
    truth, right, accepted = np.arange(V), np.ones(V, dtype=bool), np.zeros(V, dtype=np.int64)
    per_position = []
    for _ in range(steps):
        n = rms_norm(x)
        x = x + (silu(n @ d["midlayer.mlp.gate_proj.weight"].T) * (n @ d["midlayer.mlp.up_proj.weight"].T)) \
            @ d["midlayer.mlp.down_proj.weight"].T      # the next step reads the pre-norm output
        truth = target_next[truth]
        hit = (rms_norm(x) @ lm_head.T).argmax(axis=1) == target_next[truth]
        per_position.append(float(hit[right].mean()))
        right &= hit
        accepted += right
    return target_next, accepted, per_position


def test_layered_draft_accepts_each_position_with_its_profile_probability(tmp_path):
    pair = write_synth_pair(tmp_path / "t", tmp_path / "d", LAYERED)
    target_next, accepted, per_position = sglang_chain(pair.target_dir, pair.draft_dir, steps=4)
    perm = cyclic_permutation(LAYERED.token_count, LAYERED.seed)
    assert (target_next == perm).all()                 # the layers that shift and unshift leave the output alone
    for p, measured in zip(LAYERED.accept_profile, per_position):
        assert measured == pytest.approx(p, abs=0.01)  # round(p·n)/n over the n tokens right so far
    assert per_position[3] == 0.0                      # past the profile every position is wrong
    meta = json.loads((pair.draft_dir / "speclogs_synth.json").read_text())
    assert 1.0 + accepted.mean() == pytest.approx(meta["uniform_start_accept_len_by_steps"]["4"], abs=1e-3)
    expected = [pair.expected_accept_len[k] for k in (1, 2, 3, 4)]
    assert expected == sorted(expected) and expected[0] == pytest.approx(1.9, abs=0.05)


def test_aux_ids_one_layer_off_lose_the_shifted_tokens(tmp_path):
    from dataclasses import replace

    trained = write_synth_pair(tmp_path / "t", tmp_path / "d", LAYERED)
    offset = write_synth_pair(tmp_path / "t", tmp_path / "d1", replace(LAYERED, aux_offset=1))
    assert json.loads((offset.draft_dir / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"] == [i + 1 for i in LAYERED.aux_layers]
    _, right, _ = sglang_chain(trained.target_dir, trained.draft_dir, steps=3)
    _, off, _ = sglang_chain(offset.target_dir, offset.draft_dir, steps=3)
    shifted = round(LAYERED.layer_shift * LAYERED.token_count)
    assert (off <= right).all() and 0 < (off < right).sum() <= shifted
    assert offset.expected_accept_len[3] < trained.expected_accept_len[3] - 0.1


def test_layered_options_are_checked(tmp_path):
    from dataclasses import replace

    with pytest.raises(SynthError, match="outside"):
        write_synth_pair(tmp_path / "t", tmp_path / "d", replace(LAYERED, accept_profile=(1.2,)))


@pytest.mark.parametrize("option, value", [("--vocab", "0"), ("--layers", "-1")])
def test_impossible_sizes_are_refused_before_anything_is_written(tmp_path, option, value):
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "t"), str(tmp_path / "d"), option, value],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stderr.startswith("Error: synth-pair:") and "hint:" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "t").exists()
