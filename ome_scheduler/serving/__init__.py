"""The HTTPS endpoint on ``--secure-port``: health, readiness, liveness and metrics.

Lives here: ``endpoints.py`` (the paths and their authorization), ``secure_serving.py``
(HTTP/1.1 over TLS with bounded time, memory and descriptors per client), ``tls.py`` (the TLS
policy and the serving certificate's reload), ``delegated_auth.py`` (TokenReview and
SubjectAccessReview with caches and rate limits). Reads health and metrics; never scheduling
state.

May import: api, util, kube, serving, logs, metrics.
"""
