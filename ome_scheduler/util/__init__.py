"""Small pure helpers shared by the framework and the plugins (no Kubernetes I/O)."""
