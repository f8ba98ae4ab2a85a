"""``python -m ome_scheduler``: same as the ``ome-scheduler`` console script."""

from ome_scheduler.cli import main

main()
