"""Fault injection: make calls fail the way Google's front end and the network do.

Three ways to ask for a fault, strongest first:

* the request header ``X-Emulator-Fault: <kind>`` forces one on that call (tests in other processes);
* ``ScriptedFault`` entries, consumed in order by the calls they match (one scenario per test);
* a ``FaultPlan`` gives every matching call a fault with probability ``rate`` (a chaos run), drawn
  from ``random.Random(seed)`` so that a run can be repeated.

``FaultInjector`` holds all of this for a running emulator and counts what it injected. Faults are
decided only for valid calls about to reach the backend: Google's own refusals are never hidden.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from airflow_provider_slurmapi.emulator.backend_api import HTTP_METHODS

FAULT_KINDS = (
    "unavailable",  # 503 UNAVAILABLE
    "resource_exhausted",  # 429 RESOURCE_EXHAUSTED
    "internal",  # 500 INTERNAL
    "bad_gateway",  # 502 text/html from the load balancer
    "gateway_timeout",  # 504 text/html from the load balancer
    "reset_before",  # connection reset; the backend never sees the call
    "reset_after",  # the backend handles the call, then the connection is reset: the reply is lost
    "latency",  # answered normally after a delay
    "token_rejected",  # 401 UNAUTHENTICATED although the token is valid
    # 504 DEADLINE_EXCEEDED from Google's front end, which gave up waiting, while the cluster still
    # works on the call: it takes effect ``latency`` seconds later (a submit creates its job then)
    "late_landing",
    # Google answers 200, slurmrestd inside it fails, as the real one does (see outages.py); no job
    # is created or cancelled:
    "slurmctld_unreachable",  # slurmctld (on /slurmdb: slurmdbd) down: 502 errors 1800, 500 -1...
    "slurm_internal",  # slurmrestd's own 500 with its errors list, error -1 "Unspecified error"
)
FAULT_HEADER = "X-Emulator-Fault"
DEFAULT_LATENCY = 2.0


def check_kind(name: str, kind: object) -> str:
    if kind not in FAULT_KINDS:
        raise ValueError(f"{name}: {kind!r} is not a fault kind; allowed: {', '.join(FAULT_KINDS)}")
    return str(kind)


def _check_method(name: str, method: object) -> str:
    if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
        raise ValueError(f"{name}: {method!r} is not an HTTP method; allowed: {', '.join(HTTP_METHODS)}")
    return method.upper()


def _check_regex(name: str, pattern: object) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)  # type: ignore[call-overload]
    except (re.error, TypeError) as exc:
        raise ValueError(
            f"{name}: {pattern!r} is not a regular expression ({exc}); allowed: e.g. 'job/submit$'"
        ) from exc


def _check_number(name: str, value: object, low: float, high: float | None) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    # written so that NaN fails too
    if not (number and value >= low and (high is None or value <= high)):  # type: ignore[operator]
        allowed = f"a number from {low:g} to {high:g}" if high is not None else f"a number >= {low:g}"
        raise ValueError(f"{name}: {value!r} is out of range; allowed: {allowed}")


def _weights(kinds: str | Sequence[str] | Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """(kind, weight) pairs; a plain list of kinds weighs each one the same."""
    if isinstance(kinds, str):
        kinds = (kinds,)
    pairs = dict(kinds) if isinstance(kinds, Mapping) else dict.fromkeys(kinds, 1.0)
    if not pairs:
        raise ValueError(f"FaultPlan.kinds: {kinds!r} is empty; allowed: {', '.join(FAULT_KINDS)}")
    for kind, weight in pairs.items():
        check_kind("FaultPlan.kinds", kind)
        _check_number(f"FaultPlan.kinds[{kind!r}]", weight, 0, None)
    if not sum(pairs.values()) > 0:
        raise ValueError(f"FaultPlan.kinds: {kinds!r} has no positive weight; allowed: weights >= 0, one above 0")
    return tuple((kind, float(weight)) for kind, weight in pairs.items())


def _matches(methods: Iterable[str] | None, pattern: str | None, method: str, path: str) -> bool:
    return (methods is None or method.upper() in methods) and (pattern is None or re.search(pattern, path) is not None)


@dataclass(frozen=True)
class FaultPlan:
    """Faults for a whole run: each call matching ``methods``/``paths`` fails with probability ``rate``.

    ``kinds`` is a list of kind names (equal weights) or a mapping kind -> weight; it is stored as
    a tuple of names, the weights in ``weights``. ``paths`` is a regex searched in the Slurm path.
    """

    rate: float = 0.0
    kinds: Sequence[str] | Mapping[str, float] = FAULT_KINDS
    seed: int | None = None
    latency: float = DEFAULT_LATENCY  # seconds, for the "latency" kind
    methods: Sequence[str] | None = None  # e.g. ("POST",); None = every method
    paths: str | None = None  # e.g. r"job/submit"; None = every path
    weights: tuple[tuple[str, float], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _check_number("FaultPlan.rate", self.rate, 0, 1)
        weights = _weights(self.kinds)
        # normalised to tuples: the plan stays hashable, like the frozen EmulatorConfig holding it
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "kinds", tuple(kind for kind, _ in weights))
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"FaultPlan.seed: {self.seed!r} is not an integer; allowed: an integer or None")
        _check_number("FaultPlan.latency", self.latency, 0, None)
        if self.methods is not None:
            methods = (self.methods,) if isinstance(self.methods, str) else self.methods
            object.__setattr__(self, "methods", tuple(_check_method("FaultPlan.methods", m) for m in methods))
        _check_regex("FaultPlan.paths", self.paths)

    def matches(self, method: str, path: str) -> bool:
        return _matches(self.methods, self.paths, method, path)

    def summary(self) -> str:
        """One line for the start-up banner."""
        uniform = len({weight for _, weight in self.weights}) == 1
        kinds = ",".join(kind if uniform else f"{kind}:{weight:g}" for kind, weight in self.weights)
        parts = [f"rate={self.rate:g}", f"kinds={kinds}", f"seed={self.seed}", f"latency={self.latency:g}s"]
        if self.methods is not None:
            parts.append("methods=" + ",".join(self.methods))
        if self.paths is not None:
            parts.append(f"paths={self.paths}")
        return " ".join(parts)


@dataclass(frozen=True)
class ScriptedFault:
    """A fault for the next ``times`` calls matching ``method`` and ``path`` (a regex searched in the Slurm path)."""

    kind: str
    method: str | None = None
    path: str | None = None
    times: int = 1

    def __post_init__(self) -> None:
        check_kind("ScriptedFault.kind", self.kind)
        if self.method is not None:
            object.__setattr__(self, "method", _check_method("ScriptedFault.method", self.method))
        _check_regex("ScriptedFault.path", self.path)
        if not isinstance(self.times, int) or isinstance(self.times, bool) or self.times < 1:
            raise ValueError(f"ScriptedFault.times: {self.times!r} is out of range; allowed: an integer >= 1")

    def matches(self, method: str, path: str) -> bool:
        return _matches(None if self.method is None else (self.method,), self.path, method, path)


def load_script(path: str | Path) -> tuple[ScriptedFault, ...]:
    """A JSON file holding a list of objects with ``kind`` and optional ``method``, ``path``, ``times``."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"fault script {str(path)!r}: {exc}") from exc
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(f"fault script {str(path)!r}: expected a JSON list of objects")
    allowed = {"kind", "method", "path", "times"}
    for entry in entries:
        unknown = set(entry) - allowed
        if unknown or "kind" not in entry:
            raise ValueError(
                f"fault script {str(path)!r}: {entry!r} needs 'kind'; allowed keys: {', '.join(sorted(allowed))}"
            )
    return tuple(ScriptedFault(**entry) for entry in entries)


