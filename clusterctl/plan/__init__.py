"""The Plan of a run, pure: who runs what where (topology), the launcher's command line on every node
(torchrun or `job.launcher`), the platform entrypoint's values, container paths, and the files a run ships."""
