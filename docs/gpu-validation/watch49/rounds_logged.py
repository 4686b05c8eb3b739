"""`python -m clusterctl ...` with every flight-recorder round the watch judges appended to $ROUNDS_LOG as one JSON
line (issue 49, session 24: each rank's figures, the CPU rates and the verdict, so a healthy run's near-misses show,
not only what it named). A validation wrapper, not part of clusterctl: run.sh uses it where ROUNDS_LOG is set."""
import json
import os
import runpy
import time

from clusterctl.node import waits_verdict

_add = waits_verdict.WaitsRounds.add


def _logged(self, measured):
    before = dict(self.cpu)
    found = _add(self, measured)
    rates, _ = waits_verdict.cpu_rates(before, measured)
    with open(os.environ["ROUNDS_LOG"], "a") as log:
        log.write(json.dumps({"t": time.time(), "measured": {f"{h} r{r}": list(m) for (h, r), m in measured.items()},
                              "cores": {f"{h} r{r}": round(v, 3) for (h, r), v in rates.items()},
                              "verdict": found._asdict() if found is not None else None}) + "\n")
    return found


waits_verdict.WaitsRounds.add = _logged
runpy.run_module("clusterctl", run_name="__main__")
