#!/usr/bin/env python3
"""Engine benchmarks of `onceflow run` and its peers (driven by run-engine-bench.sh; see its header).

Every measurement runs the release binary as a child process on a job file rewritten from
jobs/ (unique topics, transactional id prefix, state directory, checkpoint interval, delivery
guarantee), against a real broker, and checks the output with `onceflow taxi verify`.
A peer engine E (ENGINES; e.g. Kafka Streams, Flink) runs the same jobs as
benches/engine-peers/E/run.sh, configured by the environment (BOOTSTRAP, JOB, INPUT, OUTPUT,
INTERVAL_MS, GUARANTEE, STATE_DIR, NAME), which execs the engine's process (so its PID is
the one measured and killed) and prints `peer: started` once it runs; it is measured and
verified exactly as onceflow is. Output topics use LogAppendTime (see create()).

Sections (SECTIONS):
  throughput  pre-produced rides; time from the job's start until the last expected output
              record is visible to a read_committed reader (a `consume -c M` tail); the job's
              CPU (user+sys from /proc) and peak RSS (VmHWM) at that moment.
  latency     rides produced at a fixed wall-clock rate while the job runs; `taxi latency`
              tails the output read_committed: p50/p99/max of (visible - cause's append time).
  recovery    SIGKILL mid-run, restart on the same state; time from the kill until the first
              record committed after it is visible (read_committed tail from the end).
  memory      job (b) over many drivers with a small state cache and memtables: peak RSS
              against the state directory's size on disk.
Exactly-once and at-least-once alternate within each repetition (EOS first on odd reps), and so
do the engines (ENGINES order on odd reps, reversed on even ones). The memory section runs
onceflow only.
"""

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

try:  # Python 3.11+: the rewritten job files are checked; older Pythons skip the check
    import tomllib
except ImportError:
    tomllib = None

REPO = Path(__file__).resolve().parents[2]
JOBS = {"cleansing": "rides-cleansing.toml", "per-driver-hourly": "rides-per-driver-hourly.toml",
        "per-driver-hourly-avro": "rides-per-driver-hourly-avro.toml",
        "driver-shifts": "driver-shifts.toml", "rides-and-fares": "rides-and-fares.toml"}
# The jobs that read the fares too (`taxi generate --fares`): their second input is the rides
# topic's name + "-fares" (a peer gets it as FARES), and their input events are the rides'
# events and the fares (one per ride).
FARES_JOBS = {"rides-and-fares"}
# A job over Avro (its name ends in -avro) reads the same rides as Avro records through the
# schema registry at REGISTRY (the input converted once: `consume | produce --value-schema`),
# writes Avro, and is verified with `-s value=avro -r REGISTRY`; onceflow alone runs it.
AVRO_RIDE_SCHEMA = "fixtures/schemas/taxi-ride.avsc"
CLK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def env(name, default, smoke=None):
    if os.environ.get(name):
        return os.environ[name]
    return smoke if SMOKE and smoke is not None else default


SMOKE = os.environ.get("SMOKE") == "1"
BIN = env("BIN", str(REPO / "target/release/onceflow"))
BOOT = env("BOOTSTRAP", "127.0.0.1:9092")
OUT = Path(env("OUT_DIR", str(REPO / "target/engine-bench" / time.strftime("%Y%m%d-%H%M%S"))))
SECTIONS = env("SECTIONS", "throughput latency recovery memory").split()
REPS = int(env("REPS", "3", "1"))
JOB_KINDS = env("JOBS", "cleansing per-driver-hourly").split()
INTERVALS = [int(x) for x in env("INTERVALS", "100 1000", "100").split()]
GUARANTEES = env("GUARANTEES", "exactly-once at-least-once").split()
# Engines: "onceflow" and the peers with a benches/engine-peers/NAME/run.sh (main() drops the
# missing ones with a message and builds the others once). Peers run at PEER_GUARANTEES.
ENGINES = env("ENGINES", "onceflow kstreams flink", "onceflow").split()
PEER_GUARANTEES = env("PEER_GUARANTEES", "exactly-once").split()
PEERS_DIR = REPO / "benches" / "engine-peers"
# Input partitions. 1 by default: until the runtime keeps one watermark per source partition,
# job (b) over several partitions makes records late (its output is then wrong), and with one
# partition the verifier's expected count is exactly what the job writes.
PARTS = env("PARTITIONS", "1")
TP_RIDES = env("TP_RIDES", "250000", "5000")
LAT_RATE = int(env("LAT_RATE", "5000", "4000"))  # events/s, wall clock
# Rides per second of event time (generator --rate): at 1, job (b) closes an hour every 3600
# rides, so its output (about one record per driver per hour) comes all through a run.
EVENT_RATE = env("EVENT_RATE", "1")
LAT_SECS = int(env("LAT_SECS", "20", "2"))
REC_RIDES = env("REC_RIDES", "300000", "200000")
MEM_RIDES = env("MEM_RIDES", "300000", "20000")
MEM_DRIVERS = env("MEM_DRIVERS", "200000", "20000")
MEM_EVENT_RATE = env("MEM_EVENT_RATE", "75", "5")
MEM_BUDGETS = env("MEM_BUDGETS", "8388608:8388608 default", "2097152:2097152").split()
TIMEOUT = float(env("RUN_TIMEOUT_SECS", "600", "60"))
REGISTRY = env("REGISTRY", "http://127.0.0.1:8081/apis/ccompat/v7")
RUN_ID = f"{int(time.time())}-{os.getpid()}"
LOG = OUT / "logs"
RESULTS = OUT / "results.tsv"


