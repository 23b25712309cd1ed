"""``torchgarden tune``: hyperparameter search on Optuna (docs/tuning.md).

A study searches config keys (``SearchSpace``, read from YAML) over trials that are
ordinary runs in ``<study_dir>/trial-<n>/``; Optuna's RDB storage holds the study, so
processes on one or several machines share it. Optuna is imported only when a study
is opened or run.

Example:
    >>> from torchgarden import get_experiment
    >>> base = get_experiment("toy_regression")
    >>> space = load_search_space("space.yaml", base)  # doctest: +SKIP
"""

from __future__ import annotations

from torchgarden.tune.space import Parameter, SearchSpace, load_search_space
from torchgarden.tune.study import StudySpec, open_study, write_results
from torchgarden.tune.summary import format_summary, read_trials
from torchgarden.tune.trials import ReportToStudy, run_trials

__all__ = ["Parameter", "ReportToStudy", "SearchSpace", "StudySpec", "format_summary",
           "load_search_space", "open_study", "read_trials", "run_trials", "write_results"]
