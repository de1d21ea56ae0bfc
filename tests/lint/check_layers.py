#!/usr/bin/env python3
"""Layering lint: checks every #include in kiln's sources against DESIGN.md section 2.

Usage:
  check_layers.py [REPO_ROOT]     check the tree (default: two folders up from this file)
  check_layers.py --self-test     build temporary trees with known violations and prove each
                                  one is reported (and that a clean tree passes)

Rules (the table below is the single place to change them):
  * engine layers include only their own layer or lower ones:
      base < dtype < uop < rewrite < symbolic < schedule < codegen (= codegen/render) < runtime
      < realize < tensor < jit < nn < onnx < llm < api
    engine/ never includes backends/, server/, clients/; the one exception is engine/api, which
    may include backends/* (it wires the compiled-in backends into the registry).
  * backends/<x> includes engine layers up to engine/runtime (incl. codegen/render), its own
    folder, and never another backend.
  * server/core, server/metrics, server/grpc, server/rest, server/main reach the engine only
    through engine/api; grpc/rest may include server/core and server/metrics; main may include
    every server folder.
  * clients/ never include engine/, backends/ or server/.
  * tools/ (local programs such as kiln-onnx, which `kiln` execs) may include engine/, backends/register_all.h and
    clients/cpp/npy.h; never server/.
  * <llvm/...> and <llvm-c/...> only in backends/cpu; <CL/...> only in backends/opencl;
    <cuda.h>, <cuda_runtime*.h>, <nvrtc.h> only in backends/cuda.
  * a folder under engine/ that is not in the table is an error (add it here and to DESIGN.md).
Folders that do not exist yet are skipped. Includes are rooted at the repo ("engine/uop/uop.h");
quoted includes that do not start with a known top folder (generated protobuf headers, ...) are
not checked. Exits 1 and prints file:line: message for every violation.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

ENGINE_LAYERS = [
    "base", "dtype", "uop", "rewrite", "symbolic", "schedule", "codegen", "runtime", "realize",
    "tensor", "jit", "nn", "onnx", "llm", "api",
]
ENGINE_RANK = {name: i for i, name in enumerate(ENGINE_LAYERS)}
BACKENDS_MAX_ENGINE = "runtime"  # backends may include engine layers up to and including this one
SERVER_INCLUDES = {  # server folder -> server folders it may include (besides itself)
    "core": set(),
    "metrics": {"core"},
    "grpc": {"core", "metrics"},
    "rest": {"core", "metrics"},
    "main": {"core", "metrics", "grpc", "rest"},
}
SYSTEM_HEADER_OWNERS = [  # (regex on the <...> include, the only folder allowed to use it)
    (re.compile(r"^llvm(-c)?/"), "backends/cpu"),
    (re.compile(r"^CL/"), "backends/opencl"),
    (re.compile(r"^(cuda\.h|cuda_runtime.*\.h|nvrtc\.h)$"), "backends/cuda"),
]
TOP_FOLDERS = ("engine", "backends", "server", "clients", "proto", "tools")
SCANNED = ("engine", "backends", "server", "clients", "tools")
EXTENSIONS = (".h", ".hh", ".hpp", ".cc", ".cpp", ".inc", ".def")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def engine_layer(parts: list[str]) -> str | None:
    """['engine', 'codegen', 'render', 'x.h'] -> 'codegen'. None if not a layer folder."""
    if len(parts) < 3 or parts[0] != "engine":
        return None
    return parts[1]


def check_include(src_parts: list[str], target: str) -> str | None:
    """Returns an error message if a file at src_parts may not include the quoted `target`."""
    tparts = target.split("/")
    if tparts[0] not in TOP_FOLDERS or len(tparts) < 2:
        return None
    top = src_parts[0]
    ttop = tparts[0]

    if top == "engine":
        layer = engine_layer(src_parts)
        if ttop == "engine":
            tlayer = tparts[1] if len(tparts) >= 3 else None
            if tlayer not in ENGINE_RANK:
                return f"includes {target}: unknown engine layer"
            if ENGINE_RANK[tlayer] > ENGINE_RANK[layer]:
                return (f"engine/{layer} includes {target}: engine/{tlayer} is a higher layer "
                        f"(order: {' < '.join(ENGINE_LAYERS)})")
            return None
        if ttop == "backends" and layer == "api":
            return None
        return f"engine/{layer} includes {target}: the engine never includes {ttop}/"

    if top == "backends":
        backend = src_parts[1]
        if ttop == "engine":
            tlayer = tparts[1] if len(tparts) >= 3 else None
            if tlayer not in ENGINE_RANK:
                return f"includes {target}: unknown engine layer"
            if ENGINE_RANK[tlayer] > ENGINE_RANK[BACKENDS_MAX_ENGINE]:
                return (f"backends/{backend} includes {target}: a backend may include engine "
                        f"layers up to engine/{BACKENDS_MAX_ENGINE} only")
            return None
        if ttop == "backends":
            if tparts[1] != backend:
                return (f"backends/{backend} includes {target}: a backend never includes "
                        f"another backend")
            return None
        return f"backends/{backend} includes {target}: backends never include {ttop}/"

    if top == "server":
        folder = src_parts[1]
        allowed = SERVER_INCLUDES.get(folder, set())
        if ttop == "engine":
            if len(tparts) >= 3 and tparts[1] == "api":
                return None
            return (f"server/{folder} includes {target}: the server reaches the engine only "
                    f"through engine/api")
        if ttop == "server":
            if tparts[1] == folder or tparts[1] in allowed:
                return None
            return f"server/{folder} includes {target}: server/{tparts[1]} is not below it"
        if ttop == "backends":
            return f"server/{folder} includes {target}: the server never includes backends/"
        return None  # proto/

    if top == "clients":
        if ttop in ("engine", "backends", "server", "tools"):
            return f"clients/ includes {target}: clients talk to kilnd over the wire only"
        return None

    if top == "tools":
        if ttop == "server":
            return f"tools/ includes {target}: tools never include server/"
        if ttop == "backends" and target != "backends/register_all.h":
            return f"tools/ includes {target}: tools reach the backends only through backends/register_all.h"
        if ttop == "clients" and target != "clients/cpp/npy.h":
            return f"tools/ includes {target}: of clients/, tools include only clients/cpp/npy.h"
        return None
    return None


def check_system_include(rel: str, target: str) -> str | None:
    for pattern, owner in SYSTEM_HEADER_OWNERS:
        if pattern.search(target) and not (rel == owner or rel.startswith(owner + "/")):
            return f"includes <{target}>: only {owner}/ may include it"
    return None


def check_tree(root: str) -> list[str]:
    errors: list[str] = []
    nfiles = 0
    for scanned in SCANNED:
        base = os.path.join(root, scanned)
        if not os.path.isdir(base):
            continue  # not written yet
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            dparts = rel_dir.split("/")
            if dparts[0] == "engine" and len(dparts) >= 2 and dparts[1] not in ENGINE_RANK:
                if len(dparts) == 2:
                    errors.append(f"{rel_dir}/: not a layer of DESIGN.md section 2 (add it to "
                                  f"tests/lint/check_layers.py and DESIGN.md first)")
                dirnames[:] = []
                continue
            for name in sorted(filenames):
                if not name.endswith(EXTENSIONS):
                    continue
                rel = f"{rel_dir}/{name}"
                parts = rel.split("/")
                if len(parts) < 3:
                    continue  # files directly under engine/ or backends/ (none expected)
                nfiles += 1
                try:
                    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                        lines = f.readlines()
                except OSError as e:
                    errors.append(f"{rel}: cannot read: {e}")
                    continue
                for lineno, line in enumerate(lines, 1):
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    kind, target = m.group(1), m.group(2).strip()
                    msg = (check_include(parts, target) if kind == '"'
                           else check_system_include(rel, target))
                    if msg:
                        errors.append(f"{rel}:{lineno}: {msg}")
    check_tree.files_checked = nfiles
    return errors


def self_test() -> int:
    # (path, content, expected substring of the error or None for "must pass")
    cases = [
        ("engine/uop/uop.h", '#include "engine/dtype/dtype.h"\n#include "engine/uop/ops.h"\n', None),
        ("engine/codegen/render/llvm.cc", '#include "engine/codegen/kernel.h"\n', None),
        ("engine/api/engine.cc", '#include "backends/cpu/register.h"\n', None),
        ("backends/cpu/device.cc", '#include <llvm/IR/Module.h>\n#include "engine/runtime/device.h"\n'
         '#include "engine/codegen/render/llvm.h"\n', None),
        ("server/grpc/service.cc", '#include "engine/api/engine.h"\n#include "server/core/core.h"\n'
         '#include "inference/grpc_service.grpc.pb.h"\n', None),
        ("engine/uop/bad.cc", '#include "engine/rewrite/pattern_matcher.h"\n', "higher layer"),
        ("engine/dtype/bad.h", '  #  include "engine/tensor/tensor.h"\n', "higher layer"),
        ("engine/runtime/bad.cc", '#include "backends/cpu/device.h"\n', "never includes backends/"),
        ("engine/base/bad.cc", '#include <llvm/Support/Error.h>\n', "only backends/cpu/"),
        ("backends/opencl/bad.cc", '#include "backends/cpu/device.h"\n', "another backend"),
        ("backends/cuda/bad.cc", '#include "engine/api/engine.h"\n', "up to engine/runtime"),
        ("backends/opencl/bad2.cc", '#include <llvm-c/Core.h>\n', "only backends/cpu/"),
        ("server/grpc/bad.cc", '#include "engine/uop/uop.h"\n', "only through engine/api"),
        ("server/core/bad.cc", '#include "engine/tensor/tensor.h"\n', "only through engine/api"),
        ("server/core/bad2.cc", '#include "server/grpc/service.h"\n', "not below it"),
        ("server/rest/bad.cc", '#include "server/grpc/service.h"\n', "not below it"),
        ("clients/cpp/bad.cc", '#include "engine/api/engine.h"\n', "over the wire"),
        ("engine/frobnicate/x.cc", '#include "engine/base/check.h"\n', "not a layer"),
    ]
    failures = 0
    # A tree of only the good files must pass.
    with tempfile.TemporaryDirectory() as root:
        for path, content, expect in cases:
            if expect is None:
                write(root, path, content)
        errs = check_tree(root)
        if errs:
            print("SELF-TEST FAIL: clean tree reported:\n  " + "\n  ".join(errs))
            failures += 1
    # Each bad file, alone next to the good ones, must be reported with the expected message.
    for path, content, expect in cases:
        if expect is None:
            continue
        with tempfile.TemporaryDirectory() as root:
            for p, c, e in cases:
                if e is None:
                    write(root, p, c)
            write(root, path, content)
            errs = check_tree(root)
            hit = [e for e in errs if e.startswith(path.rsplit("/", 1)[0]) and expect in e]
            if len(errs) != 1 or not hit:
                print(f"SELF-TEST FAIL: {path}: expected one error containing {expect!r}, got "
                      f"{errs}")
                failures += 1
            else:
                print(f"ok  {path}: {errs[0]}")
    # A missing folder is skipped, an empty repo passes.
    with tempfile.TemporaryDirectory() as root:
        if check_tree(root):
            print("SELF-TEST FAIL: empty tree reported errors")
            failures += 1
    ncases = sum(1 for c in cases if c[2] is not None)
    print(f"self-test: {ncases + 2 - failures} passed, {failures} failed")
    return 1 if failures else 0


def write(root: str, rel: str, content: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                      "..", "..")
    root = os.path.abspath(root)
    errors = check_tree(root)
    for e in errors:
        print(e)
    n = getattr(check_tree, "files_checked", 0)
    if errors:
        print(f"layering lint: {len(errors)} violation(s) in {n} files (rules: DESIGN.md section 2, "
              f"table in tests/lint/check_layers.py)")
        return 1
    print(f"layering lint: {n} files checked, no violations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