class BenchError(Exception):
    pass


# Every child process started, so a failed run leaves none behind.
CHILDREN = []


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    CHILDREN.append(p)
    return p


def kill_children():
    for p in CHILDREN:
        if p.poll() is None:
            p.kill()
            p.wait()


def loadavg():
    return open("/proc/loadavg").read().split()[0]


def of(args, timeout=300, check=True):
    """Runs `onceflow ARGS -b BOOT`; returns its stdout. Raises with its stderr on failure."""
    cmd = [BIN, *args, "-b", BOOT]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p.stdout


def topic(tag):
    return f"ebench-{RUN_ID}-{tag}"


def create(t, log_append_time=False):
    """Creates topic t. Output topics use LogAppendTime: the recovery section tells the records
    appended after the kill by their timestamp, and a peer may write the records' own
    timestamps (an input's append time, or event times from 2025 that the broker's retention
    would delete within minutes); the append time means the same for every engine."""
    args = ["topics", "create", "-t", t, "--partitions", PARTS]
    if log_append_time:
        args += ["--config", "message.timestamp.type=LogAppendTime"]
    of(args)


def delete(t):
    if os.environ.get("KEEP_TOPICS") != "1":
        of(["topics", "delete", "-t", t], check=False)


def fares_of(inp):
    """The fares topic beside the rides topic `inp`."""
    return inp + "-fares"


def reads_fares(kind):
    return kind in FARES_JOBS


def input_events(kind, rides):
    """The input records a job reads for `rides` rides: START and END, and a fare each."""
    return (3 if reads_fares(kind) else 2) * int(rides)


def generate(t, rides, *, rate=None, drivers=None, produce_rate=None, wait=True, fares=None):
    """`rides` rides into t; and their fares into fares_of(t) when `fares` (default: when a job
    of JOBS reads them)."""
    args = ["taxi", "generate", "-t", t, "--count", str(rides), "--partitions", PARTS]
    if fares if fares is not None else any(reads_fares(k) for k in JOB_KINDS):
        args += ["--fares", fares_of(t)]
    for flag, v in (("--rate", rate), ("--drivers", drivers), ("--produce-rate", produce_rate)):
        if v is not None:
            args += [flag, str(v)]
    if wait:
        return of(args, timeout=TIMEOUT).strip()
    log = open(LOG / f"generate-{t}.log", "w")
    return spawn([BIN, *args, "-b", BOOT], stdout=log, stderr=subprocess.STDOUT)


def is_avro(kind):
    return kind.endswith("-avro")


def avro_input(inp):
    """The Avro copy of the rides topic `inp` (made once): its name."""
    avro = inp + "-avro"
    if avro in AVRO_INPUTS:
        return avro
    create(avro)
    consume = subprocess.Popen([BIN, "consume", "-b", BOOT, "-t", inp, "-e", "--format", "value"],
                               stdout=subprocess.PIPE, stderr=open(LOG / f"avro-{inp}.log", "a"))
    produce = subprocess.run([BIN, "produce", "-b", BOOT, "-t", avro, "--value-schema",
                              str(REPO / AVRO_RIDE_SCHEMA), "-r", REGISTRY],
                             stdin=consume.stdout, stderr=open(LOG / f"avro-{inp}.log", "a"),
                             timeout=TIMEOUT)
    consume.wait(timeout=TIMEOUT)
    if produce.returncode != 0 or consume.returncode != 0:
        raise BenchError(f"converting {inp} to Avro failed (see {LOG}/avro-{inp}.log)")
    AVRO_INPUTS.add(avro)
    return avro


AVRO_INPUTS = set()


def verify(kind, inp, out):
    """(ok, records read, records expected) from `taxi verify`'s one-line verdict."""
    job = kind[: -len("-avro")] if is_avro(kind) else kind
    avro = ["-s", "value=avro", "-r", REGISTRY] if is_avro(kind) else []
    fares = ["--fares", fares_of(inp)] if reads_fares(kind) else []
    line = of(["taxi", "verify", "--job", job, "--input", inp, "--output", out, *avro, *fares],
              check=False)
    line = line.strip()
    m = re.search(r"OK — (\d+) records", line)
    if m:
        return True, int(m.group(1)), int(m.group(1)), line
    m = re.search(r"(\d+) records read, (\d+) expected", line)
    if not m:
        raise BenchError(f"taxi verify said: {line!r}")
    return False, int(m.group(1)), int(m.group(2)), line


