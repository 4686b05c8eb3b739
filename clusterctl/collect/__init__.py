"""The collect stage: a run's logs, outputs and node diagnostics brought back (`clusterctl collect-logs`),
then the diagnosis.

`gather.py` the flow; `fetch.py` what to fetch from a node (the commands, the node's report, the
manifest, masking, diagnostics; node/node_archive.py runs on the node, finds and archives the files,
following no symlink); `tarstream.py` the tar stream read as it arrives; `unpack.py` written into the
destination (refusals, secrets masked, sha256 on the way); `arrange.py` rank logs as users read
them, in bounded memory.

One tar stream per node on its existing SSH connection, unpacked as it arrives by `tarstream.py`
(headers parsed by tarfile, file data handed to `write` and sha256 as slices of the received chunks:
tarfile's own stream reader copied each byte three times under the GIL, which starved the SSH
threads); 93 % of three parallel `scp -r` on the rehearsal machine (docs/benchmarks.md). To change
what collect-logs brings back: `fetch.py` (`diag_command`, `tar_command`), `gather.py`."""
