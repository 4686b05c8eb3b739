"""The collect stage: a run's logs, outputs and node diagnostics brought back.

fetch.py (the commands, the node's report, the manifest, masking, diagnostics), node_archive.py
(run on the node: finds and archives the files, following no symlink), tarstream.py (the tar
stream read as it arrives), unpack.py (written into the destination, secrets masked),
arrange.py (rank logs as users read them, in bounded memory).
"""
