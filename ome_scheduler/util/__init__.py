"""Small pure helpers: quantities, label selectors, durations, timestamps, validation, output.

Lives here: ``quantity.py`` (``ParseQuantity`` of apimachinery), ``labels.py`` (selectors),
``durations.py``, ``timestamps.py``, ``validation.py`` (qualified names, DNS labels),
``output.py`` (text or JSON results). A leaf: no Kubernetes I/O, no scheduling state.

May import: api, util.
"""
