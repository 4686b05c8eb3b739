"""The part of a run that lives on the cluster when no clusterctl watches it (`run --detach`, or an
attached `run` whose terminal hung up). Runs on the nodes: the standard library only, Python 3.8+,
copied into each node's run dir with its companions (engine.py, heal_policy.py and straggler_verdict.py:
the run's engine; node_health.py: the passive health watch; node_stragglers.py: the straggler watch's
samples; node_healing.py: a keeper's relaunch) and run from there
(nothing installed).

Two roles, one process each, both carrying the run's marker (modules/process.py), so `stop` and
`down` end them with the ranks:
- `supervise RUN_DIR` on the master node: an HTTP server on the rendezvous address, port
  rendezvous.port + 1. It holds every node's lease and hosts the run's engine (engine.py), which the
  attached controller hosts in-process: fail fast, lost nodes (silent for `lost_after_s`), `--timeout`,
  `clusterctl stop`, a run that heals itself; the engine's document is `supervisor.json`, which the
  controller reads back (`status`, `attach`, `logs`) into the run record. With `stall_timeout_s`, a run
  whose ranks all went silent that long is reported stalled (`stalled_s`), not stopped: telling a hang
  from a long step takes the stacks (`clusterctl stacks`).
- `keep RUN_DIR` on every node: every second it reports its torchrun's state (at the end the tail of
  its log); each answer renews the node's lease (plan/wrapper.py's wrapper stops the ranks when it runs
  out), and an answer "stop" writes `stop`, on which the wrapper stops the ranks at once. A silent
  supervisor (its node died) is a lease that runs out: every node stops its own ranks.
Both end by themselves when the run has ended: no process, port or file outside the run dir stays.

Every message is HMAC-SHA256-signed under its keeper's own key, HMAC(the run's secret, host) (the 0600
`supervision.json` in each node's 0700 run dir holds that node's key; the master's also the secret,
`supervisor_key`), for a host of the run only (the controller's list), with a growing sequence
number (a replay is refused); answers are signed the same way.
"""
import errno
import hashlib
import hmac
import json
import os
import sys
import threading
import time

if __package__:  # imported by the controller
    from clusterctl.node import rank_output
    from clusterctl.node.layout import AGENT_PID, SUPERVISION, SUPERVISOR_STATE
    from clusterctl.node.listener import LOG_LINE, RefusalLog, Slots
    from clusterctl.node.safe_files import Dir, Refused, first_word
else:  # run on a node, layout.py, listener.py and safe_files.py shipped beside it
    import rank_output
    from layout import AGENT_PID, SUPERVISION, SUPERVISOR_STATE
    from listener import LOG_LINE, RefusalLog, Slots
    from safe_files import Dir, Refused, first_word  # the no-follow layer, shipped beside (run/supervision.BESIDE_AGENT)

# A program of its own on the nodes (copied into the run dir, started with the node's python): its
# threads and clocks are that process's, not the controller's (tests/unit/test_architecture.py).
RUNS_ON_NODES = True
CONFIG = SUPERVISION
STATE = SUPERVISOR_STATE
MAC_HEADER = "X-Clusterctl-Mac"
HOST_HEADER = "X-Clusterctl-Host"  # whose keeper signs: its key is keeper_key(the run's secret, host)
TAIL_BYTES = 24000  # as engine.TAIL_BYTES: the end of a node's log a report carries
# What a peer on the job network controls, bounded (listener.py: the one discipline of every node
# port): a beat's body (the tail, JSON-escaped, fits), how long a connection may take to send its
# WHOLE request, how many unproven connections are open at once (per address and in all: keepers
# send one short request a second from their node's own address, and a newcomer drops the oldest).
MAX_BODY = 256 << 10  # x MAX_CONNECTIONS: 64 MB at most held at once
REQUEST_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 256
MAX_PER_ADDRESS = 16


def load_config(run_dir):
    with Dir.open(run_dir) as d:
        return json.loads(d.read(CONFIG, 1 << 20))


def sign(key, body):
    return hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


def keeper_key(secret, host):
    """A keeper's own key, HMAC(the run's secret, host): the supervisor holds the secret (`supervisor_key`,
    in the master's config only), each node only its own key, so a job that reads its node's config
    signs that node's beats and no other's (issue 47: the job is not the fleet's witness)."""
    return hmac.new(secret.encode(), b"keeper " + host.encode(), hashlib.sha256).hexdigest()


