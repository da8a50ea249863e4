"""speclogs.launcher: reproduce SGLang runs from a plan file, record each launch in run.json (docs/launcher.md)."""

from speclogs.launcher.plan import Plan, load_plan, parse_plan
from speclogs.launcher.run import Interrupted, LaunchOptions, PlanRunSummary, doctor_plan, launch_plan, server_argv, server_env

__all__ = ["Interrupted", "LaunchOptions", "Plan", "PlanRunSummary", "doctor_plan", "launch_plan", "load_plan", "parse_plan",
           "server_argv", "server_env"]
