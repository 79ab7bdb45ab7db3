"""What a user can set, grouped by the stage that reads it, frozen, validated and resolved once.

``optimize(model, inputs, rules=..., measure=...)`` takes the settings as keywords (``KEYWORDS`` maps each to
its group and field) or ``options=Options.of(...)``. Each field says what it does in one line; why a default
is what it is (the measurements behind it) is in docs/decisions.md.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, fields, replace

from ..egraph import saturate as sat
from ..errors import EqiforgeError
from ..runtime import backends

MEASURE_MODES = ("auto", "always", "never")
SHAPE_POLICIES = ("specialize", "static")


@dataclass(frozen=True)
class Search:
    """What the e-graph holds and how far it grows."""

    rules: tuple[str, ...] | None = None  # rule-set names; None: every set of the backend's layers
    limits: sat.Limits = field(default_factory=sat.Limits)  # saturation's iteration, e-node and time limits
    assume_finite: bool = True  # rules exact only for finite values run (docs/numerics.md)
    fold_constants: bool = True  # inference: parameter-only sub-expressions are computed once
    share_blocks: bool = True  # identical repeated blocks (a model's layers) are optimized once (pipeline/blocks.py)
    kernel_guide: float | None = 1.5  # triton: kernels are formed for e-nodes priced within this factor of their
    #                                   e-class's best (egraph/guide.py); None: for every e-node
    check_rules: bool = True  # a custom rules folder's rule files are verified before use (egraph/rulecheck.py)


@dataclass(frozen=True)
class Extraction:
    """How the plan is priced and chosen from the e-graph."""

    method: str = "auto"  # auto | greedy | ilp (auto: the ILP on e-graphs up to 20k e-nodes)
    seconds: float = 3.0  # extraction's time limit; past it the better of the ILP's best and greedy's is used
    cost_model: str = "roofline"  # the cost model's name (cost/lookup.py)
    device: object = None  # what is priced for: a device table entry, "cpu", a Device; None: see priced_device


@dataclass(frozen=True)
class Measuring:
    """When a measurement decides what runs (decide/)."""

    mode: str = field(default_factory=lambda: os.environ.get("EQIFORGE_MEASURE", "auto"))  # auto | always | never
    seconds: float = 2.0  # the budget of the measured choice's timing (at most 1.5x spent; builds outside it)
    min_gain: float = 0.005  # a plan predicted faster by less than this fraction does not replace the program
    original_if_no_better: bool = True  # torch/inductor: a plan no better than the program leaves it running


@dataclass(frozen=True)
class Shapes:
    """What calls at other input signatures get."""

    policy: str = "specialize"  # "specialize": a plan of their own (or one for every size); "static": an error
    dynamic: object = None  # dims symbolic from the first call: True (every dim over 1) or {input: dims}


@dataclass(frozen=True)
class Runtime:
    """What the plan runs as, and what the pipeline does around it."""

    backend: str = "auto"  # torch | inductor | triton | auto (torch code; on CPU Inductor's compile timed too)
    validate: bool = True  # the plan runs against the captured program before it is returned
    cache: bool = True  # saturations, exact extractions and decisions stored on disk are reused
    progress: bool = False  # a progress bar over saturation
    auto: bool = False  # set by resolution, not a keyword: the user asked for "auto" and ``backend`` is its entry

    @property
    def entry(self) -> backends.Backend:
        return backends.resolve(self.backend)[0]


GROUPS = {"search": Search, "extraction": Extraction, "measuring": Measuring, "shapes": Shapes, "runtime": Runtime}
RENAMED = {"extractor": ("extraction", "method"), "extract_seconds": ("extraction", "seconds"),
           "priced_device": ("extraction", "device"), "measure": ("measuring", "mode"),
           "measure_seconds": ("measuring", "seconds"), "shapes": ("shapes", "policy")}
#: keyword -> (group, field): a group's field under its own name unless RENAMED gives the keyword
KEYWORDS = {**{f.name: (group, f.name) for group, kind in GROUPS.items() for f in fields(kind)
               if (group, f.name) not in RENAMED.values() and f.name != "auto"}, **RENAMED}
#: an old keyword -> its name now: still taken, with a DeprecationWarning ("device" read as a torch.device)
DEPRECATED = {"device": "priced_device"}


@dataclass(frozen=True)
class Options:
    """Every setting, by stage. ``Options.of(**keywords)`` builds one; ``with_(**keywords)`` another from it."""

    search: Search = field(default_factory=Search)
    extraction: Extraction = field(default_factory=Extraction)
    measuring: Measuring = field(default_factory=Measuring)
    shapes: Shapes = field(default_factory=Shapes)
    runtime: Runtime = field(default_factory=Runtime)

    @classmethod
    def of(cls, **keywords) -> Options:
        return cls().with_(**keywords)

    def with_(self, **keywords) -> Options:
        """These options with the settings ``keywords`` names changed, validated."""
        keywords = renamed(keywords)
        unknown = sorted(set(keywords) - set(KEYWORDS))
        if unknown:
            raise EqiforgeError(f"unknown option(s) {unknown}; known: {sorted(KEYWORDS)}")
        if keywords.get("rules") is not None:
            rules = keywords["rules"]
            keywords["rules"] = (rules,) if isinstance(rules, str) else tuple(rules)
        changes: dict[str, dict] = {}
        for name, value in keywords.items():
            group, attribute = KEYWORDS[name]
            changes.setdefault(group, {})[attribute] = value
        options = replace(self, **{g: replace(getattr(self, g), **c) for g, c in changes.items()})
        options.check()
        return options

    def resolved(self, auto: str = "torch") -> Options:
        """The backend "auto" stands for made explicit (``auto``'s entry, ``runtime.auto`` set), once, at the top."""
        if self.runtime.backend != backends.AUTO:
            return self
        return replace(self, runtime=replace(self.runtime, backend=auto, auto=True))

    def running_as(self, backend: str) -> Options:
        """These options for plans that run as ``backend`` whatever the user chose (a plan for every size
        runs as torch code)."""
        return replace(self, runtime=replace(self.runtime, backend=backend, auto=False))

    def check(self) -> None:
        """An EqiforgeError naming the first setting out of range."""
        backends.resolve(self.runtime.backend)  # an unknown name is a clear error here
        if self.shapes.policy not in SHAPE_POLICIES:
            raise EqiforgeError(f"unknown shapes policy {self.shapes.policy!r}; available: {list(SHAPE_POLICIES)}")
        if not isinstance(self.search.limits, sat.Limits):
            raise EqiforgeError("limits must be an eqiforge.Limits(...)")
        if self.measuring.mode not in MEASURE_MODES:
            raise EqiforgeError(f"unknown measure mode {self.measuring.mode!r}; available: {list(MEASURE_MODES)}")
        if not self.measuring.seconds >= 0:
            raise EqiforgeError("measure_seconds is a time budget in seconds (0: no timing); "
                                f"got {self.measuring.seconds!r}")
        if not 0 <= self.measuring.min_gain < 1:
            raise EqiforgeError(f"min_gain is a fraction in [0, 1) (0.005: a plan must be predicted 0.5% faster); "
                                f"got {self.measuring.min_gain!r}")


def renamed(keywords: dict, deprecated: dict | None = None) -> dict:
    """``keywords`` with each old name (``DEPRECATED``, or ``deprecated``) under its new one, with a warning."""
    deprecated = DEPRECATED if deprecated is None else deprecated
    for old in sorted(set(keywords) & set(deprecated)):
        new = deprecated[old]
        if new in keywords:
            raise EqiforgeError(f"both {old!r} and {new!r} given: {old!r} is the old name of {new!r}")
        warnings.warn(f"eqiforge: the option {old!r} is now {new!r} (the old name will be removed)",
                      DeprecationWarning, stacklevel=4)
        keywords = {(new if k == old else k): v for k, v in keywords.items()}
    return keywords


# ------------------------------------------------------------------------------------------ on the command line

def add_arguments(parser, search_only: bool = False, backend: str = backends.AUTO) -> None:
    """The settings' command-line flags, one meaning each in every subcommand: those that change what is
    optimized (rules, limits, backend, priced device, extraction, cost model) and, unless ``search_only``,
    the measuring and the checks. A flag not given leaves the setting at its default (``from_arguments``),
    but for ``backend``, this subcommand's."""
    limits = sat.Limits()
    parser.add_argument("--rules", help="comma-separated rule sets (default: every set of the backend's layers; "
                                        "`eqiforge rules` lists them)")
    parser.add_argument("--iterations", type=int, help=f"saturation's iteration limit (default {limits.iterations})")
    parser.add_argument("--enodes", type=int, help=f"saturation's e-node limit (default {limits.enodes:,})")
    parser.add_argument("--seconds", type=float,
                        help=f"saturation's time limit in seconds (default {limits.seconds:g})")
    parser.add_argument("--backend", choices=backends.NAMES, default=None if backend == backends.AUTO else backend,
                        help=f"what the plan runs as (default {backend}): auto (PyTorch code, and on CPU tensors "
                             "whichever of it and Inductor's compile of it is measured faster), torch (PyTorch "
                             "calls), inductor (the plan compiled by Inductor) or triton (generated kernels: CUDA, "
                             "or the Triton interpreter with TRITON_INTERPRET=1)")
    parser.add_argument("--priced-device", "--device", dest="priced_device", help=priced_device_help(
        "$EQIFORGE_DEVICE, else this CPU for CPU programs on the torch backend, else H100"))
    parser.add_argument("--extractor", choices=["auto", "greedy", "ilp"],
                        help="auto (default: the exact ILP on e-graphs up to 20k e-nodes, greedy beyond), greedy "
                             "or ilp")
    parser.add_argument("--cost-model", choices=["roofline", "learned"],
                        help="roofline (default: the calibrated roofline prior) or learned (the package's model "
                             "trained on measured timings for the device; the report names the prior if none fits)")
    if search_only:
        return
    parser.add_argument("--measure", choices=MEASURE_MODES,
                        help="time the program, the plan and their Inductor compiles and run the fastest: auto "
                             "(default, or $EQIFORGE_MEASURE: where the prediction does not decide), always, never")
    parser.add_argument("--measure-seconds", type=float,
                        help=f"the time budget of that timing (default {Measuring.seconds:g}; builds outside it)")
    parser.add_argument("--no-fold", action="store_true", help="do not precompute parameter-only expressions")
    parser.add_argument("--no-assume-finite", action="store_true",
                        help="leave out rules exact for finite values only: NaN/inf as in eager (docs/numerics.md)")
    parser.add_argument("--no-validate", action="store_true", help="skip the plan check against the captured program")
    parser.add_argument("--no-cache", action="store_true",
                        help="saturate, extract and measure again, even where EqiForge's disk cache holds the answer")


def priced_device_help(default: str) -> str:
    """The ``--priced-device`` flag's help (every subcommand that prices), with its ``default``."""
    return (f"the device the cost model prices for, a name of its table (H100, A100, ...) or cpu (default "
            f"{default}); it changes the prices, never where anything runs (--device: its old name)")


def from_arguments(args) -> dict:
    """The ``optimize`` keywords of the flags ``add_arguments`` defined that were given."""
    given = {"rules": args.rules.split(",") if args.rules else None, "backend": args.backend,
             "priced_device": args.priced_device, "extractor": args.extractor, "cost_model": args.cost_model,
             "measure": getattr(args, "measure", None), "measure_seconds": getattr(args, "measure_seconds", None)}
    keywords = {k: v for k, v in given.items() if v is not None}
    bounds = {"iterations": args.iterations, "enodes": args.enodes, "seconds": args.seconds}
    if any(v is not None for v in bounds.values()):
        keywords["limits"] = sat.Limits(**{k: v for k, v in bounds.items() if v is not None})
    for flag, keyword in (("no_fold", "fold_constants"), ("no_assume_finite", "assume_finite"),
                          ("no_validate", "validate"), ("no_cache", "cache")):
        if getattr(args, flag, False):
            keywords[keyword] = False
    return keywords
