"""speclogs doctor: a speculative-decoding setup's checks, before and after a launch. The rules are SGLang 0.5.14's
(docs/doctor.md lists them and where they come from). Standard library only: the launcher runs them on the GPU box."""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

# The server flags the checks read (argparse also takes the aliases SGLang documents in its examples).
FLAGS = {
    "--model-path": "model_path", "--model": "model_path",
    "--speculative-algorithm": "speculative_algorithm", "--speculative-algo": "speculative_algorithm",
    "--speculative-draft-model-path": "speculative_draft_model_path", "--speculative-draft": "speculative_draft_model_path",
    "--speculative-draft-model": "speculative_draft_model_path",
    "--speculative-num-steps": "speculative_num_steps", "--speculative-eagle-topk": "speculative_eagle_topk",
    "--speculative-num-draft-tokens": "speculative_num_draft_tokens",
}
# config.json keys the checks read; run.json `models` records them too, so the checks run again on ingested runs.
CONFIG_KEYS = ("architectures", "hidden_size", "target_hidden_size", "num_hidden_layers", "vocab_size",
               "draft_vocab_size", "max_position_embeddings", "eagle_config", "eagle_aux_hidden_state_layer_ids",
               "base_model_name_or_path", "base_model")
# Targets whose checkpoint carries its own MTP layers: SGLang drafts with the target itself when no draft is named.
SELF_DRAFTING = ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM", "Glm4MoeForCausalLM",
                 "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                 "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration",
                 "HYV3ForCausalLM")
# Targets SGLang loads as their own MTP/NextN head when named as the draft (configs/model_config.py).
MTP_AS_DRAFT = SELF_DRAFTING + ("Ernie4_5_MoeForCausalLM", "ExaoneMoEForCausalLM", "GlmOcrForConditionalGeneration",
                                "InternS2PreviewForConditionalGeneration", "LongcatFlashForCausalLM", "MiMoForCausalLM",
                                "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM", "NemotronHForCausalLM",
                                "NemotronHPuzzleForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM",
                                "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                                "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration")
NEEDS_DRAFT = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "DFLASH")
SEVERITIES = ("error", "warning", "info")
# the first mark an architecture name contains says its kind
_MARKS = {"eagle3": "eagle3", "eagle": "eagle", "dflash": "dflash", "assistantforcausallm": "gemma_assistant",
          "nextn": "mtp", "mtp": "mtp"}
# algorithm flag → the draft kinds it runs correctly; draft kind → the flag to use, and its name
_ACCEPTS = {"EAGLE": {"eagle", "mtp", "gemma_assistant"}, "NEXTN": {"eagle", "mtp", "gemma_assistant"},
            "EAGLE3": {"eagle3"}, "DFLASH": {"dflash"}, "STANDALONE": {"plain"}}
_KINDS = {"eagle3": ("EAGLE3", "an EAGLE-3 draft"), "eagle": ("EAGLE", "an EAGLE(-2) draft"),
          "mtp": ("NEXTN", "an MTP/NextN draft"), "dflash": ("DFLASH", "a DFlash draft"),
          "gemma_assistant": ("NEXTN", "a Gemma 4 assistant draft"), "plain": ("STANDALONE", "a plain model as draft")}


@dataclass(frozen=True)
class DoctorFinding:
    code: str
    severity: str      # error (the setup is wrong: fix it before launching) | warning | info
    message: str
    fix: str
    source: str        # plan.toml:LINE, the flag on the command line, a config.json path, run.json

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Model:
    """One model's facts (config_facts), or `note` saying why none were read."""

    role: str          # target | draft
    path: str
    facts: dict | None
    source: str
    note: str | None = None

    def get(self, key: str):
        return (self.facts or {}).get(key)

    @property
    def architecture(self) -> str:
        archs = self.get("architectures")
        return str(archs[0]) if isinstance(archs, list) and archs else ""


def arg_value(argv: list[str], flag: str) -> str | None:
    """The value of `flag` in an argv (`--flag VALUE` or `--flag=VALUE`; the first occurrence), or None."""
    for index, part in enumerate(argv):
        if part == flag and index + 1 < len(argv):
            return argv[index + 1]
        if part.startswith(flag + "="):
            return part.split("=", 1)[1]
    return None


