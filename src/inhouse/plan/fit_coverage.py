"""Whether the GPUs a plan chose were among those its step-time constants were fitted on.

The constants hold no number per GPU (docs/perf-model.md): a GPU outside the calibration is
predicted from its catalog figures alone, and `benchmarks/bench_predict.py` measures that such
forecasts err more than in-sample ones. The plan's assumptions say which case each chosen GPU
is, so a reader knows which forecasts to measure before signing.
"""

from __future__ import annotations

from collections.abc import Sequence

from inhouse.perf.constants import EngineConstants
from inhouse.spec.catalog import get_gpu

ERRORS = "docs/perf-model.md, *Errors by group*"
MEASURE = "measure before you sign (inhouse bench on the hardware)"


def _names(gpus: Sequence[str]) -> str:
    shown = [get_gpu(gpu).display_name for gpu in gpus]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def fit_coverage(backend: str, constants: EngineConstants, gpus: Sequence[str]) -> str:
    """One assumption line for the chosen `gpus` (catalog names, in pool order)."""
    chosen = [get_gpu(gpu).name for gpu in dict.fromkeys(gpus)]
    fitted = constants.fitted_gpus
    what = f"Calibration: the {backend} step-time constants"
    if fitted is None:
        return (
            f"{what} do not record which GPUs they were fitted on; {_names(chosen)}'s latency "
            "forecasts may be extrapolated from the GPU catalog's figures (held-out errors: "
            f"{ERRORS}); {MEASURE}."
        )
    seen = f"{what} were fitted on {_names(fitted) if fitted else 'no'} runs"
    outside = [gpu for gpu in chosen if gpu not in fitted]
    if not outside:
        verb = "is" if len(chosen) == 1 else "are"
        return f"{seen}; {_names(chosen)} {verb} among them (in-sample errors: {ERRORS})."
    verb, its = ("is", "its") if len(outside) == 1 else ("are", "their")
    return (
        f"{seen}; {_names(outside)} {verb} not among them: {its} latency forecasts are "
        f"extrapolated from the GPU catalog's figures (held-out errors: {ERRORS}, "
        f"leave-one-GPU-out and unseen GPUs); {MEASURE}."
    )