def delete_prefixed(prefix):
    """Deletes the topics named PREFIX... (a peer's internal topics: changelogs, repartitions)."""
    if os.environ.get("KEEP_TOPICS") == "1":
        return
    for line in of(["topics", "list"], check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            delete(name)


def expected_count(kind, inp):
    """How many records the job writes for the complete input `inp` (verify on an empty output)."""
    empty = topic(f"empty-{kind}-{inp[-12:]}")
    create(empty)
    try:
        ok, _, expected, _ = verify(kind, inp, empty)
        if ok or expected == 0:
            raise BenchError(f"job {kind} writes nothing for {inp}: give more rides or a lower EVENT_RATE")
        return expected
    finally:
        delete(empty)


def job_file(kind, tag, out, inp, interval, guarantee, window=None, cache=None, memtable=None):
    """The shipped job `kind` rewritten for one run; returns (path, state dir)."""
    state = OUT / "state" / tag
    section, lines = None, []
    for line in (REPO / "jobs" / JOBS[kind]).read_text().splitlines():
        m = re.match(r"\s*\[+([^\]]+)\]+\s*$", line)
        section = m.group(1) if m else section
        key = line.split("=")[0].strip() if "=" in line and not line.lstrip().startswith("#") else None
        topics = [inp, fares_of(inp)] if reads_fares(kind) else [inp]
        if key in ("join.left", "join.right"):
            # A join's sides name their topics.
            line = line.replace('topic = "rides"', f'topic = "{inp}"')
            line = line.replace('topic = "fares"', f'topic = "{fares_of(inp)}"')
        new = {
            ("source", "brokers"): f'brokers = "{BOOT}"',
            ("source", "topics"): "topics = [" + ", ".join(f'"{t}"' for t in topics) + "]",
            ("sink", "topic"): f'topic = "{out}"',
            ("sink", "delivery.guarantee"): f'delivery.guarantee = "{guarantee}"',
            ("sink", "transactional.id.prefix"): f'transactional.id.prefix = "{topic(tag)}"',
            ("settings", "checkpoint.interval.ms"): f"checkpoint.interval.ms = {interval}",
            ("settings", "state.dir"): f'state.dir = "{state}"',
            ("registry", "url"): f'url = "{REGISTRY}"',
            ("pipeline", "window.tumbling"): f'window.tumbling = "{window}"' if window else None,
        }.get((section, key))
        lines.append(new or line)
    if cache:
        lines.append(f"state.cache.bytes = {cache}")
    if memtable:
        lines.append(f"state.memtable.bytes = {memtable}")
    text = "\n".join(lines) + "\n"
    if tomllib:
        parsed = tomllib.loads(text)
        assert parsed["source"]["topics"] == topics and parsed["sink"]["topic"] == out, text
        assert parsed["settings"]["checkpoint"]["interval"]["ms"] == interval, text
        assert parsed["sink"]["delivery"]["guarantee"] == guarantee, text
    path = OUT / "jobs" / f"{tag}.toml"
    path.write_text(text)
    return path, state


def start_job(path, state, tag, fresh=True):
    log = open(LOG / f"job-{tag}.log", "a")
    args = [BIN, "run", str(path), "-b", BOOT, "--state-dir", str(state)] + (["--fresh"] if fresh else [])
    e = dict(os.environ, ONCEFLOW_LOG=os.environ.get("ONCEFLOW_LOG", "onceflow=info"))
    return spawn(args, stderr=log, stdout=log, env=e)


def run_tag(base, engine):
    """A run's tag (log, state dir, output topic): onceflow's as before, a peer's with -ENGINE."""
    return base if engine == "onceflow" else f"{base}-{engine}"


class EngineRun:
    """One run of a job on one engine: onceflow (`onceflow run` on a rewritten job file) or a
    peer (benches/engine-peers/ENGINE/run.sh with the run's environment). A restart after a kill
    reuses the state directory (and, for a peer, the same NAME: its application/job id)."""

    def __init__(self, engine, kind, tag, out, inp, interval, guarantee, **job_file_kw):
        self.engine, self.kind, self.tag, self.out, self.inp = engine, kind, tag, out, inp
        self.name = topic(tag) + "-app"  # a peer's NAME; its internal topics start with it
        if engine == "onceflow":
            self.path, self.state = job_file(kind, tag, out, inp, interval, guarantee, **job_file_kw)
        else:
            self.path, self.state = None, OUT / "state" / tag
            self.env = dict(os.environ, BOOTSTRAP=BOOT, JOB=kind, INPUT=inp, OUTPUT=out,
                            INTERVAL_MS=str(interval), GUARANTEE=guarantee,
                            STATE_DIR=str(self.state), NAME=self.name)
            if reads_fares(kind):
                self.env["FARES"] = fares_of(inp)
        self.proc = None

    # The log line after which the job reads its input (latency waits for it before producing).
    @property
    def started_line(self):
        return "source positioned" if self.engine == "onceflow" else "peer: started"

    def start(self, fresh=True):
        if self.engine == "onceflow":
            self.proc = start_job(self.path, self.state, self.tag, fresh)
            return self.proc
        if fresh:
            shutil.rmtree(self.state, ignore_errors=True)
        self.state.mkdir(parents=True, exist_ok=True)
        log = open(LOG / f"job-{self.tag}.log", "a")
        self.proc = spawn([str(PEERS_DIR / self.engine / "run.sh")], stdout=log, stderr=log,
                          env=self.env, cwd=str(PEERS_DIR / self.engine))
        return self.proc

    def wait_started(self, timeout):
        wait_log(self.tag, self.started_line, self.proc, timeout)
        if self.engine != "onceflow":
            comm = Path(f"/proc/{self.proc.pid}/comm").read_text().strip()
            if comm in ("bash", "sh", "dash"):
                raise BenchError(f"{self.engine}/run.sh is still a shell ({comm}) after "
                                 f"'peer: started': it must exec the engine's process")

    def finish(self):
        """Stops the job, requires `taxi verify` OK, deletes its topics and state; records read."""
        read = finish_run(self.kind, self.proc, self.inp, self.out, self.state)
        if self.engine != "onceflow":
            delete_prefixed(self.name)
        return read


def stop_job(job):
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=20)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()


