"""A stand-in for `python -m sglang.launch_server` (stdlib only), for the launcher's CI tests.

It accepts SGLang's flags (ignores the ones it does not use), prints SGLang-0.5.14-format log lines to stdout,
answers /health 503 for --ready-after seconds then 200, /generate with output_ids + meta_info, and drains on SIGTERM.
Flags it does not know are printed in its ServerArgs line like SGLang's (`--add-bos-token` → `add_bos_token=True`);
--print-line TEXT prints TEXT as a log line.
Fault switches: --die-after S (exit 3 during start), --never-ready, --hang-on-sigterm, --generate-status CODE,
--generate-delay S, --spawn-child (a child process in the same group, like SGLang's schedulers), --spawn-daemon (one
that double-forks out of the group and session), --metrics-status CODE.
SGLang's own signals, modelled on SGLang 0.5.14's real output (fixtures/h200-sglang-0.5.14-metrics): --enable-metrics
serves GET /metrics (Prometheus text: generation tokens and verify calls counted per finished request, spec gauges, and
with SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 forward_execution_seconds_total per category); --export-metrics-to-file
--export-metrics-to-file-dir D writes D/sglang-request-metrics-YYYYMMDD_HH.log; --log-requests prints Receive: /
Finish: lines (--log-requests-format json: 0.5.14's JSON lines).

Several nodes (--nnodes N --node-rank I --dist-init-addr HOST:PORT), as SGLang's multi-node launch: node 0 listens on
the dist-init port and becomes ready only once the N - 1 other nodes have connected to it (each says its rank);
the other nodes connect to it, serve no HTTP, and wait for SIGTERM.

Playing an arm with known throughput: --tok-s R makes /generate take max_new_tokens / rate seconds, rate =
R × (a launch factor exp N(0, --launch-cv), drawn once at start) × exp N(0, --request-cv) per request, and log it as
the decode line's gen throughput and its meta_info.e2e_latency as max_new_tokens / rate (simulated time: what the
launcher measures does not depend on how busy the machine is). The draws are seeded by --noise-seed and the launch's
directory (the launcher's DIR/<cell>/<launch>/server.log is this process's stdout), so every launch of a plan differs,
reproducibly.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(message: str, tag: str = "") -> None:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    sys.stdout.write(f"[{stamp}{' ' + tag if tag else ''}] {message}\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", default="/tmp/model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--speculative-algorithm", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--ready-after", type=float, default=0.5)
    parser.add_argument("--die-after", type=float, default=None)
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--hang-on-sigterm", action="store_true")
    parser.add_argument("--generate-status", type=int, default=200)
    parser.add_argument("--generate-delay", type=float, default=0.0)
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--spawn-daemon", action="store_true")
    parser.add_argument("--print-env", action="append", default=[])
    parser.add_argument("--print-line", action="append", default=[])
    parser.add_argument("--tok-s", type=float, default=None)
    parser.add_argument("--launch-cv", type=float, default=0.0)
    parser.add_argument("--request-cv", type=float, default=0.0)
    parser.add_argument("--noise-seed", type=int, default=0)
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--export-metrics-to-file", action="store_true")
    parser.add_argument("--export-metrics-to-file-dir", default=None)
    parser.add_argument("--log-requests", action="store_true")
    parser.add_argument("--metrics-status", type=int, default=200)
    parser.add_argument("--log-requests-format", default="text")
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-init-addr", default=None)
    args, unknown = parser.parse_known_args()
    args.server_args = other_server_args(unknown)
    return args


def other_server_args(unknown: list[str]) -> str:
    """The flags the stand-in does not use, as SGLang prints them in ServerArgs(…): `, name=value` each."""
    fields, name = [], None
    for part in [*unknown, "--"]:
        if part.startswith("--"):
            if name:
                fields.append(f"{name}=True")
            name, _, value = part[2:].replace("-", "_").partition("=")
            if value:
                fields.append(f"{name}={_field(value)}")
                name = None
        elif name:
            fields.append(f"{name}={_field(part)}")
            name = None
    return "".join(f", {field}" for field in fields)


def _field(value: str) -> str:
    try:
        return repr(json.loads(value)) if value[:1] in "[-0123456789" or value in ("true", "false") else repr(value)
    except ValueError:
        return repr(value)


# A helper that leaves the server's process group the way daemons do: fork, setsid, fork; the first child exits.
DAEMON = """
import os, sys, time
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
print(f"daemon pid={os.getpid()}", flush=True)
time.sleep(600)
"""


def launch_rng(seed: int) -> random.Random:
    """Seeded by the launch: the directory of the log file that stdout points at (<cell>/<launch>)."""
    try:
        where = os.readlink("/proc/self/fd/1")
    except OSError:
        where = ""
    parts = where.split(os.sep)
    return random.Random(f"{seed}:{os.sep.join(parts[-3:-1])}")


def main() -> None:
    args = parse_args()
    started = time.monotonic()
    rng = launch_rng(args.noise_seed)
    launch_factor = math.exp(rng.gauss(0.0, args.launch_cv))
    spec = args.speculative_algorithm
    log(f"server_args=ServerArgs(model_path='{args.model_path}', tokenizer_path='{args.model_path}', "
        f"skip_tokenizer_init=True, host='{args.host}', port={args.port}, tp_size={args.tp}, "
        f"speculative_algorithm={spec!r}, api_key={args.api_key!r}{args.server_args})")
    for name in args.print_env:
        log(f"env {name}={os.environ.get(name, '<unset>')}")
    for line in args.print_line:
        log(line)
    for rank in range(args.tp):
        log("Init torch distributed begin.", f"TP{rank}")
    child = None
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        log(f"scheduler child pid={child.pid}", "TP0")
    if args.spawn_daemon:  # double fork into a session of its own: no longer in the server's process group
        subprocess.run([sys.executable, "-c", DAEMON], check=True)
    for rank in range(args.tp):
        log("Load weight begin. avail mem=138.31 GB", f"TP{rank}")
        log("Load weight end. elapsed=0.22 s, type=LlamaForCausalLM, avail mem=137.60 GB, mem usage=0.71 GB.", f"TP{rank}")
    log("Capture target verify CUDA graph begin. backend=full, num_tokens_per_bs=6, bs=[1], avail mem=69.07 GB", "TP0")

    if args.nnodes > 1 and args.node_rank > 0:
        follow_node_zero(args)
        return
    joined = rendezvous(args) if args.nnodes > 1 else None

    if args.die_after is not None:
        time.sleep(args.die_after)
        log("Scheduler hit an exception: RuntimeError: CUDA error: out of memory", "TP0")
        sys.exit(3)

    state = {"ready": False, "verify_ct": 0}
    counters = {"generation_tokens": 0, "verify_calls": 0, "requests": 0, "target_verify": 0.0, "eagle_draft": 0.0,
                "eagle_draft_extend": 0.0, "extend": 0.0}
    counters_lock = threading.Lock()
    device_timer = os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER") == "1"
    labels = f'engine_type="unified",model_name="{args.model_path}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    stop_event = threading.Event()

    def metrics_text() -> bytes:
        with counters_lock:
            c = dict(counters)
        lines = []
        if device_timer:
            lines += ["# HELP sglang:forward_execution_seconds_total Total time that GPU is busy executing model forward "
                      "passes. Refer to ForwardMode for category labels.",
                      "# TYPE sglang:forward_execution_seconds_total counter"]
            lines += [f'sglang:forward_execution_seconds_total{{category="{k}",{labels}}} {c[k]!r}'
                      for k in ("extend", "eagle_draft", "target_verify", "eagle_draft_extend") if spec or k == "extend"]
        short = f'engine_type="unified",model_name="{args.model_path}"'
        lines += ["# HELP sglang:generation_tokens_total Number of generation tokens processed.",
                  "# TYPE sglang:generation_tokens_total counter",
                  f"sglang:generation_tokens_total{{{short}}} {float(c['generation_tokens'])}",
                  "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.",
                  "# TYPE sglang:spec_verify_calls_total counter",
                  f"sglang:spec_verify_calls_total{{{short}}} {float(c['verify_calls'])}",
                  "# HELP sglang:num_requests_total Number of requests processed.",
                  "# TYPE sglang:num_requests_total counter",
                  f"sglang:num_requests_total{{{short}}} {float(c['requests'])}",
                  "# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.",
                  "# TYPE sglang:max_total_num_tokens gauge",
                  f"sglang:max_total_num_tokens{{{labels}}} 2.0955e+06"]
        if spec:
            lines += ["# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
                      "# TYPE sglang:spec_accept_length gauge", f"sglang:spec_accept_length{{{labels}}} 2.0"]
        return ("\n".join(lines) + "\n").encode()

    def export_record(rid: str, payload: dict, meta: dict) -> None:
        if not (args.export_metrics_to_file and args.export_metrics_to_file_dir):
            return
        name = f"sglang-request-metrics-{datetime.datetime.now().strftime('%Y%m%d_%H')}.log"
        parameters = {"rid": rid, "sampling_params": payload.get("sampling_params", {}), "stream": False}
        with open(os.path.join(args.export_metrics_to_file_dir, name), "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"request_parameters": json.dumps(parameters), **meta}) + "\n")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *fmt_args):  # uvicorn-style access line
            code = fmt_args[1] if len(fmt_args) > 1 else "-"
            text = {"200": "OK", "503": "Service Unavailable", "500": "Internal Server Error"}.get(str(code), "")
            log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} {self.path} '
                f'HTTP/1.1" {code} {text}')

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - http.server API
            if self.path == "/health":
                self._send(200 if state["ready"] else 503, b"")
            elif self.path == "/metrics" and args.enable_metrics:
                self._send(args.metrics_status, metrics_text() if args.metrics_status == 200 else b"")
            else:
                self._send(404, b"{}")

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/generate":
                self._send(404, b"{}")
                return
            if args.generate_status != 200:
                self._send(args.generate_status, b'{"error": "stand-in failure"}')
                return
            started_req = time.perf_counter()
            rid = uuid.uuid4().hex
            obj = {"rid": rid, "sampling_params": payload.get("sampling_params", {}), "stream": False}
            if args.log_requests and args.log_requests_format == "json":   # 0.5.14's log_utils.log_json
                log(json.dumps({"timestamp": datetime.datetime.now().isoformat(), "event": "request.received", "rid": rid,
                                "obj": obj}))
            elif args.log_requests:
                log(f"Receive: obj=GenerateReqInput(rid='{rid}', sampling_params={payload.get('sampling_params', {})!r}, "
                    "stream=False)")
            time.sleep(args.generate_delay)
            n_new = payload.get("sampling_params", {}).get("max_new_tokens", 16)
            rate = 521.29
            simulated_s = None  # an arm of known throughput: the request's time as simulated, not as the clock ran
            if args.tok_s is not None:
                rate = args.tok_s * launch_factor * math.exp(rng.gauss(0.0, args.request_cv))
                simulated_s = n_new / rate
                time.sleep(max(0.0, simulated_s - (time.perf_counter() - started_req)))
            prompt = payload.get("input_ids") or list(range(len(payload.get("text", "x").split())))
            log(f"Prefill batch, #new-seq: 1, #new-token: {len(prompt)}, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 71.81",
                "TP0")
            verify_ct = (n_new + 1) // 2 if spec else 0
            accept = ", accept len: 2.00, accept rate: 0.20" if spec else ""
            occupancy = ", fwd occupancy: 40.40%" if device_timer else ""   # SGLang prints it with the device timer on
            if args.tok_s is not None:  # an arm of known throughput: one line with this request's rate
                lines = ((len(prompt) + n_new, f"{rate:.2f}"),)
            else:  # like SGLang: the first line after idle counts the idle time in its throughput, the next is a cycle's
                lines = ((len(prompt) + n_new // 2, "14.00"), (len(prompt) + n_new, "521.29"))
            for tokens, throughput in lines:
                log(f"Decode batch, #running-req: 1, #token: {tokens}, token usage: 0.00{accept}, "
                    f"cuda graph: True, gen throughput (token/s): {throughput}, #queue-req: 0{occupancy}", "TP0")
            meta = {"id": rid, "finish_reason": {"type": "length", "length": n_new},
                    "prompt_tokens": len(prompt), "completion_tokens": n_new, "cached_tokens": 0,
                    "e2e_latency": simulated_s if simulated_s is not None else time.perf_counter() - started_req}
            if spec:
                meta.update({"spec_accept_rate": 0.2, "spec_accept_length": n_new / verify_ct, "spec_verify_ct": verify_ct,
                             "spec_num_correct_drafts": n_new - verify_ct, "spec_num_proposed_drafts": 5 * verify_ct,
                             "spec_accept_histogram": [2 * verify_ct - n_new, n_new - verify_ct]})
            meta.update({"request_received_ts": time.time() - meta["e2e_latency"], "request_finished_ts": time.time()})
            with counters_lock:
                counters["generation_tokens"] += n_new
                counters["verify_calls"] += verify_ct
                counters["requests"] += 1
                counters["extend"] += 0.01
                counters["target_verify"] += 0.0013 * verify_ct
                counters["eagle_draft"] += 0.00043 * verify_ct
                counters["eagle_draft_extend"] += 0.00014 * verify_ct
            export_record(rid, payload, meta)
            if args.log_requests and args.log_requests_format == "json":
                log(json.dumps({"timestamp": datetime.datetime.now().isoformat(), "event": "request.finished", "rid": rid,
                                "obj": obj, "out": {"meta_info": meta}}))
            elif args.log_requests:
                log(f"Finish: obj=GenerateReqInput(rid='{rid}', sampling_params={payload.get('sampling_params', {})!r}, "
                    f"stream=False), out={{'meta_info': {meta!r}}}")
            body = json.dumps({"output_ids": [(i * 7) % 2048 for i in range(n_new)], "meta_info": meta}).encode()
            self._send(200, body)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True

    def on_sigterm(signum, frame):
        log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        if args.hang_on_sigterm:
            return
        stop_event.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    log(f"INFO:     Started server process [{os.getpid()}]")
    log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    while not stop_event.is_set():
        peers_in = joined is None or joined.is_set()
        if not state["ready"] and not args.never_ready and peers_in and time.monotonic() - started >= args.ready_after:
            log("Capture target verify CUDA graph end. elapsed=0.10 s, mem usage=0.04 GB, avail mem=69.03 GB.", "TP0")
            log("The server is fired up and ready to roll!")
            state["ready"] = True
        stop_event.wait(0.05)
    server.shutdown()
    log("Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].")
    if child is not None:
        child.terminate()
        child.wait()
    sys.exit(0)


def rendezvous(args: argparse.Namespace) -> threading.Event:
    """Node 0: listen on the dist-init port; the event is set once every other node has connected."""
    import socket

    host, port = args.dist_init_addr.rsplit(":", 1)
    listener = socket.create_server((host, int(port)), reuse_port=False)
    joined = threading.Event()

    def accept() -> None:
        ranks = set()
        while len(ranks) < args.nnodes - 1:
            connection, _ = listener.accept()
            rank = connection.recv(16).decode().strip()
            ranks.add(rank)
            log(f"Init torch distributed: node rank {rank} joined ({len(ranks) + 1}/{args.nnodes} nodes)", "TP0")
            connection.close()
        listener.close()
        log("Init torch distributed ends. mem usage=0.00 GB", "TP0")
        joined.set()

    threading.Thread(target=accept, daemon=True).start()
    return joined


def follow_node_zero(args: argparse.Namespace) -> None:
    """Node rank > 0: join node 0 at --dist-init-addr, serve nothing, drain on SIGTERM."""
    import socket

    host, port = args.dist_init_addr.rsplit(":", 1)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2) as connection:
                connection.sendall(f"{args.node_rank}\n".encode())
            break
        except OSError:
            if time.monotonic() > deadline:
                log(f"Init torch distributed failed: cannot reach {args.dist_init_addr}", f"TP{args.node_rank}")
                sys.exit(4)
            time.sleep(0.1)
    log(f"Init torch distributed ends. node rank {args.node_rank} of {args.nnodes}. mem usage=0.00 GB", f"TP{args.node_rank}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: (log("SIGTERM received. signum=None frame=None. Draining requests "
                                                           "and shutting down..."), stop.set()))
    stop.wait()
    log("Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].")


if __name__ == "__main__":
    main()
