#!/usr/bin/env python3
"""The rooms' layering (docs/architecture.md, "Layers"), checked: every #include of a project
header from src/ROOM/ or from a room's header must go to the same room or to a room on a lower
floor. An include that runs back up fails, unless it is one of the known debts listed in DEBTS
below (the house's next step, issue #39, removes them); a debt that is gone must leave the list,
so the list stays true. Exit 0 when clean, 1 with every offending include named (file:line).

    python3 .ci/layers.py            # the check (CI's lint stage runs it)
    python3 .ci/layers.py --graph    # the room graph: who includes whom, by floor
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Floors, lowest first. A room may include its own floor's rooms only when the pair is listed in
# SIDEWAYS, and any room of a lower floor.
FLOORS = [
    ["base"],                                  # strings, quoting, hashing, paths, clock, errors
    ["seams", "binding"],                      # the Transport interface; CPU binding values
    ["hostfile", "topology", "ssh"],           # inputs and the wire
    ["options"],                               # the command line's values, grouped by concern
    ["plan", "command", "output"],             # pure planning, remote commands, console and logs
    ["transport"],                             # batches, agents, child processes, kept connections
    ["check", "sync", "stacks", "jobs", "keeper", "watch"],  # the subcommands' rooms; the keeper
    ["runner"],                                # the attached and detached runs
    ["cli"],                                   # options, help, main
]
# Rooms of one floor that one may include (never both ways).
SIDEWAYS = {("command", "plan"), ("check", "sync"), ("check", "stacks"), ("watch", "jobs")}

# Which room a header of include/msrun_ssh/ belongs to. transport.h is the seam every connection
# kind implements (the ssh room's pool among them); binding.h holds the CPU-binding values that
# host files, topologies and plans share (src/plan/binding.cc parses them).
HEADERS = {
    "base.h": "base", "error.h": "base",
    "transport.h": "seams", "binding.h": "binding",
    "hostfile.h": "hostfile", "host_source.h": "hostfile",
    "topology.h": "topology",
    "ssh.h": "ssh", "ssh_config.h": "ssh",
    "plan.h": "plan",
    "command.h": "command",
    "output.h": "output", "events.h": "output", "status_line.h": "output",
    "console_sink.h": "output",
    "batch.h": "transport", "agent.h": "transport", "process.h": "transport", "mux.h": "transport",
    "ssh_settings.h": "transport",
    "keeper.h": "keeper",
    "check.h": "check", "sync.h": "sync", "stacks.h": "stacks", "jobs.h": "jobs", "watch.h": "watch",
    "runner.h": "runner",
    "options.h": "options", "option_table.h": "cli", "cli.h": "cli", "app.h": "cli", "help.h": "cli", "dry_run.h": "cli",
}
# Rooms whose sources live in another room's folder: src/plan/binding.cc is the binding room's.
SOURCES = {"src/plan/binding.cc": "binding"}

# Known includes that run back up (FILE, HEADER): debts to pay; a paid one leaves the list.
DEBTS = set()


def floor_of(room):
    for i, rooms in enumerate(FLOORS):
        if room in rooms:
            return i
    raise SystemExit(f"layers.py: room {room!r} is on no floor: add it to FLOORS")


def includes():
    """(file, line number, including room, header) for every project include."""
    files = []
    for room in sorted(os.listdir(os.path.join(ROOT, "src"))):
        d = os.path.join(ROOT, "src", room)
        if room == "remote" or not os.path.isdir(d):
            continue
        files += [(f"src/{room}/{n}", SOURCES.get(f"src/{room}/{n}", room))
                  for n in sorted(os.listdir(d)) if n.endswith((".cc", ".h"))]
    for n in sorted(os.listdir(os.path.join(ROOT, "include", "msrun_ssh"))):
        if n not in HEADERS:
            raise SystemExit(f"layers.py: include/msrun_ssh/{n} belongs to no room: add it to "
                             "HEADERS")
        files.append((f"include/msrun_ssh/{n}", HEADERS[n]))
    for path, room in files:
        with open(os.path.join(ROOT, path)) as f:
            for number, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"msrun_ssh/([^"]+)"', line)
                if m:
                    yield path, number, room, m.group(1)


def main():
    graph, bad, debts_seen = {}, [], set()
    for path, number, room, header in includes():
        target = HEADERS.get(header)
        if target is None:
            bad.append(f"{path}:{number}: includes msrun_ssh/{header}, which belongs to no room")
            continue
        if target == room:
            continue
        graph.setdefault(room, set()).add(target)
        up = floor_of(target) > floor_of(room) or (
            floor_of(target) == floor_of(room) and (room, target) not in SIDEWAYS)
        if not up:
            continue
        if (path, header) in DEBTS:
            debts_seen.add((path, header))
            continue
        bad.append(f"{path}:{number}: room {room} (floor {floor_of(room)}) includes "
                   f"msrun_ssh/{header} of room {target} (floor {floor_of(target)}): up the layers")
    for path, header in sorted(DEBTS - debts_seen):
        bad.append(f"{path}: no longer includes msrun_ssh/{header}: take it off DEBTS in "
                   ".ci/layers.py")
    if "--graph" in sys.argv:
        for i, rooms in enumerate(FLOORS):
            for r in rooms:
                print(f"floor {i} {r:10} -> {', '.join(sorted(graph.get(r, ())))}")
    if bad:
        print("\n".join(bad))
        print(f"layers: {len(bad)} include(s) against docs/architecture.md's layers")
        return 1
    print(f"layers: clean ({len(DEBTS)} known debts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
