"""Seeing a run without reading logs (issue 41): metrics, top, Prometheus, notifications, the run report."""
