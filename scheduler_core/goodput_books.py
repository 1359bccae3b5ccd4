"""What the ``goodput`` policy remembers, and how epoch reports update it.

Per job: its application, arrival, epoch progress, units of work done (see
``scheduler_core.curves``), the last time the policy resized it (to tell
clean epochs from mixed ones), seconds waited, GPU-seconds attained, and its
own curve points. Per application: curve points of all its jobs, and its
total work: measured once a job of it finished, else estimated from its most
advanced job (epochs shrink as training goes on, so early guesses are high).
Everything is a frozen pydantic model, so the policy state is JSON; points
are bounded per job and per application, applications by count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from scheduler_core.curves import Curve, CurvePoint, add_point, packed_nodes
from scheduler_core.models import ElasticJob, EpochReport
from scheduler_core.policies.base import PolicyInput


@dataclass(frozen=True)
class Limits:
    """The parameters learning needs (a slice of the policy's parameters)."""

    restart_s: float
    history: int
    max_applications: int
    gpus_per_node: int


class GoodputJob(BaseModel):
    """What the policy remembers of one job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    application: str | None = None
    arrival: float = 0.0
    total_epochs: int | None = None
    epochs_done: int = 0
    units_done: float = 0.0
    last_epoch_units: float | None = None
    # When the policy last changed the job's size (its epochs before are mixed).
    last_change: float | None = None
    # A clean epoch was reported since that change: its current size is measured
    # (rule goodput.measure: no voluntary grow before that).
    measured: bool = False
    size: int = 0
    waited_s: float = 0.0
    attained_gpu_s: float = 0.0
    points: list[CurvePoint] = Field(default_factory=list)
    # The last measurement of a mixed or spread-out epoch: used only while
    # nothing clean is known, to rank the job better than blind.
    provisional: CurvePoint | None = None
    # Nodes its replicas ran on in the last reported epoch.
    nodes: int | None = None


class SpreadPoint(BaseModel):
    """Measured slowdown of ``replicas`` spread over ``nodes`` nodes, against packed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int
    nodes: int
    factor: float
    samples: int = 1


def add_spread(points: list[SpreadPoint], sample: SpreadPoint, *, limit: int) -> list[SpreadPoint]:
    """``points`` with one more slowdown folded in (mean per shape, newest kept)."""
    old = next(
        (p for p in points if (p.replicas, p.nodes) == (sample.replicas, sample.nodes)), None
    )
    rest = [p for p in points if p is not old]
    if old is not None:
        samples = min(old.samples, 15)
        factor = (old.factor * samples + sample.factor) / (samples + 1)
        sample = SpreadPoint(
            replicas=sample.replicas, nodes=sample.nodes, factor=factor, samples=samples + 1
        )
    return [*rest, sample][-limit:]


def spread_factor(
    points: list[SpreadPoint], replicas: int, *, nodes: int, gpus_per_node: int, prior: float
) -> float:
    """Predicted slowdown of ``replicas`` on ``nodes`` nodes against packed.

    Rule goodput.spread: 1 when packed; the measured factor for this shape
    (below 1 too: some spreads beat packed); else the mean measured for this
    application at other shapes, at least 1 (a spread that hurt one shape
    hurts others); else ``1 + prior`` per extra node.
    """
    extra = nodes - packed_nodes(replicas, gpus_per_node)
    if extra <= 0:
        return 1.0
    same = [p.factor for p in points if p.replicas == replicas and p.nodes == nodes]
    if same:
        return same[0]
    if points:
        return max(1.0, sum(p.factor for p in points) / len(points))
    return 1.0 + prior * extra


class GoodputApp(BaseModel):
    """What jobs of one application measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    points: list[CurvePoint] = Field(default_factory=list)
    # Measured when a job of it finished; else estimated by its most advanced job.
    total_units: float | None = None
    total_measured: bool = False
    total_from_epoch: int = 0
    epoch_units: float | None = None
    last_used: float = 0.0
    # Slowdowns measured on spread placements (clean epochs on more nodes than needed).
    spread: list[SpreadPoint] = Field(default_factory=list)


def ingest_reports(
    request: PolicyInput,
    jobs: Mapping[str, GoodputJob],
    *,
    apps: Mapping[str, GoodputApp],
    limits: Limits,
) -> tuple[dict[str, GoodputJob], dict[str, GoodputApp]]:
    """Books for the jobs in ``request`` and their applications, after its reports."""
    jobs_by_key = {job.key for job in request.jobs}
    books = dict(jobs)
    apps = dict(apps)
    for job in request.jobs:
        if job.key not in books:
            books[job.key] = GoodputJob(
                application=job.application, arrival=request.now, total_epochs=job.total_epochs
            )
    for report in request.reports:
        book = books.get(report.job)
        if book is None:
            continue  # a job the policy never saw: nothing to attribute it to
        book, apps = _ingest_one(report, book, apps=apps, limits=limits, now=request.now)
        books[report.job] = book
    # Jobs no longer in the cluster are forgotten once their last reports are in.
    books = {k: v for k, v in books.items() if k in jobs_by_key}
    if len(apps) > limits.max_applications:
        keep = sorted(apps.items(), key=lambda kv: -kv[1].last_used)[: limits.max_applications]
        apps = dict(keep)
    return books, apps


def _ingest_one(
    report: EpochReport,
    book: GoodputJob,
    *,
    apps: dict[str, GoodputApp],
    limits: Limits,
    now: float,
) -> tuple[GoodputJob, dict[str, GoodputApp]]:
    total = report.total_epochs if report.total_epochs is not None else book.total_epochs
    if report.epoch_time_s is None:
        # First contact: the submission time and the epoch count.
        update: dict[str, object] = {"total_epochs": total}
        if book.epochs_done == 0 and book.units_done == 0:
            update["arrival"] = min(book.arrival, report.at)
        return book.model_copy(update=update), apps
    units = float(report.iterations) if report.iterations else 1.0
    epochs_done = report.epoch if report.epoch is not None else book.epochs_done + 1
    units_done = book.units_done + units
    points = book.points
    app_key = book.application
    app = apps.get(app_key) if app_key is not None else None
    app_points = app.points if app is not None else []
    # A clean epoch ran wholly at one size: it began after the last restart.
    began = report.at - report.epoch_time_s
    clean = book.last_change is None or began >= book.last_change + limits.restart_s - 1e-6
    packed = report.nodes is None or report.nodes == packed_nodes(
        report.replicas, limits.gpus_per_node
    )
    provisional = book.provisional
    spread = app.spread if app is not None else []
    if report.replicas > 0:
        seconds = report.epoch_time_s / units
        packed_curve = Curve.from_points([app_points, points], threshold=1.0)
        measured_here = report.replicas in packed_curve.replicas
        if clean and (packed or not measured_here):
            # A clean spread epoch at a count never measured packed is still the
            # best bound on it (spreading rarely helps): without it a job that only
            # ever lands spread would never learn its curve past what it started at.
            points = add_point(
                points, report.replicas, seconds_per_unit=seconds, limit=limits.history
            )
            app_points = add_point(
                app_points, report.replicas, seconds_per_unit=seconds, limit=limits.history
            )
        else:
            provisional = CurvePoint(replicas=report.replicas, seconds_per_unit=seconds)
            if clean and report.nodes is not None and measured_here:
                # Rule goodput.spread: learn what spreading cost, against the packed curve.
                factor = seconds / packed_curve.unit_time(report.replicas)
                spread = add_spread(
                    spread,
                    SpreadPoint(replicas=report.replicas, nodes=report.nodes, factor=factor),
                    limit=2 * limits.history,
                )
    if app_key is not None:
        old = app or GoodputApp()
        epoch_units = units if old.epoch_units is None else 0.8 * old.epoch_units + 0.2 * units
        total_units, measured, from_epoch = (
            old.total_units,
            old.total_measured,
            old.total_from_epoch,
        )
        if total is not None and epochs_done >= total:
            # The job finished: its application's total work is now measured.
            total_units = (
                units_done
                if not measured or total_units is None
                else 0.5 * (total_units + units_done)
            )
            measured, from_epoch = True, epochs_done
        elif total is not None and not measured and epochs_done >= from_epoch:
            # Epochs shrink as training goes on: the most advanced job guesses best.
            total_units = units_done + (total - epochs_done) * units
            from_epoch = epochs_done
        apps = {
            **apps,
            app_key: GoodputApp(
                points=app_points,
                total_units=total_units,
                total_measured=measured,
                total_from_epoch=from_epoch,
                epoch_units=epoch_units,
                last_used=now,
                spread=spread,
            ),
        }
    new_book = book.model_copy(
        update={
            "total_epochs": total,
            "epochs_done": epochs_done,
            "units_done": units_done,
            "last_epoch_units": units,
            "points": points,
            "provisional": provisional,
            "nodes": report.nodes if report.replicas > 0 else book.nodes,
            "measured": book.measured or (clean and report.replicas > 0),
        }
    )
    return new_book, apps


def account_time(
    request: PolicyInput, last_now: float | None, *, books: Mapping[str, GoodputJob]
) -> dict[str, GoodputJob]:
    """Seconds waited and GPU-seconds attained since the last round."""
    out: dict[str, GoodputJob] = {}
    for job in request.jobs:
        book = books[job.key]
        since = book.arrival if last_now is None else max(last_now, book.arrival)
        elapsed = max(0.0, request.now - since)
        if is_running(job):
            book = book.model_copy(
                update={"attained_gpu_s": book.attained_gpu_s + elapsed * job.current_replicas}
            )
        elif elapsed > 0:
            book = book.model_copy(update={"waited_s": book.waited_s + elapsed})
        out[job.key] = book
    return out


def is_running(job: ElasticJob) -> bool:
    """Some replica of the job runs (a job with only pending replicas waits)."""
    return job.started


def remaining_units(
    book: GoodputJob, app: GoodputApp | None, *, settle_epochs: int
) -> tuple[float | None, bool]:
    """Remaining units of work, and whether the estimate has settled."""
    if book.total_epochs is None:
        return None, False
    if (
        app is not None
        and app.total_units is not None
        and app.total_units > book.units_done
        and (app.total_measured or app.total_from_epoch >= max(settle_epochs, book.epochs_done))
    ):
        return app.total_units - book.units_done, True
    left_epochs = max(book.total_epochs - book.epochs_done, 0)
    per_epoch = book.last_epoch_units or (app.epoch_units if app is not None else None)
    if per_epoch is None:
        return None, False
    # Early epochs can be much longer than late ones: trust this after a few.
    settled = book.epochs_done >= settle_epochs or left_epochs <= 1
    return max(left_epochs * per_epoch, 1.0), settled
