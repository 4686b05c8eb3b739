"""Every rank's Python stack of a run now (`clusterctl stacks`): taken, saved here and beside the run on
each node that answered."""
from __future__ import annotations

import json


def take_run_stacks(session, inventory, run_id: str, record: dict):
    """(watch/sampler.py stacks by host, the roll call, the path of the saved document)."""
    from clusterctl.executor import for_each_host, run_commands
    from clusterctl.watch import sampler, stalls
    from clusterctl.ground.records import RunStore
    from clusterctl.plan.shipping import put_file_command
    from clusterctl.node.layout import node_run_dir

    shape = stalls.JobShape.of_record(record, inventory)
    planned = {node["host"] for node in record.get("topology") or []}
    hosts = [h for h in inventory.hosts if h.name in planned]
    nodes = sampler.take_stacks(inventory, hosts, run_id, session.connections, samples=1)
    call = stalls.snapshot(nodes, shape.expected, shape.host_of_rank)
    name = stalls.file_name()
    saved = stalls.save_local(RunStore(session.state).stacks_dir(run_id), name,
                              stalls.stacks_document(run_id, nodes, "clusterctl stacks", call=call))
    sampled = [h for h in hosts if nodes[h.name].samples]

    def put(transport, host):
        document = stalls.stacks_document(run_id, nodes, "clusterctl stacks", call=call, only_host=host.name)
        run_dir = node_run_dir(inventory.job.outputs, run_id, host.name)
        return run_commands(transport, host, [put_file_command(inventory, run_dir, name, json.dumps(document).encode())])

    for_each_host(sampled, put, session.connections)
    return nodes, call, saved
