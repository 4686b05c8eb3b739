"""The inventory stage: an inventory file (clusterctl YAML, Ansible INI/YAML, MPI hostfile)
-> a validated `models.Inventory`, every mistake reported with file:line before any connection.
Hosts and the job as values: it imports the ground and the libraries only.

`load.py` holds the sections and the cross-section checks (`*_section.py` one section each: the
container and its `registry_auth:`, `health:`, `notify:`, `scheduler:`, the keys of `job:` that make
a run heal itself), `values.py` how one value is read (`Doc`: file:line of every key, errors with the
fix; sizes; "did you mean"), `ssh_values.py` the per-host ssh settings and `become`, `formats.py`
which format a file is, `ansible*.py` Ansible inventories as Ansible reads them (INI/YAML,
group_vars/host_vars and directories with its precedence, ssh_common_args, `ansible-inventory
--list` mode), `hostfile.py` MPI hostfiles, `dump.py` the clusterctl YAML writer, `yamlsource.py`
bounded YAML that remembers where each key came from (playbooks use it too), `timelimit.py` Slurm's
time limits as Slurm writes them (the `scheduler:` section's `time`).

To add an inventory key: `models.py` (the field), `load.py` (its section), `values.py` (a new kind of
value), CONTRACT.md; how an Ansible variable maps: `ansible_vars_map.py`."""
