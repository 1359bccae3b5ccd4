"""``python -m trainscaler_sim.apiserver``: run a loopback apiserver with N GPU nodes until interrupted."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .controllers.scoring import profiles_from_config
from .server import LoopbackApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--cpu", default="8")
    parser.add_argument("--memory", default="32Gi")
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--gpu-resource", default="nvidia.com/gpu")
    parser.add_argument("--kubeconfig", default=None, help="write a kubeconfig file here")
    parser.add_argument("--no-controllers", action="store_true")
    parser.add_argument("--no-scheduler", action="store_true")
    parser.add_argument(
        "--scheduler-config",
        default=None,
        help="a KubeSchedulerConfiguration (e.g. deploy/scheduler/kube-scheduler-config.yaml): "
        "its profiles' NodeResourcesFit scoring also schedules pods naming them",
    )
    args = parser.parse_args(argv)
    server = LoopbackApiServer(
        args.host,
        args.port,
        controllers=not args.no_controllers,
        scheduler=not args.no_scheduler,
        scheduler_profiles=(
            profiles_from_config(args.scheduler_config) if args.scheduler_config else None
        ),
    )
    server.start()
    for index in range(args.nodes):
        server.add_node(
            f"node-{index}",
            cpu=args.cpu,
            memory=args.memory,
            gpus=args.gpus,
            gpu_resource=args.gpu_resource,
        )
    if args.kubeconfig:
        server.write_kubeconfig(args.kubeconfig)
    print(server.url, flush=True)
    finished = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: finished.set())
    signal.signal(signal.SIGINT, lambda *_: finished.set())
    finished.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
