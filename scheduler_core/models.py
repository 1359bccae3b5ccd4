"""The plain data the scheduling core reasons about.

Everything here is a frozen, validated pydantic model that crosses process
boundaries as JSON: elastic jobs, per-replica resources, KubeML's train
requests and tasks, epoch reports, EDL's ``ClusterResource`` snapshot, and the
``ScalingPlan`` every policy returns (each decision with its reason).
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from scheduler_core.identity import JOB_KEY_MAX, JobKey, JobRef, Name, Namespace, Text, Url

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

NonNegativeInt = Annotated[int, Field(ge=0)]


class Frozen(BaseModel):
    """Base of every core model: immutable, no unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Resources(Frozen):
    """Resources of one replica (or a sum of replicas)."""

    cpu_milli: NonNegativeInt = 0
    memory_mega: NonNegativeInt = 0
    gpu: NonNegativeInt = 0
    gpu_resource: Text = DEFAULT_GPU_RESOURCE


class JobPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


def job_key(namespace: str, name: str) -> str:
    """The identity of a job everywhere in trainscaler: ``namespace/name``."""
    return f"{namespace}/{name}"


class ElasticJob(Frozen):
    """A training job whose replica count may change between min and max."""

    namespace: Namespace = "default"
    name: Name
    min_replicas: NonNegativeInt = 1
    max_replicas: NonNegativeInt = 1
    current_replicas: NonNegativeInt = 0
    phase: JobPhase = JobPhase.RUNNING
    requests: Resources = Resources()
    limits: Resources = Resources()
    policy: Text = "edl"
    default_parallelism: Annotated[int, Field(ge=1)] = 1
    # EDL pending rule input: every pod of the job is PodScheduled=False/Unschedulable.
    all_pods_unschedulable: bool = False
    # Operator's manual override: never scaled while true.
    paused: bool = False
    # The training program and its configuration (e.g. image and batch size):
    # jobs with the same application are expected to scale alike.
    application: Text | None = None
    # Epochs the job trains for (N), when it says so up front.
    total_epochs: Annotated[int, Field(ge=1)] | None = None
    # Its running replicas per node name (pods' nodeName), when the runtime
    # knows them: goodput predicts where a grow lands and what it leaves.
    placement: dict[Text, NonNegativeInt] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _min_le_max(self) -> ElasticJob:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) must be <= max_replicas ({self.max_replicas})"
            )
        return self

    @property
    def key(self) -> str:
        return job_key(self.namespace, self.name)

    @property
    def elastic(self) -> bool:
        """EDL: a job is elastic when its replica range is not a single point."""
        return self.min_replicas < self.max_replicas

    @property
    def needs_gpu(self) -> bool:
        return self.limits.gpu > 0

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica holds (extended resources: the request defaults to the limit)."""
        return max(self.requests.gpu, self.limits.gpu)

    def gpus_at(self, replicas: int) -> int:
        return replicas * self.gpus_per_replica

    @property
    def started(self) -> bool:
        """Some replica runs; a job whose replicas are all pending is still waiting."""
        return self.phase == JobPhase.RUNNING and self.current_replicas > 0

    def fulfillment_at(self, replicas: int) -> float:
        """EDL fulfillment ``(cur - min) / (max - min)``; 1 when ``max == min``."""
        if self.max_replicas == self.min_replicas:
            return 1.0
        return (replicas - self.min_replicas) / (self.max_replicas - self.min_replicas)

    @property
    def fulfillment(self) -> float:
        return self.fulfillment_at(self.current_replicas)

    def clamp(self, replicas: int) -> int:
        return max(self.min_replicas, min(self.max_replicas, replicas))


# --- KubeML shapes ---------------------------------------------------------


class TaskOperation(IntEnum):
    """KubeML: the first decision for a task creates it, later ones update it."""

    CREATE_TASK = 0
    UPDATE_TASK = 1


class TrainOptions(Frozen):
    """KubeML ``TrainOptions``."""

    default_parallelism: Annotated[int, Field(ge=1)] = 1
    static_parallelism: bool = False
    validate_every: NonNegativeInt = 0
    k: int = -1
    goal_accuracy: Annotated[float, Field(ge=0, le=100)] = 100.0


class TrainRequest(Frozen):
    """KubeML ``TrainRequest``: what a user submits to train a model."""

    model_type: Annotated[Text, Field(min_length=1)]
    batch_size: Annotated[int, Field(ge=1)]
    epochs: Annotated[int, Field(ge=1)]
    dataset: Annotated[Text, Field(min_length=1)]
    # KubeML's JSON names it ``lr``: both are accepted, ``learning_rate`` is written.
    learning_rate: Annotated[
        float, Field(gt=0, validation_alias=AliasChoices("learning_rate", "lr"))
    ] = 0.01
    function_name: Text = ""
    options: TrainOptions = TrainOptions()
    # trainscaler additions: where the job runs and its replica bounds.
    namespace: Namespace = "default"
    min_replicas: Annotated[int, Field(ge=1)] = 1
    max_replicas: Annotated[int, Field(ge=1)] = 8
    ps_url: Url | None = None

    @model_validator(mode="after")
    def _bounds(self) -> TrainRequest:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) must be <= max_replicas ({self.max_replicas})"
            )
        return self


class TaskState(Frozen):
    """KubeML ``JobState``: the parallelism a job runs with and its last epoch time.

    trainscaler additions (optional; what the ``goodput`` policy learns from):
    the epoch k just finished, the epoch count N, the iterations of that epoch
    and the nodes its replicas ran on.
    """

    parallelism: Annotated[int, Field(ge=1)] = 1
    # Seconds the last epoch took; None before the first epoch ends.
    elapsed_time: Annotated[float, Field(gt=0)] | None = None
    epoch: NonNegativeInt | None = None
    total_epochs: Annotated[int, Field(ge=1)] | None = None
    iterations: NonNegativeInt | None = None
    nodes: Annotated[int, Field(ge=1)] | None = None


class TrainTask(Frozen):
    """KubeML ``TrainTask``: a job's identity, parameters and current state."""

    job_id: JobRef
    parameters: TrainRequest
    state: TaskState = TaskState()


