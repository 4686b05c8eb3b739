"""Score a frozen batch of labelled logs ONCE, as `clusterctl diagnose` would, and record the result.

    .venv/bin/python bench/score_batch.py NAME DIR [DIR ...]     # e.g. batch-3 /work/wt/batches/batch-3a ...

The protocol (docs/diagnosis.md, "First scores"): a batch is scored only after its directory holds a
FROZEN file (the sha256 of each log), every log's hash is checked against it, and the score is
written to bench/first_scores/NAME.json and .md, with the batch hash (sha256 of the FROZEN files)
and the commit the score was made with. A second scoring of the same NAME is refused: the first
score is the one that counts. docs/diagnosis.md's "First scores" section is rewritten from
bench/first_scores/ (bench/diagnose_report.py does the same when it regenerates the page).

Labels: `# cause: X`. `other:<name>` counts as cause C only when OTHER_ALIASES (written before any
batch was scored) maps the name to C; otherwise it is a miss whatever the tool says.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import expert_reading  # noqa: E402  (bench/: the blind readers' answers on the same logs)
from clusterctl.diagnose import diagnose_text  # noqa: E402
from clusterctl.diagnose.engine import with_similar_causes  # noqa: E402
from clusterctl.diagnose.rules import CAUSES  # noqa: E402
from clusterctl.diagnose.confidence import OBSERVED, RECENT, calibrated, through  # noqa: E402
from clusterctl.diagnose.similar import similar_cases  # noqa: E402

SCORES = REPO / "bench" / "first_scores"
DOC = REPO / "docs" / "diagnosis.md"
SECTION = "## First scores (frozen batches, each scored once)"

# `other:<name>` labels read by meaning: a regex over the name -> the vocabulary cause it is.
# Fixed before batch 1 was scored; a name matching none is a miss.
# (after batch 30, for later batches: a word between two is `[a-z0-9]+`, not `\w+`, which spans underscores and
# so whole names: "fsdp_cuda_stream_on_xpu_build" had read as an extension build, and "space" is a word of its own,
# not the end of "namespaces"; no other label of batches 1-30 maps differently)
OTHER_ALIASES = (
    (r"collective.*(?:mismatch|desync|order)|desync|mismatch.*collective|out[-_ ]of[-_ ]step|seq(?:num)?.*mismatch",
     "collective_mismatch"),
    (r"(?:duplicate|same|identical)[-_ ]?(?:host|hostname|host[-_ ]?hash|node[-_ ]?id)|host[-_ ]?hash"
     r"|host(?:name)?[-_ ]?(?:collision|clash|conflict|duplicate)", "duplicate_host"),
    (r"p2p|peer[-_ ]?to[-_ ]?peer|(?:^|[-_ ])acs(?:$|[-_ ])|iommu|peer[-_ ]access", "p2p_unsupported"),
    (r"(?:arch|sm_?\d+|compute[-_ ]capability|kernel[-_ ]image|no[-_ ]kernel).*(?:unsupported|too[-_ ]old|mismatch"
     r"|not[-_ ]compatible|incompatible)|(?:unsupported|incompatible)[-_ ](?:gpu[-_ ]|cuda[-_ ])?arch|no[-_ ]kernel[-_ ]image"
     r"|gpu[-_ ]too[-_ ](?:new|old)|cuda[-_ ]capability|compute[-_ ]capability",
     "gpu_arch_unsupported"),
    # added after batch 2's first score, before batch 3 was frozen (batches 1-2 keep their first scores):
    # the GPU-arch words in either order ("torch_build_too_old_for_gpu_arch", "nccl_build_lacks_old_gpu_arch",
    # "library_too_old_for_gpu_arch"), and a SIGBUS / full /dev/shm named in other words ("sigbus_nccl_shm")
    (r"(?:too[-_ ]old|too[-_ ]new|lacks?|missing|without|unsupported|incompatible)[-_ ](?:[a-z0-9]+[-_ ])*?"
     r"(?:gpu[-_ ]|cuda[-_ ])?arch", "gpu_arch_unsupported"),
    (r"(?:sigbus|bus[-_ ]error)[-_ ].*shm|shm[-_ ].*(?:sigbus|bus[-_ ]error|full|too[-_ ]small|(?:^|[-_ ])space(?:$|[-_ ]))"
     r"|shared[-_ ]memory[-_ ].*(?:full|too[-_ ]small|exhausted)", "shm_too_small"),
    # added after batch 3's first score, before batches 4-6 were frozen or read (batches 1-3 keep their first
    # scores): the two new causes, and names met in batches 1-3 whose meaning is a vocabulary cause's
    (r"sighup|hangup|(?:ssh|terminal|tty)[-_ ]session[-_ ](?:closed|ended|exit)|nohup", "sighup_session_closed"),
    (r"ssh|passwordless|publickey|host[-_ ]?key", "ssh_failed"),
    (r"driver.*(?:library|lib|module|kernel|nvml).*mismatch|nvml.*mismatch"
     r"|(?:kernel[-_ ]module|nvidia[-_ ](?:module|library))[-_ ](?:version[-_ ])?mismatch|unattended[-_ ]upgrade"
     r"|driver[-_ ]upgrade.*(?:reboot|mismatch)",
     "driver_library_mismatch"),
    (r"(?:graph|topo(?:logy)?)[-_ ](?:xml[-_ ])?file|nccl[-_ ](?:graph|topo)|wrong[-_ ]vm[-_ ]size", "nccl_topo_file"),
    # an InfiniBand/RoCE link or fabric fault or setting (retransmits exceeded, MTU, a fabric the nodes are not on)
    (r"rdma|(?:^|[-_ ])roce(?:v2)?(?:$|[-_ ])|infiniband|(?:^|[-_ ])ib(?:$|[-_ ])|ibverbs|retransmit"
     r"|retry[-_ ](?:count[-_ ])?exceeded|(?:^|[-_ ])mtu(?:$|[-_ ])",
     "ib_config"),
    # containers on Docker's bridge network: ranks advertise addresses the other nodes cannot reach
    (r"docker[-_ ]?(?:bridge|network)|bridge[-_ ]network|network[-_ ]isolation|container[-_ ]network",
     "nic_mismatch"),
    # the launch started another number or layout of processes than the job declares (Slurm tasks vs devices,
    # a lone `python` for num_processes=N, no srun)
    (r"slurm.*(?:ntasks|srun|tasks?[-_ ]per|layout)|ntasks|without[-_ ]srun"
     r"|(?:world[-_ ]size|num[-_ ]?processes|process[-_ ]count|task[-_ ]count).*mismatch", "launcher_args"),
    # (after batch 39's first score, for later batches) the same class in other words: "slurm_tasks_not_matching_devices"
    (r"slurm[-_ ](?:[a-z0-9]+[-_ ])?tasks?[-_ ](?:[a-z0-9]+[-_ ])?(?:mismatch\w*|not[-_ ]match\w*)", "launcher_args"),
    # ranks given different amounts of data run different numbers of collectives: a desync
    (r"uneven[-_ ](?:data|inputs?|batch|dataset|length)", "collective_mismatch"),
    # added after batches 4-6's first scores (for later batches): NCCL's network plugin / libfabric / EFA
    (r"libfabric|(?:^|[-_ ])efa(?:$|[-_ ])|(?:^|[-_ ])ofi(?:$|[-_ ])|net[-_ ]plugin|nccl[-_ ]plugin",
     "net_plugin_incompatible"),
    # a vocabulary cause named in other words (its fix is the vocabulary's): the InfiniBand stack's own settings
    (r"memlock|locked[-_ ]memory|gid[-_ ]index|(?:^|[-_ ])hca(?:$|[-_ ])", "ib_config"),
    # a collective timeout shorter than the work one rank does meanwhile
    (r"timeout[-_ ]too[-_ ](?:short|low|small)|(?:exceeds?|longer[-_ ]than)[-_ ](?:the[-_ ])?(?:nccl[-_ ]|collective[-_ ]"
     r"|watchdog[-_ ]|process[-_ ]group[-_ ]|hccl[-_ ])?timeout", "nccl_timeout_slow_rank"),
    # a hostname that resolves to loopback, or NCCL/Gloo on the wrong interface
    (r"(?:hostname|etc[-_ ]hosts).*(?:loopback|127)|(?:wrong|bad|incorrect|mismatched)[-_ ](?:network[-_ ])?"
     r"(?:interface|nic|iface)|socket[-_ ]ifname", "nic_mismatch"),
    # the same NCCL/torch/image differing across the nodes
    (r"versions?[-_ ](?:differ\w*|mismatch|skew)[-_ ](?:across|between|on)[-_ ](?:[a-z0-9]+[-_ ])?(?:nodes|hosts|ranks|machines)"
     r"|(?:different|mismatched)[-_ ](?:[a-z0-9]+[-_ ]){0,2}versions?[-_ ](?:across|between|on)[-_ ]", "version_mismatch"),
    # a port an earlier or other process still holds; else stale processes holding the GPUs
    (r"port[-_ ](?:[a-z0-9]+[-_ ])?(?:in[-_ ]use|occupied|taken|conflict|clash)", "port_in_use"),
    (r"(?:stale|zombie|leftover|orphan\w*)[-_ ](?:[a-z0-9]+[-_ ])?(?:process|rank|worker|job)", "duplicate_gpu"),
    # added after batch 7's first score (for later batches): a number format the GPU's architecture lacks
    (r"(?:bf16|bfloat16|fp8)[-_ ](?:[a-z0-9]+[-_ ])?(?:unsupported|not[-_ ]supported)|(?:unsupported|no)[-_ ](?:bf16|bfloat16|fp8)",
     "gpu_arch_unsupported"),
    # added with the cause extension_build_failed (round five), before batch 9 was frozen or read
    (r"(?:extension|jit|ninja|ops?|kernel|cuda)[-_ ](?:[a-z0-9]+[-_ ])?(?:build|compil\w*)[-_ ]?(?:fail\w*|error)?"
     r"|(?:build|compil\w*)[-_ ](?:fail\w*[-_ ])?(?:extension|ops?|kernel)|nvcc|cuda[-_ ]home|ninja", "extension_build_failed"),
    # added with the cause container_start_failed, after batches 10-11's first scores (for later batches): an HPC
    # container runtime or its hooks unable to create the container
    (r"container[-_ ](?:start|create|creation|hook|runtime)|(?:enroot|pyxis|apptainer|singularity|runc|oci|cdi)[-_ ]"
     r"(?:[a-z0-9]+[-_ ])?(?:hook|fail\w*|error|install\w*|unprivileged|requeue)|nvidia[-_ ]device[-_ ]nodes"
     r"|(?:stale|leftover)[-_ ]container", "container_start_failed"),
    # added after batch 30's first score (for later batches): a GPU the driver says must be reset, a node's GPU fault
    (r"gpu[-_ ](?:[a-z0-9]+[-_ ])?reset|reset[-_ ]required|(?:^|[-_ ])xid(?:$|[-_ ])", "gpu_xid"),
    # added with the causes ddp_unused_parameters and slurm_gres_config, after batch 28's first score and before batch
    # 29 froze (for later batches): DDP's reducer against the model's graph; a node's own GPU GRES configuration
    (r"unused[-_ ](?:[a-z0-9]+[-_ ])?param|find[-_ ]unused|ddp[-_ ](?:[a-z0-9]+[-_ ])?(?:reducer|ready[-_ ]twice|mark\w*[-_ ]ready)"
     r"|(?:marked|mark)[-_ ]ready[-_ ](?:twice|only[-_ ]once)", "ddp_unused_parameters"),
    (r"gres[-_ ]?conf|gres[-_ ](?:[a-z0-9]+[-_ ])?(?:count|device|core|autodetect)|slurm[a-z0-9]*[-_ ](?:[a-z0-9]+[-_ ])?(?:without|no)[-_ ]nvml"
     r"|nvml[-_ ]autodetect|autodetect[-_ ]nvml", "slurm_gres_config"),
    # added with the cause slurm_request_invalid, after batch 17's first score (for later batches): Slurm refusing
    # the request's GRES/GPU options, partition, feature or account
    (r"slurm[-_ ](?:[a-z0-9]+[-_ ])?(?:gres|gpus?[-_ ]option|request|partition|account|feature)|gres[-_ ](?:[a-z0-9]+[-_ ])?"
     r"(?:spec\w*|option|format|type)", "slurm_request_invalid"),
)


def label_of(raw_label: str) -> str:
    label = raw_label.strip()
    if not label.startswith("other:"):
        return label
    name = label[len("other:"):].strip().lower()
    for pattern, cause in OTHER_ALIASES:
        if re.search(pattern, name) and cause in CAUSES:
            return cause
    return label


def split_header(raw: str) -> tuple[dict, str]:
    """The leading `# key: value` lines (any key: collectors may add their own) and the log after them."""
    header: dict = {}
    lines = raw.split("\n")
    index = 0
    while index < len(lines) and re.match(r"^#\s*[\w -]{1,40}:", lines[index]):
        key, _, value = lines[index].lstrip("#").partition(":")
        header.setdefault(key.strip().lower(), value.strip())
        index += 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    return header, "\n".join(lines[index:])


def frozen_hashes(directory: Path) -> dict[str, str]:
    frozen = directory / "FROZEN"
    if not frozen.is_file():
        raise SystemExit(f"{directory}: no FROZEN file: the batch is not frozen, do not read or score it")
    hashes = {}
    for line in frozen.read_text().splitlines():
        match = re.match(r"^([0-9a-f]{64})\s+\*?(.+?)\s*$", line.strip())
        if match:
            hashes[Path(match.group(2)).name] = match.group(1)
    return hashes


def thread_of(source: str) -> str:
    """A source address as the thread it names: scheme, `www.`, fragment, query and trailing `/` dropped."""
    address = re.sub(r"^[a-z]+://(?:www\.)?", "", source.strip().lower())
    return re.split(r"[#?]", address, maxsplit=1)[0].rstrip("/")


def corpus_threads(batch: str = "") -> set:
    """The threads the corpus holds, less those that joined it from `batch` itself (a re-score reads them again)."""
    from clusterctl.diagnose import corpus
    return {thread_of(entry.source) for entry in corpus.entries()
            if not (batch and f" batch {batch} (" in entry.collected)}


def scored_threads(batch: str = "") -> set:
    """The threads earlier first scores counted (their rows' `source`, recorded since batch 28), less `batch`'s own."""
    return {thread_of(row["source"]) for path in SCORES.glob("*.json") if path.stem != f"batch-{batch}"
            for row in json.loads(path.read_text())["rows"] if row.get("source")}


def load_batch(directories: list[Path]) -> tuple[list, str, list]:
    """The batch's cases, its hash, and the logs left out: one thread counts once (two collectors can meet the
    same thread; the first directory's copy is kept), never a thread the corpus already holds (rule added before
    batch 28 was scored, when two of its collectors reported the same thread), nor one an earlier batch counted
    (added after batch 32, one of whose logs repeated batch 25's thread)."""
    numbers = {m.group(1) for d in directories for m in [re.match(r"batch-(\d+)", d.name)] if m}
    batch = numbers.pop() if len(numbers) == 1 else ""  # a re-score of one batch reads its joined logs again
    cases, digest, left_out, seen = [], hashlib.sha256(), [], corpus_threads(batch) | scored_threads(batch)
    for directory in directories:
        hashes = frozen_hashes(directory)
        digest.update((directory / "FROZEN").read_bytes())
        for path in sorted(directory.glob("*.log")):
            data = path.read_bytes()
            want = hashes.get(path.name)
            if want is None or hashlib.sha256(data).hexdigest() != want:
                raise SystemExit(f"{path}: not in FROZEN or its hash differs: the batch changed after freezing")
            header, body = split_header(data.decode("utf-8", errors="replace"))
            if "cause" not in header:
                raise SystemExit(f"{path}: no `# cause:` label")
            thread = thread_of(header.get("source", ""))
            if thread and thread in seen:
                left_out.append(f"{directory.name}/{path.name}")
                continue
            seen.add(thread)
            cases.append({"file": f"{directory.name}/{path.name}", "label": header["cause"],
                          "cause": label_of(header["cause"]), "family": header.get("family", ""),
                          "source": header.get("source", ""), "text": body})
    return cases, digest.hexdigest(), left_out


def score(cases: list) -> list:
    rows = []
    for case in cases:
        similar = similar_cases(case["text"], 3, exclude_sources=[case["source"]])
        findings = with_similar_causes(diagnose_text(case["text"]), similar)
        causes = [f.cause for f in findings]
        rows.append({"file": case["file"], "label": case["label"], "cause": case["cause"], "source": case["source"],
                     "family": case["family"], "named": causes, "confidence": findings[0].confidence,
                     "top1": bool(causes) and causes[0] == case["cause"], "top3": case["cause"] in causes[:3],
                     "unknown_first": bool(causes) and causes[0] == "unknown"})
    return rows


def figures(rows: list) -> dict:
    n = len(rows) or 1
    return {"n": len(rows), "top1": sum(r["top1"] for r in rows), "top3": sum(r["top3"] for r in rows),
            "unknown_first": sum(r["unknown_first"] for r in rows),
            "top1_pct": round(100 * sum(r["top1"] for r in rows) / n, 1),
            "top3_pct": round(100 * sum(r["top3"] for r in rows) / n, 1),
            "unknown_first_pct": round(100 * sum(r["unknown_first"] for r in rows) / n, 1)}


def commit() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "clusterctl"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + (" (uncommitted changes under clusterctl/)" if dirty else "")


def markdown(name: str, record: dict) -> str:
    f = record["figures"]
    lines = [f"### {name}: top-1 {f['top1']}/{f['n']} ({f['top1_pct']} %), top-3 {f['top3']}/{f['n']} "
             f"({f['top3_pct']} %), unknown first {f['unknown_first']}/{f['n']} ({f['unknown_first_pct']} %)", "",
             f"Scored {record['scored_at']} at commit `{record['commit']}`; batch hash (sha256 of its FROZEN files) "
             f"`{record['batch_hash'][:16]}`; directories {', '.join(record['dirs'])}."
             + (f" Left out, a thread counted already (in the batch or the corpus): {', '.join(record['left_out'])}."
                if record.get("left_out") else ""), "",
             "| cause (label) | n | top-1 | top-3 |", "|---|---|---|---|"]
    by_cause = defaultdict(list)
    for row in record["rows"]:
        by_cause[row["cause"]].append(row)
    for cause in sorted(by_cause):
        g = figures(by_cause[cause])
        lines.append(f"| `{cause}` | {g['n']} | {g['top1']} | {g['top3']} |")
    lines += ["", "| case | label | named (in order) | confidence | top-1 |", "|---|---|---|---|---|"]
    for row in record["rows"]:
        label = row["label"] + (f" (= `{row['cause']}`)" if row["label"] != row["cause"] else "")
        lines.append(f"| {row['file']} | {label} | {', '.join(row['named'])} | {row['confidence']} | "
                     f"{'yes' if row['top1'] else ('top-3' if row['top3'] else 'MISS')} |")
    return "\n".join(lines) + "\n"


def section() -> str:
    """docs/diagnosis.md's first-scores section, from bench/first_scores/*.json (in scoring order)."""
    records = sorted((json.loads(p.read_text()) for p in SCORES.glob("*.json")),
                     key=lambda r: (r["scored_at"], r["name"]))
    reading = expert_reading.section_text()
    intro = (FIRST_SCORES_INTRO + "\n\n" + headline(records) + "\n\n" + (reading + "\n\n" if reading else "")
             + CHANGES + "\n")
    return (SECTION + "\n\n" + intro + "\n" + calibration(records) + "\n"
            + "\n".join(markdown(r["name"], r) for r in records))


BUCKETS = ((0.0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 0.95), (0.95, 1.01))


def calibration(records: list) -> str:
    """Confidence of the first finding vs how often it was right, over every first-scored case, by the map
    that printed it (diagnose/confidence.py): none (raw), FIRST ("calibrated"), FIRST then OBSERVED ("observed");
    each table beside what its values print now, so each map's fit and its test read side by side."""
    recent = lambda c: through(RECENT, c)  # noqa: E731
    kinds = (("raw (before calibration)", None, lambda c, cause: calibrated(c, cause)),
             ("calibrated (FIRST)", "calibrated",
              lambda c, cause: c if cause == "unknown" else recent(through(OBSERVED, c))),
             ("observed (FIRST then OBSERVED: the test of OBSERVED)", "observed",
              lambda c, cause: c if cause == "unknown" else recent(c)),
             ("recent (FIRST, OBSERVED then RECENT: the test of RECENT)", "recent", lambda c, cause: c))
    out = []
    for title, kind, now in kinds:
        rows = [row for record in records if record.get("confidence_kind") == kind for row in record["rows"]]
        if not rows:
            continue
        out += [f"**Calibration, {title} confidences** (the first finding's confidence vs its observed top-1 "
                f"accuracy, {len(rows)} first-scored cases):", "",
                "| confidence | cases | right | observed | mean printed | prints now |", "|---|---|---|---|---|---|"]
        for low, high in BUCKETS:
            inside = [r for r in rows if low <= r["confidence"] < high]
            if inside:
                right = sum(r["top1"] for r in inside)
                printed = sum(r["confidence"] for r in inside) / len(inside)
                mapped = sum(now(r["confidence"], "unknown" if r["unknown_first"] else "") for r in inside) / len(inside)
                out.append(f"| {low:.2f}-{min(high, 1.0):.2f} | {len(inside)} | {right} | "
                           f"{100 * right / len(inside):.0f} % | {printed:.2f} | {mapped:.2f} |")
        out.append("")
    out += ["How confidence is computed (issue 51, clusterctl/diagnose/confidence.py): the raw value (evidence "
            "strength times its share among the ranked answers) goes through FIRST, monotone knots fitted on the "
            "raw cases above (raw < 0.5 at most 0.08, 0.5-0.7 0.08-0.7, 0.7 and up 0.7-0.88), then through "
            "OBSERVED, fitted on 2026-12-01 on the calibrated table's cases that were not `unknown` first "
            "(FIRST was under-confident: 0.07-0.20 right 34 %, 0.35-0.48 76 %, 0.88 98 %), then through RECENT, "
            "fitted on 2026-12-01 on the observed table's cases (batches 31-35) that were not `unknown` first "
            "(OBSERVED was over-confident on these harder batches: 0.19-0.48 right 27 %, 0.88-0.97 93 %). "
            "`unknown` keeps FIRST's value (never right first). Each map was fitted on the cases of the table "
            "before it, so that table "
            "cannot show that it holds; the next table, from batches scored after it was fixed, is its test.", ""]
    return "\n".join(out) + "\n"


def goals(records: list) -> str:
    met = [r["name"] for r in records if r["figures"]["top1_pct"] >= 90 and r["figures"]["top3_pct"] >= 97
           and r["figures"]["unknown_first_pct"] <= 3]
    return f"met on {', '.join(met)}" if met else "not met on any batch"


def headline(records: list) -> str:
    if not records:
        return "No batch scored yet."
    last = records[-3:]
    mean = lambda key: round(sum(r["figures"][key] for r in last) / len(last), 1)  # noqa: E731
    inside = [figures([row for row in r["rows"] if not row["cause"].startswith("other:")]) for r in last]
    pooled = figures([row for r in last for row in r["rows"]])
    return (f"**Headline (mean of the first scores of the last {len(last)} batches: "
            f"{', '.join(r['name'] for r in last)}): top-1 {mean('top1_pct')} %, top-3 {mean('top3_pct')} %, "
            f"unknown first {mean('unknown_first_pct')} %.** Against issue 51's goals (top-1 >= 90 %, top-3 >= "
            f"97 %, unknown first <= 3 % on each batch): {goals(last)}. Pooled over their {pooled['n']} logs "
            f"(a small batch weighing as its size): top-1 {pooled['top1']} ({pooled['top1_pct']} %), top-3 "
            f"{pooled['top3']} ({pooled['top3_pct']} %), unknown first {pooled['unknown_first']}. For reading only "
            "(the headline counts them as misses): on the logs whose label is in the vocabulary, top-1 "
            + ", ".join(f"{f['top1']}/{f['n']}" for f in inside) + ", top-3 "
            + ", ".join(f"{f['top3']}/{f['n']}" for f in inside) + ".")


FIRST_SCORES_INTRO = """Protocol, fixed before the first batch was scored: batches of public failure logs are collected by
separate processes given only the cause vocabulary (never the rules, never this code). A batch is frozen when
its directory holds a FROZEN file (sha256 of each log); no log of a batch is opened before that. Then
`bench/score_batch.py NAME DIR...` scores it once with the branch's code as committed (it checks every log
against FROZEN and refuses a second scoring of NAME), and that score is committed before any change it
prompts. Only then are the misses read, the method improved for the class of message (never for one
thread), and the batch's logs may join the corpus. The headline is the mean of the first scores of the last
three batches. Labels `other:<name>` count as a vocabulary cause only through `OTHER_ALIASES` in
bench/score_batch.py (collective mismatch/desync -> `collective_mismatch`; same hostname/host hash ->
`duplicate_host`; peer-to-peer/ACS/IOMMU -> `p2p_unsupported`; GPU arch/compute capability unsupported, no
kernel image -> `gpu_arch_unsupported`; added after batch 2's first score and before batch 3 froze, for
batch 3 only: the same GPU-arch words in either order, and SIGBUS / full /dev/shm -> `shm_too_small`; added
after batch 3's first score and committed before batches 4-6 were scored or any of their files opened (they froze
at 08:40-08:44 UTC, while this work went on from batches 1-3 alone; nothing of theirs was read), for
batches 4-6 only: ssh / passwordless / publickey / host key -> `ssh_failed`, a driver/library, NVML or kernel
module version mismatch or an unattended upgrade -> `driver_library_mismatch`, an NCCL graph/topology file or a
wrong VM size -> `nccl_topo_file`, RDMA/RoCE/InfiniBand/retransmits/MTU -> `ib_config`, Docker's bridge network
or network isolation -> `nic_mismatch`, Slurm ntasks/srun/task layout or a process-count mismatch ->
`launcher_args`, uneven data across ranks -> `collective_mismatch`, and vocabulary causes named in other words:
SIGHUP / a closed session -> `sighup_session_closed`, memlock / GID index / HCA -> `ib_config`, a timeout too short
or work longer than it -> `nccl_timeout_slow_rank`, a hostname on loopback or the wrong interface ->
`nic_mismatch`, versions differing across nodes -> `version_mismatch`, a port in use -> `port_in_use`, stale
processes -> `duplicate_gpu`); any other `other:` label is a miss. Scoring is as `clusterctl
diagnose` does it: the rules and the evidence families, then the nearest known corpus cases as runner-ups.
From batch 25 the collectors' brief also states the domain: a failing or hung run's own log (ranks, launcher,
NCCL/Gloo, the container runtime, the driver or kernel, the scheduler's step), not cloud-console provisioning
or Kubernetes admission objects with no job log (batch 24 held 11 such pages, all `other:`). From batch 28 one
thread counts once: a log whose source (the address without scheme, `www.`, fragment or query) another
collector's log in the batch already gave, or a corpus entry holds, is left out and named under the batch; from
batch 33 also one an earlier first score counted (its rows record their sources, back to batch 28)."""


CHANGES = """**What changed after which first score** (each a class of message, none a thread's wording; batches 1
and 2 froze 35-45 minutes early, so batch 2 was scored with batch 1's code unchanged):

- Before batch 1 (against the existing corpus only): the typed evidence layer and the families, the four new
  causes, the speed work, `unknown` only over evidence weaker than 0.45.
- After batches 1 and 2 (scored at the same commit): collective-library timeouts in any library's words (HCCL,
  RCCL, gloo) are slow/dead ranks; a store socket that connected and then waited out its timeout is a slow rank,
  not an unreachable rendezvous; NCCL internal errors and topology-search failures point to an old NCCL; NCCL's
  interface lists and old `NET : Using interface lo` lines; port-occupied wordings; rank placement (a GPU index
  claimed by ranks a node apart is two machines with one identity; a system error confined to one host is shared
  memory); one line counts once per cause; `NET/IB : No device found` is context unless IB was expected; a notice
  listing possible causes is not a kernel record. The `other:` aliases for batch 3 (stated above).
- After batch 3: NCCL's IB `local size / remote size` truncation is `version_mismatch`; shape checks across ranks
  are `collective_mismatch`; a recorded small /dev/shm; a traceback cut inside `torch.cuda.set_device`; one
  hostname reporting two addresses on one interface is `duplicate_host`; a system error in a log with no network
  in it is shared memory; a launcher's missing or short host list (DeepSpeed's `Unable to find hostfile`,
  mpirun's `not enough slots`) is `launcher_args`; calibrated confidence (below). The batch logs with a vocabulary label then joined the
  corpus's training side.
- After batch 3, before batches 4-6 were scored or read (from batches 1-3's misses and probes of common messages
  in other programs' words, classes only; the last commits came after 4-6 froze at 08:40-08:44 UTC, none prompted
  by them): three causes the `other:`
  labels asked for, each with its fix, heal class (node) and alias: `ssh_failed` (a launcher's password-less SSH
  session refused: `Permission denied (publickey)`, pdsh's `ssh exited with exit code 255`, DeepSpeed's ssh check),
  `driver_library_mismatch` (`Driver/library version mismatch`, `API mismatch` of the kernel module; was a weak
  `driver_too_old` signal), `nccl_topo_file` (NCCL's XML import failing on a topology/graph file set for another
  machine); a launch's roll-call (`GLOBAL_RANK: r, MEMBER: m/N`) with a rank started twice or fewer ranks than N
  is `launcher_args`; one host's ranks stopping inside NCCL's setup with no error anywhere is the peer-to-peer
  hang (`p2p_unsupported`, `rank_hang` next); an RDMA completion error in another library's words (HCCL's
  `error CQE`, `IBV_WC_*_ERR`) is `ib_config`; probing the vocabulary with common messages in other programs'
  words: a program's `name: ` (nvidia-container-cli, nvidia-smi) is no longer peeled off as a pdsh host, any
  launcher's `X: not found` is `launcher_missing`, CUDA's `busy or unavailable` is `duplicate_gpu`, torch's lazy-init
  `device < num_gpus` assert is `gpu_ordinal`, XLA's `RESOURCE_EXHAUSTED: Out of memory` `cuda_oom`, python-fire's
  `Could not consume arg` `launcher_args`, CUDA's 803 (display/CUDA driver mismatch) `driver_library_mismatch` with
  `driver_too_old` next; rules_words.py holds such other programs' words for known causes (Open MPI's refused
  TCP connection: `nccl_socket_error`; DeepSpeed's batch arithmetic over the world size: `config_divisibility`;
  DDP's cross-rank model check: `collective_mismatch`; vLLM/Ray placement short of GPUs:
  `insufficient_resources`; NCCL's `Failed to CUDA calloc`: `cuda_oom`). The batch-1-3 logs whose `other:` labels now map joined the
  training side (with three public logs for the new causes). `unknown` first was examined: on batches 1-3 it
  comes only where no family has any evidence (a Ray Tune summary table, a traceback cut before its error, an
  Ascend device's stream timeout); the nearest known case would have been right for 2 of those 18, so `unknown`
  stays first there.

- After batches 4-6 (scored once at e31aa17; their misses then read, classes only): where no cause has any
  evidence, the nearest known case's cause leads at its low confidence and `unknown` follows with the quoted lines
  (the nearest case was right for 8 of 34 such logs over batches 1-6, `unknown` never; an exception that nothing
  explains still leads as `unknown` over weak or consequential evidence); HCCL's consistency checks in its own
  words (CANN versions inconsistent: `version_mismatch`; collective arguments inconsistent / ParameterConflict:
  `collective_mismatch`; IFNAME not found: `nic_mismatch`; a device's own port taken: `duplicate_gpu`); a
  library refusing to run without P2P (`doesn't support ... P2P`): `p2p_unsupported`; a store connect whose stated
  reason is an unresolvable name or an invalid address: `hostname_unresolvable`, not `rdzv_unreachable`; NCCL on a
  link-local address (fe80::%iface, 169.254/16): `nic_mismatch`; pdsh running a Python path a node lacks:
  `launcher_missing`; a checkpoint for another model-parallel size than the world: `config_divisibility`;
  NCCL's NVLS multicast bind failing is `fabricmanager`, never a port (`failed to bind` memory is no errno 98);
  NCCL rings built differently across ranks: `version_mismatch`; NCCL's sysfs topology detection failing on a
  PCI path: `nccl_too_old`. One new cause, from batch 6's two `other:nccl_libfabric_incompat` logs and a third
  public one: `net_plugin_incompatible` (NCCL's network plugin and its libfabric/EFA not fitting the NCCL in use:
  `NET/OFI Unable to register memory ... Invalid argument`; out of memory instead is the memlock limit,
  `ib_config`), heal class job, alias libfabric / EFA / OFI / net plugin (for later batches). Batches 4-6's logs
  with a vocabulary label then joined the corpus's training side
  (with batches 1-3's whose `other:` labels the aliases now map, and three causes reaching three entries).
  A test-split entry (NVIDIA/nccl#975, labelled `nccl_socket_error`, a connect to an IPoIB link-local address)
  now names `nic_mismatch` first, `nccl_socket_error` second: the link-local class was written from batches 4-6,
  and it is left as it is rather than tuned to a test entry.

- After batch 7 (frozen 12:12 UTC on 2026-11-29 by a blind collector, scored once at 6bdfeb6; batch 8 was frozen
  at 12:15 and not opened until its own score, made after these changes at 5eeeb3d): logs pasted through a web page
  read as the program printed them (curly quotes and apostrophes, full-width CJK punctuation, no-break spaces:
  `doesn’t have NCCL built in` had matched nothing); a size that "must be a whole number" is
  `config_divisibility`; a world size compared with another world size (an engine built for N ranks, started on M)
  is `launcher_args`; bf16/fp8 that the GPU's architecture lacks is `gpu_arch_unsupported` (alias bf16/fp8
  unsupported, for later batches); NCCL's XML reader missing an attribute (`graph/xml.h ... Attribute X of node Y
  not found`) is `nccl_topo_file`; NCCL's net plugin failing to load against the libraries beside it (`version ...
  not found`, `undefined symbol`) is `net_plugin_incompatible`; gloo's full mesh not connecting is `nic_mismatch`.
- After batch 8 (scored once at 5eeeb3d): the net plugin's `dlerror=` form of the same load failure; a framework
  that cannot load the collective library itself (`Unable to load NCCL library`) is `import_error`; a framework
  refusing to start without its launcher (`without using 'mpirun'`) is `launcher_args`; Lightning's `You requested
  GPUs: [...] But your machine only has: [...]` is `gpu_ordinal`. Batches 7 and 8's logs with a vocabulary label
  joined the corpus's training side (not their two `nccl_topo_file` logs: a cause enters the corpus with three).
  Sources, stated plainly: batch 7 has 17 of 42 cases from outside GitHub trackers (forums, Q&A, CSDN, vendor
  knowledge bases), batch 8 only 3 of 42 (its collector found few forum pages with both a log and an established
  cause in the stored pages), so over batches 6-8 the share is under the third issue 51 asks for; batch 8 also
  holds 11 one- or two-line logs and about half `confirmed: likely`.
- Before batch 9 was frozen or read (met on the rehearsal, not in a batch): a new cause, `extension_build_failed`
  (a C++/CUDA extension compiled on first use failing: `Error building extension 'fused_adam'`, `ninja: build
  stopped`; DeepSpeed's CPU shm op where `c++` did not resolve), with three public corpus logs and an alias.
- After batch 9 (frozen 12:29 UTC, 50 logs, 18 from outside GitHub trackers: NVIDIA's docs, ALCF, OLCF, LUMI, CSC,
  NCAR and other HPC centres' pages, a vendor forum; scored once at 19ed915, then read): torch's older `Invalid
  device id` is `gpu_ordinal`; a cloud's quota or capacity refusing the nodes (`Quota 'C2_CPUS' exceeded`,
  `InsufficientInstanceCapacity`) is `insufficient_resources`; ROCm's `hipErrorNoBinaryForGpu` is
  `gpu_arch_unsupported`. 10 of its 50 labels are `other:` names outside the vocabulary (an XLA compilation bug,
  a launcher broken by TMPDIR, enroot too old for an OCI manifest, ...): misses in the headline.
  Re-scored after these changes (NOT first scores; batches 7-9's logs with a vocabulary label are in the corpus's
  training side now): batch 7 37/42 top-1 (88.1 %), 39/42 top-3; batch 8 27/42 (64.3 %), 31/42; batch 9 33/50
  (66.0 %), 37/50; unknown first 1, 5 and 4.
- After batches 10 and 11 (frozen 15:21 / 15:15 UTC, 42 and 43 logs, scored once at 359dd88; 7 of 42 and 23 of 43
  from outside GitHub issue and pull-request threads: HPC centres', vendors' and projects' docs and wikis,
  knowledge bases, forums, blogs; then read, classes only): an SSH client library's refused login or unusable key (paramiko's `No authentication methods available`,
  `not a valid RSA private key file`: `ssh_failed`); a coordinator out of reach in JAX's and Ray's words (XLA's
  `CoordinationService/RegisterTask` past its deadline, Ray's `Could not establish connection to redis`:
  `rdzv_unreachable`); Slurm's tasks per node against the framework's devices, srun unable to launch the step, a
  launcher handed an empty master address (`launcher_args`); the launch chain's helpers (kubectl, orted, mpicxx)
  not found in dash's `script: N: prog: not found` form or a build's `is mpicxx in $PATH?` (`launcher_missing`);
  NCCL 1.x in use or a data type the linked NCCL does not know (`nccl_too_old`); NCCL_NET naming a network no
  loaded plugin provides (`network X not found`: `net_plugin_incompatible`); a JIT-built op missing from
  torch_extensions (`extension_build_failed`); DeepSpeed's per-GPU micro batch of 0 (`config_divisibility`);
  NCCL's connect failing with `Network is unreachable` and UCX's unreachable worker address (`nic_mismatch`); a
  device the previous training process still holds, in the runtime's own hint (`duplicate_gpu`). These classes leave
  the rules' findings on the 730 earlier corpus entries exactly as they were (top three compared entry by entry). Batches 10
  and 11's logs with a vocabulary label joined the corpus's training side (75 logs; not awsome-distributed#203,
  whose thread was in the corpus already), and `nccl_topo_file` entered it with batches 7-10's four logs.
  One new cause, from 7 `other:` labels over batches 9-11 (sources: a GitCode blog, CSCS's, CoreWeave's and
  Determined's docs, pyxis's wiki): `container_start_failed` (an HPC container runtime or its hooks unable to create
  the container: enroot/pyxis hooks, the NVIDIA hook on a missing /dev/nvidia* node, a requeued job's leftover
  container directory, an unprivileged Apptainer's mount, runc's `error running hook`), its fix, heal class node,
  five public corpus logs and an alias for later batches; weak on the runtime's generic line, so a more specific
  cause before it leads (on the 730 earlier entries it is only ever a runner-up, on 8).
  Then two classes of a setting NCCL names at init: RCCL's `Missing "iommu=pt"` is `p2p_unsupported`; an NCCL
  system or internal error while NCCL_TOPO_FILE/NCCL_GRAPH_FILE is set by the environment makes the file the lead
  suspect (`nccl_topo_file`); a segfault in a log where NCCL reported a failure of its own (a `NCCL WARN ...
  failed`/`Cuda failure` line) is what followed that failure, weighed as a consequence (NVLS setup failing, then
  a crash in ncclGroupEnd: `fabricmanager`). Re-scored after these changes (NOT first scores; each log's own thread left out of
  the nearest cases): batch 10 35/42 top-1 (83.3 %), 37/42 top-3 (88.1 %), unknown first 2; batch 11 36/43
  (83.7 %), 36/43 (83.7 %), unknown first 1, of which 4 count only through the new cause's alias (without it
  32/43). The earlier batches re-scored against main's code before these changes: batches 1, 2 and 4-7 the same top-1 (29, 29, 37, 33, 34, 37),
  batch 8 27/42 top-1 and one top-3 fewer (30/42: LlamaFactory#5587's nearest case changed), batch 9 34/50 (one
  more, through the alias). What remains: 5 of the 85 labels
  are `other:` names no alias maps (Open MPI too old for host:slots, a node's paths or environment missing for
  non-interactive logins (2), a node's user database out of sync, GPUs not passed into an Apptainer container);
  logs whose lines do not carry the established cause (a Ray trainer that waits for GPUs with no message, a
  PaddleCloud pod list, a Huawei run whose ranks drift an epoch apart, a Megatron JIT build interrupted with ^C, a
  MindSpore device id out of range because two hosts share a HOSTNAME, vLLM's bare `unhandled system error` for a
  missing IPC_LOCK); near causes read as the log says (EADDRINUSE from a nested torchrun, an exit -9 without an OOM
  record, an IB hang read as peer-to-peer).
- After batch 12 (frozen 15:54 UTC, 29 logs: the collector stopped short of 40; scored once at 801b02a, top-1
  37.9 %; its misses then read, classes only, each tested with another thread's excerpt where one exists): an HPC
  container runtime refused its namespaces (Apptainer's `Failed to create user/mount namespace`, `Could not write
  info to setgroups`, enroot-nsenter's words: Ubuntu 23.10+'s AppArmor restriction), enroot's own helpers failing
  (`enroot-switchroot: failed to execute`), the NVIDIA hook failing a step inside the new container
  (`nvidia-container-cli: container error` / `permission error`: the GPU runtime is there and ran) are
  `container_start_failed`, and program names such as `enroot-switchroot:` are no longer read as pdsh hosts;
  MPICH's `gethostbyname failed` (`hostname_unresolvable`); a host list's `host:slots` handed to ssh (`Could not
  resolve hostname localhost:4`: `launcher_args`); a verbs device with no userspace provider (`libibverbs: Warning:
  no userspace device-specific driver found`: `ib_config`); nvcc refusing an arch while an op builds
  (`extension_build_failed`, not the GPU); a network error at NCCL's setup while the launch pins
  NCCL_SOCKET_IFNAME, and Open MPI's failed TCP connection as the runner-up to its firewall hint (`nic_mismatch`);
  NCCL's fixed description of its system error (`System call (socket, malloc, munmap, etc) failed`) is no longer
  socket or network evidence. These leave the rules' top three on all 813 earlier corpus entries as they were.
  Batch 12's 26 logs with a vocabulary label joined the corpus's training side (not aws-ofi-nccl#663, whose alias
  cause's fix is not its thread's). Re-scored after these changes (NOT a first score; each log's own thread left
  out of the nearest cases): batch 12 22/29 top-1 (75.9 %), 25/29 top-3 (86.2 %), unknown first 0. Batches 1-11
  re-scored: the same top-1 each; top-3 one fewer in batch 1 and one more in batch 6 (nearest cases from the new
  corpus logs). What remains: two `other:` labels (torch 1.7's bundled NCCL bug, a companion process that
  crashed); bare `unhandled system error` logs whose thread names a cause the lines do not carry (NCCL too old,
  an interface NCCL picked); an exit -9 without an OOM record; a peer-to-peer hang read as an interface problem.
- Batches 10-12's misses read again, grouped by (label, named first), classes only (batch 13 was being collected
  blind meanwhile and was not opened): a launcher that runs another launcher (`torchrun ... -m llamafactory.cli`,
  which starts torchrun again: every worker binds MASTER_PORT) is `launcher_args`, its EADDRINUSE a runner-up
  `port_in_use`; a one-host stall inside NCCL's setup is the peer-to-peer hang above the interfaces NCCL lists
  (they carry nothing between one host's GPUs), unless NCCL uses or expects InfiniBand there; a bare NCCL system
  error names `nic_mismatch` among its three and, where it reports an NCCL older than 2.8, `nccl_too_old` above
  it (runner-ups: the three transports keep the lead); a launcher telling it was sent SIGTERM/SIGINT (`Received
  15 death signal`) leads as `unknown` with the sender as the next step, not a resembling case's cause; the fixes
  of `other:` labels the vocabulary reads as a near cause now say what the log shows (host:slots handed to ssh:
  an Open MPI too old for it; the launching host's path missing on a node; a remote daemon's libraries missing in
  a non-interactive login). Not changed: an exit -9 with no OOM record stays `killed_by_signal` first,
  `oom_killed` second. Leading with `oom_killed` would match 8 more first-scored labels over batches 1-12 and
  lose 1 (the blind collectors label 9 of 10 such logs `oom_killed` from their threads), but the corpus labels
  such logs `killed_by_signal` by its own rule (no record, no OOM), and its held-out split would lose 2 top-1
  (3 such entries lost, 1 gained): a labelling question for the lead, not a rule to tune. Re-scored after these
  changes (NOT first scores; each log's own thread left out of the nearest cases): batch 10 36/42 top-1
  (85.7 %), 38/42 top-3, unknown first 2; batch 11 36/43, 36/43, 1 (unchanged); batch 12 23/29 (79.3 %), 27/29
  (93.1 %), 1 (the SIGTERM log, an `other:` label); batches 1-9 the same top-1 and top-3 each. The held-out split:
  114/119 top-1 as before, top-3 117/119 (one more: NVIDIA/nccl#286 gains `nic_mismatch` third, a side effect
  seen after the change, not tuned for). What remains in batches 10-12: logs whose lines do not carry the cause
  (a Ray trainer waiting for GPUs, a PaddleCloud pod list, ranks an epoch apart, a ^C'd JIT build, a MindSpore
  device id out of range because two hosts share a HOSTNAME, vLLM's bare system error for a missing IPC_LOCK), the
  exit -9 question above, an IB hang on one host read as peer-to-peer (`ib_config` third), Open MPI's TCP failure
  whose thread found an interface (`nic_mismatch` second), and 7 `other:` labels.
- After batch 13 (frozen 18:35 UTC, 27 logs, 17 from outside GitHub trackers: Horovod's, MMCV's, verl's, DeepSpeed's,
  PyTorch's docs and FAQs, the ML Engineering book; collected blind while the batch 10-12 changes above were made;
  scored once at d0f3e3b: top-1 11/27, 40.7 %; then read, classes only): torch's monitored_barrier naming the
  ranks that never came (`Rank 1 failed to pass monitoredBarrier`: `rank_hang`); a framework's compiled ops built
  without their CUDA part (`nms is not compiled with GPU support`) or a fused CUDA extension that is not there
  (`extension_build_failed`; torch's own `Torch not compiled with CUDA enabled` is not this class); NCCL's topology
  discovery overflowing its XML (`too many XML nodes`: `nccl_topo_file`). Re-scored (NOT a first score): batch 13
  15/27 top-1 (55.6 %), 17/27 top-3; batches 1-12 and the held-out split (95.8 %) unchanged. Left: 5 `other:`
  labels (an hwloc version clash, Slurm's GRES syntax, a Ray worker's CPU limit, DDP's unused parameters, the XML
  limit counted through its alias), pip finding no wheel for the platform, a bare NCCL internal error whose thread
  found a malformed topology file, an IB-less `p2p_unsupported` read as a slow rank.
- After batch 14 (frozen, 18 logs, all from GitHub trackers; scored once at a607227: top-1 10/18, 55.6 %; then
  read, classes only, each tested with another thread's excerpt or a property over the class's forms in
  tests/unit/test_diagnose_batch14.py, never with the batch's log): a build's own failure line where the log keeps
  only it and the compiler's command (ninja's `FAILED: <object>`, `FAILED: [code=1] ...`, setuptools' `error:
  command '.../nvcc' failed with exit status N`: `extension_build_failed`); a SIGKILL in a log that shows the host
  short of memory without a record of the kill (`fatal : Memory allocation failure`, bad_alloc, ENOMEM, MemoryError,
  numpy's array allocation) is the OOM killer first, `killed_by_signal` next (a bare SIGKILL stays
  `killed_by_signal` first); an MPI launcher's remote daemon missing at the launching host's path (`bash:
  /usr/local/bin/orted: No such file or directory`, prted, hydra_pmi_proxy: `launcher_missing` above ORTE's generic
  `unable to reliably start` notice); no local interface on the peer's subnet (NCCL's `No interface found in the
  same subnet`), a bind to an address none of the node's interfaces has (EADDRNOTAVAIL on a bind, not a client's
  connect), ranks of different address families (gloo's `ss1.ss_family == ss2.ss_family. 2 vs 10`): `nic_mismatch`;
  a log ending on NCCL unwinding an error (`init.cc:970 -> 2`) is a failure, not the silent one-host stall read as
  peer-to-peer; a distributed run on a Windows host where the Windows paths and the DDP/NCCL setup are on different
  lines (`platform_backend_unsupported`); NCCL's NVLS multicast failing names the fabric manager first and the
  NVLink/NVSwitch hardware (`gpu_xid`) next (the same lines come from a fabric manager that is not running and from
  NVLink in a bad state: the lines cannot tell them apart). Batch 13's rest: the memory Xids (48 double-bit, 63/64
  row remapping and page retirement, 92) and nvidia-smi's `Pending : Yes` under Remapped Rows are `ecc_error` with
  `gpu_xid` next; a reduction op the loaded NCCL does not know (`invalid reduction operation 4`: ncclAvg needs 2.10)
  is `nccl_too_old`; torch's desync report naming a rank one collective behind (`finished collective #N, but didn't
  join collective #N+1`) is `collective_mismatch` above the watchdog's timeout; pip finding no distribution for the
  platform is `import_error`; NCCL connecting to a Docker bridge's gateway (172.17-31.0.1) is `nic_mismatch` as
  loopback and link-local already were; a verbose ssh trace whose client has no key to offer and never logs in is
  `ssh_failed` (weak). Also fixed: the rules' literal pre-filter looped forever on a character class ending in an
  escaped backslash (`[/\\]`). Re-scored (NOT first scores; each log's own thread left out of the nearest cases):
  batch 14 16/18 top-1 (88.9 %), 17/18 top-3, unknown first 0; batch 13 21/27 top-1 (77.8 %), 21/27 top-3, unknown
  first 1; batches 1-12 the same top-1 and top-3 each; the held-out split 114/119 (95.8 %) top-1, 117/119 top-3 as
  before, its training side one more top-1 and top-3 (a Windows log of the platform class). Left in batch 14: its
  `other:` label (Slurm's GRES option refused by the select plugin) and the NVLS log above (`gpu_xid` second); in
  batch 13: 5 `other:` labels, a bare watchdog timeout whose page blames ACS (`p2p_unsupported`), a bare NCCL
  internal error whose thread found a malformed topology file.
- After batch 15 (frozen 21:39/21:41 UTC, 44 logs from two blind collectors: 42 from GitHub trackers, 2 from elsewhere
  (a CSDN post, Huawei's Ascend FAQ); by the collectors' count 26 from projects new to the corpus (enroot, pyxis,
  nvidia-docker, PaddlePaddle, LLaVA, ...); the non-GitHub third not met: the stored pages held few forum threads with
  both a log and an established cause; scored once
  at e714ecb: top-1 34/44, 77.3 %; then read, classes only): the kernel's older `NVRM: API mismatch: the client has
  the version X, but ... this kernel module has the version Y` and its newer `the client 'name' (pid N)` wording
  (`driver_library_mismatch`, was `docker_no_gpu_runtime`); UCX's shared-memory transport failing to allocate
  (`mm_iface failed to allocate receive FIFO`, `failed to allocate N bytes with mm for ...`) leads the SIGSEGV it
  causes (`shm_too_small`); pyxis unable to run enroot at all (`pyxis: couldn't execute enroot command`:
  `container_start_failed` over the permission line enroot printed; a disk or quota line there still leads);
  `Duplicate GPU detected` names more ranks than GPUs (`gpu_ordinal`) second. Re-scored (NOT a first score):
  batch 15 37/44 top-1 (84.1 %), 39/44 top-3; batches 1-14 unchanged. Left: 3 `other:` labels (Horovod refusing IPs
  in -H, ZeRO-3 with a device_map, an NCCL built for another CUDA), two `disk_full` logs whose lines carry no disk
  (an NCCL timeout, enroot's bare `write_file` failure), the enroot NVIDIA hook whose library in the image is short
  (read as the GPU runtime), a duplicate GPU from too many ranks (second). Two collectors labelled one class (pyxis
  unable to make enroot's directories) differently (batch 11 `permission_denied`, batch 15
  `container_start_failed`): left as it was rather than trade one batch's case for the other's.
- After batch 16 (frozen 21:52/21:53 UTC, 18 logs from two blind collectors who ran out of context early, all from
  GitHub trackers, 16 of them from projects new to the corpus; scored once at b56a549, after the batch 14 changes:
  top-1 12/18, 66.7 %, unknown first 4/18; then read, classes only): the job's own divisibility assertion as the
  traceback quotes its source line (`assert args.batch_size % len(devices) == 0`, `assert 8 % world_size == 0`),
  verl's `only support equal chunk`, a parallel layout reshaped from the world size that does not fit (`cannot
  reshape array of size 8 into shape (4,newaxis,1,8)`) are `config_divisibility` (were `unknown`); a library a
  framework loads by name missing on the node (Paddle's `libnccl.so: cannot open shared object file`) is
  `import_error`, not NCCL's optional plugins' INFO lines. Re-scored (NOT a first score): batch 16 16/18 top-1;
  batch 5 one more (a side effect, not tuned for), every other batch and the held-out split unchanged. Left: 2
  `other:` labels (GPUs of different models in one job, MIG enabled without instances).
- After batch 17 (frozen 22:09/22:10 UTC, 35 logs from two blind collectors, 34 from GitHub trackers, 28 from
  projects new to the corpus; scored once at a2ef56f: top-1 19/35, 54.3 %; then read, classes only): a new cause,
  `slurm_request_invalid` (4 `other:` labels over batches 14 and 17: Slurm refusing the request's GRES form,
  `Invalid generic resource (gres) specification`, `Requested GRES option unsupported by configured SelectType
  plugin`, an untyped GRES where types are required, an unknown feature or partition; heal class `job`; clusterctl's
  own salloc refusal now prints its fix, and the rehearsal's slurmctld refuses a typed GRES it does not define);
  verbs/UCX out of locked memory (`ibv_create_cq(...) failed: Cannot allocate memory`, `Please set max locked memory
  (ulimit -l)`: `ib_config`, was `oom_killed`); Ray's vanished-worker notice now leads with the OOM killer it lists
  first (both such logs), a kill by another sender second; MPICH Hydra's `unable to get host address for`
  (`hostname_unresolvable` over the ssh line beside it); a CUDA extension's module missing at import (`No module
  named 'fused_layer_norm_cuda'`, `amp_C`) and a JIT build that never loaded (`extension_build_failed`); CDI devices
  no spec provides (`container_start_failed`); k8s-device-plugin's `could not load NVML library`
  (`docker_no_gpu_runtime`). Re-scored (NOT a first score): batch 17 30/35 top-1; batches 13 and 14 one more each
  (their Slurm `other:` labels now count through the new alias); batch 9 one fewer: LUMI's step asking more GPUs
  than a node has (`Invalid generic resource (gres) specification`, labelled `insufficient_resources`) now names
  `slurm_request_invalid` first, `insufficient_resources` second; the held-out split unchanged.
- After batch 18 (frozen 22:21/22:23 UTC, 46 logs from two blind collectors, all from GitHub trackers, ~37 from
  projects new to the corpus; scored once at 6a5730d: top-1 34/46, 73.9 %; two of its threads,
  NVIDIA/exemplar-performance#5 and NVIDIA/NeMo-Framework-Launcher#72, had been read by the lead while writing
  `slurm_request_invalid`'s signals before the batch was collected (both named right): without them 32/44,
  72.7 %; then read, classes only): accelerate's own port check (`port_in_use`); Open MPI's TCP transport matching
  a peer to none of its interfaces (`nic_mismatch`); torch looking up an NVML function the driver lacks
  (`driver_too_old`); torch's cpp_extension loading a module its build did not leave and a JIT build cut off in its
  compiler line (`extension_build_failed`); a site's `Invalid GPU specification` (`slurm_request_invalid`);
  CaffeOnSpark's `No peer by name` (`hostname_unresolvable`). Re-scored (NOT a first score): batch 18 41/46;
  every other batch and the held-out split unchanged. Left: 2 `other:` labels, a thread whose cause (OOM) shows only
  as an EFA queue-pair error, Lightning's GPU check quoted only in a title, a quoted `--dist-url` shown only in a
  title.
- After batch 19 (frozen 22:31/22:32 UTC, 46 logs from two blind collectors, 45 from GitHub trackers, most from HPC and
  scientific codes new to the corpus (Kokkos, AMReX, LAMMPS, Charm++, nerfstudio, ...); one collector saw other
  batches' label counts through a grep, no log; scored once at 75e1188: top-1 24/46, 52.2 %; then read, classes
  only): the literal pre-filter took a `{m,n}` quantifier's digits for text a line must hold, so four signals had
  never fired (a bind's `Cannot assign requested address`, ACS/IOMMU beside P2P, a number format a GPU lacks, a
  topology file not found: a class bug, now a property test over every signal); Kokkos' arch mismatch
  (`gpu_arch_unsupported`); Open MPI's CUDA IPC failing (`p2p_unsupported`); CUDA's error 46 by number
  (`duplicate_gpu`); a scheduler's node failure is `node_unreachable` (was a Slurm cancel reason of
  `killed_by_signal`); detectron2-style launch refusing `dist_url=auto` across machines and several GPUs in one
  device string (`launcher_args`); srun's contradictory options and a site filter refusing a job's shape
  (`slurm_request_invalid`). Re-scored (NOT a first score): batch 19 33/46; every other batch and the held-out
  split unchanged. Left: 6 `other:` labels (checkpoint races on a shared file system, a Slurm prolog, mpirun of
  another MPI, a faulty node, a privileged port, mpirun's host:slots), logs whose lines do not carry the cause (a
  hang with no line, a world size argument the script contradicts, an IB-less cross-node run's bare system error).
- After batch 20 (frozen 23:34 UTC, 16 logs from two blind collectors, 14 from GitHub trackers, two from blogs, most
  from Kubeflow's MPI operator, pyxis/enroot and AWS ParallelCluster; scored once at 2147f04: top-1 5/16, 31.2 %;
  then read, classes only): the TPU compiler's HBM overflow and TensorFlow's `OOM when allocating
  tensor` (`cuda_oom`: the accelerator's memory, whatever its kind); the driver's library missing, Triton's
  `libcuda.so cannot found!` and the loader's `libcuda.so.1: cannot open` (`docker_no_gpu_runtime`, was
  `import_error` or unknown); Open MPI losing a daemon that had started (`ORTE has lost communication with a remote
  daemon`: `node_unreachable`; `ssh_failed` still leads where ssh's own words show); enroot's mount refused
  (`Permission denied`: `permission_denied` leads pyxis' generic start failure); pyxis' own runtime directory
  (`couldn't mkdir /run/pyxis/...`: `container_start_failed`). Re-scored (NOT a first score): batch 20 10/16;
  every other batch and the held-out split unchanged. Left: 4 `other:` labels (Kubernetes' API server or kubelet
  exec unreachable from the launcher, pyxis' runtime path on a shared file system, srun resolving the command on
  the host), a NIC mismatch shown only as a connect to an address on another subnet, a taken port whose error line
  the thread cut.
- After batch 21 (frozen 01:14 UTC, 24 logs from two blind collectors who stopped at 12 each for want of fresh pages,
  18 from GitHub trackers, 6 from blogs, a forum and vendor KBs; scored once at 0fa2e2b: top-1 15/24, 62.5 %; then
  read, classes only): a site's submit filter retiring an option form (`sbatch: error: Parameter --gres=gpu:1 no
  longer acceptable, please switch to --gpus=1`: `slurm_request_invalid`). Re-scored (NOT a first score): batch 21
  16/24; every other batch and the held-out split unchanged. Left: 2 `other:` labels for a service mesh's sidecar
  in the rendezvous' way, one for checkpoints saved on each node of a shared file system; two exit-137/-9 lines
  with no OOM record (`killed_by_signal` leads, `oom_killed` second, by design: a SIGKILL is also an operator's or
  a scheduler's); Slurm's `Requested node configuration is not available` (two earlier batches label it
  `insufficient_resources`, this one `slurm_request_invalid`: left as it is); logs whose lines do not carry the
  cause (NCCL connects refused for a wrong world size, a store's broken pipe for a P2P hang).
- After batch 22 (frozen 04:49 UTC, 21 logs from one blind collector, all GitHub pages; a second collector found one
  fresh page in an hour and did not freeze: the stored pages searched by error text are nearly used up; scored once
  at 0394028: top-1 17/21, 81.0 %; then read, classes only): Open MPI's TCP transport answered by the wrong process
  (`received unexpected process identifier`: hosts sharing docker0's address) and connecting to a Docker bridge's
  gateway (`connect() to 172.17.0.1 failed`), NCCL's bootstrap failing in its socket calls with nothing but
  NCCL_DEBUG=INFO's return-code trace (`bootstrap.cc:270 -> 2` after `socket.cc:... -> 2`): `nic_mismatch`.
  Re-scored (NOT a first score): batch 22 19/21; the held-out split unchanged; earlier batches' logs were not on this
  machine to re-score. Left: 2 `other:` labels (a DeepSpeed release's regression, a gloo start that hangs).
- After batch 23 (frozen 07:45 UTC, 13 logs from two blind collectors, each given half the GitHub projects by
  name; all GitHub pages again, neither found a fresh non-GitHub page; scored once at 3a139d8: top-1 10/13, 76.9 %;
  then read, classes only): a trainer's own count of the GPUs it sees against those it asks for (`Total available
  GPUs 16.0 is less than total desired GPUs 32`: the job attached to a one-node Ray, not the running cluster):
  `insufficient_resources`, where the log led with `unknown`. Re-scored (NOT a first score): batch 23 10/13 (its
  `unknown` first gone: the log's label is an `other:` and stays a miss), batch 22 19/21, the held-out split 95.8 %
  unchanged. Left: 2 `other:` labels for Ray (a job not attached to its cluster, a worker started before its head,
  whose old-Ray traceback names neither), and a torchrun summary with no line of its cause (`exitcode: 1`,
  labelled `cuda_oom` from the thread: the nearest case leads there at 0.23, `unknown` second).
- After batch 24 (frozen 10:43 and 10:59 UTC, 60 logs from two blind collectors: 30 from vendor docs, HPC docs and
  blogs (27 vendor pages: AWS ParallelCluster, Kubernetes, Slurm, Open MPI, HPC-X, NVIDIA's GPU operator; 3 blog
  posts), 30 GitHub threads of projects outside the corpus; a third collector, given forums and Q&A sites, found no
  stored page there that shows a log and establishes its cause; scored once at 79ab914: top-1 29/60, 48.3 %;
  18 labels are `other:` names outside the vocabulary (cluster provisioning, Kubernetes quotas, UCX transport
  bugs), in-vocabulary 29/42; then read, classes only): Slurm's controller losing a node (`Nodes gpu[003-004] not
  responding`): `node_unreachable`; the clouds' words for no capacity (`do not have sufficient p5.48xlarge
  capacity`, GCP's `does not have enough resources available to fulfill the request`): `insufficient_resources`;
  Python's `KeyError: 'RANK'` (and the other variables torchrun sets): the script started without its launcher,
  `launcher_args`; coreutils refusing a directory (`mkdir: cannot create directory '...': Permission denied`, under
  pyxis/enroot too): `permission_denied` ahead of the container's generic failure. Re-scored (NOT a first score):
  batch 24 34/60 top-1 (in-vocabulary 34/42), top-3 37/60, unknown first 6/60; batch 23 10/13 unchanged; the
  held-out split 95.8 % unchanged. Left: two-line logs (an OFI plugin's topology file, an undefined ibverbs
  symbol), a rank hung compiling fused kernels under a stale lock (the log shows only the watchdog), a Docker
  bridge network behind NCCL's `unhandled system error` with no address in the log, the flight recorder's
  `missing ranks` read as a mismatch where the tutorial's rank hung.
- After batch 25 (frozen 13:17-13:43 UTC, 45 logs from five blind collectors told to keep to failing runs, not cloud
  provisioning: 15 + 8 + 2 GitHub threads, 19 from HPC centres' and vendors' pages and a blog, 1 more; the forum and
  multilingual collectors found no stored forum, Q&A or blog page with a log and an established cause, and the
  GitHub ones found most matching threads already used; 11 logs off GitHub; scored once at 236bf3e: top-1 22/45,
  48.9 %, top-3 57.8 %, unknown first 4.4 %; 10 labels `other:` outside the vocabulary (vGPU layers, an NCCL
  RAS race, NVLS multicast slots, Slurm variables clashing with a trainer's, a module environment); then read,
  classes only): Slurm's `Requested node configuration is not available` and `Job violates accounting/QOS policy`
  are refusals of the request (Slurm's FAQ; batches 21 and 25 label them so), `slurm_request_invalid`, and three
  corpus entries labelled `insufficient_resources` at batches 5 and 9, before that class existed, are relabelled
  (their fixes change the request); an image without an SSH server (`/usr/sbin/sshd: No such file or directory`):
  `ssh_failed`; NCCL's `ncclMaxSharedMem N exceeds device/fn maxSharedMem M` (a GPU newer than the build):
  `nccl_too_old`; libnvidia-container's errors inside enroot's NVIDIA hook under pyxis: `container_start_failed`
  (under Docker they stay `docker_no_gpu_runtime`); the native signal handler's `!!!!!!! Segfault encountered
  !!!!!!!`: `segfault`; and, found re-scoring batch 23 (whose Ray Tune log had led only by its resemblance to a
  relabelled entry), Tune's `You asked for 5.0 cpu and 2.0 gpu per trial, but the cluster only has ...`:
  `insufficient_resources`. Re-scored (NOT a first score): batch 25 29/45 top-1 (in-vocabulary 29/35), top-3
  32/45, unknown first 2/45; batches 22-24 unchanged (19/21, 10/13, 34/60); the held-out split 95.8 % unchanged.
  Left: two logs cut before their error (a Ray task's RuntimeError, a gloo new_group's frames), NCCL's `No route to
  host` labelled a wrong interface by the site (the vocabulary's `nccl_socket_error` reads it first), a hang after
  NCCL's init on PCIe GPUs (ACS/IOMMU) with nothing but INFO lines, a Ray worker advertising an address on another
  subnet.
- After batch 26 (frozen 22:51-23:04 UTC, 37 logs from five blind collectors: forums, Q&A and HPC pages, training
  frameworks' trackers, schedulers and containers, Hugging Face/DeepSpeed/vLLM; the forum and Q&A collectors found
  no stored forum or Q&A thread pairing a log with an established cause, so 31 logs are GitHub threads and 6 are
  HPC centres' pages and a blog; scored once at 99700fc: top-1 24/37, 64.9 %, top-3 67.6 %, unknown first 8.1 %;
  in-vocabulary 24/32; then read, classes only): a library's own check of the GPU's generation (`only supports
  Ampere GPUs or newer`, `requires compute capability 8.0 or higher`): `gpu_arch_unsupported`; NVSHMEM's `Fatal IPC
  Failure` / `IPC failure: Sending data over socket failed` (it takes PEs under one hostname for one node and swaps
  memory handles over local sockets): `duplicate_host`, weakly. Re-scored (NOT a first score): batch 26 26/37
  top-1, 27/37 top-3, unknown first 2/37; batches 22-25 unchanged (19/21, 10/13, 34/60, 29/45). Left: two RTX 5090
  logs with NCCL 2.25.1 that two collectors labelled differently (`nccl_too_old`, batch 25; `gpu_arch_unsupported`,
  batch 26: the tool answers the first), a nccl-tests stall on M40s fixed by turning ACS off with nothing but its
  table in the log, a one-line `Async operation timed out` whose cause (uneven last batches) the log cannot show, a
  first-collective watchdog timeout whose cause (a GDR level with the OFI plugin) is not in the log.
- Batch 27 (frozen 23:15-23:19 UTC: four more blind collectors, stopped early when the session's search budget ran
  out; 20 logs, 11 off GitHub trackers: Huawei Ascend/MindSpore docs in Chinese, Horovod, JAX, Lightning, NVIDIA and
  nanotron docs, a blog; one collector's grep printed a `source:` line of a corpus file (another page's address,
  unused), another read earlier batches' `source:` lines (addresses only); scored once at 597c675, after batch
  26's changes: top-1 8/20, 40 %, top-3 40 %, unknown first 4/20; in-vocabulary 8/11; 9 of its 12 misses are
  `other:` labels: an HCCL TLS setting, a non-contiguous tensor, a stale torch_extensions lock, a stray connection
  to NCCL's bootstrap, an hwloc version, an unpicklable object, a token id past the vocabulary, a shared-GPU
  request). Read; no rule changed: its three in-vocabulary misses are a bare `unhandled system error` with no
  evidence of which network (the page's IB diagnosis was never confirmed), a Horovod-in-Docker hang with no error
  line, and JAX's coordination service saying another task died (the page killed it with `pkill -9`; the log has no
  word of the signal).
- After batch 28 (2026-12-01, frozen 01:03-01:08 UTC by six blind collectors: training frameworks, forums and Q&A,
  HPC and vendor pages, non-English pages, infrastructure trackers, application repositories; 40 logs, of which
  three repeat a thread, one collected twice and two more sections of a page another log cites, left out by the
  one-thread rule written before the score; of the 37, 6 are vendor pages and 31 GitHub threads, the forum and
  non-English collectors again finding no stored thread pairing a log with its cause; scored once at 5818c8c: top-1
  16/37, 43.2 %, top-3 48.6 %, unknown first 10.8 %; in-vocabulary 16/23; then read, classes only): two new causes,
  `ddp_unused_parameters` (DDP's reducer against the model's graph: `Expected to have finished reduction in the
  prior iteration`, `Expected to mark a variable ready only once`; the job's fault) and `slurm_gres_config` (a node's
  own GPU GRES configuration: `gres/gpu count reported lower than configured`, `can't stat gres.conf file`,
  `invalid GRES core specification`, NVML autodetection in a slurmd built without it; three of the batch's logs; the
  node's fault), each with its fix, heal class and `other:` aliases for later batches; a rank in a container off the
  host's network (its own address on Docker's default bridge, or a container id for its hostname) whose connections
  fail: `nic_mismatch`; NCCL's connect failing where its interface list holds a veth, bridge or link-local interface:
  `nic_mismatch` before `nccl_socket_error`, and a stall whose channels go through NET/ is not the one-host
  peer-to-peer hang; a package's `File X.so not found`: `import_error`; the CUDA-version check before an extension
  build (DeepSpeed's `CUDAMismatchException`, torch's `detected CUDA version ... mismatches`):
  `extension_build_failed`; XLA's inconsistent program compilation across workers: `collective_mismatch`. Re-scored
  (NOT a first score): batch 28 24/37 top-1, 25/37 top-3, unknown first 1/37 (four of the eight gained are the new
  causes' labels mapped by aliases written after reading them). Left: 14 of 37 labels are outside the vocabulary
  (pyxis/enroot runtime directories and user namespaces, an Istio sidecar taking the rendezvous, HCCL's TLS switch,
  Neuron cores not reset); a SIGTERM-only log of a host OOM; a store timeout while rank 0 loaded data read as an
  unreachable rendezvous; a UCX shared-memory `Permission denied` across user namespaces (its label aliased to
  `shm_too_small` by a word inside "namespaces").
- After batch 29 (2026-12-01, frozen 01:15-01:17 UTC by five blind collectors given the vocabulary with batch 28's two
  new causes: the PyTorch ecosystem's trackers, DeepSpeed/Megatron/ColossalAI, vendor and project docs, trackers of
  projects popular with Chinese users, multi-node serving; 39 logs, three more sections of one MindSpore page left
  out; of the 36, 5 are vendor or project docs and one a GitHub discussion; scored once at 79ad3dd, after batch 28's
  changes: top-1 25/36, 69.4 %, top-3 77.8 %, unknown first 13.9 %; in-vocabulary 25/32; then read, classes only):
  the container-on-a-bridge rule of batch 28 took NCCL's bare `unhandled system error` for a network failure and
  answered `nic_mismatch` over the log's own `Error while creating shared memory segment /dev/shm/...`: it now asks
  for a failed connection itself; a stall where NCCL took the loopback among its socket interfaces (old NCCL's
  `NET : Using interface lo` beside eth1) is the interface's, not the one-host peer-to-peer hang; PaddlePaddle's
  `Invalid CUDAPlace(N), must inside [0, M)`: `gpu_ordinal`; the runtime's world size checked against the layout an
  engine was built for (TensorRT-LLM's `mpiSize == tp * pp`, `Engine world size (1) != Runtime world size (8)`):
  `config_divisibility` (batch 7's TensorRT-LLM#108, the same message labelled `launcher_args` then, relabelled in
  the corpus: one class, one label). Re-scored (NOT a first score): batch 29 30/36 top-1, 30/36 top-3, unknown first 5/36;
  batch 28 unchanged (24/37). Left: a REPL showing a cross-GPU copy arriving as zeros (IOMMU; no error line), an
  FSDP2 build for Intel XPU asking for CUDA streams, HCCL's non-contiguous tensor and rank-table device ids, a NIXL
  side channel bound to another node's address, a Lightning trainer whose devices disagree with the Slurm
  allocation (`other:` labels, the first's alias mapping it to `extension_build_failed` by its words).
- Batch 30 (frozen 01:29-01:30 UTC by two blind collectors on the session's last search budget, told to prefer
  threads whose first excerpt holds both the log and the fix: 14 logs, all GitHub threads, five of seven causes
  among the vocabulary's commonest; scored once at 2909071: top-1 12/14, 85.7 %, top-3 92.9 %, unknown first 0/14;
  a small batch that weighs as much as the others in the headline: pooled over batches 28-30, top-1 53/87, 60.9 %).
  Read: the driver's own word that a GPU must be reset (`[NV_ERR_RESET_REQUIRED]`, `GPU requires reset`) is
  `gpu_xid` (it had answered `duplicate_gpu` from `CUDA-capable device(s) is/are busy or unavailable`), with an
  alias for later batches. Left: an `mp.spawn` SIGKILL whose kernel record the thread showed but the collector could
  not copy whole (`killed_by_signal` first, `oom_killed` second, as designed without the record). The aliases read
  one word between two as `[a-z0-9]+` now, not `\\w+` (which spans underscores, so whole names): two labels of
  batches 28-29 had mapped by words they do not say (`fsdp_cuda_stream_on_xpu_build` as an extension build,
  `ucx_shm_across_user_namespaces` as a small /dev/shm through "namespaces"); their first scores stand as recorded.
- Before batch 31 (2026-12-01, committed at 592fae5 before its collectors started): the printed confidence refitted
  (diagnose/confidence.py's OBSERVED, on the 823 first places FIRST had printed: see "Calibration"); batch 31 is its
  first test.
- After batch 31 (frozen 03:44-03:47 UTC by six blind collectors: PyTorch core and Lightning, the Hugging Face
  ecosystem, DeepSpeed/Megatron/ColossalAI, the infrastructure under jobs (NCCL, pyxis/enroot, UCX, Open MPI,
  Horovod, the GPU operator), sources other than trackers (project and centre docs, the Open MPI users' list), and
  serving/other frameworks; 59 logs, three left out as threads counted already; of the 56, 9 are docs or
  mailing-list pages; scored once at 592fae5: top-1 31/56, 55.4 %, top-3 62.5 %, unknown first 10.7 %; in-vocabulary
  31/40; 16 labels outside the vocabulary, 14 of them distinct). Read, classes only: NCCL pinned to the loopback
  (`Using [0]lo:127.0.0.1`) with its connections refused is the interface's fault (`nic_mismatch`), as a veth or
  docker0 among its interfaces was; NCCL's watchdog, mid-run, saying the remote process exited or the peer closed
  the socket is the peer's end (`node_unreachable`, a consequence: any root the log names leads); the compiler's
  error inside torch's headers or an op's sources (torch's own `too old version of GCC` check) and Triton's JIT
  build of its C helper (`triton/runtime/build.py ... in _build` with `CalledProcessError`) are
  `extension_build_failed`; a framework build without NCCL's process group (`has no attribute
  'ProcessGroupNCCL'`, and Paddle's Windows frames for the Windows hint) is `platform_backend_unsupported`; Open
  MPI 4's openib transport leaving InfiniBand ports unused, or failing to open the device, is `ib_config`; under
  pyxis/enroot an NVIDIA hook that is there and fails (`nvidia-container-cli: ldcache error`) is
  `container_start_failed`, while one whose program is absent (`Command not found: nvidia-container-cli`) stays
  `docker_no_gpu_runtime` as batch 11's pyxis#110 was labelled (this batch's collector labelled the same message
  `container_start_failed`: one class, one label; that log did not join the corpus). A runner-up from a
  resembling case no longer prints a higher confidence than the answer above it. Re-scored (NOT a first score):
  38/56 top-1, 39/56 top-3, unknown first 5/56; the misses left are 16 labels outside the vocabulary (a Lightning
  barrier before the device is set, CUDA initialised before a fork, `device_map="auto"` under DDP, a library that
  does not support several GPUs, System V shm limits, MPS daemons breaking CUDA IPC, a direct launch without
  Slurm's PMI, ...: no two alike), a port clash whose log shows only NCCL's bare system error, and the pyxis label
  above. 38 of the batch's other vocabulary-labelled logs joined the corpus (not its one `node_unreachable` log: a
  cause needs three entries there).
- After batch 32 (frozen 03:57-04:03 UTC by six blind collectors on the rest of the session's search budget: GPU and
  driver faults, multi-node networking, containers and schedulers, application repositories, docs and HPC centres'
  pages, other accelerators (Ascend/HCCL, Ray, Horovod, MosaicML); 43 logs, one left out as a thread counted already;
  scored once at fe285d7 (after batch 31's changes): top-1 25/42, 59.5 %, top-3 66.7 %, unknown first 1/42, 2.4 %;
  in-vocabulary 25/29; 13 labels outside the vocabulary, all distinct). One log (batch-32a/04) is NVIDIA/nccl-tests#287,
  a thread batch 25 had used: the collector should have skipped it (the sources list named it); it counts in the
  first score as recorded. Read, classes only: NCCL connecting to a container's own address on Docker's default
  bridge (`Connect to 172.17.0.3<...> failed`) is `nic_mismatch`, as the bridge's gateway and a link-local address
  were; NCCL's `ncclMaxSharedMem ... exceeds device/fn maxSharedMem` (an NCCL build older than the GPU's arch) is
  `gpu_arch_unsupported`, not `nccl_too_old`: two of its three labels (batches 26 and 32; batch 25 said
  `nccl_too_old`). Left as labelled by the first collector: HCCL's `listen on ip[...] and specific port[...] fail`,
  `duplicate_gpu` in batch 6 and `port_in_use` here (one label each; it stays the first, `port_in_use` second).
  Re-scored (NOT a first score): 27/42 top-1, 29/42 top-3; batch 31 unchanged (38/56). The misses left: 13 labels
  outside the vocabulary (an NVLS bug of NCCL 2.26.2 on an older driver, a GPU in exclusive-process mode, an index out
  of bounds on one rank, a firewall on NCCL's interface, c10d without an IPv4 fallback, torchrun's endpoint not taken
  for local, NVML's library missing, host RAM exhausted, a script path, mpi4py imported after torch, Cray MPICH's GTL,
  an NPU held by a previous process, a signal file raced on a shared filesystem), a Gloo traceback with no error line.
  The batch's 29 other vocabulary-labelled logs joined the corpus.
- After batch 33 (frozen 06:58-07:05 UTC, 2026-12-01, by eight blind collectors: PyTorch's own stack, fine-tuning
  toolkits, large-model frameworks, the infrastructure under jobs, non-tracker pages only (two: one general, one on
  HPC centres' forums and guides), frameworks outside PyTorch, and less-combed trackers; 47 logs, two left out as
  threads counted already; scored once at afbcc8a: top-1 24/45, 53.3 %, top-3 57.8 %, unknown first 7/45, 15.6 %;
  in-vocabulary 24/32; 13 labels outside the vocabulary, all distinct). The non-tracker searches found little: the
  stored pages hold few Q&A or forum threads with a log and a settled cause (13 of the 47 logs are from such pages).
  Read, classes only: any transport connecting to an address that routes nowhere beyond its host or link (UCX's
  `connect(fd=.., dest_addr=172.17.0.1:..)`, c10d's `trying to connect to (172.17.0.2`) is `nic_mismatch`, and the
  rendezvous row leaves such an address to it (the addresses' words now in rules_addresses.py, shared by every row
  that reads one); a Slurm step `CANCELLED AT` after a task of it failed on its own (MPI's abort, a task's non-zero
  exit) is a consequence; `slurmstepd: error: execve(): PROGRAM: No such file or directory` is `launcher_missing`;
  a rendezvous address that is a path (`--master_addr=/root/cuda11.8.bashrc`: a launcher took a remote shell's
  startup output for it) is `hostname_unresolvable`; oneCCL unable to open libfabric's `shm` provider is
  `shm_too_small`; a traceback stopped in the barrier of `main_process_first` / `wait_for_everyone` is a rank waiting
  on a slow one (`nccl_timeout_slow_rank`). Left: a watchdog timeout whose cause (one rank all-reducing more elements)
  is not in its lines, GROMACS' `no GPU is detected` (a build without the GPU's arch). Re-scored (NOT a first score,
  and the batch's own logs are in the corpus now): 30/45 top-1; batches 28-32 unchanged. The batch's 31 other
  vocabulary-labelled logs joined the corpus (one http:// blog page left out: the corpus takes https sources).
- Before batch 34 (committed at 9a7a7fe, 10:20 UTC, while its collectors worked; six of the eight had frozen 0-2
  minutes before, none of its logs was opened, their reports' file names and labels were read as they came in): two
  causes joined the vocabulary the collectors were given and the rules, from about 25 `other:` labels over batches 24-33
  that named one of them: `job_code_error` (the job's own code or input: an index out of range or a CUDA
  device-side assert, a shape/dtype/device mismatch, an unpicklable object, a CPU or non-contiguous tensor handed
  to a collective, a library used in a mode it does not take; and an exception nothing else explains whose type is
  a program's own, `IndexError`, `KeyError`, `TypeError`, `ValueError`..., where the answer was `unknown`) and
  `library_bug` (a library's own words that it hit its bug: PyTorch's `INTERNAL ASSERT FAILED ... please report a
  bug`, weak beside a cause the same line shows). `duplicate_gpu`'s vocabulary line also names a GPU another
  process holds (exclusive-process mode). Batches 28-33 re-scored unchanged top-1 with them.
- After batch 34 (frozen 10:18-10:21 UTC, 2026-12-01, by eight blind collectors in the same eight areas as batch
  33; 44 logs, one left out as a thread counted already; scored once at 9a7a7fe: top-1 24/43, 55.8 %, top-3 55.8 %,
  unknown first 4/43, 9.3 %; in-vocabulary 24/36; 7 labels outside the vocabulary). The new causes were used by the
  collectors: `library_bug` 5 times (0 named first: a PyTorch regression seen only as NCCL's `invalid resource
  handle`, a missing `barrier`, an MPICH assertion, Open MPI's daemon crashing, a PBS hydra failure),
  `job_code_error` not at all. Read, classes only: accelerate's port check with the port quoted in backticks
  (``port `29500` ``) is `port_in_use` (a value's quotes are not its wording); a program comparing the driver's
  CUDA version in numbers (`CUDA driver version is 11020, expected at least 11040`) is `driver_too_old`; a C/C++
  library's own assertion in its source (MPICH's `Assertion failed in file src/....c at line N`, glibc's `file.c:N:
  func: Assertion `x' failed.`) and a launcher's own daemon crashing (`Segmentation fault ... /bin/orted`, prted,
  hydra_pmi_proxy, slurmstepd) are `library_bug`; a single host's NCCL job that stops right after connecting its
  ranks through P2P/SHM (or nccl-tests' header with no result row), with no word of a failure anywhere, is
  `p2p_unsupported` (weak: NCCL's troubleshooting names ACS/IOMMU for this stall); a local protection error on
  GPUDirect RDMA names `p2p_unsupported` among the causes; an AssertionError that the device, driver or toolkit does
  not support something is not the job's code. One new cause, `mpi_pmi_missing` (the third `other:` label for it,
  after batches 31 and 33): an MPI program started by srun directly whose MPI was built without Slurm's PMI/PMIx
  (`direct launched using "srun", but OMPI was not built with SLURM's PMI support`, `PMI2_Init failed`). Left: two
  `library_bug` logs whose lines show no bug (an NCCL CUDA failure, a missing `barrier`), a Ray teardown error on a
  P2P-less V100 pair, a PBS bootstrap error, an NCCL `invalid usage` fixed by rebuilding NCCL. Re-scored (NOT a first
  score, the batch's logs now in the corpus): 31/43 top-1; batches 28-33 unchanged. 36 vocabulary-labelled logs
  joined the corpus, and under the two causes added for them nine earlier first-scored logs whose `other:` labels
  name them (three of mpi_pmi_missing, six of job_code_error).
- After batch 35 (frozen 10:33-10:35 UTC, 2026-12-01, by four blind collectors on the rest of the session's search
  budget, 60 look-ups each: PyTorch's tracker, HPC centres' and MPI trackers, NVIDIA's newer trackers, fine-tuning
  toolkits (this one told to look for the job's own code and library releases too, the two causes just added); 19
  logs, one left out as a thread counted already: fewer than the 40 the goal asks of a batch; scored once at 7f62bf5:
  top-1 7/18, 38.9 %, top-3 38.9 %, unknown first 2/18, 11.1 %; in-vocabulary 7/14; 4 labels outside the
  vocabulary). `library_bug` was the label of 6 of the 18 logs and was never named first: the collectors give it to
  any failure a later release fixed, and most such logs show only the failure, not that it is a bug. Read, classes
  only: a CUDA call inside NCCL's kernel enqueue refused for its arguments (`enqueue.cc:N NCCL WARN Cuda failure
  'invalid argument'`, `'invalid resource handle'`; three logs over batches 34-35, each a NCCL release's bug fixed by
  another release) is `library_bug`, and torch's quote of it (`Last error:` / `Cuda failure 'invalid argument'`) is
  weakly so where the log shows no NVLS or /dev/shm (those keep `fabricmanager` and `shm_too_small`); `PMI_Init
  returned -1` is `mpi_pmi_missing` (the PMI client finding no server it can talk to). Left: a Cray MPICH GPU
  transport library not linked (`GPU_SUPPORT_ENABLED is requested, but GTL library is not linked`: the second
  `other:` label for it, after batch 32), every rank starting as an MPI singleton, a transformers release passing
  `backend` twice, a launcher summary with no error line, a traceback cut before its error. Re-scored (NOT a first
  score, its logs now in the corpus): 9/18 top-1; batches 28-34 unchanged or better (34: 32/43). 14
  vocabulary-labelled logs joined the corpus.
- After batch 36 (frozen 12:57-13:07 UTC, 2026-12-01, by eleven blind collectors, 50-110 look-ups each: the PyTorch,
  vendor and Hugging Face forums, Q&A sites, HPC centres' pages, trackers of projects not yet in the corpus, the
  container and scheduler layer, the collective libraries, training frameworks, vision and speech trainers, serving
  engines, non-tracker write-ups; 50 logs, 5 left out as threads counted already; the forum and Q&A searches found
  almost nothing the stored pages hold with a log and an established cause, so 2 of the 45 are from forums, 1 from a
  blog (issue 51 asks a third from such sources where stored pages allow: they did not); 15 of the 45 from
  repositories or sites new to the corpus; scored once at 3ce69e8, the commit when the first eight froze: the code
  that landed before the last three froze, a speed change and config_divisibility's fixes, gives the same first causes on batches 1-35): top-1 31/45,
  68.9 %, top-3 73.3 %, unknown first 3/45, 6.7 %; in-vocabulary 31/40; 5 labels outside the vocabulary).
  `library_bug` was again the most missed label: 7 of the 45, none named first (an MPICH node-list parser, Open MPI's
  fixed CQ size, a GPU-sharing layer's CUDA hook, a libfabric release): each log shows a failure, rarely that it is a
  bug. Read, classes only: a program asking to be started by a launcher in other words than `Please use`
  (LLaMA-Factory's `Please launch distributed training with llamafactory-cli or torchrun`) is `launcher_args`, not its
  own code; a platform probe's DEBUG line (`TPU platform is not available because: No module named 'libtpu'`) is no
  import failure; a completion queue or queue pair the RDMA device refuses (`Failed to create a completion queue
  (CQ)` ... `Cannot allocate memory`) is `ib_config` with a locked-memory fix, not the OOM killer; NCCL's NVLS setup
  failing keeps `fabricmanager` but its fix now says NCCL_NVLS_ENABLE=0 trains without it. Left: an mpirun that
  hangs for want of an ssh key (no line says so), MPICH's and Hydra's own bugs, a Lightning Trainer without
  `num_nodes`, an NCCL built for another CUDA. Re-scored (NOT a first score, its logs now in the corpus): 32/45
  top-1; batch 34 33/43, batch 35 9/18. 39 vocabulary-labelled logs joined the corpus; not MPICH's two ranks started
  on one node, whose lines are a successful hello-world: as a resembling case it matched any such text.
- Before batch 37 (not prompted by it; landed before its collectors started): processes that each say they are
  rank 0 of a world of 1 (twice at least) are `mpi_pmi_missing` with their own fix (batch 35's Flux log; the
  launcher's MPI against the program's).
- After batch 37 (frozen 16:00-16:05 UTC, 2026-12-01, by eight blind collectors, 58-100 look-ups each: the PyTorch
  tracker and forum, large-model trainers, Hugging Face, the collective libraries and fabrics, schedulers and MPI,
  the container layer, forums and Q&A, serving engines; 43 logs, one thread met by two collectors counted once;
  every log from an issue tracker: the forum and Q&A searches found nothing with both a log and an established
  cause, and the collectors said so; scored once at e2c244a): top-1 29/42, 69.0 %, top-3 69.0 %, unknown first
  1/42, 2.4 % (within issue 51's 3 %); in-vocabulary 29/38; 4 labels outside the vocabulary. Blind expert readers
  on the same logs: 29/42, top-3 34/42. `library_bug` again: 5 of the 42, none named first (an NCCL release's RAS
  thread crashing, NCCL 2.25 on a new consumer GPU twice, a libnvidia-container regression, a fixed SIGKILL): each
  log shows a crash or a hang, not that a release is at fault. Read, classes only: Open MPI's launcher refusing root
  (`mpirun has detected an attempt to run as root`) is `launcher_args` with the flag that allows it; a fabric
  provider's own ENOMEM (`Libfabric error: (-12) Cannot allocate memory`, UCX's, verbs') is `ib_config` with the
  locked-memory fix, not host RAM; Ray Tune's trials all PENDING minutes in, holding nothing, and its warning that no
  trial could start are `insufficient_resources`; an engine's input of another shape than it was built for
  (`Tensor 'x' has invalid shape (1, 1024), expected (-1, 4096)`) is the job's own. These are the three logs the
  readers named and the first score missed. Left: the five `library_bug` logs, an NVLS hang with no error line, a
  GPU used while an image is built. Re-scored (NOT a first score, its logs now in the corpus): 33/42 top-1; batches
  34-36 unchanged or better (34: 33/43, 35: 10/18, 36: 32/45). 38 vocabulary-labelled logs joined the corpus.
  Tried and not kept: `library_bug` as the last runner-up wherever a slot was free would raise top-3 on batches
  31-37 by 8 of 291 logs while being right for about 1 in 30 of the logs it was added to: noise, not a diagnosis.
- Before batch 38 (not prompted by it): the typed evidence is extracted once per log (no change to any finding).
- After batch 38 (frozen 16:20-16:21 UTC, 2026-12-01, by four blind collectors, 61-75 look-ups each: smaller
  training projects' trackers, cluster platforms, scientific and non-PyTorch GPU codes, non-English pages (none held
  a usable log); 20 logs, all from issue trackers, the session's look-up budget allowing no more; scored once at
  dce25a1): top-1 11/20, 55.0 %, top-3 55.0 %, unknown first 3/20, 15.0 %; in-vocabulary 11/16. Blind readers on the
  same logs: 14/20. `library_bug` 4 of the 20, none first (a scheduler plugin's regression, a platform's doubled
  IPv6 addresses, OpenMM enabling peer access twice, the transformers 4.36 checkpoint rename). Read, classes only:
  TensorFlow's NCCL op without a kernel (`No OpKernel was registered to support Op 'NcclAllReduce'`) is
  `platform_backend_unsupported`; CUDA refusing peer access enabled a second time is the library's own bookkeeping,
  `library_bug`. New cause `mpi_gpu_support_missing`: an MPI or its UCX handed GPU buffers without its GPU support
  (Open MPI built without CUDA, Cray MPICH's GTL not linked, UCX_TLS without cuda_copy): the fourth `other:` label
  for it over batches 32, 35 and 38 (two here); a segfault after its words is its consequence. Left: two platform
  regressions no line names as such, Slurm's munge key differing between nodes, CUDA IPC refused between two ranks.
  Re-scored (NOT a first score): 13/20 top-1 (the class's logs keep their `other:` labels); batches 34-37 unchanged.
  16 vocabulary-labelled logs joined the corpus, and the four of the new cause under it. The collectors' vocabulary
  (VOCAB.md) gained the cause, and launcher_args' and mpi_pmi_missing's lines the forms batches 36-38 labelled
  `other:` for them (Open MPI refusing root or short of slots; every process rank 0 of 1).
- After batch 38, from the `unknown`-first logs of batches 31-38 (re-scored, NOT first scores): a lone `unknown`
  with no resembling case, quoting an error line no rank printed that is no exception of the job's (a launcher's, a
  daemon's, a library's words), is named `library_bug` first at 0.2, `unknown` after it with its quoted lines and
  next step. Of the 4 logs it changes, 2 are labelled library_bug (Hydra's node-list parsing, Determined's doubled
  rendezvous addresses), the 2 others were misses as `unknown` too. Re-scored over batches 31-38: top-1 216 -> 218
  of 311, unknown first 14 -> 10 (36: 33/45, 38: 14/20). The next batch is its test.
- After batch 39 (frozen 18:27-18:30 UTC, 2026-12-01, by eight blind collectors, 50-89 look-ups each: Slurm and
  HPC sites, Hugging Face's libraries and forum, DeepSpeed/Megatron/NeMo, non-NVIDIA accelerators, containers and
  orchestration, non-PyTorch stacks, Q&A sites and forums, serving and Chinese-language projects; the forum and Q&A
  pages held no usable log, so all 41 came from issue trackers, 12 of them projects new to the corpus; one thread
  counted already, 40 scored once at 0348d38): top-1 12/40, 30.0 %, top-3 13/40, unknown first 7/40, 17.5 %;
  in-vocabulary 12/28. Blind readers on the same logs: 19/40 (top-3 22/40); the tool was right on none they missed.
  `library_bug` 10 of the 40 labels, none first; 13 `other:` labels (five of them Slurm/pyxis launch details).
  Read, classes only: Open MPI 5 starting singletons under srun (`No PMIx server was reachable, but a PMI1/2 was
  detected`; `proc 0 of 1` joins the singleton words) is `mpi_pmi_missing`; Open MPI's launch agent absent
  (`plm_rsh_agent` ... `could not be found`) is `launcher_missing`, the segfault after it its consequence; sshd unable
  to chroot in its container, or a key others can read (`UNPROTECTED PRIVATE KEY FILE`, `no hostkeys available`), is
  `ssh_failed` with the capability or mode to give; libfabric's PSM3 finding no NIC (`OFI endpoint open failed` with
  ENOMEM) is `net_plugin_incompatible`, not host memory; CUDA finding no driver in a container the log shows started
  by plain `docker run` with no GPU request is `docker_no_gpu_runtime`, not an old driver; Ray asked to place work on
  `node:ADDR` no node has is `nic_mismatch` (the driver's address from another interface); a library's host command
  refused for an option (`hostname: invalid option -- 'I'`, its exit status 64) and an IPv6 address in an endpoint
  without brackets (`tcp://2605:...:2190:21001`) are `library_bug`. Over every corpus and batch log only batch 39's
  own logs change, each to its label. Left: seven `library_bug` labels whose lines name no bug (an oneCCL device
  OOM, HCCL's init error 15, UCX over loopback, TensorFlow's end-of-sequence abort, NCCL's RoCE segfault, vLLM's
  local world size, DeepSpeed reading RANK before it is set). Re-scored (NOT a first score): 21/40 top-1, 22/40
  top-3, unknown first 5/40; batches 31-38 unchanged (218/311). 28 vocabulary-labelled logs joined the corpus.
- Before batch 40 (not prompted by it): an `other:` label naming a Slurm task layout that does not match
  (`slurm_tasks_not_matching_devices`) reads as `launcher_args`; the collectors' vocabulary lines of six causes
  gained the forms batch 39 labelled (sshd in a container, a key mounted 0644, a container without `--gpus`,
  Open MPI's missing ssh, a fabric provider without a NIC, a Slurm task layout, Ray's node address).
- After batch 40 (frozen 18:56-18:58 UTC, 2026-12-01, by five blind collectors, 48-66 look-ups each: ML platforms
  and Horovod, GPU MPI applications and their stacks, schedulers and HPC container runtimes, RL post-training
  frameworks, vision/speech/scientific repositories; 31 logs, all from issue trackers, 13 projects new to the
  corpus; scored once at 8e95565): top-1 16/31, 51.6 %, top-3 18/31, 58.1 %, unknown first 1/31, 3.2 %;
  in-vocabulary 16/27. Blind readers on the same logs: 20/31 (top-3 24/31); the tool was right on one they missed.
  Read, classes only (each one the readers named): NCCL given a rank past its world size (`Invalid rank requested :
  2/2`) is `launcher_args`, with both numbers; a simulation code with no domain decomposition for its ranks
  (GROMACS) is `config_divisibility`; libfabric's PSM2 and MPICH's `OFI addrinfo() failed` are
  `net_plugin_incompatible`; UCX faulting in memcpy under its own `ucp_dt_pack()` is a GPU buffer it took for host
  memory, `mpi_gpu_support_missing` (its fix now names a UCX built with CUDA); UCX's wireup printing its
  contradicting `old:` lanes and a library's runtime check on a CUDA call refused for its arguments are
  `library_bug`; slurmd discarding a config-only GPU or ignoring detected ones is `slurm_gres_config`. Over every
  corpus and batch log only batch 40's own logs change. Left: five `library_bug` labels whose lines name a
  symptom (an invalid device ordinal, a toolkit release's cgroup error under pyxis, an IndexError in a rollout,
  NCCL's `invalid usage` from a device set too late, a log cut at `Last error:`). Re-scored (NOT a first score):
  22/31 top-1, unknown first 0; batch 39 22/40, batches 31-38 218/311 unchanged. 27 vocabulary-labelled logs joined
  the corpus.
- Batch 41 (frozen 19:17 UTC, 2026-12-01, by two blind collectors, 49-54 look-ups each, the last of the session's
  look-ups: Kubernetes-native training and cloud HPC; GPU driver, CUDA and NCCL setup on the nodes; 10 logs, all
  from issue trackers; scored once at 5c0473d, which held batches 39-40's changes): top-1 4/10, top-3 4/10,
  unknown first 0/10. The blind reader named the same 4. None of the ten met a class batches 39-40 added. Misses:
  three `other:` labels (a leader address never injected, Istio's sidecar not ready, a host driver under the GPU
  operator) and three `library_bug` labels whose lines show a symptom another cause explains as well (NCCL's
  remote allocator out of memory, the fabric manager's start script refusing an option, a Docker package update
  that made NVML fail). No change made; its 7 vocabulary-labelled logs joined the corpus.
- Batch 42 (frozen 21:46-21:53 UTC, 2026-12-01, by nine blind collectors, 56-80 look-ups each: pytorch's
  tracker on torch.distributed; DeepSpeed, Megatron and NeMo; the Hugging Face stack; NCCL, RCCL and EFA;
  containers; Slurm and MPI launchers; LLM training and serving frameworks; forums, then domain projects; GPU faults
  and JAX multi-host (a top-up collector, as the eight gave 39); 42 logs, all from issue trackers (no stored forum
  page had a usable log), 12 repositories new to the corpus; scored once at 32327af): top-1 16/42, 38.1 %, top-3
  18/42, 42.9 %, unknown first 2/42, 4.8 %; in-vocabulary 16/38. Blind readers on the same logs: 26/42 (top-3
  32/42); the tool was right on one they missed. Read, classes only (each one the readers named): a job's program
  the dynamic loader cannot start for a library missing on the node (`error while loading shared libraries:
  libmpi.so.40`; not an MPI daemon's, nor the driver's) is `import_error`, naming the library and
  LD_LIBRARY_PATH; nccl-tests' device table and Horovod's banner showing every process as rank 0 of one world are
  `mpi_pmi_missing` (the fix now names a program built without MPI); Open MPI faulting in its own pack or datatype
  copy of a buffer is `mpi_gpu_support_missing`, as UCX's pack was after batch 40 (one pattern now, the segfault its
  consequence; the fix names the smcuda BTL a site's configuration may drop); PaddlePaddle's NCCL error advising a
  larger `--shm-size` (it prints that only for ENOSPC/EAGAIN) is `shm_too_small`; an address with no host before
  its port (`ray start --address=:6379`) and horovodrun's refusal of hosts without slots are `launcher_args`. Over
  every corpus and batch log only those 8 of batch 42 change. Left: the 8 `library_bug` labels (none first), most
  showing a traceback cut before its error line; four `other:` labels. Re-scored (NOT a first score): 24/42 top-1,
  unknown first 1; batches 31-41 unchanged (218/311, 22/40, 22/31, 4/10). 38 vocabulary-labelled logs joined the
  corpus (1266 entries); the collectors' vocabulary lines of mpi_pmi_missing (Slurm's missing PMI plugin, a program
  built without MPI) and import_error (the loader's form) gained what batch 42 labelled. Written while batch 43 was
  collected and committed only after its first score (so batch 43 did not test it): a rank the job announces at or
  past the world its launch command declares (`--nproc_per_node` x `--nnodes`, `--distributed-world-size`; fairseq
  spawning its own workers under torch.distributed.launch) is `launcher_args` (the evidence layer's roll-call;
  batch 42 then 25/42).
- Batch 43 (frozen 22:08-22:09 UTC, 2026-12-01, by five blind collectors, 47-64 look-ups each, the last of the
  session's look-ups: Megatron, TransformerEngine, Apex and torchtitan; Kubernetes and cloud training; HPC centres'
  Slurm, pyxis and Spack stacks; multi-GPU inference and serving; other frameworks and accelerators; 26 logs, all
  from issue trackers, 9 repositories new to the corpus; scored once at c9ca4ab, with batch 42's rules): top-1
  14/26, 53.8 %, top-3 15/26, 57.7 %, unknown first 3/26, 11.5 %; in-vocabulary 14/23. Blind readers: 17/26 (top-3
  20/26); the tool right on none they missed. Batch 42's classes met none of its logs (each log's first cause is the
  same at 32327af, before them). Read, classes only (the readers named them): a framework saying its
  own build lacks what the job uses (Paddle's CPU package, MXNet's `compile with USE_DIST_KVSTORE=1 to use`) is
  `platform_backend_unsupported`, with the build to install and the shadowing package to remove. Over every corpus
  and batch log only those 2 change. Left: 7 `library_bug` labels (one named first: TransformerEngine's userbuffers
  with an empty NCCL message), two logs whose cause (an OOM) the quoted lines do not show, three `other:` labels.
  Re-scored (NOT a first score): 16/26. 23 vocabulary-labelled logs joined the corpus (1289 entries).
- Batch 44 (frozen 23:07-23:08 UTC, 2026-12-01, by two blind collectors with the session's last 76 look-ups: any
  project's failures reported in 2019-2022, and in 2023-2026; 5 logs, all from issue trackers; scored once at
  7286503, with batches 42-43's rules): top-1 4/5, top-3 4/5, unknown first 1/5. Too small to weigh: the headline's
  mean over batches 42-44 counts it as a whole batch, the pooled figure beside it as its 5 logs. Three shared-memory
  logs and a SIGHUP were named; the miss is a `job_code_error` label on NCCL's `unhandled cuda error` in DDP's model
  check, which the blind reader missed too (4/5, the same four). No change made; its 5 logs joined the corpus
  (1294 entries).
- The blind readers (after batch 35; the paragraph on how far the log alone takes a reader, above): on the same 204
  logs the tool as it is now (re-scored, NOT first scores: it was changed after reading them) names the label first
  for 136 (66.7 %), the readers for 130 (63.7 %). Of the 22 vocabulary-labelled logs a reader named and the first
  score missed, 18 are named now; the 4 left are a pyxis hook failing for want of nvidia-container-cli (the tool
  says the GPU runtime is missing, `container_start_failed` second), every rank an MPI singleton, a nightly's
  `ProcessGroupNCCL does not support barrier`, and HCCL's port-listen failure (the label tie above). What stands
  between either and issue 51's 90 %: a quarter of the labels are outside the vocabulary, and 18 of the 151 inside
  it are logs no reader could place.

The same batches re-scored after those changes (NOT first scores: the changes were made after reading them):
batch 4 37/42 top-1 (88.1 %), 39/42 top-3; batch 5 33/42 (78.6 %), 35/42; batch 6 34/42 (81.0 %), 35/42 (its two
libfabric logs now count through the new cause's alias); unknown first 2, 1 and 0 (each log's own thread left out
of the nearest cases; batches 4-6 are in the corpus now, so the other logs of a batch can be its nearest cases). Batches 1-3 re-scored at the same code: 90/122 top-1, 95/122 top-3.
Earlier re-scores of batches 1-3, after batch 3's changes:
batch 1 27/40 top-1 (67.5 %), batch 2 25/40 (62.5 %), batch 3 24/42 (57.1 %). Most remaining misses are labels
outside the vocabulary (`other:...` names no alias maps: 8, 10 and 11 of the batches' logs at their first scoring) and logs whose quoted lines do not carry
the cause the thread established later (a silent hang, a Ray Tune summary table, a traceback cut before its
error)."""


def write_doc() -> None:
    text = DOC.read_text()
    new = section()
    if SECTION in text:
        start = text.index(SECTION)
        following = text.find("\n## ", start + len(SECTION))
        text = text[:start] + new + ("\n" + text[following + 1:] if following != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + new
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("dirs", nargs="*", type=Path)
    parser.add_argument("--doc-only", action="store_true", help="only rewrite docs/diagnosis.md's section")
    args = parser.parse_args()
    if args.doc_only:
        write_doc()
        return 0
    out = SCORES / f"{args.name}.json"
    if out.exists():
        raise SystemExit(f"{out}: {args.name} was scored already; the first score is the one that counts")
    cases, batch_hash, left_out = load_batch(args.dirs)
    import datetime
    rows = score(cases)
    record = {"name": args.name, "dirs": [str(d) for d in args.dirs], "batch_hash": batch_hash, "commit": commit(),
              "scored_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "figures": figures(rows), "rows": rows, "confidence_kind": "recent", "left_out": left_out}
    SCORES.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    (SCORES / f"{args.name}.md").write_text(markdown(args.name, record))
    write_doc()
    print(markdown(args.name, record).splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
