"""The only door to the API server: client, informers, the Binding gate, events, writes.

Lives here: ``client.py`` (HTTPS client with credentials, QPS/burst, retries, timeouts),
``informer.py`` (list + watch with resourceVersion, bookmarks, relists, stalled-watch
detection), ``binding.py`` (Bindings sent only from a fresh view), ``recorder.py`` (events and
the PodScheduled condition), ``podgroupwriter.py`` (PodGroup status writes),
``credentials.py`` (what a credential error means). Knows nothing of scheduling.

May import: api, util, logs, metrics.
"""
