"""ome-scheduler: a Kubernetes 1.35 second scheduler that places each gang of pods in one
accelerator domain and binds it all or nothing."""

__version__ = "0.1.0"
