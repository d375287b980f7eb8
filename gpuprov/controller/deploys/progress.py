"""What a long deploy is doing: which hosts are still on a step, why a step failed, what was slow.

pyinfra prints each step as it starts and each host's result as it ends. On top of that, while a
step runs, every ``REPORT_EVERY`` seconds the hosts still on it are named with their time and
limit; a host whose step fails gets one line with the step, its time and its limit; and when the
run ends, a table lists every step that took ``SLOW`` seconds or more on a host, and each failed
step with the command it was running and the first line that command wrote to stderr.

    --> Starting operation: GPU node | NVIDIA driver | apt-get update (gpuprov-nvidia-driver)
    gpuprov: still on `GPU node | NVIDIA driver | apt-get update (gpuprov-nvidia-driver)`:
      lab-a100-01 30 s (limit 300 s)

>>> _seconds(61.2)
'61 s'
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gevent
from pyinfra import logger
from pyinfra.api import BaseStateCallback, State
from pyinfra.api.host import Host

REPORT_EVERY = 30  # seconds between "still on" lines while a step runs
SLOW = 10  # seconds: a step at least this long on a host is in the final table


@dataclass
class _Step:
    name: str
    limit: int | None
    started: float
    seconds: float | None = None
    failed: bool = False


class StepClock(BaseStateCallback):
    """Times every step on every host (a pyinfra state callback; one per run, see ``watch``)."""

    def __init__(self) -> None:
        self.steps: dict[tuple[str, str], _Step] = {}  # (host, op hash) -> its step
        self.order: list[tuple[str, str]] = []
        self.reporters: dict[str, gevent.Greenlet] = {}
        self.reported = False

    def operation_start(self, state: State, op_hash: str) -> None:
        self.reporters[op_hash] = gevent.spawn(self._report_running, op_hash)

    def operation_end(self, state: State, op_hash: str) -> None:
        reporter = self.reporters.pop(op_hash, None)
        if reporter is not None:
            reporter.kill(block=False)

    def operation_host_start(self, state: State, host: Host, op_hash: str) -> None:
        if op_hash not in state.ops[host]:
            return  # pyinfra skips it on this host ("Skipped")
        arguments = state.get_op_data_for_host(host, op_hash).global_arguments
        key = (host.name, op_hash)
        self.steps[key] = _Step(
            step_name(state, op_hash, arguments.get("name")),
            arguments.get("_timeout"),
            time.monotonic(),
        )
        self.order.append(key)

    def operation_host_success(self, state, host, op_hash, retry_count=0) -> None:
        self._end(host, op_hash, failed=False)

    def operation_host_error(self, state, host, op_hash, retry_count=0, max_retries=0) -> None:
        step = self._end(host, op_hash, failed=True)
        if step is not None:
            limit = f" (limit {step.limit} s)" if step.limit else ""
            ran_out = step.limit and step.seconds is not None and step.seconds >= step.limit
            why = "ran out of time" if ran_out else "failed"
            if not _answering(host):
                why = "failed: the host stopped answering (SSH connection lost)"
            host.log_styled(
                f"gpuprov: step `{step.name}` {why} after {_seconds(step.seconds)}{limit}; "
                "this host stops here, the others go on",
                fg="red",
                log_func=logger.error,
            )

    def host_disconnect(self, state: State, host: Host) -> None:
        # pyinfra disconnects every host once the run is over: the first one prints the table.
        if self.reported:
            return
        self.reported = True
        lines = self.summary(state)
        if lines:
            logger.info("\n".join(["--> gpuprov: slow and failed steps, per host:", *lines]))

    def summary(self, state: State) -> list[str]:
        """One line per step that was slow or failed on a host, in run order."""
        lines = []
        by_name = {h.name: h for h in state.inventory}
        for host_name, op_hash in self.order:
            step = self.steps[(host_name, op_hash)]
            if step.seconds is None or not (step.failed or step.seconds >= SLOW):
                continue
            limit = f"limit {step.limit} s" if step.limit else "no limit"
            line = f"    {host_name}  {_seconds(step.seconds):>6}  ({limit})  {step.name}"
            if step.failed:
                command, error = _failure(state, by_name[host_name], op_hash)
                line += "  FAILED" + (f": `{command}`" if command else "")
                line += f": {error}" if error else ""
            lines.append(line)
        return lines

    def _end(self, host: Host, op_hash: str, failed: bool) -> _Step | None:
        step = self.steps.get((host.name, op_hash))
        if step is not None and step.seconds is None:
            step.seconds = time.monotonic() - step.started
            step.failed = failed
        return step

    def _report_running(self, op_hash: str) -> None:
        while True:
            gevent.sleep(REPORT_EVERY)
            running = [
                (host_name, step)
                for (host_name, hash_), step in self.steps.items()
                if hash_ == op_hash and step.seconds is None
            ]
            if not running:
                continue
            now = time.monotonic()
            rows = [
                f"  {name} {_seconds(now - step.started)}"
                + (f" (limit {step.limit} s)" if step.limit else "")
                for name, step in running
            ]
            logger.info("\n".join([f"gpuprov: still on `{running[0][1].name}`:", *rows]))


def watch(state: State) -> StepClock:
    """The run's step clock, added to ``state`` the first time a deploy asks for it."""
    for handler in state.callback_handlers:
        if isinstance(handler, StepClock):
            return handler
    clock = StepClock()
    state.add_callback_handler(clock)
    return clock


def step_name(state: State, op_hash: str, own: str | None) -> str:
    """The step's full name on one host (``GPU node | NVIDIA driver | apt-get update (...)``).

    Hosts whose steps sit at the same place share one pyinfra operation, whose names are all
    of theirs; a host's own is the one that ends with the name it gave.
    """
    names = sorted(state.get_op_meta(op_hash).names)
    mine = [n for n in names if own and n.endswith(own)]
    return (mine or names or [own or "operation"])[0]


def _failure(state: State, host: Host, op_hash: str) -> tuple[str | None, str | None]:
    """The command a failed step stopped at (the last one it ran) and the first line it wrote
    to stderr (systemctl's "Job for kubelet.service failed because ..."), each None if none."""
    # pyinfra 3.10 keeps the commands of a finished operation only in OperationMeta._commands
    # (no public reader); its output is public once the operation is complete.
    meta = state.get_op_data_for_host(host, op_hash).operation_meta
    commands = getattr(meta, "_commands", None) or []
    lines = meta.stderr_lines if meta.is_complete() else []
    errors = [line.strip() for line in lines if line.strip()]
    return (str(commands[-1]) if commands else None), (errors[0] if errors else None)


def _answering(host: Host) -> bool:
    """False when ``host``'s SSH connection has died (other connectors always answer)."""
    client = getattr(host.connector, "client", None)
    transport = client.get_transport() if client is not None else None
    return client is None or (transport is not None and transport.is_active())


def _seconds(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} s"
