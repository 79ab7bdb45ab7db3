"""Extraction: choose, from a snapshot of the saturated e-graph, the e-nodes that compute the outputs.

Cost is DAG cost (a shared sub-term is paid once), with per-e-node costs from the cost model.
``dag`` holds the shared pieces (Selection, DAG cost, validity check), ``greedy`` the fast default
extractor, ``ilp`` the exact one (HiGHS under a time limit), ``api`` the ``extract`` entry point.
"""
from .api import METHODS, extract, next_best
from .dag import Extraction, Selection

__all__ = ["METHODS", "Extraction", "Selection", "extract", "next_best"]
