"""A learned correction of the fitted GPU figures at the program level, kept only where it predicts better.

The fitted figures (cost/gpu_fit.py) price each call by its class; what they miss shows as a program's log
ratio of measured to predicted time. This model predicts that ratio from what the prediction is made of: the
share of the predicted time spent in host work, in each class of compute and of traffic, in row-bound
kernels, and the program's size (ridge regression on standardised features, numpy). It is judged by
cross-validation over programs: the figures and the correction are both refitted without the programs of a
fold, which then price them; a GPU uses the correction only where that beats the figures alone.
"""
from __future__ import annotations

import zlib

import numpy as np

from .gpu_fit import COMPUTE, MEMORY, Terms, call_parts, fit, predict

FEATURES = ("host", *(f"compute_{c}" for c in COMPUTE), *(f"memory_{m}" for m in MEMORY), "rows",
            "log_seconds", "log_calls")
RIDGE = 1.0  # in units of the standardised features' squared norm per program
#: how much lower its cross-validated rms log error must be for the correction to count as better: less is
#: within what another split of a few hundred programs moves
MARGIN = 0.05


def program_features(terms: Terms, figures: dict) -> np.ndarray:
    """[programs, FEATURES]: each program's predicted time split by what bounds each call, as shares."""
    host, compute, memory, rows = call_parts(terms, figures)
    busy = np.maximum(compute, np.maximum(memory, rows))
    columns = [host]
    columns += [np.where((terms.compute_class == i) & (compute >= np.maximum(memory, rows)), busy, 0.0)
                for i in range(len(COMPUTE))]
    columns += [np.where((terms.memory_class == i) & (memory > compute) & (memory >= rows), busy, 0.0)
                for i in range(len(MEMORY))]
    columns += [np.where((rows > compute) & (rows > memory), busy, 0.0)]
    per_program = np.stack([np.bincount(terms.program, c, minlength=terms.programs) for c in columns], axis=1)
    total = per_program.sum(axis=1, keepdims=True)
    calls = np.bincount(terms.program, terms.host[:, 0], minlength=terms.programs)
    return np.concatenate([per_program / np.maximum(total, 1e-15), np.log10(np.maximum(total, 1e-9)),
                           np.log10(calls + 1)[:, None]], axis=1)


class Correction:
    """log(measured / predicted) ~ standardised features @ weights + bias."""

    def __init__(self, features: np.ndarray, log_ratio: np.ndarray, ridge: float = RIDGE):
        self.mean, self.scale = features.mean(axis=0), features.std(axis=0) + 1e-9
        x = (features - self.mean) / self.scale
        self.bias = float(log_ratio.mean())
        self.weights = np.linalg.solve(x.T @ x + ridge * len(x) * np.eye(x.shape[1]), x.T @ (log_ratio - self.bias))

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return np.exp((features - self.mean) / self.scale @ self.weights + self.bias)


def fold_of(problem: str, folds: int) -> int:
    return zlib.crc32(problem.encode()) % folds


def cross_validated(terms_of, measured: np.ndarray, problems: list[str], reference: dict, folds: int = 5) -> dict:
    """Log errors (measured programs) of the figures alone and of figures + correction, each program priced by
    a fit that never saw its problem. ``terms_of(indices)``: Terms of those programs."""
    fold = np.array([fold_of(p, folds) for p in problems])
    prior, learned = np.zeros(len(measured)), np.zeros(len(measured))
    for k in range(folds):
        train, test = np.flatnonzero(fold != k), np.flatnonzero(fold == k)
        if not len(train) or not len(test):
            continue
        train_terms, test_terms = terms_of(train), terms_of(test)
        figures = fit(train_terms, measured[train], reference=reference)
        fitted_train = predict(train_terms, figures)
        correction = Correction(program_features(train_terms, figures), np.log(measured[train] / fitted_train))
        prior[test] = predict(test_terms, figures)
        learned[test] = prior[test] * correction(program_features(test_terms, figures))
    return {"prior": np.log(prior / measured), "learned": np.log(learned / measured)}


def rms(log_errors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(log_errors))))