class EpochReport(Frozen):
    """What a running job tells the scheduler at the end of an epoch.

    ``epoch_time_s`` is None for a first contact (a submission): KubeML's
    ``CreateTask``. ``at`` is the reporter's clock, injected, never read here.
    """

    job: JobKey
    replicas: Annotated[int, Field(ge=0)]
    epoch_time_s: Annotated[float, Field(gt=0)] | None = None
    epoch: NonNegativeInt | None = None
    total_epochs: Annotated[int, Field(ge=1)] | None = None
    iterations: NonNegativeInt | None = None
    nodes: Annotated[int, Field(ge=0)] | None = None
    at: float = 0.0


# --- EDL cluster snapshot ----------------------------------------------------


class NodeResources(Frozen):
    """EDL ``Nodes``: room left on each schedulable node, by node name."""

    nodes_cpu_idle_milli: dict[str, int] = Field(default_factory=dict)
    nodes_memory_free_mega: dict[str, int] = Field(default_factory=dict)
    nodes_gpu_free: dict[str, int] = Field(default_factory=dict)


class ClusterResource(Frozen):
    """EDL ``ClusterResource``: requested, limit and total CPU, memory and GPU."""

    node_count: NonNegativeInt = 0
    gpu_request: NonNegativeInt = 0
    gpu_limit: NonNegativeInt = 0
    gpu_total: NonNegativeInt = 0
    cpu_request_milli: NonNegativeInt = 0
    cpu_limit_milli: NonNegativeInt = 0
    cpu_total_milli: NonNegativeInt = 0
    memory_request_mega: NonNegativeInt = 0
    memory_limit_mega: NonNegativeInt = 0
    memory_total_mega: NonNegativeInt = 0
    nodes: NodeResources = NodeResources()


# --- Plans -------------------------------------------------------------------


class Reason(Frozen):
    """Why a policy chose a target: the rule applied and the numbers it saw."""

    rule: str
    message: str
    numbers: dict[str, float | int | str | None] = Field(default_factory=dict)


class ScalingDecision(Frozen):
    # A policy's output: bounded here, checked as a ``JobKey`` where it is applied.
    job: Annotated[str, Field(max_length=JOB_KEY_MAX)]
    current: NonNegativeInt
    target: NonNegativeInt
    reason: Reason
    operation: TaskOperation | None = None
    # Nodes the planner assumed the added replicas land on (a hint, not a binding).
    placements: dict[str, int] = Field(default_factory=dict)

    @property
    def delta(self) -> int:
        return self.target - self.current

    @property
    def changed(self) -> bool:
        return self.target != self.current or self.operation == TaskOperation.CREATE_TASK

    @property
    def direction(self) -> str:
        if self.target > self.current:
            return "up"
        if self.target < self.current:
            return "down"
        return "none"


class ScalingPlan(Frozen):
    """A policy's answer: one decision per job it considered."""

    policy: str
    decisions: tuple[ScalingDecision, ...] = ()

    @property
    def changes(self) -> tuple[ScalingDecision, ...]:
        return tuple(d for d in self.decisions if d.changed)

    def targets(self) -> dict[str, int]:
        return {d.job: d.target for d in self.decisions}

    def for_job(self, job: str) -> ScalingDecision | None:
        return next((d for d in self.decisions if d.job == job), None)