def wait_log(tag, needle, job, timeout):
    """Waits until the job's log holds `needle` (e.g. its source is positioned)."""
    deadline = time.monotonic() + timeout
    path = LOG / f"job-{tag}.log"
    while time.monotonic() < deadline:
        if needle in path.read_text(errors="replace"):
            return
        if job.poll() is not None:
            raise BenchError(f"job {tag} exited {job.returncode} before '{needle}': see {path}")
        time.sleep(0.02)
    raise BenchError(f"job {tag}: no '{needle}' in {path} after {timeout} s")


def proc_stats(pid):
    """(CPU seconds user+sys, RSS bytes, peak RSS bytes) of a live process."""
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK
    status = open(f"/proc/{pid}/status").read()
    kb = lambda k: int(re.search(rf"{k}:\s+(\d+) kB", status).group(1)) * 1024
    return cpu, kb("VmRSS"), kb("VmHWM")


def state_bytes(path):
    """(tables, journals) of a state directory: the bytes of the keyspaces' files, and the
    disk blocks the journals hold (fjall preallocates a journal file; its size is not use)."""
    tables = journals = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                st = os.stat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            if f.endswith(".jnl"):
                journals += st.st_blocks * 512
            else:
                tables += st.st_size
    return tables, journals


def tail(out, count, offset="beginning", fmt="value", stdout=subprocess.DEVNULL):
    """A read_committed `consume` that exits after `count` records of `out`."""
    args = [BIN, "consume", "-b", BOOT, "-t", out, "-c", str(count), "-o", offset, "--format", fmt,
            "-X", "isolation.level=read_committed"]
    return spawn(args, stdout=stdout, stderr=open(LOG / f"tail-{out}.log", "a"))


def watch(job, until, sample=None, timeout=TIMEOUT):
    """Polls until `until()` is true; fails if the job exits first. Calls sample() every 0.2 s."""
    start = time.monotonic()
    next_sample = start
    while not until():
        now = time.monotonic()
        if job.poll() is not None:
            raise BenchError(f"job exited {job.returncode} while running (see {LOG})")
        if now - start > timeout:
            raise BenchError(f"timed out after {timeout} s")
        if sample and now >= next_sample:
            sample()
            next_sample = now + 0.2
        time.sleep(0.01)
    return time.monotonic()


def record(section, **fields):
    fields = {"section": section, "loadavg": loadavg(), **fields}
    with open(RESULTS, "a") as f:
        f.write(json.dumps(fields) + "\n")
    print(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in fields.items() if k != "section"), flush=True)
    return fields


def finish_run(kind, job, inp, out, state):
    stop_job(job)
    ok, read, expected, line = verify(kind, inp, out)
    if not ok:
        raise BenchError(f"{out}: {line}")
    delete(out)
    shutil.rmtree(state, ignore_errors=True)
    return read


# --- throughput -------------------------------------------------------------------------------

def engine_order(rep, engine_guarantees=None):
    """(engine, guarantee) pairs of one repetition: engines in ENGINES order on odd reps and
    reversed on even ones, each engine's guarantees likewise (EOS first on odd reps)."""
    pairs = []
    for e in (ENGINES if rep % 2 else list(reversed(ENGINES))):
        gs = engine_guarantees or (GUARANTEES if e == "onceflow" else PEER_GUARANTEES)
        pairs += [(e, g) for g in (gs if rep % 2 else list(reversed(gs)))]
    return pairs


