#!/usr/bin/env python3
"""Checks that the documentation's links lead somewhere: every relative link in README.md and
docs/**/*.md names a file or folder of the repository and, with a #fragment, a heading of that page
(GitHub's anchors: lower case, punctuation dropped, spaces as hyphens, -1, -2 ... for repeats); and
every docs/NAME.md that a source comment names (include/, testing/, tests/, scripts/, benchmarks/,
examples/) exists.

  check_links.py [--root REPO]     exit 1 listing each broken link (CI: docs.links)
  check_links.py self-test         the checker finds what it should in made-up pages
"""
import os
import re
import sys
import tempfile

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
DOC_MENTION = re.compile(r"\bdocs/([A-Za-z0-9_./-]+\.md)")
SOURCE_DIRS = ("include", "testing", "tests", "scripts", "benchmarks", "examples", "cmake", "python", ".ci")
SOURCE_EXT = (".hpp", ".cuh", ".cu", ".cpp", ".h", ".py", ".sh", ".cmake", ".txt", ".inl")


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(text):
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def anchors(text):
    seen, out = {}, set()
    for _, line in lines_outside_code(text):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        k = seen.get(base, 0)
        out.add(base if k == 0 else f"{base}-{k}")
        seen[base] = k + 1
    return out


def pages(root):
    yield "README.md"
    for folder, _, files in os.walk(os.path.join(root, "docs")):
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.relpath(os.path.join(folder, f), root)


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def check_page(root, page, cache):
    """The broken links of one page, as 'page:line: target (why)'."""
    text = read(root, page)
    bad = []
    for n, line in lines_outside_code(text):
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        for m in list(LINK.finditer(line)) + list(IMAGE.finditer(line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if resolved.startswith(".."):
                bad.append(f"{page}:{n}: {target} (outside the repository)")
                continue
            full = os.path.join(root, resolved)
            if not os.path.exists(full):
                bad.append(f"{page}:{n}: {target} (no file {resolved})")
                continue
            if fragment and resolved.endswith(".md"):
                if resolved not in cache:
                    cache[resolved] = anchors(read(root, resolved))
                if fragment not in cache[resolved]:
                    bad.append(f"{page}:{n}: {target} (no heading with anchor #{fragment} in {resolved})")
    return bad


def check_sources(root):
    """Source comments that name a docs page that does not exist."""
    bad = []
    for top in SOURCE_DIRS:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d not in ("results", "__pycache__")]
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(folder, f)
                if os.path.abspath(path) == os.path.abspath(__file__):
                    continue  # this checker's own examples
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        for m in DOC_MENTION.finditer(line):
                            if not os.path.exists(os.path.join(root, "docs", m.group(1))):
                                bad.append(f"{os.path.relpath(path, root)}:{n}: docs/{m.group(1)} (no such page)")
    return bad


def check(root):
    cache, bad = {}, []
    for page in pages(root):
        bad += check_page(root, page, cache)
    bad += check_sources(root)
    for b in bad:
        print(b)
    if bad:
        print(f"\n{len(bad)} broken link(s): fix the link or the page it names.")
    return 1 if bad else 0


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        os.makedirs(os.path.join(tmp, "include"))
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write("# Top\n\n[ok](docs/a.md#the-api-apihpp) [ok2](docs/a.md#repeat-1) [self](#top)\n"
                    "```\n[not a link](nowhere.md)\n```\n`[code](nowhere.md)`\n"
                    "[bad file](docs/b.md) [bad anchor](docs/a.md#nope) [web](https://example.com)\n")
        with open(os.path.join(tmp, "docs", "a.md"), "w") as f:
            f.write("# The API (`api.hpp`)\n\n## Repeat\n\n## Repeat\n\n[up](../README.md#top)\n")
        with open(os.path.join(tmp, "include", "x.hpp"), "w") as f:
            f.write("// see docs/a.md and docs/missing.md\n")
        cache = {}
        found = check_page(tmp, "README.md", cache) + check_page(tmp, "docs/a.md", cache) + check_sources(tmp)
        want = ["README.md:8: docs/b.md (no file docs/b.md)",
                "README.md:8: docs/a.md#nope (no heading with anchor #nope in docs/a.md)",
                "include/x.hpp:1: docs/missing.md (no such page)"]
        ok = found == want
        print(("ok" if ok else "FAIL") + f": the checker found {found}" + ("" if ok else f", wanted {want}"))
        return 0 if ok else 1


def main(argv):
    if argv[:1] == ["self-test"]:
        return self_test()
    root = "."
    if argv[:1] == ["--root"] and len(argv) > 1:
        root = argv[1]
    elif argv:
        print(__doc__)
        return 2
    return check(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