def write_json(path, document):
    """`path` replaced atomically through the layer (a link the job put there is replaced, not followed)."""
    where, name = os.path.split(path)
    with Dir.open(where or ".") as d:
        d.write(name, json.dumps(document, indent=1))


# ---- the supervisor (master node): it hosts the run's engine (engine.py, shipped beside this file)

def supervisor_of(config, run_dir):
    """The engine of this run: an Engine where it heals itself, else one Attempt."""
    if __package__:  # the controller's tests run it in-process
        from clusterctl.node import engine
    else:  # beside this file in the run dir
        import engine
    if config.get("heal"):
        return engine.Engine(config, run_dir)
    attempt = engine.Attempt(config, run_dir)
    attempt.awaits_release = True  # its end is final once every node's leases went (_keep says so)
    return attempt


def body_length(header):
    """The Content-Length of a request as a count to read, or None: absent, not digits, or over MAX_BODY
    (a negative one once made the supervisor read until the peer hung up, before the signature was checked)."""
    text = (header or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 8 or int(text) > MAX_BODY:
        return None
    return int(text)


def _more_descriptors():
    """Room for MAX_CONNECTIONS at once, whatever the soft limit was (the hard one permitting)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = MAX_CONNECTIONS * 2 + 64
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard) if hard != resource.RLIM_INFINITY
                                                        else wanted, hard))
    except (ImportError, ValueError, OSError):
        pass


def make_server(address, handler, refuse):
    """A threading HTTP server under listener.Slots: each connection has REQUEST_TIMEOUT_S for its whole
    request; at most MAX_PER_ADDRESS unproven connections of one address and MAX_CONNECTIONS in all, a
    newcomer dropping the oldest (never refused: a keeper's beat always gets in). The handler calls
    `server.slots.proven(request)` once the signature holds."""
    from http.server import ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        allow_reuse_address = True
        daemon_threads = True
        request_queue_size = 64

        def __init__(self, *args):
            self.slots = Slots(REQUEST_TIMEOUT_S, MAX_PER_ADDRESS, MAX_CONNECTIONS, refuse)
            super().__init__(*args)

        def verify_request(self, request, client_address):
            self.slots.admit(request, client_address[0])
            request.settimeout(REQUEST_TIMEOUT_S)  # a proven peer that stops reading its answer
            return True

        def shutdown_request(self, request):
            self.slots.done(request)
            super().shutdown_request(request)

        def server_close(self):
            self.slots.close()
            super().server_close()

        def handle_error(self, request, client_address):  # not a traceback per malformed request
            refuse(client_address[0], repr(sys.exc_info()[1]))

    return Server(address, handler)


def serve(run_dir):
    from http.server import BaseHTTPRequestHandler

    config = load_config(run_dir)
    secret, hosts = config["supervisor_key"], set(config["hosts"])
    supervisor = supervisor_of(config, run_dir)
    state_path = os.path.join(run_dir, STATE)
    refuse = RefusalLog()
    _more_descriptors()

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S  # each read; the whole request's deadline is the server's Slots
        protocol_version = "HTTP/1.0"  # one request per connection

        def do_POST(self):
            length = body_length(self.headers.get("Content-Length"))
            if length is None:
                refuse(self.client_address[0], f"Content-Length {self.headers.get('Content-Length')!r:.40}")
                return self._answer(413, b"{}", "")
            host = self.headers.get(HOST_HEADER, "")
            if host not in hosts:  # a node of this run only (the controller's list), before a byte of the body
                refuse(self.client_address[0], f"not a node of this run: {host!r:.60}")
                return self._answer(403, b"{}", "")
            key = keeper_key(secret, host)
            body = self.rfile.read(length)
            if not hmac.compare_digest(self.headers.get(MAC_HEADER, ""), sign(key, body)):
                refuse(self.client_address[0], f"bad signature for {host}")
                return self._answer(403, b"{}", "")
            self.server.slots.proven(self.request)
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):
                return self._answer(400, b"{}", key)
            if not isinstance(message, dict) or message.get("host") != host:  # its own key speaks for itself only
                return self._answer(409, b"{}", key)
            answer = supervisor.beat(message)
            if answer is None:
                return self._answer(409, b"{}", key)
            self._answer(200, json.dumps(answer).encode(), key)

        def _answer(self, code, body, key):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.send_header(MAC_HEADER, sign(key, body))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # one line per beat would flood supervisor.log
            pass

        def log_error(self, format, *args):  # a malformed request line or header: one bounded line
            refuse(self.client_address[0], (format % args)[:LOG_LINE])

    try:
        try:
            server = make_server((config["address"], config["port"]), Handler, refuse)
        except OSError as exc:  # an address that is not this machine's own (NAT): all of them, as torchrun
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
            server = make_server(("", config["port"]), Handler, refuse)
    except OSError as exc:
        write_json(state_path, {"run_id": config["run_id"], "state": "failed", "final": True,
                                "reason": f"the supervisor could not listen on {config['address']}:{config['port']}: "
                                          f"{exc.strerror}", "nodes": {}, "failures": []})
        return 1
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    print(f"supervising run {config['run_id']} on {config['address']}:{config['port']}", flush=True)
    while True:
        done = supervisor.tick()
        write_json(state_path, supervisor.document(final=done))  # each time: its age says it still runs
        if done:
            break
        time.sleep(0.5)
    server.shutdown()
    server.server_close()
    print(f"run {config['run_id']} ended: {supervisor.state} ({supervisor.stop_reason or 'every node exited 0'})",
          flush=True)
    return 0


# ---- the keeper (every node)

def node_report(run_dir):
    """What this node's keeper says of its torchrun (see plan/wrapper.py for the files), read through
    the no-follow layer: the job's links and FIFOs in its run dir are neither followed nor opened."""
    try:
        d = Dir.open(run_dir)
    except (OSError, Refused):
        return {"exit_code": None, "stopped": False, "ranks": 0, "silent_s": None}
    with d:
        return _report(d)


def _report(d):
    try:
        code = first_word(d, "agent.exit")  # one word, as a poll and the live stream read it
    except (OSError, Refused):
        code = None
    exit_code = None if code is None else int(code) if code.lstrip("-").isdigit() else 1  # unreadable: failed
    files, ranks = rank_output.output_files(d)
    newest = rank_output.last_output(d, files)  # the flight recorder's dump lines are not output
    report = {"exit_code": exit_code, "stopped": d.is_file("stopped"),
              "ranks": ranks, "silent_s": round(time.time() - newest, 1) if newest else None}
    if exit_code is not None:
        report["tail"] = _tail(d)
    return report


def _tail(d, size=TAIL_BYTES):
    try:
        return d.read(name="agent.log", limit=size, tail=True).decode("utf-8", "replace")
    except (OSError, Refused):
        return ""


def _renew(run_dir):
    """The lease's time set to now: never through a link, never made where the wrapper made none."""
    try:
        with Dir.open(run_dir) as d:
            if d.entry("lease") is not None:
                d.touch("lease")
    except (OSError, Refused):
        pass


def _mark_stop(run_dir, reason):
    try:
        with Dir.open(run_dir) as d:
            if d.entry("stop") is None:
                d.write("stop", reason)
    except (OSError, Refused):
        pass


def keep(run_dir, interval=1.0):
    config = load_config(run_dir)
    healing = _beside("node_healing", config.get("heal"))
    health = _beside("node_health")  # the passive health watch: its newest sample, bounded, in a report
    health = health.Sampler(config.get("since")) if health else None
    watch = _beside("node_stragglers", config.get("stragglers"))  # the straggler watch's samples, in each report
    watch = watch.Sampler(run_dir, config.get("stragglers")) if watch else None
    if watch and threading.current_thread() is threading.main_thread():
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `stop`, `down`: the py-spy it unpacked goes too
    replica = _replicator(run_dir, config)
    try:
        return _keep(run_dir, config, interval, healing, health, watch, replica)
    finally:
        watch.close() if watch else None
        replica.stop() if replica else None


def _replicator(run_dir, config):
    """job.checkpoint.replicas (issue 50): this node's checkpoint copies, for the keeper's life; None without."""
    wanted = ((config.get("heal") or {}).get("checkpoint") or {}).get("replicas")
    module = _beside("checkpoint_replica", wanted)
    try:
        return module.Replicator(run_dir, config).start() if module else None
    except OSError as error:  # its port taken: the run goes on, its checkpoints not copied (said)
        print(f"checkpoint replicas: cannot listen ({error}); this node's checkpoints are not copied", flush=True)
        return None


def _keep(run_dir, config, interval, healing, health, watch, replica=None):
    import urllib.request

    key, host, lease_s = config["key"], config["host"], config["lease_s"]
    url = f"http://{config['address']}:{config['port']}/beat"
    seq, last_answer = int(time.time() * 1000), time.monotonic()
    released = 0  # beats sent since this node's leases went: the supervisor's end waits for that word
    while True:
        report = {**node_report(run_dir), **({"attempt": healing.attempt_of(run_dir)} if healing else {})}
        report.update(health.take(final=report["exit_code"] is not None) if health else {})
        report.update({"stragglers": watch.summary()} if watch and report["exit_code"] is None else {})
        report.update({"checkpoints": replica.summary()} if replica else {})
        report.update({"released": True} if released else {})
        seq += 1
        body = json.dumps({"host": host, "seq": seq, **report}).encode()
        request = urllib.request.Request(url, data=body, headers={MAC_HEADER: sign(key, body), HOST_HEADER: host,
                                                                  "Content-Type": "application/json"})
        answer = None
        try:
            with urllib.request.urlopen(request, timeout=3) as response:
                data = response.read()
                if hmac.compare_digest(response.headers.get(MAC_HEADER, ""), sign(key, data)):
                    answer = json.loads(data)
        except (OSError, ValueError):
            pass
        now = time.monotonic()
        if released:
            if (isinstance(answer, dict) and answer.get("seq") == seq) or released >= RELEASED_TRIES:
                return 0  # heard (or the supervisor ended meanwhile: its end did not wait for this node)
            released += 1
        elif isinstance(answer, dict) and answer.get("seq") == seq:
            last_answer = now
            _renew(run_dir)
            health.delivered(report.get("health")) if health else None
            if answer.get("stop") and report["exit_code"] is None:
                _mark_stop(run_dir, str(answer.get("reason") or "stopped by the run's supervisor") + "\n")
            replica.answered(answer) if replica else None
            if healing and isinstance(answer.get("launch"), dict):
                healing.launch(run_dir, config, answer["launch"])
            if (report["exit_code"] is not None and answer.get("ack")) or answer.get("end"):
                # the run's end on this node: its GPU leases go first, then the supervisor hears so, and
                # only then is the run's end final (what `status` and the next `run` see)
                _release_leases(run_dir, config)
                released = 1
                continue
        elif now - last_answer > lease_s:
            # the supervisor is gone: the wrapper's lease runs out and it stops the ranks itself
            print(f"no answer from the supervisor at {config['address']}:{config['port']} for "
                  f"{now - last_answer:.0f}s; leaving the lease to run out", flush=True)
            _release_once_ranks_gone(run_dir, config, interval)
            return 1
        time.sleep(interval)


RELEASED_TRIES = 3
RANKS_GONE_WAIT_S = 15.0  # the wrapper's lease ran out with this keeper's: it ends the ranks (TERM, 5 s, KILL)


def _release_once_ranks_gone(run_dir, config, interval):
    """Cut off from the supervisor: once this node's ranks are gone (agent.exit: the wrapper stopped them,
    its lease run out; or no launcher ever started here: no agent.pid), the run's GPU leases here go too,
    not a lost-node window later."""
    deadline = time.monotonic() + RANKS_GONE_WAIT_S
    while _launched(run_dir) and node_report(run_dir)["exit_code"] is None:
        if time.monotonic() > deadline:
            print("the run's ranks did not end here; its GPU leases are left to lapse", flush=True)
            return
        time.sleep(interval)
    _release_leases(run_dir, config)


def _launched(run_dir):
    try:
        with Dir.open(run_dir) as d:
            return d.entry(AGENT_PID) is not None
    except (OSError, Refused):
        return True  # unreadable: never taken for "nothing ran here"


def _release_leases(run_dir, config):
    """The run's GPU leases on this node (leases.py, issue 48) go as it ends; where they cannot (not shipped,
    the lease directory not this user's) they lapse a lost-node window after this keeper's last beat."""
    leases = _beside("leases")
    try:
        leases.release_run_dir(run_dir, config["run_id"], config["host"]) if leases else None
    except (OSError, ValueError, KeyError, getattr(leases, "Refused", OSError)) as error:
        print(f"the run's GPU leases are left to lapse: {error}", flush=True)


def _beside(name, wanted=True):  # job/<name>.py shipped beside this file, or None (not wanted, not shipped)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        return __import__(name) if wanted else None
    except ImportError:
        return None


def main(argv):
    if len(argv) != 3 or argv[1] not in ("supervise", "keep"):
        sys.stderr.write("usage: node_agent.py supervise|keep RUN_DIR\n")
        return 2
    return serve(argv[2]) if argv[1] == "supervise" else keep(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
