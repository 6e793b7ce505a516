#!/usr/bin/env python3
"""Checks the include direction of gpucomm's headers: a header includes only headers of its own
floor or a lower one (FLOORS below, lowest first). Also:
  - no production header (include/) includes test support (testing/include/);
  - a transport package (transport/<X>/ and its umbrella transport/<X>.cuh) includes no other
    transport's package, only the shared NIC code (transport/nic/) and the network engines
    (transport/engine/, which ProxyQueue's engine backend carries commands through); route is a composite and
    includes none of its legs either (users include the legs they route over);
  - a device header (a .cuh below the top floor, other than transport/<X>.cuh and host halves)
    reaches no host-only header (HOST_ONLY), directly or through others;
  - every quoted include and every <gpucomm/...> include names a file that exists;
  - every header has a floor (a new folder gets its line in FLOORS).

Reads every `#include "..."` and `#include <gpucomm/...>` of include/gpucomm/** and
testing/include/gpucomm/** (outside comments, whatever the #if around them), resolving quoted
paths against the including file's folder first, then the include roots. Exit status 0 when every
include goes down or sideways; 1 with one line per violation otherwise:
  FILE:LINE: floor N (name) includes PATH, floor M (name)

  tests/headers/check_floors.py [--root REPO]   (default: the repository holding this script)
  tests/headers/check_floors.py --self-test     (the checker finds a violation in a made-up tree)
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

# (glob relative to include/gpucomm, floor, name): the first match wins, so a file that sits above
# its folder's floor is listed before the folder. `*` stays inside one folder, `**` crosses them.
FLOORS = [
    ("host/collectives.cuh", 7, "top"),  # the collectives' host launchers
    ("host/team_workspace.hpp", 7, "top"),  # the host half of collectives/workspace.hpp
    ("host/moe.cuh", 7, "top"),  # the MoE plan and launchers (collectives/moe.cuh)
    ("collectives.cuh", 7, "top"),
    ("gpucomm.cuh", 7, "top"),
    ("aggregate.cuh", 7, "top"),  # the Boost.PFR umbrella: aggregate_atomics.cuh, aggregate_reduction.cuh
    ("verbs_gpu/verbs_gpu.cuh", 7, "top"),
    ("config.hpp", 0, "core"),
    ("error.hpp", 0, "core"),
    ("callback.hpp", 0, "core"),
    ("ops.hpp", 0, "core"),
    ("sym_ptr.hpp", 0, "core"),
    ("team.hpp", 0, "core"),
    ("scratch.hpp", 0, "core"),
    ("group.cuh", 0, "core"),
    ("transport_concept.hpp", 0, "core"),
    ("contract.cuh", 0, "core"),
    ("detail/**", 0, "core"),
    ("comm.cuh", 1, "comm"),
    ("aggregate_atomics.cuh", 1, "comm"),  # add_fields, built on comm's atomics
    ("verbs_gpu/host/**", 3, "verbs host"),
    ("verbs_gpu/*.cuh", 2, "verbs"),
    ("verbs_gpu/detail/**", 2, "verbs"),
    ("host/**", 4, "host"),
    ("transport/**", 5, "transports"),
    ("collectives/**", 6, "collectives"),
]
FLOORS_TOP = max(floor for _, floor, _ in FLOORS)
TESTING_FLOOR = (FLOORS_TOP + 1, "testing")  # testing/include/gpucomm/**: test support, above everything
SHARED_TRANSPORT_PACKAGES = ("nic", "engine")  # transport/nic/: what the NIC transports share;
# transport/engine/: the network engines (no transport of their own, used by ProxyQueue's backend)
# Host-only headers (the host runtime: world, bootstrap, rdma-core set-up, transports' host halves).
HOST_ONLY = ["host/**", "verbs_gpu/host/**", "transport/*/host*"]
# .cuh headers that are no device headers: the transports' umbrellas over both halves.
NOT_DEVICE = ["transport/*.cuh"]

# Includes that break a rule today, each with the reason it stays until its issue moves it:
# (including file, included file), both relative to include/gpucomm. An entry that no longer
# matches an include fails the check, so the list only shrinks.
KNOWN = {
    ("transport/p2p_copy/device.cuh", "transport/nvlink_store/device.cuh"):
        "P2PCopy's signals, atomics, quiet and barrier are NVLinkStore's, over the same mappings",
    ("transport/p2p_copy/device.cuh", "transport/nvlink_store/state.hpp"):
        "P2PCopy's device state is NVLinkStore's (the same peer mappings)",
    ("transport/p2p_copy/host.hpp", "transport/nvlink_store/host.hpp"):
        "P2PCopy's host half is NVLinkStore's (the same peer mappings)",
    ("transport/proxy_queue/device.cuh", "transport/nvlink_store/device.cuh"):
        "ProxyQueue's signals, atomics, quiet and barrier over the mapped heap are NVLinkStore's",
}

INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# Comments out, strings and character literals kept (a "//" inside a string is no comment).
LEXEME = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\'', re.S)


def glob_regex(pattern):
    """A glob as a regular expression: `**` matches across folders, `*` and `?` within one."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


