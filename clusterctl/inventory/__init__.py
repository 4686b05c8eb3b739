"""The inventory stage: an inventory file (clusterctl YAML, Ansible INI/YAML, MPI hostfile)
-> a validated `models.Inventory`, every mistake reported with file:line before any connection.

load.py (the sections and cross-section checks), values.py (how one value is read),
ansible.py and hostfile.py (foreign formats), dump.py (the clusterctl YAML writer),
yamlsource.py (bounded YAML that remembers where each key came from).
"""