def throughput_run(engine, kind, interval, guarantee, inp, events, expected, rep):
    tag = run_tag(f"tp-{kind[:5]}-{interval}-{guarantee[:2]}-{rep}", engine)
    out = topic(tag)
    create(out, log_append_time=True)
    run = EngineRun(engine, kind, tag, out, inp, interval, guarantee)
    probe = tail(out, expected)
    t0 = time.monotonic()
    job = run.start()
    done = watch(job, lambda: probe.poll() is not None)
    if probe.returncode != 0:
        raise BenchError(f"the output tail of {out} failed (see {LOG})")
    cpu, rss, hwm = proc_stats(job.pid)
    read = run.finish()
    secs = done - t0
    return record("throughput", engine=engine, job=kind, interval_ms=interval, guarantee=guarantee, rep=rep,
                  events=events, output=read, seconds=round(secs, 3),
                  events_per_sec=round(events / secs), cpu_s=round(cpu, 2),
                  cpu_s_per_m=round(cpu / events * 1e6, 2), peak_rss_mb=round(hwm / 2**20, 1))


def throughput():
    print("== throughput", flush=True)
    inp = topic("tp-in")
    gen = generate(inp, TP_RIDES, rate=EVENT_RATE)
    print(f"  input: {gen}", flush=True)
    rows = []
    for kind in JOB_KINDS:
        events = input_events(kind, TP_RIDES)
        source = avro_input(inp) if is_avro(kind) else inp
        expected = expected_count(kind, source)
        for rep in range(1, REPS + 1):
            for interval in INTERVALS:
                for e, g in engine_order(rep):
                    if e == "onceflow" or not is_avro(kind):
                        rows.append(throughput_run(e, kind, interval, g, source, events, expected, rep))
    for t in [inp, fares_of(inp), *AVRO_INPUTS]:
        delete(t)
    return rows


# --- latency ----------------------------------------------------------------------------------

def latency_run(engine, kind, interval, guarantee, rides, expected, rep):
    tag = run_tag(f"lat-{kind[:5]}-{interval}-{guarantee[:2]}-{rep}", engine)
    inp, out = topic(tag + "-in"), topic(tag)
    create(inp)
    if reads_fares(kind):
        create(fares_of(inp))
    create(out, log_append_time=True)
    run = EngineRun(engine, kind, tag, out, inp, interval, guarantee)
    probe = spawn(
        [BIN, "taxi", "latency", "-b", BOOT, "--job", kind, "--input", inp, "--output", out,
         "--expect", str(expected), "--timeout-ms", str(int(TIMEOUT * 1000))],
        stdout=subprocess.PIPE, stderr=open(LOG / f"latency-{tag}.log", "w"), text=True)
    job = run.start()
    run.wait_started(60 if engine == "onceflow" else 180)
    gen = generate(inp, rides, rate=EVENT_RATE, produce_rate=LAT_RATE, wait=False,
                   fares=reads_fares(kind))
    watch(job, lambda: probe.poll() is not None)
    cpu, _, hwm = proc_stats(job.pid)
    line = probe.stdout.read().strip()
    gen.wait(timeout=60)
    m = re.search(r"latency: (\d+) results, p50 (\d+) ms, p99 (\d+) ms, max (\d+) ms", line)
    if probe.returncode != 0 or not m:
        raise BenchError(f"taxi latency exited {probe.returncode}: {line!r} (see {LOG})")
    run.finish()
    delete(inp)
    delete(fares_of(inp))
    n, p50, p99, mx = (int(x) for x in m.groups())
    return record("latency", engine=engine, job=kind, interval_ms=interval, guarantee=guarantee, rep=rep,
                  rate=LAT_RATE, results=n, p50_ms=p50, p99_ms=p99, max_ms=mx,
                  cpu_s_per_m=round(cpu / input_events(kind, rides) * 1e6, 2),
                  peak_rss_mb=round(hwm / 2**20, 1))


def latency():
    print("== latency", flush=True)
    rides = LAT_RATE * LAT_SECS // 2
    scratch = topic("lat-scratch")
    generate(scratch, rides, rate=EVENT_RATE)
    kinds = JOB_KINDS
    expected = {kind: expected_count(kind, scratch) for kind in kinds}
    delete(scratch)
    delete(fares_of(scratch))
    rows = []
    for rep in range(1, REPS + 1):
        for kind in kinds:
            for interval in INTERVALS:
                for e, g in engine_order(rep):
                    rows.append(latency_run(e, kind, interval, g, rides, expected[kind], rep))
    return rows


# --- recovery ---------------------------------------------------------------------------------

# Output records that must be visible before the kill (the job is mid-run by then).
BEFORE_KILL = {"cleansing": 1000, "per-driver-hourly": 1, "driver-shifts": 1, "rides-and-fares": 1000}
RECOVERY_CHECK_SECS = 20