FLOOR_RULES = [(glob_regex(g), floor, name) for g, floor, name in FLOORS]
HOST_ONLY_RULES = [glob_regex(g) for g in HOST_ONLY]
NOT_DEVICE_RULES = [glob_regex(g) for g in NOT_DEVICE]


def matches(rules, name):
    return any(rx.match(name) for rx in rules)


def strip_comments(text):
    def keep(m):
        s = m.group(0)
        return "\n" * s.count("\n") if s.startswith("/") else s

    return LEXEME.sub(keep, text)


class Tree:
    """The headers under ROOT/include/gpucomm and ROOT/testing/include/gpucomm."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.include = os.path.join(self.root, "include")
        self.testing = os.path.join(self.root, "testing", "include")
        self.roots = [self.include, self.testing]

    def headers(self):
        for base in self.roots:
            top = os.path.join(base, "gpucomm")
            for folder, folders, files in os.walk(top):
                folders.sort()
                for f in sorted(files):
                    if f.endswith((".hpp", ".cuh", ".inl", ".h")):
                        yield os.path.join(folder, f)

    def is_production(self, path):
        return path.startswith(self.include + os.sep)

    def name(self, path):
        """The path relative to include/gpucomm (production) or testing/include/gpucomm."""
        for base in self.roots:
            if path.startswith(base + os.sep):
                return os.path.relpath(path, os.path.join(base, "gpucomm")).replace(os.sep, "/")
        return os.path.relpath(path, self.root)

    def shown(self, path):
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def floor(self, path):
        if not self.is_production(path):
            return TESTING_FLOOR if path.startswith(self.testing + os.sep) else None
        name = self.name(path)
        for rx, floor, floor_name in FLOOR_RULES:
            if rx.match(name):
                return floor, floor_name
        return None

    def resolve(self, path, quote, target):
        candidates = []
        if quote == '"':
            candidates.append(os.path.join(os.path.dirname(path), target))
        candidates += [os.path.join(base, target) for base in self.roots]
        for c in candidates:
            if os.path.isfile(c):
                return os.path.normpath(c)
        return None

    def includes(self, path):
        """(line, quote, spelled target, resolved path or None) for each gpucomm include."""
        with open(path, encoding="utf-8") as f:
            text = strip_comments(f.read())
        for m in INCLUDE.finditer(text):
            quote, target = m.group(1), m.group(2).strip()
            if quote == "<" and not target.startswith("gpucomm/"):
                continue
            line = text.count("\n", 0, m.start()) + 1
            yield line, quote, target, self.resolve(path, quote, target)


def device_reaches_host(tree, edges):
    """A violation for each device header that reaches a host-only header, with the chain."""
    found = []
    for path in edges:
        name = tree.name(path)
        floor = tree.floor(path)
        if (not tree.is_production(path) or not name.endswith(".cuh") or floor is None
                or floor[0] >= FLOORS_TOP or matches(NOT_DEVICE_RULES, name) or matches(HOST_ONLY_RULES, name)):
            continue
        # Breadth first, so the chain reported is a shortest one.
        parent = {path: None}
        queue = [path]
        hit = None
        while queue and hit is None:
            here = queue.pop(0)
            for line, there in edges.get(here, []):
                if there in parent:
                    continue
                parent[there] = (here, line)
                if tree.is_production(there) and matches(HOST_ONLY_RULES, tree.name(there)):
                    hit = there
                    break
                queue.append(there)
        if hit is None:
            continue
        chain = [tree.name(hit)]
        step = hit
        while parent[step][0] != path:
            step = parent[step][0]
            chain.append(tree.name(step))
        found.append(f"{tree.shown(path)}:{parent[step][1]}: device header reaches host-only "
                     f"{' -> '.join(reversed(chain))}")
    return found


def transport_package(name):
    """'ibgda_post' for transport/ibgda_post/... and transport/ibgda_post.cuh; None elsewhere."""
    parts = name.split("/")
    if len(parts) < 2 or parts[0] != "transport":
        return None
    return parts[1].split(".")[0] if len(parts) == 2 else parts[1]


def check(root, known=KNOWN):
    """The violations under ROOT, one message each, the known ones (KNOWN) left out."""
    tree = Tree(root)
    found = []
    seen_known = set()
    edges = {}  # header -> [(line, included header)]
    for path in tree.headers():
        src_floor = tree.floor(path)
        where = tree.shown(path)
        if src_floor is None:
            found.append(f"{where}:1: has no floor: add its folder to FLOORS in {os.path.basename(__file__)}")
            continue
        for line, quote, target, dst in tree.includes(path):
            at = f"{where}:{line}"
            if dst is None:
                found.append(f"{at}: includes {quote}{target}, which does not exist")
                continue
            edges.setdefault(path, []).append((line, dst))
            key = (tree.name(path), tree.name(dst))
            messages = []
            if tree.is_production(path) and not tree.is_production(dst):
                messages.append(f"{at}: production header includes test support {tree.shown(dst)}")
            else:
                dst_floor = tree.floor(dst)
                if dst_floor is None:
                    messages.append(f"{at}: includes {tree.shown(dst)}, which has no floor")
                elif dst_floor[0] > src_floor[0]:
                    messages.append(f"{at}: floor {src_floor[0]} ({src_floor[1]}) includes {tree.shown(dst)}, "
                                    f"floor {dst_floor[0]} ({dst_floor[1]})")
            src_pkg, dst_pkg = transport_package(key[0]), transport_package(key[1])
            if (tree.is_production(dst) and src_pkg and dst_pkg and dst_pkg != src_pkg
                    and dst_pkg not in SHARED_TRANSPORT_PACKAGES):
                shared = " and ".join(f"transport/{p}/" for p in SHARED_TRANSPORT_PACKAGES)
                messages.append(f"{at}: transport package {src_pkg} includes {tree.shown(dst)} of package "
                                f"{dst_pkg} (only {shared} are shared)")
            if messages and key in known:
                seen_known.add(key)
                continue
            found += messages
    found += device_reaches_host(tree, edges)
    for key in sorted(set(known) - seen_known):
        found.append(f"include/gpucomm/{key[0]}: no longer includes {key[1]} against the floors: "
                     f"remove its entry from KNOWN in {os.path.basename(__file__)}")
    return found


# A made-up tree that keeps every rule: the self-test plants one violation at a time in it.
GOOD_TREE = {
    "include/gpucomm/config.hpp": "#pragma once\n",
    "include/gpucomm/comm.cuh": '#pragma once\n// #include "host/world.hpp" in a comment is no include\n'
                                '/* #include "host/world.hpp"\n #include "host/world.hpp" */\n#include "config.hpp"\n',
    "include/gpucomm/host/world.hpp": '#pragma once\n#include "../comm.cuh"\n',
    "include/gpucomm/transport/nic/atomics.cuh": '#pragma once\n#include "../../comm.cuh"\n',
    "include/gpucomm/transport/a/device.cuh": '#pragma once\n#include "../nic/atomics.cuh"\n',
    "include/gpucomm/transport/a.cuh": '#pragma once\n#include "a/device.cuh"\n#include "../host/world.hpp"\n',
    "testing/include/gpucomm/testing/model.hpp": "#pragma once\n#include <gpucomm/transport/a.cuh>\n",
}
PLANTS = [
    ({}, None),
    ({"include/gpucomm/config.hpp": '#pragma once\n#include "comm.cuh"\n'},
     "include/gpucomm/config.hpp:2: floor 0 (core) includes include/gpucomm/comm.cuh, floor 1 (comm)"),
    ({"include/gpucomm/host/world.hpp": "#pragma once\n\n#include <gpucomm/testing/model.hpp>\n"},
     "include/gpucomm/host/world.hpp:3: production header includes test support"),
    ({"include/gpucomm/transport/b/device.cuh": '#pragma once\n#include "../a/device.cuh"\n'},
     "include/gpucomm/transport/b/device.cuh:2: transport package b includes include/gpucomm/transport/a/device.cuh"),
    ({"include/gpucomm/config.hpp": '#pragma once\n#include "gone.hpp"\n'},
     'include/gpucomm/config.hpp:2: includes "gone.hpp, which does not exist'),
    ({"include/gpucomm/transport/a/device.cuh": '#pragma once\n#include "../nic/atomics.cuh"\n#include "state.hpp"\n',
      "include/gpucomm/transport/a/state.hpp": '#pragma once\n#include "../../host/world.hpp"\n'},
     "include/gpucomm/transport/a/device.cuh:3: device header reaches host-only transport/a/state.hpp -> "
     "host/world.hpp"),
    ({"include/gpucomm/elsewhere/x.hpp": "#pragma once\n"}, "include/gpucomm/elsewhere/x.hpp:1: has no floor"),
    ({"KNOWN": {("host/world.hpp", "config.hpp"): "a stale entry"}},
     "include/gpucomm/host/world.hpp: no longer includes config.hpp against the floors"),
    ({"KNOWN": {("config.hpp", "comm.cuh"): "an entry that covers the include"},
      "include/gpucomm/config.hpp": '#pragma once\n#include "comm.cuh"\n'}, None),
]


def report(root):
    """Prints the violations under ROOT; the exit status: 0 for none, 1 otherwise."""
    found = check(root)
    for message in found:
        print(message)
    if found:
        print(f"{len(found)} include(s) against the floors (see {os.path.basename(__file__)}'s FLOORS)")
    return 1 if found else 0


def self_test():
    """The checker passes GOOD_TREE and finds each violation that PLANTS puts in it, one at a time
    (a plant's "KNOWN" entry stands for KNOWN); the command line prints it and fails."""
    failures = 0
    for plant, expected in PLANTS:
        with tempfile.TemporaryDirectory() as root:
            files = {**GOOD_TREE, **plant}
            known = files.pop("KNOWN", {})
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            found = check(root, known)
            # The command line (with the real KNOWN, stale in this tree) prints it and fails.
            run = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", root],
                                 stdout=subprocess.PIPE, text=True)
        if expected is None:
            ok = not found
        else:
            ok = len(found) == 1 and found[0].startswith(expected)
            ok = ok and (known or run.returncode == 1 and found[0] in run.stdout.splitlines())
        if not ok:
            failures += 1
            print(f"self-test: expected {expected or 'no violation'}, found {found}; "
                  f"the command line: exit status {run.returncode}, printed {run.stdout!r}")
    print(f"self-test: {len(PLANTS) - failures} of {len(PLANTS)} cases as expected")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."),
                        help="the repository (folder holding include/ and testing/)")
    parser.add_argument("--self-test", action="store_true", help="run the checker on made-up trees")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    return report(args.root)


if __name__ == "__main__":
    sys.exit(main())
