#!/usr/bin/env python3
"""error_codes_check: the API's error codes are the one list in server/api/error_codes.txt.

libvoltlock's table is generated from that list (client/c/CMakeLists.txt). This check holds the
rest to it, so that a code cannot be added, renamed or dropped in one place only:
- every code the server's sources write into an error (`ApiError{STATUS, "code"`,
  `bad_request("code"`, `{"code", "code"}`, `.code = "code"`) is on the list, with the list's
  HTTP status where the source names one, and every code on the list is written somewhere;
- every code the Python SDK maps to an exception class (voltlock.errors.ERROR_CLASSES) is on
  the list (the SDK need not map every code: an unmapped one raises voltlock.Error with it).

Exit status: 0 clean, 1 a mismatch (each printed as `path: [error-codes] detail`).
"""
import argparse
import ast
import pathlib
import re
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
LIST = "server/api/error_codes.txt"
SDK_ERRORS = "client/python/src/voltlock/errors.py"

WITH_STATUS = re.compile(r'ApiError\{\s*(\d+),\s*"([a-z_]+)"')
WITHOUT_STATUS = [re.compile(r'bad_request\(\s*"([a-z_]+)"'),
                  re.compile(r'\{\s*"code",\s*"([a-z_]+)"\s*\}'),
                  re.compile(r'\.code\s*=\s*"([a-z_]+)"')]


def read_list(path):
    """{code: (http status, libvoltlock status or None)} from the list."""
    codes = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        code, status, client_status = line.split()
        if code in codes:
            raise SystemExit(f"{LIST}:{number}: {code} is listed twice")
        codes[code] = (int(status), None if client_status == "-" else client_status)
    return codes


def server_codes(root):
    """{code: {(path, HTTP status or None)}} of what the server's sources write."""
    written = {}
    for path in sorted((root / "server").rglob("*")):
        if path.suffix not in {".cpp", ".h"}:
            continue
        text = path.read_text(errors="replace")
        relative = path.relative_to(root).as_posix()
        for status, code in WITH_STATUS.findall(text):
            written.setdefault(code, set()).add((relative, int(status)))
        for pattern in WITHOUT_STATUS:
            for code in pattern.findall(text):
                written.setdefault(code, set()).add((relative, None))
    return written


def sdk_codes(root):
    """The codes voltlock.errors.ERROR_CLASSES maps, read from its source (not imported: the
    check runs without the SDK installed)."""
    tree = ast.parse((root / SDK_ERRORS).read_text())
    code_of = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and \
                        [target.id for target in statement.targets
                         if isinstance(target, ast.Name)] == ["code"]:
                    code_of[node.name] = statement.value.value
    codes = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.DictComp):  # {cls.code: cls for cls in (A, B, ...)}
            codes |= {code_of[name.id] for name in node.generators[0].iter.elts}
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript) and \
                getattr(node.targets[0].value, "id", None) == "ERROR_CLASSES":
            codes.add(node.targets[0].slice.value)  # ERROR_CLASSES["code"] = ...
    if not codes:
        raise SystemExit(f"{SDK_ERRORS}: no ERROR_CLASSES mapping found")
    return codes


def check(root):
    listed = read_list(root / LIST)
    hits = []
    written = server_codes(root)
    for code, places in sorted(written.items()):
        if code not in listed:
            where = ", ".join(sorted({path for path, _ in places}))
            hits.append(f"{where}: [error-codes] {code} is not in {LIST}")
            continue
        for path, status in sorted(places, key=str):
            if status is not None and status != listed[code][0]:
                hits.append(f"{path}: [error-codes] {code} is answered with {status}; "
                            f"{LIST} says {listed[code][0]}")
    for code in sorted(set(listed) - set(written)):
        hits.append(f"{LIST}: [error-codes] {code} is listed but the server never writes it")
    sdk = sdk_codes(root)
    for code in sorted(sdk - set(listed)):
        hits.append(f"{SDK_ERRORS}: [error-codes] {code} is not in {LIST}")
    return listed, hits


def selftest(root):
    """On a copy of `root` whose server answers cas_failed instead of cas_mismatch, the check
    must name both the unlisted code and the listed one no longer written."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = pathlib.Path(scratch)
        shutil.copytree(root / "server", copy / "server")
        (copy / SDK_ERRORS).parent.mkdir(parents=True)
        shutil.copy(root / SDK_ERRORS, copy / SDK_ERRORS)
        translate = copy / "server/api/translate.cpp"
        translate.write_text(translate.read_text().replace('"cas_mismatch"', '"cas_failed"'))
        listed, hits = check(copy)
    expected = [f"server/api/translate.cpp: [error-codes] cas_failed is not in {LIST}",
                f"{LIST}: [error-codes] cas_mismatch is listed but the server never writes it"]
    missing = [line for line in expected if line not in hits]
    return listed, [f"selftest: missing `{line}` in {hits}" for line in missing]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=ROOT,
                        help="the tree to check (default: this repository)")
    parser.add_argument("--selftest", action="store_true",
                        help="check the check: on a copy with a drifted code it must fail")
    args = parser.parse_args()
    listed, hits = (selftest if args.selftest else check)(args.root)
    for hit in hits:
        print(hit)
    print(f"error_codes_check: {len(listed)} codes listed, {len(hits)} mismatches")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
