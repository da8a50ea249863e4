"""speclogs.launcher: reproduce SGLang runs from a plan file, record each launch in run.json.

Standard library and psutil only: it runs on the GPU box, where duckdb and polars are absent.
"""

from speclogs.launcher.plan import Plan, load_plan, parse_plan
from speclogs.launcher.run import (
    Interrupted,
    LaunchOptions,
    LaunchResult,
    PlanRunSummary,
    doctor_plan,
    launch_plan,
    server_argv,
    server_env,
)

__all__ = ["Interrupted", "LaunchOptions", "LaunchResult", "Plan", "PlanRunSummary", "doctor_plan", "launch_plan",
           "load_plan", "parse_plan", "server_argv", "server_env"]
