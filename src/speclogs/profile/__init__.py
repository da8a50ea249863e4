"""EAGLE-worker phase profiling for SGLang, without editing SGLang (`python -m speclogs.profile`).

Light to import: stdlib only; torch is imported only in the profiled server processes.
"""

from speclogs.profile.command import profiled_command, profiled_environment
from speclogs.profile.timing import SPEC_CYCLE_FORMAT, CycleProfiler, SpecCycleSample

__all__ = ["SPEC_CYCLE_FORMAT", "CycleProfiler", "SpecCycleSample", "profiled_command", "profiled_environment"]