def server_settings(argv: list[str]) -> dict[str, str]:
    """FLAGS' values in a server argv, by SGLang's field name."""
    out: dict[str, str] = {}
    for flag, name in FLAGS.items():
        if (value := arg_value(argv, flag)) is not None:
            out.setdefault(name, value)
    return out


def config_facts(directory: Path, config: dict) -> dict:
    """The CONFIG_KEYS of a config.json, the d2t map's length from the safetensors headers, and what
    scripts/synth_pair.py built the model for (speclogs_synth.json)."""
    facts = {key: config[key] for key in CONFIG_KEYS if key in config}
    for weights in sorted(directory.glob("*.safetensors")):
        try:
            with open(weights, "rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(length)) if length < (64 << 20) else {}
        except (OSError, ValueError, struct.error):
            continue
        facts["safetensors_read"] = True
        for name, tensor in header.items():
            if name.split(".")[-1] == "d2t" and isinstance(tensor, dict) and tensor.get("shape"):
                facts["d2t_rows"] = tensor["shape"][0]
    try:
        synth = json.loads((directory / "speclogs_synth.json").read_text(encoding="utf-8"))
        facts["synth_aux_layers"] = synth.get("trained_aux_layers", synth.get("aux_layers"))
        facts["synth_target_dir"] = synth["target_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return facts


def _model(role: str, path: str, models: dict | None, where: str) -> Model | None:
    """The model as run.json `models` recorded it (`models` given: this machine's paths may hold other models), else
    as its local config.json says; a hub id, a missing path or an unread config is a Model with a note."""
    if models is not None:
        record = models.get(role)
        if not record:
            return Model(role, path, None, where, note=f"{path} not recorded in {where}") if path else None
        path = str(record.get("path", ""))
        if record.get("error") or "config_sha256" not in record:
            return Model(role, path, None, where, note=f"{path} was not read at launch ({record.get('error', 'no config')})")
        facts = dict(record)
        if "eagle_config" not in facts and record.get("eagle3_layer_ids") is not None:   # run.json before the doctor
            facts["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": record["eagle3_layer_ids"]}
        return Model(role, path, facts, f"{where} models.{role}")
    if not path:
        return None
    directory = Path(path).expanduser()
    if not directory.is_dir():
        local = path.startswith(("/", "./", "../", "~")) or directory.exists()
        return Model(role, path, None, path, note=f"{path} does not exist here" if local else f"{path} is not a local path")
    config_path = directory / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Model(role, path, None, str(config_path), note=f"{config_path} unreadable ({getattr(exc, 'strerror', None) or exc})")
    if not isinstance(config, dict):
        return Model(role, path, None, str(config_path), note=f"{config_path} is not a JSON object")
    return Model(role, path, config_facts(directory, config), str(config_path))


def draft_kind(architecture: str) -> str:
    """What an architecture name says the draft is: eagle3 | eagle | mtp | dflash | gemma_assistant | plain | unknown."""
    if not architecture:
        return "unknown"
    if architecture in MTP_AS_DRAFT:
        return "mtp"
    return next((kind for mark, kind in _MARKS.items() if mark in architecture.lower()), "plain")


def int_or_none(value) -> int | None:
    try:
        return int(str(value).strip().strip("'\""))
    except (TypeError, ValueError):
        return None


def _setup_findings(settings: dict[str, str], target: Model | None, draft: Model | None,
                    source_of: Callable[[str], str], trained_layers: list[int] | None,
                    runtime: dict[str, str] | None) -> Iterator[DoctorFinding]:
    algorithm = (settings.get("speculative_algorithm") or "").strip("'\"").upper()
    if algorithm in ("", "NONE"):
        return
    flag_source = source_of("speculative_algorithm")
    for model, name in ((target, "model_path"), (draft, "speculative_draft_model_path")):
        if model is not None and model.note:
            yield DoctorFinding("not_checked", "info", f"{model.role} not checked: {model.note}", "run the doctor where "
                                "the model directory is (a local path) to check its config.json", source_of(name))
    if algorithm == "NGRAM":
        if draft is not None:
            yield DoctorFinding("draft_ignored", "warning", f"`--speculative-algorithm NGRAM` ignores "
                                f"`--speculative-draft-model-path {draft.path}`: NGRAM drafts from the prompt, not a model",
                                "drop the draft path, or use the algorithm the draft was made for",
                                source_of("speculative_draft_model_path"))
        return
    if draft is None and algorithm in NEEDS_DRAFT and target is not None and target.facts is not None \
            and target.architecture not in SELF_DRAFTING:
        yield DoctorFinding("draft_missing", "error", f"`--speculative-algorithm {algorithm}` without "
                            f"`--speculative-draft-model-path`: the target ({target.architecture or 'unknown architecture'}) "
                            "has no MTP layers of its own", "add --speculative-draft-model-path with a draft trained for "
                            "this target", flag_source)
    if draft is not None and draft.facts is not None:
        kind = draft_kind(draft.architecture)
        if algorithm in _ACCEPTS and kind != "unknown" and kind not in _ACCEPTS[algorithm]:
            use, name = _KINDS[kind]
            yield DoctorFinding("algorithm_draft_mismatch", "error", f"`--speculative-algorithm {algorithm}` with "
                                f"{name} ({draft.architecture}): use {use}" + (
                                    "; under EAGLE the target passes one hidden state, not the three auxiliary ones, and "
                                    "the server runs healthy at accept len ≈ 1.00" if kind == "eagle3" else ""),
                                f"launch with --speculative-algorithm {use}", flag_source)
        if runtime and kind == "eagle3" and runtime.get("captured_layers") == "-":
            yield DoctorFinding("runtime_no_aux_capture", "error", f"at runtime ({runtime.get('worker')}, algorithm "
                                f"{runtime.get('algorithm')}) the target captured no auxiliary hidden states for the EAGLE-3 "
                                f"draft ({draft.architecture})", "launch with --speculative-algorithm EAGLE3",
                                runtime["source"])
        if algorithm == "EAGLE3" or kind == "eagle3":
            yield from _layer_findings(target, draft, trained_layers, runtime)
        yield from _shape_findings(target, draft, algorithm)
    yield from _step_findings(settings, source_of)


def _layer_findings(target: Model | None, draft: Model, trained: list[int] | None,
                    runtime: dict[str, str] | None) -> Iterator[DoctorFinding]:
    layers = int_or_none(target.get("num_hidden_layers")) if target is not None else None
    eagle = draft.get("eagle_config") if isinstance(draft.get("eagle_config"), dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    where = draft.source
    captured = [int_or_none(i) for i in (runtime or {}).get("captured_layers", "-").split(",") if i != "-"]
    if captured and None not in captured:   # the profiler saw the inputs of these layers captured: the truth
        ran = [i - 1 for i in captured]
        if ids is not None and ran != ids:
            yield DoctorFinding("runtime_layers_differ", "warning", f"at runtime the target captured ids {ran} (the inputs "
                                f"of layers {captured}), the draft's config names {ids}", "check which config the server read",
                                runtime["source"])
        ids, where = ran, runtime["source"]
    if ids is None and draft.get("eagle_aux_hidden_state_layer_ids") is not None:
        yield DoctorFinding(
            "aux_layers_ignored", "warning", f"the draft's eagle_aux_hidden_state_layer_ids "
            f"{draft.get('eagle_aux_hidden_state_layer_ids')} sit at the top of its config.json, where SGLang does not "
            "read them (it reads eagle_config.eagle_aux_hidden_state_layer_ids) and captures its default layers instead",
            "move the list into \"eagle_config\": {\"eagle_aux_hidden_state_layer_ids\": [...]}", where)
    if ids is None:
        if layers is None:
            return
        ids = [1, layers // 2 - 1, layers - 4]
        yield DoctorFinding("aux_layers_default", "info", f"the draft names no aux layer ids: SGLang captures its default for "
                            f"{layers} target layers, ids {ids} (the inputs of layers {[i + 1 for i in ids]})",
                            "write the ids the draft was trained on into eagle_config if they differ", where)
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        yield DoctorFinding("aux_layers_invalid", "error", f"eagle_aux_hidden_state_layer_ids {ids!r} is not a list of "
                            "integers", "write the layer ids as a JSON list of integers", where)
        return
    bad = [i for i in ids if i < -1 or i > layers - 2] if layers is not None else []
    if bad:
        yield DoctorFinding(
            "aux_layers_out_of_range", "error", f"aux layer ids {bad} are outside the target's layers: with "
            f"{layers} layers an id may be -1 (the embedding) … {layers - 2} (id k is layer k's output, captured "
            f"as layer k + 1's input; layer {layers - 1}'s output is never captured)",
            "use the ids the draft was trained on, within range for this target", where)
    if -1 in ids:
        yield DoctorFinding("aux_layers_embedding", "warning", f"aux layer id -1 in {ids} captures the embedding, not a "
                            "decoder layer's output", "use the decoder layers the draft was trained on", where)
    if len(set(ids)) < len(ids):
        yield DoctorFinding("aux_layers_duplicate", "warning", f"aux layer ids {ids} repeat a layer", "list each trained layer once",
                            where)
    known = trained if trained is not None else draft.get("synth_aux_layers")
    if isinstance(known, list) and known and list(ids) != list(known):
        said = "--trained-layers" if trained is not None else "speclogs_synth.json"
        shift = {i - k for i, k in zip(ids, known)} if len(ids) == len(known) else set()
        what = f"offset by {next(iter(shift)):+d} from" if shift in ({1}, {-1}) else "differ from"
        yield DoctorFinding(
            "aux_layers_offset" if shift in ({1}, {-1}) else "aux_layers_mismatch", "error",
            f"the aux layer ids the target captures for the draft, {list(ids)}, {what} the layers it was trained on "
            f"{list(known)} ({said})", f"set eagle_config.eagle_aux_hidden_state_layer_ids to {list(known)}", where)


def _shape_findings(target: Model | None, draft: Model, algorithm: str) -> Iterator[DoctorFinding]:
    where = draft.source
    if target is None or target.facts is None:
        return
    t_hidden, d_hidden = int_or_none(target.get("hidden_size")), int_or_none(draft.get("target_hidden_size") or draft.get("hidden_size"))
    if t_hidden and d_hidden and t_hidden != d_hidden and algorithm != "STANDALONE":   # a standalone draft reads tokens
        yield DoctorFinding("hidden_size_mismatch", "error", f"the draft reads hidden states of size {d_hidden} but the "
                            f"target's hidden_size is {t_hidden} ({target.source})", "use a draft trained for this target", where)
    t_vocab, d_vocab = int_or_none(target.get("vocab_size")), int_or_none(draft.get("vocab_size"))
    if t_vocab and d_vocab and t_vocab != d_vocab:
        yield DoctorFinding("vocab_size_mismatch", "error", f"draft vocab_size {d_vocab} ≠ target vocab_size {t_vocab} "
                            f"({target.source}): the draft shares the target's embedding",
                            "use a draft trained with this target's tokenizer", where)
    small, rows = int_or_none(draft.get("draft_vocab_size")), int_or_none(draft.get("d2t_rows"))
    if small and d_vocab and small > d_vocab:
        yield DoctorFinding("draft_vocab_size", "error", f"draft_vocab_size {small} exceeds vocab_size {d_vocab}",
                            "fix draft_vocab_size in the draft's config.json", where)
    elif small and d_vocab and small < d_vocab and algorithm == "EAGLE3":
        if rows is None and draft.get("safetensors_read"):
            yield DoctorFinding("draft_vocab_map_missing", "error", f"draft_vocab_size {small} < vocab_size {d_vocab} but "
                                "the weights hold no d2t map: draft token ids would be read as target ids",
                                "export the draft with its d2t tensor", where)
        elif rows is not None and rows != small:
            yield DoctorFinding("draft_vocab_map_size", "error", f"the d2t map has {rows} rows, draft_vocab_size is {small}",
                                "export the draft with a d2t of draft_vocab_size rows", where)
    t_pos, d_pos = int_or_none(target.get("max_position_embeddings")), int_or_none(draft.get("max_position_embeddings"))
    if t_pos and d_pos and d_pos < t_pos:
        yield DoctorFinding("max_position_shorter", "warning", f"the draft's max_position_embeddings {d_pos} < the target's "
                            f"{t_pos}: past {d_pos} tokens the draft runs outside what it was built for",
                            f"keep requests within {d_pos} tokens (--context-length {d_pos}) or use a longer draft", where)
    base = draft.get("base_model_name_or_path") or draft.get("base_model") or draft.get("synth_target_dir")
    if isinstance(base, str) and base and not _same_model(base, target.path):
        yield DoctorFinding("base_model_differs", "warning", f"the draft records its base model as {base}, the target is "
                            f"{target.path}", "check the draft was trained for this target (or the directory moved)", where)


def _same_model(recorded: str, target: str) -> bool:
    """The same directory, or the same last path component (a hub id and its local copy)."""
    paths = [Path(p).expanduser() for p in (recorded, target)]
    return paths[0].resolve() == paths[1].resolve() or paths[0].name.lower() == paths[1].name.lower()


def _step_findings(settings: dict, source_of: Callable[[str], str]) -> Iterator[DoctorFinding]:
    steps, topk, tokens = (int_or_none(settings.get(name)) for name in (
        "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"))
    if steps is None and (topk is not None or tokens is not None):
        yield DoctorFinding("spec_params_partial", "error", "`--speculative-eagle-topk` / `--speculative-num-draft-tokens` "
                            "without `--speculative-num-steps`: SGLang refuses to start (it chooses all three or none)",
                            "give --speculative-num-steps too, or none of the three",
                            source_of("speculative_eagle_topk" if topk is not None else "speculative_num_draft_tokens"))
    if steps and topk == 1 and tokens is not None and tokens != steps + 1:
        yield DoctorFinding("draft_tokens_adjusted", "warning", f"`--speculative-eagle-topk 1` with `--speculative-num-steps "
                            f"{steps}` verifies {steps + 1} tokens: SGLang replaces `--speculative-num-draft-tokens {tokens}` "
                            f"by {steps + 1}", f"write --speculative-num-draft-tokens {steps + 1}",
                            source_of("speculative_num_draft_tokens"))


def parse_runtime(message: str) -> dict[str, str]:
    """The profiler's `speclogs profiler: runtime: worker=… captured_layers=3,9,15 …` line → its key=value pairs."""
    pairs = message.split("runtime:", 1)[-1].split()
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def check_command(argv: list[str], trained_layers: list[int] | None = None) -> list[DoctorFinding]:
    """The checks of a server command line (`python -m sglang.launch_server …`), configs read from its local paths."""
    def source_of(name: str) -> str:
        used = [flag for flag, field in FLAGS.items() if field == name and arg_value(argv, flag) is not None]
        return f"command line {used[0] if used else '--' + name.replace('_', '-')}"
    return check_settings(server_settings(argv), source_of, trained_layers)


def check_settings(settings: dict[str, str], source_of: Callable[[str], str], trained_layers: list[int] | None = None,
                   models: dict | None = None, where: str = "", runtime: dict[str, str] | None = None
                   ) -> list[DoctorFinding]:
    """Every finding for one server start, errors first. `models`, `where`: a recorded launch's run.json `models` and
    its name; `runtime`: parse_runtime's facts of what the server ran, with its `source`."""
    target, draft = (_model(role, (settings.get(name) or "").strip("'\""), models, where)
                     for role, name in (("target", "model_path"), ("draft", "speculative_draft_model_path")))
    loaded = (runtime or {}).get("draft", "-")
    if draft is not None and draft.facts is None and loaded != "-":   # the class the server loaded
        draft = Model("draft", draft.path, {"architectures": [loaded]}, runtime["source"])
    found = _setup_findings(settings, target, draft, source_of, trained_layers, runtime)
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
