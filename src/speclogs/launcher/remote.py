"""`speclogs launch PLAN --host user@box`: the same launch on a remote box over ssh, outputs pulled back.

One ssh call unpacks speclogs and the plan into REMOTE_DIR (tar over stdin: ssh, tar and Python ≥ 3.11 are all it
needs there), one runs `python -m speclogs.launcher` there (--stop-on-stdin-eof: if this side goes away, the remote
launcher stops its server), one streams REMOTE_DIR/runs/<plan> back as tar. multinode reaches its nodes the same way.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import tarfile
import threading
from dataclasses import replace
from pathlib import Path

import speclogs
from speclogs.errors import LaunchError, PlanError
from speclogs.launcher.plan import load_plan
from speclogs.launcher.run import Interrupted, LaunchOptions, PlanRunSummary, Progress, _signals_raise_interrupted
from speclogs.runrecord import FILE_NAME as RUN_JSON


def launch_remote(plan_path: str | Path, host: str, options: LaunchOptions, *, ssh_options: tuple[str, ...] = (),
                  remote_python: str = "python3", remote_dir: str = ".speclogs-remote",
                  progress: Progress | None = None) -> PlanRunSummary:
    """Run the plan on `host` (user@box) and pull DIR/<cell>/<launch>/ back into options.out_dir."""
    say = progress or (lambda message: None)
    if not host or host.startswith("-"):
        raise LaunchError(f"--host {host!r}: not a host (a value starting with '-' would reach ssh as an option)",
                          hint="give it as user@box or box; ssh options go in --ssh-opt")
    plan = load_plan(plan_path)   # plan errors surface here, with the local file:line
    if plan.nodes is not None:
        raise PlanError(f"{plan_path}: the plan lists its nodes, so --host has nothing to add",
                        hint="run `speclogs launch PLAN` where ssh reaches the nodes (docs/launcher.md, several nodes)")
    out_dir = options.out_dir.resolve()
    if not options.resume and any(out_dir.glob(f"*/*/{RUN_JSON}")):
        raise LaunchError(f"{out_dir} already holds launches", hint="add --resume, or choose a new --out")
    ssh = ssh_command(ssh_options, host)
    remote_plan = f"plans/{plan.name}.toml"
    remote_out = f"runs/{plan.name}"

    say(f"{host}: uploading speclogs + plan to {remote_dir}")
    upload(ssh, remote_dir, bundle(Path(plan_path), remote_plan), host)

    flags = ["--out", remote_out, "--json-summary", "--stop-on-stdin-eof", *(f for cell in options.only for f in ("--only", cell))]
    flags += [flag for flag, on in (("--resume", options.resume), ("--retry-failed", options.retry_failed),
                                    ("--force", options.force)) if on]
    for flag, value in (("--max-launches", options.max_launches), ("--max-minutes", options.max_minutes),
                        ("--until", None if options.until is None else f"ci_width<={options.until!r}")):
        flags += [flag, str(value)] if value is not None else []
    command = python_command(remote_dir, remote_python, "speclogs.launcher", remote_plan, *flags)
    say(f"{host}: {remote_python} -m speclogs.launcher {remote_plan}")
    proc = subprocess.Popen([*ssh, command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stderr_lines: list[str] = []
    reader = threading.Thread(target=_relay, args=(proc.stderr, stderr_lines, say, host), daemon=True)
    reader.start()
    interrupted: str | None = None
    try:
        with _signals_raise_interrupted():
            stdout = proc.stdout.read()
            proc.wait()
    except KeyboardInterrupt as exc:
        interrupted = getattr(exc, "reason", "Ctrl-C")
        say(f"{host}: interrupted; closing the session so the remote launcher stops its server")
        proc.stdin.close()        # remote launcher sees EOF → stops the server, marks the launch interrupted
        try:
            stdout = proc.stdout.read()
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            stdout = b""
    reader.join(timeout=5)
    if not proc.stdin.closed:
        proc.stdin.close()

    say(f"{host}: pulling {remote_dir}/{remote_out} → {out_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    pull(ssh, remote_dir, remote_out, out_dir, host)

    if interrupted is not None:
        raise Interrupted(interrupted)
    summary = _summary_from(stdout)
    if summary is None:
        if proc.returncode == 130:
            raise Interrupted(f"remote launcher on {host} was interrupted")
        raise LaunchError(f"remote launch on {host} failed (exit {proc.returncode}): "
                          f"{' / '.join(stderr_lines[-3:]) or 'no output'}",
                          hint=f"run it by hand: ssh {host} '{command}'")
    results = tuple(replace(r, run_dir=str(out_dir / r.cell / str(r.launch))) for r in summary.results)
    return replace(summary, out_dir=str(out_dir), results=results)


def ssh_command(options: tuple[str, ...], host: str) -> list[str]:
    return ["ssh", "-o", "BatchMode=yes", *options, "--", host]  # `--`: the host is never read as an option


def python_command(remote_dir: str, python: str, module: str, *args: str) -> str:
    """The shell command that runs `python -m module args…` in remote_dir with the speclogs unpacked there."""
    return (f"cd {shlex.quote(remote_dir)} && PYTHONPATH=\"$PWD/src${{PYTHONPATH:+:$PYTHONPATH}}\" "
            + " ".join(["exec", *(shlex.quote(a) for a in (python, "-m", module, *args))]))


def upload(ssh: list[str], remote_dir: str, payload: bytes, host: str) -> None:
    """Unpack `payload` (speclogs + the plan) into remote_dir on `host`, replacing the speclogs unpacked there before."""
    remote = shlex.quote(remote_dir)
    done = subprocess.run([*ssh, f"mkdir -p {remote} && cd {remote} && rm -rf src/speclogs && tar -xf -"],
                          input=payload, capture_output=True, timeout=300)
    if done.returncode != 0:
        raise LaunchError(f"ssh {host}: upload failed (exit {done.returncode}): {_tail(done.stderr)}",
                          hint="check that `ssh " + " ".join(shlex.quote(a) for a in ssh[1:]) + " true` works")


def bundle(plan_path: Path, remote_plan: str) -> bytes:
    package = Path(speclogs.__file__).resolve().parent
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(package, arcname="src/speclogs", filter=lambda info: None if "__pycache__" in info.name else info)
        tar.add(plan_path, arcname=remote_plan)
    return buffer.getvalue()


def pull(ssh: list[str], remote_dir: str, folder: str, out_dir: Path, host: str) -> None:
    """remote_dir/folder on `host` as a tar stream into out_dir (nothing when it does not exist)."""
    where = shlex.quote(folder)
    command = f"cd {shlex.quote(remote_dir)} && test -d {where} && tar -C {where} -cf - ."
    proc = subprocess.Popen([*ssh, command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            tar.extractall(out_dir, filter="data")
    except tarfile.ReadError:
        pass   # nothing to pull (the remote run stopped before writing anything); the exit code says more
    finally:
        err = proc.stderr.read()
        proc.wait()
    if proc.returncode not in (0, 1):
        raise LaunchError(f"ssh {host}: pulling the outputs back failed (exit {proc.returncode}): {_tail(err)}",
                          hint="the outputs are still on the remote box; rerun with --resume to pull them")


def _relay(stream, lines: list[str], say: Progress, host: str) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip()
        lines.append(line)
        say(f"{host}| {line}")


def _summary_from(stdout: bytes) -> PlanRunSummary | None:
    lines = [line for line in stdout.decode("utf-8", errors="replace").splitlines() if line.strip().startswith("{")]
    try:
        return PlanRunSummary.from_dict(json.loads(lines[-1])) if lines else None
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def _tail(raw: bytes) -> str:
    lines = raw.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else "no message"
