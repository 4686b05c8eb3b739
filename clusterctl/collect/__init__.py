"""The collect stage: a run's logs, outputs and node diagnostics brought back.

fetch.py (what to fetch, the manifest, masking, diagnostics), tarstream.py (the tar stream
read as it arrives).
"""
