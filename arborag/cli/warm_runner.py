"""`arborag schedule`'s default runner: the scheduled flow runs execute in this one warm process.

``prefect.serve`` starts every flow run in a new subprocess, so every scheduled ``update`` paid a
cold start again: Python and arborag imports, torch and the embedding model, UMAP's compiled
code, the flow's imports — seconds to tens of seconds of a run whose work may be a few texts
(benchmarks/results/schedule_warm.md measures both). This runner registers the same two
deployments with the Prefect server (schedules, JSON parameters, no work pool — the UI shows and
can trigger them as before), then polls the server for their scheduled runs and executes each
with Prefect's own engine (``prefect.flow_engine.run_flow(flow, flow_run=...)``, what the
subprocess would run) in this process: the run's states, logs and result are reported to the
server as usual, and what a run loaded stays loaded for the next (the embedding model is shared
by every :class:`~arborag.embed.model.Embedder` of a process; numba keeps UMAP compiled).

One run at a time (writers take the corpus lock anyway). A run's failure is the run's (its state
says why); the runner goes on. Trade-offs against ``--isolated`` (Prefect's serve, one
subprocess per run): a cancel from the UI is not delivered into a running run here, and a run
that crashes the interpreter (out of memory) takes the runner down — restart it (scheduled runs
missed meanwhile are run late). Ctrl-C stops after pausing the schedules, as ``serve`` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["WarmRunner"]


class WarmRunner:
    """Serve ``deployments`` (RunnerDeployments made by ``flow.to_deployment``) of ``flows`` from this process."""

    def __init__(self, deployments: Sequence[Any], flows: Sequence[Any], *, poll_seconds: float = 5.0,
                 on_run: Callable[[Any, Any, float], None] | None = None) -> None:
        self.deployments = list(deployments)
        self.by_name = {f.name: f for f in flows}  # flow name -> flow object (a deployment names its flow)
        self.poll_seconds = float(poll_seconds)
        self.on_run = on_run  # called after each run with (flow_run, final state, seconds)
        self.flows: dict[Any, Any] = {}  # deployment id -> flow object
        self.stopping = False

    def register(self) -> list[Any]:
        """Create or update the deployments on the server; returns their ids."""
        ids = []
        for d in self.deployments:
            if d.flow_name not in self.by_name:
                raise ValueError(f"deployment {d.name!r} is of flow {d.flow_name!r}, which this runner was not given")
            dep_id = d.apply()
            self.flows[dep_id] = self.by_name[d.flow_name]
            ids.append(dep_id)
        return ids

    def due_runs(self, client: Any) -> list[Any]:
        """Scheduled runs of our deployments that are due now, oldest first."""
        now = datetime.now(timezone.utc) + timedelta(seconds=1)
        runs = client.get_scheduled_flow_runs_for_deployments(list(self.flows), scheduled_before=now)
        return sorted(runs, key=lambda r: (r.next_scheduled_start_time or r.expected_start_time or now))

    def claim(self, client: Any, flow_run: Any) -> bool:
        """Move a scheduled run to Pending (as a runner does before starting it); False if the server says no."""
        from prefect.exceptions import Abort
        from prefect.states import Pending
        from prefect.utilities.engine import propose_state_sync

        try:
            state = propose_state_sync(client, Pending(), flow_run_id=flow_run.id)
        except Abort:
            return False
        return bool(state.is_pending())

    def execute(self, flow_run: Any) -> Any:
        """Run one claimed flow run here with Prefect's engine; returns its final state."""
        from prefect.flow_engine import run_flow

        flow = self.flows[flow_run.deployment_id]
        return run_flow(flow, flow_run=flow_run, return_type="state")

    def run_pending(self, client: Any) -> int:
        """Execute every due run (one at a time); returns how many ran."""
        done = 0
        for flow_run in self.due_runs(client):
            if self.stopping:
                break
            if not self.claim(client, flow_run):
                continue
            t0 = time.perf_counter()
            try:
                state = self.execute(flow_run)
            except Exception as exc:  # noqa: BLE001 - the engine has recorded the failure on the run
                state = exc
            if self.on_run is not None:
                self.on_run(flow_run, state, time.perf_counter() - t0)
            done += 1
        return done

    def serve(self) -> None:
        """Register, then poll and run until interrupted; pause the schedules on the way out."""
        from prefect.client.orchestration import get_client

        self.register()
        try:
            with get_client(sync_client=True) as client:
                while not self.stopping:
                    self.run_pending(client)
                    time.sleep(self.poll_seconds)
        finally:
            self.pause()

    def pause(self) -> None:
        """Pause the deployments' schedules (as ``prefect.serve`` does on shutdown)."""
        from prefect.client.orchestration import get_client

        try:
            with get_client(sync_client=True) as client:
                for dep_id in self.flows:
                    client.pause_deployment(dep_id)
        except Exception:  # noqa: BLE001 - the server may be gone already; nothing to undo then
            pass