def recovery_run(engine, kind, interval, inp, expected, rep):
    tag = run_tag(f"rec-{kind[:5]}-{interval}-{rep}", engine)
    out = topic(tag)
    create(out, log_append_time=True)
    run = EngineRun(engine, kind, tag, out, inp, interval, "exactly-once")
    first = tail(out, min(BEFORE_KILL[kind], expected))
    job = run.start()
    watch(job, lambda: first.poll() is not None)
    kill_wall_ms = time.time() * 1000
    killed = time.monotonic()
    job.kill()
    job.wait()
    # Positioned at the read_committed end after the kill: whatever shows up was committed later.
    # A commit the broker had received before the kill can complete just after it: its records
    # were appended before the kill (the output topic's timestamps are append times), so the
    # tail starts again from the new end (at most 3 times).
    probe = tail(out, 1, offset="end", fmt="json", stdout=subprocess.PIPE)
    job, stale = run.start(fresh=False), 0
    # When no new record has come for RECOVERY_CHECK_SECS, a tail of every expected record
    # (read_committed, from the beginning) tells whether all was committed before the kill, so
    # nothing will come (too few REC_RIDES). Started late so as not to load a quick recovery.
    late = {"rest": None}

    def arrived():
        if late["rest"] is None and time.monotonic() - killed > RECOVERY_CHECK_SECS:
            late["rest"] = tail(out, expected)
        return probe.poll() is not None or (late["rest"] is not None and late["rest"].poll() is not None)

    while True:
        seen = watch(job, arrived)
        if probe.poll() is None:
            # The probe sees a record committed last as soon as the full tail does; allow for
            # the two readers' polls before calling the run too short.
            try:
                probe.wait(timeout=15)
                seen = time.monotonic()
            except subprocess.TimeoutExpired:
                raise BenchError(f"{out}: all {expected} records were committed before the kill: "
                                 f"nothing to recover (give more REC_RIDES)")
        line = probe.stdout.read().decode().strip()
        if probe.returncode != 0 or not line:
            raise BenchError(f"the tail of {out} after the kill failed (see {LOG})")
        if json.loads(line)["timestamp"] >= kill_wall_ms:
            break
        stale += 1
        if stale > 3:
            raise BenchError(f"{out}: only records created before the kill came after it")
        probe = tail(out, 1, offset="end", fmt="json", stdout=subprocess.PIPE)
    rest = late["rest"] or tail(out, expected)
    watch(job, lambda: rest.poll() is not None)
    run.finish()  # verify OK: exactly once across the kill
    return record("recovery", engine=engine, job=kind, interval_ms=interval, rep=rep,
                  recovery_ms=round((seen - killed) * 1000), stale=stale)


def recovery():
    print("== recovery", flush=True)
    inp = topic("rec-in")
    generate(inp, REC_RIDES, rate=EVENT_RATE)
    rows = []
    for kind in JOB_KINDS:
        expected = expected_count(kind, inp)
        for rep in range(1, REPS + 1):
            for interval in INTERVALS:
                for e, _ in engine_order(rep, ["exactly-once"]):
                    rows.append(recovery_run(e, kind, interval, inp, expected, rep))
    delete(inp)
    delete(fares_of(inp))
    return rows


# --- memory -----------------------------------------------------------------------------------

def memory_run(budget, inp, expected, events):
    cache, memtable = (None, None) if budget == "default" else budget.split(":")
    tag = f"mem-{budget.replace(':', '-')}"
    out = topic(tag)
    create(out, log_append_time=True)
    kind = "per-driver-hourly"
    path, state = job_file(kind, tag, out, inp, 1000, "exactly-once", cache=cache, memtable=memtable)
    probe = tail(out, expected)
    peak = {"state": 0, "journals": 0, "rss_at_state_peak": 0}
    t0 = time.monotonic()
    job = start_job(path, state, tag)

    def sample():
        try:
            _, rss, _ = proc_stats(job.pid)
        except (FileNotFoundError, ProcessLookupError):
            return
        tables, journals = state_bytes(state)
        peak["journals"] = max(peak["journals"], journals)
        if tables >= peak["state"]:
            peak.update(state=tables, rss_at_state_peak=rss)

    done = watch(job, lambda: probe.poll() is not None, sample)
    cpu, rss, hwm = proc_stats(job.pid)
    end_size, _ = state_bytes(state)
    finish_run(kind, job, inp, out, state)
    mb = lambda b: round(b / 2**20, 1)
    return record("memory", engine="onceflow", budget=budget, cache_bytes=cache or "32 MiB (fjall)",
                  memtable_bytes=memtable or "64 MiB (fjall)", events=events, output=expected,
                  seconds=round(done - t0, 1), events_per_sec=round(events / (done - t0)),
                  cpu_s_per_m=round(cpu / events * 1e6, 2), peak_rss_mb=mb(hwm), end_rss_mb=mb(rss),
                  peak_state_mb=mb(peak["state"]), rss_at_state_peak_mb=mb(peak["rss_at_state_peak"]),
                  end_state_mb=mb(end_size), peak_journal_mb=mb(peak["journals"]))


