"""Every file operation clusterctl does on a node goes through the no-follow layer (issue 47), found in the
code, not listed by hand: an AST walk over the node programs (clusterctl/node/) for `open(`, `os.*` file
calls, `shutil`, `Path.read_*/write_*`, ..., and over every shell script and argv the controller sends
(`("sh", "-c", SCRIPT)`, `("cat", path)`, ...) for `cat`, `tail`, `rm`, `mv`, `touch`, `>`, .... What is
found must be the layer itself (node/safe_files.py) or named below, each with why it is not a run's file
touched with more rights than the job has. A new `open()` of a run's file fails here with its place."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "clusterctl"

NODE_CALLS = {"open", "io.open", "os.open", "os.rename", "os.replace", "os.unlink", "os.remove", "os.rmdir", "os.mkdir",
              "os.makedirs", "os.listdir", "os.scandir", "os.walk", "os.symlink", "os.link", "os.chmod", "os.chown",
              "os.utime", "os.truncate", "os.stat", "os.lstat", "os.mkfifo", "os.path.exists", "os.path.isfile",
              "os.path.isdir", "os.path.getmtime", "os.path.getsize", "glob.glob", "tarfile.open"}
PATH_METHODS = {"write_text", "write_bytes", "read_text", "read_bytes", "unlink", "rmdir", "mkdir", "touch", "iterdir",
                "symlink_to", "rglob"}

# (file, function): why it may touch files without the layer. The rule: the layer is for every file of a
# run's directories that a process with more rights than the job (root on the host, the controller's
# sudo) touches. A node program that runs as the job's peer (in the job's container, or as the SSH user
# the job runs as) goes through the layer where it touches the run dir too; the rest below is outside
# any run's directories.
NODE_ALLOWED = {
    ("__init__.py", "source"): "the controller reading its own package's files",
    ("safe_files.py", "*"): "the layer itself",
    ("follow_files.py", "_lstat"): "os.stat(dir_fd=, follow_symlinks=False) on a directory the layer opened",
    ("run_files.py", "write_env"): "os.chown(dir_fd=, follow_symlinks=False) of the env the layer just wrote",
    ("node_archive.py", "__init__"): "tarfile.open of the controller's stdout, not a file",
    ("node_healing.py", "set_aside"): "os.rename(src_dir_fd=, dst_dir_fd=) between two directories the layer opened",
    ("node_health.py", "_boot_time"): "/proc/stat",
    ("node_health.py", "_run"): "shutil.which: PATH lookup",
    ("node_metrics.py", "_read"): "/proc files",
    ("node_metrics.py", "__init__"): "/proc/net/dev's size",
    ("node_metrics.py", "_running"): "/proc/<pid>",
    ("node_metrics.py", "write"): "metrics.jsonl: started by the wrapper as the job's peer (its container or user)",
    ("node_metrics.py", "thin"): "metrics.jsonl rewritten: the job's peer, as `write`",
    ("node_mpi_gate.py", "*"): "mpirun's gate: runs as the job's peer in its container or as its user; its "
                               "files are its own rank files and key (shipped through the layer's `put`)",
    ("node_stragglers.py", "*"): "/proc of the ranks and py-spy's unpacked copy in a private temp dir",
    ("rank_procs.py", "*"): "/proc of the node's processes: their environment, parent and CPU time, never a run's file",
    ("allreduce_bench.py", "*"): "the nccl-test benchmark: one of the job's ranks",
    ("allreduce_bench.py", "_nvlink"): "shutil.which: PATH lookup",
    ("checkpoint_replica.py", "root_ok"): "lstat (never follows) of job.checkpoint's root itself, to refuse a link "
                                          "or another owner's directory before the layer opens it",
    ("checkpoint_replica.py", "_clean"): "isdir of the root root_ok proved a moment before: nothing is opened",
    ("checkpoint_wire.py", "link_rate"): "/sys/class/net speeds",
    ("node_relay.py", "without_layers"): "tarfile over `docker save`'s stream on stdin, to the socket: no file",
    ("node_relay.py", "send"): "tarfile over `docker save`'s stream on stdin: no file",
    ("checkpoint_wire.py", "receive_files"): "/dev/null, where a file the node has already is checked, not written",
}

FILE_COMMANDS = {"cat", "tail", "head", "rm", "mv", "cp", "touch", "mkdir", "ln", "tee", "dd", "chmod", "chown", "find",
                 "ls", "test", "stat"}
SHELL_OPS = re.compile(r"(^|[\s;|&(`{])(" + "|".join(sorted(FILE_COMMANDS - {"test"})) + r")\s|[^<>&0-9-]>\s*\"?\$|>>")

# module:script (or module:argv's first word): why it is no file of a run touched with more rights than the job
SENT_ALLOWED = {
    "collect/fetch.py:_KERNEL_EVENTS": "the kernel log",
    "collect/fetch.py:_CONTAINER_SHM": "the container's /dev/shm, through /proc/<pid>/root: `stat -f`, no file read",
    "preflight/facts/host.py:cat": "/proc/meminfo, /proc/sys/kernel/random/boot_id",
    "collect/fetch.py:touch": "collect's probe for a shared outputs: a random name (48 bits) under job.outputs, "
                              "made and removed by this collect; nobody can plant it first",
    "collect/fetch.py:rm": "the same probe",
    "collect/gather.py:test": "the same probe: `test -e` reads nothing",
    "modules/copy.py:_WRITE": "the `copy` module: the operator's own destination",
    "modules/lock.py:_ACQUIRE": "the node lock in /tmp/clusterctl-locks-<uid> (proven ours in the script)",
    "plan/launcher.py:_ONCE": "the launcher as the job itself (its container, its user): the ranks' own files",
    "plan/launcher_deepspeed.py:_NODE": "deepspeed's launcher as the job itself",
    "plan/wrapper.py:_WRAPPER": "the wrapper runs as the job's peer (in its container, or as the SSH user the job "
                                "runs as): a link the job makes points it nowhere the job cannot go itself",
    "preflight/facts/ib.py:_SYSFS_SCRIPT": "sysfs",
    "registry/credentials.py:line": "the SSH user's docker config",
    "registry/relay.py:_HELD_LAYERS": "docker's own storage",
    "run/supervision.py:_START": "starts the supervisor/keeper as the job's peer; its log beside it",
    "watch/health_watch.py:_KERNEL_SINCE": "the kernel log",
    "watch/kernel_log.py:_OOM_SINCE": "the kernel log",
    "watch/sampler.py:_SCRIPT": "the stack sampler's private temp dir (mktemp -d) and py-spy's kept copy",
}


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _functions(tree) -> dict:
    owner = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                owner[id(node)] = function.name  # the innermost wins: walked outer first
    return owner


LAYER_OPENS = ("Dir.open", ".sub", ".make_private", ".shared")


def _layer_names(tree) -> set:
    """Names bound to a directory the layer opened (`with Dir.open(...) as d`, `own = run.make_private(...)`):
    their read_text/touch/... are the layer's, not pathlib's."""
    names = {"d"}
    for node in ast.walk(tree):
        pairs = []
        if isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
            pairs.append((node.context_expr, node.optional_vars.id))
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            pairs.append((node.value, node.targets[0].id))
        for value, name in pairs:
            if isinstance(value, ast.Call) and _dotted(value.func).endswith(LAYER_OPENS):
                names.add(name)
    return names


def node_file_operations() -> list[tuple[str, str, int, str]]:
    """(file, function, line, call) of every file operation in clusterctl/node/."""
    found = []
    for path in sorted((ROOT / "node").glob("*.py")):
        tree = ast.parse(path.read_text())
        owner, layer = _functions(tree), _layer_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if method in PATH_METHODS and isinstance(receiver, ast.Name) and receiver.id in layer:
                continue
            if name in NODE_CALLS or name.startswith("shutil.") or method in PATH_METHODS:
                found.append((path.name, owner.get(id(node), "<module>"), node.lineno, name or method))
    return found


def sent_file_operations() -> list[tuple[str, str]]:
    """(module:script, text) of every shell script or argv the controller sends that touches files."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("node/", "sandbox/")):  # node programs (above); the sandbox builds the rehearsal machine
            continue
        tree = ast.parse(path.read_text())
        assigned = {n.targets[0].id: n.value for n in ast.walk(tree)  # module level and a function's own
                    if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Tuple, ast.List)) or not node.elts:
                continue
            first = node.elts[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if first.value == "sh" and len(node.elts) >= 3 and getattr(node.elts[1], "value", None) == "-c":
                script = node.elts[2]
                if isinstance(script, ast.Name) and script.id in assigned:
                    name, parts = script.id, assigned[script.id]
                else:
                    name, parts = "line", script
                text = " ".join(n.value for n in ast.walk(parts) if isinstance(n, ast.Constant) and isinstance(n.value, str))
                if SHELL_OPS.search(text):
                    found.append((f"{rel}:{name}", text))
            elif first.value in FILE_COMMANDS and len(node.elts) >= 2:
                found.append((f"{rel}:{first.value}", ast.unparse(node)))
    return found


def test_every_node_program_file_operation_is_the_layer_or_named_with_its_reason():
    bad = [f"clusterctl/node/{file}:{line} {function}(): {call}" for file, function, line, call in node_file_operations()
           if (file, function) not in NODE_ALLOWED and (file, "*") not in NODE_ALLOWED]
    assert not bad, ("a node program touches files without the no-follow layer (node/safe_files.py): use Dir, or "
                     "name it in NODE_ALLOWED with why it is no run's file:\n" + "\n".join(bad))


def test_every_file_operation_the_controller_sends_is_the_layer_or_named_with_its_reason():
    bad = [f"clusterctl/{where}: {text[:120]!r}" for where, text in sent_file_operations() if where not in SENT_ALLOWED]
    assert not bad, ("a command sent to the nodes touches files outside the layer (send a node/run_files.py "
                     "operation through plan/node_files.command, or name it in SENT_ALLOWED with why):\n"
                     + "\n".join(bad))


def test_the_allow_lists_name_nothing_that_is_gone():
    found_node = {(file, function) for file, function, _, _ in node_file_operations()}
    stale = [key for key in NODE_ALLOWED if key[1] != "*" and key not in found_node]
    found_sent = {where for where, _ in sent_file_operations()}
    stale += [key for key in SENT_ALLOWED if key not in found_sent]
    assert not stale, f"allowed but no longer there (remove them): {stale}"


def test_the_walk_finds_what_it_looks_for():
    """The finders themselves: a snippet of each kind is seen."""
    tree = ast.parse("def f(p):\n    open(p).read()\n    p.write_text('x')\n    os.rename(a, b)\n")
    calls = [_dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert {"open", "os.rename", "p.write_text"} <= set(calls)
    assert SHELL_OPS.search('echo > "$1/lease"') and SHELL_OPS.search('tail -n 5 "$d/agent.log"')
    assert SHELL_OPS.search('rm -rf "$1.attempt-$2"; mv -T "$1" x') and not SHELL_OPS.search("echo running 2>/dev/null")
