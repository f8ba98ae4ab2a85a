"""End-to-end fault injection: the scheduler against a real control plane that breaks (issue 12)."""