def memory():
    print("== memory", flush=True)
    inp = topic("mem-in")
    gen = generate(inp, MEM_RIDES, rate=MEM_EVENT_RATE, drivers=MEM_DRIVERS)
    print(f"  input: {gen}", flush=True)
    expected = expected_count("per-driver-hourly", inp)
    rows = [memory_run(b, inp, expected, 2 * int(MEM_RIDES)) for b in MEM_BUDGETS]
    delete(inp)
    return rows


# --- tables -----------------------------------------------------------------------------------

def spread(values, fmt="{:,.0f}"):
    values = sorted(values)
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(values[0])}–{fmt.format(values[-1])})"


def group(rows, *keys):
    out = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def same_rep_ratios(rows, field):
    """EOS / ALO of `field` within each (engine, job, interval, rep), grouped by (engine, job, interval)."""
    ratios = {}
    for (engine, kind, interval, rep), rs in group(rows, "engine", "job", "interval_ms", "rep").items():
        by = {r["guarantee"]: r[field] for r in rs}
        if "exactly-once" in by and "at-least-once" in by and by["at-least-once"]:
            ratios.setdefault((engine, kind, interval), []).append(by["exactly-once"] / by["at-least-once"])
    return ratios


# The onceflow / peer table: (section, field, heading, format), same rep, job, interval, EOS.
VERSUS = [("throughput", "events_per_sec", "input events/s", "{:.2f}"),
          ("throughput", "cpu_s_per_m", "CPU s per 1M events", "{:.2f}"),
          ("throughput", "peak_rss_mb", "peak RSS", "{:.2f}"),
          ("latency", "p50_ms", "latency p50", "{:.2f}"),
          ("latency", "p99_ms", "latency p99", "{:.2f}"),
          ("recovery", "recovery_ms", "recovery ms", "{:.2f}")]


def versus_ratios(rows):
    """{(peer, job, interval): {column: [onceflow / peer within each rep]}} at exactly-once."""
    eos = [r for r in rows if r.get("guarantee", "exactly-once") == "exactly-once" and "engine" in r]
    out = {}
    for section, field, heading, _ in VERSUS:
        sec = [r for r in eos if r["section"] == section]
        for (kind, interval, rep), rs in group(sec, "job", "interval_ms", "rep").items():
            ours = [r[field] for r in rs if r["engine"] == "onceflow"]
            for r in rs:
                if r["engine"] != "onceflow" and ours and r[field]:
                    out.setdefault((r["engine"], kind, interval), {}).setdefault(heading, []).append(
                        ours[0] / r[field])
    return out


def print_tables(rows):
    tp = [r for r in rows if r["section"] == "throughput"]
    if tp:
        print("\n| engine | job | checkpoint interval | guarantee | input events/s | job CPU s per 1M input events | peak RSS MiB | seconds |")
        print("|---|---|---|---|---|---|---|---|")
        for (engine, kind, iv, g), rs in group(tp, "engine", "job", "interval_ms", "guarantee").items():
            print(f"| {engine} | {kind} | {iv} ms | {g} | {spread([r['events_per_sec'] for r in rs])} | "
                  f"{spread([r['cpu_s_per_m'] for r in rs], '{:.2f}')} | "
                  f"{spread([r['peak_rss_mb'] for r in rs], '{:.0f}')} | {spread([r['seconds'] for r in rs], '{:.1f}')} |")
        rates, cpus = same_rep_ratios(tp, "events_per_sec"), same_rep_ratios(tp, "cpu_s_per_m")
        if rates:
            print("\n| engine | job | checkpoint interval | exactly-once / at-least-once events/s (same rep) | CPU per event |")
            print("|---|---|---|---|---|")
            for k in rates:
                cpu = spread(cpus[k], '{:.2f}') if k in cpus else "–"
                print(f"| {k[0]} | {k[1]} | {k[2]} ms | {spread(rates[k], '{:.2f}')} | {cpu} |")
    lat = [r for r in rows if r["section"] == "latency"]
    if lat:
        print("\n| engine | job | checkpoint interval | guarantee | results | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|---|---|---|")
        for (engine, kind, iv, g), rs in group(lat, "engine", "job", "interval_ms", "guarantee").items():
            print(f"| {engine} | {kind} | {iv} ms | {g} | {rs[0]['results']} | {spread([r['p50_ms'] for r in rs])} | "
                  f"{spread([r['p99_ms'] for r in rs])} | {spread([r['max_ms'] for r in rs])} |")
    rec = [r for r in rows if r["section"] == "recovery"]
    if rec:
        print("\n| engine | job | checkpoint interval | kill → first new committed output, ms | stale tails |")
        print("|---|---|---|---|---|")
        for (engine, kind, iv), rs in group(rec, "engine", "job", "interval_ms").items():
            print(f"| {engine} | {kind} | {iv} ms | {spread([r['recovery_ms'] for r in rs])} | {sum(r['stale'] for r in rs)} |")
    versus = versus_ratios(rows)
    if versus:
        cols = [h for _, _, h, _ in VERSUS]
        print("\nonceflow / peer, exactly-once, within each rep (median (min–max) over reps; events/s > 1 "
              "and the others < 1 favour onceflow):")
        print("\n| peer | job | checkpoint interval | " + " | ".join(cols) + " |")
        print("|---|---|---|" + "---|" * len(cols))
        for (peer, kind, iv), by in versus.items():
            cells = [spread(by[h], f) if h in by else "–" for _, _, h, f in VERSUS]
            print(f"| {peer} | {kind} | {iv} ms | " + " | ".join(cells) + " |")
    mem = [r for r in rows if r["section"] == "memory"]
    if mem:
        print("\n| state.cache.bytes | state.memtable.bytes | state tables on disk, peak / end MiB | journal peak MiB | peak RSS MiB | RSS at the tables' peak MiB | input events/s | CPU s per 1M |")
        print("|---|---|---|---|---|---|---|---|")
        for r in mem:
            print(f"| {r['cache_bytes']} | {r['memtable_bytes']} | {r['peak_state_mb']} / {r['end_state_mb']} | "
                  f"{r['peak_journal_mb']} | {r['peak_rss_mb']} | {r['rss_at_state_peak_mb']} | {r['events_per_sec']:,} | {r['cpu_s_per_m']} |")


