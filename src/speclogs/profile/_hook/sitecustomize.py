"""speclogs profiler bootstrap: Python runs this at start-up in every process whose PYTHONPATH holds this folder
(SGLang's spawned schedulers too). With SPECLOGS_PROFILE=1 it installs the import hook; then it runs the
sitecustomize this file shadows, if any."""

import importlib.machinery
import importlib.util
import os
import sys


def _install_profiler_hook():
    if os.environ.get("SPECLOGS_PROFILE") != "1":
        return
    try:
        from speclogs.profile.hook import install_from_env
    except ImportError as error:
        sys.stderr.write(
            f"speclogs profiler: disabled: cannot import speclogs ({error}); "
            "put speclogs' src folder on PYTHONPATH\n"
        )
        return
    install_from_env()


def _run_shadowed_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_install_profiler_hook()
_run_shadowed_sitecustomize()