@dataclass(frozen=True)
class FaultRecord:
    """One injected fault. ``source`` is "header", "script" or "rate"; ``time`` is ``time.time()``;
    ``comment`` is a submitted job's comment (which tells a test whose submit it hit)."""

    kind: str
    method: str
    path: str
    time: float
    source: str
    comment: str = ""


class FaultInjector:
    """Decides, call by call, which fault to inject, and counts them.

    Thread-safe: the server's event loop thread asks ``pick()`` while a test changes the plan or the
    script from its own thread. The counters are returned as copies.
    """

    def __init__(self, plan: FaultPlan | None = None, script: Iterable[ScriptedFault] = ()) -> None:
        self._lock = threading.Lock()
        self._plan: FaultPlan | None = None
        self._rng = random.Random()
        self._script: list[ScriptedFault] = []
        self._injected: Counter[str] = Counter()
        self._log: list[FaultRecord] = []
        self._calls = 0
        self.set_plan(plan)
        self.script(*script)

    def set_plan(self, plan: FaultPlan | None) -> None:
        """Replace the run-wide plan (None: no random faults); restarts its random sequence from the seed."""
        if plan is not None and not isinstance(plan, FaultPlan):
            raise TypeError(f"plan: {plan!r} is not a FaultPlan; allowed: a FaultPlan or None")
        with self._lock:
            self._plan = plan
            self._rng = random.Random(plan.seed if plan is not None else None)

    def script(self, *entries: ScriptedFault) -> None:
        """Append entries to the script; each waits until the ones before it are used up."""
        for entry in entries:
            if not isinstance(entry, ScriptedFault):
                raise TypeError(f"script: {entry!r} is not a ScriptedFault")
        with self._lock:
            self._script.extend(entries)

    def clear(self) -> None:
        """No plan, no script, counters at zero: as a fresh emulator."""
        with self._lock:
            self._plan = None
            self._script.clear()
            self._injected.clear()
            self._log.clear()
            self._calls = 0

    @property
    def plan(self) -> FaultPlan | None:
        return self._plan

    @property
    def latency(self) -> float:
        """Seconds a "latency" fault waits (and a "late_landing" call lands after): the plan's, or DEFAULT_LATENCY without a plan."""
        plan = self._plan
        return plan.latency if plan is not None else DEFAULT_LATENCY

    @property
    def pending(self) -> tuple[ScriptedFault, ...]:
        """Script entries not used up yet, ``times`` counting what is left."""
        with self._lock:
            return tuple(self._script)

    @property
    def injected(self) -> Counter[str]:
        with self._lock:
            return Counter(self._injected)

    @property
    def log(self) -> list[FaultRecord]:
        with self._lock:
            return list(self._log)

    @property
    def calls(self) -> int:
        """Calls that reached the point where a fault may be injected."""
        with self._lock:
            return self._calls

    def pick(self, method: str, path: str, forced: str | None = None, *, comment: str = "") -> str | None:
        """The fault kind for this call, or None; ``forced`` is the X-Emulator-Fault header's kind."""
        if forced is not None:
            check_kind(FAULT_HEADER, forced)
        with self._lock:
            self._calls += 1
            kind, source = self._choose(method, path, forced)
            if kind is not None:
                self._injected[kind] += 1
                self._log.append(FaultRecord(kind, method, path, time.time(), source, comment))
            return kind

    def _choose(self, method: str, path: str, forced: str | None) -> tuple[str | None, str]:
        if forced is not None:
            return forced, "header"
        if self._script and self._script[0].matches(method, path):
            entry = self._script[0]
            if entry.times > 1:
                self._script[0] = replace(entry, times=entry.times - 1)
            else:
                self._script.pop(0)
            return entry.kind, "script"
        plan = self._plan
        if plan is not None and plan.rate > 0 and plan.matches(method, path) and self._rng.random() < plan.rate:
            kinds, weights = zip(*plan.weights, strict=True)
            return self._rng.choices(kinds, weights=weights)[0], "rate"
        return None, ""