def prepare_engines():
    """Drops the engines without benches/engine-peers/E/run.sh (with a message) and builds each
    peer once (its build.sh, unless SKIP_PEER_BUILD=1)."""
    global ENGINES
    kept = []
    for e in ENGINES:
        if e == "onceflow":
            kept.append(e)
            continue
        run_sh = PEERS_DIR / e / "run.sh"
        if not os.access(run_sh, os.X_OK):
            print(f"# engine {e}: skipped: no executable {run_sh.relative_to(REPO)}", flush=True)
            continue
        build = PEERS_DIR / e / "build.sh"
        if os.environ.get("SKIP_PEER_BUILD") != "1" and build.exists():
            print(f"# engine {e}: building ({build.relative_to(REPO)})...", flush=True)
            with open(LOG / f"build-{e}.log", "w") as log:
                p = subprocess.run([str(build)], stdout=subprocess.PIPE, stderr=log, text=True,
                                   cwd=str(PEERS_DIR / e), timeout=1800)
            if p.returncode != 0:
                raise BenchError(f"{build} exited {p.returncode}: see {LOG / f'build-{e}.log'}")
            print(f"# engine {e}: {p.stdout.strip().splitlines()[-1] if p.stdout.strip() else 'built'}", flush=True)
        kept.append(e)
    ENGINES = kept
    if not ENGINES:
        raise BenchError("no engine to run (ENGINES)")


def main():
    LOG.mkdir(parents=True, exist_ok=True)
    (OUT / "jobs").mkdir(exist_ok=True)
    if not os.access(BIN, os.X_OK):
        sys.exit(f"engine bench: no executable {BIN}: build it (cargo build --release) or set BIN")
    try:
        prepare_engines()
    except (BenchError, subprocess.TimeoutExpired) as e:
        sys.exit(f"engine bench: {e}")
    meta = (f"date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\nbinary: {BIN}\n"
            f"broker: {BOOT}\nsections: {SECTIONS} reps={REPS} jobs={JOB_KINDS} intervals={INTERVALS} "
            f"guarantees={GUARANTEES} partitions={PARTS}\nengines: {ENGINES} (peers at {PEER_GUARANTEES})\nthroughput rides={TP_RIDES}; latency "
            f"{LAT_RATE} events/s for {LAT_SECS} s; event-time rate {EVENT_RATE} rides/s; recovery "
            f"rides={REC_RIDES}; memory rides={MEM_RIDES} drivers={MEM_DRIVERS} event-time rate "
            f"{MEM_EVENT_RATE} budgets={MEM_BUDGETS}\nloadavg at start: {open('/proc/loadavg').read().strip()}\n")
    (OUT / "meta.txt").write_text(meta)
    print("".join(f"# {line}\n" for line in meta.splitlines()), end="", flush=True)
    rows = []
    try:
        for section in SECTIONS:
            rows += {"throughput": throughput, "latency": latency, "recovery": recovery,
                     "memory": memory}[section]()
    except (BenchError, subprocess.TimeoutExpired, KeyError) as e:
        kill_children()
        delete_prefixed(topic(""))  # this run's topics (unless KEEP_TOPICS=1)
        print_tables(rows)
        sys.exit(f"engine bench: {e}")
    print_tables(rows)
    print(f"\n# loadavg at end: {open('/proc/loadavg').read().strip()}; results in {RESULTS}")


if __name__ == "__main__":
    main()
