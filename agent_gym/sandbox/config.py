"""Sandbox limits and options, and the typed result of one sandboxed call."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping

__all__ = ["PREFORK_REFILL_MODES", "RESULT_KINDS", "ResultKind", "SandboxConfig", "SandboxResult"]

#: Every value :attr:`SandboxResult.kind` can take.
RESULT_KINDS: tuple[str, ...] = ("ok", "timeout", "memory", "output_truncated", "forbidden", "error")
ResultKind = Literal["ok", "timeout", "memory", "output_truncated", "forbidden", "error"]
#: Values of :attr:`SandboxConfig.prefork_refill`.
PREFORK_REFILL_MODES: tuple[str, ...] = ("quiet", "eager")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and options of a :class:`~agent_gym.sandbox.Sandbox` (one warm server per config).

    Attributes:
        timeout_s: wall-clock limit of one call (enforced by the server, which kills the worker;
            a stateful session's worker is first interrupted so that its variables survive).
        cpu_s: CPU-time limit of one call (``RLIMIT_CPU``; the worker gets ``SIGXCPU``).
        memory_mb: address space the code may add on top of the warm interpreter (``RLIMIT_AS`` is
            set to the server's size after ``preload`` plus this).
        output_bytes: stdout + stderr kept per call; the rest is dropped and the call reported as
            ``output_truncated``.
        max_threads: tasks (processes + threads) a worker's uid may have (``RLIMIT_NPROC``; only in
            force when the server runs as root and gives each worker its own uid).
        max_file_mb: largest file the code may write (``RLIMIT_FSIZE``).
        max_open_files: ``RLIMIT_NOFILE``.
        disk_mb: size of the private tmpfs that holds every work directory (root only).
        preload: modules imported once by the server and shared copy-on-write by every worker
            (e.g. ``("pandas",)``): a call then costs no import.
        prefork: idle workers forked ahead of time, so that a call is a pipe round trip.
        prefork_refill: when the server forks replacements for pre-forked workers that calls took:
            ``"quiet"`` only once no call has run for 50 ms, so that a burst of calls (a rollout
            batch) is not slowed by forks for the next one; the pool refills between batches or
            whenever no env's code runs (while calls run without such a pause, new workers are forked
            when needed, as with ``prefork=0``); ``"eager"`` whenever the server has no message to
            handle, also inside a burst (better for a steady stream of calls larger than the pool).
        max_workers: workers alive at once (calls beyond wait in a queue); also the size of the uid
            block claimed when root.
        session_idle_s: a stateful session's worker idle this long is stopped (its next call starts
            afresh and says so).
        interrupt_grace_s: how long a timed-out session worker gets to stop after the interrupt.
        echo: print the value of a final bare expression, like a notebook cell.
        privileged: ``None``: use the root-only layers (own uid, private root, empty network
            namespace) when running as root; ``False``: never (the portable layers only).
        seccomp: install the seccomp-bpf filter in every worker (x86_64 and aarch64).
        audit_hook: install the audit hook in every worker (clear errors; file policy when not root).
        extra_ro_paths: host paths to show the code read-only inside the private root.
        hidden_paths: host paths shown empty inside the private root, although a bind shows what holds
            them (an env's answers, e.g. a task file inside an installed package).
        allow_processes: let the code start processes (``subprocess``, a shell): the seccomp filter and
            the audit hook then allow fork and exec (still no network sockets, namespaces, mounts or
            ptrace). Only with the privileged layers in force (own uid per worker, private root, empty
            network namespace; the server refuses to start without them), because then the kernel
            bounds what those processes reach: ``max_threads`` processes per worker, no other uid's
            processes or files. Whatever a worker started is killed when the worker ends.
        python: interpreter of the server (default: the current one).
        startup_timeout_s: how long to wait for the server to start (preloading pandas takes ~1 s).
    """

    timeout_s: float = 10.0
    cpu_s: float = 5.0
    memory_mb: float = 512
    output_bytes: int = 4096
    max_threads: int = 32
    max_file_mb: float = 16
    max_open_files: int = 256
    disk_mb: int = 1024
    preload: tuple[str, ...] = ()
    prefork: int = 4
    prefork_refill: Literal["quiet", "eager"] = "quiet"
    max_workers: int = 1024
    session_idle_s: float = 900.0
    interrupt_grace_s: float = 1.0
    echo: bool = True
    privileged: bool | None = None
    seccomp: bool = True
    audit_hook: bool = True
    extra_ro_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    allow_processes: bool = False
    python: str | None = None
    startup_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "memory_mb", "max_file_mb", "session_idle_s", "startup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxConfig.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("output_bytes", "max_threads", "max_open_files", "disk_mb", "max_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SandboxConfig.{name} must be a positive int, got {value!r}")
        if self.prefork < 0 or self.prefork > self.max_workers:
            raise ValueError(f"SandboxConfig.prefork must be in [0, max_workers], got {self.prefork!r}")
        if self.prefork_refill not in PREFORK_REFILL_MODES:
            raise ValueError(f"SandboxConfig.prefork_refill must be one of {PREFORK_REFILL_MODES}, got {self.prefork_refill!r}")
        if self.max_workers > 4096:
            raise ValueError("SandboxConfig.max_workers must be <= 4096")
        # Lists from JSON/gym.make kwargs become tuples so that the config stays hashable.
        object.__setattr__(self, "preload", tuple(self.preload))
        object.__setattr__(self, "extra_ro_paths", tuple(self.extra_ro_paths))
        object.__setattr__(self, "hidden_paths", tuple(self.hidden_paths))

    @classmethod
    def coerce(cls, value: "SandboxConfig | dict[str, Any] | None") -> "SandboxConfig":
        """A config from a config, a dict of fields (e.g. ``gym.make`` kwargs) or ``None`` (defaults)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"unknown sandbox option(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
            return cls(**value)
        raise TypeError(f"expected a SandboxConfig or a dict, got {type(value).__name__}")

    def to_server(self) -> dict[str, Any]:
        """The JSON the server is started with."""
        data = asdict(self)
        data["preload"] = list(self.preload)
        data["extra_ro_paths"] = list(self.extra_ro_paths)
        data["hidden_paths"] = list(self.hidden_paths)
        return data


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed call produced.

    Attributes:
        kind: ``ok``; ``timeout`` (wall clock or CPU time, see ``detail``); ``memory`` (the memory
            limit); ``output_truncated`` (the code finished but wrote more than ``output_bytes``);
            ``forbidden`` (``detail``: ``network``, ``file``, ``fork`` or ``native``); ``error``
            (the code raised, or the process died: ``error`` is the traceback's last line).
        output: stdout and stderr, interleaved as written, at most ``output_bytes`` bytes.
        error: one line saying what went wrong (``None`` when ``ok``).
        traceback: the code's traceback (frames of the sandbox machinery removed), for ``error``.
        detail: the sub-kind (``wall``/``cpu`` for timeouts, the category for ``forbidden``, ...).
        truncated: output was dropped (also possible with another kind, e.g. an error after a flood).
        exec_s: time spent running the code in the worker.
        cpu_s: CPU time the worker used for the call.
        latency_s: from the call being submitted to its result arriving (client side).
        overhead_s: ``latency_s - exec_s``: what the sandbox itself cost for this call.
        state_reset: a stateful session lost its variables before this call (its worker died or
            was stopped); the code ran in a fresh interpreter.
        violations: forbidden operations the code attempted but caught itself (kind stays ``ok``).
        worker_setup_s: on the first call a worker serves: how long the worker took from its fork to
            being ready (locking itself down); ``None`` on later calls of a session.
        stages: where ``overhead_s`` went, in seconds: ``to_server`` (submitted -> the server read the
            request), ``queued`` (-> handed to a worker), ``to_worker`` (-> the worker started the code),
            ``from_worker`` (the code ended -> the server had the result), ``to_client`` (-> the client's
            reader thread delivered it). They and ``exec_s`` add up to ``latency_s`` (one host's
            monotonic clock). ``None`` when the worker did not report (e.g. it was killed).
        output_limit: the ``output_bytes`` limit in force (for the truncation note).
    """

    kind: ResultKind
    output: str = ""
    error: str | None = None
    traceback: str | None = None
    detail: str | None = None
    truncated: bool = False
    exec_s: float = 0.0
    cpu_s: float = 0.0
    latency_s: float = 0.0
    overhead_s: float = 0.0
    state_reset: bool = False
    violations: tuple[str, ...] = field(default_factory=tuple)
    worker_setup_s: float | None = None
    stages: Mapping[str, float] | None = None
    output_limit: int = 0

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    @property
    def error_kind(self) -> str | None:
        """``None`` when ok, else ``sandbox_<kind>`` (``sandbox_forbidden_<category>`` for forbidden)."""
        if self.kind == "ok":
            return None
        if self.kind == "forbidden" and self.detail:
            return f"sandbox_forbidden_{self.detail}"
        return f"sandbox_{self.kind}"

    def text(self) -> str:
        """What the policy reads: the output, then what went wrong (a traceback, a limit) if anything."""
        parts: list[str] = []
        if self.state_reset:
            parts.append("[note: the Python session was restarted; variables from earlier calls are gone]")
        out = self.output.rstrip("\n")
        if out:
            parts.append(out)
        if self.truncated:
            limit = f" at {self.output_limit} bytes" if self.output_limit else ""
            parts.append(f"... [output truncated{limit}]")
        if self.kind == "error" and self.traceback:
            parts.append(self.traceback.rstrip("\n"))
        elif self.kind != "ok" and self.error:
            parts.append(self.error)
        if not parts or (len(parts) == 1 and self.state_reset):
            parts.append("(no output)")
        return "\n".join(parts)
